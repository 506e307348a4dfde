// number_option.h - the one parser of numbers, durations and counts on every tool's command
// line, as CLI11 validators.
//
// CLI11's Range and PositiveNumber compare with < and >, which NaN passes: "--watch nan"
// spun at 50,000 refreshes a second, "--timeout nan" printed "within -9223372036854775808
// ms", "--setup-timeout nan" never left setup (issue 17). These read the text themselves:
// a number written in full (no trailing junk), finite, and inside the range, or one sentence
// that says what was wanted:
//
//   --watch: 'nan' is not a number of seconds from 0.1 to 86400
//
//   app.add_option("--watch", seconds)->check(number_in(0.1, 86400, "seconds"));
//   app.add_option("--port", port)->check(integer_in(1, 65535));
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rdma_interop::tools {

// A finite decimal number ("0.5", "2", "1e3") in [min, max]; `unit` names what it counts
// ("seconds", "messages per second") in the message.
CLI::Validator number_in(double min, double max, std::string unit = {});

// A whole number ("0", "65535") in [min, max]: no fraction, no exponent, no leading zero
// (CLI11 would store "010" as octal 8).
CLI::Validator integer_in(std::int64_t min, std::int64_t max, std::string unit = {});

// The parsers behind them, for text read elsewhere (files, environment): the value, or
// nullopt for anything not wholly a finite number (resp. a whole number) in range.
std::optional<double> parse_number(std::string_view text, double min, double max);
std::optional<std::int64_t> parse_integer(std::string_view text, std::int64_t min,
                                          std::int64_t max);

}  // namespace rdma_interop::tools
