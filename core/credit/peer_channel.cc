#include "core/credit/peer_channel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::credit {
namespace {

constexpr std::uint32_t kMaxMessage = 0x00FFFFFF;

// The nearest configuration that works: the constructor's fallback for a bad one, so the
// engine stays safe whatever it is given (config_problem() says what was wrong).
ChannelConfig clamped(ChannelConfig c) {
  c.max_message = std::clamp<std::uint32_t>(c.max_message, 1, kMaxMessage);
  c.receive_window = std::clamp<std::uint32_t>(c.receive_window, 1, 0xFFFF);
  c.control_receives = std::clamp<std::uint32_t>(c.control_receives, 1, 0xFF);
  c.send_queue_depth = std::max<std::uint32_t>(c.send_queue_depth, 2);
  c.control_send_slots = std::clamp<std::uint32_t>(c.control_send_slots, 1, c.send_queue_depth - 1);
  c.reply_reserve = std::min(c.reply_reserve, c.receive_window - 1);
  c.grant_batch = std::min(c.grant_batch, c.receive_window);
  return c;
}

// The Terminate a peer that broke the credit protocol gets. A message beyond its credits is
// what DDP calls a Send that found no buffer (RFC 5041 s7.2: untagged buffer error, code
// 0x02); a malformed credit header is an error of our ULP, which RDMAP reports as a remote
// operation error of unspecified cause (RFC 5040 s7.4, code 0xFF).
wire::TerminateCause cause_for(CreditError e) {
  if (e == CreditError::kPeerOverrun || e == CreditError::kControlOverrun) {
    return {wire::TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer, wire::kDdpUntaggedCodeNoBuffer};
  }
  return {wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation, wire::kRdmapCodeUnspecified};
}

ChannelAction post_send_action(std::uint32_t index, std::uint32_t length) {
  ChannelAction a;
  a.type = ChannelAction::Type::kPostSend;
  a.index = index;
  a.length = length;
  return a;
}

ChannelAction event(ChannelAction::Type type, std::uint32_t index = 0) {
  ChannelAction a;
  a.type = type;
  a.index = index;
  return a;
}

}  // namespace

std::string config_problem(const ChannelConfig& c) {
  if (c.max_message == 0 || c.max_message > kMaxMessage) return "max_message must be 1..16777215";
  if (c.receive_window == 0 || c.receive_window > 0xFFFF) return "receive_window must be 1..65535";
  if (c.control_receives == 0 || c.control_receives > 0xFF)
    return "control_receives must be 1..255";
  if (c.control_send_slots == 0 || c.control_send_slots >= c.send_queue_depth) {
    return "control_send_slots must be at least 1 and below send_queue_depth";
  }
  if (c.reply_reserve >= c.receive_window) return "reply_reserve must be below receive_window";
  if (c.grant_batch > c.receive_window) return "grant_batch must be at most receive_window";
  return {};
}

std::string_view status_name(SendStatus s) {
  switch (s) {
    case SendStatus::kOk:
      return "ok";
    case SendStatus::kTryAgain:
      return "try_again";
    case SendStatus::kTooLong:
      return "too_long";
    case SendStatus::kUnknownPeer:
      return "unknown_peer";
    case SendStatus::kPeerFailed:
      return "peer_failed";
    case SendStatus::kNotHeld:
      return "not_held";
    case SendStatus::kNotNow:
      return "not_now";
  }
  return "unknown";
}

std::string_view state_name(ChannelState s) {
  switch (s) {
    case ChannelState::kConnecting:
      return "connecting";
    case ChannelState::kConnected:
      return "connected";
    case ChannelState::kFailed:
      return "failed";
    case ChannelState::kClosed:
      return "closed";
  }
  return "unknown";
}

std::string_view type_name(ChannelAction::Type t) {
  switch (t) {
    case ChannelAction::Type::kPostSend:
      return "post_send";
    case ChannelAction::Type::kPostWrite:
      return "post_write";
    case ChannelAction::Type::kPostRecv:
      return "post_recv";
    case ChannelAction::Type::kDeliver:
      return "deliver";
    case ChannelAction::Type::kTerminate:
      return "terminate";
    case ChannelAction::Type::kReady:
      return "ready";
    case ChannelAction::Type::kFailed:
      return "failed";
    case ChannelAction::Type::kClosed:
      return "closed";
  }
  return "unknown";
}

