// peer_channel.h - everything a message endpoint decides for one peer, as a sans-I/O engine.
//
// A message endpoint (core/messaging/message_endpoint.h) talks to many peers, one connection
// each. What it decides per peer lives here, with no thread, socket, clock or provider, so it
// can be tested message by message and fuzzed with a peer that lies:
//   - the buffers: receive_window data + control_receives control receive buffers and
//     send_queue_depth send buffers, each max_message + the 4-octet credit header, owned
//     here (the caller registers them with its connection), and when each is posted again;
//   - the CreditWindow (credit_window.h): a message goes only with a credit, i.e. onto a
//     receive buffer the peer posted for us and told us about;
//   - two bounded send queues, replies before requests: a peer that stops consuming runs out
//     of credits and fills only its own queues; send() beyond send_queue_limit is kTryAgain;
//   - receive hold-back (the seed's "queue but not execute recv completions"): the buffer of
//     a message being handled, held or answered is posted again, and so granted to the peer
//     again, only once the handler let it go or its reply is on its way;
//   - the reply reserve: requests leave the last reply_reserve credits to replies, so two
//     sides holding each other's requests cannot deadlock;
//   - grant batching: grants ride on the header of every message that goes anyway; a
//     standalone credit update goes only from flush(), the end of a batch of completions,
//     once about half the window is owed (or the peer runs low), as rsockets grants every
//     half ring;
//   - the completion budget: an entry of the peer's share of the completion queue
//     (send_queue_depth + receive buffers) is reserved before every post, so the queue
//     cannot overrun (completion_budget.h);
//   - which sends ask for a completion: about one in half the data slots is signaled, as
//     verbs applications signal every Nth send. Sends on a connection complete in order
//     (RC, TCP), so a completion confirms every send posted before it; a send that fails
//     completes on its own (flushed), unsignaled or not. Most messages thus cost the
//     provider no completion at all;
//   - tagged writes: send() may carry an RDMA Write (TaggedWrite) into a region the peer
//     advertised, posted just before the message and in the channel's order, so the peer
//     finds the data placed when the message is delivered (RFC 5040 s5.5). The stream layer
//     (core/stream) places its data this way and says "bytes placed" in the message.
//
// Inputs: the application's calls (send, reply, hold, release, delivered), completions
// (on_send_completed, on_receive_completed), the connection's end, and the time. Outputs, in
// order, from take_actions(): work requests to post, messages to deliver, a Terminate to
// send, and events (ready, failed, closed). The caller posts in the order given, on this
// peer's connection, and reports a post the provider refused (on_post_refused).
//
//   PeerChannel ch(config);                      // buffers made, every receive counted posted
//   connect with ch.announced() in the private data and ch's receive buffers as the
//     connection's initial receives; then ch.established(theirs, now)
//   ch.send(payload, now);  ch.on_receive_completed(i, len, status, now);  ...
//   ch.flush(now);                               // end of a batch: queues, standalone grants
//   ch.take_actions(out); for (const ChannelAction& a : out) carry it out
//
// A peer that breaks the credit protocol (a message beyond its credits, a malformed header)
// gets the Terminate the standard names for it (a Send without a buffer: DDP untagged "no
// buffer", RFC 5041 s7.2 code 0x02) and the channel fails; nothing it sent is delivered.
//
// Not thread-safe: one caller at a time (the endpoint holds a lock per peer). Payload spans
// in actions point into this channel's buffers: a delivered message's octets stay put until
// delivered(), reply() or release() gives its buffer back, whatever happens to the peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/credit/completion_budget.h"
#include "core/credit/credit_params.h"
#include "core/credit/credit_window.h"
#include "core/rdmap/work_request.h"
#include "core/util/expected.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::credit {

// An RDMA Write posted just before a message, in the channel's order (RFC 5040 s5.5: a Send
// is delivered at the Data Sink only once every RDMA Write posted before it on the stream
// is placed, so the message may say "the bytes are there"). The octets go from our
// registered memory straight into the peer's advertised region; the channel copies nothing.
struct TaggedWrite {
  std::uint64_t local_addr = 0;  // source, in memory registered with the connection
  std::uint32_t length = 0;
  std::uint32_t local_stag = 0;
  std::uint32_t remote_stag = 0;    // the peer's advertised region
  std::uint64_t remote_offset = 0;  // its tagged offset (what the peer advertised + offset)
  // The source is the caller's own memory, registered or not, and only for the call that
  // sends it: the Write is posted inline (rdmap::SendWr::inline_data) in that call, or not at
  // all (SendStatus::kNotNow). Never queued.
  bool borrowed = false;
  friend bool operator==(const TaggedWrite&, const TaggedWrite&) = default;
};

