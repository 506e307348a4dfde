#include "core/messaging/message_endpoint.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "core/credit/credit_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/telemetry/connection_snapshot.h"
#include "core/telemetry/publisher.h"

namespace rdma_interop::messaging {
namespace {

using credit::ChannelAction;
using credit::ChannelState;
using transport::ConnectError;
using transport::Millis;
using Clock = std::chrono::steady_clock;

// wr_id: the peer in the high 32 bits, then a send flag, then the buffer index. The peer id
// is never reused, so a completion of a peer already gone finds nothing and is ignored.
constexpr std::uint64_t kSendFlag = 0x80000000u;
constexpr std::uint64_t kIndexMask = 0x7FFFFFFFu;
constexpr std::size_t kPollBatch = 64;

std::uint64_t make_wr_id(PeerId peer, bool send, std::uint32_t index) {
  return (std::uint64_t{peer} << 32) | (send ? kSendFlag : 0) | index;
}
PeerId wr_peer(std::uint64_t wr_id) {
  return static_cast<PeerId>(wr_id >> 32);
}
bool wr_is_send(std::uint64_t wr_id) {
  return (wr_id & kSendFlag) != 0;
}
std::uint32_t wr_index(std::uint64_t wr_id) {
  return static_cast<std::uint32_t>(wr_id & kIndexMask);
}

// A message id names the receive buffer the message sits in (same layout as a receive wr_id).
MessageId make_message_id(PeerId peer, std::uint32_t index) {
  return make_wr_id(peer, false, index);
}

ConnectError setup_error(std::string detail) {
  ConnectError e;
  e.kind = ConnectError::Kind::kSetup;
  e.detail = std::move(detail);
  return e;
}

ConnectError invalid_argument(std::string detail) {
  ConnectError e;
  e.kind = ConnectError::Kind::kInvalidArgument;
  e.detail = std::move(detail);
  return e;
}

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

// One peer: its channel (the decisions and the buffers) and its connection. `mu` guards both;
// it is taken after the dispatch lock and before the provider's.
struct Peer : std::enable_shared_from_this<Peer> {
  Peer(PeerId id_, std::string name_, std::string scheme_, const credit::ChannelConfig& config)
      : id(id_), name(std::move(name_)), scheme(std::move(scheme_)), channel(config) {}
  const PeerId id;
  const std::string name;
  std::string scheme;  // the provider's ("tcp", "verbs"), for telemetry
  std::mutex mu;
  std::condition_variable cv;  // its queue has room, it ended, or its work drained
  credit::PeerChannel channel;
  std::uint32_t rx_stag = 0;
  std::uint32_t tx_stag = 0;
  // The channel's actions not carried out yet, in its order, and whether a thread carries
  // them out now (it takes what others add before it stops: posts keep the channel's order,
  // and no thread waits for another's sendmsg while holding `mu`).
  std::deque<ChannelAction> outbox;
  bool posting = false;
  std::vector<ChannelAction> scratch;
  // Last member: destroyed first, so the provider stops touching the buffers above before
  // they are freed. Moved out only while no thread is posting (it is used without `mu` then).
  std::unique_ptr<transport::Connection> conn;
};

// What a handler is run for, in the order the channel found it.
struct Delivery {
  std::shared_ptr<Peer> peer;
  Message message;
};
struct Ready {
  PeerId peer;
};
struct Ended {
  PeerId peer;
  bool failed;
  std::string detail;
};
using Callback = std::variant<Delivery, Ready, Ended>;

// Per thread: inside which endpoints' calls this thread is (a completion made there is
// processed when the call returns, and no handler runs inside it), which endpoint's
// completions it is processing, and which endpoint's handlers it runs.
thread_local std::vector<const void*> api_calls;
thread_local const void* dispatching = nullptr;
thread_local const void* running_handlers = nullptr;

bool in_api_call(const void* state) {
  return std::find(api_calls.begin(), api_calls.end(), state) != api_calls.end();
}

}  // namespace

struct MessageEndpoint::State : std::enable_shared_from_this<State> {
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