PeerChannel::PeerChannel(const ChannelConfig& config)
    : config_(clamped(config)),
      buffer_size_(config_.max_message + static_cast<std::uint32_t>(kCreditHeaderSize)),
      rx_count_(config_.receive_window + config_.control_receives),
      tx_count_(config_.send_queue_depth),
      rx_(std::make_unique_for_overwrite<std::uint8_t[]>(std::size_t{buffer_size_} * rx_count_)),
      tx_(std::make_unique_for_overwrite<std::uint8_t[]>(std::size_t{buffer_size_} * tx_count_)),
      rx_state_(rx_count_, RxState::kPosted),
      tx_use_(tx_count_, TxUse::kFree),
      tx_signaled_(tx_count_, false),
      // Half the data slots: a signaled send is always posted before the unconfirmed ones
      // could fill the slots data may take (and no completion would come to free them).
      signal_interval_(
          std::max<std::uint32_t>(1, (config_.send_queue_depth - config_.control_send_slots) / 2)),
      budget_(CompletionBudget::for_queues(tx_count_, rx_count_)) {
  tx_free_.reserve(tx_count_);
  for (std::uint32_t i = tx_count_; i > 0; --i) tx_free_.push_back(i - 1);
  // Every receive buffer goes to the connection as an initial receive: posted, with its entry.
  (void)budget_.reserve(CompletionKind::kReceive, rx_count_);
  outstanding_recv_ = rx_count_;
}

CreditParams PeerChannel::announced() const {
  CreditParams p;
  p.control_receives = static_cast<std::uint8_t>(config_.control_receives);
  p.receive_window = static_cast<std::uint16_t>(config_.receive_window);
  p.initial_receives = p.receive_window;
  p.reply_reserve = static_cast<std::uint16_t>(config_.reply_reserve);
  p.max_message = buffer_size_;
  return p;
}

std::uint8_t* PeerChannel::receive_buffer(std::uint32_t index) const {
  return index < rx_count_ ? rx_.get() + std::size_t{index} * buffer_size_ : nullptr;
}

std::uint8_t* PeerChannel::send_buffer(std::uint32_t index) const {
  return index < tx_count_ ? tx_.get() + std::size_t{index} * buffer_size_ : nullptr;
}

std::span<std::uint8_t> PeerChannel::receive_memory() const {
  return {rx_.get(), std::size_t{buffer_size_} * rx_count_};
}

std::span<std::uint8_t> PeerChannel::send_memory() const {
  return {tx_.get(), std::size_t{buffer_size_} * tx_count_};
}

std::size_t PeerChannel::bytes_allocated() const {
  return std::size_t{buffer_size_} * (rx_count_ + tx_count_);
}

Expected<CreditConfig, std::string> PeerChannel::established(const CreditParams& theirs,
                                                             TimePoint now) {
  if (state_ != ChannelState::kConnecting) {
    return unexpected(std::string("the channel is ") + std::string(state_name(state_)) +
                      ", not connecting");
  }
  CreditConfig cc =
      config_for(announced(), theirs, config_.send_queue_depth, config_.control_send_slots);
  cc.grant_batch = config_.grant_batch != 0 ? config_.grant_batch
                                            : std::max<std::uint32_t>(1, cc.receive_window / 2);
  if (!validate(cc) || theirs.max_message < kCreditHeaderSize) {
    std::string why = "credit parameters do not work together";
    end(ChannelState::kFailed, why, false);
    return unexpected(std::move(why));
  }
  window_.emplace(cc);
  peer_max_payload_ = theirs.max_message - static_cast<std::uint32_t>(kCreditHeaderSize);
  reply_reserve_ = std::min(config_.reply_reserve, cc.peer_receive_window - 1);
  state_ = ChannelState::kConnected;
  const std::vector<Early> early = std::move(early_);
  early_.clear();
  for (const Early& e : early) {
    if (e.send) {
      on_send_completed(e.index, e.status, now);
    } else {
      on_receive_completed(e.index, e.byte_len, e.status, now);
    }
  }
  return cc;
}

// ---- the application -----------------------------------------------------------------

