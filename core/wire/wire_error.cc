#include "core/wire/wire_error.h"

#include <cstdio>
#include <ostream>

namespace rdma_interop::wire {
namespace {

struct ErrorInfo {
  std::string_view name;
  std::string_view text;
  TerminateCause terminate;
};

constexpr TerminateCause kMpaInvalidRequestReply{TermLayer::kLlp, kMpaEtype,
                                                 kMpaCodeInvalidRequestReply};
constexpr TerminateCause kMpaMarker{TermLayer::kLlp, kMpaEtype, kMpaCodeMarkerMismatch};
constexpr TerminateCause kDdpCatastrophic{TermLayer::kDdp, kDdpEtypeLocalCatastrophic, 0};
constexpr TerminateCause kRdmapUnexpectedOpcode{TermLayer::kRdmap, kRdmapEtypeRemoteOperation,
                                                kRdmapCodeUnexpectedOpcode};
constexpr TerminateCause kRdmapStreamCatastrophic{TermLayer::kRdmap, kRdmapEtypeRemoteOperation,
                                                  kRdmapCodeCatastrophicStream};

// Indexed by WireError. The Terminate column follows the RFCs' error tables:
// RFC 5044 s8 (MPA, layer 2), RFC 5041 s7 (DDP, layer 1), RFC 5040 s7 (RDMAP, layer 0).
constexpr ErrorInfo kErrors[] = {
    {"mpa_truncated", "MPA Request/Reply frame is shorter than its header or PD_Length says",
     kMpaInvalidRequestReply},
    {"mpa_trailing_bytes", "bytes follow the MPA Request/Reply frame within the same buffer",
     kMpaInvalidRequestReply},
    {"mpa_bad_key", "MPA frame key is neither \"MPA ID Req Frame\" nor \"MPA ID Rep Frame\"",
     kMpaInvalidRequestReply},
    {"mpa_reserved_bits", "MPA frame has reserved flag bits set (RFC 5044 s7.1: must be zero)",
     kMpaInvalidRequestReply},
    {"mpa_reject_in_request", "MPA Request has the Reject flag set (only a Reply may reject)",
     kMpaInvalidRequestReply},
    {"mpa_unknown_revision", "MPA frame revision is neither 1 (RFC 5044) nor 2 (RFC 6581)",
     kMpaInvalidRequestReply},
    {"mpa_private_data_too_long", "MPA PD_Length is above the private data limit",
     kMpaInvalidRequestReply},
    {"mpa_enhanced_needs_revision_2",
     "MPA frame sets the enhanced connection flag but is revision 1 (RFC 6581 needs Rev 2)",
     kMpaInvalidRequestReply},
    {"mpa_enhanced_params_truncated",
     "MPA enhanced frame has PD_Length below 4, so the IRD/ORD words are missing (RFC 6581 s3)",
     kMpaInvalidRequestReply},
    {"mpa_ird_ord_out_of_range", "IRD or ORD does not fit the 14-bit field of RFC 6581 s3",
     kMpaInvalidRequestReply},
    {"fpdu_crc_mismatch", "FPDU CRC32c does not match the received octets (RFC 5044 s4.1)",
     {TermLayer::kLlp, kMpaEtype, kMpaCodeCrcError}},
    {"fpdu_marker_reserved_bits", "MPA marker has its reserved 16 bits set (RFC 5044 s4.3)",
     kMpaMarker},
    {"fpdu_marker_pointer_mismatch",
     "MPA marker FPDUPTR does not point at the start of the current FPDU (RFC 5044 s4.3)",
     kMpaMarker},
    {"fpdu_ulpdu_too_short", "FPDU ULPDU_Length is too small to hold a DDP header",
     kDdpCatastrophic},
    {"fpdu_ulpdu_too_long", "FPDU ULPDU_Length is above the negotiated MULPDU",
     kDdpCatastrophic},
    {"fpdu_stream_failed", "the FPDU stream already failed; no more octets can be decoded",
     kDdpCatastrophic},
    {"ddp_truncated", "ULPDU is shorter than the DDP header its T flag implies",
     kDdpCatastrophic},
    {"ddp_tagged_bad_version", "tagged DDP segment has a DDP version other than 1",
     {TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeInvalidVersion}},
    {"ddp_untagged_bad_version", "untagged DDP segment has a DDP version other than 1",
     {TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeInvalidVersion}},
    {"ddp_invalid_queue_number", "untagged DDP segment names a queue number the opcode does not use",
     {TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeInvalidQn}},
    {"rdmap_bad_version", "RDMAP version is not 1",
     {TermLayer::kRdmap, kRdmapEtypeRemoteOperation, kRdmapCodeInvalidVersion}},
    {"rdmap_bad_opcode", "RDMAP opcode is reserved (8..15)", kRdmapUnexpectedOpcode},
    {"rdmap_opcode_wrong_buffer_model",
     "RDMAP opcode arrived on the wrong DDP buffer model (tagged vs untagged)",
     kRdmapUnexpectedOpcode},
    {"rdmap_read_request_bad_length", "RDMA Read Request body is not exactly 28 octets",
     kRdmapStreamCatastrophic},
    {"rdmap_single_segment_required",
     "RDMA Read Request or Terminate is not one DDP segment with L set and MO 0",
     kRdmapStreamCatastrophic},
    {"terminate_truncated", "Terminate is shorter than its control field or included headers",
     kRdmapStreamCatastrophic},
    {"terminate_bad_layer", "Terminate names a layer other than RDMAP, DDP or LLP",
     kRdmapStreamCatastrophic},
    {"terminate_reserved_bits", "Terminate has reserved header-control bits set",
     kRdmapStreamCatastrophic},
    {"terminate_header_length_mismatch",
     "Terminate M/D/R flags disagree with the headers that follow",
     kRdmapStreamCatastrophic},
};

static_assert(std::size(kErrors) == kWireErrorCount);

const ErrorInfo& info(WireError e) { return kErrors[static_cast<std::size_t>(e)]; }

std::string_view layer_name(TermLayer layer) {
  switch (layer) {
    case TermLayer::kRdmap: return "RDMAP";
    case TermLayer::kDdp: return "DDP";
    case TermLayer::kLlp: return "MPA";
  }
  return "unknown layer";
}

std::string_view etype_name(const TerminateCause& c) {
  switch (c.layer) {
    case TermLayer::kRdmap:
      if (c.etype == kRdmapEtypeLocalCatastrophic) return "local catastrophic";
      if (c.etype == kRdmapEtypeRemoteProtection) return "remote protection";
      if (c.etype == kRdmapEtypeRemoteOperation) return "remote operation";
      break;
    case TermLayer::kDdp:
      if (c.etype == kDdpEtypeLocalCatastrophic) return "local catastrophic";
      if (c.etype == kDdpEtypeTaggedBuffer) return "tagged buffer";
      if (c.etype == kDdpEtypeUntaggedBuffer) return "untagged buffer";
      break;
    case TermLayer::kLlp:
      if (c.etype == kMpaEtype) return "MPA";
      break;
  }
  return "unknown type";
}

std::string_view code_name(const TerminateCause& c) {
  switch (c.layer) {
    case TermLayer::kRdmap:
      if (c.etype == kRdmapEtypeLocalCatastrophic) return "catastrophic";
      switch (c.code) {
        case kRdmapCodeInvalidStag: return "invalid STag";
        case kRdmapCodeBaseOrBounds: return "base or bounds violation";
        case kRdmapCodeAccessRights: return "access rights violation";
        case kRdmapCodeStagNotAssociated: return "STag not associated with RDMAP stream";
        case kRdmapCodeToWrap: return "tagged offset wrap";
        case kRdmapCodeInvalidVersion: return "invalid RDMAP version";
        case kRdmapCodeUnexpectedOpcode: return "unexpected opcode";
        case kRdmapCodeCatastrophicStream: return "catastrophic error, localized to stream";
        case kRdmapCodeCatastrophicGlobal: return "catastrophic error, global";
        case kRdmapCodeCannotInvalidate: return "STag cannot be invalidated";
        case kRdmapCodeUnspecified: return "unspecified error";
        default: break;
      }
      break;
    case TermLayer::kDdp:
      if (c.etype == kDdpEtypeLocalCatastrophic) return "catastrophic";
      if (c.etype == kDdpEtypeTaggedBuffer) {
        switch (c.code) {
          case kDdpTaggedCodeInvalidStag: return "invalid STag";
          case kDdpTaggedCodeBaseOrBounds: return "base or bounds violation";
          case kDdpTaggedCodeStagNotAssociated: return "STag not associated with DDP stream";
          case kDdpTaggedCodeToWrap: return "tagged offset wrap";
          case kDdpTaggedCodeInvalidVersion: return "invalid DDP version";
          default: break;
        }
      } else if (c.etype == kDdpEtypeUntaggedBuffer) {
        switch (c.code) {
          case kDdpUntaggedCodeInvalidQn: return "invalid queue number";
          case kDdpUntaggedCodeNoBuffer: return "invalid MSN, no buffer available";
          case kDdpUntaggedCodeMsnRange: return "invalid MSN, MSN range not valid";
          case kDdpUntaggedCodeInvalidMo: return "invalid message offset";
          case kDdpUntaggedCodeMessageTooLong: return "message too long for receive buffer";
          case kDdpUntaggedCodeInvalidVersion: return "invalid DDP version";
          default: break;
        }
      }
      break;
    case TermLayer::kLlp:
      switch (c.code) {
        case kMpaCodeTcpConnectionLost: return "TCP connection lost";
        case kMpaCodeCrcError: return "received CRC error";
        case kMpaCodeMarkerMismatch: return "marker and ULPDU length mismatch";
        case kMpaCodeInvalidRequestReply: return "invalid MPA Request or Reply";
        case kMpaCodeLocalCatastrophic: return "local catastrophic error";
        case kMpaCodeInsufficientIrd: return "insufficient IRD resources";
        case kMpaCodeNoMatchingRtr: return "no matching RTR model";
        default: break;
      }
      break;
  }
  return "unknown code";
}

}  // namespace

std::string_view error_name(WireError e) { return info(e).name; }
std::string_view describe(WireError e) { return info(e).text; }
TerminateCause terminate_for(WireError e) { return info(e).terminate; }

std::string describe(const TerminateCause& c) {
  char codes[32];
  std::snprintf(codes, sizeof codes, " (%u/%u/0x%02x)", static_cast<unsigned>(c.layer),
                static_cast<unsigned>(c.etype), static_cast<unsigned>(c.code));
  std::string out;
  out.append(layer_name(c.layer)).append("/").append(etype_name(c)).append("/");
  out.append(code_name(c)).append(codes);
  return out;
}

std::ostream& operator<<(std::ostream& os, WireError e) { return os << error_name(e); }
std::ostream& operator<<(std::ostream& os, const TerminateCause& cause) {
  return os << describe(cause);
}

}  // namespace rdma_interop::wire
