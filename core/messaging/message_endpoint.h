// message_endpoint.h - N:N messaging over RDMA Sends with end-to-end credits: memory bounded
// by configuration, no head-of-line blocking between peers, a completion entry reserved for
// every work request, and EAGAIN instead of blocking.
//
// One endpoint talks to many peers, one connection each, over any provider (tcp, verbs).
// Everything it decides per peer is a sans-I/O engine, core/credit/peer_channel.h: credits
// (a message goes only onto a receive buffer the peer posted for us), the buffers and their
// reposting, two bounded send queues (replies before requests: a peer that stops consuming
// fills only its own, and send() to it answers kTryAgain while every other peer keeps going),
// receive hold-back, the reply reserve, grant batching and the completion budget. The
// numbers are exchanged in the MPA private data (core/credit/credit_params.h). This file is
// the glue: it carries the channel's work requests to the connection and completions back,
// and runs the application's handlers.
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
// Threading: run to completion, as rsockets and eRPC grant credits on the thread that
// processed the message. There is no thread of the endpoint's own. All connections share one
// completion queue (core/transport/completion_queue.h) whose handler is the endpoint: the
// thread that made a completion (the provider's event thread reading a socket or a device
// CQ, provider.h) processes it at once: the channel takes the message and its grants, posts
// buffers again, sends what the grants let go, and runs the handlers. A completion made
// inside one of the application's calls here (a send completing in post_send) is processed
// when the call returns, on its thread, but a handler never runs inside such a call: what
// one found for a handler (a peer ready again, a failure) is run by the provider's event
// thread (CompletionQueue::run_soon). A thread in receive() is a provider thread for this:
// it reads its peer's connection and processes what it finds, other peers' completions
// queued meanwhile included, and runs the handlers.
// - Every member is thread-safe. Handlers run one at a time, on a provider thread (or one
//   in receive()), with no endpoint lock held: they may call send(), reply(), hold() and release(). They must not
//   block: while one runs, that provider thread receives for no one. A handler with slow
//   work hold()s the message and answers from a thread of its own (tools/rdma-mesh's
//   slow consumer does). wait_ready(), close_peer() and close() wait for the provider's
//   thread: not from a handler (close() from a handler only stops later handlers).
// - No handler runs once close() (or the destructor) has returned: state a handler uses must
//   outlive the endpoint, or the endpoint must be closed before that state is destroyed.
// - The payload a handler sees is valid until the handler returns, or, when held, until
//   reply() or release().
// - Locks, outermost first: the endpoint's dispatch lock (one thread processes completions at
//   a time, so they are taken in queue order; a thread that finds it held leaves its work to
//   the holder instead of waiting), a peer's lock (its channel), then the provider's. Work
//   requests go to the provider with the peer's lock released, by one thread at a time per
//   peer and in the channel's order (whoever is posting takes what others add meanwhile): no
//   thread waits for another's sendmsg. The peers map and the handler queue have leaf locks.
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
#include "core/credit/peer_channel.h"
#include "core/messaging/message.h"
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

// PeerId, MessageId, Message and the handler types: core/messaging/message.h.

// send(), reply(), hold() and release() answer with the channel's statuses (kOk, kTryAgain,
// kTooLong, kUnknownPeer, kPeerFailed, kNotHeld: core/credit/peer_channel.h).
using SendStatus = credit::SendStatus;
using credit::status_name;  // stable id: "try_again"

// connecting, connected, failed (see PeerStats::detail), closed (by us or by the peer).
using PeerState = credit::ChannelState;
using credit::state_name;  // "connecting", "connected", "failed", "closed"

struct PeerStats {
  std::string name;
  PeerState state = PeerState::kConnected;
  std::string detail;  // why it failed
  std::optional<wire::TerminateMessage> terminate_sent;
  std::optional<wire::TerminateMessage> terminate_received;
  credit::CreditCounters credit;
  std::uint32_t queued = 0;  // requests waiting for a credit
  std::uint32_t replies_queued = 0;
  std::uint32_t held = 0;           // received messages held (handler returned without answer)
  std::uint64_t refused = 0;        // send() returned kTryAgain
  std::uint64_t messages_sent = 0;  // data messages posted (requests and replies)
  std::uint64_t bytes_sent = 0;     // their payload octets
  std::uint64_t writes_sent = 0;    // tagged writes posted, each before its message
  std::uint64_t bytes_written = 0;  // their octets
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t lost = 0;  // accepted by send()/reply() but never posted: the connection ended
  std::uint64_t held_released = 0;  // held when the connection ended: can no longer be answered
  double stalled_ms = 0;  // how long messages have waited for credit without a break (0: none)
  // The connection's reads: octets, and of them those read straight into place (tcp).
  transport::ReceiveCounters receive;
  std::string local_address;
  std::string peer_address;
};

struct EndpointStats {
  credit::CompletionBudgetCounters budget;
  transport::CompletionQueueCounters cq;
  std::uint64_t bytes_allocated = 0;  // buffers of every peer (the configured memory bound)
  // budget: each peer's share of the completion queue, summed; high_water is the sum of the
  // peers' own (an upper bound of the most reserved at once).
};

class MessageEndpoint {
 public:
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
  void on_close(CloseHandler handler);      // a peer closed its connection in order (once)

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

