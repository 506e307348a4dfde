#include "core/stream/stream_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <thread>

#include "core/runtime/socket_util.h"
#include "core/transport/provider_registry.h"
#include "core/transport/provider_uri.h"

namespace rdma_interop::stream {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(Millis timeout) {
  return timeout < Millis(0) ? Clock::time_point::max() : Clock::now() + timeout;
}

std::string address(const std::string& host, std::uint16_t port) {
  return host + ":" + std::to_string(port);
}

// A TCP connection to host:port, blocking up to `timeout`.
Expected<runtime::Fd, SocketError> tcp_connect(const std::string& host, std::uint16_t port,
                                               Millis timeout) {
  auto where = runtime::resolve_ipv4(host, port);
  if (!where) return unexpected(SocketError{EINVAL, where.error()});
  auto fd = runtime::make_tcp_socket();
  if (!fd) return unexpected(SocketError{fd.error(), runtime::errno_text(fd.error())});
  const int one = 1;
  (void)::setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd->get(), reinterpret_cast<const sockaddr*>(&*where), sizeof *where) != 0 &&
      errno != EINPROGRESS) {
    const int err = errno;
    return unexpected(SocketError{err, "connect to " + address(host, port) + ": " +
                                           runtime::errno_text(err)});
  }
  if (runtime::wait_for(fd->get(), POLLOUT, deadline_after(timeout)) == 0) {
    return unexpected(SocketError{ETIMEDOUT, "connect to " + address(host, port) + " timed out"});
  }
  if (const int err = runtime::socket_error(fd->get()); err != 0) {
    return unexpected(SocketError{err, "connect to " + address(host, port) + ": " +
                                           runtime::errno_text(err)});
  }
  return std::move(*fd);
}

}  // namespace

int errno_of(StreamErrc e) {
  switch (e) {
    case StreamErrc::kWouldBlock:
      return EAGAIN;
    case StreamErrc::kRefused:
      return ECONNREFUSED;
    case StreamErrc::kReset:
      return ECONNRESET;
    case StreamErrc::kBrokenPipe:
      return EPIPE;
    case StreamErrc::kNoStream:
      return EBADF;
    case StreamErrc::kNoUrgent:
      return EINVAL;
    case StreamErrc::kSessionFailed:
      return ENOTCONN;
    case StreamErrc::kInvalid:
      return EINVAL;
    case StreamErrc::kExhausted:
      return EADDRNOTAVAIL;
  }
  return EIO;
}

// ---- Socket ----------------------------------------------------------------------------

Socket::Socket(std::shared_ptr<StreamEndpoint> ep, StreamRef stream, std::string peer,
               std::string local, std::string session)
    : ep_(std::move(ep)),
      stream_(stream),
      peer_(std::move(peer)),
      local_(std::move(local)),
      session_(std::move(session)) {}

Socket::Socket(int fd, std::vector<std::uint8_t> first, std::string peer, std::string local)
    : fd_(fd), first_(std::move(first)), peer_(std::move(peer)), local_(std::move(local)) {}

Socket::~Socket() {
  close();
}

std::string Socket::describe() const {
  return stream_ ? "stream over " + session_ : std::string("tcp");
}

Expected<std::size_t, int> Socket::send(std::span<const std::uint8_t> data, const IoOptions& o) {
  if (closed_) return unexpected(EBADF);
  if (stream_) {
    auto r = ep_->send(*stream_, data, o);
    if (!r) return unexpected(errno_of(r.error()));
    return *r;
  }
  const auto until = deadline_after(o.timeout);
  const int flags = MSG_NOSIGNAL | MSG_DONTWAIT | (o.urgent ? MSG_OOB : 0);
  for (;;) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), flags);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN || o.timeout == Millis(0)) return unexpected(errno);
    if (runtime::wait_for(fd_, POLLOUT, until) == 0) return unexpected(EAGAIN);
  }
}

