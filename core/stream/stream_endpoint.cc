#include "core/stream/stream_endpoint.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <unordered_map>
#include <utility>

#include "core/rdmap/memory_registry.h"
#include "core/runtime/socket_util.h"
#include "core/wire/iwarp_constants.h"

namespace rdma_interop::stream {
namespace {

using Clock = std::chrono::steady_clock;

// The session this thread receives for in blocking(), if any (StreamEndpoint::Session).
thread_local const void* receiving_here = nullptr;

messaging::EndpointConfig channel_config(const StreamEndpointConfig& c) {
  messaging::EndpointConfig e;
  e.max_message = c.session.max_message;
  e.receive_window = c.receive_window;
  // Deep enough that a stream's Write and its message, and the other streams' messages,
  // rarely wait for a slot; a refused message waits in the session's outbox.
  e.send_queue_depth = std::max<std::uint32_t>(18, c.receive_window + 2);
  e.send_queue_limit = 2 * c.receive_window;
  e.max_peers = c.max_sessions;
  return e;
}

void set_event(int fd, bool on) {
  std::uint64_t v = 1;
  if (on) {
    (void)!::write(fd, &v, sizeof v);
  } else {
    (void)!::read(fd, &v, sizeof v);
  }
}

// An eventfd kept set (readable) or not, `on` saying which: written or read only when that
// changes, so its counter is never above 1. A receiver's wake and an accept descriptor.
void set_level(int fd, bool& on, bool want) {
  if (fd < 0 || on == want) return;
  on = want;
  set_event(fd, want);
}

}  // namespace

// One session: its engine, the memory it registered, the messages the channel refused for
// now, and a descriptor per stream. Everything here is guarded by `mu`.
struct StreamEndpoint::Session : RegionSource {
  Session(StreamEndpoint& owner, SessionId session, Side side, const SessionConfig& config)
      : ep(owner), id(session), engine(config, side, *this) {}
  ~Session() override {
    for (auto& [stream, fd] : fds) fd.close();
  }

  // Registered with this session's connection, for local reads (a Write's source) and the
  // peer's Writes (a sink).
  std::optional<Region> acquire(std::size_t size) override {
    // Not zeroed: a page costs memory only once a Write or a send touches it.
    auto memory = std::make_unique_for_overwrite<std::uint8_t[]>(size);
    const std::span<std::uint8_t> span(memory.get(), size);
    auto stag = ep.channel_.register_memory(id, span, rdmap::kLocalWrite | rdmap::kRemoteWrite);
    if (!stag) return std::nullopt;
    const auto to = ep.channel_.tagged_offset(id, *stag, memory.get());
    if (!to) {
      ep.channel_.deregister_memory(id, *stag);
      return std::nullopt;
    }
    regions[*stag] = std::move(memory);
    return Region{span, *stag, *to};
  }
  void release(const Region& region) override {
    ep.channel_.deregister_memory(id, region.stag);
    regions.erase(region.stag);
  }