  // Queues (or posts at once) one message to `peer`. Never blocks. With `write`, an RDMA
  // Write into a region the peer advertised goes just before the message, both or neither
  // (credit::PeerChannel::send): when the peer's handler gets the message, the write's
  // octets are placed (RFC 5040 s5.5). Its source must stay registered (register_memory)
  // and unchanged until the peer has said it took them; a write the peer's region refuses
  // ends the connection with the peer's Terminate (PeerStats::terminate_received). A
  // borrowed write's source is the caller's only during this call: it is posted inline
  // before send() returns, or kNotNow says it was not and nothing was queued.
  SendStatus send(PeerId peer, std::span<const std::uint8_t> payload,
                  const std::optional<credit::TaggedWrite>& write = std::nullopt);
  // Waits up to `timeout` until send() to `peer` would not return kTryAgain. False on timeout
  // or when the peer is gone.
  bool wait_ready(PeerId peer, transport::Millis timeout);

  // Receives what `peer`'s connection brings on the caller's thread, its handlers run here
  // (transport::Connection::receive_here): for a thread that waits for what only the peer
  // can bring (a reply, room to send), so it takes it itself instead of being handed it by
  // the provider's event thread (a wakeup and a context switch each way). Returns once it
  // received something, `wake` (an eventfd the caller's other threads write; the caller
  // reads it) is readable, or `timeout` passed. close_peer() and close() write `wake` and
  // wait for the receive to return; without one (fd -1) a receive waits kReceiveSlice at most.
  // `poll_first`: of the timeout, looks that long without sleeping first
  // (Connection::receive_here).
  // False at once when the provider cannot (verbs, sim) or the peer is unknown or not
  // connected: wait another way. Not from a handler.
  static constexpr transport::Millis kReceiveSlice{100};
  bool receive(PeerId peer, runtime::WakeFd wake, transport::Millis timeout,
               transport::Micros poll_first = transport::Micros::zero());

  // Answers a received message: the reply goes before queued requests and may use the
  // reserved credits; the message's buffer is posted again once the reply is posted. Never
  // kTryAgain for a message not yet answered.
  SendStatus reply(MessageId message, std::span<const std::uint8_t> payload);
  // Keeps a message (and its buffer) after its handler returns, for a later reply().
  SendStatus hold(MessageId message);
  // Gives a held message's buffer back without replying.
  SendStatus release(MessageId message);

  // Memory on `peer`'s connection, for tagged writes (a stream's rings): registered with
  // `access` (rdmap::Access bits: kLocalWrite for a write's source, kRemoteWrite for a
  // region the peer writes into), its STag returned. An error when the peer is unknown, not
  // connected (still in setup, failed, closed) or the provider refuses. The region must
  // stay valid until deregister_memory() or the peer's end, and the peer may write into a
  // kRemoteWrite region at any time until then. Taken under the peer's lock: the
  // connection cannot be taken away meanwhile (peer_link.h).
  Expected<std::uint32_t, std::string> register_memory(PeerId peer, std::span<std::uint8_t> region,
                                                       std::uint32_t access);
  // Gives the STag up; nothing when the peer or the STag is gone. A write still in flight
  // from or into it fails.
  void deregister_memory(PeerId peer, std::uint32_t stag);
  // The longest borrowed write (credit::TaggedWrite::borrowed) send() can post to `peer`:
  // its connection's max_inline_data(). 0: none (no such peer, or not connected).
  std::uint32_t max_inline_data(PeerId peer) const;
  // The tagged offset the peer names the octet at `addr` of region `stag` by, to advertise
  // with the STag (transport::Connection::tagged_offset); nullopt for an unknown peer or
  // STag, or an address outside the region.
  std::optional<std::uint64_t> tagged_offset(PeerId peer, std::uint32_t stag,
                                             const void* addr) const;

  // The application found `peer` breaking the protocol above the messages: its connection
  // ends with a Terminate carrying `cause` (the peer's failure handler runs with `detail`).
  // Safe from a handler.
  void terminate_peer(PeerId peer, const wire::TerminateCause& cause, std::string detail);

  // Ends one peer's connection (orderly close); its queued messages are counted lost.
  void close_peer(PeerId peer, transport::Millis timeout);

  // Stops handlers, waiting for one that is running to return, then closes every peer's
  // connection at once (FIN after what is already on its way; queued messages are dropped;
  // close_peer() first for an orderly end). Once it returns no handler runs again, so
  // whatever the handlers use may be destroyed. A connect() or accept() in progress on
  // another thread is waited for (it fails with kInvalidArgument and closes its connection):
  // close() can take as long as its setup timeout. Idempotent and thread-safe; later
  // connect()/accept() fail with kInvalidArgument, send() returns kUnknownPeer. From a
  // handler it cannot wait for itself: it only stops every later handler and returns; the
  // connections are closed by the next close() on another thread, or the destructor. The
  // endpoint must not be destroyed from its own handler.
  void close();

  std::vector<PeerId> peers() const;
  std::optional<PeerStats> stats(PeerId peer) const;
  EndpointStats endpoint_stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared: a task the provider runs later holds it weakly
};

}  // namespace rdma_interop::messaging
