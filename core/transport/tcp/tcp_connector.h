// tcp_connector.h - the initiator's way to an established connection, on the thread that
// asked for it: a TCP connect, then MPA setup, and one new TCP connection in revision 1
// when the handshake asks for it (cxgb4's fallback). One deadline (ConnectOptions::timeout)
// covers each attempt. A failed attempt the listener may take later is retried as
// core/transport/connect_retry.h says; the error reports the attempts made.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <optional>

#include "core/runtime/event_loop.h"
#include "core/transport/provider.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

// Runs on the calling thread from the first SYN to an established connection: nothing
// crosses to the event thread until the connection is handed to it (one epoll_ctl ADD).
SetupResult connect_on_caller(runtime::EventLoop& loop, const sockaddr_in& peer,
                              const ConnectOptions& options);

}  // namespace rdma_interop::transport::tcp
