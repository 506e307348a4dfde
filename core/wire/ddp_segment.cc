#include "core/wire/ddp_segment.h"

#include <cstdio>

#include "core/util/byte_order.h"

namespace rdma_interop::wire {

bool opcode_is_reserved(std::uint8_t raw_opcode) {
  return raw_opcode > static_cast<std::uint8_t>(RdmapOpcode::kTerminate);
}

bool opcode_is_tagged(RdmapOpcode op) {
  return op == RdmapOpcode::kRdmaWrite || op == RdmapOpcode::kRdmaReadResponse;
}

std::uint32_t opcode_queue_number(RdmapOpcode op) {
  switch (op) {
    case RdmapOpcode::kRdmaReadRequest: return kQnReadRequest;
    case RdmapOpcode::kTerminate: return kQnTerminate;
    default: return kQnSend;
  }
}

std::string_view opcode_name(RdmapOpcode op) {
  switch (op) {
    case RdmapOpcode::kRdmaWrite: return "RDMA Write";
    case RdmapOpcode::kRdmaReadRequest: return "RDMA Read Request";
    case RdmapOpcode::kRdmaReadResponse: return "RDMA Read Response";
    case RdmapOpcode::kSend: return "Send";
    case RdmapOpcode::kSendWithInvalidate: return "Send with Invalidate";
    case RdmapOpcode::kSendWithSolicitedEvent: return "Send with Solicited Event";
    case RdmapOpcode::kSendWithSolicitedEventAndInvalidate:
      return "Send with Solicited Event and Invalidate";
    case RdmapOpcode::kTerminate: return "Terminate";
  }
  return "reserved opcode";
}

std::size_t encode_ddp_header(const DdpHeader& h, std::span<std::uint8_t> out) {
  out[0] = static_cast<std::uint8_t>((h.tagged ? kDdpFlagTagged : 0) | (h.last ? kDdpFlagLast : 0) |
                                     (h.ddp_version & kDdpVersionMask));
  out[1] = static_cast<std::uint8_t>(((h.rdmap_version << 6) & kRdmapVersionMask) |
                                     (static_cast<std::uint8_t>(h.opcode) & kRdmapOpcodeMask));
  if (h.tagged) {
    store_be32(&out[2], h.stag);
    store_be64(&out[6], h.tagged_offset);
    return kDdpTaggedHeaderLen;
  }
  store_be32(&out[2], h.invalidate_stag);
  store_be32(&out[6], h.queue_number);
  store_be32(&out[10], h.msn);
  store_be32(&out[14], h.message_offset);
  return kDdpUntaggedHeaderLen;
}

Expected<DdpSegment, WireError> decode_ddp_segment(std::span<const std::uint8_t> ulpdu) {
  if (ulpdu.size() < 2) return unexpected(WireError::kDdpTruncated);
  DdpHeader h;
  h.tagged = (ulpdu[0] & kDdpFlagTagged) != 0;
  h.last = (ulpdu[0] & kDdpFlagLast) != 0;
  h.ddp_version = ulpdu[0] & kDdpVersionMask;
  h.rdmap_version = static_cast<std::uint8_t>((ulpdu[1] & kRdmapVersionMask) >> 6);
  const std::uint8_t raw_opcode = ulpdu[1] & kRdmapOpcodeMask;
  h.opcode = static_cast<RdmapOpcode>(raw_opcode);
  if (ulpdu.size() < h.length()) return unexpected(WireError::kDdpTruncated);

  // RFC 5041 s7.2: DDP checks its own version first, then RDMAP (RFC 5040 s7.2) checks
  // version and opcode. Reserved bits are not checked on receipt (RFC 5041 s4.2).
  if (h.ddp_version != kDdpVersion) {
    return unexpected(h.tagged ? WireError::kDdpTaggedBadVersion
                               : WireError::kDdpUntaggedBadVersion);
  }
  if (h.tagged) {
    h.stag = load_be32(&ulpdu[2]);
    h.tagged_offset = load_be64(&ulpdu[6]);
  } else {
    h.invalidate_stag = load_be32(&ulpdu[2]);
    h.queue_number = load_be32(&ulpdu[6]);
    h.msn = load_be32(&ulpdu[10]);
    h.message_offset = load_be32(&ulpdu[14]);
    if (h.queue_number > kQnTerminate) return unexpected(WireError::kDdpInvalidQueueNumber);
  }
  if (h.rdmap_version != kRdmapVersion) return unexpected(WireError::kRdmapBadVersion);
  if (opcode_is_reserved(raw_opcode)) return unexpected(WireError::kRdmapBadOpcode);
  if (opcode_is_tagged(h.opcode) != h.tagged) {
    return unexpected(WireError::kRdmapOpcodeWrongBufferModel);
  }
  if (!h.tagged && h.queue_number != opcode_queue_number(h.opcode)) {
    return unexpected(WireError::kDdpInvalidQueueNumber);
  }
  const auto payload = ulpdu.subspan(h.length());
  if (h.opcode == RdmapOpcode::kRdmaReadRequest || h.opcode == RdmapOpcode::kTerminate) {
    // RFC 5040 s4.4, s4.8: a Read Request and a Terminate are each one DDP message in a
    // single segment.
    if (!h.last || h.message_offset != 0) {
      return unexpected(WireError::kRdmapSingleSegmentRequired);
    }
    if (h.opcode == RdmapOpcode::kRdmaReadRequest && payload.size() != kReadRequestBodyLen) {
      return unexpected(WireError::kRdmapReadRequestBadLength);
    }
  }
  return DdpSegment{h, payload};
}

DdpHeader rdma_write_header(std::uint32_t sink_stag, std::uint64_t sink_to, bool last) {
  return DdpHeader{.tagged = true, .last = last, .opcode = RdmapOpcode::kRdmaWrite,
                   .stag = sink_stag, .tagged_offset = sink_to};
}

DdpHeader read_response_header(std::uint32_t sink_stag, std::uint64_t sink_to, bool last) {
  return DdpHeader{.tagged = true, .last = last, .opcode = RdmapOpcode::kRdmaReadResponse,
                   .stag = sink_stag, .tagged_offset = sink_to};
}

DdpHeader read_request_header(std::uint32_t msn) {
  return DdpHeader{.tagged = false, .last = true, .opcode = RdmapOpcode::kRdmaReadRequest,
                   .queue_number = kQnReadRequest, .msn = msn};
}

DdpHeader send_header(std::uint32_t msn, std::uint32_t message_offset, bool last,
                      bool solicited_event, std::optional<std::uint32_t> invalidate_stag) {
  RdmapOpcode op;
  if (invalidate_stag) {
    op = solicited_event ? RdmapOpcode::kSendWithSolicitedEventAndInvalidate
                         : RdmapOpcode::kSendWithInvalidate;
  } else {
    op = solicited_event ? RdmapOpcode::kSendWithSolicitedEvent : RdmapOpcode::kSend;
  }
  return DdpHeader{.tagged = false, .last = last, .opcode = op,
                   .invalidate_stag = invalidate_stag.value_or(0), .queue_number = kQnSend,
                   .msn = msn, .message_offset = message_offset};
}

DdpHeader terminate_header(std::uint32_t msn) {
  return DdpHeader{.tagged = false, .last = true, .opcode = RdmapOpcode::kTerminate,
                   .queue_number = kQnTerminate, .msn = msn};
}

std::string to_string(const DdpHeader& h) {
  char buf[160];
  if (h.tagged) {
    std::snprintf(buf, sizeof buf, "%.*s tagged%s stag=0x%08x to=0x%llx",
                  static_cast<int>(opcode_name(h.opcode).size()), opcode_name(h.opcode).data(),
                  h.last ? " L" : "", h.stag, static_cast<unsigned long long>(h.tagged_offset));
  } else {
    std::snprintf(buf, sizeof buf, "%.*s untagged%s qn=%u msn=%u mo=%u inv=0x%08x",
                  static_cast<int>(opcode_name(h.opcode).size()), opcode_name(h.opcode).data(),
                  h.last ? " L" : "", h.queue_number, h.msn, h.message_offset,
                  h.invalidate_stag);
  }
  return buf;
}

}  // namespace rdma_interop::wire