SendStatus PeerChannel::send(std::span<const std::uint8_t> payload, TimePoint now,
                             const std::optional<TaggedWrite>& write) {
  if (state_ == ChannelState::kConnecting || state_ == ChannelState::kClosed) {
    return SendStatus::kUnknownPeer;
  }
  if (state_ == ChannelState::kFailed) return SendStatus::kPeerFailed;
  if (payload.size() > peer_max_payload_) return SendStatus::kTooLong;
  if (write && data_slots() < 2) return SendStatus::kTooLong;
  if (write && write->borrowed) {
    // Its octets are the caller's only while this call runs: posted now or not at all. What
    // try_post would refuse is looked at first, so a refusal counts nothing (the caller
    // sends the octets again another way, and that one is counted).
    const bool now = requests_.empty() && replies_.empty() && !config_.ignore_credits &&
                     window_->can_send(reply_reserve_) && tx_free_.size() >= 2 &&
                     data_room() >= 2 && budget_.available() >= 2;
    if (!now || !try_post(payload, std::nullopt, true, write)) return SendStatus::kNotNow;
    return SendStatus::kOk;
  }
  if (requests_.empty() && replies_.empty() && try_post(payload, std::nullopt, true, write)) {
    return SendStatus::kOk;
  }
  if (!open())
    return state_ == ChannelState::kFailed ? SendStatus::kPeerFailed : SendStatus::kUnknownPeer;
  if (!can_queue()) {
    ++refused_;
    refused_since_ready_ = true;
    return SendStatus::kTryAgain;
  }
  note_queue(now);
  requests_.push_back(
      QueuedRequest{std::vector<std::uint8_t>(payload.begin(), payload.end()), write});
  return SendStatus::kOk;
}

SendStatus PeerChannel::reply(std::uint32_t index, std::span<const std::uint8_t> payload,
                              TimePoint now) {
  if (index >= rx_count_) return SendStatus::kNotHeld;
  const RxState st = rx_state_[index];
  if (st != RxState::kDelivering && st != RxState::kHeld) {
    if (state_ == ChannelState::kFailed) return SendStatus::kPeerFailed;
    return SendStatus::kNotHeld;
  }
  if (state_ == ChannelState::kFailed) return SendStatus::kPeerFailed;
  if (state_ != ChannelState::kConnected) return SendStatus::kUnknownPeer;
  if (payload.size() > peer_max_payload_) return SendStatus::kTooLong;
  if (replies_.empty() && try_post(payload, index, true)) return SendStatus::kOk;
  if (!open())
    return state_ == ChannelState::kFailed ? SendStatus::kPeerFailed : SendStatus::kUnknownPeer;
  if (st == RxState::kHeld) --held_;
  rx_state_[index] = RxState::kReplying;
  note_queue(now);
  replies_.push_back(QueuedReply{std::vector<std::uint8_t>(payload.begin(), payload.end()), index});
  return SendStatus::kOk;
}

SendStatus PeerChannel::hold(std::uint32_t index) {
  if (index >= rx_count_) return SendStatus::kNotHeld;
  if (state_ == ChannelState::kFailed) return SendStatus::kPeerFailed;
  if (rx_state_[index] == RxState::kHeld) return SendStatus::kOk;
  if (rx_state_[index] != RxState::kDelivering) return SendStatus::kNotHeld;
  rx_state_[index] = RxState::kHeld;
  ++held_;
  return SendStatus::kOk;
}

SendStatus PeerChannel::release(std::uint32_t index, TimePoint) {
  if (index >= rx_count_) return SendStatus::kNotHeld;
  const RxState st = rx_state_[index];
  if (st != RxState::kDelivering && st != RxState::kHeld) {
    return state_ == ChannelState::kFailed ? SendStatus::kPeerFailed : SendStatus::kNotHeld;
  }
  repost_data(index);
  return SendStatus::kOk;
}

void PeerChannel::delivered(std::uint32_t index, TimePoint) {
  if (index < rx_count_ && rx_state_[index] == RxState::kDelivering) repost_data(index);
}

void PeerChannel::flush(TimePoint now) {
  post_queued(now);
}

// ---- completions ---------------------------------------------------------------------

void PeerChannel::on_send_completed(std::uint32_t index, rdmap::WcStatus status, TimePoint) {
  if (state_ == ChannelState::kConnecting) {
    early_.push_back(Early{true, index, 0, status});
    return;
  }
  complete_send(index, status);
}

