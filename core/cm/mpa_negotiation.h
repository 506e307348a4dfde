// mpa_negotiation.h - the MPA setup rules as pure functions (RFC 5044 s7.1, RFC 6581 s3).
//
// Given policies and frames, what each side must send and settle on. MpaHandshake drives
// these over a byte stream; rdma-probe and tests call them directly.
//
// The rules, in short:
//   - revision: the lower of the two; a revision-1 responder either answers in revision 1 or
//     resets (OnNewerRevision); a revision-2 initiator accepts a revision-1 Reply only when
//     it may fall back.
//   - CRC: used when either side sets C. Markers: per direction, asked by the receiver (M),
//     refused by a sender that cannot insert them.
//   - peer-to-peer: when the initiator asks and the responder accepts, the responder picks
//     one RTR type from both offers by its preference; none in common = MPA code 0x07.
//   - IRD/ORD: each side's ORD is lowered to the peer's IRD (relaxed). A strict side lowers
//     nothing and refuses a pair that does not fit both ways: a strict responder in its
//     Reply (Reject, carrying its real IRD and ORD), a strict initiator, which learns the
//     responder's IRD only from the Reply, with a Terminate carrying MPA code 0x06.
//   - Our own frame must fit the wire (RFC 5044 s7.1: 512 octets of private data, IRD/ORD
//     words included); one that does not is a local error (MpaHandshake: local_frame_invalid).
//
// Where a known stack departs from these rules, its policy says how (mpa_policy.h): a
// refusal by TCP reset instead of a Reject or Terminate (refuse_with), peer-to-peer required,
// a Reply naming the responder's own RTR type or every common one (rtr_reply), what happens
// when no RTR type is in common (no_common_rtr), a multi-type Reply read by preference
// (rtr_from_reply), an RTR in revision 1 (rtr_in_revision1), the 0x3fff "no IRD/ORD" words
// (ird_ord_sentinel), reserved bits echoed, and erdma's revision 129.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/cm_failure.h"
#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/wire/mpa_frame.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::cm {

// The Terminate with MPA code 0x07, No Matching RTR Model (RFC 6581 s5): it ends a connection
// whose RTR types have nothing in common, sent by the side that found it: an accepting
// responder, an initiator reading the Reply, or a responder whose RTR is not the agreed type.
inline constexpr wire::TerminateCause kNoMatchingRtrCause{wire::TermLayer::kLlp, wire::kMpaEtype,
                                                          wire::kMpaCodeNoMatchingRtr};

// Instead of an answer: no Reply at all, and the TCP connection reset or closed.
enum class Hangup : std::uint8_t { kNone, kReset, kClose };

// The pure negotiation rules, usable without a connection (rdma-probe, tests, the matrix
// oracle). A responder's answer to a Request under its policy:
struct ResponderAnswer {
  wire::MpaFrame reply;                           // always sent, unless `hangup`
  std::optional<NegotiatedParams> params;         // set when the connection goes ahead
  std::optional<CmFailure> failure;               // set when it does not
  std::optional<wire::TerminateCause> terminate;  // sent after an accepting Reply (0x07)
  Hangup hangup = Hangup::kNone;                  // reset or close instead of answering
  std::string detail;
};
wire::MpaFrame make_request(const MpaPolicy& policy, std::vector<std::uint8_t> private_data);
// A revision `policy` does not speak: newer than its own (RFC 5044 s7.1), or for erdma (129)
// any other, and 129 for everyone else. What a responder does then is on_newer_revision.
bool foreign_revision(const MpaPolicy& policy, std::uint8_t revision);
ResponderAnswer answer_request(const MpaPolicy& policy, const wire::MpaFrame& request,
                               std::vector<std::uint8_t> private_data);
// The initiator's reading of a Reply to its Request.
struct InitiatorVerdict {
  std::optional<NegotiatedParams> params;
  std::optional<CmFailure> failure;
  std::optional<wire::TerminateCause> terminate;  // to send, e.g. no matching RTR
  Hangup hangup = Hangup::kNone;  // a failure answered with a reset instead (refuse_with)
  bool retry_revision1 = false;
  std::string detail;
};
InitiatorVerdict judge_reply(const MpaPolicy& policy, const wire::MpaFrame& request,
                             const wire::MpaFrame& reply);

}  // namespace rdma_interop::cm
