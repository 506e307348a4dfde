// tcp_connection.h - the application's handle on a TcpConnectionState: the shared
// forwarding (connection_handle.h) plus what only our own RDMAP endpoint can answer, the
// Terminates it sent or received and the tagged offsets of its registrations.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/runtime/event_loop.h"
#include "core/transport/connection_handle.h"
#include "core/transport/tcp/tcp_connection_state.h"

namespace rdma_interop::transport::tcp {

class TcpConnection final : public ConnectionHandle<TcpConnectionState> {
 public:
  // `loop` keeps the event thread alive while the handle exists.
  TcpConnection(std::shared_ptr<runtime::EventLoop> loop, std::shared_ptr<TcpConnectionState> state)
      : ConnectionHandle(std::move(loop), std::move(state)) {}

  std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, const void* addr) const override {
    return connection_state().tagged_offset(stag, addr);
  }
  std::optional<wire::TerminateMessage> terminate_received() const override {
    return connection_state().terminate_received();
  }
  std::optional<wire::MalformedTerminate> malformed_terminate_received() const override {
    return connection_state().malformed_terminate_received();
  }
  // Any length: the payload goes from the caller's buffer to the socket in the post, and a
  // request the socket did not take whole then is copied (TcpConnectionState::post_sends).
  std::uint32_t max_inline_data() const override { return 0xffff'ffff; }
  std::optional<wire::TerminateMessage> terminate_sent() const override {
    return connection_state().terminate_sent();
  }
  ReceiveCounters receive_counters() const override {
    return connection_state().receive_counters();
  }
};

}  // namespace rdma_interop::transport::tcp
