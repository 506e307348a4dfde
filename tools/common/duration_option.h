// duration_option.h - the one parser of durations on every tool's command line, beside
// number_option.h: "500ms", "5s", "2m", "1h", "250us", or a bare number in the option's own
// unit, the one it always had (seconds for --timeout, milliseconds for --hold), so existing
// command lines keep their meaning:
//
//   app.add_option("--timeout", timeout_s)->transform(duration_in(1ms, 1h, TimeUnit::kSeconds));
//   app.add_option("--hold", hold_ms)
//       ->transform(whole_duration_in(0ms, 1h, TimeUnit::kMilliseconds));
//
// The validator rewrites the text as a number of the bare unit, so the option's variable (a
// double of seconds, an integer of milliseconds) is filled as before: give it to transform(),
// not check() (CLI11 runs a check() on a copy of the text). Anything else is refused with one
// sentence whose bounds read as durations:
//
//   --hold: '5x' is not a duration from 0 to 1h (e.g. 500ms, 5s, 2m; a bare number is ms)
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rdma_interop::tools {

enum class TimeUnit { kMicroseconds, kMilliseconds, kSeconds };

// "us", "ms", "s".
std::string_view unit_suffix(TimeUnit unit);

// A finite, non-negative duration written as a decimal number and an optional suffix (us,
// ms, s, m, h; none: `bare`), in seconds; nullopt for anything else (a sign, spaces, NaN,
// another suffix).
std::optional<double> parse_duration(std::string_view text, TimeUnit bare);

// "0", "250us", "500ms", "1500ms", "2m", "24h": in the largest unit that holds it whole.
std::string duration_text(std::chrono::nanoseconds d);

// A duration in [min, max], stored as a number (possibly fractional) of `bare` units.
CLI::Validator duration_in(std::chrono::nanoseconds min, std::chrono::nanoseconds max,
                           TimeUnit bare);
// The same for an integer variable: the duration must be a whole number of `bare` units.
CLI::Validator whole_duration_in(std::chrono::nanoseconds min, std::chrono::nanoseconds max,
                                 TimeUnit bare);

}  // namespace rdma_interop::tools