Expected<std::size_t, int> Socket::recv(std::span<std::uint8_t> out, const IoOptions& o) {
  if (closed_) return unexpected(EBADF);
  if (stream_) {
    auto r = ep_->recv(*stream_, out, o);
    if (!r) return unexpected(errno_of(r.error()));
    return *r;
  }
  if (!o.urgent && first_read_ < first_.size()) {
    const std::size_t n = std::min(out.size(), first_.size() - first_read_);
    std::copy_n(first_.begin() + static_cast<std::ptrdiff_t>(first_read_), n, out.begin());
    if (!o.peek) first_read_ += n;
    return n;
  }
  const auto until = deadline_after(o.timeout);
  const int flags = MSG_DONTWAIT | (o.urgent ? MSG_OOB : 0) | (o.peek ? MSG_PEEK : 0);
  for (;;) {
    const ssize_t n = ::recv(fd_, out.data(), out.size(), flags);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN || o.timeout == Millis(0)) return unexpected(errno);
    if (runtime::wait_for(fd_, POLLIN | POLLPRI, until) == 0) return unexpected(EAGAIN);
  }
}

bool Socket::at_mark() {
  if (closed_) return false;
  if (stream_) return ep_->at_mark(*stream_);
  int mark = 0;
  return ::ioctl(fd_, SIOCATMARK, &mark) == 0 && mark != 0;
}

Expected<std::size_t, int> Socket::shutdown_write() {
  if (closed_) return unexpected(EBADF);
  if (stream_) {
    auto r = ep_->shutdown_write(*stream_);
    if (!r) return unexpected(errno_of(r.error()));
    return std::size_t{0};
  }
  if (::shutdown(fd_, SHUT_WR) != 0) return unexpected(errno);
  return std::size_t{0};
}

void Socket::close(bool abort) {
  if (closed_) return;
  closed_ = true;
  if (stream_) {
    ep_->close(*stream_, abort);
  } else if (fd_ >= 0) {
    if (abort) runtime::set_abortive_close(fd_);
    ::close(fd_);
    fd_ = -1;
  }
}

int Socket::fileno() {
  if (closed_) return -1;
  return stream_ ? ep_->fd(*stream_) : fd_;
}

// ---- StreamListener ----------------------------------------------------------------------

// The listener's thread and what it shares with accept(): connections decided plain wait in
// `ready`, signalled on `event`.
struct StreamListener::State {
  runtime::Fd listen_fd;
  int event = -1;
  ServerOptions server;  // listeners is filled per connection (the address it came to)
  std::string session_port;
  std::mutex mu;
  std::deque<std::unique_ptr<Socket>> ready;
  ListenerCounters counters;
  bool stopping = false;
  std::thread thread;

  struct Judging {
    runtime::Fd fd;
    UpgradeServer engine;
    std::string peer;
    std::string local;
  };

  void run(Millis offer_wait, const std::string& scheme) {
    std::vector<Judging> judging;
    std::vector<std::uint8_t> buf(4096);
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) return;
      }
      std::vector<pollfd> fds{{listen_fd.get(), POLLIN, 0}};
      for (const Judging& j : judging) fds.push_back({j.fd.get(), POLLIN, 0});
      (void)::poll(fds.data(), fds.size(), 50);
      const auto now = Clock::now();
      if ((fds[0].revents & POLLIN) != 0) {
        for (;;) {
          const int c = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) break;
          const int one = 1;
          (void)::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          ServerOptions options = server;
          options.offer_wait = offer_wait;
          // Our session listener, at the address this client reached us by.
          const std::string local = runtime::local_address_of(c);
          const std::string host = local.substr(0, local.rfind(':'));
          options.listeners = {scheme + "://" + host + ":" + session_port};
          judging.push_back(Judging{runtime::Fd(c), UpgradeServer(options, now),
                                    runtime::peer_address_of(c), local});
        }
      }
      for (std::size_t i = 0; i < judging.size(); ++i) {
        Judging& j = judging[i];
        if (i + 1 < fds.size() && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const ssize_t n = ::recv(j.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT);
          if (n > 0) {
            j.engine.on_bytes({buf.data(), static_cast<std::size_t>(n)}, now);
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            j.engine.on_peer_closed(now);
          }
        }
        if (!j.engine.decision()) j.engine.on_timer(now);
      }
      // Decided connections leave the list: answered ones go, plain ones wait for accept().
      std::vector<Judging> still;
      for (Judging& j : judging) {
        if (!j.engine.decision()) {
          still.push_back(std::move(j));
          continue;
        }
        const ServerDecision& d = *j.engine.decision();
        const auto out = j.engine.take_output();
        if (!out.empty()) (void)runtime::write_all(j.fd.get(), out, Clock::now() + Millis(1000));
        std::lock_guard lock(mu);
        switch (d.outcome) {
          case ServerOutcome::kUpgrade:
            // The client continues over the session; this connection has done its job.
            ++counters.upgraded;
            break;
          case ServerOutcome::kFailed:
            ++counters.failed;
            break;
          case ServerOutcome::kDeclined:
          case ServerOutcome::kPlain: {
            ++(d.outcome == ServerOutcome::kPlain ? counters.plain : counters.declined);
            auto sock = std::unique_ptr<Socket>(
                new Socket(j.fd.release(), d.client_octets, j.peer, j.local));
            sock->how_ = d.outcome == ServerOutcome::kPlain ? "plain_client" : "declined";
            ready.push_back(std::move(sock));
            std::uint64_t one = 1;
            (void)!::write(event, &one, sizeof one);
            break;
          }
        }
      }
      judging = std::move(still);
    }
  }
};

