// credit_window.h - one connection's end-to-end credits as a sans-I/O engine.
//
// iWARP has no RNR retry: a Send that finds no posted receive is fatal (DDP untagged "no
// buffer", RFC 5041 s7.2 code 0x02, then Terminate). So a side sends a message only with a
// credit, and its credits are exactly the data receives the peer has posted for it and told
// it about. The engine keeps both directions of one connection:
//
//   send side     credits (data receives the peer announced and we have not used),
//                 control credits (the peer's control receives, for standalone updates),
//                 send queue slots (data may not take the last control_send_slots of them).
//   receive side  data receives posted, of which granted (the peer may use them) or pending
//                 (not yet announced); control receives posted and returns pending.
//
// Grants ride on the 4-octet header in front of every message (credit_header.h). When no
// data is going the peer's way, a standalone credit update carries them: it spends a control
// credit (the peer keeps control_receives buffers posted beyond its data window) and a send
// slot data may not take, so a grant is never stuck behind data; it is sent only for data
// grants, never for control returns alone, so updates cannot ping-pong. Control returns ride
// on the next header of either kind. Nothing blocks and nothing is queued here: a send without a
// credit or slot returns a try-again error (is_try_again) and the caller keeps its message.
//
// Invariants (broken_invariant(); asserted after every call in builds without NDEBUG):
//   credits_granted_total == sent + credits          (grants conserved, send side)
//   granted_total == received + granted              (grants conserved, receive side)
//   posted == granted + pending_grant <= receive_window
//   credits <= peer_receive_window, control credits <= peer_control_receives
//   send slots in use <= send_queue_depth, data slots <= depth - control_send_slots
// Every count is unsigned and every decrement is checked first, so none goes negative.
//
//   CreditWindow w(config);                       // both sides agree the numbers at setup
//   send:     auto h = w.send_message();          // h: the header to prepend, or EAGAIN-like
//   receive:  auto m = w.on_receive(bytes);       // error: terminate (terminate_needed)
//             data -> the application; later w.on_receive_posted() when its buffer is back;
//             control -> re-post the control receive at once, then w.on_control_receive_posted()
//   after each event: while (w.wants_credit_update()) post(w.send_credit_update())
//   send completion:  w.on_send_completed(kind)
//
// Providers post a control receive again as soon as one completes (it holds no application
// data): the peer's next updates depend on its return (without it two sides can stall, each
// waiting for the other). The receive queue is one FIFO of buffers of the largest message
// size, sized receive_window + control_receives: the data/control split is in the counts.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/credit/credit_error.h"
#include "core/credit/credit_header.h"
#include "core/util/expected.h"

namespace rdma_interop::credit {

// Both sides' numbers, agreed at connection setup (e.g. in the MPA private data): our
// receive_window is the peer's peer_receive_window and the same for control receives.
struct CreditConfig {
  // Data receives we keep posted for the peer at most: the memory bound (<= 0xFFFF).
  std::uint32_t receive_window = 16;
  // Of those, posted before the connection was established and announced at setup: the
  // peer starts with this many credits. The rest are granted through headers as posted.
  std::uint32_t initial_receives = 16;
  // The peer's receive_window / initial_receives: our maximum and starting credits.
  std::uint32_t peer_receive_window = 16;
  std::uint32_t peer_initial_receives = 16;
  // Control receives each side keeps posted for standalone updates (1..255), all posted and
  // announced at setup.
  std::uint32_t control_receives = 2;
  std::uint32_t peer_control_receives = 2;
  // Send queue entries of this connection, and how many of them only control messages may
  // use (1 <= control_send_slots < send_queue_depth).
  std::uint32_t send_queue_depth = 18;
  std::uint32_t control_send_slots = 2;
  // wants_credit_update() when this many grants are pending (0: max(1, receive_window / 4)),
  std::uint32_t grant_batch = 0;
  // ... or when any is pending and the peer holds at most this many credits (0 is valid: only
  // once the peer has none; kDefaultLowWater: receive_window / 4), and never below
  // peer_reply_reserve: the credits the peer keeps for replies (credit_params.h). A peer whose
  // requests wait for more than its reserve must hear of every buffer we free for it, or it
  // waits for a grant we keep until a batch fills.
  std::uint32_t low_water = kDefaultLowWater;
  std::uint32_t peer_reply_reserve = 0;  // < receive_window
  static constexpr std::uint32_t kDefaultLowWater = 0xFFFFFFFF;
  friend bool operator==(const CreditConfig&, const CreditConfig&) = default;
};
// kBadConfig when the numbers cannot work: a window of 0 or over 0xFFFF, initial over the
// window, control receives 0 or over 255, control slots 0 or not below the queue depth.
Expected<CreditConfig, CreditError> validate(const CreditConfig& config);

enum class SendKind : std::uint8_t { kData, kControl };
std::string_view kind_name(SendKind k);  // "data", "control"

// A message from the peer, its header applied.
struct ReceivedMessage {
  SendKind kind = SendKind::kData;
  CreditHeader header;
  std::span<const std::uint8_t> payload;  // after the header; empty for kControl
};

// Per-connection figures for telemetry and tests (a snapshot; plain values).
struct CreditCounters {
  // send side
  std::uint32_t credits = 0;
  std::uint32_t control_credits = 0;
  std::uint32_t data_slots_in_use = 0;
  std::uint32_t control_slots_in_use = 0;
  std::uint64_t credits_granted_total = 0;  // initial + every grant received
  std::uint64_t sent = 0;                   // data messages sent
  std::uint64_t updates_sent = 0;           // standalone credit updates sent
  std::uint64_t stalls_no_credit = 0;       // send_message() refused: kNoCredit
  std::uint64_t stalls_no_slot = 0;         // send_message() refused: kNoSendSlot
  std::uint64_t update_stalls = 0;          // send_credit_update() refused: no control credit/slot
  // receive side
  std::uint32_t posted = 0;         // data receives posted and not yet consumed
  std::uint32_t granted = 0;        // of those, announced: the peer's credits as we know them
  std::uint32_t pending_grant = 0;  // of those, not yet announced
  std::uint32_t control_posted = 0;
  std::uint32_t control_return_pending = 0;
  std::uint64_t granted_total = 0;  // initial + every grant sent
  std::uint64_t received = 0;       // data messages received
  std::uint64_t updates_received = 0;
  friend bool operator==(const CreditCounters&, const CreditCounters&) = default;
};

class CreditWindow {
 public:
  // The config must pass validate() (checked: an invalid one is clamped to the nearest valid
  // numbers so the engine stays safe; config() shows what is used).
  explicit CreditWindow(const CreditConfig& config);

