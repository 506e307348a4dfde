#include "core/cm/cm_failure.h"

#include <array>

namespace rdma_interop::cm {
namespace {

struct FailureInfo {
  std::string_view name;
  std::string_view text;
};

constexpr std::array<FailureInfo, 22> kFailures = {{
    {"request_timeout", "no complete MPA Request arrived within the request timeout"},
    {"reply_timeout", "no complete MPA Reply arrived within the reply timeout"},
    {"rtr_timeout", "the peer-to-peer RTR did not arrive within the RTR timeout"},
    {"malformed_frame", "the peer's MPA Request/Reply frame is malformed"},
    {"unexpected_frame", "the peer sent an MPA Request where a Reply belongs, or the reverse"},
    {"peer_rejected", "the peer rejected the connection (MPA Reply with the Reject flag)"},
    {"local_rejected", "the local application rejected the connection request"},
    {"revision_unsupported", "the peer's MPA revision cannot be met and no fallback is allowed"},
    {"markers_refused", "markers were asked for by a side that cannot send them"},
    {"crc_refused", "CRC was asked for by a side configured to refuse it"},
    {"no_matching_rtr", "no RTR type is accepted by both sides (RFC 6581, MPA code 0x07)"},
    {"insufficient_ird", "the peer's ORD exceeds the IRD on offer (RFC 6581, MPA code 0x06)"},
    {"peer_to_peer_mismatch", "the Reply claims peer-to-peer mode the Request did not offer"},
    {"rtr_mismatch", "the first FPDU after the MPA Reply is not the agreed RTR"},
    {"terminate_received", "the peer sent a Terminate during connection setup"},
    {"connection_reset", "the TCP connection was reset during connection setup"},
    {"connection_closed", "the peer closed the TCP connection during connection setup"},
    {"fpdu_error", "an FPDU during connection setup failed to decode"},
    {"backlog_full", "the peer's listener was over its backlog (Reject with the overflow marker)"},
    {"local_frame_invalid",
     "our own MPA Request/Reply cannot be sent (RFC 5044 s7.1: at most 512 octets of private "
     "data, IRD/ORD words included): a local configuration error"},
    {"peer_to_peer_required",
     "a revision-2 frame without the peer-to-peer flag, refused by a side that requires "
     "peer-to-peer mode"},
    {"rtr_refused", "the responder refused the RTR itself (a zero-length Read RTR naming STag 0)"},
}};
static_assert(kFailures.size() == static_cast<std::size_t>(kLastCmFailure) + 1);

}  // namespace

std::string_view failure_name(CmFailure f) {
  return kFailures[static_cast<std::size_t>(f)].name;
}
std::string_view describe(CmFailure f) {
  return kFailures[static_cast<std::size_t>(f)].text;
}

}  // namespace rdma_interop::cm
