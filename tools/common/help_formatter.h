// help_formatter.h - every tool's --help laid out the same way (CLI11's Formatter, adjusted):
//
//   - one "Options:" heading (and "Positionals:", "Subcommands:"), whatever the groups say;
//   - an option's type as the tool names it ("N", "DURATION", "drop|reject"), without the
//     validator tags CLI11 appends ("N:POSITIVE", "drop|reject:{drop,reject}");
//   - descriptions refilled and wrapped so that no line is wider than kHelpWidth, the tools'
//     hand-wrapped descriptions and footers staying within it too (tests/cli checks);
//   - a subcommand listed by the first line of its description only (its own --help has the
//     rest: the descriptions are whole manual pages).
//
// setup_tool_app() installs it, with --version, on a tool's App before any subcommand is
// added (subcommands copy their parent's formatter when they are created).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rdma_interop::tools {

inline constexpr std::size_t kHelpWidth = 100;

class HelpFormatter : public CLI::Formatter {
 public:
  // `column`: where the descriptions start.
  explicit HelpFormatter(std::size_t column);

  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
};

// An option's type name as the tool gave it: what CLI11's get_type_name() says, without the
// ":TAG" its validators may add.
std::string option_type(const CLI::Option* opt);

// A description as one paragraph: its line breaks and runs of spaces made single spaces.
std::string flowed(std::string_view text);

// The formatter (descriptions from `column`), "--version" answering version_line(tool), and
// every option in the one "Options" group.
void setup_tool_app(CLI::App& app, std::string_view tool, std::size_t column);

}  // namespace rdma_interop::tools
