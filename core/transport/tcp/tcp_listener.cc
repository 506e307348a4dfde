#include "core/transport/tcp/tcp_listener.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "core/transport/tcp/tcp_connection.h"
#include "core/transport/tcp/tcp_connection_state.h"

namespace rdma_interop::transport::tcp {
cm::BacklogConfig backlog_config(const cm::MpaPolicy& policy, const ListenOptions& options) {
  cm::BacklogConfig c;
  c.backlog = static_cast<std::uint32_t>(std::max(options.backlog, 1));
  c.overflow = options.overflow;
  c.half_open_limit = options.half_open_limit;
  c.request_timeout = policy.request_timeout;
  c.decision_timeout = options.decision_timeout;
  c.overflow_timeout = options.overflow_timeout;
  return c;
}

TcpListenerState::TcpListenerState(runtime::EventLoop& loop, runtime::Fd listening,
                                   const cm::MpaPolicy& policy, const ListenOptions& options)
    : loop_(loop),
      listening_(std::move(listening)),
      policy_(policy),
      local_address_(runtime::local_address_of(listening_.get())),
      bound_to_one_address_(local_address_ != "?" && !local_address_.starts_with("0.0.0.0:")),
      backlog_(backlog_config(policy, options)) {}

int TcpListenerState::start() {
  interest_ = EPOLLIN;
  const auto token = loop_.watch(listening_.get(), interest_, shared_from_this());
  if (!token) return token.error();
  token_ = *token;
  watching_ = true;
  return 0;
}

void TcpListenerState::on_io(std::uint32_t) {
  // A bounded batch per wakeup; level-triggered epoll brings us back for the rest. (One per
  // wakeup would save the accept4 that says EAGAIN, but would also pause the drop policy
  // after every connection rather than after a batch, which changes which Requests wait
  // in the overflow queue and are dropped: tests/storm relies on this behaviour.)
  std::vector<Deferred> delivered;
  for (int i = 0; i < 64 && listening_ && interest_ != 0; ++i) {
    sockaddr_in peer{};
    socklen_t peer_length = sizeof peer;
    const int fd = ::accept4(listening_.get(), reinterpret_cast<sockaddr*>(&peer), &peer_length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the connection stays in the kernel's queue. Level-triggered
        // epoll would report it again at once, so look away for a moment.
        out_of_descriptors_ = true;
        loop_.add_timer(runtime::Clock::now() + std::chrono::milliseconds(100),
                        [weak = weak_from_this()] {
                          auto self = weak.lock();
                          if (!self) return;
                          self->out_of_descriptors_ = false;
                          self->after_engine();
                        });
      }
      break;  // EAGAIN: nothing more to accept now
    }
    const runtime::TimePoint now = runtime::Clock::now();
    const cm::BacklogConnId id = next_id_++;
    std::weak_ptr<TcpListenerState> weak = shared_from_this();
    MpaSession::Hooks hooks;
    hooks.on_request = [weak](const std::shared_ptr<MpaSession>& s) {
      if (auto self = weak.lock()) {
        self->on_request(s);
      } else {
        s->abort("the listener is closed");
      }
    };
    hooks.on_finished = [weak](const std::shared_ptr<MpaSession>& s, const SetupResult& r) {
      if (auto self = weak.lock()) self->on_finished(s, r);
    };
    // The engine and the handshake share `now`, so a request timeout the handshake reports
    // is one the engine also finds due (on_finished relies on it).
    auto session = std::make_shared<MpaSession>(
        loop_, SetupSocket{runtime::Fd(fd), peer, bound_to_one_address_ ? local_address_ : ""},
        cm::MpaHandshake::responder(policy_, now), std::nullopt, false, std::move(hooks));
    std::vector<Deferred> work;
    {
      std::lock_guard lock(mu_);
      sessions_[id] = Tracked{session, false};
      ids_[session.get()] = id;
      work = settle_locked(backlog_.on_tcp_accepted(id, now));
    }
    run_deferred(work);
    session->start();
    delivered.insert(delivered.end(), work.begin(), work.end());
  }
  after_engine();
  wake_acceptors(delivered);
}

