#include "core/credit/credit_error.h"

#include <array>

namespace rdma_interop::credit {
namespace {

struct ErrorInfo {
  std::string_view name;
  std::string_view text;
};

constexpr std::array<ErrorInfo, 18> kErrors = {{
    {"no_credit",
     "no receive buffer of the peer is known to be posted for us; retry after a grant"},
    {"no_control_credit", "the peer's control receives are in use; retry after they return"},
    {"no_send_slot", "the send queue slots for this kind of message are all posted"},
    {"nothing_to_grant", "no new receive buffer is posted, so there is no credit to grant"},
    {"completion_queue_full", "every completion queue entry is reserved; poll completions first"},
    {"short_header", "the message is shorter than the credit header"},
    {"bad_version", "the credit header version is not one this engine speaks"},
    {"reserved_bits", "a reserved bit of the credit header is set"},
    {"control_with_payload", "a standalone credit update carries payload"},
    {"peer_overrun", "the peer sent a message without a credit (DDP untagged: no buffer)"},
    {"control_overrun", "the peer sent a credit update without a control receive announced"},
    {"grant_overflow", "the peer granted more credits than its receive window"},
    {"return_overflow", "the peer returned control credits that were never used"},
    {"receive_window_full", "a receive was posted beyond the configured receive window"},
    {"control_receives_full", "a control receive was posted beyond the configured count"},
    {"not_posted", "a send completed for a send queue slot that was not in use"},
    {"not_reserved", "a completion entry was released that was never reserved"},
    {"bad_config", "the credit configuration cannot work"},
}};
static_assert(kErrors.size() == static_cast<std::size_t>(CreditError::kBadConfig) + 1,
              "one name and sentence per CreditError");

const ErrorInfo& info(CreditError e) {
  const auto i = static_cast<std::size_t>(e);
  static constexpr ErrorInfo kUnknown{"unknown", "unknown credit error"};
  return i < kErrors.size() ? kErrors[i] : kUnknown;
}

}  // namespace

std::string_view error_name(CreditError e) {
  return info(e).name;
}
std::string_view describe(CreditError e) {
  return info(e).text;
}

bool is_try_again(CreditError e) {
  switch (e) {
    case CreditError::kNoCredit:
    case CreditError::kNoControlCredit:
    case CreditError::kNoSendSlot:
    case CreditError::kNothingToGrant:
    case CreditError::kCompletionQueueFull:
      return true;
    default:
      return false;
  }
}

bool terminate_needed(CreditError e) {
  switch (e) {
    case CreditError::kShortHeader:
    case CreditError::kBadVersion:
    case CreditError::kReservedBits:
    case CreditError::kControlWithPayload:
    case CreditError::kPeerOverrun:
    case CreditError::kControlOverrun:
    case CreditError::kGrantOverflow:
    case CreditError::kReturnOverflow:
      return true;
    default:
      return false;
  }
}

}  // namespace rdma_interop::credit