void PeerChannel::on_receive_completed(std::uint32_t index, std::uint32_t byte_len,
                                       rdmap::WcStatus status, TimePoint) {
  if (state_ == ChannelState::kConnecting) {
    // The peer may Send the moment setup completes, before the caller knows its numbers.
    early_.push_back(Early{false, index, byte_len, status});
    return;
  }
  complete_receive(index, byte_len, status);
}

// A send's completion: it and every send posted before it are done (sends complete in
// order; one that failed has completed on its own already, flushed).
void PeerChannel::complete_send(std::uint32_t index, rdmap::WcStatus status) {
  // A completion for a buffer not posted (a provider's bug) is ignored, not trusted.
  if (index >= tx_count_ || tx_use_[index] == TxUse::kFree) return;
  while (!send_order_.empty()) {
    const std::uint32_t oldest = send_order_.front();
    send_order_.pop_front();
    if (oldest == index) break;
    confirm_send(oldest, rdmap::WcStatus::kSuccess);  // unsignaled, done before `index`
  }
  confirm_send(index, status);
}

// `may_signal` false: a tagged write, never signaled (its message, posted right after it,
// is, if the run says so). It counts in the run all the same: it holds a slot until a later
// completion confirms it, like any unsignaled send.
void PeerChannel::posted_send(std::uint32_t index, ChannelAction& post, bool may_signal) {
  post.signaled = ++unsignaled_run_ >= signal_interval_ && may_signal;
  if (post.signaled) {
    unsignaled_run_ = 0;
    ++signaled_outstanding_;
  }
  tx_signaled_[index] = post.signaled;
  send_order_.push_back(index);
}

void PeerChannel::confirm_send(std::uint32_t index, rdmap::WcStatus status) {
  const TxUse use = std::exchange(tx_use_[index], TxUse::kFree);
  if (tx_signaled_[index]) {
    tx_signaled_[index] = false;
    --signaled_outstanding_;
  }
  tx_free_.push_back(index);
  --outstanding_send_;
  (void)budget_.release(CompletionKind::kSend);
  if (use == TxUse::kWrite) {
    --writes_outstanding_;  // no credit, no window slot: only the send queue's
  } else if (use != TxUse::kUncredited && window_) {
    (void)window_->on_send_completed(use == TxUse::kData ? SendKind::kData : SendKind::kControl);
  }
  if (status != rdmap::WcStatus::kSuccess && open()) {
    fail("a send completed with " + std::string(rdmap::wc_status_name(status)));
  }
}

void PeerChannel::complete_receive(std::uint32_t index, std::uint32_t byte_len,
                                   rdmap::WcStatus status) {
  if (index >= rx_count_ || rx_state_[index] != RxState::kPosted) return;
  rx_state_[index] = RxState::kIdle;
  --outstanding_recv_;
  (void)budget_.release(CompletionKind::kReceive);
  if (status != rdmap::WcStatus::kSuccess) {
    if (open()) fail("a receive completed with " + std::string(rdmap::wc_status_name(status)));
    return;
  }
  if (!open()) return;
  const std::span<const std::uint8_t> bytes(receive_buffer(index),
                                            std::min(byte_len, buffer_size_));
  auto m = window_->on_receive(bytes);
  if (!m) {
    terminate_for(m.error());
    return;
  }
  if (m->kind == SendKind::kControl) {
    // A control receive holds no application data: posted again at once, its return owed
    // (without it the two sides can stall, each waiting for the other's update).
    if (post_receive(index)) (void)window_->on_control_receive_posted();
    return;
  }
  rx_state_[index] = RxState::kDelivering;
  ++messages_received_;
  bytes_received_ += m->payload.size();
  ChannelAction a = event(ChannelAction::Type::kDeliver, index);
  a.payload = m->payload;
  actions_.push_back(std::move(a));
}

