#include "core/messaging/message_endpoint.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "core/credit/credit_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/telemetry/connection_snapshot.h"
#include "core/telemetry/publisher.h"
#include "core/wire/iwarp_constants.h"

namespace rdma_interop::messaging {
namespace {

using credit::CompletionKind;
using credit::SendKind;
using transport::ConnectError;
using transport::Millis;

// wr_id: the peer in the high 32 bits, then a send flag, then the buffer index. The peer id
// is never reused, so a completion of a peer already gone finds nothing and is ignored.
constexpr std::uint64_t kSendFlag = 0x80000000u;
constexpr std::uint64_t kIndexMask = 0x7FFFFFFFu;

std::uint64_t make_wr_id(PeerId peer, bool send, std::uint32_t index) {
  return (std::uint64_t{peer} << 32) | (send ? kSendFlag : 0) | index;
}
PeerId wr_peer(std::uint64_t wr_id) { return static_cast<PeerId>(wr_id >> 32); }
bool wr_is_send(std::uint64_t wr_id) { return (wr_id & kSendFlag) != 0; }
std::uint32_t wr_index(std::uint64_t wr_id) { return static_cast<std::uint32_t>(wr_id & kIndexMask); }

// A message id names the receive buffer the message sits in (same layout as a receive wr_id).
MessageId make_message_id(PeerId peer, std::uint32_t index) { return make_wr_id(peer, false, index); }

// The Terminate a peer that broke the credit protocol gets. A message beyond its credits is
// what DDP calls a Send that found no buffer; a bad header is an RDMAP-level error of ours.
wire::TerminateCause cause_for(credit::CreditError e) {
  if (e == credit::CreditError::kPeerOverrun || e == credit::CreditError::kControlOverrun) {
    return {wire::TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer, wire::kDdpUntaggedCodeNoBuffer};
  }
  return {wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation, wire::kRdmapCodeUnspecified};
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

std::string check_config(const EndpointConfig& c) {
  if (c.max_message == 0 || c.max_message > 0x00FFFFFF) return "max_message must be 1..16777215";
  if (c.receive_window == 0 || c.receive_window > 0xFFFF) return "receive_window must be 1..65535";
  if (c.control_receives == 0 || c.control_receives > 0xFF) return "control_receives must be 1..255";
  if (c.control_send_slots == 0 || c.control_send_slots >= c.send_queue_depth) {
    return "control_send_slots must be at least 1 and below send_queue_depth";
  }
  if (c.reply_reserve >= c.receive_window) return "reply_reserve must be below receive_window";
  if (c.max_peers == 0) return "max_peers must be at least 1";
  return {};
}

}  // namespace

std::string_view status_name(SendStatus s) {
  switch (s) {
    case SendStatus::kOk: return "ok";
    case SendStatus::kTryAgain: return "try_again";
    case SendStatus::kTooLong: return "too_long";
    case SendStatus::kUnknownPeer: return "unknown_peer";
    case SendStatus::kPeerFailed: return "peer_failed";
    case SendStatus::kNotHeld: return "not_held";
  }
  return "unknown";
}

std::string_view state_name(PeerState s) {
  switch (s) {
    case PeerState::kConnecting: return "connecting";
    case PeerState::kConnected: return "connected";
    case PeerState::kFailed: return "failed";
    case PeerState::kClosed: return "closed";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// One peer: its connection, credit window, buffers and queues. Guarded by State::mu.

namespace {

enum class RxState : std::uint8_t {
  kPosted,      // on the receive queue
  kDelivering,  // its message is with the handler
  kHeld,        // the handler returned without answering: hold()
  kReplying,    // a reply is queued; posted again when the reply is
  kIdle,        // not posted (the connection failed)
};

enum class TxUse : std::uint8_t { kData, kControl, kUncredited };

struct QueuedReply {
  std::vector<std::uint8_t> payload;
  std::uint32_t rx_index = 0;
};

struct Peer {
  PeerId id = 0;
  std::string name;
  std::string scheme;  // the provider's ("tcp", "verbs"), for telemetry
  PeerState state = PeerState::kConnecting;
  std::string detail;

  std::optional<credit::CreditWindow> window;
  std::uint32_t peer_max_payload = 0;  // the peer's buffers, minus the credit header
  std::uint32_t reply_reserve = 0;

  // Buffers: receive_window + control_receives receive buffers, send_queue_depth send
  // buffers, each max_message + the header.
  std::uint32_t buffer_size = 0;
  std::unique_ptr<std::uint8_t[]> rx;
  std::unique_ptr<std::uint8_t[]> tx;
  std::uint32_t rx_count = 0;
  std::uint32_t tx_count = 0;
  std::vector<RxState> rx_state;
  std::vector<TxUse> tx_use;
  std::vector<std::uint32_t> tx_free;
  std::uint32_t rx_stag = 0;
  std::uint32_t tx_stag = 0;

  std::deque<std::vector<std::uint8_t>> requests;
  std::deque<QueuedReply> replies;
  bool refused_since_ready = false;

  // Work requests posted and not yet completed, by kind: each holds a budget entry.
  std::uint32_t outstanding_send = 0;
  std::uint32_t outstanding_recv = 0;
  std::vector<rdmap::WorkCompletion> early;  // completed before setup finished

  std::uint64_t refused = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t lost = 0;
  std::uint32_t held = 0;

  // Last member: destroyed first, so the provider stops touching the buffers above before
  // they are freed.
  std::unique_ptr<transport::Connection> conn;

  std::uint8_t* rx_buffer(std::uint32_t i) const { return rx.get() + std::size_t{i} * buffer_size; }
  std::uint8_t* tx_buffer(std::uint32_t i) const { return tx.get() + std::size_t{i} * buffer_size; }
  std::size_t bytes_allocated() const { return std::size_t{buffer_size} * (rx_count + tx_count); }
};

struct Delivery {
  std::shared_ptr<Peer> peer;
  Message message;
};

}  // namespace

struct MessageEndpoint::State {
  explicit State(EndpointConfig c)
      : config(std::move(c)),
        config_error(check_config(config)),
        cq(std::make_shared<transport::CompletionQueue>(cq_entries(config))),
        budget(credit::CompletionBudgetConfig{cq_entries(config), 0, 0}) {}

  static std::uint32_t cq_entries(const EndpointConfig& c) {
    const std::uint64_t per_peer =
        std::uint64_t{c.send_queue_depth} + c.receive_window + c.control_receives;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(per_peer * std::max(c.max_peers, 1u),
                                                              0x7FFFFFFF));
  }

  const EndpointConfig config;
  const std::string config_error;
  const std::shared_ptr<transport::CompletionQueue> cq;

  mutable std::mutex mu;
  std::condition_variable cv;  // a peer became ready, failed, or its work drained
  credit::CompletionBudget budget;
  std::map<PeerId, std::shared_ptr<Peer>> peers;
  PeerId next_id = 1;
  std::vector<rdmap::WorkCompletion> deferred;  // early completions of peers now set up
  MessageHandler on_message;
  ReadyHandler on_ready;
  FailureHandler on_failure;
  bool stopping = false;  // close() began: no handler starts, no peer is added
  std::uint32_t setups = 0;  // connect()/accept() calls in progress: close() waits for them
  // Serialises close() callers that are not the progress thread: only one joins it.
  std::mutex close_mu;

  // Collected under mu, called after it is released.
  std::vector<Delivery> deliveries;
  std::vector<PeerId> ready;
  std::vector<std::pair<PeerId, std::string>> failed;

  telemetry::PublisherRegistration registration;
  std::thread thread;

  // --- everything below runs with mu held ---

  std::shared_ptr<Peer> find(PeerId id) const {
    auto it = peers.find(id);
    return it == peers.end() ? nullptr : it->second;
  }

  std::shared_ptr<Peer> find_message(MessageId id, std::uint32_t& index) const {
    auto peer = find(wr_peer(id));
    if (!peer || wr_is_send(id)) return nullptr;
    index = wr_index(id);
    if (index >= peer->rx_count) return nullptr;
    return peer;
  }

  void fail(Peer& p, std::string why) {
    if (p.state != PeerState::kConnected && p.state != PeerState::kConnecting) return;
    p.state = PeerState::kFailed;
    p.detail = std::move(why);
    if (p.conn) {
      const std::string conn_detail = p.conn->error_detail();
      if (!conn_detail.empty() && p.detail.find(conn_detail) == std::string::npos) {
        p.detail += ": " + conn_detail;
      }
    }
    p.lost += p.requests.size() + p.replies.size();
    p.requests.clear();
    p.replies.clear();
    failed.emplace_back(p.id, p.detail);
    cv.notify_all();
  }

  // Ends a peer that broke the credit protocol with the protocol's Terminate.
  void terminate(Peer& p, credit::CreditError e) {
    const std::string why = "peer broke the credit protocol: " +
                            std::string(credit::describe(e)) + " (" +
                            std::string(credit::error_name(e)) + ")";
    if (p.conn) p.conn->terminate(cause_for(e));
    fail(p, why);
  }

  bool post_receive(Peer& p, std::uint32_t index) {
    if (!budget.reserve(CompletionKind::kReceive)) {
      fail(p, "completion queue budget exhausted for a receive");
      return false;
    }
    const rdmap::RecvWr wr{make_wr_id(p.id, false, index),
                           rdmap::Sge{reinterpret_cast<std::uint64_t>(p.rx_buffer(index)),
                                      p.buffer_size, p.rx_stag}};
    if (auto err = p.conn->post_recv(wr)) {
      (void)budget.release(CompletionKind::kReceive);
      p.rx_state[index] = RxState::kIdle;
      fail(p, "posting a receive failed: " + std::string(rdmap::post_error_name(*err)));
      return false;
    }
    ++p.outstanding_recv;
    p.rx_state[index] = RxState::kPosted;
    return true;
  }

  // A data message's buffer is done with: post it again and owe the peer a grant.
  void repost_data(Peer& p, std::uint32_t index) {
    if (p.rx_state[index] == RxState::kHeld) --p.held;
    if (p.state != PeerState::kConnected) {
      p.rx_state[index] = RxState::kIdle;
      return;
    }
    if (post_receive(p, index)) (void)p.window->on_receive_posted();
  }

  bool post_send_buffer(Peer& p, std::uint32_t tx_index, std::uint32_t length, TxUse use) {
    const rdmap::SendWr wr{make_wr_id(p.id, true, tx_index), rdmap::WrOpcode::kSend,
                           rdmap::Sge{reinterpret_cast<std::uint64_t>(p.tx_buffer(tx_index)),
                                      length, p.tx_stag}};
    p.tx_use[tx_index] = use;
    if (auto err = p.conn->post_send(wr)) {
      fail(p, "posting a send failed: " + std::string(rdmap::post_error_name(*err)));
      return false;
    }
    ++p.outstanding_send;
    return true;
  }

  // Posts one data message now if a credit, a send slot, a buffer and a completion entry
  // are all free; false (nothing changed) otherwise. A reply's receive buffer is posted
  // again just before its header is taken, so the grant rides on the reply itself.
  // `count_stall`: a refusal here is a new stall (a send() that found no credit), not a
  // queued message tried again, so the window's stall counters count each message once.
  bool try_post_data(Peer& p, std::span<const std::uint8_t> payload, bool is_reply,
                     std::optional<std::uint32_t> reply_rx, bool count_stall = false) {
    credit::CreditWindow& w = *p.window;
    const bool uncredited = config.ignore_credits && !w.can_send();
    if (!uncredited) {
      if (!w.can_send()) {
        if (count_stall) (void)w.send_message();  // refused: counts kNoCredit / kNoSendSlot
        return false;
      }
      if (!is_reply && !config.ignore_credits && w.credits() <= p.reply_reserve) return false;
    }
    if (p.tx_free.empty() || budget.available() == 0) return false;
    if (!budget.reserve(CompletionKind::kSend)) return false;
    if (reply_rx) repost_data(p, *reply_rx);
    if (p.state != PeerState::kConnected) {
      (void)budget.release(CompletionKind::kSend);
      return false;
    }
    credit::CreditHeader header;  // an uncredited message claims nothing
    if (!uncredited) header = *w.send_message();
    const std::uint32_t tx_index = p.tx_free.back();
    p.tx_free.pop_back();
    std::uint8_t* buf = p.tx_buffer(tx_index);
    const auto encoded = credit::encode_credit_header(header);
    std::memcpy(buf, encoded.data(), encoded.size());
    if (!payload.empty()) std::memcpy(buf + encoded.size(), payload.data(), payload.size());
    const auto length = static_cast<std::uint32_t>(encoded.size() + payload.size());
    if (!post_send_buffer(p, tx_index, length, uncredited ? TxUse::kUncredited : TxUse::kData)) {
      (void)budget.release(CompletionKind::kSend);
      p.tx_free.push_back(tx_index);
      return false;
    }
    ++p.messages_sent;
    p.bytes_sent += payload.size();
    return true;
  }

  // Moves what can go from the peer's queues onto the wire, then any standalone grant.
  void pump(Peer& p) {
    if (p.state != PeerState::kConnected) return;
    while (!p.replies.empty()) {
      QueuedReply& r = p.replies.front();
      if (!try_post_data(p, r.payload, true, r.rx_index)) break;
      p.replies.pop_front();
    }
    while (p.replies.empty() && !p.requests.empty()) {
      if (!try_post_data(p, p.requests.front(), false, std::nullopt)) break;
      p.requests.pop_front();
    }
    while (p.state == PeerState::kConnected && p.window->wants_credit_update()) {
      if (p.tx_free.empty() || !budget.reserve(CompletionKind::kSend)) break;
      auto header = p.window->send_credit_update();
      if (!header) {
        (void)budget.release(CompletionKind::kSend);
        break;
      }
      const std::uint32_t tx_index = p.tx_free.back();
      p.tx_free.pop_back();
      const auto encoded = credit::encode_credit_header(*header);
      std::memcpy(p.tx_buffer(tx_index), encoded.data(), encoded.size());
      if (!post_send_buffer(p, tx_index, static_cast<std::uint32_t>(encoded.size()),
                            TxUse::kControl)) {
        (void)budget.release(CompletionKind::kSend);
        p.tx_free.push_back(tx_index);
        break;
      }
    }
    if (p.refused_since_ready && p.requests.size() < config.send_queue_limit) {
      p.refused_since_ready = false;
      ready.push_back(p.id);
      cv.notify_all();
    }
  }

  void pump_all() {
    for (auto& [id, p] : peers) pump(*p);
  }

  // One completion whose budget entry is already released and counted against `p`.
  void dispatch(Peer& p, const rdmap::WorkCompletion& wc) {
    const std::uint32_t index = wr_index(wc.wr_id);
    const bool send = wr_is_send(wc.wr_id);
    if (send) {
      if (index >= p.tx_count) return;
      p.tx_free.push_back(index);
      if (p.tx_use[index] != TxUse::kUncredited) {
        (void)p.window->on_send_completed(p.tx_use[index] == TxUse::kData ? SendKind::kData
                                                                          : SendKind::kControl);
      }
    } else {
      if (index >= p.rx_count) return;
      p.rx_state[index] = RxState::kIdle;
    }
    if (wc.status != rdmap::WcStatus::kSuccess) {
      fail(p, std::string("work request completed with ") +
                  std::string(rdmap::wc_status_name(wc.status)));
      return;
    }
    if (send || p.state != PeerState::kConnected) return;
    const std::span<const std::uint8_t> bytes(p.rx_buffer(index),
                                              std::min(wc.byte_len, p.buffer_size));
    auto m = p.window->on_receive(bytes);
    if (!m) {
      terminate(p, m.error());
      return;
    }
    if (m->kind == SendKind::kControl) {
      if (post_receive(p, index)) (void)p.window->on_control_receive_posted();
      return;
    }
    p.rx_state[index] = RxState::kDelivering;
    ++p.messages_received;
    p.bytes_received += m->payload.size();
    deliveries.push_back(Delivery{peers.at(p.id), Message{p.id, make_message_id(p.id, index),
                                                          m->payload}});
  }

  void complete(const rdmap::WorkCompletion& wc) {
    auto p = find(wr_peer(wc.wr_id));
    if (!p) return;  // a peer already gone: its entries were given back when it went
    const bool send = wr_is_send(wc.wr_id);
    std::uint32_t& outstanding = send ? p->outstanding_send : p->outstanding_recv;
    if (outstanding == 0) return;
    --outstanding;
    (void)budget.release(send ? CompletionKind::kSend : CompletionKind::kReceive);
    if (!p->window) {
      p->early.push_back(wc);
    } else {
      dispatch(*p, wc);
    }
    if (p->outstanding_send + p->outstanding_recv == 0) cv.notify_all();
  }

  // Forgets a peer: gives back the entries of work requests that will never complete.
  void forget(PeerId id) {
    auto p = find(id);
    if (!p) return;
    (void)budget.release(CompletionKind::kSend, p->outstanding_send);
    (void)budget.release(CompletionKind::kReceive, p->outstanding_recv);
    p->outstanding_send = p->outstanding_recv = 0;
    peers.erase(id);
    cv.notify_all();
  }

  // Closes a peer's connection, waits up to `timeout` for its work requests to flush (their
  // entries come back through complete()), forgets it, and destroys the connection before
  // its buffers. Called with `lock` held on mu; returns with it released.
  // The connection is taken out of the peer while mu is held, so a concurrent close() (which
  // destroys what is left in its peers) never destroys it under our feet.
  void drop(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Peer>& p, Millis timeout) {
    std::unique_ptr<transport::Connection> doomed = std::move(p->conn);
    lock.unlock();
    if (doomed) doomed->disconnect(timeout);
    lock.lock();
    cv.wait_for(lock, timeout, [&] { return p->outstanding_recv + p->outstanding_send == 0; });
    forget(p->id);
    lock.unlock();
    doomed.reset();
  }

  std::vector<telemetry::ConnectionSnapshot> snapshots() const {
    std::lock_guard lock(mu);
    std::vector<telemetry::ConnectionSnapshot> out;
    for (const auto& [id, p] : peers) {
      if (!p->window || !p->conn) continue;
      telemetry::ConnectionSnapshot s;
      s.local_address = p->conn->info().local_address;
      s.peer_address = p->conn->info().peer_address;
      s.scheme = p->scheme;
      s.peer = p->name;
      s.state = std::string(state_name(p->state));
      s.queued = static_cast<std::uint32_t>(p->requests.size());
      s.queue_limit = config.send_queue_limit;
      s.held = p->held;
      s.refused = p->refused;
      s.credit = p->window->counters();
      out.push_back(std::move(s));
    }
    return out;
  }

  void run();
  bool open() const;  // not closing; takes mu
  Expected<PeerId, ConnectError> add_peer(
      std::string name, std::string_view scheme,
      const std::function<Expected<std::unique_ptr<transport::Connection>, ConnectError>(
          const transport::QpCaps&, std::vector<std::uint8_t> credit_params)>& establish,
      const std::function<std::span<const std::uint8_t>(const transport::Connection&)>&
          peer_private_data);
};

namespace {
// The endpoint whose progress thread this is (null on every other thread): close() from a
// handler must not join the thread it runs on. Per thread, so nothing is shared.
thread_local const void* progress_thread_of = nullptr;
}  // namespace

// The progress thread: completions in, handlers out.
void MessageEndpoint::State::run() {
  progress_thread_of = this;
  std::vector<Delivery> my_deliveries;
  std::vector<PeerId> my_ready;
  std::vector<std::pair<PeerId, std::string>> my_failed;
  for (;;) {
    std::vector<rdmap::WorkCompletion> wcs = cq->poll(64, Millis(200));
    MessageHandler message_handler;
    ReadyHandler ready_handler;
    FailureHandler failure_handler;
    {
      std::lock_guard lock(mu);
      if (stopping) return;
      if (!deferred.empty()) {
        std::vector<rdmap::WorkCompletion> early = std::move(deferred);
        deferred.clear();
        for (const auto& wc : early) {
          if (auto p = find(wr_peer(wc.wr_id)); p && p->window) dispatch(*p, wc);
        }
      }
      for (const auto& wc : wcs) complete(wc);
      pump_all();
      my_deliveries.swap(deliveries);
      my_ready.swap(ready);
      my_failed.swap(failed);
      message_handler = on_message;
      ready_handler = on_ready;
      failure_handler = on_failure;
    }
    // Each handler is started only while the endpoint is open: close() from a handler (or
    // from another thread while this batch runs) stops the rest of the batch, so no handler
    // starts once close() has returned.
    for (Delivery& d : my_deliveries) {
      if (!open()) return;
      if (message_handler) message_handler(d.message);
      std::lock_guard lock(mu);
      const std::uint32_t index = wr_index(d.message.id);
      if (d.peer->rx_state[index] == RxState::kDelivering) repost_data(*d.peer, index);
      pump(*d.peer);
    }
    my_deliveries.clear();
    for (PeerId id : my_ready) {
      if (!open()) return;
      if (ready_handler) ready_handler(id);
    }
    my_ready.clear();
    for (const auto& [id, why] : my_failed) {
      if (!open()) return;
      if (failure_handler) failure_handler(id, why);
    }
    my_failed.clear();
  }
}

bool MessageEndpoint::State::open() const {
  std::lock_guard lock(mu);
  return !stopping;
}

Expected<PeerId, ConnectError> MessageEndpoint::State::add_peer(
    std::string name, std::string_view scheme,
    const std::function<Expected<std::unique_ptr<transport::Connection>, ConnectError>(
        const transport::QpCaps&, std::vector<std::uint8_t> credit_params)>& establish,
    const std::function<std::span<const std::uint8_t>(const transport::Connection&)>&
        peer_private_data) {
  if (!config_error.empty()) return unexpected(invalid_argument("endpoint config: " + config_error));
  const std::uint32_t buffer_size = config.max_message + credit::kCreditHeaderSize;
  credit::CreditParams ours;
  ours.control_receives = static_cast<std::uint8_t>(config.control_receives);
  ours.receive_window = static_cast<std::uint16_t>(config.receive_window);
  ours.initial_receives = ours.receive_window;
  ours.reply_reserve = static_cast<std::uint16_t>(config.reply_reserve);
  ours.max_message = buffer_size;
  auto peer = std::make_shared<Peer>();
  transport::QpCaps caps;
  {
    std::lock_guard lock(mu);
    if (stopping) return unexpected(invalid_argument("the message endpoint is closed"));
    ++setups;
  }
  // Counted until this call returns, whichever way: close() waits for it.
  struct SetupDone {
    State& s;
    ~SetupDone() {
      std::lock_guard lock(s.mu);
      --s.setups;
      s.cv.notify_all();
    }
  } setup_done{*this};
  {
    std::lock_guard lock(mu);
    if (peers.size() >= config.max_peers) {
      return unexpected(invalid_argument("endpoint already has max_peers (" +
                                         std::to_string(config.max_peers) + ") peers"));
    }
    const std::uint32_t rx_count = config.receive_window + config.control_receives;
    if (!budget.reserve(CompletionKind::kReceive, rx_count)) {
      return unexpected(invalid_argument("completion queue has no room for another peer"));
    }
    peer->id = next_id++;
    peer->name = std::move(name);
    peer->scheme = std::string(scheme);
    peer->buffer_size = buffer_size;
    peer->rx_count = rx_count;
    peer->tx_count = config.send_queue_depth;
    peer->rx = std::make_unique<std::uint8_t[]>(std::size_t{buffer_size} * peer->rx_count);
    peer->tx = std::make_unique<std::uint8_t[]>(std::size_t{buffer_size} * peer->tx_count);
    peer->rx_state.assign(peer->rx_count, RxState::kPosted);
    peer->tx_use.assign(peer->tx_count, TxUse::kData);
    for (std::uint32_t i = peer->tx_count; i > 0; --i) peer->tx_free.push_back(i - 1);
    peer->outstanding_recv = rx_count;
    peers[peer->id] = peer;

    caps.max_send_wr = config.send_queue_depth;
    caps.max_recv_wr = rx_count;
    caps.cq = cq;
    for (std::uint32_t i = 0; i < rx_count; ++i) {
      caps.initial_recvs.push_back(
          transport::InitialRecv{make_wr_id(peer->id, false, i), peer->rx_buffer(i), buffer_size});
    }
  }
  const auto encoded = credit::encode_credit_params(ours);
  auto conn = establish(caps, std::vector<std::uint8_t>(encoded.begin(), encoded.end()));
  std::unique_lock lock(mu);
  if (!conn) {
    forget(peer->id);
    return unexpected(conn.error());
  }
  if (stopping) {
    // close() ran while this peer was being set up and forgot it: its connection ends here,
    // before its buffers (peer) go.
    lock.unlock();
    conn->reset();
    return unexpected(invalid_argument("the message endpoint was closed during setup"));
  }
  peer->conn = std::move(*conn);
  // An accepted peer's scheme is known only now: a pending request does not name its provider.
  if (peer->scheme.empty()) peer->scheme = peer->conn->info().scheme;
  auto theirs = credit::decode_credit_params(peer_private_data(*peer->conn));
  if (!theirs) {
    drop(lock, peer, Millis(1000));
    return unexpected(setup_error("peer did not offer credit parameters: " +
                                  std::string(credit::describe(theirs.error()))));
  }
  credit::CreditConfig cc = credit::config_for(ours, *theirs, config.send_queue_depth,
                                               config.control_send_slots);
  if (!credit::validate(cc)) {
    drop(lock, peer, Millis(1000));
    return unexpected(setup_error("credit parameters do not work together"));
  }
  peer->window.emplace(cc);
  peer->peer_max_payload = theirs->max_message - static_cast<std::uint32_t>(credit::kCreditHeaderSize);
  peer->reply_reserve = std::min(config.reply_reserve, cc.peer_receive_window - 1);
  peer->rx_stag = peer->conn->register_memory(peer->rx.get(),
                                              std::size_t{buffer_size} * peer->rx_count,
                                              rdmap::kLocalWrite);
  peer->tx_stag = peer->conn->register_memory(peer->tx.get(),
                                              std::size_t{buffer_size} * peer->tx_count,
                                              rdmap::kLocalWrite);
  peer->state = PeerState::kConnected;
  if (!peer->early.empty()) {
    deferred.insert(deferred.end(), peer->early.begin(), peer->early.end());
    peer->early.clear();
  }
  lock.unlock();
  cq->wake();
  return peer->id;
}

// ---------------------------------------------------------------------------------------

MessageEndpoint::MessageEndpoint(EndpointConfig config)
    : state_(std::make_unique<State>(std::move(config))) {
  State& s = *state_;
  if (s.config.publisher) {
    s.registration = telemetry::PublisherRegistration(
        s.config.publisher, telemetry::Publisher::ConnectionsFn([&s] { return s.snapshots(); }));
  }
  s.thread = std::thread([&s] { s.run(); });
}

MessageEndpoint::~MessageEndpoint() { close(); }

void MessageEndpoint::close() {
  State& s = *state_;
  if (progress_thread_of == &s) {
    // From a handler: the progress thread cannot join itself. It starts no further handler
    // and ends when this one returns; the connections are closed by the next close() (or
    // the destructor) on another thread.
    std::lock_guard lock(s.mu);
    s.stopping = true;
    return;
  }
  std::lock_guard closing(s.close_mu);
  // The publisher may be inside snapshots() with its own lock held: unregister first, and
  // without mu (publisher.h's rule).
  s.registration.reset();
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.cq->wake();
  // join() returns once the handler running now (if any) has returned: after this line no
  // handler runs again.
  if (s.thread.joinable()) s.thread.join();
  // Connections go first (each Peer's last member), then their buffers. A connect() or
  // accept() still setting a peer up sees `stopping` when it returns and ends its own
  // connection; close() waits for it, so the endpoint may be destroyed when close() returns.
  std::map<PeerId, std::shared_ptr<Peer>> peers;
  {
    std::unique_lock lock(s.mu);
    s.cv.wait(lock, [&] { return s.setups == 0; });
    peers.swap(s.peers);
    s.cv.notify_all();  // wait_ready() callers: their peer is gone
  }
  for (auto& [id, p] : peers) p->conn.reset();
}

void MessageEndpoint::on_message(MessageHandler handler) {
  std::lock_guard lock(state_->mu);
  state_->on_message = std::move(handler);
}

void MessageEndpoint::on_ready(ReadyHandler handler) {
  std::lock_guard lock(state_->mu);
  state_->on_ready = std::move(handler);
}

void MessageEndpoint::on_failure(FailureHandler handler) {
  std::lock_guard lock(state_->mu);
  state_->on_failure = std::move(handler);
}

Expected<PeerId, ConnectError> MessageEndpoint::connect(transport::Provider& provider,
                                                        const transport::ProviderUri& where,
                                                        transport::ConnectOptions options,
                                                        std::string name) {
  const std::vector<std::uint8_t> app_data = std::move(options.private_data);
  return state_->add_peer(
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
  auto theirs = credit::decode_credit_params(pending.request().private_data);
  if (!theirs) {
    const std::string why = "rdma-interop: no credit parameters: " +
                            std::string(credit::describe(theirs.error()));
    pending.reject(std::vector<std::uint8_t>(why.begin(), why.end()));
    return unexpected(setup_error("peer did not offer credit parameters: " +
                                  std::string(credit::describe(theirs.error()))));
  }
  const std::vector<std::uint8_t> request_data = pending.request().private_data;
  return state_->add_peer(
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
  std::lock_guard lock(s.mu);
  auto p = s.find(peer);
  if (!p || p->state == PeerState::kClosed || p->state == PeerState::kConnecting) {
    return SendStatus::kUnknownPeer;
  }
  if (p->state == PeerState::kFailed) return SendStatus::kPeerFailed;
  if (payload.size() > p->peer_max_payload) return SendStatus::kTooLong;
  if (p->requests.empty() && p->replies.empty() && s.try_post_data(*p, payload, false, {}, true)) {
    return SendStatus::kOk;
  }
  if (p->state == PeerState::kFailed) return SendStatus::kPeerFailed;
  if (p->requests.size() >= s.config.send_queue_limit) {
    ++p->refused;
    p->refused_since_ready = true;
    return SendStatus::kTryAgain;
  }
  p->requests.emplace_back(payload.begin(), payload.end());
  return SendStatus::kOk;
}

bool MessageEndpoint::wait_ready(PeerId peer, Millis timeout) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  bool sendable = false;
  s.cv.wait_for(lock, timeout, [&] {
    auto p = s.find(peer);
    if (!p || p->state != PeerState::kConnected) return true;
    sendable = p->requests.size() < s.config.send_queue_limit;
    return sendable;
  });
  return sendable;
}

SendStatus MessageEndpoint::reply(MessageId message, std::span<const std::uint8_t> payload) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::uint32_t index = 0;
  auto p = s.find_message(message, index);
  if (!p) return SendStatus::kNotHeld;
  const RxState st = p->rx_state[index];
  if (st != RxState::kDelivering && st != RxState::kHeld) return SendStatus::kNotHeld;
  if (p->state == PeerState::kFailed) return SendStatus::kPeerFailed;
  if (payload.size() > p->peer_max_payload) return SendStatus::kTooLong;
  if (p->replies.empty() && s.try_post_data(*p, payload, true, index, true)) return SendStatus::kOk;
  if (p->state == PeerState::kFailed) return SendStatus::kPeerFailed;
  if (st == RxState::kHeld) --p->held;
  p->rx_state[index] = RxState::kReplying;
  p->replies.push_back(QueuedReply{std::vector<std::uint8_t>(payload.begin(), payload.end()), index});
  return SendStatus::kOk;
}

SendStatus MessageEndpoint::hold(MessageId message) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::uint32_t index = 0;
  auto p = s.find_message(message, index);
  if (!p) return SendStatus::kNotHeld;
  if (p->rx_state[index] == RxState::kHeld) return SendStatus::kOk;
  if (p->rx_state[index] != RxState::kDelivering) return SendStatus::kNotHeld;
  p->rx_state[index] = RxState::kHeld;
  ++p->held;
  return SendStatus::kOk;
}

SendStatus MessageEndpoint::release(MessageId message) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::uint32_t index = 0;
  auto p = s.find_message(message, index);
  if (!p) return SendStatus::kNotHeld;
  const RxState st = p->rx_state[index];
  if (st != RxState::kDelivering && st != RxState::kHeld) return SendStatus::kNotHeld;
  s.repost_data(*p, index);
  s.pump(*p);
  return SendStatus::kOk;
}

void MessageEndpoint::close_peer(PeerId peer, Millis timeout) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  auto p = s.find(peer);
  if (!p) return;
  if (p->state == PeerState::kConnected) {
    p->state = PeerState::kClosed;
    p->lost += p->requests.size() + p->replies.size();
    p->requests.clear();
    p->replies.clear();
  }
  s.drop(lock, p, timeout);
}

