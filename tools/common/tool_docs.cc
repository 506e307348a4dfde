#include "tools/common/tool_docs.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/version.h"

namespace rdma_interop::tools {
namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

bool blank(std::string_view line) {
  return line.find_first_not_of(' ') == std::string_view::npos;
}

// groff text: backslashes and hyphens escaped (so options read as typed), and a line that
// would start with a control character ('.' or '\'') made plain text.
std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string roff_quoted(std::string_view text) {
  std::string out = escape(text);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '"') out.replace(i++, 1, "\\(dq");
  }
  return "\"" + out + "\"";
}

// "EXIT STATUS", "TWO NODES", "CHECKS (all by default ...)": capitals at the left margin.
bool is_heading(std::string_view line) {
  if (line.empty() || line[0] == ' ') return false;
  const std::string_view head = line.substr(0, line.find(" ("));
  if (head.size() < 4) return false;
  for (char c : head) {
    if (!(std::isupper(static_cast<unsigned char>(c)) || c == ' ')) return false;
  }
  return true;
}

constexpr std::size_t kLongWord = 30;

std::size_t longest_word(std::string_view line) {
  std::size_t longest = 0, run = 0;
  for (char c : line) {
    run = c == ' ' ? 0 : run + 1;
    longest = std::max(longest, run);
  }
  return longest;
}

// Text as the tools write it (hand-wrapped, indented blocks) as groff: lines at the margin
// filled into paragraphs, indented lines kept as they are, headings as `macro` (.SH, .SS).
std::string render_text(std::string_view text, const char* macro) {
  std::string out;
  bool in_paragraph = false;
  bool no_fill = false;
  auto end_no_fill = [&] {
    if (no_fill) out += ".fi\n";
    no_fill = false;
  };
  for (std::string_view line : lines_of(text)) {
    if (blank(line)) {
      end_no_fill();
      in_paragraph = false;
      continue;
    }
    if (is_heading(line)) {
      end_no_fill();
      out += std::string(macro) + " " + roff_quoted(line) + "\n";
      in_paragraph = false;
      continue;
    }
    // Indented lines (tables, examples) and lines with a word too long to fill around (JSON
    // keys run together) are kept as written.
    const bool indented = line[0] == ' ' || longest_word(line) > kLongWord;
    if (!in_paragraph) out += ".PP\n";
    in_paragraph = true;
    if (indented && !no_fill) {
      out += ".nf\n";
      no_fill = true;
    } else if (!indented) {
      end_no_fill();
    }
    out += escape(line) + "\n";
  }
  end_no_fill();
  return out;
}

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); });
}

std::vector<const CLI::Option*> options_of(const CLI::App& app) {
  // Options in no group are hidden (CLI11's convention).
  return app.get_options([](const CLI::Option* o) { return !o->get_group().empty(); });
}

std::string option_entry(const CLI::Option* o) {
  std::string names;
  if (o->get_positional()) {
    names = "\\fI" + escape(option_type(o).empty() ? o->get_name() : option_type(o)) + "\\fR";
  } else {
    for (const auto& s : o->get_snames()) {
      names += (names.empty() ? "" : ", ") + std::string("\\fB\\-") + escape(s) + "\\fR";
    }
    for (const auto& l : o->get_lnames()) {
      names += (names.empty() ? "" : ", ") + std::string("\\fB\\-\\-") + escape(l) + "\\fR";
    }
    if (o->get_type_size() != 0 && !option_type(o).empty()) {
      names += " \\fI" + escape(option_type(o)) + "\\fR";
    }
  }
  return ".TP\n" + names + "\n" + escape(flowed(o->get_description())) + "\n";
}

std::string options_section(const CLI::App& app, const char* macro) {
  std::string out;
  const auto options = options_of(app);
  if (options.empty()) return out;
  out += std::string(macro) + " OPTIONS\n";
  for (const auto* o : options) {
    if (o->get_positional()) out += option_entry(o);
  }
  for (const auto* o : options) {
    if (!o->get_positional()) out += option_entry(o);
  }
  return out;
}

std::string synopsis_line(const CLI::App& app, const std::string& words) {
  std::string line = ".B " + roff_quoted(words) + "\n[OPTIONS]";
  for (const auto* o : options_of(app)) {
    if (!o->get_positional()) continue;
    const std::string type = option_type(o).empty() ? o->get_name() : option_type(o);
    line += o->get_required() ? " \\fI" + escape(type) + "\\fR" : " [\\fI" + escape(type) + "\\fR]";
  }
  return line + "\n";
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "word", "--long" and "-s" of every option of `app`, for compgen -W.
std::string option_words(const CLI::App& app) {
  std::string words;
  for (const auto* o : options_of(app)) {
    if (o->get_positional()) continue;
    for (const auto& s : o->get_snames()) words += " -" + s;
    for (const auto& l : o->get_lnames()) words += " --" + l;
  }
  return words.empty() ? words : words.substr(1);
}

// The values an option's type names: "drop|reject" -> "drop reject"; empty when it names none.
std::string choices(const std::string& type) {
  if (type.find('|') == std::string::npos) return {};
  std::string words;
  for (char c : type) {
    if (c == '|') {
      words += ' ';
    } else if (std::islower(static_cast<unsigned char>(c)) ||
               std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      words += c;
    } else {
      return {};  // NAME|PATH: placeholders, not values
    }
  }
  return words;
}

// The case arms completing the value after each option of `app` (`cmd`: its subcommand).
std::string value_arms(const CLI::App& app, const std::string& cmd) {
  std::string out;
  for (const auto* o : options_of(app)) {
    if (o->get_positional() || o->get_type_size() == 0) continue;
    std::string patterns;
    for (const auto& s : o->get_snames())
      patterns += (patterns.empty() ? "" : "|") + ("\"" + cmd + " -" + s + "\"");
    for (const auto& l : o->get_lnames())
      patterns += (patterns.empty() ? "" : "|") + ("\"" + cmd + " --" + l + "\"");
    const std::string type = option_type(o);
    std::string reply;
    if (const auto words = choices(type); !words.empty()) {
      reply = "COMPREPLY=($(compgen -W \"" + words + "\" -- \"$cur\"))";
    } else if (type.find("DIR") != std::string::npos) {
      reply = "COMPREPLY=($(compgen -d -- \"$cur\"))";
    } else if (type.find("PATH") != std::string::npos || type.find("FILE") != std::string::npos) {
      reply = "COMPREPLY=($(compgen -f -- \"$cur\"))";
    } else if (o->get_expected_min() == 0) {
      continue;  // an optional value (--watch [SECONDS]): options may follow
    } else {
      reply = "COMPREPLY=()";
    }
    out += "    " + patterns + ") " + reply + "; return ;;\n";
  }
  return out;
}

}  // namespace

