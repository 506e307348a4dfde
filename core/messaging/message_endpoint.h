// message_endpoint.h - N:N messaging over RDMA Sends with end-to-end credits: memory bounded
// by configuration, no head-of-line blocking between peers, a completion entry reserved for
// every work request, and EAGAIN instead of blocking.
//
// One endpoint talks to many peers, one connection each, over any provider (tcp, verbs). Per
// peer it keeps:
//   - a CreditWindow (core/credit/credit_window.h): a message goes only with a credit, i.e.
//     onto a receive buffer the peer posted for us; grants ride on every message header and
//     standalone updates use send slots reserved for control;
//   - receive buffers: receive_window data + control_receives control, max_message + 4
//     octets each, all posted at setup; the numbers are exchanged in the MPA private data
//     (core/credit/credit_params.h), so both sides know each other's window from the start;
//   - two bounded send queues: replies (at most one per message held from that peer) before
//     requests (at most send_queue_limit). A peer that stops consuming runs out of its own
//     credits and fills only its own queues; send() to it returns kTryAgain while every
//     other peer keeps going.
// All connections share one completion queue (core/transport/completion_queue.h) of
// sum(send_queue_depth + receive buffers) entries, and a CompletionBudget
// (core/credit/completion_budget.h) reserves an entry before every post: no overrun.
//
// Receive hold-back. A handler that will answer a message replies with reply(), at once or
// later after hold(): the message's receive buffer is not posted again (so not granted to the
// peer again) until the reply is on its way. A request/reply workload therefore slows to its
// slowest party instead of piling up memory. Requests may not take the last reply_reserve
// credits toward a peer, so a reply always finds a buffer: two sides holding each other's
// requests cannot deadlock.
//
// A peer that breaks the credit protocol (a message beyond its credits, a malformed header)
// gets the protocol's Terminate (a message without a credit: DDP untagged "no buffer", RFC
// 5041 s7.2 code 0x02); only its connection ends.
//
// Threading: every member is thread-safe. Handlers run on the endpoint's progress thread, one
// at a time, with no endpoint lock held: they may call send(), reply(), hold() and release().
// No handler runs once close() (or the destructor) has returned: state a handler uses must
// outlive the endpoint, or the endpoint must be closed before that state is destroyed.
// The payload a handler sees is valid until the handler returns, or, when held, until reply()
// or release().
//
//   MessageEndpoint ep(config);
//   ep.on_message([&](const Message& m) { ep.reply(m.id, answer(m.payload)); });
//   auto peer = ep.connect(*provider, uri, options, "node2");
//   if (ep.send(*peer, bytes) == SendStatus::kTryAgain) ep.wait_ready(*peer, 100ms);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/credit/completion_budget.h"
#include "core/credit/credit_window.h"
#include "core/transport/completion_queue.h"
#include "core/transport/provider.h"
#include "core/util/expected.h"
#include "core/wire/terminate.h"

namespace rdma_interop::telemetry {
class Publisher;
}

namespace rdma_interop::messaging {

struct EndpointConfig {
  std::uint32_t max_message = 4096;      // largest payload, octets (the 4-octet header is extra)
  std::uint32_t receive_window = 16;     // data receives posted per peer (1..0xFFFF)
  std::uint32_t control_receives = 2;    // control receives per peer (1..255)
  std::uint32_t send_queue_depth = 18;   // sends posted per peer at once
  std::uint32_t control_send_slots = 2;  // of those, only for standalone credit updates
  std::uint32_t send_queue_limit = 64;   // requests waiting for a credit per peer; then kTryAgain
  std::uint32_t reply_reserve = 1;       // credits toward a peer only replies may use (< window)
  // Peers at once. The shared completion queue has max_peers * (send_queue_depth +
  // receive_window + control_receives) entries; its memory grows only with use.
  std::uint32_t max_peers = 64;
  // Publishes every peer's figures (telemetry/connection_snapshot.h) for backlog-stat. Null:
  // nothing published.
  std::shared_ptr<telemetry::Publisher> publisher;
  // Test personality: send data even without a credit, as a broken peer would, so a test can
  // see the other side's Terminate. Never set it otherwise.
  bool ignore_credits = false;
};

using PeerId = std::uint32_t;     // never reused within an endpoint
using MessageId = std::uint64_t;  // a received message, for reply() / hold() / release()

struct Message {
  PeerId peer = 0;
  MessageId id = 0;
  std::span<const std::uint8_t> payload;
};

enum class SendStatus : std::uint8_t {
  kOk,           // queued or posted: it will be delivered unless the connection fails
  kTryAgain,     // the peer's queue is full (it is not consuming): nothing queued (EAGAIN)
  kTooLong,      // payload over the peer's max_message
  kUnknownPeer,  // no such peer, or it was closed
  kPeerFailed,   // the connection failed (see PeerStats::detail)
  kNotHeld,      // reply()/release(): no such received message, or already answered
};
std::string_view status_name(SendStatus s);  // stable id: "try_again"

enum class PeerState : std::uint8_t { kConnecting, kConnected, kFailed, kClosed };
std::string_view state_name(PeerState s);  // "connecting", "connected", "failed", "closed"

struct PeerStats {
  std::string name;
  PeerState state = PeerState::kConnected;
  std::string detail;  // why it failed
  std::optional<wire::TerminateMessage> terminate_sent;
  std::optional<wire::TerminateMessage> terminate_received;
  credit::CreditCounters credit;
  std::uint32_t queued = 0;   // requests waiting for a credit
  std::uint32_t replies_queued = 0;
  std::uint32_t held = 0;     // received messages held (handler returned without answer)
  std::uint64_t refused = 0;  // send() returned kTryAgain
  std::uint64_t messages_sent = 0;  // data messages posted (requests and replies)
  std::uint64_t bytes_sent = 0;     // their payload octets
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t lost = 0;  // accepted by send()/reply() but never posted: the peer failed first
  std::string local_address;
  std::string peer_address;
};

struct EndpointStats {
  credit::CompletionBudgetCounters budget;
  transport::CompletionQueueCounters cq;
  std::uint64_t bytes_allocated = 0;  // buffers of every peer (the configured memory bound)
};

class MessageEndpoint {
 public:
  using MessageHandler = std::function<void(const Message&)>;
  using ReadyHandler = std::function<void(PeerId)>;                      // may send again
  using FailureHandler = std::function<void(PeerId, const std::string&)>;

