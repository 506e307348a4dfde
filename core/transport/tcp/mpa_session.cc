#include "core/transport/tcp/mpa_session.h"

#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <array>

#include "core/transport/tcp/tcp_connection_state.h"

namespace rdma_interop::transport::tcp {
namespace {

// An honest peer sends one MPA frame (at most 20 + 512 octets) and maybe an RTR before
// setup completes; the data that may follow an RTR is read by the data path, not here.
constexpr std::size_t kMaxSetupOctets = 256 * 1024;

}  // namespace

MpaSession::MpaSession(runtime::EventLoop& loop, SetupSocket socket, cm::MpaHandshake handshake,
                       std::optional<QpCaps> caps, bool fell_back_to_revision1, Hooks hooks)
    : loop_(loop),
      fd_(std::move(socket.fd)),
      hs_(std::move(handshake)),
      caps_(std::move(caps)),
      fell_back_(fell_back_to_revision1),
      hooks_(std::move(hooks)),
      peer_address_(runtime::format_address(socket.peer)),
      local_address_(std::move(socket.local_address)) {}

MpaSession::~MpaSession() {
  // Only reached unfinished when the provider shuts down with the session still on it.
  if (!finished_) {
    outcome_.set(SetupResult{nullptr, setup_failure(cm::CmFailure::kConnectionClosed,
                                                    "the provider shut down during MPA setup")});
  }
}

void MpaSession::start() {
  std::lock_guard lock(mu_);
  interest_ = EPOLLIN;
  const auto token = loop_.watch(fd_.get(), interest_, shared_from_this());
  if (!token) {
    reset(cm::CmFailure::kConnectionReset,
          "cannot watch the socket: " + runtime::errno_text(token.error()));
    return;
  }
  token_ = *token;
  watching_ = true;
  drive_handshake();
}

std::optional<SetupResult> MpaSession::run(runtime::Clock::time_point until) {
  const auto self = shared_from_this();
  std::unique_lock lock(mu_);
  on_caller_ = true;
  drive_handshake();
  while (!finished_) {
    auto wake = until;
    if (const auto deadline = hs_.next_deadline()) wake = std::min(wake, *deadline);
    const auto want = static_cast<short>(POLLIN | (unsent_.empty() ? 0 : POLLOUT));
    // Not held while asleep: an event or timer the loop took before take_over() waits for
    // the lock only to find it is no longer the session's driver, and must not wait out
    // the peer's RTR (the event thread serves every other connection).
    lock.unlock();
    const short got = runtime::wait_for(fd_.get(), want, wake);
    lock.lock();
    if (got < 0) {
      reset(cm::CmFailure::kConnectionReset,
            "cannot wait on the socket: " + runtime::errno_text(errno));
      break;
    }
    if (got == 0) {
      const auto now = runtime::Clock::now();
      if (now >= until) {
        abort("setup timed out");
        return std::nullopt;
      }
      hs_.on_timer(now);
      drive_handshake();
      continue;
    }
    std::uint32_t events = 0;
    if ((got & POLLIN) != 0) events |= EPOLLIN;
    if ((got & POLLOUT) != 0) events |= EPOLLOUT;
    if ((got & POLLERR) != 0) events |= EPOLLERR;
    if ((got & POLLHUP) != 0) events |= EPOLLHUP;
    handle_io(events);
  }
  return outcome_.take();
}

bool MpaSession::take_over() {
  std::lock_guard lock(mu_);
  if (finished_) return false;
  stop_io();
  on_caller_ = true;
  return true;
}

void MpaSession::accept(std::vector<std::uint8_t> private_data, QpCaps caps) {
  std::lock_guard lock(mu_);
  if (finished_) return;
  caps_ = std::move(caps);
  hs_.accept(std::move(private_data), runtime::Clock::now());
  drive_handshake();
}

void MpaSession::reject(std::vector<std::uint8_t> private_data, std::string why) {
  std::lock_guard lock(mu_);
  if (finished_) return;
  reject_reason_ = std::move(why);
  hs_.reject(std::move(private_data), runtime::Clock::now());
  drive_handshake();
}

void MpaSession::abort(const std::string& why) {
  std::lock_guard lock(mu_);
  if (finished_) return;
  stop_io();
  runtime::close_abortive(fd_);
  finished_ = true;
  outcome_.set(SetupResult{nullptr, setup_failure(cm::CmFailure::kConnectionClosed, why)});
}

void MpaSession::on_io(std::uint32_t events) {
  const auto self = shared_from_this();  // a hook may drop the owner's reference
  {
    std::lock_guard lock(mu_);
    if (on_caller_) return;  // delivered after take_over(): the new owner reads the socket
    handle_io(events);
    if (!request_due_ || finished_) return;
    request_due_ = false;
  }
  // Announced with the lock released: the application thread that takes the Request over
  // must not wake only to wait for this thread to let go of the session.
  if (hooks_.on_request) {
    hooks_.on_request(self);
  } else {
    reject({});
  }
}

void MpaSession::handle_io(std::uint32_t events) {
  if ((events & EPOLLOUT) != 0) write_output();
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) == 0) {
    drive_handshake();
    return;
  }
  std::array<std::uint8_t, 16384> buffer;
  // Once a Request is complete the peer waits for our answer: no read that can only say
  // EAGAIN. Anything it sends regardless is read by whoever drives the session next.
  while (!finished_ && !hs_.finished() && !request_due_) {
    const runtime::IoResult r = runtime::read_some(fd_.get(), buffer);
    if (r.would_block) break;
    if (r.eof || r.error != 0) {
      hs_.on_peer_closed(r.error != 0, runtime::Clock::now());
      drive_handshake();
      break;
    }
    octets_in_ += r.bytes;
    if (octets_in_ > kMaxSetupOctets) {
      reset(cm::CmFailure::kUnexpectedFrame, "the peer sent more than " +
                                                 std::to_string(kMaxSetupOctets) +
                                                 " octets before MPA setup completed");
      return;
    }
    hs_.on_bytes(std::span(buffer).first(r.bytes), runtime::Clock::now());
    drive_handshake();
  }
  // A write above may have found the peer gone (the handshake then finished without a read):
  // its event is still to be handled.
  if (!finished_) drive_handshake();
}

