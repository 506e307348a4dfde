#include "tools/common/help_formatter.h"

#include <sstream>

#include "tools/common/help_wrap.h"
#include "tools/common/version.h"

namespace rdma_interop::tools {
namespace {

// `text` wrapped to fit from `column` to kHelpWidth, continuation lines indented to `column`.
std::string hanging(std::string_view text, std::size_t column) {
  const std::size_t room = kHelpWidth > column + 20 ? kHelpWidth - column : 20;
  std::string out;
  for (char c : wrap_help(flowed(text), room)) {
    out += c;
    if (c == '\n') out += std::string(column, ' ');
  }
  return out;
}

}  // namespace

HelpFormatter::HelpFormatter(std::size_t column) {
  column_width(column);
}

std::string HelpFormatter::make_group(std::string group, bool is_positional,
                                      std::vector<const CLI::Option*> opts) const {
  std::string out = "\n" + (is_positional ? std::string("Positionals") : group) + ":\n";
  for (const CLI::Option* opt : opts) out += make_option(opt, is_positional);
  return out;
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  std::string left = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
  const std::string desc = make_option_desc(opt);
  if (desc.empty()) return left + "\n";
  if (left.size() + 1 > column_width_) {
    left += "\n" + std::string(column_width_, ' ');
  } else {
    left += std::string(column_width_ - left.size(), ' ');
  }
  return left + hanging(desc, column_width_) + "\n";
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  std::string out;
  if (opt->get_type_size() != 0) {
    const std::string type = option_type(opt);
    if (!type.empty()) out += " " + type;
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    if (opt->get_required() && !opt->get_positional()) out += " (required)";
  }
  return out;
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  const std::string text = sub->get_description();
  std::string left = "  " + sub->get_display_name(true);
  if (left.size() + 1 > column_width_) {
    left += "\n" + std::string(column_width_, ' ');
  } else {
    left += std::string(column_width_ - left.size(), ' ');
  }
  return left + hanging(text.substr(0, text.find('\n')), column_width_) + "\n";
}

std::string option_type(const CLI::Option* opt) {
  std::string type = opt->get_type_name();
  // Type names never hold ':'; a validator's tag follows one.
  return type.substr(0, type.find(':'));
}

std::string flowed(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n' || c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

void setup_tool_app(CLI::App& app, std::string_view tool, std::size_t column) {
  app.formatter(std::make_shared<HelpFormatter>(column));
  app.option_defaults()->group("Options");
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", version_line(tool), "Print the version and exit");
}

}  // namespace rdma_interop::tools