struct ChannelConfig {
  std::uint32_t max_message = 4096;      // largest payload, octets (the 4-octet header is extra)
  std::uint32_t receive_window = 16;     // data receives kept posted for the peer (1..0xFFFF)
  std::uint32_t control_receives = 2;    // control receives for its standalone updates (1..255)
  std::uint32_t send_queue_depth = 18;   // sends posted at once
  std::uint32_t control_send_slots = 2;  // of those, only for standalone credit updates
  std::uint32_t send_queue_limit = 64;   // requests waiting for a credit; then kTryAgain
  std::uint32_t reply_reserve = 1;       // credits only replies may use (< receive_window)
  // A standalone update goes once this many grants are owed (0: max(1, receive_window / 2)).
  std::uint32_t grant_batch = 0;
  // Test personality: send data even without a credit, as a broken peer would. Never
  // otherwise.
  bool ignore_credits = false;
  friend bool operator==(const ChannelConfig&, const ChannelConfig&) = default;
};
// Empty when the numbers can work, else one sentence saying which cannot.
std::string config_problem(const ChannelConfig& config);

// What send(), reply(), hold() and release() answer.
enum class SendStatus : std::uint8_t {
  kOk,           // queued or posted: it will be delivered unless the connection ends
  kTryAgain,     // the queue is full (the peer is not consuming): nothing queued (EAGAIN)
  kTooLong,      // payload over the peer's max_message, or a write that can never go (the
                 // send queue has fewer than two slots data may take)
  kUnknownPeer,  // the connection was closed (or, in the endpoint, no such peer)
  kPeerFailed,   // the connection failed
  kNotHeld,      // reply()/hold()/release(): no such received message, or already answered
  kNotNow,       // a borrowed write (TaggedWrite::borrowed) could not be posted at once:
                 // nothing queued, nothing counted; send it from registered memory instead
};
std::string_view status_name(SendStatus s);  // stable id: "try_again"

enum class ChannelState : std::uint8_t {
  kConnecting,  // buffers posted, the peer's numbers not known yet
  kConnected,
  kFailed,  // broken (Terminate, reset, a post refused): see detail()
  kClosed,  // closed in order, by us or by the peer
};
std::string_view state_name(ChannelState s);  // "connecting", "connected", "failed", "closed"

struct ChannelAction {
  enum class Type : std::uint8_t {
    kPostSend,   // post send buffer `index`, its first `length` octets, as an RDMA Send
    kPostWrite,  // post `write` as an RDMA Write in send slot `index` (unsignaled); the
                 // kPostSend of its message follows it at once
    kPostRecv,   // post receive buffer `index` (its whole size) as a receive
    kDeliver,    // receive buffer `index` holds a message, `payload`, for the application
    kTerminate,  // end the connection with a Terminate carrying `cause` (kFailed follows)
    kReady,      // a send() that was kTryAgain would now be taken
    kFailed,     // the connection failed: `detail` (once)
    kClosed,     // the peer closed the connection in order: `detail` (once)
  };
  Type type = Type::kPostSend;
  std::uint32_t index = 0;
  std::uint32_t length = 0;
  bool signaled = true;  // kPostSend, kPostWrite: a completion on success too (else on error)
  TaggedWrite write;     // kPostWrite
  std::span<const std::uint8_t> payload;
  wire::TerminateCause cause{};
  std::string detail;
};
std::string_view type_name(ChannelAction::Type t);  // "post_send", "deliver", ...

struct ChannelCounters {
  CreditCounters credit;
  CompletionBudgetCounters budget;  // the peer's share of the completion queue
  std::uint32_t queued = 0;         // requests waiting for a credit
  std::uint32_t replies_queued = 0;
  std::uint32_t held = 0;           // received messages held (handler returned, no answer yet)
  std::uint64_t refused = 0;        // send() answered kTryAgain
  std::uint64_t messages_sent = 0;  // data messages posted (requests and replies)
  std::uint64_t bytes_sent = 0;     // their payload octets
  std::uint64_t writes_sent = 0;    // tagged writes posted (each before its message)
  std::uint64_t bytes_written = 0;  // their octets
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t lost = 0;  // taken by send()/reply() but never posted: the connection ended
  std::uint64_t held_released = 0;  // held or in a handler when the connection failed
  // How long the oldest queued message has waited for a credit (zero: none waits).
  std::chrono::nanoseconds stalled_for{0};
  friend bool operator==(const ChannelCounters&, const ChannelCounters&) = default;
};

class PeerChannel {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Makes the buffers and counts every receive buffer posted (with its completion entry):
  // the caller hands them to its connection as initial receives, posted before the first
  // message can arrive. A config that fails config_problem() is clamped to one that works.
  explicit PeerChannel(const ChannelConfig& config);
  PeerChannel(const PeerChannel&) = delete;
  PeerChannel& operator=(const PeerChannel&) = delete;

