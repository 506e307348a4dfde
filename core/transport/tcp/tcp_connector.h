// tcp_connector.h - the initiator's way to an established connection, on the thread that
// asked for it: a TCP connect, then MPA setup, and one new TCP connection in revision 1
// when the handshake asks for it (cxgb4's fallback). One deadline (ConnectOptions::timeout)
// covers each attempt. A failed attempt the listener may take later (backlog_full, TCP
// refused or reset, no Reply in time) is retried up to ConnectOptions::retries times after
// a backoff with full jitter; the error reports the attempts made.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <optional>
#include <random>

#include "core/runtime/event_loop.h"
#include "core/transport/provider.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

// Whether a failed attempt is worth another (see ConnectOptions). `tcp_errno` is the
// errno of a failed TCP connect (kUnreachable), 0 otherwise.
bool retryable(const ConnectError& error, int tcp_errno);

// The sleep before retry `retry` (1-based): uniform in [0, min(max, base * 2^(retry-1))].
Millis retry_delay(const ConnectOptions& options, std::uint32_t retry, std::mt19937_64& rng);

// Runs on the calling thread from the first SYN to an established connection: nothing
// crosses to the event thread until the connection is handed to it (one epoll_ctl ADD).
SetupResult connect_on_caller(runtime::EventLoop& loop, const sockaddr_in& peer,
                              const ConnectOptions& options);

}  // namespace rdma_interop::transport::tcp
