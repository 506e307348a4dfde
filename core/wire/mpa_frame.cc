#include "core/wire/mpa_frame.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/util/byte_order.h"

namespace rdma_interop::wire {
namespace {

std::uint16_t ird_word(const MpaEnhancedParams& p) {
  return static_cast<std::uint16_t>((p.peer_to_peer ? kMpaIrdPeerToPeer : 0) |
                                    (p.rtr_send ? kMpaIrdRtrSend : 0) | (p.ird & kMpaIrdOrdMask));
}
std::uint16_t ord_word(const MpaEnhancedParams& p) {
  return static_cast<std::uint16_t>((p.rtr_write ? kMpaOrdRtrWrite : 0) |
                                    (p.rtr_read ? kMpaOrdRtrRead : 0) | (p.ord & kMpaIrdOrdMask));
}

}  // namespace

std::array<std::uint8_t, kMpaEnhancedParamsLen> encode_enhanced_params(
    const MpaEnhancedParams& params) {
  std::array<std::uint8_t, kMpaEnhancedParamsLen> out{};
  store_be16(&out[0], ird_word(params));
  store_be16(&out[2], ord_word(params));
  return out;
}

std::size_t mpa_header_length(const MpaFrame& frame) {
  return kMpaHeaderLen + (frame.revision == kMpaRevisionErdma ? kErdmaExtensionLen : 0);
}

std::size_t mpa_pd_length(const MpaFrame& frame) {
  return frame.private_data.size() + (frame.enhanced ? kMpaEnhancedParamsLen : 0);
}

Expected<std::vector<std::uint8_t>, WireError> encode_mpa_frame(const MpaFrame& frame,
                                                                const MpaLimits& limits) {
  if (frame.enhanced) {
    if (frame.revision != kMpaRevision2) return unexpected(WireError::kMpaEnhancedNeedsRevision2);
    if (frame.enhanced->ird > kMpaIrdOrdMask || frame.enhanced->ord > kMpaIrdOrdMask) {
      return unexpected(WireError::kMpaIrdOrdOutOfRange);
    }
  }
  const std::size_t pd_length = mpa_pd_length(frame);
  if (pd_length > limits.private_data_limit || pd_length > 0xffff) {
    return unexpected(WireError::kMpaPrivateDataTooLong);
  }

  std::vector<std::uint8_t> out(mpa_header_length(frame) + pd_length);
  const auto& key = frame.kind == MpaFrameKind::kRequest ? kMpaRequestKey : kMpaReplyKey;
  std::copy(key.begin(), key.end(), out.begin());
  out[16] = static_cast<std::uint8_t>(
      (frame.markers ? kMpaFlagMarkers : 0) | (frame.crc ? kMpaFlagCrc : 0) |
      (frame.reject ? kMpaFlagReject : 0) | (frame.enhanced ? kMpaFlagEnhanced : 0) |
      (frame.reserved_bits & kMpaFlagReservedMask));
  out[17] = frame.revision;
  store_be16(&out[18], static_cast<std::uint16_t>(pd_length));
  std::size_t at = kMpaHeaderLen;
  if (frame.revision == kMpaRevisionErdma) {
    const ErdmaExtension ext = frame.erdma.value_or(ErdmaExtension{});
    store_be32(&out[at], ext.cookie);
    store_be32(&out[at + 4], ext.bits);
    at += kErdmaExtensionLen;
  }
  if (frame.enhanced) {
    const auto words = encode_enhanced_params(*frame.enhanced);
    std::copy(words.begin(), words.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
    at += kMpaEnhancedParamsLen;
  }
  if (!frame.private_data.empty()) {
    std::memcpy(&out[at], frame.private_data.data(), frame.private_data.size());
  }
  return out;
}

Expected<std::size_t, WireError> mpa_frame_length(std::span<const std::uint8_t> header,
                                                  const MpaLimits& limits) {
  if (header.size() < kMpaHeaderLen) return unexpected(WireError::kMpaTruncated);
  const bool is_request = std::equal(kMpaRequestKey.begin(), kMpaRequestKey.end(), header.begin());
  const bool is_reply = std::equal(kMpaReplyKey.begin(), kMpaReplyKey.end(), header.begin());
  if (!is_request && !is_reply) return unexpected(WireError::kMpaBadKey);

  const std::uint8_t flags = header[16];
  const std::uint8_t revision = header[17];
  const std::size_t pd_length = load_be16(&header[18]);
  const bool erdma = revision == kMpaRevisionErdma && limits.accept_erdma;
  if (revision != kMpaRevision1 && revision != kMpaRevision2 && !erdma) {
    return unexpected(WireError::kMpaUnknownRevision);
  }
  if ((flags & kMpaFlagUnusedReservedMask) != 0 && limits.reject_reserved_bits) {
    return unexpected(WireError::kMpaReservedBits);
  }
  // RFC 5044 s7.1: the R bit of a Request MUST be zero.
  if (is_request && (flags & kMpaFlagReject) != 0) {
    return unexpected(WireError::kMpaRejectInRequest);
  }
  if ((flags & kMpaFlagEnhanced) != 0) {
    if (revision != kMpaRevision2) return unexpected(WireError::kMpaEnhancedNeedsRevision2);
    if (pd_length < kMpaEnhancedParamsLen) {
      return unexpected(WireError::kMpaEnhancedParamsTruncated);
    }
  }
  if (pd_length > limits.private_data_limit) return unexpected(WireError::kMpaPrivateDataTooLong);
  return kMpaHeaderLen + (erdma ? kErdmaExtensionLen : 0) + pd_length;
}

Expected<MpaFrame, WireError> decode_mpa_frame(std::span<const std::uint8_t> bytes,
                                               const MpaLimits& limits) {
  auto length = mpa_frame_length(bytes, limits);
  if (!length) return unexpected(length.error());
  if (bytes.size() < *length) return unexpected(WireError::kMpaTruncated);
  if (bytes.size() > *length) return unexpected(WireError::kMpaTrailingBytes);

  MpaFrame frame;
  frame.kind = std::equal(kMpaRequestKey.begin(), kMpaRequestKey.end(), bytes.begin())
                   ? MpaFrameKind::kRequest
                   : MpaFrameKind::kReply;
  const std::uint8_t flags = bytes[16];
  frame.markers = (flags & kMpaFlagMarkers) != 0;
  frame.crc = (flags & kMpaFlagCrc) != 0;
  frame.reject = (flags & kMpaFlagReject) != 0;
  frame.reserved_bits = flags & kMpaFlagReservedMask;
  frame.revision = bytes[17];
  auto pd = bytes.subspan(kMpaHeaderLen);
  if (frame.revision == kMpaRevisionErdma) {
    frame.erdma = ErdmaExtension{.cookie = load_be32(&pd[0]), .bits = load_be32(&pd[4])};
    pd = pd.subspan(kErdmaExtensionLen);
  }
  if ((flags & kMpaFlagEnhanced) != 0) {
    const std::uint16_t ird = load_be16(&pd[0]);
    const std::uint16_t ord = load_be16(&pd[2]);
    frame.enhanced = MpaEnhancedParams{
        .peer_to_peer = (ird & kMpaIrdPeerToPeer) != 0,
        .rtr_send = (ird & kMpaIrdRtrSend) != 0,
        .rtr_write = (ord & kMpaOrdRtrWrite) != 0,
        .rtr_read = (ord & kMpaOrdRtrRead) != 0,
        .ird = static_cast<std::uint16_t>(ird & kMpaIrdOrdMask),
        .ord = static_cast<std::uint16_t>(ord & kMpaIrdOrdMask),
    };
    pd = pd.subspan(kMpaEnhancedParamsLen);
  }
  frame.private_data.assign(pd.begin(), pd.end());
  return frame;
}

std::string to_string(const MpaFrame& f) {
  std::string s = f.kind == MpaFrameKind::kRequest ? "MPA Request" : "MPA Reply";
  s += " rev " + std::to_string(f.revision);
  if (f.markers) s += " markers";
  if (f.crc) s += " CRC";
  if (f.reject) s += " REJECT";
  if (f.enhanced) {
    const auto& e = *f.enhanced;
    if (e.peer_to_peer) s += " p2p";
    std::string rtr;
    if (e.rtr_send) rtr += "send,";
    if (e.rtr_write) rtr += "write,";
    if (e.rtr_read) rtr += "read,";
    if (!rtr.empty()) {
      rtr.pop_back();
      s += " rtr=" + rtr;
    }
    s += " ird=" + std::to_string(e.ird) + " ord=" + std::to_string(e.ord);
  }
  if (f.erdma) {
    char ext[48];
    std::snprintf(ext, sizeof ext, " erdma cookie=0x%x cc=%u", f.erdma->cookie,
                  f.erdma->bits & kErdmaCcMask);
    s += ext;
  }
  s += " pd=" + std::to_string(f.private_data.size());
  if (f.reserved_bits) s += " reserved=" + describe_reserved_bits(f.reserved_bits);
  return s;
}

std::string describe_reserved_bits(std::uint8_t bits) {
  bits &= kMpaFlagReservedMask;
  if (bits == 0) return {};
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", bits);
  std::string s = hex;
  std::string meaning;
  auto add = [&](std::string_view m) {
    if (!meaning.empty()) meaning += ", ";
    meaning += m;
  };
  switch (bits & kMpaFlagFpduSizeMask) {
    case kMpaFpduSize16k:
      add("16K FPDUs in Chelsio's proposal");
      break;
    case kMpaFpduSize32k:
      add("siw GSO_EXP, or 32K FPDUs in Chelsio's proposal");
      break;
    case kMpaFpduSize64k:
      add("64K FPDUs in Chelsio's proposal");
      break;
    default:
      break;
  }
  if ((bits & kMpaFlagUnusedReservedMask) != 0) add("reserved");
  return s + " (" + meaning + ")";
}

}  // namespace rdma_interop::wire