  // --- setup ---
  // Our numbers for the MPA private data (credit_params.h).
  CreditParams announced() const;
  std::uint32_t buffer_size() const { return buffer_size_; }  // max_message + header
  std::uint32_t receive_buffers() const { return rx_count_; }
  std::uint32_t send_buffers() const { return tx_count_; }
  std::uint8_t* receive_buffer(std::uint32_t index) const;  // null for an index out of range
  std::uint8_t* send_buffer(std::uint32_t index) const;
  std::span<std::uint8_t> receive_memory() const;  // every receive buffer, one region
  std::span<std::uint8_t> send_memory() const;
  std::size_t bytes_allocated() const;

  // The connection is up and the peer announced `theirs`: the window starts, and completions
  // that came before are processed now. The config used, or a sentence when the two sides'
  // numbers cannot work (the channel then fails; the caller closes the connection).
  Expected<CreditConfig, std::string> established(const CreditParams& theirs, TimePoint now);

  // --- the application ---
  // Posts the message now if a credit, a send slot and a completion entry are free and
  // nothing waits before it; else queues it, or kTryAgain when send_queue_limit requests wait.
  // With `write`: the RDMA Write goes just before the message, both or neither. It needs a
  // second send slot (one data may take: the control slots stay free for credit updates) and
  // a second completion entry, no credit; it is queued with its message. The Write is
  // unsignaled (a later completion confirms it, as any unsignaled send); kTooLong when the
  // send queue has fewer than two data slots, so it could never go.
  SendStatus send(std::span<const std::uint8_t> payload, TimePoint now,
                  const std::optional<TaggedWrite>& write = std::nullopt);
  // Answers received message `index` (being delivered or held): before queued requests, may
  // use the reply reserve; its buffer is posted again just before the reply's header is
  // taken, so the reply itself carries the grant. Never kTryAgain for an unanswered message.
  SendStatus reply(std::uint32_t index, std::span<const std::uint8_t> payload, TimePoint now);
  // Keeps a message (and its buffer) after its delivery, for a later reply() or release().
  SendStatus hold(std::uint32_t index);
  // Gives a held (or still delivering) message's buffer back without replying.
  SendStatus release(std::uint32_t index, TimePoint now);
  // The application is done with a delivered message it neither held nor answered: its
  // buffer is posted again. No effect on a message held or answered meanwhile.
  void delivered(std::uint32_t index, TimePoint now);
  // The end of a batch (completions processed, handlers run, a call made): queued messages
  // go as far as credits allow, then a standalone credit update if the window wants one;
  // kReady if a refused sender may try again.
  void flush(TimePoint now);

  // --- completions (the indexes are the buffers' of the posted work requests) ---
  void on_send_completed(std::uint32_t index, rdmap::WcStatus status, TimePoint now);
  void on_receive_completed(std::uint32_t index, std::uint32_t byte_len, rdmap::WcStatus status,
                            TimePoint now);
  // The provider refused a kPostSend, kPostWrite or kPostRecv this channel asked for: the
  // connection is broken. Gives back what the post held, and fails. After a refused
  // kPostWrite the caller must not post the message after it either (the peer would find the
  // message and not its data): it reports that kPostSend refused too.
  void on_post_refused(const ChannelAction& post, std::string_view why);

  // --- the connection's end ---
  // The peer closed in order (FIN after its last message): kClosed, no error.
  void peer_closed(std::string detail);
  // The connection failed (reset, Terminate, an error completion): kFailed with `detail`.
  void fail(std::string detail);
  // The application found the peer breaking its own protocol (the ULP above this channel):
  // the connection ends with a Terminate carrying `cause` (kTerminate, then kFailed).
  void terminate(const wire::TerminateCause& cause, std::string detail);
  // The application closes it: kClosed, queued messages lost, no event.
  void close();

  // --- state ---
  // Moves the actions out, oldest first (`out` is cleared first: pass the same vector each
  // time and its memory is reused). Carrying one out may call back into the channel (a
  // refused post), which may add more: take again until none is left.
  void take_actions(std::vector<ChannelAction>& out);
  bool has_actions() const { return !actions_.empty(); }
  ChannelState state() const { return state_; }
  const std::string& detail() const { return detail_; }
  std::uint32_t peer_max_payload() const { return peer_max_payload_; }
  bool can_queue() const { return requests_.size() < config_.send_queue_limit; }
  // Work requests posted and not confirmed (unsignaled sends are confirmed by a later
  // completion, so some may never be, once the connection is gone).
  std::uint32_t outstanding() const { return outstanding_send_ + outstanding_recv_; }
  // Of those, the ones that will complete whatever happens: receives and signaled sends. A
  // caller closing the connection waits for these, not for outstanding().
  std::uint32_t awaited() const { return outstanding_recv_ + signaled_outstanding_; }
  ChannelCounters counters(TimePoint now) const;
  // Empty when the channel's own invariants hold (and the window's), else which is broken:
  // every receive buffer is in exactly one state; outstanding receives == buffers posted;
  // sends outstanding + free send buffers == send buffers; budget reserved == outstanding;
  // the posting order holds every outstanding send once; writes outstanding == slots they
  // hold, and with the data messages within the slots data may take.
  std::string broken_invariant() const;

