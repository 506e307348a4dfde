// tcp_provider.h - the userspace iWARP provider over real TCP sockets ("tcp://ADDR:PORT").
//
// One event thread per provider (event_loop.h) drives every socket of its listeners and
// connections. Listeners and connections keep that thread alive, so they may outlive the
// Provider object; the thread is joined when the last of them is destroyed.
#pragma once

#include <memory>

#include "core/transport/provider.h"

namespace rdma_interop::transport::tcp {

std::unique_ptr<Provider> make_tcp_provider();

}  // namespace rdma_interop::transport::tcp