  // --- send side ---
  // Takes a credit and a data send slot and returns the header to put in front of the
  // payload, carrying every pending grant and control return. kNoCredit / kNoSendSlot: nothing
  // changed but the stall counters, retry later. The send queue entry is ours until
  // on_send_completed(kData). `keep` credits are left alone (a request leaves the reply
  // reserve to replies): with credits() <= keep the answer is kNoCredit, counted as a stall.
  Expected<CreditHeader, CreditError> send_message(std::uint32_t keep = 0);
  // True when pending grants should go now on their own: grant_batch reached, or the peer is
  // at or below low_water credits. Does not say whether a control credit and slot are free.
  bool wants_credit_update() const;
  // Takes a control credit and a send slot (any free one) and returns a standalone update
  // carrying every pending grant and control return. kNothingToGrant (no pending grant),
  // kNoControlCredit, kNoSendSlot: nothing changed.
  Expected<CreditHeader, CreditError> send_credit_update();
  // A posted send (of that kind) completed, successfully or flushed: its slot is free.
  // kNotPosted when none of that kind is in use.
  Expected<SendKind, CreditError> on_send_completed(SendKind kind);

  // --- receive side ---
  // A whole Send payload from the peer: decodes the header, consumes the receive it landed
  // in (data or control) and applies its grant and control return. On error nothing changed
  // and the connection must end (terminate_needed): kPeerOverrun is the DDP "no buffer" case.
  Expected<ReceivedMessage, CreditError> on_receive(std::span<const std::uint8_t> message);
  // The same with the header already decoded (payload not involved).
  Expected<SendKind, CreditError> on_receive_header(const CreditHeader& header);
  // A data receive buffer was posted for the peer: a grant is pending. kReceiveWindowFull.
  Expected<std::uint32_t, CreditError> on_receive_posted();
  // A control receive was posted again: its return is pending. kControlReceivesFull.
  Expected<std::uint32_t, CreditError> on_control_receive_posted();

  // --- state ---
  std::uint32_t credits() const { return credits_; }
  std::uint32_t control_credits() const { return control_credits_; }
  bool can_send(std::uint32_t keep = 0) const;  // send_message(keep) would succeed
  CreditCounters counters() const;
  const CreditConfig& config() const { return config_; }
  // Empty when every invariant above holds, else which one is broken.
  std::string_view broken_invariant() const;

 private:
  bool can_take_data_slot() const;
  CreditHeader take_pending(bool control);
  void check() const;

  CreditConfig config_;
  std::uint32_t grant_batch_ = 1;
  std::uint32_t low_water_ = 0;
  // send side
  std::uint32_t credits_ = 0;
  std::uint32_t control_credits_ = 0;
  std::uint32_t data_slots_ = 0;
  std::uint32_t control_slots_ = 0;
  std::uint64_t credits_granted_total_ = 0;
  std::uint64_t control_credits_total_ = 0;  // initial + every return received
  std::uint64_t sent_ = 0;
  std::uint64_t updates_sent_ = 0;
  std::uint64_t stalls_no_credit_ = 0;
  std::uint64_t stalls_no_slot_ = 0;
  std::uint64_t update_stalls_ = 0;
  // receive side
  std::uint32_t posted_ = 0;
  std::uint32_t granted_ = 0;
  std::uint32_t pending_grant_ = 0;
  std::uint32_t control_posted_ = 0;
  std::uint32_t control_return_pending_ = 0;
  std::uint64_t granted_total_ = 0;
  std::uint64_t received_ = 0;
  std::uint64_t updates_received_ = 0;
};

}  // namespace rdma_interop::credit
