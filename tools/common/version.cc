#include "tools/common/version.h"

namespace rdma_interop::tools {

// Defined in the build tree's version_info.cc (version.cmake).
extern const char* const kProjectVersion;
extern const char* const kGitDescribe;

std::string_view project_version() {
  static const std::string text =
      std::string(kProjectVersion) +
      (*kGitDescribe != '\0' ? " (git " + std::string(kGitDescribe) + ")" : std::string());
  return text;
}

std::string version_line(std::string_view tool) {
  std::string line = std::string(tool) + " " + kProjectVersion + " (rdma-interop";
  if (*kGitDescribe != '\0') line += ", git " + std::string(kGitDescribe);
  return line + ")";
}

}  // namespace rdma_interop::tools
