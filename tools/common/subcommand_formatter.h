// subcommand_formatter.h - CLI11 help that lists each subcommand by its first line only.
//
// The tools' subcommand descriptions are whole manual pages; under the program's own
// --help only their first line belongs, the rest is the subcommand's --help.
#pragma once

#include <CLI/CLI.hpp>
#include <sstream>
#include <string>

namespace rdma_interop::tools {

class SubcommandFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    auto text = sub->get_description();
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), text.substr(0, text.find('\n')),
                             column_width_);
    return out.str();
  }
};

}  // namespace rdma_interop::tools