std::string man_page(const CLI::App& app, std::string_view version) {
  const std::string tool = app.get_name();
  const std::string description = app.get_description();
  const auto first_end = description.find('\n');
  const std::string first = description.substr(0, first_end);
  const std::string rest =
      first_end == std::string::npos ? std::string() : description.substr(first_end + 1);
  const auto dash = first.find(" - ");
  const std::string summary = dash == std::string::npos ? first : first.substr(dash + 3);

  std::string out;
  out += ".\\\" " + tool + "(1), written by '" + tool +
         " --help-man' from its option definitions: do not edit.\n";
  out += ".TH " + roff_quoted(upper(tool)) + " 1 \"\" " +
         roff_quoted("rdma-interop " + std::string(version)) + " \"rdma-interop\"\n";
  // Left-aligned and never hyphenated: an option split across lines could not be typed as
  // it reads.
  out += ".ad l\n.nh\n";
  out += ".SH NAME\n" + escape(tool) + " \\- " + escape(summary) + "\n";
  out += ".SH SYNOPSIS\n";
  const auto subcommands = subcommands_of(app);
  if (subcommands.empty()) {
    out += synopsis_line(app, tool);
  } else {
    for (std::size_t i = 0; i < subcommands.size(); ++i) {
      if (i > 0) out += ".br\n";
      out += synopsis_line(*subcommands[i], tool + " " + subcommands[i]->get_name());
    }
  }
  out += ".SH DESCRIPTION\n" + render_text(rest, ".SH");
  out += options_section(app, ".SH");
  for (const auto* sub : subcommands) {
    const std::string sub_description = sub->get_description();
    out += ".SH " + roff_quoted(upper(tool + " " + sub->get_name())) + "\n";
    out += render_text(sub_description, ".SS");
    out += options_section(*sub, ".SS");
    out += render_text(sub->get_footer(), ".SS");
  }
  out += render_text(app.get_footer(), ".SH");
  out += ".SH \"SEE ALSO\"\n";
  bool any = false;
  for (const char* other :
       {"rdma-probe", "rdma-storm", "rdma-mesh", "backlog-stat", "verbs-check"}) {
    if (tool == other) continue;
    out += std::string(any ? ",\n" : "") + ".BR " + escape(other) + " (1)";
    any = true;
  }
  out += "\n";
  return out;
}

std::string bash_completion(const CLI::App& app) {
  const std::string tool = app.get_name();
  std::string function = "_rdma_interop_" + tool;
  for (auto& c : function) {
    if (c == '-') c = '_';
  }
  const auto subcommands = subcommands_of(app);
  std::string names;
  for (const auto* s : subcommands) names += (names.empty() ? "" : "|") + s->get_name();

  std::string out;
  out += "# bash completion for " + tool + ", written by '" + tool +
         " --completion bash' from its option definitions: do not edit.\n";
  out += function + "() {\n";
  out += "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i\n";
  if (!subcommands.empty()) {
    out += "  for ((i = 1; i < COMP_CWORD; i++)); do\n";
    out += "    case ${COMP_WORDS[i]} in\n";
    out += "      " + names + ") cmd=${COMP_WORDS[i]}; break ;;\n";
    out += "    esac\n";
    out += "  done\n";
  }
  out += "  case \"$cmd $prev\" in\n";
  out += value_arms(app, "");
  for (const auto* s : subcommands) out += value_arms(*s, s->get_name());
  out += "  esac\n";
  out += "  case $cmd in\n";
  for (const auto* s : subcommands) {
    out += "    " + s->get_name() + ") COMPREPLY=($(compgen -W \"" + option_words(*s) +
           "\" -- \"$cur\")) ;;\n";
  }
  std::string top = option_words(app);
  for (const auto* s : subcommands) top += " " + s->get_name();
  out += "    *) COMPREPLY=($(compgen -W \"" + top + "\" -- \"$cur\")) ;;\n";
  out += "  esac\n";
  out += "}\n";
  out += "complete -F " + function + " " + tool + "\n";
  return out;
}

std::optional<int> answer_documentation_request(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const std::string_view first = argv[1];
  if (first == "--help-man" && argc == 2) {
    std::fputs(man_page(app, project_version()).c_str(), stdout);
    return kExitOk;
  }
  if (first == "--completion") {
    if (argc == 3 && std::string_view(argv[2]) == "bash") {
      std::fputs(bash_completion(app).c_str(), stdout);
      return kExitOk;
    }
    std::fprintf(stderr, "%s: --completion: only 'bash' is written\n", app.get_name().c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace rdma_interop::tools