StreamListener::StreamListener(std::shared_ptr<StreamEndpoint> ep, std::shared_ptr<State> state,
                               std::uint16_t port, std::string local)
    : ep_(std::move(ep)), state_(std::move(state)), port_(port), local_(std::move(local)) {}

StreamListener::~StreamListener() {
  close();
}

Expected<std::unique_ptr<Socket>, SocketError> StreamListener::accept(Millis timeout) {
  const auto until = deadline_after(timeout);
  for (;;) {
    {
      std::lock_guard lock(state_->mu);
      if (state_->stopping) return unexpected(SocketError{EBADF, "the listener is closed"});
      if (!state_->ready.empty()) {
        auto s = std::move(state_->ready.front());
        state_->ready.pop_front();
        std::uint64_t v = 0;
        if (state_->ready.empty()) (void)!::read(state_->event, &v, sizeof v);
        return s;
      }
    }
    auto s = ep_->accept(port_, Millis(0));
    if (s) {
      const auto stats = ep_->session_stats(s->session);
      std::string peer = stats ? stats->peer_address : "session " + std::to_string(s->session);
      auto sock = std::unique_ptr<Socket>(
          new Socket(ep_, *s, peer, local_, std::string(ep_->scheme()) + "://" + peer));
      sock->how_ = "upgrade";
      return sock;
    }
    if (Clock::now() >= until) {
      return unexpected(SocketError{EAGAIN, "no connection within the timeout"});
    }
    pollfd fds[2] = {{state_->event, POLLIN, 0}, {ep_->accept_fd(port_), POLLIN, 0}};
    const auto left = std::chrono::duration_cast<Millis>(until - Clock::now()).count();
    (void)::poll(fds, 2, static_cast<int>(std::clamp<long long>(left, 0, 100)));
  }
}

std::vector<int> StreamListener::filenos() const {
  return {state_->event, ep_->accept_fd(port_)};
}

ListenerCounters StreamListener::counters() const {
  std::lock_guard lock(state_->mu);
  return state_->counters;
}

void StreamListener::close() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
  }
  if (state_->thread.joinable()) state_->thread.join();
  // Streams over sessions already up are refused from now on, as TCP connects are.
  ep_->stop_listening(port_);
  state_->listen_fd.reset();
  ::close(state_->event);
  state_->ready.clear();
}

// ---- StreamNode --------------------------------------------------------------------------

Expected<std::unique_ptr<StreamNode>, std::string> StreamNode::create(NodeConfig config) {
  const auto* entry = transport::find_provider(config.scheme);
  if (entry == nullptr) {
    return unexpected("no provider \"" + config.scheme + "\" (known: " +
                      transport::known_schemes() + ")");
  }
  if (auto why = config_problem(config.endpoint.session); !why.empty()) return unexpected(why);
  auto ep = std::make_shared<StreamEndpoint>(entry->open(), config.endpoint);
  return std::unique_ptr<StreamNode>(new StreamNode(std::move(config), std::move(ep)));
}

StreamNode::StreamNode(NodeConfig config, std::shared_ptr<StreamEndpoint> ep)
    : config_(std::move(config)),
      ep_(std::move(ep)),
      random_(std::random_device{}()),
      plain_(config_.plain_cache_size, config_.plain_cache_ttl) {
  for (auto& octet : id_) octet = static_cast<std::uint8_t>(random_());
}

StreamNode::~StreamNode() {
  ep_->close();
}

NodeCounters StreamNode::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

