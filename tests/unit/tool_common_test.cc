// The conventions every tool's command line shares (tools/common): durations take a unit and
// a bare number keeps the option's own, bounds read as durations, validators add no type tag
// to --help, and the man page and completion are written from the option definitions.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/tool_docs.h"

namespace rdma_interop::tools {
namespace {

using namespace std::chrono_literals;

TEST(Duration, TakesEachUnitAndABareNumberInTheOptionsUnit) {
  EXPECT_DOUBLE_EQ(*parse_duration("500ms", TimeUnit::kSeconds), 0.5);
  EXPECT_DOUBLE_EQ(*parse_duration("5s", TimeUnit::kMilliseconds), 5.0);
  EXPECT_DOUBLE_EQ(*parse_duration("2m", TimeUnit::kSeconds), 120.0);
  EXPECT_DOUBLE_EQ(*parse_duration("1h", TimeUnit::kSeconds), 3600.0);
  EXPECT_DOUBLE_EQ(*parse_duration("250us", TimeUnit::kSeconds), 250e-6);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5", TimeUnit::kSeconds), 1.5);
  EXPECT_DOUBLE_EQ(*parse_duration("20", TimeUnit::kMilliseconds), 0.02);
  EXPECT_DOUBLE_EQ(*parse_duration("7", TimeUnit::kMicroseconds), 7e-6);
}

TEST(Duration, RefusesWhatIsNotWhollyAFiniteNonNegativeDuration) {
  for (const char* bad : {"", "nan", "inf", "-1s", "+5", " 5", "5 s", "5x", "5sec", "0x10", "1e400",
                          "ms", "5mss", "infs"}) {
    EXPECT_FALSE(parse_duration(bad, TimeUnit::kSeconds)) << bad;
  }
}

TEST(Duration, IsWrittenInTheLargestUnitThatHoldsItWhole) {
  EXPECT_EQ(duration_text(0ms), "0");
  EXPECT_EQ(duration_text(250us), "250us");
  EXPECT_EQ(duration_text(1500ms), "1500ms");
  EXPECT_EQ(duration_text(120s), "2m");
  EXPECT_EQ(duration_text(24h), "24h");
}

// Runs `app` on `args` and returns the value CLI11 stored, or the error text.
template <class T>
std::string parsed(T& value, CLI::Validator v, const std::string& arg) {
  CLI::App app("test");
  app.add_option("--dur", value)->transform(v);  // a duration rewrites the text
  try {
    app.parse(std::vector<std::string>{arg, "--dur"});  // reversed: CLI11 pops from the back
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "ok";
}

TEST(Duration, ValidatorStoresTheOptionsOwnUnit) {
  double seconds = 0;
  EXPECT_EQ(parsed(seconds, duration_in(1ms, 1h, TimeUnit::kSeconds), "250ms"), "ok");
  EXPECT_DOUBLE_EQ(seconds, 0.25);
  EXPECT_EQ(parsed(seconds, duration_in(1ms, 1h, TimeUnit::kSeconds), "3"), "ok");
  EXPECT_DOUBLE_EQ(seconds, 3.0);
  long long ms = 0;
  EXPECT_EQ(parsed(ms, whole_duration_in(0ms, 1h, TimeUnit::kMilliseconds), "2s"), "ok");
  EXPECT_EQ(ms, 2000);
  EXPECT_EQ(parsed(ms, whole_duration_in(0ms, 1h, TimeUnit::kMilliseconds), "40"), "ok");
  EXPECT_EQ(ms, 40);
}

TEST(Duration, ErrorsNameTheBoundsAsDurations) {
  long long ms = 0;
  const auto error = parsed(ms, whole_duration_in(0ms, 1h, TimeUnit::kMilliseconds), "2h");
  EXPECT_NE(error.find("'2h' is not a duration from 0 to 1h"), std::string::npos) << error;
  EXPECT_NE(error.find("a bare number is ms"), std::string::npos) << error;
  const auto fraction = parsed(ms, whole_duration_in(0ms, 1h, TimeUnit::kMilliseconds), "1.5ms");
  EXPECT_NE(fraction.find("whole milliseconds"), std::string::npos) << fraction;
}

TEST(NumberOption, BoundsAreReadableNumbers) {
  double v = 0;
  const auto error = parsed(v, number_in(0, 1e7, "messages per second"), "2e7");
  EXPECT_NE(error.find("from 0 to 10000000"), std::string::npos) << error;
}

TEST(HelpFormatter, ShowsTheTypeNameWithoutValidatorTags) {
  CLI::App app("demo - a test tool", "demo");
  setup_tool_app(app, "demo", 30);
  int n = 0;
  std::string mode;
  app.add_option("--count", n, "How many")->type_name("N")->check(CLI::PositiveNumber);
  app.add_option("--mode", mode, "Which")->type_name("a|b")->check(CLI::IsMember({"a", "b"}));
  const std::string help = app.help();
  EXPECT_NE(help.find("--count N "), std::string::npos) << help;
  EXPECT_EQ(help.find("POSITIVE"), std::string::npos) << help;
  EXPECT_EQ(help.find("{a,b}"), std::string::npos) << help;
}

TEST(HelpFormatter, WrapsEveryLineWithinTheWidth) {
  CLI::App app("demo - a test tool", "demo");
  setup_tool_app(app, "demo", 30);
  int n = 0;
  app.add_option("--count", n,
                 std::string(40, 'x') + " " + std::string(300, ' ') +
                     "many words that go on and on past any terminal's width and "
                     "further still, well beyond a hundred columns of text");
  for (const auto& line : CLI::detail::split(app.help(), '\n')) {
    EXPECT_LE(line.size(), kHelpWidth) << line;
  }
}

TEST(ExitStatus, EachCodeIsNamedTheSameInEverySection) {
  const auto section = exit_status_section({{kExitOk, "fine"}, {kExitUnreachable, "nobody"}});
  EXPECT_NE(section.find("EXIT STATUS\n  0  ok: fine\n  3  unreachable: nobody\n"),
            std::string::npos)
      << section;
}

TEST(ToolDocs, ManPageAndCompletionComeFromTheOptions) {
  CLI::App app("demo - a test tool\n\nLONGER PART\nSome text.\n", "demo");
  setup_tool_app(app, "demo", 30);
  std::string mode;
  app.add_option("--mode", mode, "Which mode")->type_name("drop|reject");
  const auto page = man_page(app, "1.0");
  EXPECT_NE(page.find(".TH \"DEMO\" 1"), std::string::npos) << page;
  EXPECT_NE(page.find("demo \\- a test tool"), std::string::npos) << page;
  EXPECT_NE(page.find(".SH \"LONGER PART\""), std::string::npos) << page;
  EXPECT_NE(page.find("\\fB\\-\\-mode\\fR \\fIdrop|reject\\fR"), std::string::npos) << page;
  const auto completion = bash_completion(app);
  EXPECT_NE(completion.find("\" --mode\") COMPREPLY=($(compgen -W \"drop reject\""),
            std::string::npos)
      << completion;
  EXPECT_NE(completion.find("complete -F _rdma_interop_demo demo"), std::string::npos);
}

}  // namespace
}  // namespace rdma_interop::tools
