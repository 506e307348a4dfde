// rdma-probe personalities (and serve --list-personalities): what --personality can name.
#include <cstdio>
#include <iostream>

#include "core/personality/file_loader.h"
#include "core/personality/json_codec.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/json_report.h"

namespace rdma_interop::probe {

Expected<cm::Personality, std::string> resolve_personality(const PersonalityChoice& choice) {
  for (const auto& d : choice.extra_dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) {
      return unexpected("--personality-dir " + d + ": no such directory");
    }
  }
  return personality::find_personality(choice.name_or_path,
                                       personality::personality_search_dirs(choice.extra_dirs));
}

void print_usage_error(const char* command, const std::string& text) {
  std::fprintf(stderr, "rdma-probe %s: error: %s\n", command, text.c_str());
}

namespace {

// "NAME  description" with the description wrapped under itself.
void print_table(const std::vector<cm::Personality>& all) {
  std::size_t width = 4;
  for (const auto& p : all) width = std::max(width, p.name.size());
  constexpr std::size_t kLine = 100;
  std::string indent(width + 2, ' ');
  for (const auto& p : all) {
    std::string line = p.name + std::string(width + 2 - p.name.size(), ' ');
    std::string word;
    auto flush_word = [&] {
      if (word.empty()) return;
      if (line.size() + 1 + word.size() > kLine && line.size() > indent.size()) {
        std::cout << line << '\n';
        line = indent;
      } else if (line.size() > indent.size()) {
        line += ' ';
      }
      line += word;
      word.clear();
    };
    for (char ch : p.description) {
      if (ch == ' ' || ch == '\n') {
        flush_word();
      } else {
        word += ch;
      }
    }
    flush_word();
    std::cout << line << '\n';
    if (!p.source_file.empty() || !p.source_version.empty()) {
      std::string source = "read from: " + p.source_file;
      if (!p.source_version.empty())
        source += (p.source_file.empty() ? "" : "; ") + p.source_version;
      // Wrapped under the description like it.
      std::string out = indent;
      std::string word;
      auto put = [&] {
        if (word.empty()) return;
        if (out.size() + 1 + word.size() > kLine && out.size() > indent.size()) {
          std::cout << out << '\n';
          out = indent + "  ";
        } else if (out.size() > indent.size()) {
          out += ' ';
        }
        out += word;
        word.clear();
      };
      for (char ch : source) {
        if (ch == ' ') {
          put();
        } else {
          word += ch;
        }
      }
      put();
      std::cout << out << '\n';
    }
    std::cout << indent << "(" << p.source_path << ")\n";
  }
  std::cout.flush();
}

}  // namespace

int run_list_personalities(const ListOptions& options) {
  for (const auto& d : options.extra_dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) {
      print_usage_error("personalities", "--personality-dir " + d + ": no such directory");
      return kExitUsage;
    }
  }
  auto dirs = personality::personality_search_dirs(options.extra_dirs);
  std::vector<std::string> problems;
  auto all = personality::list_personalities(dirs, &problems);
  for (const auto& p : problems) std::fprintf(stderr, "rdma-probe: skipped %s\n", p.c_str());
  if (options.json) {
    auto list = nlohmann::ordered_json::array();
    for (const auto& p : all) {
      auto j = personality::to_json(p);
      j["source_path"] = p.source_path;
      list.push_back(std::move(j));
    }
    print_json_line(list);
    return kExitOk;
  }
  if (all.empty()) {
    std::fprintf(stderr, "rdma-probe: no personalities found (searched: %zu directories)\n",
                 dirs.size());
    return kExitOk;
  }
  print_table(all);
  return kExitOk;
}

}  // namespace rdma_interop::probe