 private:
  enum class RxState : std::uint8_t {
    kPosted,      // on the receive queue
    kDelivering,  // its message is with the application
    kHeld,        // hold(): kept for a later answer
    kReplying,    // its reply is queued; posted again when the reply is
    kIdle,        // not posted (the connection ended)
  };
  // kWrite: a tagged write's slot; it holds no credit and no octets of ours.
  enum class TxUse : std::uint8_t { kFree, kData, kControl, kUncredited, kWrite };
  struct QueuedRequest {
    std::vector<std::uint8_t> payload;
    std::optional<TaggedWrite> write;
  };
  struct QueuedReply {
    std::vector<std::uint8_t> payload;
    std::uint32_t rx_index = 0;
  };
  struct Early {
    bool send = false;
    std::uint32_t index = 0;
    std::uint32_t byte_len = 0;
    rdmap::WcStatus status = rdmap::WcStatus::kSuccess;
  };

  bool open() const { return state_ == ChannelState::kConnected; }
  bool post_receive(std::uint32_t index);
  void repost_data(std::uint32_t index);
  bool try_post(std::span<const std::uint8_t> payload, std::optional<std::uint32_t> reply_to,
                bool new_message, const std::optional<TaggedWrite>& write = std::nullopt);
  std::uint32_t data_slots() const;
  std::uint32_t data_room() const;
  bool post_update();
  void post_queued(TimePoint now);
  void end(ChannelState state, std::string detail, bool event);
  void terminate_for(CreditError e);
  void complete_send(std::uint32_t index, rdmap::WcStatus status);
  void confirm_send(std::uint32_t index, rdmap::WcStatus status);
  void posted_send(std::uint32_t index, ChannelAction& post, bool may_signal = true);
  void complete_receive(std::uint32_t index, std::uint32_t byte_len, rdmap::WcStatus status);
  void note_queue(TimePoint now);
  std::uint32_t held_or_delivering() const;

  ChannelConfig config_;
  std::uint32_t buffer_size_ = 0;
  std::uint32_t rx_count_ = 0;
  std::uint32_t tx_count_ = 0;
  std::unique_ptr<std::uint8_t[]> rx_;
  std::unique_ptr<std::uint8_t[]> tx_;
  std::vector<RxState> rx_state_;
  std::vector<TxUse> tx_use_;
  std::vector<bool> tx_signaled_;
  std::vector<std::uint32_t> tx_free_;
  std::deque<std::uint32_t> send_order_;  // sends posted and not confirmed, oldest first
  std::uint32_t signal_interval_ = 1;     // every this many sends, one is signaled
  std::uint32_t unsignaled_run_ = 0;      // unsignaled sends since the last signaled one
  std::uint32_t signaled_outstanding_ = 0;
  CompletionBudget budget_;
  std::uint32_t outstanding_send_ = 0;
  std::uint32_t outstanding_recv_ = 0;
  std::uint32_t writes_outstanding_ = 0;  // send slots held by tagged writes

  ChannelState state_ = ChannelState::kConnecting;
  std::string detail_;
  std::optional<CreditWindow> window_;
  std::uint32_t peer_max_payload_ = 0;
  std::uint32_t reply_reserve_ = 0;
  std::vector<Early> early_;  // completions before established()

  std::deque<QueuedRequest> requests_;
  std::deque<QueuedReply> replies_;
  bool refused_since_ready_ = false;
  std::optional<TimePoint> waiting_since_;  // the oldest queued message's wait began

  std::uint32_t held_ = 0;
  std::uint64_t refused_ = 0;
  std::uint64_t messages_sent_ = 0;
  std::uint64_t bytes_sent_ = 0;
  std::uint64_t writes_sent_ = 0;
  std::uint64_t bytes_written_ = 0;
  std::uint64_t messages_received_ = 0;
  std::uint64_t bytes_received_ = 0;
  std::uint64_t lost_ = 0;
  std::uint64_t held_released_ = 0;

  std::vector<ChannelAction> actions_;
};

}  // namespace rdma_interop::credit
