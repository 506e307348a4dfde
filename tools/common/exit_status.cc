#include "tools/common/exit_status.h"

#include "tools/common/help_wrap.h"

namespace rdma_interop::tools {

std::string_view exit_status_name(int status) {
  switch (status) {
    case kExitOk:
      return "ok";
    case kExitFailed:
      return "failed";
    case kExitUsage:
      return "bad arguments";
    case kExitUnreachable:
      return "unreachable";
    case kExitNotIwarp:
      return "not an iWARP peer";
    case kExitCannotRun:
      return "cannot run";
  }
  return "unknown";
}

std::string exit_status_section(std::initializer_list<ExitRow> rows) {
  constexpr std::size_t kIndent = 5;  // "  0  "
  std::string out = "EXIT STATUS\n";
  for (const auto& row : rows) {
    const std::string text = std::string(exit_status_name(row.status)) +
                             (row.when.empty() ? "" : ": ") + std::string(row.when);
    const std::string wrapped = wrap_help(text, 96 - kIndent);
    out += "  " + std::to_string(row.status) + "  ";
    for (char c : wrapped) {
      out += c;
      if (c == '\n') out += std::string(kIndent, ' ');
    }
    out += '\n';
  }
  out += "  (the same numbers mean the same in every rdma-interop tool)";
  return out;
}

}  // namespace rdma_interop::tools
