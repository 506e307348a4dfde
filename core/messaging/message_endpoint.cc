#include "core/messaging/message_endpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>

#include "core/credit/credit_params.h"
#include "core/messaging/handler_queue.h"
#include "core/messaging/peer_link.h"
#include "core/telemetry/connection_snapshot.h"
#include "core/telemetry/publisher.h"

namespace rdma_interop::messaging {
namespace {

using credit::ChannelState;
using transport::connect_error;
using transport::ConnectError;
using transport::Millis;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kPollBatch = 64;

credit::ChannelConfig channel_config(const EndpointConfig& c) {
  credit::ChannelConfig cc;
  cc.max_message = c.max_message;
  cc.receive_window = c.receive_window;
  cc.control_receives = c.control_receives;
  cc.send_queue_depth = c.send_queue_depth;
  cc.control_send_slots = c.control_send_slots;
  cc.send_queue_limit = c.send_queue_limit;
  cc.reply_reserve = c.reply_reserve;
  cc.ignore_credits = c.ignore_credits;
  return cc;
}

std::string check_config(const EndpointConfig& c) {
  if (std::string problem = credit::config_problem(channel_config(c)); !problem.empty()) {
    return problem;
  }
  if (c.max_peers == 0) return "max_peers must be at least 1";
  return {};
}

// Per thread: inside which endpoints' calls this thread is (a completion made there is
// processed when the call returns, and no handler runs inside it), and which endpoint's
// completions it is processing.
thread_local std::vector<const void*> api_calls;
thread_local const void* dispatching = nullptr;

bool in_api_call(const void* state) {
  return std::find(api_calls.begin(), api_calls.end(), state) != api_calls.end();
}

}  // namespace

struct MessageEndpoint::State : std::enable_shared_from_this<State> {
  explicit State(EndpointConfig c)
      : config(std::move(c)),
        config_error(check_config(config)),
        peer_config(channel_config(config)),
        cq(std::make_shared<transport::CompletionQueue>(cq_entries(config))),
        handlers([this](const Delivery& d) { after_delivery(d); }) {}

  static std::uint32_t cq_entries(const EndpointConfig& c) {
    const std::uint64_t per_peer =
        std::uint64_t{c.send_queue_depth} + c.receive_window + c.control_receives;
    return static_cast<std::uint32_t>(
        std::min<std::uint64_t>(per_peer * std::max(c.max_peers, 1u), 0x7FFFFFFF));
  }

  // Marks the thread as inside one of the endpoint's calls; at the end of the outermost one
  // it processes what the call's posts completed (after_api_call). Declared before the
  // call's lock guards, so it ends after they let go.
  class ApiCall {
   public:
    explicit ApiCall(State& s) : s_(s) { api_calls.push_back(&s); }
    ~ApiCall() {
      api_calls.pop_back();
      if (!in_api_call(&s_)) s_.after_api_call();
    }
    ApiCall(const ApiCall&) = delete;
    ApiCall& operator=(const ApiCall&) = delete;

   private:
    State& s_;
  };

  const EndpointConfig config;
  const std::string config_error;
  const credit::ChannelConfig peer_config;
  const std::shared_ptr<transport::CompletionQueue> cq;

  // The peers and setup bookkeeping (a leaf lock).
  mutable std::mutex peers_mu;
  std::condition_variable peers_cv;  // setups finished
  std::map<PeerId, std::shared_ptr<PeerLink>> peers;
  PeerId next_id = 1;
  std::uint32_t setups = 0;  // connect()/accept() calls in progress: close() waits for them
  bool stopping = false;     // close() began: no peer is added

  // One thread processes completions at a time, so they are taken in queue order. `again`:
  // there may be completions no dispatch has looked at yet (a producer notified while the
  // lock was held). `owed`: a completion was made inside an application call here.
  std::mutex dispatch_mu;
  std::atomic<bool> again{false};
  std::atomic<bool> owed{false};
  std::vector<rdmap::WorkCompletion> polled;       // dispatch_mu
  std::vector<std::shared_ptr<PeerLink>> touched;  // dispatch_mu

  HandlerQueue handlers;
  std::mutex close_mu;  // serialises close() callers
  telemetry::PublisherRegistration registration;

  std::shared_ptr<PeerLink> find(PeerId id) const {
    std::lock_guard lock(peers_mu);
    auto it = peers.find(id);
    return it == peers.end() ? nullptr : it->second;
  }

