#include "core/credit/credit_header.h"

#include "core/util/byte_order.h"

namespace rdma_interop::credit {

std::ostream& operator<<(std::ostream& os, const CreditHeader& h) {
  return os << (h.control ? "credit_update{" : "data{") << "grant=" << h.grant
            << " control_return=" << unsigned{h.control_return} << "}";
}

std::array<std::uint8_t, kCreditHeaderSize> encode_credit_header(const CreditHeader& h) {
  std::array<std::uint8_t, kCreditHeaderSize> out{};
  out[0] =
      static_cast<std::uint8_t>((kCreditHeaderVersion << 4) | (h.control ? kCreditFlagControl : 0));
  out[1] = h.control_return;
  store_be16(&out[2], h.grant);
  return out;
}

Expected<CreditHeader, CreditError> decode_credit_header(std::span<const std::uint8_t> message) {
  if (message.size() < kCreditHeaderSize) return unexpected(CreditError::kShortHeader);
  if ((message[0] >> 4) != kCreditHeaderVersion) return unexpected(CreditError::kBadVersion);
  if ((message[0] & kCreditFlagsReserved) != 0) return unexpected(CreditError::kReservedBits);
  CreditHeader h;
  h.control = (message[0] & kCreditFlagControl) != 0;
  h.control_return = message[1];
  h.grant = load_be16(&message[2]);
  if (h.control && message.size() > kCreditHeaderSize) {
    return unexpected(CreditError::kControlWithPayload);
  }
  return h;
}

}  // namespace rdma_interop::credit
