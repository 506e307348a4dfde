// tcp_connection_state.h - one established iWARP connection: the socket, the FPDU codecs and the
// RDMAP endpoint, and the completion queue its requests complete into (QpCaps::cq, possibly
// shared with other connections, or one of its own).
//
// Receive: socket -> FpduDecoder -> RdmapEndpoint::on_ulpdu (placement into registered
// memory happens here, as an RNIC's DMA would). Where the decoder is inside an RDMA Write
// with at least kPlacementMin of payload to come, the next read (read_socket, under mu_, so
// the registry cannot change under it) goes straight to the Write's place
// (RdmapEndpoint::placement_target), and only what follows the payload into the receive
// buffer, at most kPlacementTail: a large Write's octets are copied once, by the kernel, as
// a receive into the application's buffer is over raw TCP. At an FPDU boundary, after a read
// that carried a large ULPDU, the next FPDU's header is looked at first (MSG_PEEK): when it
// is such a Write, one readv takes the header, the payload to its place and the tail. On
// loopback a reader's reads mostly end where the writer's sendmsg did, at a boundary, so
// without the look nothing of a stream of 64 KiB Writes was placed directly.
// wait_and_read's RECV, made without mu_, reads into the receive buffer only.
// Transmit: RdmapEndpoint::next_outgoing -> FpduEncoder -> one sendmsg of the slices of up
// to 16 ready frames, closing at 128 KiB (the payload straight from registered memory; a
// batch posted with post_sends is framed whole first, so a Write and its Send share one);
// the frames are the writing thread's, not the connection's (they live only while it
// writes). Whatever the socket does not take is copied to `unsent_` and nothing more is
// pulled from the endpoint until it drained, so buffered output is bounded by one batch
// (under 128 KiB plus one FPDU), and let go once it drained; the endpoint's queues are
// bounded by the QP caps.
//
// Who does the work (run to completion, as siw sends inside post_send): the thread that
// posts a work request encodes and sends it itself; only what the socket does not take at
// once is finished by the event thread on EPOLLOUT. A thread that waits in
// poll_completions on the connection's own queue receives itself: it reads, decodes and
// places, then sleeps in poll(2) on the socket and the queue's eventfd. While such a thread
// holds the receive side ("claims" it), the event thread does not watch the socket for
// input; once no thread has polled for kClaimIdle, the event thread takes receiving back,
// so a connection nobody polls still places Writes, answers Reads and sees the peer close.
// A connection on a shared queue (QpCaps::cq) is received by the event thread, unless a
// thread claims it the same way with receive_here (the message endpoint's waiters do);
// receive_here may first look with poll(2) for a while without sleeping (its poll_first),
// then waits and reads in one syscall where io_uring allows (wait_and_read,
// runtime/socket_wait.h), the socket's reads then being that thread's alone (rx_reading_).
//
// Locking: mu_ guards everything below it in the class, the socket's reads included: any
// thread holding it may read the socket, unless rx_reading_: then a thread in
// wait_and_read() reads it without mu_ (an io_uring RECV), and no other reads until it took
// what came, under mu_ (a second receiver polling the socket meanwhile may find it readable
// until that RECV took the octets: a short spin, never two readers). Writes are the other
// exception: one thread at a time
// (tx_busy_, under mu_) writes, and it lets go of mu_ around each write syscall, so the event
// thread reading this socket, or another thread posting, never waits for a sendmsg; what
// they add meanwhile the writer sends before it stops, and no completion is announced while
// it writes (its frames may point into the buffers of sends already complete). Lock order:
// mu_, then the event loop's and the completion queue's locks (both leaves). Completions are
// pushed with mu_ held and announced (CompletionQueue::notify) once it is released.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/rdmap_endpoint.h"
#include "core/runtime/event_loop.h"
#include "core/transport/completion_queue.h"
#include "core/transport/provider.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"