// Sessions are served on the first listen(), on the same host: a client that reached the
// TCP port can reach this too.
Expected<std::string, SocketError> StreamNode::serve_sessions(const std::string& host) {
  std::lock_guard lock(mu_);
  if (serving_) return *serving_;
  auto where = transport::parse_provider_uri(config_.scheme + "://" + host + ":0");
  if (!where) return unexpected(SocketError{EINVAL, where.error()});
  auto uri = ep_->serve(*where);
  if (!uri) return unexpected(SocketError{EADDRNOTAVAIL, uri.error()});
  serving_ = std::to_string(uri->port);
  return *serving_;
}

Expected<std::unique_ptr<StreamListener>, SocketError> StreamNode::listen(const std::string& host,
                                                                          std::uint16_t port,
                                                                          int backlog) {
  auto where = runtime::resolve_ipv4(host, port);
  if (!where) return unexpected(SocketError{EINVAL, where.error()});
  auto fd = runtime::make_tcp_socket();
  if (!fd) return unexpected(SocketError{fd.error(), runtime::errno_text(fd.error())});
  const int one = 1;
  (void)::setsockopt(fd->get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd->get(), reinterpret_cast<const sockaddr*>(&*where), sizeof *where) != 0 ||
      ::listen(fd->get(), backlog) != 0) {
    const int err = errno;
    return unexpected(SocketError{err, "listen on " + address(host, port) + ": " +
                                           runtime::errno_text(err)});
  }
  const std::string local = runtime::local_address_of(fd->get());
  const auto real_port =
      static_cast<std::uint16_t>(std::stoi(local.substr(local.rfind(':') + 1)));
  auto session_port = serve_sessions(host);
  if (!session_port) return unexpected(session_port.error());
  ep_->listen(real_port);
  auto state = std::make_shared<StreamListener::State>();
  state->listen_fd = std::move(*fd);
  state->event = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  state->server.server_id = id_;
  state->server.accept_upgrades = config_.accept_upgrades;
  state->session_port = *session_port;
  state->thread = std::thread([s = state.get(), wait = config_.offer_wait,
                               scheme = config_.scheme] { s->run(wait, scheme); });
  return std::unique_ptr<StreamListener>(new StreamListener(ep_, state, real_port, local));
}

std::optional<SessionId> StreamNode::session_for(const std::string& addr) {
  std::lock_guard lock(mu_);
  auto it = by_address_.find(addr);
  if (it == by_address_.end()) return std::nullopt;
  const auto sessions = ep_->sessions();
  if (std::find(sessions.begin(), sessions.end(), it->second) == sessions.end()) {
    by_address_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void StreamNode::retire(SessionId session) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(by_address_, [&](const auto& entry) { return entry.second == session; });
    std::erase_if(by_endpoint_, [&](const auto& entry) { return entry.second == session; });
    session_uri_.erase(session);
  }
  ep_->retire(session);
}

Expected<std::unique_ptr<Socket>, SocketError> StreamNode::plain_connect(const std::string& host,
                                                                         std::uint16_t port,
                                                                         Millis timeout,
                                                                         const char* how) {
  auto fd = tcp_connect(host, port, timeout);
  if (!fd) return unexpected(fd.error());
  const int raw = fd->release();
  auto sock = std::unique_ptr<Socket>(
      new Socket(raw, {}, runtime::peer_address_of(raw), runtime::local_address_of(raw)));
  sock->how_ = how;
  return sock;
}