void TcpListenerState::on_request(const std::shared_ptr<MpaSession>& session) {
  std::vector<Deferred> work;
  {
    std::lock_guard lock(mu_);
    const auto it = ids_.find(session.get());
    if (it == ids_.end() || closed_) {
      work.push_back({session, cm::BacklogActionType::kClose});
    } else {
      work = settle_locked(backlog_.on_request_complete(it->second, runtime::Clock::now()));
    }
  }
  run_deferred(work);
  after_engine();
  wake_acceptors(work);
}

void TcpListenerState::on_finished(const std::shared_ptr<MpaSession>& session,
                                   const SetupResult& result) {
  std::vector<Deferred> work;
  {
    std::lock_guard lock(mu_);
    const auto it = ids_.find(session.get());
    if (it == ids_.end()) return;  // closed by the listener: already accounted for
    const cm::BacklogConnId id = it->second;
    if (result.error && result.error->failure == cm::CmFailure::kRequestTimeout) {
      // The handshake's request timeout and the engine's half-open expiry are one deadline:
      // count it as the expiry it is, not as the peer going away.
      work = settle_locked(backlog_.on_timer(runtime::Clock::now()));
    }
    auto more = settle_locked(backlog_.on_peer_gone(id));
    work.insert(work.end(), more.begin(), more.end());
    const auto tracked = sessions_.find(id);
    if (tracked != sessions_.end()) {
      if (!tracked->second.handed_out && !result.connection) {
        // Handed out: the application learns the outcome from accept().
        std::erase_if(ready_, [&](const Handout& h) { return h.id == id; });
        if (result.error) record_failure(session, *result.error);
      }
      sessions_.erase(tracked);
    }
    ids_.erase(session.get());
  }
  run_deferred(work);
  after_engine();
  wake_acceptors(work);
}

bool TcpListenerState::decide(cm::BacklogConnId id, bool accept) {
  std::vector<Deferred> work;
  bool held = false;
  bool reschedule = false;
  {
    std::lock_guard lock(mu_);
    const std::uint32_t waiting_before = backlog_.counters().overflow_waiting;
    std::vector<cm::BacklogAction> actions;
    held = accept ? backlog_.on_accepted(id, actions) : backlog_.on_rejected(id, actions);
    // A Request leaving its slot moves the deadlines and the drop policy's pause only when
    // it lets a waiting one in; otherwise the timer at worst fires early and re-arms.
    reschedule = !actions.empty() || backlog_.counters().overflow_waiting != waiting_before;
    work = settle_locked(actions);
    if (held) {
      // The application's now: the session is no longer the listener's to close or count.
      if (const auto it = sessions_.find(id); it != sessions_.end()) {
        ids_.erase(it->second.session.get());
        sessions_.erase(it);
      }
    }
  }
  run_deferred(work);
  if (reschedule) {
    if (loop_.in_loop_thread()) {
      after_engine();
    } else {
      loop_.post([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->after_engine();
      });
    }
  }
  wake_acceptors(work);
  return held;
}

