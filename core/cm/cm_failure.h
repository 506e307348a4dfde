// cm_failure.h - every way MPA connection setup can fail, each its own code.
//
// Both sides of a failed setup report one of these with a sentence for the operator; the
// interop matrix and rdma-probe print the name. Where the standard has a wire answer (MPA
// Reject, a Terminate with an MPA code) the failing side sends it before closing.
#pragma once

#include <cstdint>
#include <string_view>

namespace rdma_interop::cm {

enum class CmFailure : std::uint8_t {
  kRequestTimeout,       // responder: no complete MPA Request in time
  kReplyTimeout,         // initiator: no complete MPA Reply in time
  kRtrTimeout,           // responder: peer-to-peer RTR did not arrive in time
  kMalformedFrame,       // the peer's Request/Reply did not decode (detail: WireError)
  kUnexpectedFrame,      // a Request where a Reply belongs, or the other way round
  kPeerRejected,         // the peer answered with the Reject flag (its private data attached)
  kLocalRejected,        // our application rejected the Request
  kRevisionUnsupported,  // the peer's revision cannot be met (and no fallback is allowed)
  kMarkersRefused,       // markers were asked for by a side that cannot send them
  kCrcRefused,           // CRC was asked for by a side configured to refuse it
  kNoMatchingRtr,        // no RTR type both sides accept (RFC 6581 MPA code 0x07)
  kInsufficientIrd,      // strict IRD/ORD check failed (RFC 6581 MPA code 0x06)
  kPeerToPeerMismatch,   // Reply claims peer-to-peer when the Request did not offer it
  kRtrMismatch,          // the first FPDU after the Reply is not the agreed RTR
  kTerminateReceived,    // the peer sent a Terminate during setup (detail: its cause)
  kConnectionReset,      // TCP reset during setup
  kConnectionClosed,     // TCP closed by the peer during setup
  kFpduError,            // an FPDU during setup failed to decode (detail: WireError)
  kBacklogFull,          // the peer's listener was over its backlog: a Reject whose private
                         // data is kBacklogFullMarker (listen_backlog.h); retrying may work
  kLocalFrameInvalid,    // our own Request/Reply cannot be sent (private data and IRD/ORD
                         // words over RFC 5044's 512 octets): a local error, not the peer's.
                         // A responder sends a bare Reject instead, so the peer hears a no.
  kPeerToPeerRequired,   // a revision-2 frame without the peer-to-peer flag, refused by a side
                         // whose policy requires it (irdma)
  kRtrRefused,           // the responder refused the RTR itself: a zero-length Read RTR whose
                         // source STag is 0 (refuse_zero_stag_read_rtr)
};
inline constexpr CmFailure kLastCmFailure = CmFailure::kRtrRefused;

std::string_view failure_name(CmFailure f);  // stable id: "no_matching_rtr"
std::string_view describe(CmFailure f);      // one sentence for a human

}  // namespace rdma_interop::cm
