// connection_core.h - one established iWARP connection on the event loop: the socket, the
// FPDU codecs and the RDMAP endpoint, and the completion queue its requests complete into
// (QpCaps::cq, possibly shared with other connections, or one of its own).
//
// Receive: socket -> FpduDecoder -> RdmapEndpoint::on_ulpdu (placement into registered
// memory happens here, on the event thread, as an RNIC's DMA would).
// Transmit: RdmapEndpoint::next_outgoing -> FpduEncoder -> sendmsg of the frame's slices
// (the payload straight from registered memory). Whatever the socket does not take is
// copied to `unsent_` and nothing more is pulled from the endpoint until it drained, so
// buffered output is bounded by one FPDU; the endpoint's queues are bounded by the QP caps.
//
// Locking: one mutex guards the endpoint and the registry. The event thread holds it while
// it processes socket events; application threads hold it for posts and registration, and
// wake the event thread with a posted task to transmit. Completions are pushed to the
// completion queue with the mutex held (the queue's own lock is the innermost); polling
// takes only the queue's lock, so a poll waiting on a shared queue blocks no connection.
// Application threads never touch the socket.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/rdmap_endpoint.h"
#include "core/transport/completion_queue.h"
#include "core/transport/provider.h"
#include "core/transport/tcp/event_loop.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"

namespace rdma_interop::transport::tcp {

class ConnectionCore : public IoHandler, public std::enable_shared_from_this<ConnectionCore> {
 public:
  // `unsent` are handshake octets (e.g. the RTR) the socket has not taken yet.
  ConnectionCore(EventLoop& loop, Fd fd, ConnectionInfo info, cm::Handover handover,
                 const QpCaps& caps, std::vector<std::uint8_t> unsent);
  ~ConnectionCore() override;

  // Event thread: starts watching the socket and decodes the handover's leftover octets.
  void start();

  // Application side, any thread.
  const ConnectionInfo& info() const { return info_; }
  std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access);
  bool deregister_memory(std::uint32_t stag);
  std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, const void* addr) const;
  std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr);
  std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr);
  std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout);
  ConnectionState state() const;
  std::string error_detail() const;
  std::optional<wire::TerminateMessage> terminate_received() const;
  std::optional<wire::MalformedTerminate> malformed_terminate_received() const;
  std::optional<wire::TerminateMessage> terminate_sent() const;
  void disconnect(Millis timeout);
  // Queues a Terminate with `cause`, flushes everything outstanding, and lets the event
  // thread send it and close the stream (Connection::terminate).
  void terminate(const wire::TerminateCause& cause);
  // The application object is going away: stop touching registered memory and close the
  // socket now (FIN after what is already buffered). Blocks until the event thread did it.
  void release();

  void on_io(std::uint32_t events) override;

 private:
  enum class Phase : std::uint8_t {
    kOpen,          // both directions carry FPDUs
    kWriteClosed,   // our FIN is out (Terminate sent/received, or disconnect): await theirs
    kClosed,        // socket closed
  };

  // Event thread, mu_ held.
  void read_socket();
  void feed(std::span<const std::uint8_t> octets);
  void transmit();
  bool write_unsent();
  bool write_frame();
  void after_activity();
  void on_peer_closed(bool reset, int err);
  void close_socket(bool abortive);
  void arm_close_timer(TimePoint deadline);
  void update_interest();
  void drain_completions();
  void settle(ConnectionState state, std::string detail);
  void wake_locked();

  EventLoop& loop_;
  const ConnectionInfo info_;

  const std::shared_ptr<CompletionQueue> cq_;  // set once: polled without mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;  // phase changes
  rdmap::MemoryRegistry registry_;
  rdmap::RdmapEndpoint endpoint_;
  std::optional<ConnectionState> final_state_;
  std::string detail_;
  bool released_ = false;    // the application object is gone
  bool wake_posted_ = false;
  bool local_close_ = false;  // disconnect() asked for an orderly close
  std::optional<TimePoint> close_deadline_;

  Fd fd_;
  EventLoop::Token token_ = 0;
  bool watching_ = false;
  std::uint32_t interest_ = 0;
  Phase phase_ = Phase::kOpen;
  std::optional<EventLoop::TimerId> close_timer_;
  wire::FpduEncoder encoder_;
  wire::FpduDecoder decoder_;
  wire::FpduFrame frame_;
  bool stream_failed_ = false;
  std::vector<std::uint8_t> leftover_;
  std::vector<std::uint8_t> unsent_;
  std::size_t unsent_offset_ = 0;
  std::vector<iovec> iov_;
  // Not zero-filled: 256 KiB of memset per connection showed in connection-setup profiles.
  std::unique_ptr<std::uint8_t[]> rx_buffer_;
};

// The application's handle: forwards to the core; destroying it releases the core.
class TcpConnection final : public Connection {
 public:
  TcpConnection(std::shared_ptr<EventLoop> loop, std::shared_ptr<ConnectionCore> core)
      : loop_(std::move(loop)), core_(std::move(core)) {}
  ~TcpConnection() override { core_->release(); }

  const ConnectionInfo& info() const override { return core_->info(); }
  std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access) override {
    return core_->register_memory(addr, length, access);
  }
  bool deregister_memory(std::uint32_t stag) override { return core_->deregister_memory(stag); }
  std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, const void* addr) const override {
    return core_->tagged_offset(stag, addr);
  }
  std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr) override {
    return core_->post_send(wr);
  }
  std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr) override {
    return core_->post_recv(wr);
  }
  std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout) override {
    return core_->poll_completions(max, timeout);
  }
  ConnectionState state() const override { return core_->state(); }
  std::string error_detail() const override { return core_->error_detail(); }
  std::optional<wire::TerminateMessage> terminate_received() const override {
    return core_->terminate_received();
  }
  std::optional<wire::MalformedTerminate> malformed_terminate_received() const override {
    return core_->malformed_terminate_received();
  }
  std::optional<wire::TerminateMessage> terminate_sent() const override {
    return core_->terminate_sent();
  }
  void disconnect(Millis timeout) override { core_->disconnect(timeout); }
  void terminate(const wire::TerminateCause& cause) override { core_->terminate(cause); }

 private:
  std::shared_ptr<EventLoop> loop_;  // keeps the event thread alive while we exist
  std::shared_ptr<ConnectionCore> core_;
};

}  // namespace rdma_interop::transport::tcp
