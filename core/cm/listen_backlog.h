// listen_backlog.h - a listener's backlog and half-open queue as a sans-I/O engine.
//
// The engine decides, for every connection a listener has, which of three queues it sits in
// and when it leaves; the transport does the I/O the engine asks for. It never touches a
// socket or a clock: connections are opaque ids, time is passed in (and must not go
// backwards; an earlier `now` is taken as the latest one seen).
//
//   half-open --request complete--> pending (holds a slot; the application decides)
//             \                   \-> over the backlog: kReject -> overflow Reject, gone
//              \                   \-> over the backlog: kDrop   -> waiting (FIFO) -> pending
//               \-> expired (request timeout) / evicted (queue full) / aborted (peer gone)
//
// A Request holds a backlog slot from the moment it is complete until the application
// accepts or rejects it, or it expires (decision_timeout) or its peer goes away: the slot is
// not freed when the application merely *reads* the request, as the Linux RDMA CM does.
// Half-open connections (TCP up, MPA Request not complete) never hold a slot.
//
// Counters follow the invariants in backlog_counters.h exactly, under any interleaving of
// the calls below: each connection is counted once, when it leaves a queue.
//
//   ListenBacklog backlog(config);
//   act(backlog.on_tcp_accepted(id, now));       // act(): deliver / reject / close each id
//   act(backlog.on_request_complete(id, now));
//   act(backlog.on_accepted(id));                // the application's decision frees a slot
//   at backlog.next_deadline(): act(backlog.on_timer(now));
//   for (auto& e : backlog.take_events()) ...    // backlog_added / backlog_removed
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/cm/backlog_counters.h"

namespace rdma_interop::cm {

// The private data of the MPA Reject Reply a listener sends when its backlog is full (policy
// kReject): exactly these ASCII octets, no terminator. Our initiators report such a Reject as
// CmFailure::kBacklogFull ("backlog_full") instead of kPeerRejected, so a client can tell
// "the server is busy, retry" from "the application said no". Other stacks see an ordinary
// Reject with private data (RFC 5044 s7.1 leaves its meaning to the ULP).
inline constexpr std::string_view kBacklogFullMarker = "rdma-interop:backlog-full";
std::vector<std::uint8_t> backlog_full_private_data();
// True when `private_data` is exactly kBacklogFullMarker.
bool is_backlog_full_marker(std::span<const std::uint8_t> private_data);

// max(4 * backlog, 64): enough half-open room that a burst of honest clients is not evicted
// by its own slow starters, small enough to bound memory under a half-open flood.
std::uint32_t default_half_open_limit(std::uint32_t backlog);

struct BacklogConfig {
  std::uint32_t backlog = 16;  // slots; 0 is taken as 1
  BacklogOverflow overflow = BacklogOverflow::kReject;
  std::uint32_t half_open_limit = 0;  // 0: default_half_open_limit(backlog)
  // Half-open expiry: the MPA Request must be complete this long after the TCP accept
  // (the responder's MpaPolicy::request_timeout).
  std::chrono::milliseconds request_timeout{5000};
  // A Request the application has not accepted or rejected this long after it took a slot
  // is rejected and counted pending_expired.
  std::chrono::milliseconds decision_timeout{30000};
  // kDrop: how long a Request waits unanswered for a slot before it is closed (counted
  // overflow_dropped). Shorter than an initiator's reply timeout, so a retrying initiator
  // and the listener agree that the attempt is over.
  std::chrono::milliseconds overflow_timeout{5000};
};

using BacklogConnId = std::uint64_t;  // the transport's name for a connection

// What the transport must do for one connection.
enum class BacklogActionType : std::uint8_t {
  kDeliver,         // the Request took a slot: hand it to the application
  kRejectOverflow,  // send the MPA Reply with Reject and kBacklogFullMarker, then close
  kRejectExpired,   // the application did not decide in time: Reject (no marker), close
  kClose,           // close without an answer: half-open expired or evicted, or a Request
                    // that waited for a slot too long (kDrop)
};

// Why a connection is closed without an answer (kClose), so the transport reports it without
// working it out: the engine counted it as exactly one of these.
enum class BacklogCloseReason : std::uint8_t {
  kNone,             // not a kClose
  kHalfOpenExpired,  // no complete Request within request_timeout (half_open_expired)
  kHalfOpenEvicted,  // the oldest half-open connection, the queue being full (half_open_evicted)
  kOverflowDropped,  // a Request that waited over the backlog too long (overflow_dropped)
};
std::string_view reason_name(BacklogCloseReason r);  // "half_open_expired", ...

struct BacklogAction {
  BacklogActionType type = BacklogActionType::kClose;
  BacklogConnId id = 0;
  BacklogCloseReason reason = BacklogCloseReason::kNone;
  friend bool operator==(const BacklogAction&, const BacklogAction&) = default;
};

// backlog_added / backlog_removed: a slot taken or freed, for the application.
enum class BacklogEventType : std::uint8_t { kAdded, kRemoved };
enum class BacklogEventReason : std::uint8_t {
  kRequest,   // added: a Request arrived and found a free slot
  kWaited,    // added: a Request that waited over the backlog (kDrop) got a freed slot
  kAccepted,  // removed: the application accepted
  kRejected,  // removed: the application rejected
  kExpired,   // removed: decision_timeout passed
  kAborted,   // removed: the peer went away (or the listener closed) before a decision
};
std::string_view event_name(BacklogEventType t);     // "backlog_added", "backlog_removed"
std::string_view reason_name(BacklogEventReason r);  // "request", "waited", "accepted", ...

struct BacklogEvent {
  BacklogEventType type = BacklogEventType::kAdded;
  BacklogConnId id = 0;
  BacklogEventReason reason = BacklogEventReason::kRequest;
  std::uint32_t pending = 0;  // slots held right after this event
  friend bool operator==(const BacklogEvent&, const BacklogEvent&) = default;
};

// Where a connection is now (tests, diagnostics).
enum class BacklogStage : std::uint8_t { kHalfOpen, kPending, kWaiting };

class ListenBacklog {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Events not taken are kept up to this many; older ones are dropped (events_dropped()).
  static constexpr std::size_t kMaxEvents = 4096;

