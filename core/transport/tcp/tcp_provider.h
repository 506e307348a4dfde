// tcp_provider.h - the userspace iWARP provider over real TCP sockets ("tcp://ADDR:PORT").
//
// One event thread per provider (core/runtime/event_loop.h) drives listeners, the
// responder's MPA setup up to the application's decision, timers and whatever no
// application thread is doing; connect (TCP and MPA setup), accept and reject (the answer,
// the RTR, the establishment), a connection's sends and, while the application polls it,
// its receives run on the application's threads (provider.h, tcp_connection_state.h,
// tcp_connector.h, tcp_listener.h). Listeners and connections keep that thread alive, so
// they may outlive the Provider object; the thread is joined when the last of them is
// destroyed.
//
// Telemetry: the provider owns a telemetry::Publisher (core/telemetry/publisher.h) and every
// listener it creates registers its snapshot there for as long as it lives, so backlog-stat
// sees it under $RDMA_INTEROP_RUN_DIR (default /run/rdma-interop). An unusable run
// directory turns telemetry off with one warning; it never fails listen().
#pragma once

#include <memory>

#include "core/transport/provider.h"

namespace rdma_interop::transport::tcp {

std::unique_ptr<Provider> make_tcp_provider();

}  // namespace rdma_interop::transport::tcp