  // The peer whose receive buffer a message id names, or null.
  std::shared_ptr<PeerLink> find_message(MessageId id) const {
    return wr_is_send(id) ? nullptr : find(wr_peer(id));
  }

  // --- completions ---

  // One completion, in queue order (dispatch_mu held).
  void complete(const rdmap::WorkCompletion& wc, Clock::time_point now) {
    auto p = find(wr_peer(wc.wr_id));
    if (!p) return;  // a peer already gone
    std::unique_lock lock(p->mu);
    credit::PeerChannel& ch = p->channel;
    if (wc.status != rdmap::WcStatus::kSuccess && ch.state() == ChannelState::kConnected &&
        p->conn && p->conn->state() == transport::ConnectionState::kClosed) {
      // The flushes of a connection the peer closed in order: closed, not failed.
      const std::string why = p->conn->error_detail();
      ch.peer_closed(why.empty() ? "the peer closed the connection" : why);
    }
    const std::uint32_t index = wr_index(wc.wr_id);
    if (wr_is_send(wc.wr_id)) {
      ch.on_send_completed(index, wc.status, now);
    } else {
      ch.on_receive_completed(index, wc.byte_len, wc.status, now);
    }
    p->carry_out(lock, handlers);
    if (ch.awaited() == 0) p->cv.notify_all();
    if (touched.empty() || touched.back() != p) touched.push_back(std::move(p));
  }

  // Processes every completion in the queue, then ends the batch for each peer it touched
  // (queued messages, standalone grants). Never waits for another thread: when one holds
  // the dispatch lock, the work is left to it, and it looks again before it lets go.
  void dispatch() {
    again.store(true);
    for (;;) {
      if (!dispatch_mu.try_lock()) return;
      dispatching = this;
      while (again.exchange(false)) {
        const auto now = Clock::now();
        while (cq->poll_now(polled, kPollBatch) > 0) {
          for (const auto& wc : polled) complete(wc, now);
        }
        for (const auto& p : touched) {
          std::unique_lock lock(p->mu);
          p->channel.flush(now);
          p->carry_out(lock, handlers);
        }
        touched.clear();
      }
      dispatching = nullptr;
      dispatch_mu.unlock();
      // A producer that found the lock held just before it was let go set `again`.
      if (!again.load()) return;
    }
  }

  // The completion queue's handler: runs on whichever thread made a completion.
  void on_completion() {
    if (dispatching == this) {
      again.store(true);  // a post of this very dispatch: it looks again before it ends
      return;
    }
    if (in_api_call(this)) {
      owed.store(true);  // a post inside an application call: processed when it returns
      return;
    }
    dispatch();
    handlers.run();
  }

  // The end of an application call (the outermost one of this endpoint on this thread).
  void after_api_call() {
    if (owed.exchange(false)) dispatch();
    if (handlers.running_here()) return;  // the runner on this thread takes what is queued
    // Handlers never run inside an application's call: the provider's thread runs them.
    if (handlers.waiting()) {
      (void)cq->run_soon([weak = weak_from_this()] {
        if (auto s = weak.lock()) s->handlers.run();
      });
    }
  }

  // After a message's handler: its buffer goes back (unless held or answered), and the
  // grant with it. As in an application call: what the posts complete is processed once the
  // lock is let go.
  void after_delivery(const Delivery& d) {
    ApiCall call(*this);
    std::unique_lock lock(d.link->mu);
    const auto now = Clock::now();
    d.link->channel.delivered(wr_index(d.message.id), now);
    d.link->channel.flush(now);
    d.link->carry_out(lock, handlers);
  }

  // --- peers ---

  // Closes a peer's connection, processes its flushes (up to `timeout`), forgets it, and
  // destroys the connection before its buffers.
  void drop(const std::shared_ptr<PeerLink>& p, Millis timeout) {
    std::unique_ptr<transport::Connection> doomed;
    {
      std::unique_lock lock(p->mu);
      p->channel.close();
      doomed = p->take_connection(lock);
    }
    if (doomed) doomed->disconnect(timeout);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      dispatch();
      std::unique_lock lock(p->mu);
      // Unsignaled sends that went out complete nowhere: only what must complete is awaited.
      if (p->cv.wait_until(lock, std::min(deadline, Clock::now() + Millis(10)),
                           [&] { return p->channel.awaited() == 0; }) ||
          Clock::now() >= deadline) {
        break;
      }
    }
    {
      std::lock_guard lock(peers_mu);
      peers.erase(p->id);
    }
    doomed.reset();
  }