  explicit State(EndpointConfig c)
      : config(std::move(c)),
        config_error(check_config(config)),
        peer_config(channel_config(config)),
        cq(std::make_shared<transport::CompletionQueue>(cq_entries(config))) {}

  static std::uint32_t cq_entries(const EndpointConfig& c) {
    const std::uint64_t per_peer =
        std::uint64_t{c.send_queue_depth} + c.receive_window + c.control_receives;
    return static_cast<std::uint32_t>(
        std::min<std::uint64_t>(per_peer * std::max(c.max_peers, 1u), 0x7FFFFFFF));
  }

  const EndpointConfig config;
  const std::string config_error;
  const credit::ChannelConfig peer_config;
  const std::shared_ptr<transport::CompletionQueue> cq;

  // The peers and setup bookkeeping (a leaf lock).
  mutable std::mutex peers_mu;
  std::condition_variable peers_cv;  // setups finished
  std::map<PeerId, std::shared_ptr<Peer>> peers;
  PeerId next_id = 1;
  std::uint32_t setups = 0;  // connect()/accept() calls in progress: close() waits for them
  bool stopping = false;     // close() began: no peer is added, no handler starts

  // One thread processes completions at a time, so they are taken in queue order. `again`:
  // there may be completions no dispatch has looked at yet (a producer notified while the
  // lock was held). `owed`: a completion was made inside an application call here.
  std::mutex dispatch_mu;
  std::atomic<bool> again{false};
  std::atomic<bool> owed{false};
  std::vector<rdmap::WorkCompletion> polled;   // dispatch_mu
  std::vector<std::shared_ptr<Peer>> touched;  // dispatch_mu

  // Handlers: what they are, what waits for them, who runs them (a leaf lock).
  std::mutex handlers_mu;
  std::condition_variable handlers_cv;  // the runner finished
  MessageHandler on_message;
  ReadyHandler on_ready;
  FailureHandler on_failure;
  CloseHandler on_close;
  std::deque<Callback> callbacks;
  bool running = false;  // a thread runs handlers now
  bool stopped = false;  // close(): no handler starts again

  std::mutex close_mu;  // serialises close() callers
  telemetry::PublisherRegistration registration;

  std::shared_ptr<Peer> find(PeerId id) const {
    std::lock_guard lock(peers_mu);
    auto it = peers.find(id);
    return it == peers.end() ? nullptr : it->second;
  }

  // The peer whose receive buffer a message id names, or null.
  std::shared_ptr<Peer> find_message(MessageId id) const {
    return wr_is_send(id) ? nullptr : find(wr_peer(id));
  }

  // --- carrying out what a channel decided ---

  // Carries out the channel's actions, in order. Called with `lock` held on p.mu; the posts
  // go to the provider with it released (a send may be a sendmsg), and it is held again on
  // return. If another thread is carrying out this peer's actions now, ours are left to it.
  void carry_out(std::unique_lock<std::mutex>& lock, Peer& p) {
    p.channel.take_actions(p.scratch);
    p.outbox.insert(p.outbox.end(), std::make_move_iterator(p.scratch.begin()),
                    std::make_move_iterator(p.scratch.end()));
    if (p.posting || p.outbox.empty()) return;
    p.posting = true;
    std::vector<ChannelAction> batch;
    std::vector<std::pair<ChannelAction, std::string>> refused;
    std::vector<std::uint32_t> unhandled;  // delivered with no handler: released at once
    while (!p.outbox.empty()) {
      batch.assign(std::make_move_iterator(p.outbox.begin()),
                   std::make_move_iterator(p.outbox.end()));
      p.outbox.clear();
      lock.unlock();
      for (ChannelAction& a : batch) carry_out_one(p, a, refused, unhandled);
      lock.lock();
      for (auto& [a, why] : refused) p.channel.on_post_refused(a, why);
      for (std::uint32_t index : unhandled) p.channel.delivered(index, Clock::now());
      refused.clear();
      unhandled.clear();
      p.channel.take_actions(p.scratch);
      p.outbox.insert(p.outbox.end(), std::make_move_iterator(p.scratch.begin()),
                      std::make_move_iterator(p.scratch.end()));
    }
    p.posting = false;
    p.cv.notify_all();  // a drop() waiting to take the connection
  }