void PeerChannel::on_post_refused(const ChannelAction& post, std::string_view why) {
  if (post.type == ChannelAction::Type::kPostSend) {
    if (post.index >= tx_count_ || tx_use_[post.index] == TxUse::kFree) return;
    const TxUse use = tx_use_[post.index];
    if (use == TxUse::kData || use == TxUse::kUncredited) {
      // Never on the wire: not sent, and lost.
      --messages_sent_;
      bytes_sent_ -= std::min<std::uint64_t>(bytes_sent_, post.length - kCreditHeaderSize);
      ++lost_;
    }
    // Never posted: out of the order, so it confirms nothing posted before it.
    if (auto it = std::find(send_order_.begin(), send_order_.end(), post.index);
        it != send_order_.end()) {
      send_order_.erase(it);
    }
    confirm_send(post.index, rdmap::WcStatus::kFlushed);
  } else if (post.type == ChannelAction::Type::kPostWrite) {
    if (post.index >= tx_count_ || tx_use_[post.index] != TxUse::kWrite) return;
    // Never on the wire. Failed first, so the detail says why and not "flushed"; the
    // message after it is the caller's to refuse too (it must not go without its data).
    fail("the provider refused a write: " + std::string(why));
    --writes_sent_;
    bytes_written_ -= std::min<std::uint64_t>(bytes_written_, post.write.length);
    if (auto it = std::find(send_order_.begin(), send_order_.end(), post.index);
        it != send_order_.end()) {
      send_order_.erase(it);
    }
    confirm_send(post.index, rdmap::WcStatus::kFlushed);
    return;
  } else if (post.type == ChannelAction::Type::kPostRecv) {
    if (post.index >= rx_count_ || rx_state_[post.index] != RxState::kPosted) return;
    rx_state_[post.index] = RxState::kIdle;
    --outstanding_recv_;
    (void)budget_.release(CompletionKind::kReceive);
  } else {
    return;
  }
  fail(std::string("the provider refused a ") +
       (post.type == ChannelAction::Type::kPostSend ? "send" : "receive") + ": " +
       std::string(why));
}

// ---- the connection's end --------------------------------------------------------------

void PeerChannel::peer_closed(std::string detail) {
  end(ChannelState::kClosed, std::move(detail), true);
}

void PeerChannel::fail(std::string detail) {
  end(ChannelState::kFailed, std::move(detail), true);
}

void PeerChannel::close() {
  end(ChannelState::kClosed, "closed by the application", false);
}

void PeerChannel::end(ChannelState state, std::string detail, bool announce) {
  if (state_ == ChannelState::kFailed || state_ == ChannelState::kClosed) return;
  state_ = state;
  detail_ = std::move(detail);
  lost_ += requests_.size() + replies_.size();
  for (const QueuedReply& r : replies_) rx_state_[r.rx_index] = RxState::kIdle;
  requests_.clear();
  replies_.clear();
  waiting_since_.reset();
  refused_since_ready_ = false;
  // Held messages can no longer be answered: their buffers come back now, counted. One with
  // a handler right now keeps its octets until the handler returns (delivered()).
  for (RxState& st : rx_state_) {
    if (st == RxState::kHeld) {
      st = RxState::kIdle;
      ++held_released_;
    }
  }
  held_ = 0;
  if (announce) {
    ChannelAction a = event(state == ChannelState::kFailed ? ChannelAction::Type::kFailed
                                                           : ChannelAction::Type::kClosed);
    a.detail = detail_;
    actions_.push_back(std::move(a));
  }
}

void PeerChannel::terminate_for(CreditError e) {
  terminate(cause_for(e), "peer broke the credit protocol: " + std::string(describe(e)) + " (" +
                              std::string(error_name(e)) + ")");
}

void PeerChannel::terminate(const wire::TerminateCause& cause, std::string detail) {
  if (state_ == ChannelState::kFailed || state_ == ChannelState::kClosed) return;
  ChannelAction a = event(ChannelAction::Type::kTerminate);
  a.cause = cause;
  a.detail = detail;
  actions_.push_back(std::move(a));
  fail(std::move(detail));
}

// ---- posting -------------------------------------------------------------------------

bool PeerChannel::post_receive(std::uint32_t index) {
  // Cannot fail while outstanding receives stay within the buffers (every buffer holds its
  // entry while posted); checked all the same, as a broken budget must not overrun a CQ.
  if (!budget_.reserve(CompletionKind::kReceive)) {
    rx_state_[index] = RxState::kIdle;
    fail("completion queue budget exhausted for a receive");
    return false;
  }
  rx_state_[index] = RxState::kPosted;
  ++outstanding_recv_;
  actions_.push_back(event(ChannelAction::Type::kPostRecv, index));
  return true;
}

// A data message's buffer is done with: post it again and owe the peer a grant.
void PeerChannel::repost_data(std::uint32_t index) {
  if (rx_state_[index] == RxState::kHeld) --held_;
  if (!open()) {
    rx_state_[index] = RxState::kIdle;
    return;
  }
  if (post_receive(index)) (void)window_->on_receive_posted();
}