  // A stream's descriptor, made on the first fd() call: a stream nobody polls costs no
  // descriptor, and its readiness changes no syscall. It is the application's end of a
  // socketpair whose other end (`ours`) we keep, because an eventfd is always writable: a
  // writer waiting for POLLOUT would spin on one. POLLIN: an octet waits in it (put in from
  // our end when recv would not wait, taken back when that ends). POLLOUT: its send queue
  // has room (filled from its own end when send would wait, emptied at ours when not).
  struct Fd {
    int fd = -1;    // the application's end; -1: not asked for yet
    int ours = -1;
    bool readable = false;
    bool writable = true;  // a new socket's send queue is empty
    void close() {
      if (fd >= 0) ::close(fd);
      if (ours >= 0) ::close(ours);
      fd = ours = -1;
    }
  };
  // Sets the stream's descriptor as its readiness says, with syscalls only for what changed.
  void signal(StreamId stream, Fd& fd) {
    const Readiness r = engine.readiness(stream);
    const bool readable = r.readable || r.urgent || r.error;
    if (readable != fd.readable) {
      std::uint8_t octet = 1;
      if (readable) {
        (void)!::send(fd.ours, &octet, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      } else {
        (void)!::recv(fd.fd, &octet, 1, MSG_DONTWAIT);
      }
      fd.readable = readable;
    }
    const bool writable = r.writable || r.error;
    if (writable != fd.writable) {
      static const std::array<std::uint8_t, 16384> filler{};
      thread_local std::array<std::uint8_t, 16384> spill;
      if (writable) {
        while (::recv(fd.ours, spill.data(), spill.size(), MSG_DONTWAIT) > 0) {
        }
      } else {
        while (::send(fd.fd, filler.data(), filler.size(), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
        }
      }
      fd.writable = writable;
    }
  }

  StreamEndpoint& ep;
  SessionId id;
  std::mutex mu;
  std::condition_variable cv;
  // Declared before the engine: the engine gives its regions back when it goes.
  std::map<std::uint32_t, std::unique_ptr<std::uint8_t[]>> regions;
  StreamSession engine;
  std::deque<SessionOutput> outbox;  // refused by the channel, in order
  // The longest Write the connection posts inline (send_borrowed), from the application's
  // buffer: set when the session is made. 0 (verbs): every send is copied.
  std::uint32_t inline_limit = 0;
  std::unordered_map<StreamId, Fd> fds;
  std::vector<SessionOutput> scratch;
  // Set once, under `mu`; read without it by sessions() and reap_ended().
  std::atomic<bool> ended = false;
  bool reaped = false;  // its connection closed by reap_ended() (under sessions_mu_)
  bool retired = false;  // retire(): ends once its last stream is gone (under `mu`)
  // One of the threads blocking() makes wait receives on the session's connection itself
  // (MessageEndpoint::receive), so what it waits for costs no hand-off from the event
  // thread; the others wait on `cv`. `wake` (made on the first receive) ends that receive
  // when news comes from another thread; `woken`: written since the receiver last looked.
  bool receiving = false;
  bool woken = false;
  bool stop_receiving = false;  // the endpoint closes: waiters wait on `cv`
  std::uint32_t waiters = 0;    // on `cv`
  runtime::Fd wake;
  std::uint64_t wake_id = 0;  // runtime::WakeFd's: a wait may keep its POLL on it
  int wake_fd() {
    if (!wake) {
      wake = runtime::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
      wake_id = runtime::new_wake_id();
    }
    return wake.get();  // -1: no descriptor left
  }
};

namespace {

// The waits as the endpoint uses them: within 0..`most`, so a time point plus one never
// overflows (a caller's kForever-like figure, a negative one).
template <class Duration>
Duration within(Duration d, Duration most) {
  return std::clamp(d, Duration::zero(), most);
}

StreamEndpointConfig usable(StreamEndpointConfig c) {
  c.reader_wait = within(c.reader_wait, Millis(std::chrono::hours(1)));
  c.poll_first = within(c.poll_first, std::chrono::microseconds(std::chrono::seconds(1)));
  return c;
}

}  // namespace

StreamEndpoint::StreamEndpoint(std::unique_ptr<transport::Provider> provider,
                               StreamEndpointConfig config)
    : config_(usable(config)), provider_(std::move(provider)), channel_(channel_config(config)) {
  channel_.on_message([this](const messaging::Message& m) { on_message(m); });
  channel_.on_ready([this](messaging::PeerId id) { on_ready(id); });
  channel_.on_failure([this](messaging::PeerId id, const std::string& d) { on_end(id, d); });
  channel_.on_close([this](messaging::PeerId id, const std::string& d) { on_end(id, d); });
}

StreamEndpoint::~StreamEndpoint() {
  close();
}

std::string_view StreamEndpoint::scheme() const {
  return provider_->scheme();
}

Expected<transport::ProviderUri, std::string> StreamEndpoint::serve(
    const transport::ProviderUri& where) {
  if (listener_) return unexpected(std::string("this endpoint serves already"));
  transport::ListenOptions options(64);
  auto listener = provider_->listen(where, cm::MpaPolicy{}, options);
  if (!listener) return unexpected(transport::to_string(listener.error()));
  auto local = transport::parse_provider_uri(std::string(provider_->scheme()) + "://" +
                                             (*listener)->local_address());
  if (!local) return unexpected(local.error());
  listener_ = std::move(*listener);
  accept_thread_ = std::thread([this] { accept_loop(); });
  return *local;
}

void StreamEndpoint::accept_loop() {
  while (true) {
    {
      std::lock_guard lock(sessions_mu_);
      if (closing_) return;
    }
    reap_ended();
    auto pending = listener_->next_request(transport::Millis(200));
    if (!pending) continue;
    reap_ended();  // a session that ended meanwhile frees its place before this one takes it
    auto id = channel_.accept(*pending, pending->peer_address());
    if (id) add_session(*id, Side::kAcceptor);
  }
}

Expected<SessionId, std::string> StreamEndpoint::connect(const transport::ProviderUri& where) {
  reap_ended();
  transport::ConnectOptions options;
  options.timeout = transport::Millis(config_.setup_timeout.count());
  auto id = channel_.connect(*provider_, where, options, where.to_string());
  if (!id) return unexpected(transport::to_string(id.error()));
  add_session(*id, Side::kConnector);
  return *id;
}

std::shared_ptr<StreamEndpoint::Session> StreamEndpoint::add_session(SessionId id, Side side) {
  auto s = std::make_shared<Session>(*this, id, side, config_.session);
  s->inline_limit = channel_.max_inline_data(id);
  // The session's lock first: messages that arrive once it is in the map wait for the ones
  // that came before it (held in early_) to be processed, so none overtakes another.
  std::unique_lock lock(s->mu);
  std::vector<messaging::Message> early;
  std::vector<std::uint16_t> ports;
  {
    std::lock_guard map_lock(sessions_mu_);
    sessions_[id] = s;
    if (auto it = early_.find(id); it != early_.end()) {
      early = std::move(it->second);
      early_.erase(it);
    }
    for (const auto& [port, event] : listening_) ports.push_back(port);
  }
  for (std::uint16_t port : ports) s->engine.listen(port);
  for (const messaging::Message& m : early) {
    s->engine.on_message(m.payload);
    (void)channel_.release(m.id);
  }
  process(*s);
  return s;
}

std::shared_ptr<StreamEndpoint::Session> StreamEndpoint::find(SessionId id) const {
  std::lock_guard lock(sessions_mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

// Carries out what the engine asked for. `s.mu` held.
void StreamEndpoint::process(Session& s) {
  bool any = false;
  for (;;) {
    s.engine.take_outputs(s.scratch);
    if (s.scratch.empty()) break;
    any = true;
    for (SessionOutput& o : s.scratch) {
      switch (o.type) {
        case SessionOutput::Type::kMessage: {
          if (!s.outbox.empty()) {
            s.outbox.push_back(std::move(o));
            break;
          }
          const auto st = channel_.send(s.id, o.message, o.placement);
          if (st == messaging::SendStatus::kTryAgain) {
            s.outbox.push_back(std::move(o));
            s.engine.on_link_blocked();
          }
          // Any other refusal means the connection is gone: its end comes as news (on_end).
          break;
        }
        case SessionOutput::Type::kStreamChanged: {
          auto it = s.fds.find(o.stream);
          if (it == s.fds.end() || it->second.fd < 0) break;  // nobody asked for it yet
          s.signal(o.stream, it->second);
          break;
        }
        case SessionOutput::Type::kIncoming:
          note_incoming(o.port);
          break;
        case SessionOutput::Type::kFailed:
          // The peer broke the stream protocol: every stream of the session has failed (the
          // engine says so), and the connection ends with the Terminate RDMAP gives an error
          // of the layer above it: remote operation error, unspecified (RFC 5040 s7.4).
          channel_.terminate_peer(s.id,
                                  {wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                   wire::kRdmapCodeUnspecified},
                                  "the peer broke the stream protocol: " + o.detail);
          // Ended only once the Terminate is on its way: reap_ended() (the accept thread)
          // closes an ended session's peer, and a closed channel sends no Terminate.
          s.ended = true;
          break;
      }
    }
  }
  end_if_drained(s);
  if (!any) return;
  s.cv.notify_all();
  // The receiving waiter sleeps in the kernel on the connection: woken when its news came
  // from another thread (one processing the session's messages for it, an application
  // call); what it processes itself it looks at when its receive returns.
  if (s.receiving && receiving_here != &s) set_level(s.wake.get(), s.woken, true);
}

void StreamEndpoint::end_if_drained(Session& s) {
  if (s.retired && !s.ended && s.engine.stream_count() == 0) {
    s.ended = true;
    std::lock_guard lock(sessions_mu_);  // a session's lock, then sessions_mu_
    drained_ = true;
    reap_cv_.notify_all();
  }
}

void StreamEndpoint::retire(SessionId session) {
  auto s = find(session);
  if (!s) return;
  {
    std::lock_guard lock(sessions_mu_);
    if (closing_) return;
    if (!reaper_.joinable()) reaper_ = std::thread([this] { reap_loop(); });
  }
  std::lock_guard lock(s->mu);
  s->retired = true;
  end_if_drained(*s);
}

void StreamEndpoint::reap_loop() {
  std::unique_lock lock(sessions_mu_);
  for (;;) {
    reap_cv_.wait(lock, [&] { return closing_ || drained_; });
    if (closing_) return;
    drained_ = false;
    lock.unlock();
    reap_ended();
    lock.lock();
  }
}

void StreamEndpoint::note_incoming(std::uint16_t port) {
  std::lock_guard lock(sessions_mu_);
  ++incoming_gen_[port];
  // Not when the accept's own receive found it: it looks when the receive returns.
  if (accept_wake_ >= 0 && receiving_here != accept_session_) {
    set_level(accept_wake_, accept_woken_, true);
  }
  if (auto it = listening_.find(port); it != listening_.end()) it->second.set(true);
  incoming_cv_.notify_all();
}

void StreamEndpoint::on_message(const messaging::Message& m) {
  auto s = find(m.peer);
  if (!s) {
    std::lock_guard lock(sessions_mu_);
    if (sessions_.find(m.peer) == sessions_.end()) {
      // Before connect()/accept() has made the session: kept, with its buffer, until then.
      if (channel_.hold(m.id) == messaging::SendStatus::kOk) early_[m.peer].push_back(m);
      return;
    }
    s = sessions_[m.peer];
  }
  std::lock_guard lock(s->mu);
  s->engine.on_message(m.payload);
  process(*s);
}

void StreamEndpoint::on_ready(SessionId id) {
  auto s = find(id);
  if (!s) return;
  std::lock_guard lock(s->mu);
  while (!s->outbox.empty()) {
    SessionOutput& o = s->outbox.front();
    if (channel_.send(s->id, o.message, o.placement) == messaging::SendStatus::kTryAgain) break;
    s->outbox.pop_front();
  }
  if (s->outbox.empty()) s->engine.on_link_ready();
  process(*s);
}

void StreamEndpoint::on_end(SessionId id, const std::string& detail) {
  auto s = find(id);
  if (!s) return;
  std::lock_guard lock(s->mu);
  s->ended = true;
  s->outbox.clear();
  s->engine.on_session_end(detail);
  process(*s);
}

void StreamEndpoint::listen(std::uint16_t port) {
  {
    std::lock_guard lock(sessions_mu_);
    if (listening_[port].listeners++ > 0) return;  // listened on already
  }
  for (SessionId id : sessions()) {
    if (auto s = find(id)) {
      std::lock_guard lock(s->mu);
      s->engine.listen(port);
      process(*s);
    }
  }
}

void StreamEndpoint::stop_listening(std::uint16_t port) {
  {
    std::lock_guard lock(sessions_mu_);
    auto it = listening_.find(port);
    if (it == listening_.end() || --it->second.listeners > 0) return;
    if (it->second.fd >= 0) ::close(it->second.fd);
    listening_.erase(it);
  }
  for (SessionId id : sessions()) {
    if (auto s = find(id)) {
      std::lock_guard lock(s->mu);
      s->engine.stop_listening(port);
      process(*s);
    }
  }
  // An accept() waiting on the port wakes as for a new stream, and finds it not listened on.
  note_incoming(port);
}

Expected<StreamRef, StreamErrc> StreamEndpoint::open(SessionId session, std::uint16_t port,
                                                     std::span<const std::uint8_t> first) {
  if (drained_.exchange(false)) reap_ended();
  auto s = find(session);
  if (!s) return unexpected(StreamErrc::kSessionFailed);
  std::lock_guard lock(s->mu);
  auto id = s->engine.open(port, first);
  if (!id) return unexpected(id.error());
  s->fds[*id] = Session::Fd{};
  process(*s);
  return StreamRef{session, *id};
}

Expected<StreamRef, StreamErrc> StreamEndpoint::accept(std::uint16_t port, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    // Streams that come after this read bump the generation: the scan below may miss them,
    // the wait after it does not.
    std::uint64_t seen = 0;
    {
      std::lock_guard lock(sessions_mu_);
      seen = incoming_gen_[port];
    }
    for (SessionId id : sessions()) {
      auto s = find(id);
      if (!s) continue;
      StreamRef ref;
      {
        std::lock_guard lock(s->mu);
        auto stream = s->engine.accept(port);
        if (!stream) continue;
        s->fds[*stream] = Session::Fd{};
        process(*s);
        ref = StreamRef{id, *stream};
      }
      // The descriptor says whether another accept() would not wait: quiet once the last
      // waiting stream is taken (poll and selectors would wake for nothing, and a blocking
      // accept() after them would wait). Quieted first, then signaled again if any session
      // still has one, each under its own lock: an incoming stream meanwhile signals anyway.
      // (Nothing to do while nobody asked for the descriptor: accept_fd() looks when made.)
      bool polled = false;
      {
        std::lock_guard lock(sessions_mu_);
        if (auto it = listening_.find(port); it != listening_.end() && it->second.fd >= 0) {
          it->second.set(false);
          polled = true;
        }
      }
      if (polled) note_if_waiting(port);
      return ref;
    }
    std::unique_lock lock(sessions_mu_);
    auto it = listening_.find(port);
    if (it == listening_.end()) return unexpected(StreamErrc::kInvalid);
    if (closing_) return unexpected(StreamErrc::kSessionFailed);
    if (incoming_gen_[port] != seen) continue;  // one came during the scan: look again
    // Nothing waits: the descriptor goes quiet until the next incoming stream.
    it->second.set(false);
    if (timeout == Millis(0)) return unexpected(StreamErrc::kWouldBlock);
    const auto now = Clock::now();
    if (timeout != kForever && now >= deadline) return unexpected(StreamErrc::kWouldBlock);
    // With one session the streams come over its connection: wait receiving on it, as
    // blocking() does, so an OPEN is read and taken here with no hand-off from the event
    // thread. (With more, any of them may bring one: the event thread reads them.)
    if (const auto only = sessions_.size() == 1 ? sessions_.begin()->second : nullptr) {
      lock.unlock();
      std::unique_lock session_lock(only->mu);
      if (!only->receiving && !only->ended && !only->stop_receiving) {
        {
          // Under the session's lock, so one noted from now on wakes the receive: on this
          // session by process(), on a session that connects meanwhile by note_incoming().
          std::lock_guard map_lock(sessions_mu_);
          if (closing_ || incoming_gen_[port] != seen) continue;
          accept_wake_ = only->wake_fd();
          accept_session_ = only.get();
        }
        const Millis left =
            timeout == kForever ? Millis::max() : std::chrono::ceil<Millis>(deadline - now);
        const bool received = receive_for(*only, session_lock, left);
        {
          std::lock_guard map_lock(sessions_mu_);
          accept_wake_ = -1;
          accept_session_ = nullptr;
          set_level(only->wake.get(), accept_woken_, false);
        }
        if (received) continue;
      }
      session_lock.unlock();
      lock.lock();
    }
    const auto came = [&] { return closing_ || incoming_gen_[port] != seen; };
    if (timeout == kForever) {
      incoming_cv_.wait(lock, came);
    } else if (!incoming_cv_.wait_until(lock, deadline, came)) {
      return unexpected(StreamErrc::kWouldBlock);
    }
  }
}

template <class Call>
auto StreamEndpoint::blocking(StreamRef ref, Millis timeout, Call call)
    -> Expected<std::size_t, StreamErrc> {
  auto s = find(ref.session);
  if (!s) return unexpected(StreamErrc::kNoStream);
  const auto start = Clock::now();
  const auto deadline = timeout == kForever ? Clock::time_point::max() : start + timeout;
  std::unique_lock lock(s->mu);
  bool may_receive = true;  // until the channel says it cannot (verbs, a closed connection)
  for (;;) {
    Wait wait{.start = start, .deadline = deadline, .hold = std::nullopt};
    auto r = call(*s, wait);
    process(*s);
    if (r || r.error() != StreamErrc::kWouldBlock || timeout == Millis(0)) return r;
    const auto now = Clock::now();
    // A call that holds until a time no later than the deadline is called once more then,
    // whatever the clock says by now: its answer at that time is the one returned.
    const auto until = wait.hold ? *wait.hold : deadline;
    if (!wait.hold && now >= deadline) return r;
    const Millis left = until == Clock::time_point::max()
                            ? Millis::max()
                            : std::max(Millis(0), std::chrono::ceil<Millis>(until - now));
    if (may_receive && !s->receiving && !s->ended && !s->stop_receiving) {
      // Either way, look again before any wait: what came while the lock was let go (the
      // session's end, news processed on this very thread) notified nobody.
      may_receive = receive_for(*s, lock, left);
      continue;
    }
    ++s->waiters;
    if (until == Clock::time_point::max()) {
      s->cv.wait(lock);
    } else {
      (void)s->cv.wait_until(lock, until);
    }
    --s->waiters;
  }
}

bool StreamEndpoint::receive_for(Session& s, std::unique_lock<std::mutex>& lock, Millis timeout) {
  if (s.wake_fd() < 0) return false;  // no descriptor left: nothing could end the receive early
  s.receiving = true;
  lock.unlock();
  receiving_here = &s;
  const bool received =
      channel_.receive(s.id, {s.wake.get(), s.wake_id}, timeout, config_.poll_first);
  receiving_here = nullptr;
  lock.lock();
  s.receiving = false;
  set_level(s.wake.get(), s.woken, false);
  if (s.waiters > 0) s.cv.notify_all();  // one of them receives next
  return received;
}

Expected<std::size_t, StreamErrc> StreamEndpoint::send(StreamRef ref,
                                                       std::span<const std::uint8_t> data,
                                                       const IoOptions& options) {
  if (options.urgent) {
    return blocking(ref, options.timeout, [&](Session& s, Wait&) {
      return s.engine.send(ref.stream, data, true);
    });
  }
  std::size_t borrowed = 0;  // by the calls before: sent, whatever comes
  return blocking(ref, options.timeout,
                  [&](Session& s, Wait& wait) -> Expected<std::size_t, StreamErrc> {
                    const auto rest = data.subspan(borrowed);
                    borrowed += send_borrowed(s, ref.stream, rest);
                    // (An empty send goes to the engine, which answers a stream's error.)
                    if (borrowed > 0 && borrowed == data.size()) return borrowed;
                    // Only the reader keeps the rest from going from `data`: a blocking
                    // send waits a while for its WINDOW rather than copy the rest into the
                    // send ring (the copy a borrowed Write saves; stream layer notes of
                    // issue 24). Past that, or for a reader that does not read, it copies
                    // as TCP would: a send times out only on a full send buffer, and
                    // readiness says so.
                    if (data.size() - borrowed >= config_.session.zero_copy_threshold &&
                        s.inline_limit > 0 && s.engine.waits_for_reader(ref.stream)) {
                      // reader_wait is at most an hour (usable()): no overflow.
                      const auto until = std::min(wait.start + config_.reader_wait, wait.deadline);
                      if (Clock::now() < until) {
                        wait.hold = until;
                        return unexpected(StreamErrc::kWouldBlock);
                      }
                    }
                    auto copied = s.engine.send(ref.stream, data.subspan(borrowed));
                    if (borrowed == 0) return copied;
                    return borrowed + (copied ? *copied : 0);
                  });
}

std::size_t StreamEndpoint::send_borrowed(Session& s, StreamId stream,
                                          std::span<const std::uint8_t> data) {
  if (s.inline_limit == 0 || !s.outbox.empty() ||
      data.size() < config_.session.zero_copy_threshold) {
    return 0;
  }
  std::size_t taken = 0;
  // Each Write is one stretch of the reader's sink: a chunk that wraps its end is two.
  while (taken < data.size()) {
    auto b = s.engine.borrow(stream, data.subspan(taken), s.inline_limit);
    if (!b) break;
    // kNotNow: it could not be posted at once (no credit, another thread posting); anything
    // else: the connection is gone, which its end says. Either way send() takes the octets.
    if (channel_.send(s.id, b->message, b->placement) != messaging::SendStatus::kOk) break;
    s.engine.borrowed_sent(*b);
    taken += b->length;
  }
  return taken;
}

Expected<std::size_t, StreamErrc> StreamEndpoint::recv(StreamRef ref, std::span<std::uint8_t> out,
                                                       const IoOptions& options) {
  return blocking(ref, options.timeout, [&](Session& s, Wait&) {
    return s.engine.recv(ref.stream, out, options.urgent, options.peek);
  });
}

bool StreamEndpoint::at_mark(StreamRef ref) {
  auto s = find(ref.session);
  if (!s) return false;
  std::lock_guard lock(s->mu);
  return s->engine.at_mark(ref.stream);
}

Expected<std::size_t, StreamErrc> StreamEndpoint::shutdown_write(StreamRef ref) {
  return blocking(ref, Millis(0),
                  [&](Session& s, Wait&) { return s.engine.shutdown_write(ref.stream); });
}

void StreamEndpoint::close(StreamRef ref, bool abort) {
  auto s = find(ref.session);
  if (!s) return;
  std::lock_guard lock(s->mu);
  s->engine.close(ref.stream, abort);
  if (auto it = s->fds.find(ref.stream); it != s->fds.end()) {
    it->second.close();
    s->fds.erase(it);
  }
  process(*s);
}

Readiness StreamEndpoint::readiness(StreamRef ref) {
  auto s = find(ref.session);
  if (!s) return Readiness{false, false, false, false, true};
  std::lock_guard lock(s->mu);
  return s->engine.readiness(ref.stream);
}

int StreamEndpoint::fd(StreamRef ref) {
  auto s = find(ref.session);
  if (!s) return -1;
  std::lock_guard lock(s->mu);
  auto it = s->fds.find(ref.stream);
  if (it == s->fds.end()) return -1;
  if (it->second.fd < 0) {
    // The first ask: from now on the descriptor follows the stream, starting from now.
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
      return -1;
    }
    // The smallest send queue the kernel allows (it rounds up, ~4.5 KiB): what filling it,
    // to make it unwritable, costs.
    const int smallest = 1;
    (void)::setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &smallest, sizeof smallest);
    it->second.fd = pair[0];
    it->second.ours = pair[1];
    s->signal(ref.stream, it->second);
  }
  return it->second.fd;
}

void StreamEndpoint::AcceptEvent::set(bool want) {
  set_level(fd, on, want);
}

int StreamEndpoint::accept_fd(std::uint16_t port) {
  int fd = -1;
  {
    std::lock_guard lock(sessions_mu_);
    auto it = listening_.find(port);
    if (it == listening_.end() || closing_) return -1;
    if (it->second.fd >= 0) return it->second.fd;
    fd = it->second.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  // From now on every incoming stream sets it; the ones already waiting set it here.
  note_if_waiting(port);
  return fd;
}

void StreamEndpoint::note_if_waiting(std::uint16_t port) {
  for (SessionId id : sessions()) {
    auto s = find(id);
    if (!s) continue;
    std::lock_guard lock(s->mu);
    if (s->engine.waiting(port) > 0) {
      note_incoming(port);
      return;
    }
  }
}

std::vector<SessionId> StreamEndpoint::sessions() const {
  std::lock_guard lock(sessions_mu_);
  std::vector<SessionId> out;
  for (const auto& [id, s] : sessions_) {
    if (!s->ended) out.push_back(id);
  }
  return out;
}

void StreamEndpoint::reap_ended() {
  std::lock_guard reaping(reap_mu_);
  std::vector<std::shared_ptr<Session>> ended;
  {
    std::lock_guard lock(sessions_mu_);
    for (const auto& [id, s] : sessions_) {
      if (s->ended) ended.push_back(s);
    }
  }
  std::vector<SessionId> gone;
  for (const auto& s : ended) {
    bool close_peer = false;
    {
      std::lock_guard lock(sessions_mu_);
      close_peer = !std::exchange(s->reaped, true);
    }
    // Its place among the channel's peers (max_sessions) is free again; the connection is
    // over already, so the close does not wait for anything but the provider's thread.
    if (close_peer) channel_.close_peer(s->id, transport::Millis(100));
    std::lock_guard lock(s->mu);
    // Kept while the application holds a stream of it: those answer kSessionFailed, as a
    // socket whose connection broke does, until closed.
    if (s->engine.stream_count() == 0) gone.push_back(s->id);
  }
  std::lock_guard lock(sessions_mu_);
  for (SessionId id : gone) sessions_.erase(id);
}

std::optional<SessionCounters> StreamEndpoint::counters(SessionId id) const {
  auto s = find(id);
  if (!s) return std::nullopt;
  std::lock_guard lock(s->mu);
  return s->engine.counters();
}

std::optional<std::size_t> StreamEndpoint::stream_bytes(StreamRef ref) const {
  auto s = find(ref.session);
  if (!s) return std::nullopt;
  std::lock_guard lock(s->mu);
  if (!s->fds.contains(ref.stream)) return std::nullopt;
  // The descriptor's hash map node (a link and the entry) and a bucket's pointer.
  return s->engine.stream_bytes(ref.stream) + sizeof(decltype(s->fds)::value_type) +
         2 * sizeof(void*);
}

std::optional<messaging::PeerStats> StreamEndpoint::session_stats(SessionId id) const {
  return channel_.stats(id);
}

void StreamEndpoint::close() {
  {
    std::lock_guard lock(sessions_mu_);
    if (closing_) return;
    closing_ = true;
    reap_cv_.notify_all();
  }
  incoming_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();  // before the channel closes: it closes peers
  // Receiving waiters leave their receive now, and wait on `cv` from here on: the channel's
  // close waits for receives.
  std::vector<std::shared_ptr<Session>> all;  // the ended ones too: a waiter may be on one
  {
    std::lock_guard lock(sessions_mu_);
    for (const auto& [id, s] : sessions_) all.push_back(s);
  }
  for (const auto& s : all) {
    std::lock_guard lock(s->mu);
    s->stop_receiving = true;
    if (s->receiving) set_level(s->wake.get(), s->woken, true);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listener_) listener_->close();
  // The channel first: no handler runs after it, and no Write reads a ring any more.
  channel_.close();
  std::map<SessionId, std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(sessions_mu_);
    sessions.swap(sessions_);
    early_.clear();
  }
  for (auto& [id, s] : sessions) {
    std::lock_guard lock(s->mu);
    s->engine.on_session_end("the endpoint closed");
    process(*s);
  }
  sessions.clear();
  std::lock_guard lock(sessions_mu_);
  for (auto& [port, event] : listening_) {
    if (event.fd >= 0) ::close(event.fd);
  }
  listening_.clear();
}

}  // namespace rdma_interop::stream