  std::vector<std::shared_ptr<PeerLink>> all_peers() const {
    std::lock_guard lock(peers_mu);
    std::vector<std::shared_ptr<PeerLink>> out;
    for (const auto& [id, p] : peers) out.push_back(p);
    return out;
  }

  std::vector<telemetry::ConnectionSnapshot> snapshots() const {
    std::vector<telemetry::ConnectionSnapshot> out;
    const auto now = Clock::now();
    for (const auto& p : all_peers()) {
      std::lock_guard lock(p->mu);
      if (!p->conn || p->channel.state() == ChannelState::kConnecting) continue;
      const credit::ChannelCounters c = p->channel.counters(now);
      telemetry::ConnectionSnapshot s;
      s.local_address = p->conn->info().local_address;
      s.peer_address = p->conn->info().peer_address;
      s.scheme = p->scheme;
      s.peer = p->name;
      s.state = std::string(state_name(p->channel.state()));
      s.queued = c.queued;
      s.queue_limit = config.send_queue_limit;
      s.held = c.held;
      s.refused = c.refused;
      s.credit = c.credit;
      out.push_back(std::move(s));
    }
    return out;
  }

  using Establish = std::function<Expected<std::unique_ptr<transport::Connection>, ConnectError>(
      const transport::QpCaps&, std::vector<std::uint8_t> credit_params)>;
  using PeerPrivateData =
      std::function<std::span<const std::uint8_t>(const transport::Connection&)>;
  Expected<PeerId, ConnectError> add_peer(std::string name, std::string_view scheme,
                                          const Establish& establish,
                                          const PeerPrivateData& peer_private_data);
};

Expected<PeerId, ConnectError> MessageEndpoint::State::add_peer(
    std::string name, std::string_view scheme, const Establish& establish,
    const PeerPrivateData& peer_private_data) {
  if (!config_error.empty()) {
    return unexpected(
        connect_error(ConnectError::Kind::kInvalidArgument, "endpoint config: " + config_error));
  }
  std::shared_ptr<PeerLink> peer;
  {
    std::lock_guard lock(peers_mu);
    if (stopping) {
      return unexpected(
          connect_error(ConnectError::Kind::kInvalidArgument, "the message endpoint is closed"));
    }
    if (peers.size() >= config.max_peers) {
      return unexpected(connect_error(
          ConnectError::Kind::kInvalidArgument,
          "endpoint already has max_peers (" + std::to_string(config.max_peers) + ") peers"));
    }
    // In the map from the start: the peer may Send the moment setup completes, and its
    // channel keeps what comes before it knows the peer's numbers.
    peer = std::make_shared<PeerLink>(next_id++, std::move(name), std::string(scheme), peer_config);
    peers[peer->id] = peer;
    ++setups;
  }
  // Counted until this call returns, whichever way: close() waits for it.
  struct SetupDone {
    State& s;
    ~SetupDone() {
      std::lock_guard lock(s.peers_mu);
      --s.setups;
      s.peers_cv.notify_all();
    }
  } setup_done{*this};

  transport::QpCaps caps;
  caps.max_send_wr = peer->channel.send_buffers();
  caps.max_recv_wr = peer->channel.receive_buffers();
  caps.cq = cq;
  caps.initial_recvs = peer->initial_receives();
  const auto encoded = credit::encode_credit_params(peer->channel.announced());
  auto conn = establish(caps, std::vector<std::uint8_t>(encoded.begin(), encoded.end()));
  {
    std::lock_guard lock(peers_mu);
    if (!conn || stopping) peers.erase(peer->id);
    if (!conn) return unexpected(conn.error());
    if (stopping) {
      // close() ran while this peer was being set up and forgot it: its connection ends here,
      // before its buffers (peer) go.
      conn->reset();
      return unexpected(connect_error(ConnectError::Kind::kInvalidArgument,
                                      "the message endpoint was closed during setup"));
    }
  }
  auto theirs = credit::decode_credit_params(peer_private_data(**conn));
  std::string refusal;
  {
    std::unique_lock lock(peer->mu);
    peer->conn = std::move(*conn);
    // An accepted peer's scheme is known only now: a pending request does not name its provider.
    if (peer->scheme.empty()) peer->scheme = peer->conn->info().scheme;
    if (!theirs) {
      refusal =
          "peer did not offer credit parameters: " + std::string(credit::describe(theirs.error()));
    } else {
      peer->register_buffers();
      const auto now = Clock::now();
      auto started = peer->channel.established(*theirs, now);
      if (!started) {
        refusal = started.error();
      } else {
        // What arrived before, processed now, as the end of a batch.
        peer->channel.flush(now);
        peer->carry_out(lock, handlers);
      }
    }
  }
  if (!refusal.empty()) {
    drop(peer, Millis(1000));
    return unexpected(connect_error(ConnectError::Kind::kSetup, refusal));
  }
  return peer->id;
}