Expected<std::unique_ptr<Socket>, SocketError> StreamNode::connect(const std::string& host,
                                                                   std::uint16_t port,
                                                                   Millis timeout) {
  const std::string addr = address(host, port);
  // A stream on `sid`, counted in `counted`. A session out of stream ids is retired, and
  // says EADDRNOTAVAIL: a new session takes this stream and the next.
  auto open_on = [&](SessionId sid, const char* how, std::uint64_t NodeCounters::*counted)
      -> Expected<std::unique_ptr<Socket>, SocketError> {
    auto s = ep_->open(sid, port);
    if (!s) {
      if (s.error() == StreamErrc::kExhausted) retire(sid);
      return unexpected(SocketError{errno_of(s.error()), std::string(errc_name(s.error()))});
    }
    std::string uri;
    {
      std::lock_guard lock(mu_);
      uri = session_uri_[sid];
      ++(counters_.*counted);
    }
    auto sock = std::unique_ptr<Socket>(
        new Socket(ep_, *s, addr, "session " + std::to_string(sid), uri));
    sock->how_ = how;
    return sock;
  };
  if (!config_.offer) return plain_connect(host, port, timeout, "plain");
  if (auto sid = session_for(addr)) {
    auto sock = open_on(*sid, "reuse", &NodeCounters::reused);
    if (sock || sock.error().code != EADDRNOTAVAIL) return sock;
  }
  {
    std::lock_guard lock(mu_);
    if (plain_.is_plain(addr, Clock::now())) {
      ++counters_.plain_cached;
      return plain_connect(host, port, timeout, "cache");
    }
  }
  const auto until = deadline_after(timeout);
  auto fd = tcp_connect(host, port, timeout);
  if (!fd) return unexpected(fd.error());
  Offer offer;
  offer.client_id = id_;
  {
    std::lock_guard lock(mu_);
    offer.nonce = random_();
  }
  offer.providers = {config_.scheme};
  const auto started = Clock::now();
  UpgradeClient client(offer, ClientOptions{config_.answer_timeout, {}}, started);
  if (!runtime::write_all(fd->get(), client.take_output(), until)) {
    return unexpected(SocketError{ECONNRESET, "the offer could not be sent to " + addr});
  }
  std::vector<std::uint8_t> buf(kMaxAnswerSize);
  while (!client.decision()) {
    const auto wake = std::min(until, client.next_deadline().value_or(until));
    if (runtime::wait_for(fd->get(), POLLIN, wake) != 0) {
      const ssize_t n = ::recv(fd->get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n > 0) {
        client.on_bytes({buf.data(), static_cast<std::size_t>(n)}, Clock::now());
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        client.on_peer_closed(Clock::now());
      }
    } else {
      client.on_timer(Clock::now());
    }
  }
  const ClientDecision& d = *client.decision();
  switch (d.outcome) {
    case ClientOutcome::kUpgrade: {
      fd->reset();
      for (;;) {
        std::optional<SessionId> sid;
        {
          std::lock_guard lock(mu_);
          // The server id is the answer's word, not proof: a session is reused only to the
          // same session URI, so an ANSWER naming another server's id cannot draw that
          // server's later streams to its own endpoint.
          if (auto it = by_endpoint_.find(d.answer->server_id); it != by_endpoint_.end()) {
            const auto uri = session_uri_.find(it->second);
            const auto sessions = ep_->sessions();
            if (uri != session_uri_.end() && uri->second == d.answer->uri &&
                std::find(sessions.begin(), sessions.end(), it->second) != sessions.end()) {
              sid = it->second;
            }
          }
        }
        const bool fresh = !sid;
        if (fresh) {
          auto where = transport::parse_provider_uri(d.answer->uri);
          if (!where) return unexpected(SocketError{EPROTO, where.error()});
          auto s = ep_->connect(*where);
          if (!s) return unexpected(SocketError{ECONNREFUSED, "session to " + d.answer->uri + ": " + s.error()});
          sid = *s;
          std::lock_guard lock(mu_);
          ++counters_.sessions;
          by_endpoint_[d.answer->server_id] = *sid;
          session_uri_[*sid] = d.answer->uri;
        }
        {
          std::lock_guard lock(mu_);
          by_address_[addr] = *sid;
        }
        auto sock = open_on(*sid, "upgrade", &NodeCounters::upgraded);
        // Found by the server's id (reached first by another name) and spent: retired, so
        // the next round connects a new session.
        if (sock || fresh || sock.error().code != EADDRNOTAVAIL) return sock;
      }
    }
    case ClientOutcome::kDeclined: {
      {
        std::lock_guard lock(mu_);
        ++counters_.declined;
      }
      const int raw = fd->release();
      auto sock = std::unique_ptr<Socket>(new Socket(
          raw, d.peer_octets, runtime::peer_address_of(raw), runtime::local_address_of(raw)));
      sock->how_ = "declined";
      return sock;
    }
    case ClientOutcome::kPlainPeer:
      break;
  }
  // A plain TCP server took our offer as its client's first octets: this connection is
  // spoiled. Reach it again the way any TCP client would, and remember it.
  fd->reset();
  {
    std::lock_guard lock(mu_);
    plain_.remember(addr, Clock::now());
    ++counters_.plain_peers;
  }
  const auto left = std::chrono::duration_cast<Millis>(until - Clock::now());
  return plain_connect(host, port, timeout < Millis(0) ? timeout : std::max(left, Millis(1)),
                       "plain_peer");
}

}  // namespace rdma_interop::stream