namespace rdma_interop::transport::tcp {

class TcpConnectionState : public runtime::IoHandler,
                           public std::enable_shared_from_this<TcpConnectionState> {
 public:
  // `unsent` are handshake octets (e.g. the RTR) the socket has not taken yet.
  TcpConnectionState(runtime::EventLoop& loop, runtime::Fd fd, ConnectionInfo info,
                     cm::Handover handover, const QpCaps& caps, std::vector<std::uint8_t> unsent);
  ~TcpConnectionState() override;

  // Takes the socket over from setup (`token`: its watch, handed over without leaving
  // epoll) or watches it anew, and decodes the handover's leftover octets.
  // 0, or the errno of a failed watch (the connection is then reset and in error).
  int start(std::optional<runtime::EventLoop::Token> token);

  // Application side, any thread.
  const ConnectionInfo& info() const { return info_; }
  std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access);
  bool deregister_memory(std::uint32_t stag);
  std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, const void* addr) const;
  std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr);
  // Connection::post_sends: all framed, then written together.
  Connection::PostBatch post_sends(std::span<const rdmap::SendWr> wrs);
  std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr);
  std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout);
  // Connection::receive_here: the receive side claimed as poll_completions claims it.
  bool receive_here(runtime::WakeFd wake, Millis timeout, Micros poll_first);
  ConnectionState state() const;
  std::string error_detail() const;
  std::optional<wire::TerminateMessage> terminate_received() const;
  std::optional<wire::MalformedTerminate> malformed_terminate_received() const;
  std::optional<wire::TerminateMessage> terminate_sent() const;
  ReceiveCounters receive_counters() const;
  void disconnect(Millis timeout);
  // Queues a Terminate with `cause`, flushes everything outstanding, and lets the event
  // thread send it and close the stream (Connection::terminate).
  void terminate(const wire::TerminateCause& cause);
  // The application object is going away: stop touching registered memory and close the
  // socket now (FIN after what is already buffered).
  void release();

  void on_io(std::uint32_t events) override;

 private:
  enum class Phase : std::uint8_t {
    kOpen,         // both directions carry FPDUs
    kWriteClosed,  // our FIN is out (Terminate sent/received, or disconnect): await theirs
    kClosed,       // socket closed
  };

  class Guard;  // holds mu_; announces pushed completions once it is released

  // mu_ held.
  // What each receiving thread (event thread, poller, claim timer) does under mu_: read the
  // socket when it may hold something, then act on what came (transmit, completions, close).
  void receive(bool read);
  void read_socket();
  // This thread's receive buffer (read_socket's and wait_and_read's).
  static std::span<std::uint8_t> rx_buffer();
  void feed(std::span<const std::uint8_t> octets);
  // Where one read's octets go: its first `before` to rx_buffer(), the next `to.size()` to
  // `to` (a Write's payload, placed), the rest to rx_buffer() after the first `before`.
  struct Placement {
    std::size_t before = 0;
    std::span<std::uint8_t> to;
    int error = 0;  // the look at the next header found the socket failed (errno)
  };
  // What one read of the socket brought, taken the same way whoever read it (read_socket()'s
  // read_some on any receiving thread, or wait_and_read()'s RECV into rx_buffer()): counted,
  // then fed to the decoder (and placed where `placement` says), or the peer's close. True
  // when the read took all it asked for: more may be waiting.
  bool take_read(std::size_t bytes, bool closed, int error, const Placement& placement);
  // Where the next read goes: the rest of a Write's payload the decoder is inside, if at
  // least kPlacementMin; or, at a boundary after a read that carried a large ULPDU, the
  // next FPDU's header (looked at with MSG_PEEK) then its payload, if it is such a Write.
  // Nothing to place otherwise.
  Placement placement();
  void transmit();
  struct TxBatch;      // the FPDUs of one write (tcp_connection_state.cc)
  void write_ready();  // transmit()'s loop, by the one writer
  // Runs a write syscall with mu_ released (the caller is the writer, holding a Guard).
  template <class Syscall>
  runtime::IoResult unlocked(Syscall&& syscall);
  bool write_unsent();
  bool write_frames(TxBatch& batch, std::size_t count);  // false if the socket is full
  void act_on_endpoint();
  void on_peer_closed(bool reset, int err);
  void close_socket(bool abortive);
  void arm_close_timer(runtime::TimePoint deadline);
  void update_interest();
  void drain_completions();
  void record_final_state(ConnectionState state, std::string detail);
  void arm_claim_timer(runtime::TimePoint when);
  void on_claim_timer();

  // poll_completions on the connection's own queue: receive here, then wait in poll(2).
  std::vector<rdmap::WorkCompletion> receive_and_wait(std::size_t max, Millis timeout);
  // Claims the receive side and reads what the socket may hold (`received`: it held
  // octets, or the end).
  // The socket to wait on, or -1 once the connection is closed (the caller then waits on the
  // queue alone).
  int enter_receive(bool readable, bool* received = nullptr);
  // `entered`: when the caller's enter_receive began.
  void leave_receive(runtime::TimePoint entered);
  // Without mu_, between enter_receive and leave_receive: waits for the socket's octets or
  // `wake` in one syscall (runtime::SocketWait), and takes what came as read_socket()
  // would. False, having done nothing, where io_uring is unavailable or another thread
  // reads this way now (the caller then polls).
  bool wait_and_read(int socket, runtime::WakeFd wake, Millis timeout);
  // receive_here's poll(2) on the socket and `wake_fd` (-1: none) for up to `timeout` (0: a
  // look), then a read of what the socket has. True when either was ready (or poll failed).
  bool poll_and_read(int socket, int wake_fd, Millis timeout);

  runtime::EventLoop& loop_;
  const ConnectionInfo info_;

  const std::shared_ptr<CompletionQueue> cq_;  // set once: polled without mu_
  const bool own_cq_;                          // made for this connection (QpCaps::cq null)

  mutable std::mutex mu_;
  std::condition_variable cv_;                            // phase changes; the writer left
  mutable std::unique_lock<std::mutex>* held_ = nullptr;  // the Guard holding mu_ now
  mutable bool notify_pending_ = false;                   // completions pushed since mu_ was taken
  rdmap::MemoryRegistry registry_;
  rdmap::RdmapEndpoint endpoint_;
  std::optional<ConnectionState> final_state_;
  std::string detail_;
  bool released_ = false;     // the application object is gone
  bool local_close_ = false;  // disconnect() asked for an orderly close
  std::optional<runtime::TimePoint> close_deadline_;

  runtime::Fd fd_;
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;
  std::uint32_t interest_ = 0;
  Phase phase_ = Phase::kOpen;
  std::optional<runtime::EventLoop::TimerId> close_timer_;
  wire::FpduEncoder encoder_;
  wire::FpduDecoder decoder_;
  bool stream_failed_ = false;
  bool tx_busy_ = false;  // a thread is writing (with mu_ released around its syscalls)
  std::vector<std::uint8_t> leftover_;
  std::vector<std::uint8_t> unsent_;
  std::size_t unsent_offset_ = 0;
  // The receive side (see the top of this file).
  bool rx_drained_ = false;      // the last read left nothing behind (EAGAIN, short, end, error)
  std::uint64_t rx_reads_ = 0;   // reads that brought something (octets, the end, an error)
  ReceiveCounters rx_counters_;
  bool rx_large_seen_ = false;  // the last read carried a large Write: look at the next header
  bool rx_claimed_ = false;      // a polling thread receives; no EPOLLIN on the event thread
  bool rx_reading_ = false;      // a thread in wait_and_read() owns the socket's reads
  std::uint32_t receivers_ = 0;  // threads between enter_receive and leave_receive
  runtime::TimePoint last_receive_{};  // when the last of them left
  std::optional<runtime::EventLoop::TimerId> claim_timer_;
  runtime::TimePoint claim_at_{};  // when claim_timer_ fires
  runtime::Fd closing_fd_;  // closed while a receiver or the writer uses it: closed when they leave
};

}  // namespace rdma_interop::transport::tcp