std::vector<PeerId> MessageEndpoint::peers() const {
  std::lock_guard lock(state_->mu);
  std::vector<PeerId> out;
  for (const auto& [id, p] : state_->peers) {
    if (p->state != PeerState::kConnecting) out.push_back(id);
  }
  return out;
}

std::optional<PeerStats> MessageEndpoint::stats(PeerId peer) const {
  std::lock_guard lock(state_->mu);
  auto p = state_->find(peer);
  if (!p || !p->window) return std::nullopt;
  PeerStats st;
  st.name = p->name;
  st.state = p->state;
  st.detail = p->detail;
  if (p->conn) {
    st.terminate_sent = p->conn->terminate_sent();
    st.terminate_received = p->conn->terminate_received();
    st.local_address = p->conn->info().local_address;
    st.peer_address = p->conn->info().peer_address;
  }
  st.credit = p->window->counters();
  st.queued = static_cast<std::uint32_t>(p->requests.size());
  st.replies_queued = static_cast<std::uint32_t>(p->replies.size());
  st.held = p->held;
  st.refused = p->refused;
  st.messages_sent = p->messages_sent;
  st.bytes_sent = p->bytes_sent;
  st.messages_received = p->messages_received;
  st.bytes_received = p->bytes_received;
  st.lost = p->lost;
  return st;
}

EndpointStats MessageEndpoint::endpoint_stats() const {
  std::lock_guard lock(state_->mu);
  EndpointStats st;
  st.budget = state_->budget.counters();
  st.cq = state_->cq->counters();
  for (const auto& [id, p] : state_->peers) st.bytes_allocated += p->bytes_allocated();
  return st;
}

}  // namespace rdma_interop::messaging