// The send slots data may take (the rest stay free for standalone credit updates).
std::uint32_t PeerChannel::data_slots() const {
  return config_.send_queue_depth - config_.control_send_slots;
}

// Of those, the ones neither a data message (the window counts them) nor a write holds.
std::uint32_t PeerChannel::data_room() const {
  const std::uint32_t used = window_->counters().data_slots_in_use + writes_outstanding_;
  return used >= data_slots() ? 0 : data_slots() - used;
}

// Posts one data message now if a credit (beyond the reply reserve, for a request), a send
// buffer and a completion entry are free; false, with nothing changed, otherwise.
// `new_message`: a refusal is a new stall (a send() or reply() that found no credit), not a
// queued message tried again, so the window counts each message's stall once.
// With `write`: its RDMA Write goes first, in a second slot with a second entry, both
// posted or neither. A write takes a slot data may take (data_room()), so writes never eat
// the control slots a standalone credit update needs.
bool PeerChannel::try_post(std::span<const std::uint8_t> payload,
                           std::optional<std::uint32_t> reply_to, bool new_message,
                           const std::optional<TaggedWrite>& write) {
  CreditWindow& w = *window_;
  const std::uint32_t keep = reply_to || config_.ignore_credits ? 0 : reply_reserve_;
  const bool uncredited = config_.ignore_credits && !w.can_send();
  if (!uncredited && !w.can_send(keep)) {
    if (new_message) (void)w.send_message(keep);  // refused: counts kNoCredit / kNoSendSlot
    return false;
  }
  const std::uint32_t slots = write ? 2 : 1;
  if (tx_free_.size() < slots) return false;
  if ((writes_outstanding_ > 0 || write) && data_room() < slots) return false;
  if (!budget_.reserve(CompletionKind::kSend, slots)) return false;
  // A reply's buffer is posted again first, so the grant for it rides on the reply itself.
  if (reply_to) repost_data(*reply_to);
  if (!open()) {
    (void)budget_.release(CompletionKind::kSend, slots);
    return false;
  }
  CreditHeader header;  // an uncredited message claims nothing
  if (!uncredited) header = *w.send_message(keep);
  if (write) {
    // RFC 5040 s5.5: the peer delivers the message below only once this Write, posted
    // before it on the same stream, is placed; nothing may come between the two.
    const std::uint32_t windex = tx_free_.back();
    tx_free_.pop_back();
    tx_use_[windex] = TxUse::kWrite;
    ++outstanding_send_;
    ++writes_outstanding_;
    ++writes_sent_;
    bytes_written_ += write->length;
    ChannelAction a;
    a.type = ChannelAction::Type::kPostWrite;
    a.index = windex;
    a.length = write->length;
    a.write = *write;
    actions_.push_back(std::move(a));
    posted_send(windex, actions_.back(), false);
  }
  const std::uint32_t index = tx_free_.back();
  tx_free_.pop_back();
  std::uint8_t* buf = send_buffer(index);
  const auto encoded = encode_credit_header(header);
  std::memcpy(buf, encoded.data(), encoded.size());
  if (!payload.empty()) std::memcpy(buf + encoded.size(), payload.data(), payload.size());
  tx_use_[index] = uncredited ? TxUse::kUncredited : TxUse::kData;
  ++outstanding_send_;
  ++messages_sent_;
  bytes_sent_ += payload.size();
  actions_.push_back(
      post_send_action(index, static_cast<std::uint32_t>(encoded.size() + payload.size())));
  posted_send(index, actions_.back());
  return true;
}

// A standalone credit update: a control credit, a send buffer and an entry.
bool PeerChannel::post_update() {
  if (tx_free_.empty() || !budget_.reserve(CompletionKind::kSend)) return false;
  auto header = window_->send_credit_update();
  if (!header) {
    (void)budget_.release(CompletionKind::kSend);
    return false;
  }
  const std::uint32_t index = tx_free_.back();
  tx_free_.pop_back();
  const auto encoded = encode_credit_header(*header);
  std::memcpy(send_buffer(index), encoded.data(), encoded.size());
  tx_use_[index] = TxUse::kControl;
  ++outstanding_send_;
  actions_.push_back(post_send_action(index, static_cast<std::uint32_t>(encoded.size())));
  posted_send(index, actions_.back());
  return true;
}

