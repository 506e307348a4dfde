// listen_exit.h - the exit status (exit_status.h) of a tool whose listen failed, the same in
// every tool that listens: options the provider refuses (a policy it cannot apply) are bad
// arguments (2); the system refusing the address (in use, not this host's, EACCES below port
// 1024, no RDMA device there) is this node being unable to run it (5).
#pragma once

#include "core/transport/provider.h"

namespace rdma_interop::tools {

int listen_exit_status(const transport::ConnectError& error);

}  // namespace rdma_interop::tools
