#include "core/wire/terminate.h"

#include <cstdio>

#include "core/util/byte_order.h"
#include "core/wire/ddp_segment.h"

namespace rdma_interop::wire {
namespace {

bool is_untagged_read_request(std::span<const std::uint8_t> ddp_header) {
  return (ddp_header[0] & kDdpFlagTagged) == 0 &&
         (ddp_header[1] & kRdmapOpcodeMask) ==
             static_cast<std::uint8_t>(RdmapOpcode::kRdmaReadRequest);
}

// Copies the offending segment's headers into the Terminate (RFC 5040 s4.8: M, D, R), as
// far as the received octets hold them.
void include_headers(TerminateMessage& m, std::span<const std::uint8_t> ulpdu) {
  if (ulpdu.empty()) return;
  const std::size_t header_length =
      (ulpdu[0] & kDdpFlagTagged) != 0 ? kDdpTaggedHeaderLen : kDdpUntaggedHeaderLen;
  if (ulpdu.size() < header_length) return;
  m.ddp_segment_length = static_cast<std::uint16_t>(ulpdu.size());
  m.ddp_header.assign(ulpdu.begin(), ulpdu.begin() + static_cast<std::ptrdiff_t>(header_length));
  if (m.cause.layer == TermLayer::kRdmap && is_untagged_read_request(ulpdu) &&
      ulpdu.size() >= header_length + kReadRequestBodyLen) {
    m.rdmap_header_included = true;
    const auto body = ulpdu.subspan(header_length, kReadRequestBodyLen);
    m.rdmap_header.assign(body.begin(), body.end());
  }
}

// Errors where the segment's layout cannot be trusted, so no header is echoed back
// (as siw does for version and opcode errors).
bool layout_unknown(WireError e) {
  switch (e) {
    case WireError::kDdpTruncated:
    case WireError::kDdpTaggedBadVersion:
    case WireError::kDdpUntaggedBadVersion:
    case WireError::kRdmapBadVersion:
    case WireError::kRdmapBadOpcode:
    case WireError::kFpduUlpduTooShort:
    case WireError::kFpduUlpduTooLong:
    case WireError::kFpduStreamFailed:
      return true;
    default:
      return terminate_for(e).layer == TermLayer::kLlp;
  }
}

}  // namespace

std::vector<std::uint8_t> encode_terminate_body(const TerminateMessage& m) {
  std::vector<std::uint8_t> out(kTerminateControlLen);
  out[0] = static_cast<std::uint8_t>((static_cast<std::uint8_t>(m.cause.layer) << 4) |
                                     (m.cause.etype & 0x0f));
  out[1] = m.cause.code;
  const bool has_m = m.ddp_segment_length.has_value();
  const bool has_d = !m.ddp_header.empty();
  out[2] = static_cast<std::uint8_t>((has_m ? kTermHdrCtrlM : 0) | (has_d ? kTermHdrCtrlD : 0) |
                                     (m.rdmap_header_included ? kTermHdrCtrlR : 0));
  out[3] = 0;
  if (has_m || has_d) {
    out.resize(out.size() + kTermDdpSegmentLengthLen);
    store_be16(&out[kTerminateControlLen], m.ddp_segment_length.value_or(0));
    out.insert(out.end(), m.ddp_header.begin(), m.ddp_header.end());
    out.insert(out.end(), m.rdmap_header.begin(), m.rdmap_header.end());
  }
  return out;
}

std::vector<std::uint8_t> encode_terminate(const TerminateMessage& m, std::uint32_t msn) {
  std::vector<std::uint8_t> out(kDdpUntaggedHeaderLen);
  encode_ddp_header(terminate_header(msn), out);
  const auto body = encode_terminate_body(m);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Expected<TerminateMessage, WireError> decode_terminate_body(std::span<const std::uint8_t> b) {
  if (b.size() < kTerminateControlLen) return unexpected(WireError::kTerminateTruncated);
  const std::uint8_t layer = b[0] >> 4;
  if (layer > static_cast<std::uint8_t>(TermLayer::kLlp)) {
    return unexpected(WireError::kTerminateBadLayer);
  }
  if ((b[2] & kTermHdrCtrlReservedMask) != 0 || b[3] != 0) {
    return unexpected(WireError::kTerminateReservedBits);
  }
  TerminateMessage m;
  m.cause = {static_cast<TermLayer>(layer), static_cast<std::uint8_t>(b[0] & 0x0f), b[1]};
  const bool has_m = (b[2] & kTermHdrCtrlM) != 0;
  const bool has_d = (b[2] & kTermHdrCtrlD) != 0;
  m.rdmap_header_included = (b[2] & kTermHdrCtrlR) != 0;
  auto rest = b.subspan(kTerminateControlLen);

  if (m.rdmap_header_included && !has_d) {
    return unexpected(WireError::kTerminateHeaderLengthMismatch);
  }
  if (has_m || has_d) {
    if (rest.size() < kTermDdpSegmentLengthLen) return unexpected(WireError::kTerminateTruncated);
    if (has_m) m.ddp_segment_length = load_be16(rest.data());
    rest = rest.subspan(kTermDdpSegmentLengthLen);
  }
  if (has_d) {
    if (rest.empty()) return unexpected(WireError::kTerminateTruncated);
    const std::size_t header_length =
        (rest[0] & kDdpFlagTagged) != 0 ? kDdpTaggedHeaderLen : kDdpUntaggedHeaderLen;
    if (rest.size() < header_length) return unexpected(WireError::kTerminateTruncated);
    m.ddp_header.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(header_length));
    const auto ddp_header = rest.first(header_length);
    rest = rest.subspan(header_length);
    if (m.rdmap_header_included && is_untagged_read_request(ddp_header)) {
      if (rest.size() < kReadRequestBodyLen) return unexpected(WireError::kTerminateTruncated);
      m.rdmap_header.assign(rest.begin(), rest.begin() + kReadRequestBodyLen);
      rest = rest.subspan(kReadRequestBodyLen);
    }
  }
  if (!rest.empty()) return unexpected(WireError::kTerminateHeaderLengthMismatch);
  return m;
}

TerminateMessage terminate_for_ulpdu(WireError error,
                                     std::span<const std::uint8_t> offending_ulpdu) {
  TerminateMessage m;
  m.cause = terminate_for(error);
  if (!layout_unknown(error)) include_headers(m, offending_ulpdu);
  return m;
}

TerminateMessage terminate_for_cause(const TerminateCause& cause,
                                     std::span<const std::uint8_t> offending_ulpdu) {
  TerminateMessage m;
  m.cause = cause;
  include_headers(m, offending_ulpdu);
  return m;
}

std::string to_string(const TerminateMessage& m) {
  std::string s = "Terminate " + describe(m.cause);
  if (m.ddp_segment_length) s += " seglen=" + std::to_string(*m.ddp_segment_length);
  if (!m.ddp_header.empty()) s += " +ddp_header(" + std::to_string(m.ddp_header.size()) + ")";
  if (m.rdmap_header_included) {
    s += " +rdmap_header(" + std::to_string(m.rdmap_header.size()) + ")";
  }
  return s;
}

MalformedTerminate read_malformed_terminate(std::span<const std::uint8_t> body, WireError error) {
  MalformedTerminate m{error, std::nullopt, std::nullopt, {}};
  m.octets.assign(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(
                                                   std::min(body.size(), kMalformedTerminateKept)));
  if (body.size() >= 2 && (body[0] >> 4) <= static_cast<std::uint8_t>(TermLayer::kLlp)) {
    m.cause = TerminateCause{static_cast<TermLayer>(body[0] >> 4),
                             static_cast<std::uint8_t>(body[0] & 0x0f), body[1]};
  }
  constexpr std::uint8_t kLowFlags = 0x07;  // M, D, R as little-endian bitfields place them
  if (body.size() >= kTerminateControlLen && (body[2] & (kTermHdrCtrlM | kTermHdrCtrlD | kTermHdrCtrlR)) == 0 &&
      (body[2] & kLowFlags) != 0 && (body[0] & 0x0f) <= static_cast<std::uint8_t>(TermLayer::kLlp)) {
    m.little_endian_cause = TerminateCause{static_cast<TermLayer>(body[0] & 0x0f),
                                           static_cast<std::uint8_t>(body[0] >> 4), body[1]};
  }
  return m;
}

std::string to_string(const MalformedTerminate& t) {
  std::string out = "malformed Terminate (" + std::string(describe(t.error)) + "), octets";
  char hex[4];
  for (auto b : t.octets) {
    std::snprintf(hex, sizeof hex, " %02x", b);
    out += hex;
  }
  if (t.cause) out += "; its first octets name " + describe(*t.cause);
  if (t.little_endian_cause) {
    out += "; read as little-endian bitfields (M/D/R in the low bits), " +
           describe(*t.little_endian_cause);
  }
  return out;
}

}  // namespace rdma_interop::wire
