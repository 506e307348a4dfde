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

// The pure negotiation rules, usable without a connection (rdma-probe, tests, the matrix
// oracle). A responder's answer to a Request under its policy:
struct ResponderAnswer {
  wire::MpaFrame reply;                   // always sent, unless `reset`
  std::optional<NegotiatedParams> params; // set when the connection goes ahead
  std::optional<CmFailure> failure;       // set when it does not
  std::optional<wire::TerminateCause> terminate;  // sent after an accepting Reply (0x07)
  bool reset = false;                     // abort the TCP connection instead of answering
  std::string detail;
};
wire::MpaFrame make_request(const MpaPolicy& policy, std::vector<std::uint8_t> private_data);
ResponderAnswer answer_request(const MpaPolicy& policy, const wire::MpaFrame& request,
                               std::vector<std::uint8_t> private_data);
// The initiator's reading of a Reply to its Request.
struct InitiatorVerdict {
  std::optional<NegotiatedParams> params;
  std::optional<CmFailure> failure;
  std::optional<wire::TerminateCause> terminate;  // to send, e.g. no matching RTR
  bool retry_revision1 = false;
  std::string detail;
};
InitiatorVerdict settle_reply(const MpaPolicy& policy, const wire::MpaFrame& request,
                              const wire::MpaFrame& reply);

}  // namespace rdma_interop::cm
