#include "core/transport/tcp/tcp_listener.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "core/transport/tcp/connection_core.h"

namespace rdma_interop::transport::tcp {

ListenerCore::ListenerCore(EventLoop& loop, Fd listening, const cm::MpaPolicy& policy,
                           int backlog)
    : loop_(loop),
      listening_(std::move(listening)),
      policy_(policy),
      backlog_(static_cast<std::size_t>(std::max(backlog, 1))),
      local_address_(local_address_of(listening_.get())) {}

void ListenerCore::start() {
  token_ = loop_.watch(listening_.get(), EPOLLIN, shared_from_this());
  watching_ = true;
}

void ListenerCore::on_io(std::uint32_t) {
  // A bounded batch per wakeup; level-triggered epoll brings us back for the rest.
  for (int i = 0; i < 64 && listening_; ++i) {
    const int fd = ::accept4(listening_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the connection stays in the kernel's queue. Level-triggered
        // epoll would report it again at once, so look away for a moment.
        loop_.rewatch(token_, 0);
        loop_.add_timer(Clock::now() + std::chrono::milliseconds(100),
                        [weak = weak_from_this()] {
                          auto self = weak.lock();
                          if (self && self->watching_) self->loop_.rewatch(self->token_, EPOLLIN);
                        });
      }
      return;  // EAGAIN: nothing more to accept now
    }
    Fd socket(fd);
    {
      std::lock_guard lock(mu_);
      counters_.tcp_accepted++;
    }
    if (tune_connection_socket(socket.get()) != 0) {
      std::lock_guard lock(mu_);
      counters_.setup_failures++;
      continue;
    }
    std::weak_ptr<ListenerCore> weak = shared_from_this();
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
    auto session = std::make_shared<MpaSession>(
        loop_, std::move(socket), cm::MpaHandshake::responder(policy_, Clock::now()),
        std::nullopt, false, std::move(hooks));
    {
      std::lock_guard lock(mu_);
      in_setup_.insert(session);
    }
    session->start();
  }
}

void ListenerCore::on_request(const std::shared_ptr<MpaSession>& session) {
  std::unique_lock lock(mu_);
  counters_.requests++;
  if (closed_ || ready_.size() >= backlog_) {
    // Over the backlog: reset, so a peer that retries comes back later.
    counters_.setup_failures++;
    ConnectError overflow;
    overflow.detail = closed_ ? "the listener is closed" : "the listener's backlog is full";
    record_failure(session, std::move(overflow));
    in_setup_.erase(session);
    lock.unlock();
    session->abort(closed_ ? "the listener is closed" : "the listener's backlog is full");
    return;
  }
  ready_.push_back(session);
  cv_.notify_all();
}

void ListenerCore::on_finished(const std::shared_ptr<MpaSession>& session,
                               const SetupResult& result) {
  std::lock_guard lock(mu_);
  // Handed to the application: it learns the outcome from accept().
  if (in_setup_.erase(session) == 0) return;
  std::erase(ready_, session);
  if (!result.connection) {
    counters_.setup_failures++;
    if (result.error) record_failure(session, *result.error);
  }
}

void ListenerCore::record_failure(const std::shared_ptr<MpaSession>& session,
                                  ConnectError error) {
  if (failures_.size() == Listener::kMaxSetupFailures) failures_.pop_front();
  const double elapsed =
      std::chrono::duration<double, std::milli>(Clock::now() - session->started()).count();
  failures_.push_back({session->peer_address(), std::move(error), elapsed});
}

std::vector<Listener::SetupFailure> ListenerCore::take_setup_failures() {
  std::lock_guard lock(mu_);
  std::vector<Listener::SetupFailure> out(std::make_move_iterator(failures_.begin()),
                                          std::make_move_iterator(failures_.end()));
  failures_.clear();
  return out;
}

std::shared_ptr<MpaSession> ListenerCore::next_request(Millis timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !ready_.empty() || closed_; });
  if (ready_.empty() || closed_) return nullptr;
  auto session = std::move(ready_.front());
  ready_.pop_front();
  in_setup_.erase(session);
  return session;
}

Listener::Counters ListenerCore::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void ListenerCore::close() {
  loop_.run([this] {
    std::unordered_set<std::shared_ptr<MpaSession>> sessions;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      sessions.swap(in_setup_);
      ready_.clear();
    }
    if (watching_) {
      loop_.unwatch(token_);
      watching_ = false;
    }
    listening_.reset();
    for (const auto& s : sessions) s->abort("the listener is closed");
  });
  cv_.notify_all();
}

std::unique_ptr<PendingConnection> TcpListener::next_request(Millis timeout) {
  auto session = core_->next_request(timeout);
  if (!session) return nullptr;
  return std::make_unique<TcpPendingConnection>(loop_, std::move(session));
}

TcpPendingConnection::~TcpPendingConnection() {
  std::lock_guard lock(mu_);
  if (decided_) return;
  // An undecided Request gets a polite answer rather than a silent close.
  loop_->post([session = session_] { session->reject({}); });
}

Expected<std::unique_ptr<Connection>, ConnectError> TcpPendingConnection::accept(
    std::vector<std::uint8_t> private_data, const QpCaps& caps) {
  {
    std::lock_guard lock(mu_);
    if (decided_) {
      ConnectError e;
      e.kind = ConnectError::Kind::kInvalidArgument;
      e.detail = "this connection request was already accepted or rejected";
      return unexpected(std::move(e));
    }
    decided_ = true;
  }
  loop_->post([session = session_, pd = std::move(private_data), caps]() mutable {
    session->accept(std::move(pd), std::move(caps));
  });
  // MPA setup bounds the wait: the RTR timeout in peer-to-peer mode, none otherwise.
  SetupResult result = session_->outcome().take();
  if (result.connection) {
    return std::unique_ptr<Connection>(
        std::make_unique<TcpConnection>(loop_, std::move(result.connection)));
  }
  return unexpected(result.error.value_or(ConnectError{}));
}

void TcpPendingConnection::reject(std::vector<std::uint8_t> private_data) {
  {
    std::lock_guard lock(mu_);
    if (decided_) return;
    decided_ = true;
  }
  loop_->post([session = session_, pd = std::move(private_data)]() mutable {
    session->reject(std::move(pd));
  });
}

}  // namespace rdma_interop::transport::tcp
