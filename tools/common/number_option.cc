#include "tools/common/number_option.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace rdma_interop::tools {
namespace {

// "0.1", "86400", "10000000" as a reader would write them (never 300 digits).
std::string shown(double v) {
  if (std::fabs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string range_sentence(const std::string& kind, const std::string& unit, const std::string& min,
                           const std::string& max) {
  return kind + (unit.empty() ? "" : " of " + unit) + " from " + min + " to " + max;
}

}  // namespace

std::optional<double> parse_number(std::string_view text, double min, double max) {
  double v = 0;
  const char* end = text.data() + text.size();
  // from_chars takes no leading '+' or whitespace and stops at trailing junk: all refused.
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  // from_chars also reads "nan" and "inf": NaN fails both comparisons, so test it first.
  if (!std::isfinite(v) || v < min || v > max) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_integer(std::string_view text, std::int64_t min,
                                          std::int64_t max) {
  // CLI11 stores the value with strtoll(..., 0), which reads "010" as octal 8: a leading zero
  // is refused here, so the number validated is the number stored.
  const std::string_view digits = text.substr(!text.empty() && text[0] == '-' ? 1 : 0);
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
  if (text.empty() || ec != std::errc() || ptr != end || v < min || v > max) return std::nullopt;
  return v;
}

CLI::Validator number_in(double min, double max, std::string unit) {
  const std::string want = range_sentence("a number", unit, shown(min), shown(max));
  return CLI::Validator(
      [min, max, want](std::string& text) -> std::string {
        if (parse_number(text, min, max)) return {};
        return "'" + text + "' is not " + want;
      },
      // No description: CLI11 would append it to the option's type name in --help.
      "");
}

CLI::Validator integer_in(std::int64_t min, std::int64_t max, std::string unit) {
  const std::string want =
      range_sentence("a whole number", unit, std::to_string(min), std::to_string(max));
  return CLI::Validator(
      [min, max, want](std::string& text) -> std::string {
        if (parse_integer(text, min, max)) return {};
        return "'" + text + "' is not " + want;
      },
      "");
}

}  // namespace rdma_interop::tools
