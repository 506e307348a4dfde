#include "core/credit/credit_window.h"

#include <algorithm>
#include <cassert>

namespace rdma_interop::credit {
namespace {

constexpr std::uint32_t kMaxWindow = 0xFFFF;  // Grant is 16 bits
constexpr std::uint32_t kMaxControl = 0xFF;   // Control Return is 8 bits

// The nearest configuration that can work (the constructor's fallback for a bad one).
CreditConfig clamped(CreditConfig c) {
  c.receive_window = std::clamp<std::uint32_t>(c.receive_window, 1, kMaxWindow);
  c.peer_receive_window = std::clamp<std::uint32_t>(c.peer_receive_window, 1, kMaxWindow);
  c.initial_receives = std::min(c.initial_receives, c.receive_window);
  c.peer_initial_receives = std::min(c.peer_initial_receives, c.peer_receive_window);
  c.control_receives = std::clamp<std::uint32_t>(c.control_receives, 1, kMaxControl);
  c.peer_control_receives = std::clamp<std::uint32_t>(c.peer_control_receives, 1, kMaxControl);
  c.send_queue_depth = std::max<std::uint32_t>(c.send_queue_depth, 2);
  c.control_send_slots = std::clamp<std::uint32_t>(c.control_send_slots, 1, c.send_queue_depth - 1);
  c.peer_reply_reserve = std::min(c.peer_reply_reserve, c.receive_window - 1);
  return c;
}

}  // namespace

Expected<CreditConfig, CreditError> validate(const CreditConfig& config) {
  if (!(clamped(config) == config)) return unexpected(CreditError::kBadConfig);
  return config;
}

std::string_view kind_name(SendKind k) {
  return k == SendKind::kData ? "data" : "control";
}

CreditWindow::CreditWindow(const CreditConfig& config) : config_(clamped(config)) {
  grant_batch_ = config_.grant_batch != 0 ? config_.grant_batch
                                          : std::max<std::uint32_t>(1, config_.receive_window / 4);
  low_water_ = config_.low_water != CreditConfig::kDefaultLowWater ? config_.low_water
                                                                   : config_.receive_window / 4;
  low_water_ = std::max(low_water_, config_.peer_reply_reserve);
  credits_ = config_.peer_initial_receives;
  credits_granted_total_ = credits_;
  control_credits_ = config_.peer_control_receives;
  control_credits_total_ = control_credits_;
  posted_ = config_.initial_receives;
  granted_ = posted_;
  granted_total_ = posted_;
  control_posted_ = config_.control_receives;
  check();
}

// Every pending grant and control return goes into the next header: the window limits
// (<= 0xFFFF, <= 0xFF) make them fit.
CreditHeader CreditWindow::take_pending(bool control) {
  CreditHeader h;
  h.control = control;
  h.grant = static_cast<std::uint16_t>(pending_grant_);
  h.control_return = static_cast<std::uint8_t>(control_return_pending_);
  granted_ += pending_grant_;
  granted_total_ += pending_grant_;
  pending_grant_ = 0;
  control_return_pending_ = 0;
  return h;
}

Expected<CreditHeader, CreditError> CreditWindow::send_message(std::uint32_t keep) {
  if (credits_ <= keep) {
    ++stalls_no_credit_;
    return unexpected(CreditError::kNoCredit);
  }
  // Data leaves control_send_slots free, and control messages that took free data slots
  // keep theirs until they complete.
  if (!can_take_data_slot()) {
    ++stalls_no_slot_;
    return unexpected(CreditError::kNoSendSlot);
  }
  --credits_;
  ++sent_;
  ++data_slots_;
  const CreditHeader h = take_pending(false);
  check();
  return h;
}

bool CreditWindow::wants_credit_update() const {
  return pending_grant_ > 0 && (pending_grant_ >= grant_batch_ || granted_ <= low_water_);
}

Expected<CreditHeader, CreditError> CreditWindow::send_credit_update() {
  if (pending_grant_ == 0) return unexpected(CreditError::kNothingToGrant);
  if (control_credits_ == 0) {
    ++update_stalls_;
    return unexpected(CreditError::kNoControlCredit);
  }
  if (data_slots_ + control_slots_ >= config_.send_queue_depth) {
    ++update_stalls_;
    return unexpected(CreditError::kNoSendSlot);
  }
  --control_credits_;
  ++updates_sent_;
  ++control_slots_;
  const CreditHeader h = take_pending(true);
  check();
  return h;
}

Expected<SendKind, CreditError> CreditWindow::on_send_completed(SendKind kind) {
  std::uint32_t& in_use = kind == SendKind::kData ? data_slots_ : control_slots_;
  if (in_use == 0) return unexpected(CreditError::kNotPosted);
  --in_use;
  check();
  return kind;
}

Expected<ReceivedMessage, CreditError> CreditWindow::on_receive(
    std::span<const std::uint8_t> message) {
  auto header = decode_credit_header(message);
  if (!header) return unexpected(header.error());
  auto kind = on_receive_header(*header);
  if (!kind) return unexpected(kind.error());
  return ReceivedMessage{*kind, *header, message.subspan(kCreditHeaderSize)};
}

Expected<SendKind, CreditError> CreditWindow::on_receive_header(const CreditHeader& h) {
  // Every check before any change: a refused message leaves the engine as it was.
  if (h.control) {
    if (control_posted_ - control_return_pending_ == 0) {
      return unexpected(CreditError::kControlOverrun);
    }
  } else if (granted_ == 0) {
    // The peer used a credit we never gave: on the wire it found no buffer (or took one we
    // had not announced yet, which is the same protocol error).
    return unexpected(CreditError::kPeerOverrun);
  }
  if (h.grant > config_.peer_receive_window - credits_) {
    return unexpected(CreditError::kGrantOverflow);
  }
  if (h.control_return > updates_sent_ - (control_credits_total_ - config_.peer_control_receives)) {
    // More returned than we have sent updates not yet returned.
    return unexpected(CreditError::kReturnOverflow);
  }
  if (h.control) {
    --control_posted_;
    ++updates_received_;
  } else {
    --granted_;
    --posted_;
    ++received_;
  }
  credits_ += h.grant;
  credits_granted_total_ += h.grant;
  control_credits_ += h.control_return;
  control_credits_total_ += h.control_return;
  check();
  return h.control ? SendKind::kControl : SendKind::kData;
}

Expected<std::uint32_t, CreditError> CreditWindow::on_receive_posted() {
  if (posted_ >= config_.receive_window) return unexpected(CreditError::kReceiveWindowFull);
  ++posted_;
  ++pending_grant_;
  check();
  return pending_grant_;
}

Expected<std::uint32_t, CreditError> CreditWindow::on_control_receive_posted() {
  if (control_posted_ >= config_.control_receives) {
    return unexpected(CreditError::kControlReceivesFull);
  }
  ++control_posted_;
  ++control_return_pending_;
  check();
  return control_return_pending_;
}

bool CreditWindow::can_take_data_slot() const {
  return data_slots_ < config_.send_queue_depth - config_.control_send_slots &&
         data_slots_ + control_slots_ < config_.send_queue_depth;
}

bool CreditWindow::can_send(std::uint32_t keep) const {
  return credits_ > keep && can_take_data_slot();
}

CreditCounters CreditWindow::counters() const {
  CreditCounters c;
  c.credits = credits_;
  c.control_credits = control_credits_;
  c.data_slots_in_use = data_slots_;
  c.control_slots_in_use = control_slots_;
  c.credits_granted_total = credits_granted_total_;
  c.sent = sent_;
  c.updates_sent = updates_sent_;
  c.stalls_no_credit = stalls_no_credit_;
  c.stalls_no_slot = stalls_no_slot_;
  c.update_stalls = update_stalls_;
  c.posted = posted_;
  c.granted = granted_;
  c.pending_grant = pending_grant_;
  c.control_posted = control_posted_;
  c.control_return_pending = control_return_pending_;
  c.granted_total = granted_total_;
  c.received = received_;
  c.updates_received = updates_received_;
  return c;
}

std::string_view CreditWindow::broken_invariant() const {
  if (credits_granted_total_ != sent_ + credits_) return "send grants not conserved";
  if (control_credits_total_ != updates_sent_ + control_credits_) {
    return "control credits not conserved";
  }
  if (credits_ > config_.peer_receive_window) return "credits above the peer's receive window";
  if (control_credits_ > config_.peer_control_receives) {
    return "control credits above the peer's control receives";
  }
  if (granted_total_ != received_ + granted_) return "receive grants not conserved";
  if (posted_ != granted_ + pending_grant_) return "posted receives != granted + pending";
  if (posted_ > config_.receive_window) return "posted receives above the receive window";
  if (control_return_pending_ > control_posted_ || control_posted_ > config_.control_receives) {
    return "control receives over their count";
  }
  if (data_slots_ > config_.send_queue_depth - config_.control_send_slots) {
    return "data took a control send slot";
  }
  if (data_slots_ + control_slots_ > config_.send_queue_depth) return "send queue overrun";
  return {};
}

void CreditWindow::check() const {
#ifndef NDEBUG
  assert(broken_invariant().empty());
#endif
}

}  // namespace rdma_interop::credit