  explicit ListenBacklog(const BacklogConfig& config);

  // A new TCP connection: half-open until its Request is complete. When the half-open
  // queue is full the oldest half-open connection is evicted (kClose for it). An id
  // already known is ignored.
  std::vector<BacklogAction> on_tcp_accepted(BacklogConnId id, TimePoint now);
  // The connection's MPA Request is complete and valid. kDeliver when a slot is free;
  // otherwise kRejectOverflow (kReject) or nothing yet (kDrop: it waits). Ignored unless
  // the id is half-open.
  std::vector<BacklogAction> on_request_complete(BacklogConnId id, TimePoint now);
  // The application accepted / rejected a pending Request: its slot goes to the oldest
  // waiting Request (kDeliver). Ignored unless the id is pending (e.g. it expired first):
  // the return is false then, and the transport must refuse the decision.
  bool on_accepted(BacklogConnId id, std::vector<BacklogAction>& actions);
  bool on_rejected(BacklogConnId id, std::vector<BacklogAction>& actions);
  std::vector<BacklogAction> on_accepted(BacklogConnId id);
  std::vector<BacklogAction> on_rejected(BacklogConnId id);
  // The peer closed, reset or sent garbage (or the transport gave up on it), in any
  // stage: counted half_open_aborted, pending_aborted or overflow_dropped. Unknown ids are
  // ignored, so the transport may report every connection end.
  std::vector<BacklogAction> on_peer_gone(BacklogConnId id);
  // Expiries due at `now`: half-open (kClose), pending (kRejectExpired), waiting (kClose).
  std::vector<BacklogAction> on_timer(TimePoint now);
  std::optional<TimePoint> next_deadline() const;

  BacklogCounters counters() const { return counters_; }
  const BacklogConfig& config() const { return config_; }
  std::optional<BacklogStage> stage_of(BacklogConnId id) const;
  // Every id the engine holds (for a listener closing down), in no particular order.
  std::vector<BacklogConnId> ids() const;

  // Events since the last call, oldest first.
  std::vector<BacklogEvent> take_events();
  std::uint64_t events_dropped() const { return events_dropped_; }

 private:
  struct Entry {
    BacklogStage stage = BacklogStage::kHalfOpen;
    std::uint64_t seq = 0;  // position in its stage's queue
    TimePoint deadline{};
  };
  using Queue = std::map<std::uint64_t, BacklogConnId>;  // seq -> id, oldest first

  TimePoint clamp(TimePoint now);
  Queue& queue_of(BacklogStage stage);
  void enqueue(BacklogConnId id, Entry& e, BacklogStage stage, TimePoint deadline);
  void dequeue(const Entry& e);
  void take_slot(BacklogConnId id, BacklogEventReason reason, TimePoint now,
                 std::vector<BacklogAction>& actions);
  void free_slot(std::unordered_map<BacklogConnId, Entry>::iterator it, BacklogEventReason why,
                 TimePoint now, std::vector<BacklogAction>& actions);
  bool decide(BacklogConnId id, BacklogEventReason why, std::vector<BacklogAction>& actions);
  void emit(BacklogEventType type, BacklogConnId id, BacklogEventReason reason);

  BacklogConfig config_;
  BacklogCounters counters_;
  std::unordered_map<BacklogConnId, Entry> entries_;
  Queue half_open_;
  Queue pending_;
  Queue waiting_;
  std::uint64_t next_seq_ = 1;
  TimePoint latest_{};
  std::deque<BacklogEvent> events_;
  std::uint64_t events_dropped_ = 0;
};

}  // namespace rdma_interop::cm