// ---------------------------------------------------------------------------------------

MessageEndpoint::MessageEndpoint(EndpointConfig config)
    : state_(std::make_shared<State>(std::move(config))) {
  State& s = *state_;
  s.cq->set_handler([&s] { s.on_completion(); });
  if (s.config.publisher) {
    s.registration = telemetry::PublisherRegistration(
        s.config.publisher, telemetry::Publisher::ConnectionsFn([&s] { return s.snapshots(); }));
  }
}

MessageEndpoint::~MessageEndpoint() {
  close();
}

void MessageEndpoint::close() {
  State& s = *state_;
  if (s.handlers.running_here() || dispatching == &s) {
    // From a handler: it cannot wait for itself. No further handler starts; the connections
    // are closed by the next close() (or the destructor) on another thread.
    s.handlers.stop();
    return;
  }
  std::lock_guard closing(s.close_mu);
  // The publisher may be inside snapshots() with its own lock held: unregister first, and
  // without our locks (publisher.h's rule).
  s.registration.reset();
  {
    std::lock_guard lock(s.peers_mu);
    s.stopping = true;
  }
  // The handler running now (if any) returns before close() goes on: after this no handler
  // runs again.
  s.handlers.stop();
  // No completion is processed any more once the handler is gone (set_handler waits for
  // the threads inside it).
  s.cq->set_handler(nullptr);
  // Connections go first (each link's last member), then their buffers. A connect() or
  // accept() still setting a peer up sees `stopping` when it returns and ends its own
  // connection; close() waits for it, so the endpoint may be destroyed when close() returns.
  std::map<PeerId, std::shared_ptr<PeerLink>> peers;
  {
    std::unique_lock lock(s.peers_mu);
    s.peers_cv.wait(lock, [&] { return s.setups == 0; });
    peers.swap(s.peers);
  }
  for (auto& [id, p] : peers) {
    std::unique_ptr<transport::Connection> conn;
    {
      std::unique_lock lock(p->mu);
      p->channel.close();
      conn = p->take_connection(lock);
      p->cv.notify_all();  // wait_ready() callers: their peer is gone
    }
    conn.reset();
  }
}

void MessageEndpoint::on_message(MessageHandler handler) {
  state_->handlers.set(std::move(handler));
}

void MessageEndpoint::on_ready(ReadyHandler handler) {
  state_->handlers.set(std::move(handler));
}

void MessageEndpoint::on_failure(FailureHandler handler) {
  state_->handlers.set_failure(std::move(handler));
}

void MessageEndpoint::on_close(CloseHandler handler) {
  state_->handlers.set_close(std::move(handler));
}

Expected<PeerId, ConnectError> MessageEndpoint::connect(transport::Provider& provider,
                                                        const transport::ProviderUri& where,
                                                        transport::ConnectOptions options,
                                                        std::string name) {
  // close() on another thread waits for this setup and may then destroy the endpoint: the
  // state stays for the end of the call (ApiCall's work) through this reference.
  const std::shared_ptr<State> keep = state_;
  State::ApiCall call(*keep);
  const std::vector<std::uint8_t> app_data = std::move(options.private_data);
  return keep->add_peer(
      std::move(name), provider.scheme(),
      [&](const transport::QpCaps& caps, std::vector<std::uint8_t> params) {
        options.caps = caps;
        options.private_data = std::move(params);
        options.private_data.insert(options.private_data.end(), app_data.begin(), app_data.end());
        return provider.connect(where, options);
      },
      [](const transport::Connection& c) -> std::span<const std::uint8_t> {
        return c.info().received_frame.private_data;
      });
}