  // One action, without p.mu (this thread is the peer's poster, so p.conn stays). What needs
  // the channel again is noted for the caller: a post the provider refused, a message no
  // handler takes.
  void carry_out_one(Peer& p, const ChannelAction& a,
                     std::vector<std::pair<ChannelAction, std::string>>& refused,
                     std::vector<std::uint32_t>& unhandled) {
    switch (a.type) {
      case ChannelAction::Type::kPostSend: {
        const rdmap::SendWr wr{
            make_wr_id(p.id, true, a.index), rdmap::WrOpcode::kSend,
            rdmap::Sge{reinterpret_cast<std::uint64_t>(p.channel.send_buffer(a.index)), a.length,
                       p.tx_stag}};
        const auto err = p.conn ? p.conn->post_send(wr) : rdmap::PostError::kNotConnected;
        if (err) refused.emplace_back(a, rdmap::post_error_name(*err));
        return;
      }
      case ChannelAction::Type::kPostRecv: {
        const rdmap::RecvWr wr{
            make_wr_id(p.id, false, a.index),
            rdmap::Sge{reinterpret_cast<std::uint64_t>(p.channel.receive_buffer(a.index)),
                       p.channel.buffer_size(), p.rx_stag}};
        const auto err = p.conn ? p.conn->post_recv(wr) : rdmap::PostError::kNotConnected;
        if (err) refused.emplace_back(a, rdmap::post_error_name(*err));
        return;
      }
      case ChannelAction::Type::kDeliver: {
        bool handled = false;
        {
          std::lock_guard lock(handlers_mu);
          if (on_message && !stopped) {
            callbacks.push_back(Delivery{p.shared_from_this(),
                                         Message{p.id, make_message_id(p.id, a.index), a.payload}});
            handled = true;
          }
        }
        // Without a handler a message is released as it arrives.
        if (!handled) unhandled.push_back(a.index);
        return;
      }
      case ChannelAction::Type::kTerminate:
        if (p.conn) p.conn->terminate(a.cause);
        return;
      case ChannelAction::Type::kReady:
        queue(Ready{p.id});
        p.cv.notify_all();
        return;
      case ChannelAction::Type::kFailed:
      case ChannelAction::Type::kClosed: {
        std::string detail = a.detail;
        if (a.type == ChannelAction::Type::kFailed && p.conn) {
          // The provider's own words for what happened to the connection, if it has any.
          const std::string conn_detail = p.conn->error_detail();
          if (!conn_detail.empty() && detail.find(conn_detail) == std::string::npos) {
            detail += ": " + conn_detail;
          }
        }
        queue(Ended{p.id, a.type == ChannelAction::Type::kFailed, std::move(detail)});
        p.cv.notify_all();
        return;
      }
    }
  }

  // Takes the connection out of a peer once no thread is posting on it (p.mu held).
  std::unique_ptr<transport::Connection> take_connection(std::unique_lock<std::mutex>& lock,
                                                         Peer& p) {
    p.cv.wait(lock, [&] { return !p.posting; });
    return std::move(p.conn);
  }

  void queue(Callback cb) {
    std::lock_guard lock(handlers_mu);
    if (!stopped) callbacks.push_back(std::move(cb));
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
    carry_out(lock, *p);
    if (ch.outstanding() == 0) p->cv.notify_all();
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
          carry_out(lock, *p);
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
    run_handlers();
  }

