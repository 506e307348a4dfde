#include "tools/common/listen_exit.h"

#include "tools/common/exit_status.h"

namespace rdma_interop::tools {

int listen_exit_status(const transport::ConnectError& error) {
  const bool usage =
      error.kind == transport::ConnectError::Kind::kInvalidArgument && error.sys_errno == 0;
  return usage ? kExitUsage : kExitCannotRun;
}

}  // namespace rdma_interop::tools