std::vector<TcpListenerState::Deferred> TcpListenerState::settle_locked(
    const std::vector<cm::BacklogAction>& actions) {
  // Events first: their peer addresses come from sessions the actions below may forget.
  for (const auto& e : backlog_.take_events()) {
    const auto it = sessions_.find(e.id);
    if (events_.size() == Listener::kMaxBacklogEvents) events_.pop_front();
    events_.push_back({e.type, e.reason,
                       it == sessions_.end() ? std::string() : it->second.session->peer_address(),
                       e.pending});
  }
  std::vector<Deferred> work;
  for (const auto& a : actions) {
    const auto it = sessions_.find(a.id);
    if (it == sessions_.end()) continue;  // already gone (its end is being reported)
    const auto session = it->second.session;
    if (a.type == cm::BacklogActionType::kDeliver) {
      ready_.push_back({session, a.id});
      work.push_back({session, a.type});  // wake_acceptors(), once the lock is released
      continue;
    }
    std::erase_if(ready_, [&](const Handout& h) { return h.id == a.id; });
    switch (a.type) {
      case cm::BacklogActionType::kRejectOverflow:
        record_failure(session, setup_failure(cm::CmFailure::kBacklogFull,
                                              "over the backlog: rejected with the overflow "
                                              "marker"));
        break;
      case cm::BacklogActionType::kClose:
        switch (a.reason) {
          case cm::BacklogCloseReason::kOverflowDropped:
            record_failure(session, setup_failure(cm::CmFailure::kConnectionClosed,
                                                  "over the backlog (drop policy) for longer "
                                                  "than the overflow timeout: closed"));
            break;
          case cm::BacklogCloseReason::kHalfOpenExpired:
            record_failure(
                session,
                setup_failure(cm::CmFailure::kRequestTimeout,
                              "no complete MPA Request within " +
                                  std::to_string(policy_.request_timeout.count()) + " ms"));
            break;
          case cm::BacklogCloseReason::kHalfOpenEvicted:
          case cm::BacklogCloseReason::kNone:
            record_failure(session, setup_failure(cm::CmFailure::kConnectionClosed,
                                                  "evicted: the half-open queue was full and "
                                                  "this was its oldest connection"));
            break;
        }
        break;
      case cm::BacklogActionType::kRejectExpired:
        if (!it->second.handed_out) {
          record_failure(session, setup_failure(cm::CmFailure::kLocalRejected,
                                                "the application did not decide within the "
                                                "decision timeout"));
        }
        break;
      case cm::BacklogActionType::kDeliver:
        break;
    }
    ids_.erase(session.get());
    sessions_.erase(it);
    work.push_back({session, a.type});
  }
  return work;
}

void TcpListenerState::run_deferred(const std::vector<Deferred>& work) {
  for (const auto& w : work) {
    switch (w.action) {
      case cm::BacklogActionType::kRejectOverflow:
        w.session->reject(cm::backlog_full_private_data(),
                          "the listener's backlog is full (overflow Reject sent)");
        break;
      case cm::BacklogActionType::kRejectExpired:
        w.session->reject({}, "no decision within the listener's decision timeout: rejected");
        break;
      case cm::BacklogActionType::kClose:
        w.session->abort("closed by the listener's backlog (expired, evicted or dropped)");
        break;
      case cm::BacklogActionType::kDeliver:
        break;  // wake_acceptors()
    }
  }
}

void TcpListenerState::wake_acceptors(const std::vector<Deferred>& work) {
  // Last, after every use of mu_: a woken next_request() then finds the lock free.
  for (const auto& w : work) {
    if (w.action == cm::BacklogActionType::kDeliver) cv_.notify_one();
  }
}

void TcpListenerState::after_engine() {
  std::optional<runtime::TimePoint> deadline;
  bool pause = out_of_descriptors_;
  {
    std::lock_guard lock(mu_);
    deadline = backlog_.next_deadline();
    // drop policy: while a Request waits for a slot, leave new connections in the kernel's
    // accept queue (TCP's own backlog) instead of reading more Requests we cannot serve.
    const auto c = backlog_.counters();
    if (backlog_.config().overflow == cm::BacklogOverflow::kDrop && c.overflow_waiting > 0) {
      pause = true;
    }
    if (closed_) return;
  }
  const std::uint32_t want = pause ? 0u : static_cast<std::uint32_t>(EPOLLIN);
  if (watching_ && want != interest_) {
    interest_ = want;
    loop_.modify(token_, listening_.get(), interest_);
  }
  if (timer_ && (!deadline || timer_->first != *deadline)) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  if (!deadline || timer_) return;
  timer_ = loop_.add_timer(*deadline, [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->on_timer();
  });
}

void TcpListenerState::on_timer() {
  timer_.reset();
  std::vector<Deferred> work;
  {
    std::lock_guard lock(mu_);
    work = settle_locked(backlog_.on_timer(runtime::Clock::now()));
  }
  run_deferred(work);
  after_engine();
  wake_acceptors(work);
}

void TcpListenerState::record_failure(const std::shared_ptr<MpaSession>& session,
                                      ConnectError error) {
  if (failures_.size() == Listener::kMaxSetupFailures) failures_.pop_front();
  const double elapsed =
      std::chrono::duration<double, std::milli>(runtime::Clock::now() - session->started()).count();
  failures_.push_back({session->peer_address(), std::move(error), elapsed});
}