  // The end of an application call (the outermost one of this endpoint on this thread).
  void after_api_call() {
    if (owed.exchange(false)) dispatch();
    if (running_handlers == this) return;  // the runner on this thread takes what is queued
    bool pending = false;
    {
      std::lock_guard lock(handlers_mu);
      pending = !callbacks.empty() && !running && !stopped;
    }
    // Handlers never run inside an application's call: the provider's thread runs them.
    if (pending) {
      (void)cq->run_soon([weak = weak_from_this()] {
        if (auto s = weak.lock()) s->run_handlers();
      });
    }
  }

  // Runs the queued handlers, one at a time (one thread runs them; others leave theirs to it).
  void run_handlers() {
    {
      std::lock_guard lock(handlers_mu);
      if (running || stopped || callbacks.empty()) return;
      running = true;
    }
    const void* outer = std::exchange(running_handlers, this);
    for (;;) {
      Callback cb;
      MessageHandler message_handler;
      ReadyHandler ready_handler;
      FailureHandler failure_handler;
      CloseHandler close_handler;
      {
        std::lock_guard lock(handlers_mu);
        if (stopped || callbacks.empty()) {
          running = false;
          handlers_cv.notify_all();
          break;
        }
        cb = std::move(callbacks.front());
        callbacks.pop_front();
        message_handler = on_message;
        ready_handler = on_ready;
        failure_handler = on_failure;
        close_handler = on_close;
      }
      if (auto* d = std::get_if<Delivery>(&cb)) {
        if (message_handler) message_handler(d->message);
        {
          // Its buffer goes back (unless held or answered), and the grant with it. As in an
          // application call: what the posts complete is processed once the lock is let go.
          ApiCall call(*this);
          std::unique_lock lock(d->peer->mu);
          const auto now = Clock::now();
          d->peer->channel.delivered(wr_index(d->message.id), now);
          d->peer->channel.flush(now);
          carry_out(lock, *d->peer);
        }
      } else if (auto* r = std::get_if<Ready>(&cb)) {
        if (ready_handler) ready_handler(r->peer);
      } else if (auto* e = std::get_if<Ended>(&cb)) {
        if (e->failed && failure_handler) failure_handler(e->peer, e->detail);
        if (!e->failed && close_handler) close_handler(e->peer, e->detail);
      }
    }
    running_handlers = outer;
  }

  // --- peers ---

  // Closes a peer's connection, processes its flushes (up to `timeout`), forgets it, and
  // destroys the connection before its buffers.
  void drop(const std::shared_ptr<Peer>& p, Millis timeout) {
    std::unique_ptr<transport::Connection> doomed;
    {
      std::unique_lock lock(p->mu);
      p->channel.close();
      doomed = take_connection(lock, *p);
    }
    if (doomed) doomed->disconnect(timeout);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      dispatch();
      std::unique_lock lock(p->mu);
      if (p->channel.outstanding() == 0) break;
      if (p->cv.wait_until(lock, std::min(deadline, Clock::now() + Millis(10)),
                           [&] { return p->channel.outstanding() == 0; })) {
        break;
      }
      if (Clock::now() >= deadline) break;
    }
    {
      std::lock_guard lock(peers_mu);
      peers.erase(p->id);
    }
    doomed.reset();
  }