Expected<PeerId, ConnectError> MessageEndpoint::accept(transport::PendingConnection& pending,
                                                       std::string name,
                                                       std::vector<std::uint8_t> private_data) {
  const std::shared_ptr<State> keep = state_;  // as in connect()
  State::ApiCall call(*keep);
  auto theirs = credit::decode_credit_params(pending.request().private_data);
  if (!theirs) {
    const std::string why =
        "rdma-interop: no credit parameters: " + std::string(credit::describe(theirs.error()));
    pending.reject(std::vector<std::uint8_t>(why.begin(), why.end()));
    return unexpected(connect_error(
        ConnectError::Kind::kSetup,
        "peer did not offer credit parameters: " + std::string(credit::describe(theirs.error()))));
  }
  const std::vector<std::uint8_t> request_data = pending.request().private_data;
  return keep->add_peer(
      std::move(name), std::string_view{},
      [&](const transport::QpCaps& caps, std::vector<std::uint8_t> params) {
        params.insert(params.end(), private_data.begin(), private_data.end());
        return pending.accept(std::move(params), caps);
      },
      [&request_data](const transport::Connection&) -> std::span<const std::uint8_t> {
        return request_data;
      });
}

SendStatus MessageEndpoint::send(PeerId peer, std::span<const std::uint8_t> payload,
                                 const std::optional<credit::TaggedWrite>& write) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find(peer);
  if (!p) return SendStatus::kUnknownPeer;
  std::unique_lock lock(p->mu);
  // A borrowed write must be posted by this thread in carry_out below: not left to another.
  if (write && write->borrowed && !p->posts_at_once(write->length)) return SendStatus::kNotNow;
  const SendStatus status = p->channel.send(payload, Clock::now(), write);
  p->carry_out(lock, s.handlers);
  return status;
}

void MessageEndpoint::terminate_peer(PeerId peer, const wire::TerminateCause& cause,
                                     std::string detail) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find(peer);
  if (!p) return;
  std::unique_lock lock(p->mu);
  p->channel.terminate(cause, std::move(detail));
  p->carry_out(lock, s.handlers);
}

bool MessageEndpoint::wait_ready(PeerId peer, Millis timeout) {
  auto p = state_->find(peer);
  if (!p) return false;
  std::unique_lock lock(p->mu);
  p->cv.wait_for(lock, timeout, [&] {
    return p->channel.state() != ChannelState::kConnected || p->channel.can_queue();
  });
  return p->channel.state() == ChannelState::kConnected && p->channel.can_queue();
}

bool MessageEndpoint::receive(PeerId peer, runtime::WakeFd wake, transport::Millis timeout,
                              transport::Micros poll_first) {
  const int wake_fd = wake.fd;
  auto p = state_->find(peer);
  if (!p) return false;
  transport::Connection* conn = nullptr;
  {
    std::lock_guard lock(p->mu);
    if (!p->conn || p->channel.state() != ChannelState::kConnected) return false;
    conn = p->conn.get();
    ++p->receivers;  // `conn` stays until we leave (take_connection)
    if (wake_fd >= 0) p->receiver_wakes.push_back(wake_fd);
  }
  // Not an application call (ApiCall): what this thread receives, it processes and hands to
  // the handlers here, which is the point.
  const bool received =
      conn->receive_here(wake, wake_fd >= 0 ? timeout : std::min(timeout, kReceiveSlice),
                         poll_first);
  std::lock_guard lock(p->mu);
  if (wake_fd >= 0) {
    auto& wakes = p->receiver_wakes;
    wakes.erase(std::find(wakes.begin(), wakes.end(), wake_fd));
    if (!p->conn) {
      // take_connection() wrote it: that wake was ours, not the caller's to read.
      std::uint64_t v = 0;
      (void)!::read(wake_fd, &v, sizeof v);
    }
  }
  if (--p->receivers == 0) p->cv.notify_all();
  return received;
}

SendStatus MessageEndpoint::reply(MessageId message, std::span<const std::uint8_t> payload) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find_message(message);
  if (!p) return SendStatus::kNotHeld;
  std::unique_lock lock(p->mu);
  const SendStatus status = p->channel.reply(wr_index(message), payload, Clock::now());
  p->carry_out(lock, s.handlers);
  return status;
}

SendStatus MessageEndpoint::hold(MessageId message) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find_message(message);
  if (!p) return SendStatus::kNotHeld;
  std::lock_guard lock(p->mu);
  return p->channel.hold(wr_index(message));
}

SendStatus MessageEndpoint::release(MessageId message) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find_message(message);
  if (!p) return SendStatus::kNotHeld;
  std::unique_lock lock(p->mu);
  const auto now = Clock::now();
  const SendStatus status = p->channel.release(wr_index(message), now);
  // The buffer is posted again: its grant goes now if the window wants it.
  p->channel.flush(now);
  p->carry_out(lock, s.handlers);
  return status;
}