  // The config is checked when a peer is added (kInvalidArgument then).
  explicit MessageEndpoint(EndpointConfig config);
  // close().
  ~MessageEndpoint();
  MessageEndpoint(const MessageEndpoint&) = delete;
  MessageEndpoint& operator=(const MessageEndpoint&) = delete;

  // Set before the first peer is added. Without a message handler, messages are released as
  // they arrive.
  void on_message(MessageHandler handler);
  void on_ready(ReadyHandler handler);      // a peer that refused a send has room again
  void on_failure(FailureHandler handler);  // a peer's connection failed (once per peer)

  // Connects to a listener that accepts with accept() below. `options` supplies the policy,
  // timeout and retries; its caps are the endpoint's, and its private data goes after the
  // credit parameters (the peer's application finds it at offset credit::kCreditParamsSize
  // of the Request's private data). A peer that does not answer with credit parameters is
  // disconnected: kSetup with a detail saying so.
  Expected<PeerId, transport::ConnectError> connect(transport::Provider& provider,
                                                    const transport::ProviderUri& where,
                                                    transport::ConnectOptions options,
                                                    std::string name);
  // Accepts a pending request that carries credit parameters; one without is rejected (the
  // reject's private data says why) and kSetup returned. `private_data` goes after ours.
  Expected<PeerId, transport::ConnectError> accept(transport::PendingConnection& pending,
                                                   std::string name,
                                                   std::vector<std::uint8_t> private_data = {});

  // Queues (or posts at once) one message to `peer`. Never blocks.
  SendStatus send(PeerId peer, std::span<const std::uint8_t> payload);
  // Waits up to `timeout` until send() to `peer` would not return kTryAgain. False on timeout
  // or when the peer is gone.
  bool wait_ready(PeerId peer, transport::Millis timeout);

  // Answers a received message: the reply goes before queued requests and may use the
  // reserved credits; the message's buffer is posted again once the reply is posted. Never
  // kTryAgain for a message not yet answered.
  SendStatus reply(MessageId message, std::span<const std::uint8_t> payload);
  // Keeps a message (and its buffer) after its handler returns, for a later reply().
  SendStatus hold(MessageId message);
  // Gives a held message's buffer back without replying.
  SendStatus release(MessageId message);

  // Ends one peer's connection (orderly close); its queued messages are counted lost.
  void close_peer(PeerId peer, transport::Millis timeout);

  // Stops the progress thread, waiting for a handler that is running to return, then closes
  // every peer's connection at once (FIN after what is already on its way; queued messages
  // are dropped; close_peer() first for an orderly end). Once it returns no handler runs
  // again, so whatever the handlers use may be destroyed. A connect() or accept() in
  // progress on another thread is waited for (it fails with kInvalidArgument and closes its
  // connection): close() can take as long as its setup timeout. Idempotent and thread-safe;
  // later connect()/accept() fail with kInvalidArgument, send() returns kUnknownPeer.
  // From a handler it cannot wait for itself: it only stops every later handler and
  // returns; the connections are closed by the next close() on another thread, or the
  // destructor. The endpoint must not be destroyed from its own handler.
  void close();

  std::vector<PeerId> peers() const;
  std::optional<PeerStats> stats(PeerId peer) const;
  EndpointStats endpoint_stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace rdma_interop::messaging