  std::vector<telemetry::ConnectionSnapshot> snapshots() const {
    std::vector<std::shared_ptr<Peer>> all;
    {
      std::lock_guard lock(peers_mu);
      for (const auto& [id, p] : peers) all.push_back(p);
    }
    std::vector<telemetry::ConnectionSnapshot> out;
    const auto now = Clock::now();
    for (const auto& p : all) {
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

  Expected<PeerId, ConnectError> add_peer(
      std::string name, std::string_view scheme,
      const std::function<Expected<std::unique_ptr<transport::Connection>, ConnectError>(
          const transport::QpCaps&, std::vector<std::uint8_t> credit_params)>& establish,
      const std::function<std::span<const std::uint8_t>(const transport::Connection&)>&
          peer_private_data);
};

Expected<PeerId, ConnectError> MessageEndpoint::State::add_peer(
    std::string name, std::string_view scheme,
    const std::function<Expected<std::unique_ptr<transport::Connection>, ConnectError>(
        const transport::QpCaps&, std::vector<std::uint8_t> credit_params)>& establish,
    const std::function<std::span<const std::uint8_t>(const transport::Connection&)>&
        peer_private_data) {
  if (!config_error.empty())
    return unexpected(invalid_argument("endpoint config: " + config_error));
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard lock(peers_mu);
    if (stopping) return unexpected(invalid_argument("the message endpoint is closed"));
    if (peers.size() >= config.max_peers) {
      return unexpected(invalid_argument("endpoint already has max_peers (" +
                                         std::to_string(config.max_peers) + ") peers"));
    }
    // In the map from the start: the peer may Send the moment setup completes, and its
    // channel keeps what comes before it knows the peer's numbers.
    peer = std::make_shared<Peer>(next_id++, std::move(name), std::string(scheme), peer_config);
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
  auto forget = [&] {
    std::lock_guard lock(peers_mu);
    peers.erase(peer->id);
  };

  transport::QpCaps caps;
  caps.max_send_wr = peer->channel.send_buffers();
  caps.max_recv_wr = peer->channel.receive_buffers();
  caps.cq = cq;
  for (std::uint32_t i = 0; i < peer->channel.receive_buffers(); ++i) {
    caps.initial_recvs.push_back(transport::InitialRecv{make_wr_id(peer->id, false, i),
                                                        peer->channel.receive_buffer(i),
                                                        peer->channel.buffer_size()});
  }
  const auto encoded = credit::encode_credit_params(peer->channel.announced());
  auto conn = establish(caps, std::vector<std::uint8_t>(encoded.begin(), encoded.end()));
  if (!conn) {
    forget();
    return unexpected(conn.error());
  }
  {
    std::lock_guard lock(peers_mu);
    if (stopping) {
      // close() ran while this peer was being set up and forgot it: its connection ends here,
      // before its buffers (peer) go.
      peers.erase(peer->id);
      conn->reset();
      return unexpected(invalid_argument("the message endpoint was closed during setup"));
    }
  }
  auto theirs_params = credit::decode_credit_params(peer_private_data(**conn));
  std::string refusal;
  {
    std::unique_lock lock(peer->mu);
    peer->conn = std::move(*conn);
    // An accepted peer's scheme is known only now: a pending request does not name its provider.
    if (peer->scheme.empty()) peer->scheme = peer->conn->info().scheme;
    if (!theirs_params) {
      refusal = "peer did not offer credit parameters: " +
                std::string(credit::describe(theirs_params.error()));
    } else {
      peer->rx_stag =
          peer->conn->register_memory(peer->channel.receive_memory().data(),
                                      peer->channel.receive_memory().size(), rdmap::kLocalWrite);
      peer->tx_stag =
          peer->conn->register_memory(peer->channel.send_memory().data(),
                                      peer->channel.send_memory().size(), rdmap::kLocalWrite);
      const auto now = Clock::now();
      auto started = peer->channel.established(*theirs_params, now);
      if (!started) {
        refusal = started.error();
      } else {
        // What arrived before, processed now, as the end of a batch.
        peer->channel.flush(now);
        carry_out(lock, *peer);
      }
    }
  }
  if (!refusal.empty()) {
    drop(peer, Millis(1000));
    return unexpected(setup_error(refusal));
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
  if (running_handlers == &s || dispatching == &s) {
    // From a handler: it cannot wait for itself. No further handler starts; the connections
    // are closed by the next close() (or the destructor) on another thread.
    std::lock_guard lock(s.handlers_mu);
    s.stopped = true;
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
  {
    std::unique_lock lock(s.handlers_mu);
    s.stopped = true;
    // The handler running now (if any) returns before close() goes on: after this no
    // handler runs again.
    s.handlers_cv.wait(lock, [&] { return !s.running; });
    s.callbacks.clear();
  }
  // No completion is processed any more once the handler is gone (set_handler waits for
  // the threads inside it).
  s.cq->set_handler(nullptr);
  // Connections go first (each Peer's last member), then their buffers. A connect() or
  // accept() still setting a peer up sees `stopping` when it returns and ends its own
  // connection; close() waits for it, so the endpoint may be destroyed when close() returns.
  std::map<PeerId, std::shared_ptr<Peer>> peers;
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
      conn = s.take_connection(lock, *p);
      p->cv.notify_all();  // wait_ready() callers: their peer is gone
    }
    conn.reset();
  }
}

void MessageEndpoint::on_message(MessageHandler handler) {
  std::lock_guard lock(state_->handlers_mu);
  state_->on_message = std::move(handler);
}

void MessageEndpoint::on_ready(ReadyHandler handler) {
  std::lock_guard lock(state_->handlers_mu);
  state_->on_ready = std::move(handler);
}

void MessageEndpoint::on_failure(FailureHandler handler) {
  std::lock_guard lock(state_->handlers_mu);
  state_->on_failure = std::move(handler);
}

void MessageEndpoint::on_close(CloseHandler handler) {
  std::lock_guard lock(state_->handlers_mu);
  state_->on_close = std::move(handler);
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
    return unexpected(setup_error("peer did not offer credit parameters: " +
                                  std::string(credit::describe(theirs.error()))));
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

SendStatus MessageEndpoint::send(PeerId peer, std::span<const std::uint8_t> payload) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find(peer);
  if (!p) return SendStatus::kUnknownPeer;
  std::unique_lock lock(p->mu);
  const SendStatus status = p->channel.send(payload, Clock::now());
  s.carry_out(lock, *p);
  return status;
}

bool MessageEndpoint::wait_ready(PeerId peer, Millis timeout) {
  State& s = *state_;
  auto p = s.find(peer);
  if (!p) return false;
  std::unique_lock lock(p->mu);
  bool sendable = false;
  p->cv.wait_for(lock, timeout, [&] {
    if (p->channel.state() != ChannelState::kConnected) return true;
    sendable = p->channel.can_queue();
    return sendable;
  });
  return sendable && p->channel.state() == ChannelState::kConnected;
}

SendStatus MessageEndpoint::reply(MessageId message, std::span<const std::uint8_t> payload) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find_message(message);
  if (!p) return SendStatus::kNotHeld;
  std::unique_lock lock(p->mu);
  const SendStatus status = p->channel.reply(wr_index(message), payload, Clock::now());
  s.carry_out(lock, *p);
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
  s.carry_out(lock, *p);
  return status;
}

void MessageEndpoint::close_peer(PeerId peer, Millis timeout) {
  State& s = *state_;
  State::ApiCall call(s);
  auto p = s.find(peer);
  if (!p) return;
  s.drop(p, timeout);
}

std::vector<PeerId> MessageEndpoint::peers() const {
  std::vector<std::shared_ptr<Peer>> all;
  {
    std::lock_guard lock(state_->peers_mu);
    for (const auto& [id, p] : state_->peers) all.push_back(p);
  }
  std::vector<PeerId> out;
  for (const auto& p : all) {
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
  }
  st.credit = c.credit;
  st.queued = c.queued;
  st.replies_queued = c.replies_queued;
  st.held = c.held;
  st.refused = c.refused;
  st.messages_sent = c.messages_sent;
  st.bytes_sent = c.bytes_sent;
  st.messages_received = c.messages_received;
  st.bytes_received = c.bytes_received;
  st.lost = c.lost;
  st.held_released = c.held_released;
  st.stalled_ms = std::chrono::duration<double, std::milli>(c.stalled_for).count();
  return st;
}

EndpointStats MessageEndpoint::endpoint_stats() const {
  std::vector<std::shared_ptr<Peer>> all;
  {
    std::lock_guard lock(state_->peers_mu);
    for (const auto& [id, p] : state_->peers) all.push_back(p);
  }
  EndpointStats st;
  st.budget.cq_entries = state_->cq->entries();
  for (const auto& p : all) {
    std::lock_guard lock(p->mu);
    const auto b = p->channel.counters(Clock::now()).budget;
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