Expected<std::uint32_t, std::string> MessageEndpoint::register_memory(
    PeerId peer, std::span<std::uint8_t> region, std::uint32_t access) {
  auto p = state_->find(peer);
  if (!p) return unexpected(std::string("no such peer"));
  // `mu` keeps `conn` where it is: only take_connection() moves it, under `mu`.
  std::lock_guard lock(p->mu);
  if (!p->conn || p->channel.state() != ChannelState::kConnected) {
    return unexpected("the peer is " + std::string(state_name(p->channel.state())));
  }
  const std::uint32_t stag = p->conn->register_memory(region.data(), region.size(), access);
  if (stag == 0) return unexpected(std::string("the provider refused to register the memory"));
  return stag;
}

std::uint32_t MessageEndpoint::max_inline_data(PeerId peer) const {
  auto p = state_->find(peer);
  if (!p) return 0;
  std::lock_guard lock(p->mu);
  return p->conn ? p->conn->max_inline_data() : 0;
}

void MessageEndpoint::deregister_memory(PeerId peer, std::uint32_t stag) {
  auto p = state_->find(peer);
  if (!p) return;
  std::lock_guard lock(p->mu);
  if (p->conn) (void)p->conn->deregister_memory(stag);
}

std::optional<std::uint64_t> MessageEndpoint::tagged_offset(PeerId peer, std::uint32_t stag,
                                                            const void* addr) const {
  auto p = state_->find(peer);
  if (!p) return std::nullopt;
  std::lock_guard lock(p->mu);
  if (!p->conn) return std::nullopt;
  return p->conn->tagged_offset(stag, addr);
}

void MessageEndpoint::close_peer(PeerId peer, Millis timeout) {
  State& s = *state_;
  State::ApiCall call(s);
  if (auto p = s.find(peer)) s.drop(p, timeout);
}

std::vector<PeerId> MessageEndpoint::peers() const {
  std::vector<PeerId> out;
  for (const auto& p : state_->all_peers()) {
    std::lock_guard lock(p->mu);
    if (p->channel.state() != ChannelState::kConnecting) out.push_back(p->id);
  }
  return out;
}

std::optional<PeerStats> MessageEndpoint::stats(PeerId peer) const {
  auto p = state_->find(peer);
  if (!p) return std::nullopt;
  std::lock_guard lock(p->mu);
  if (p->channel.state() == ChannelState::kConnecting) return std::nullopt;
  const auto c = p->channel.counters(Clock::now());
  PeerStats st;
  st.name = p->name;
  st.state = p->channel.state();
  st.detail = p->channel.detail();
  if (p->conn) {
    st.terminate_sent = p->conn->terminate_sent();
    st.terminate_received = p->conn->terminate_received();
    st.local_address = p->conn->info().local_address;
    st.peer_address = p->conn->info().peer_address;
    st.receive = p->conn->receive_counters();
  }
  st.credit = c.credit;
  st.queued = c.queued;
  st.replies_queued = c.replies_queued;
  st.held = c.held;
  st.refused = c.refused;
  st.messages_sent = c.messages_sent;
  st.bytes_sent = c.bytes_sent;
  st.writes_sent = c.writes_sent;
  st.bytes_written = c.bytes_written;
  st.messages_received = c.messages_received;
  st.bytes_received = c.bytes_received;
  st.lost = c.lost;
  st.held_released = c.held_released;
  st.stalled_ms = std::chrono::duration<double, std::milli>(c.stalled_for).count();
  return st;
}

EndpointStats MessageEndpoint::endpoint_stats() const {
  EndpointStats st;
  st.budget.cq_entries = state_->cq->entries();
  const auto now = Clock::now();
  for (const auto& p : state_->all_peers()) {
    std::lock_guard lock(p->mu);
    const auto b = p->channel.counters(now).budget;
    st.budget.send_reserved += b.send_reserved;
    st.budget.receive_reserved += b.receive_reserved;
    st.budget.high_water += b.high_water;
    st.budget.reserved_total += b.reserved_total;
    st.budget.released_total += b.released_total;
    st.budget.refused += b.refused;
    st.bytes_allocated += p->channel.bytes_allocated();
  }
  st.cq = state_->cq->counters();
  return st;
}

}  // namespace rdma_interop::messaging
