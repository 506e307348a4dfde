#include "core/credit/credit_params.h"

#include <algorithm>

#include "core/credit/credit_header.h"
#include "core/util/byte_order.h"

namespace rdma_interop::credit {
namespace {

// Field offsets of the layout in credit_params.h.
constexpr std::size_t kMagicAt = 0;
constexpr std::size_t kVersionAt = 4;
constexpr std::size_t kControlAt = 5;
constexpr std::size_t kWindowAt = 6;
constexpr std::size_t kInitialAt = 8;
constexpr std::size_t kReplyReserveAt = 10;
constexpr std::size_t kMaxMessageAt = 12;
static_assert(kMaxMessageAt + 4 == kCreditParamsSize, "the layout fills kCreditParamsSize");

}  // namespace

std::string_view error_name(ParamsError e) {
  switch (e) {
    case ParamsError::kShort:
      return "short";
    case ParamsError::kBadMagic:
      return "bad_magic";
    case ParamsError::kBadParamsVersion:
      return "bad_params_version";
    case ParamsError::kBadValue:
      return "bad_value";
  }
  return "unknown";
}

std::string_view describe(ParamsError e) {
  switch (e) {
    case ParamsError::kShort:
      return "the private data is shorter than the 16-octet credit parameters: the peer does "
             "not announce credits";
    case ParamsError::kBadMagic:
      return "the private data does not start with the credit parameters' magic \"RICR\": the "
             "peer speaks another private-data format";
    case ParamsError::kBadParamsVersion:
      return "the credit parameters' version is not one this side speaks";
    case ParamsError::kBadValue:
      return "a credit parameter is out of range (a window or control count of 0, initial "
             "receives over the window, or a max message below the credit header)";
  }
  return "unknown credit parameters error";
}

std::ostream& operator<<(std::ostream& os, const CreditParams& p) {
  return os << "credit_params{window=" << p.receive_window << " initial=" << p.initial_receives
            << " control=" << unsigned{p.control_receives} << " reply_reserve=" << p.reply_reserve
            << " max_message=" << p.max_message << "}";
}

std::array<std::uint8_t, kCreditParamsSize> encode_credit_params(const CreditParams& p) {
  std::array<std::uint8_t, kCreditParamsSize> out{};
  store_be32(&out[kMagicAt], kCreditParamsMagic);
  out[kVersionAt] = kCreditParamsVersion;
  out[kControlAt] = p.control_receives;
  store_be16(&out[kWindowAt], p.receive_window);
  store_be16(&out[kInitialAt], p.initial_receives);
  store_be16(&out[kReplyReserveAt], p.reply_reserve);
  store_be32(&out[kMaxMessageAt], p.max_message);
  return out;
}

Expected<CreditParams, ParamsError> decode_credit_params(
    std::span<const std::uint8_t> private_data) {
  if (private_data.size() < kCreditParamsSize) return unexpected(ParamsError::kShort);
  const std::uint8_t* in = private_data.data();
  if (load_be32(in + kMagicAt) != kCreditParamsMagic) return unexpected(ParamsError::kBadMagic);
  if (in[kVersionAt] != kCreditParamsVersion) return unexpected(ParamsError::kBadParamsVersion);
  CreditParams p;
  p.control_receives = in[kControlAt];
  p.receive_window = load_be16(in + kWindowAt);
  p.initial_receives = load_be16(in + kInitialAt);
  p.reply_reserve = load_be16(in + kReplyReserveAt);  // any value: the receiver clamps it
  p.max_message = load_be32(in + kMaxMessageAt);
  if (p.control_receives == 0 || p.receive_window == 0 || p.initial_receives > p.receive_window ||
      p.max_message < kCreditHeaderSize) {
    return unexpected(ParamsError::kBadValue);
  }
  return p;
}

CreditConfig config_for(const CreditParams& ours, const CreditParams& peer,
                        std::uint32_t send_queue_depth, std::uint32_t control_send_slots) {
  CreditConfig c;
  c.receive_window = ours.receive_window;
  c.initial_receives = ours.initial_receives;
  c.control_receives = ours.control_receives;
  c.peer_receive_window = peer.receive_window;
  c.peer_initial_receives = peer.initial_receives;
  c.peer_control_receives = peer.control_receives;
  c.peer_reply_reserve = std::min<std::uint32_t>(peer.reply_reserve, c.receive_window - 1);
  c.send_queue_depth = send_queue_depth;
  c.control_send_slots = control_send_slots;
  return c;
}

}  // namespace rdma_interop::credit
