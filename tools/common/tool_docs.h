// tool_docs.h - a tool's man page and bash completion, written from its CLI11 App: the same
// option definitions, descriptions and footers --help prints, so neither can drift from the
// tool. The build runs each tool with the hidden arguments
//
//   TOOL --help-man            the man page (groff, section 1) on stdout
//   TOOL --completion bash     the bash completion script on stdout
//
// (tools/CMakeLists.txt, rdma_interop_tool_docs) and installs what they print to
// share/man/man1/TOOL.1 and share/bash-completion/completions/TOOL.
//
// The page: NAME and SYNOPSIS, then the description, whose lines in capitals at the left
// margin ("TWO NODES", "EXIT STATUS") become sections; OPTIONS; each subcommand as a section
// of its own with its options; the footers' sections. Text at the left margin is filled,
// indented text (tables, examples, JSON) is kept as it is.
//
// The completion: options by subcommand; after an option, its values where the type names
// them ("drop|reject": lower-case words joined by '|'), directories for a DIR, file names for
// a FILE or PATH, nothing for other values.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace rdma_interop::tools {

std::string man_page(const CLI::App& app, std::string_view version);
std::string bash_completion(const CLI::App& app);

// When argv is `TOOL --help-man` or `TOOL --completion SHELL`: prints the page or script (or,
// for a shell other than bash, an error) and returns the exit status; otherwise nullopt and
// the tool parses its command line as usual. Call it once the App is complete.
std::optional<int> answer_documentation_request(const CLI::App& app, int argc, char** argv);

}  // namespace rdma_interop::tools
