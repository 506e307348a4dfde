// credit_error.h - every way the credit engine and the completion budget refuse, each its own
// code with a sentence.
//
// Two families. "Try again" codes (is_try_again) are local back-pressure, the EAGAIN of a
// send: nothing was consumed, the caller keeps its message and retries after a grant, a send
// completion or a polled completion. Every other code is either a peer breaking the credit
// protocol (the connection must be terminated: see terminate_needed) or a caller bug.
#pragma once

#include <cstdint>
#include <string_view>

namespace rdma_interop::credit {

enum class CreditError : std::uint8_t {
  // Local back-pressure (EAGAIN): retry later.
  kNoCredit,             // the peer has no data receive buffer posted for us that we know of
  kNoControlCredit,      // the peer's control receives are all in use (their return is pending)
  kNoSendSlot,           // the send queue slots this kind of message may use are all posted
  kNothingToGrant,       // a credit update was asked for, but no new receive buffer is posted
  kCompletionQueueFull,  // CompletionBudget: every completion entry is reserved
  // Malformed credit header (from the wire): terminate the connection.
  kShortHeader,         // fewer octets than kCreditHeaderSize
  kBadVersion,          // header version is not kCreditHeaderVersion
  kReservedBits,        // a reserved flag bit is set
  kControlWithPayload,  // a standalone credit update carries payload octets
  // The peer broke the credit protocol: terminate the connection.
  kPeerOverrun,     // a data message arrived with no credit granted: on the wire this is
                    // DDP untagged "no buffer" (RFC 5041 s7.2, code 0x02)
  kControlOverrun,  // a credit update arrived with no control receive announced
  kGrantOverflow,   // the peer granted more credits than its receive window
  kReturnOverflow,  // the peer returned control credits we never used
  // Caller bugs: the call was refused and nothing changed.
  kReceiveWindowFull,    // a data receive posted beyond the configured receive window
  kControlReceivesFull,  // a control receive posted beyond the configured count
  kNotPosted,            // a send completion for a send queue slot that is not in use
  kNotReserved,          // CompletionBudget: a release without a reservation
  kBadConfig,            // the configuration cannot work (see validate())
};

std::string_view error_name(CreditError e);  // stable id: "no_credit"
std::string_view describe(CreditError e);    // one sentence for a human

// True for local back-pressure: nothing was consumed, retry later (EAGAIN).
bool is_try_again(CreditError e);
// True when the peer broke the protocol or sent a malformed header: the connection must end
// with a Terminate (kPeerOverrun: DDP untagged "no buffer"; the others: the ULP's choice).
bool terminate_needed(CreditError e);

}  // namespace rdma_interop::credit