// Queued messages go as far as credits allow (replies first: they may use the reserve and
// each one frees a buffer), then owed grants that found no message to ride on.
void PeerChannel::post_queued(TimePoint) {
  if (!open()) return;
  while (!replies_.empty()) {
    const QueuedReply& r = replies_.front();
    if (!try_post(r.payload, r.rx_index, false)) break;
    replies_.pop_front();
  }
  while (open() && replies_.empty() && !requests_.empty()) {
    const QueuedRequest& q = requests_.front();
    if (!try_post(q.payload, std::nullopt, false, q.write)) break;
    requests_.pop_front();
  }
  while (open() && window_->wants_credit_update()) {
    if (!post_update()) break;
  }
  if (requests_.empty() && replies_.empty()) waiting_since_.reset();
  if (open() && refused_since_ready_ && can_queue()) {
    refused_since_ready_ = false;
    actions_.push_back(event(ChannelAction::Type::kReady));
  }
}

void PeerChannel::note_queue(TimePoint now) {
  if (requests_.empty() && replies_.empty()) waiting_since_ = now;
}

void PeerChannel::take_actions(std::vector<ChannelAction>& out) {
  out.clear();
  std::swap(out, actions_);
}

// ---- state ---------------------------------------------------------------------------

ChannelCounters PeerChannel::counters(TimePoint now) const {
  ChannelCounters c;
  if (window_) c.credit = window_->counters();
  c.budget = budget_.counters();
  c.queued = static_cast<std::uint32_t>(requests_.size());
  c.replies_queued = static_cast<std::uint32_t>(replies_.size());
  c.held = held_;
  c.refused = refused_;
  c.messages_sent = messages_sent_;
  c.bytes_sent = bytes_sent_;
  c.writes_sent = writes_sent_;
  c.bytes_written = bytes_written_;
  c.messages_received = messages_received_;
  c.bytes_received = bytes_received_;
  c.lost = lost_;
  c.held_released = held_released_;
  if (waiting_since_ && now > *waiting_since_) c.stalled_for = now - *waiting_since_;
  return c;
}

std::string PeerChannel::broken_invariant() const {
  std::uint32_t posted = 0;
  std::uint32_t held = 0;
  std::uint32_t with_application = 0;  // delivering, held or waiting on its reply
  for (const RxState st : rx_state_) {
    if (st == RxState::kPosted) ++posted;
    if (st == RxState::kHeld) ++held;
    if (st == RxState::kDelivering || st == RxState::kHeld || st == RxState::kReplying) {
      ++with_application;
    }
  }
  if (posted != outstanding_recv_) return "posted receive buffers != outstanding receives";
  if (held != held_) return "held count != buffers held";
  std::uint32_t sending = 0;
  std::uint32_t writing = 0;
  for (const TxUse u : tx_use_) {
    sending += u == TxUse::kFree ? 0 : 1;
    writing += u == TxUse::kWrite ? 1 : 0;
  }
  if (writing != writes_outstanding_) return "send slots held by writes != writes outstanding";
  if (sending != outstanding_send_) return "send buffers in use != outstanding sends";
  if (send_order_.size() != outstanding_send_) return "the posting order lost or doubled a send";
  std::uint32_t signaled = 0;
  for (std::uint32_t i = 0; i < tx_count_; ++i) signaled += tx_signaled_[i] ? 1 : 0;
  if (signaled != signaled_outstanding_) return "signaled sends miscounted";
  if (sending + tx_free_.size() != tx_count_) return "send buffers lost or doubled";
  const CompletionBudgetCounters b = budget_.counters();
  if (b.send_reserved != outstanding_send_ || b.receive_reserved != outstanding_recv_) {
    return "completion entries reserved != work requests outstanding";
  }
  if (window_) {
    if (const auto w = window_->broken_invariant(); !w.empty()) return std::string(w);
    if (window_->counters().data_slots_in_use + writes_outstanding_ > data_slots()) {
      return "writes took a control send slot";
    }
    if (open()) {
      const CreditCounters c = window_->counters();
      if (c.posted + c.control_posted != posted) {
        return "the window's posted receives != buffers posted";
      }
      if (posted + with_application != rx_count_)
        return "a receive buffer is neither posted nor with the application";
    }
  }
  return {};
}

}  // namespace rdma_interop::credit