std::vector<Listener::SetupFailure> TcpListenerState::take_setup_failures() {
  std::lock_guard lock(mu_);
  std::vector<Listener::SetupFailure> out(std::make_move_iterator(failures_.begin()),
                                          std::make_move_iterator(failures_.end()));
  failures_.clear();
  return out;
}

std::vector<Listener::BacklogEvent> TcpListenerState::take_backlog_events() {
  std::lock_guard lock(mu_);
  std::vector<Listener::BacklogEvent> out(std::make_move_iterator(events_.begin()),
                                          std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::optional<TcpListenerState::Handout> TcpListenerState::next_request(Millis timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !ready_.empty() || closed_; });
  if (ready_.empty() || closed_) return std::nullopt;
  Handout h = std::move(ready_.front());
  ready_.pop_front();
  if (auto it = sessions_.find(h.id); it != sessions_.end()) it->second.handed_out = true;
  return h;
}

cm::BacklogCounters TcpListenerState::counters() const {
  std::lock_guard lock(mu_);
  return backlog_.counters();
}

void TcpListenerState::close() {
  loop_.run([this] {
    std::vector<std::shared_ptr<MpaSession>> doomed;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      ready_.clear();
      // Requests the application holds stay its to decide; everything else goes now, each
      // counted as aborted so the counters still add up.
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (it->second.handed_out) {
          ++it;
          continue;
        }
        settle_locked(backlog_.on_peer_gone(it->first));
        ids_.erase(it->second.session.get());
        doomed.push_back(std::move(it->second.session));
        it = sessions_.erase(it);
      }
    }
    if (timer_) {
      loop_.cancel_timer(*timer_);
      timer_.reset();
    }
    if (watching_) {
      loop_.unwatch(token_);
      watching_ = false;
    }
    listening_.reset();
    for (const auto& s : doomed) s->abort("the listener is closed");
  });
  cv_.notify_all();
}

std::unique_ptr<PendingConnection> TcpListener::next_request(Millis timeout) {
  auto handout = state_->next_request(timeout);
  if (!handout) return nullptr;
  return std::make_unique<TcpPendingConnection>(loop_, state_, std::move(*handout));
}

TcpPendingConnection::~TcpPendingConnection() {
  // An undecided Request gets a polite answer rather than a silent close.
  reject({});
}

bool TcpPendingConnection::claim() {
  std::lock_guard lock(mu_);
  if (decided_) return false;
  decided_ = true;
  return true;
}

bool TcpPendingConnection::decide(bool accept) {
  // Too late (expired, or the peer left): the session already has its outcome. A listener
  // already gone leaves the Request to the application.
  if (auto state = state_.lock(); state && !state->decide(id_, accept)) return false;
  return session_->take_over();
}

Expected<std::unique_ptr<Connection>, ConnectError> TcpPendingConnection::accept(
    std::vector<std::uint8_t> private_data, const QpCaps& caps) {
  if (!claim()) {
    ConnectError e;
    e.kind = ConnectError::Kind::kInvalidArgument;
    e.detail = "this connection request was already accepted or rejected";
    return unexpected(std::move(e));
  }
  SetupResult result;
  if (decide(true)) {
    // The Reply, the wait for the RTR (bounded by the RTR timeout in peer-to-peer mode) and
    // the establishment all happen here, on the caller's thread.
    session_->accept(std::move(private_data), caps);
    result = std::move(*session_->run(runtime::Clock::time_point::max()));
  } else {
    result = session_->outcome().take();
  }
  if (result.connection) {
    return std::unique_ptr<Connection>(
        std::make_unique<TcpConnection>(loop_, std::move(result.connection)));
  }
  return unexpected(result.error.value_or(ConnectError{}));
}

void TcpPendingConnection::reject(std::vector<std::uint8_t> private_data) {
  if (!claim() || !decide(false)) return;
  session_->reject(std::move(private_data));
  (void)session_->run(runtime::Clock::time_point::max());  // the Reject Reply, then the close
}

}  // namespace rdma_interop::transport::tcp
