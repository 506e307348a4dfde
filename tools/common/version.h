// version.h - the version every tool's --version prints, and its man page carries: the CMake
// project version and, for a build from a git checkout, `git describe` at build time
// (version.cmake writes it into the build tree on every build; a new commit relinks).
#pragma once

#include <string>
#include <string_view>

namespace rdma_interop::tools {

// "0.1.0 (git cfad858)", or "0.1.0" outside a git checkout.
std::string_view project_version();

// "rdma-probe 0.1.0 (rdma-interop, git cfad858)".
std::string version_line(std::string_view tool);

}  // namespace rdma_interop::tools