void MpaSession::drive_handshake() {
  const auto self = shared_from_this();
  write_output();
  while (!finished_) {
    auto event = hs_.poll_event();
    if (!event) break;
    handle(std::move(*event));
  }
  if (!finished_) rearm_timer();
}

void MpaSession::handle(cm::CmEvent event) {
  switch (event.type) {
    case cm::CmEventType::kConnectRequest:
      request_ = event.peer_frame;
      request_due_ = true;  // on_io announces it once the lock is released
      break;
    case cm::CmEventType::kEstablished:
      establish();
      break;
    case cm::CmEventType::kFailed:
      fail(std::move(event));
      break;
    case cm::CmEventType::kRetryRevision1:
      stop_io();
      runtime::close_abortive(fd_);
      finish(SetupResult{nullptr, std::nullopt, true});
      break;
  }
}

void MpaSession::establish() {
  cm::Handover handover = hs_.take_handover();
  ConnectionInfo info;
  info.scheme = "tcp";
  info.params = handover.params;
  info.local_address =
      local_address_.empty() ? runtime::local_address_of(fd_.get()) : std::move(local_address_);
  info.peer_address = peer_address_;
  info.sent_frame = hs_.sent_frame().value_or(wire::MpaFrame{});
  info.received_frame = hs_.received_frame().value_or(wire::MpaFrame{});
  info.fell_back_to_revision1 = fell_back_;
  write_output();
  if (timer_) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  // The socket stays in epoll under its token; only its handler changes.
  const std::optional<runtime::EventLoop::Token> token =
      watching_ ? std::optional(token_) : std::nullopt;
  watching_ = false;
  auto state = std::make_shared<TcpConnectionState>(loop_, std::move(fd_), std::move(info),
                                                    std::move(handover), caps_.value_or(QpCaps{}),
                                                    std::move(unsent_));
  if (const int err = state->start(token); err != 0) {
    // The socket was reset: an error the application can act on, not a dead connection.
    finish(SetupResult{nullptr,
                       setup_failure(cm::CmFailure::kConnectionReset,
                                     "cannot watch the socket: " + runtime::errno_text(err))});
    return;
  }
  finish(SetupResult{std::move(state), std::nullopt});
}

void MpaSession::fail(cm::CmEvent event) {
  write_output();  // the Reject Reply or the Terminate goes out before the close
  if (event.failure == cm::CmFailure::kLocalRejected && !reject_reason_.empty()) {
    event.detail = reject_reason_;
  }
  ConnectError e = setup_failure(event.failure, std::move(event.detail));
  e.peer_frame = std::move(event.peer_frame);
  e.terminate = event.terminate;
  stop_io();
  if (hs_.close_requested() == cm::CloseKind::kAbortive) {
    runtime::close_abortive(fd_);
  } else {
    runtime::close_graceful(fd_);
  }
  finish(SetupResult{nullptr, std::move(e)});
}

void MpaSession::reset(cm::CmFailure failure, std::string why) {
  stop_io();
  runtime::close_abortive(fd_);
  finish(SetupResult{nullptr, setup_failure(failure, std::move(why))});
}

void MpaSession::finish(SetupResult result) {
  finished_ = true;
  const auto self = shared_from_this();
  if (hooks_.on_finished) hooks_.on_finished(self, result);
  outcome_.set(std::move(result));
}

void MpaSession::write_output() {
  const auto out = hs_.take_output();
  unsent_.insert(unsent_.end(), out.begin(), out.end());
  if (!fd_ || unsent_.empty()) return;
  const iovec part{unsent_.data(), unsent_.size()};
  const runtime::IoResult r = runtime::write_some(fd_.get(), std::span(&part, 1));
  unsent_.erase(unsent_.begin(), unsent_.begin() + static_cast<std::ptrdiff_t>(r.bytes));
  if (r.error != 0) {
    unsent_.clear();
    hs_.on_peer_closed(true, runtime::Clock::now());
  }
  const std::uint32_t want = unsent_.empty() ? EPOLLIN : (EPOLLIN | EPOLLOUT);
  if (watching_ && want != interest_) {
    interest_ = want;
    loop_.modify(token_, fd_.get(), interest_);
  }
}

void MpaSession::rearm_timer() {
  if (on_caller_) return;  // run() waits for the handshake's deadline itself
  const auto deadline = hs_.next_deadline();
  if (timer_ && (!deadline || timer_->first != *deadline)) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  if (!deadline || timer_) return;
  timer_ = loop_.add_timer(*deadline, [self = shared_from_this(), when = *deadline] {
    std::lock_guard lock(self->mu_);
    // Cancelled from another thread as it fired (re-armed, or taken over): not this timer's
    // turn. One deadline has one timer, so the deadline names it.
    if (!self->timer_ || self->timer_->first != when) return;
    self->timer_.reset();
    if (self->finished_) return;
    self->hs_.on_timer(runtime::Clock::now());
    self->drive_handshake();
  });
}

void MpaSession::stop_io() {
  if (timer_) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  if (watching_) {
    loop_.unwatch(token_);
    watching_ = false;
  }
}

}  // namespace rdma_interop::transport::tcp
