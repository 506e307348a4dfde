#include "tools/common/duration_option.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace rdma_interop::tools {
namespace {

double seconds_per(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kMicroseconds:
      return 1e-6;
    case TimeUnit::kMilliseconds:
      return 1e-3;
    case TimeUnit::kSeconds:
      return 1.0;
  }
  return 1.0;
}

std::string_view unit_word(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kMicroseconds:
      return "microseconds";
    case TimeUnit::kMilliseconds:
      return "milliseconds";
    case TimeUnit::kSeconds:
      return "seconds";
  }
  return "seconds";
}

std::string number_text(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

CLI::Validator make(std::chrono::nanoseconds min, std::chrono::nanoseconds max, TimeUnit bare,
                    bool whole) {
  const double lo = std::chrono::duration<double>(min).count();
  const double hi = std::chrono::duration<double>(max).count();
  const std::string want = "a duration from " + duration_text(min) + " to " + duration_text(max) +
                           (whole ? " in whole " + std::string(unit_word(bare)) : "") +
                           " (e.g. 500ms, 5s, 2m; a bare number is " +
                           std::string(unit_suffix(bare)) + ")";
  // No description: CLI11 would append it to the option's type name in --help.
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const auto seconds = parse_duration(text, bare);
        // A little slack for the decimal arithmetic: "0.1s" is 100ms, not 100.00000000000001.
        const double slack = 1e-12 * std::max(1.0, hi);
        if (!seconds || *seconds < lo - slack || *seconds > hi + slack) {
          return "'" + text + "' is not " + want;
        }
        const double units = *seconds / seconds_per(bare);
        if (whole) {
          const double rounded = std::round(units);
          if (std::fabs(units - rounded) > 1e-6 * std::max(1.0, std::fabs(rounded))) {
            return "'" + text + "' is not " + want;
          }
          text = std::to_string(static_cast<long long>(rounded));
        } else {
          text = number_text(units);
        }
        return {};
      },
      "");
}

}  // namespace

std::string_view unit_suffix(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kMicroseconds:
      return "us";
    case TimeUnit::kMilliseconds:
      return "ms";
    case TimeUnit::kSeconds:
      return "s";
  }
  return "s";
}

std::optional<double> parse_duration(std::string_view text, TimeUnit bare) {
  double v = 0;
  const char* end = text.data() + text.size();
  // from_chars takes no '+' and no whitespace, and stops where the suffix begins.
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (text.empty() || ec != std::errc()) return std::nullopt;
  const std::string_view suffix(ptr, static_cast<std::size_t>(end - ptr));
  double unit = 0;
  if (suffix.empty()) {
    unit = seconds_per(bare);
  } else if (suffix == "us") {
    unit = 1e-6;
  } else if (suffix == "ms") {
    unit = 1e-3;
  } else if (suffix == "s") {
    unit = 1;
  } else if (suffix == "m") {
    unit = 60;
  } else if (suffix == "h") {
    unit = 3600;
  } else {
    return std::nullopt;
  }
  // NaN fails every comparison: test finiteness first.
  const double seconds = v * unit;
  if (!std::isfinite(seconds) || seconds < 0) return std::nullopt;
  return seconds;
}

std::string duration_text(std::chrono::nanoseconds d) {
  using namespace std::chrono;
  const auto n = d.count();
  if (n == 0) return "0";
  struct Unit {
    std::int64_t ns;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {
      {3'600'000'000'000, "h"}, {60'000'000'000, "m"}, {1'000'000'000, "s"},
      {1'000'000, "ms"},        {1'000, "us"},         {1, "ns"}};
  for (const auto& u : kUnits) {
    if (n % u.ns == 0) return std::to_string(n / u.ns) + u.suffix;
  }
  return std::to_string(n) + "ns";
}

CLI::Validator duration_in(std::chrono::nanoseconds min, std::chrono::nanoseconds max,
                           TimeUnit bare) {
  return make(min, max, bare, false);
}

CLI::Validator whole_duration_in(std::chrono::nanoseconds min, std::chrono::nanoseconds max,
                                 TimeUnit bare) {
  return make(min, max, bare, true);
}

}  // namespace rdma_interop::tools
