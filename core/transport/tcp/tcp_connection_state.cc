#include "core/transport/tcp/tcp_connection_state.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

#include "core/runtime/socket_wait.h"
#include "core/wire/terminate.h"

namespace rdma_interop::transport::tcp {
namespace {

constexpr std::size_t kRxBufferSize = 256 * 1024;
constexpr int kReadsPerWakeup = 4;            // then let other connections run
// Direct placement (see the header): a read goes to a Write's place when at least this much
// of its payload is to come. Such a read stops at the payload's end plus kPlacementTail, where
// a read into the receive buffer takes up to 256 KiB: for a short rest, the reads that
// follow it cost more than the copy saved.
constexpr std::size_t kPlacementMin = 8 * 1024;
// What a read to a Write's place takes after the payload: the Write's CRC, the Send that
// announces it, the next FPDU's header. The next payload's first octets beyond that would be
// copied twice (into the decoder, then to their place): a long tail reads fewer times but
// copies more.
constexpr std::size_t kPlacementTail = 2 * 1024;

constexpr std::size_t kMaxIovPerCall = 1024;  // UIO_MAXIOV
// A batch of FPDUs for one sendmsg closes once it holds this much: a 64 KiB Write's two
// FPDUs and the Send posted with it (post_sends) leave together, one sendmsg and one wake-up
// of the peer. Measured against 16 KiB (each large FPDU alone), both with post_sends: a
// 64 KiB stream over the stream layer 3.1-3.5 syscalls per 64 KiB against 4.4-4.9, and
// e2e_bench's 64 KiB Writes 3.0 against 4.2 each; Gbit/s moved within this machine's noise
// (stream: 14.8-20.6 against 15.7-18.0). (Before post_sends, at 16 KiB: 6.3-6.5 syscalls.)
constexpr std::size_t kBatchOctets = 128 * 1024;
// After a Terminate (RFC 5040 s5.3: the stream is closed after it), how long the peer has
// to close its side before we reset the connection.
constexpr auto kTerminateLinger = std::chrono::seconds(2);
// How long the receive side stays with the polling threads after the last one left before
// the event thread takes it back: long against a round trip, short against a timeout.
constexpr auto kClaimIdle = std::chrono::milliseconds(2);
// The longest single wait poll_completions sleeps (poll(2) takes an int of milliseconds).
constexpr Millis kLongestWait = std::chrono::hours(24);

// A ULPDU worth looking for another like it after (placement()): a large RDMA Write.
bool is_large_write(std::span<const std::uint8_t> ulpdu) {
  return ulpdu.size() >= kPlacementMin && (ulpdu[0] & wire::kDdpFlagTagged) != 0 &&
         (ulpdu[1] & wire::kRdmapOpcodeMask) ==
             static_cast<std::uint8_t>(wire::RdmapOpcode::kRdmaWrite);
}

// The MULPDU we send with: the caller's, within what the FPDU framing can carry (markers
// cap it so every FPDUPTR fits in 16 bits, RFC 5044 s4.3).
rdmap::EndpointLimits limits_of(const QpCaps& caps, const wire::FpduOptions& tx) {
  const std::uint16_t framing_max = tx.markers ? wire::kMaxUlpduWithMarkers : tx.max_ulpdu;
  return rdmap::EndpointLimits{caps.max_send_wr, caps.max_recv_wr,
                               std::min(caps.max_ulpdu, framing_max)};
}

}  // namespace

// Holds mu_. Completions pushed meanwhile are announced once mu_ is free, so a consumer is
// never woken into a lock its producer still holds.
// The guard is what the transmitting thread lets go of around its sendmsg (transmit()).
class TcpConnectionState::Guard {
 public:
  explicit Guard(const TcpConnectionState& state) : state_(state), lock_(state.mu_) {
    state_.held_ = &lock_;
  }
  ~Guard() {
    const bool notify = std::exchange(state_.notify_pending_, false);
    state_.held_ = nullptr;
    lock_.unlock();
    if (notify) state_.cq_->notify();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  std::unique_lock<std::mutex>& lock() { return lock_; }

 private:
  const TcpConnectionState& state_;
  std::unique_lock<std::mutex> lock_;
};

TcpConnectionState::TcpConnectionState(runtime::EventLoop& loop, runtime::Fd fd,
                                       ConnectionInfo info, cm::Handover handover,
                                       const QpCaps& caps, std::vector<std::uint8_t> unsent)
    : loop_(loop),
      info_([&] {
        info.send_queue_depth = caps.max_send_wr;  // no device to round it
        return std::move(info);
      }()),
      cq_(caps.cq ? caps.cq : std::make_shared<CompletionQueue>()),
      own_cq_(!caps.cq),
      endpoint_(handover.params, handover.sequence, registry_, limits_of(caps, handover.tx_options),
                handover.hold_tx_until_first_rx),
      fd_(std::move(fd)),
      encoder_(handover.tx_options, handover.tx_stream_position),
      decoder_(handover.rx_options, handover.rx_stream_position),
      leftover_(std::move(handover.leftover)),
      unsent_(std::move(unsent)) {
  // A shared queue's consumer may need the event thread for work it found elsewhere.
  if (!own_cq_) cq_->offer_executor(loop_.executor());
  for (const InitialRecv& r : caps.initial_recvs) {
    const std::uint32_t stag = registry_.register_region(r.addr, r.length, rdmap::kLocalWrite);
    endpoint_.post_recv(rdmap::RecvWr{
        r.wr_id, rdmap::Sge{reinterpret_cast<std::uint64_t>(r.addr), r.length, stag}});
  }
}

TcpConnectionState::~TcpConnectionState() = default;

int TcpConnectionState::start(std::optional<runtime::EventLoop::Token> token) {
  Guard guard(*this);
  interest_ = EPOLLIN | (unsent_.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (token) {
    token_ = *token;
    loop_.hand_over(token_, interest_, shared_from_this());
  } else {
    const auto watched = loop_.watch(fd_.get(), interest_, shared_from_this());
    if (!watched) {
      record_final_state(ConnectionState::kError,
                         "cannot watch the socket: " + runtime::errno_text(watched.error()));
      close_socket(true);
      return watched.error();
    }
    token_ = *watched;
  }
  watching_ = true;
  const std::vector<std::uint8_t> leftover = std::move(leftover_);
  feed(leftover);
  act_on_endpoint();
  return 0;
}

// ---- Application side ------------------------------------------------------------------

std::uint32_t TcpConnectionState::register_memory(void* addr, std::size_t length,
                                                  std::uint32_t access) {
  std::lock_guard lock(mu_);
  return registry_.register_region(addr, length, access);
}

bool TcpConnectionState::deregister_memory(std::uint32_t stag) {
  std::lock_guard lock(mu_);
  return registry_.deregister(stag);
}

std::optional<std::uint64_t> TcpConnectionState::tagged_offset(std::uint32_t stag,
                                                               const void* addr) const {
  std::lock_guard lock(mu_);
  return registry_.tagged_offset(stag, reinterpret_cast<std::uint64_t>(addr));
}

std::optional<rdmap::PostError> TcpConnectionState::post_send(const rdmap::SendWr& wr) {
  return post_sends(std::span(&wr, 1)).error;
}

Connection::PostBatch TcpConnectionState::post_sends(std::span<const rdmap::SendWr> wrs) {
  Guard guard(*this);
  Connection::PostBatch r;
  if (phase_ != Phase::kOpen || local_close_ || released_) {
    if (!wrs.empty()) r.error = rdmap::PostError::kNotConnected;
    return r;
  }
  for (const rdmap::SendWr& wr : wrs) {
    r.error = endpoint_.post_send(wr);
    if (r.error) break;
    ++r.posted;
  }
  // Sent here, on the caller's thread (siw: "send directly if SQ processing is not in
  // progress"), one transmit for the batch: its FPDUs leave in as few sendmsgs as
  // kBatchOctets allows; what the socket does not take, EPOLLOUT lets the event thread finish.
  if (r.posted > 0) {
    act_on_endpoint();
  } else {
    drain_completions();
  }
  // Inline requests (IBV_SEND_INLINE): one the socket did not take whole now is copied before
  // the caller has its buffer back. The frames this thread wrote are out or in `unsent_`; another
  // thread writing (tx_busy_) took none of these, as it frames only under mu_.
  const auto is_inline = [](const rdmap::SendWr& wr) { return wr.inline_data; };
  if (std::any_of(wrs.begin(), wrs.begin() + static_cast<std::ptrdiff_t>(r.posted), is_inline)) {
    endpoint_.own_inline_payloads();
  }
  return r;
}

std::optional<rdmap::PostError> TcpConnectionState::post_recv(const rdmap::RecvWr& wr) {
  Guard guard(*this);
  if (released_) return rdmap::PostError::kNotConnected;
  const auto error = endpoint_.post_recv(wr);
  drain_completions();
  return error;
}

std::vector<rdmap::WorkCompletion> TcpConnectionState::poll_completions(std::size_t max,
                                                                        Millis timeout) {
  // A shared queue is fed by the event thread: its waiter may belong to any connection.
  if (!own_cq_ || timeout <= Millis::zero()) return cq_->poll(max, timeout);
  return receive_and_wait(max, timeout);
}

std::vector<rdmap::WorkCompletion> TcpConnectionState::receive_and_wait(std::size_t max,
                                                                        Millis timeout) {
  // Clamped: poll(2) takes an int of milliseconds, and now + Millis::max() overflows.
  timeout = std::min(timeout, kLongestWait);
  const auto deadline = runtime::Clock::now() + timeout;
  const std::uint64_t generation = cq_->wake_generation();
  const int wait_fd = cq_->wait_fd();
  bool readable = false;  // poll(2) said so
  for (;;) {
    auto got = cq_->poll(max, Millis::zero());
    if (!got.empty()) return got;
    const auto left = std::chrono::ceil<Millis>(deadline - runtime::Clock::now());
    if (left <= Millis::zero()) return got;
    const auto entered = runtime::Clock::now();
    const int socket = wait_fd < 0 ? -1 : enter_receive(readable);
    // Closed: only flushes can still come, and a wake() since this poll began ends it.
    if (socket < 0) return cq_->poll(max, left, generation);
    got = cq_->poll(max, Millis::zero());
    if (!got.empty() || !cq_->arm_fd_wait(generation)) {
      leave_receive(entered);
      return got.empty() ? cq_->poll(max, Millis::zero()) : got;
    }
    std::array<pollfd, 2> fds{pollfd{socket, POLLIN, 0}, pollfd{wait_fd, POLLIN, 0}};
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    readable = fds[0].revents != 0;
    cq_->disarm_fd_wait();
    leave_receive(entered);
    if (cq_->wake_generation() != generation) return cq_->poll(max, Millis::zero());
  }
}

bool TcpConnectionState::receive_here(runtime::WakeFd wake, Millis timeout, Micros poll_first) {
  timeout = std::min(timeout, kLongestWait);  // a caller's "forever": in microseconds too
  const int wake_fd = wake.fd;
  const auto entered = runtime::Clock::now();
  bool received = false;
  const int socket = enter_receive(false, &received);
  if (socket < 0) return false;
  if (!received && timeout > Millis::zero() && poll_first > Micros::zero()) {
    // Looks before it sleeps. poll(2) with no timeout, not recv(2): tcp_poll reads the
    // socket's state without its lock, which the peer's segments take as they arrive (on
    // loopback, in the sender's own syscall); a recv spinning on it slowed a stream's writer.
    // Woken: nothing to wait for either, the caller looks at why.
    const auto until = entered + std::min<Micros>(poll_first, timeout);
    do {
      received = poll_and_read(socket, wake_fd, Millis::zero());
    } while (!received && runtime::Clock::now() < until);
    // The sleep takes what is left of the timeout (whole milliseconds: at most one more).
    const auto spent = std::chrono::duration_cast<Millis>(runtime::Clock::now() - entered);
    timeout = spent >= timeout ? Millis::zero() : timeout - spent;
  }
  if (!received && timeout > Millis::zero() && wait_and_read(socket, wake, timeout)) {
    // Received (or woken) in the wait itself: one syscall where poll(2) and recv(2) are two.
  } else if (!received && timeout > Millis::zero()) {
    (void)poll_and_read(socket, wake_fd, timeout);
  }
  leave_receive(entered);
  return true;
}

bool TcpConnectionState::poll_and_read(int socket, int wake_fd, Millis timeout) {
  std::array<pollfd, 2> fds{pollfd{socket, POLLIN, 0}, pollfd{wake_fd, POLLIN, 0}};
  const int ready = ::poll(fds.data(), wake_fd < 0 ? 1 : 2, static_cast<int>(timeout.count()));
  if (fds[0].revents != 0) {
    Guard guard(*this);
    if (phase_ != Phase::kClosed && !released_) receive(true);
  }
  return ready != 0;  // a failed poll too: the caller looks again
}

bool TcpConnectionState::wait_and_read(int socket, runtime::WakeFd wake, Millis timeout) {
  runtime::SocketWait* wait = runtime::SocketWait::for_this_thread();
  if (wait == nullptr) return false;
  {
    Guard guard(*this);
    // One reader at a time: octets read outside mu_ must reach the decoder in order.
    if (rx_reading_ || phase_ == Phase::kClosed || released_) return false;
    rx_reading_ = true;
    update_interest();  // no epoll_ctl while claimed, the common case: nothing changes
  }
  // The socket stays open meanwhile: this thread counts among receivers_, and close_socket()
  // defers the close and wakes the RECV with SHUT_RD.
  const auto r = wait->receive(socket, rx_buffer(), wake, std::min(timeout, kLongestWait));
  Guard guard(*this);
  rx_reading_ = false;
  update_interest();
  if (r.kind == runtime::SocketWait::Result::Kind::kUnavailable) return false;
  if (phase_ == Phase::kClosed || released_) return true;
  using Kind = runtime::SocketWait::Result::Kind;
  if (r.kind == Kind::kData || r.kind == Kind::kEof || r.kind == Kind::kError) {
    take_read(r.bytes, r.kind != Kind::kData, r.kind == Kind::kError ? r.error : 0,
              Placement{});
  }  // else woken or timed out: nothing was read, and the caller looks at why
  if (phase_ != Phase::kClosed) act_on_endpoint();
  return true;
}

int TcpConnectionState::enter_receive(bool readable, bool* received) {
  Guard guard(*this);
  const std::uint64_t reads_before = rx_reads_;
  if (phase_ == Phase::kClosed || released_) return -1;
  bool look = readable || !rx_drained_;
  if (!rx_claimed_) {
    rx_claimed_ = true;
    update_interest();  // the event thread stops watching for input
    arm_claim_timer(runtime::Clock::now() + kClaimIdle);
    look = true;
  }
  // A socket the last read drained is not read again on spec: poll(2) says when it has
  // more, and a recv that finds nothing would be a syscall per round trip.
  receive(look);
  if (received != nullptr) *received = rx_reads_ != reads_before;
  if (phase_ == Phase::kClosed) return -1;
  ++receivers_;
  return fd_.get();
}

void TcpConnectionState::leave_receive(runtime::TimePoint entered) {
  Guard guard(*this);
  --receivers_;
  last_receive_ = runtime::Clock::now();
  if (receivers_ == 0 && !tx_busy_) closing_fd_.reset();
  // The last receiver leaves after a long wait, and the claim's timer is far out (pushed by
  // on_claim_timer while it waited): what comes before the timer fires would wait for it,
  // so the event thread receives again now. One epoll_ctl, only after a wait longer than
  // kClaimIdle: a thread that receives in a loop (a request/response) keeps its claim.
  if (receivers_ == 0 && rx_claimed_ && phase_ != Phase::kClosed &&
      last_receive_ - entered > kClaimIdle && claim_at_ > last_receive_ + kClaimIdle) {
    rx_claimed_ = false;
    update_interest();
  }
}

void TcpConnectionState::arm_claim_timer(runtime::TimePoint when) {
  if (claim_timer_) return;
  claim_at_ = when;
  claim_timer_ = loop_.add_timer(when, [weak = weak_from_this()] {
    if (const auto self = weak.lock()) self->on_claim_timer();
  });
}

void TcpConnectionState::on_claim_timer() {
  Guard guard(*this);
  claim_timer_.reset();
  if (!rx_claimed_ || phase_ == Phase::kClosed) return;
  const auto idle_since = last_receive_ + kClaimIdle;
  if (receivers_ > 0 || idle_since > runtime::Clock::now()) {
    // A poller still asleep keeps the claim: look again much later, not every kClaimIdle,
    // so a long poll does not keep waking the event thread.
    arm_claim_timer(receivers_ > 0 ? runtime::Clock::now() + 8 * kClaimIdle : idle_since);
    return;
  }
  // Nobody polls: the event thread receives again, beginning with what waits in the socket.
  rx_claimed_ = false;
  update_interest();
  receive(true);
}

ConnectionState TcpConnectionState::state() const {
  std::lock_guard lock(mu_);
  if (final_state_) return *final_state_;
  return endpoint_.state() == rdmap::EndpointState::kRunning ? ConnectionState::kConnected
                                                             : ConnectionState::kError;
}

std::string TcpConnectionState::error_detail() const {
  std::lock_guard lock(mu_);
  return detail_;
}

std::optional<wire::TerminateMessage> TcpConnectionState::terminate_received() const {
  std::lock_guard lock(mu_);
  return endpoint_.terminate_received();
}

std::optional<wire::MalformedTerminate> TcpConnectionState::malformed_terminate_received() const {
  std::lock_guard lock(mu_);
  return endpoint_.malformed_terminate_received();
}

std::optional<wire::TerminateMessage> TcpConnectionState::terminate_sent() const {
  std::lock_guard lock(mu_);
  return endpoint_.terminate_sent();
}

ReceiveCounters TcpConnectionState::receive_counters() const {
  std::lock_guard lock(mu_);
  return rx_counters_;
}

void TcpConnectionState::disconnect(Millis timeout) {
  Guard guard(*this);
  if (phase_ == Phase::kClosed) return;
  if (!local_close_) {
    local_close_ = true;
    record_final_state(ConnectionState::kClosed, "disconnected by the application");
    close_deadline_ = runtime::Clock::now() + timeout;
    // The event thread waits for the peer's FIN: it receives again.
    rx_claimed_ = false;
    act_on_endpoint();
  }
  // The event thread resets the connection at the deadline; the margin covers its wakeup.
  // Completions the close produced (sends done) are announced before we sleep, not when
  // disconnect returns.
  if (std::exchange(notify_pending_, false)) {
    guard.lock().unlock();
    cq_->notify();
    guard.lock().lock();
  }
  cv_.wait_for(guard.lock(), timeout + Millis(500), [&] { return phase_ == Phase::kClosed; });
  held_ = &guard.lock();  // other guards came and went while we waited
}

void TcpConnectionState::terminate(const wire::TerminateCause& cause) {
  Guard guard(*this);
  if (released_ || local_close_ || phase_ != Phase::kOpen ||
      endpoint_.state() != rdmap::EndpointState::kRunning) {
    return;
  }
  endpoint_.terminate_for_ulp(cause);
  record_final_state(ConnectionState::kError,
                     "the application ended the connection: sent a Terminate: " +
                         wire::to_string(*endpoint_.terminate_sent()));
  rx_claimed_ = false;  // the event thread sees the stream close
  act_on_endpoint();    // the flushes, the Terminate, then our FIN
}

void TcpConnectionState::release() {
  Guard guard(*this);
  if (phase_ != Phase::kClosed) {
    transmit();  // what the application already posted may still go out
    released_ = true;
    record_final_state(ConnectionState::kClosed, "the connection was destroyed by the application");
    close_socket(false);
  }
  // A writer on another thread may still be in sendmsg from registered memory.
  cv_.wait(guard.lock(), [&] { return !tx_busy_; });
  held_ = &guard.lock();  // other guards came and went while we waited
  // From here on nothing is pushed to the completion queue (drain_completions) and no
  // thread touches registered memory (every one that does holds mu_); what a shared queue
  // already holds stays there for the application to poll.
  released_ = true;
  if (claim_timer_) {
    loop_.cancel_timer(*claim_timer_);
    claim_timer_.reset();
  }
}

// ---- Event thread ----------------------------------------------------------------------

void TcpConnectionState::on_io(std::uint32_t events) {
  const auto self = shared_from_this();
  Guard guard(*this);
  if (phase_ == Phase::kClosed) return;
  receive((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0);
}

void TcpConnectionState::receive(bool read) {
  if (read) read_socket();
  if (phase_ != Phase::kClosed) act_on_endpoint();
}

std::span<std::uint8_t> TcpConnectionState::rx_buffer() {
  // One buffer per thread, not per connection: a 256 KiB allocation is an mmap and munmap
  // per connection, and the decoder keeps what it still needs of a read.
  thread_local const std::unique_ptr<std::uint8_t[]> buffer =
      std::make_unique_for_overwrite<std::uint8_t[]>(kRxBufferSize);
  return {buffer.get(), kRxBufferSize};
}

void TcpConnectionState::read_socket() {
  // A thread waiting in wait_and_read() reads this socket: its octets come first.
  if (rx_reading_) return;
  for (int i = 0; i < kReadsPerWakeup && phase_ != Phase::kClosed; ++i) {
    const Placement place = placement();
    if (place.error != 0) {  // the look took the socket's error: it is this read's
      take_read(0, true, place.error, place);
      return;
    }
    runtime::IoResult r;
    if (place.to.empty()) {
      r = runtime::read_some(fd_.get(), rx_buffer());
    } else {
      const std::span<std::uint8_t> buffer = rx_buffer();
      const std::array<iovec, 3> parts{iovec{buffer.data(), place.before},
                                       iovec{place.to.data(), place.to.size()},
                                       iovec{buffer.data() + place.before, kPlacementTail}};
      r = runtime::read_some(fd_.get(), place.before == 0 ? std::span(parts).subspan(1)
                                                          : std::span(parts));
    }
    if (r.would_block) {
      rx_drained_ = true;
      return;
    }
    if (!take_read(r.bytes, r.eof || r.error != 0, r.error, place)) return;
  }
}

TcpConnectionState::Placement TcpConnectionState::placement() {
  if (stream_failed_ || released_) return {};
  if (const auto ulpdu = decoder_.ulpdu_in_progress()) {
    if (ulpdu->length - ulpdu->received < kPlacementMin) return {};
    return {0, endpoint_.placement_target(*ulpdu)};
  }
  if (!rx_large_seen_ || !decoder_.at_boundary() || !decoder_.can_place() ||
      endpoint_.state() != rdmap::EndpointState::kRunning) {
    return {};
  }
  // The length field and a tagged DDP header: enough to tell a Write and where it goes.
  std::array<std::uint8_t, wire::kUlpduLengthLen + wire::kDdpTaggedHeaderLen> header;
  const ssize_t n = ::recv(fd_.get(), header.data(), header.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    // A recv takes the socket's pending error (a reset) even when it only looks: the read
    // after it would see a plain end of stream.
    return {.before = 0, .to = {}, .error = errno};
  }
  if (n != static_cast<ssize_t>(header.size())) return {};
  const auto ulpdu = decoder_.next_ulpdu(header);
  if (!ulpdu || ulpdu->length - ulpdu->received < kPlacementMin) return {};
  const std::span<std::uint8_t> to = endpoint_.placement_target(*ulpdu);
  if (to.empty()) return {};
  return {header.size(), to};
}

bool TcpConnectionState::take_read(std::size_t bytes, bool closed, int error,
                                   const Placement& placement) {
  ++rx_reads_;
  // A full read may have left more behind: the next receive reads without waiting.
  const std::size_t asked = placement.to.empty()
                                ? rx_buffer().size()
                                : placement.before + placement.to.size() + kPlacementTail;
  rx_drained_ = closed || bytes < asked;
  if (closed) {
    on_peer_closed(error != 0, error);
    return false;
  }
  const bool full = !rx_drained_;
  ++rx_counters_.reads;
  rx_counters_.octets += bytes;
  const std::size_t before = std::min(bytes, placement.before);
  rx_large_seen_ = false;
  feed(rx_buffer().first(before));
  const std::size_t placed = std::min(bytes - before, placement.to.size());
  if (placed > 0 && !stream_failed_ && !released_) {
    // The header read first put the decoder inside this Write (the octets are the ones
    // looked at: nobody else reads this socket meanwhile).
    decoder_.place(placement.to.first(placed));
    rx_counters_.octets_placed += placed;
    rx_large_seen_ = true;
  }
  feed(rx_buffer().subspan(placement.before, bytes - before - placed));
  return full;
}

void TcpConnectionState::feed(std::span<const std::uint8_t> octets) {
  if (stream_failed_ || released_) return;
  while (!octets.empty()) {
    auto step = decoder_.step(octets);
    if (!step) {
      // RFC 5044 s7: a framing error ends the stream; the endpoint sends the Terminate.
      stream_failed_ = true;
      record_final_state(ConnectionState::kError, "received a malformed FPDU (" +
                                                      std::string(wire::describe(step.error())) +
                                                      "); sent a Terminate");
      endpoint_.on_stream_error(step.error());
      return;
    }
    octets = octets.subspan(step->consumed);
    if (step->ulpdu) {
      rx_large_seen_ = rx_large_seen_ || (decoder_.can_place() && is_large_write(*step->ulpdu));
      endpoint_.on_ulpdu(*step->ulpdu, step->placed);
    }
  }
}

void TcpConnectionState::transmit() {
  // One thread writes at a time, with mu_ released around its syscalls (a sendmsg is the
  // longest thing done under mu_, and the event thread reading this socket, or another
  // poster, would wait for it). A thread that finds a writer leaves its FPDUs to it: the
  // writer looks at the endpoint again under mu_ after each write.
  if (tx_busy_ || phase_ != Phase::kOpen || released_) return;
  tx_busy_ = true;
  write_ready();
  tx_busy_ = false;
  if (closing_fd_ && receivers_ == 0) closing_fd_.reset();  // a close deferred for the writer
  cv_.notify_all();                                         // release() waits for the writer
  // What completed meanwhile (held back while the frames pointed into registered memory).
  drain_completions();
}

template <class Syscall>
runtime::IoResult TcpConnectionState::unlocked(Syscall&& syscall) {
  std::unique_lock<std::mutex>* lock = held_;
  lock->unlock();
  const runtime::IoResult r = syscall();
  lock->lock();
  held_ = lock;  // another thread's guard came and went meanwhile
  return r;
}

// The FPDUs framed for one write, the ULPDUs they may point into, and the iovecs: the writing
// thread's, not the connection's. Only the writer uses them, and only while it writes, so
// one set per thread serves every connection (each would otherwise keep 3.4 KB of them).
struct TcpConnectionState::TxBatch {
  std::array<rdmap::OutgoingUlpdu, 16> ulpdus;
  std::array<wire::FpduFrame, 16> frames;
  std::vector<iovec> iov;
};

void TcpConnectionState::write_ready() {
  if (!write_unsent()) return;
  thread_local TxBatch batch;
  while (phase_ == Phase::kOpen) {
    // The FPDUs ready now go out in one sendmsg: a message a small MULPDU cuts into many,
    // Read Responses behind Sends, what queued while the socket was full (kBatchOctets).
    std::size_t count = 0;
    std::size_t octets = 0;
    while (count < batch.frames.size() && octets < kBatchOctets) {
      auto next = endpoint_.next_outgoing();
      if (!next) break;
      // Kept with its frame: a frame may point into its ULPDU's header.
      const rdmap::OutgoingUlpdu& ulpdu = batch.ulpdus[count] = *next;
      const std::array<std::span<const std::uint8_t>, 2> parts{ulpdu.header_octets(),
                                                               ulpdu.payload};
      const auto encoded = encoder_.encode(parts, batch.frames[count]);
      if (!encoded) {
        // The endpoint segments by our max_ulpdu; a longer ULPDU is a bug, not a peer's doing.
        // (Sends whose last segment is in this unwritten batch have completed already: the
        // reset is what tells the application that nothing can be trusted.)
        record_final_state(ConnectionState::kError,
                           "internal error: a ULPDU of " +
                               std::to_string(parts[0].size() + parts[1].size()) +
                               " octets exceeds the MULPDU; connection reset");
        close_socket(true);
        return;
      }
      octets += *encoded;
      ++count;
    }
    if (count == 0) return;
    // The frames point into registered memory and the endpoint's Terminate: they are
    // written or copied to `unsent_` before any completion is announced.
    // mu_ was let go during the write: others may have posted meanwhile, so the loop ends
    // only when the endpoint has nothing ready (count == 0 above).
    const bool written = write_frames(batch, count);
    // Written or copied to `unsent_`: an inline request's copy is not kept by this thread's
    // batch until its next write.
    for (std::size_t i = 0; i < count; ++i) batch.ulpdus[i].payload_copy.reset();
    if (!written || phase_ != Phase::kOpen) return;
  }
}

bool TcpConnectionState::write_unsent() {
  while (unsent_offset_ < unsent_.size()) {
    const iovec part{unsent_.data() + unsent_offset_, unsent_.size() - unsent_offset_};
    const int fd = fd_.get();
    const runtime::IoResult r =
        unlocked([&] { return runtime::write_some(fd, std::span(&part, 1)); });
    if (phase_ != Phase::kOpen) return false;  // closed while we wrote
    if (r.error != 0) {
      on_peer_closed(true, r.error);
      return false;
    }
    if (r.would_block) return false;
    unsent_offset_ += r.bytes;
  }
  // Let go, not kept: a batch is up to 128 KiB and more, and a connection whose socket
  // filled once would hold it for its life.
  if (unsent_.capacity() > 0) std::vector<std::uint8_t>().swap(unsent_);
  unsent_offset_ = 0;
  return true;
}

bool TcpConnectionState::write_frames(TxBatch& batch, std::size_t count) {
  std::vector<iovec>& iov = batch.iov;
  iov.clear();
  for (std::size_t i = 0; i < count; ++i) {
    for (const auto slice : batch.frames[i].slices()) {
      if (slice.empty()) continue;
      iov.push_back(iovec{const_cast<std::uint8_t*>(slice.data()), slice.size()});
    }
  }
  std::size_t next = 0;
  const int fd = fd_.get();
  while (next < iov.size()) {
    const std::size_t count = std::min(iov.size() - next, kMaxIovPerCall);
    const runtime::IoResult r =
        unlocked([&] { return runtime::write_some(fd, std::span(iov).subspan(next, count)); });
    if (phase_ != Phase::kOpen) return false;  // closed while we wrote: nothing more goes
    if (r.error != 0) {
      on_peer_closed(true, r.error);
      return false;
    }
    std::size_t written = r.bytes;
    while (written > 0) {
      iovec& v = iov[next];
      if (written >= v.iov_len) {
        written -= v.iov_len;
        ++next;
      } else {
        v.iov_base = static_cast<std::uint8_t*>(v.iov_base) + written;
        v.iov_len -= written;
        written = 0;
      }
    }
    if (r.would_block) break;
  }
  if (next == iov.size()) return true;
  // The socket is full: keep the rest of these FPDUs, and pull no more until they are out.
  for (; next < iov.size(); ++next) {
    const auto* p = static_cast<const std::uint8_t*>(iov[next].iov_base);
    unsent_.insert(unsent_.end(), p, p + iov[next].iov_len);
  }
  return false;
}

void TcpConnectionState::act_on_endpoint() {
  transmit();
  drain_completions();
  if (const auto& t = endpoint_.terminate_received()) {
    record_final_state(ConnectionState::kError,
                       "the peer sent a Terminate: " + wire::to_string(*t));
  } else if (const auto& t = endpoint_.terminate_sent()) {
    record_final_state(ConnectionState::kError, "sent a Terminate: " + wire::to_string(*t));
  } else if (const auto& t = endpoint_.malformed_terminate_received()) {
    record_final_state(ConnectionState::kError, "the peer sent a " + wire::to_string(*t));
  }
  if (phase_ == Phase::kClosed) return;
  const bool terminating = endpoint_.state() != rdmap::EndpointState::kRunning;
  if (local_close_ && close_deadline_) arm_close_timer(*close_deadline_);
  if (terminating) arm_close_timer(runtime::Clock::now() + kTerminateLinger);
  if (phase_ == Phase::kOpen && (terminating || local_close_) && !tx_busy_ && unsent_.empty() &&
      !endpoint_.has_outgoing()) {
    // Everything (the Terminate last) is out: send our FIN and wait for the peer's.
    ::shutdown(fd_.get(), SHUT_WR);
    phase_ = Phase::kWriteClosed;
    cv_.notify_all();
  }
  update_interest();
}

void TcpConnectionState::on_peer_closed(bool reset, int err) {
  if (phase_ == Phase::kClosed) return;
  if (reset) {
    record_final_state(ConnectionState::kError,
                       "the connection was reset: " + runtime::errno_text(err));
  } else if (!decoder_.at_boundary() && !stream_failed_) {
    record_final_state(ConnectionState::kError,
                       "the peer closed the connection in the middle of an FPDU");
  } else {
    record_final_state(ConnectionState::kClosed, "the peer closed the connection");
  }
  close_socket(false);
}

void TcpConnectionState::close_socket(bool abortive) {
  if (phase_ == Phase::kClosed) return;
  if (close_timer_) {
    loop_.cancel_timer(*close_timer_);
    close_timer_.reset();
  }
  if (claim_timer_) {
    loop_.cancel_timer(*claim_timer_);
    claim_timer_.reset();
  }
  if (watching_) {
    // Always EPOLL_CTL_DEL, even for a socket closed right after: a close leaves the epoll
    // set only when no other process holds the file, and a fork()ed child does until it
    // execs or exits; a registration left behind would wake the event thread forever.
    loop_.unwatch(token_);
    watching_ = false;
  }
  if (receivers_ > 0 || tx_busy_) {
    // A receiver sleeps in poll(2) on this descriptor, or a writer is in sendmsg on it: its
    // number must not be reused before they leave. SHUT_RD wakes a receiver and puts nothing
    // on the wire; the close (with SO_LINGER 0 when abortive: the RST) follows when the last
    // of them leaves.
    if (abortive) runtime::set_abortive_close(fd_.get());
    ::shutdown(fd_.get(), SHUT_RD);
    closing_fd_ = std::move(fd_);
  } else if (abortive) {
    runtime::close_abortive(fd_);
  } else {
    fd_.reset();
  }
  phase_ = Phase::kClosed;
  unsent_.clear();
  unsent_offset_ = 0;
  endpoint_.on_connection_lost();  // outstanding requests complete with errors
  drain_completions();
  cv_.notify_all();
}

void TcpConnectionState::arm_close_timer(runtime::TimePoint deadline) {
  if (close_timer_) return;
  close_timer_ = loop_.add_timer(deadline, [self = shared_from_this()] {
    Guard guard(*self);
    self->close_timer_.reset();
    if (self->phase_ == Phase::kClosed) return;
    self->record_final_state(ConnectionState::kError,
                             "the peer did not close the connection in time");
    self->close_socket(true);
  });
}

void TcpConnectionState::update_interest() {
  if (!watching_) return;
  const bool want_out = phase_ == Phase::kOpen && !unsent_.empty();
  // No EPOLLIN while a thread receives: it reads, and a level-triggered readiness the event
  // thread may not act on (read_socket() leaves the socket to a RECV in flight) would spin it.
  const bool want_in = !rx_claimed_ && !rx_reading_;
  const std::uint32_t want = (want_in ? static_cast<std::uint32_t>(EPOLLIN) : 0u) |
                             (want_out ? static_cast<std::uint32_t>(EPOLLOUT) : 0u);
  if (want == interest_) return;
  interest_ = want;
  loop_.modify(token_, fd_.get(), interest_);
}

void TcpConnectionState::drain_completions() {
  // A writer's frames may point into the buffers of sends that completed when they were
  // framed: nothing is announced until it has written them (it drains when it is done).
  if (tx_busy_) return;
  while (auto wc = endpoint_.poll_completion()) {
    // A full queue drops the entry and counts the overrun, as a hardware CQ would: sizing
    // it is the application's part (completion_queue.h).
    if (!released_) {
      cq_->push(std::move(*wc));
      notify_pending_ = true;
    }
  }
}

void TcpConnectionState::record_final_state(ConnectionState state, std::string detail) {
  if (final_state_) return;
  final_state_ = state;
  detail_ = std::move(detail);
  cv_.notify_all();
}

}  // namespace rdma_interop::transport::tcp
