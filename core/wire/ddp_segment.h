// ddp_segment.h - DDP segment headers (RFC 5041 s4) with the RDMAP control octet
// (RFC 5040 s4.2) they carry, i.e. the ULPDU that an FPDU frames.
//
//   tagged   (14 octets): |T|L|Rsvd|DV| |RV|Rsv|Opcode| STag(32) TO(64)
//   untagged (18 octets): |T|L|Rsvd|DV| |RV|Rsv|Opcode| RsvdULP(32) QN(32) MSN(32) MO(32)
//
// For RDMAP the untagged RsvdULP word is the Invalidate STag of Send with Invalidate.
// decode_ddp_segment() checks every field a receiver must check before placing data and
// returns the error whose Terminate the standard prescribes (see wire_error.h); placement
// checks against registered memory (STag, bounds, rights) belong to the provider.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/util/expected.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

struct DdpHeader {
  bool tagged = false;
  bool last = true;
  RdmapOpcode opcode = RdmapOpcode::kSend;
  // Versions are fields (not constants) so tests can send wrong ones.
  std::uint8_t ddp_version = kDdpVersion;
  std::uint8_t rdmap_version = kRdmapVersion;
  // Tagged buffer model.
  std::uint32_t stag = 0;
  std::uint64_t tagged_offset = 0;
  // Untagged buffer model.
  std::uint32_t invalidate_stag = 0;  // RsvdULP: Send with Invalidate only
  std::uint32_t queue_number = kQnSend;
  std::uint32_t msn = 0;
  std::uint32_t message_offset = 0;

  std::size_t length() const { return tagged ? kDdpTaggedHeaderLen : kDdpUntaggedHeaderLen; }
  friend bool operator==(const DdpHeader&, const DdpHeader&) = default;
};

// A decoded ULPDU: header plus a view of the payload inside the decoded bytes.
struct DdpSegment {
  DdpHeader header;
  std::span<const std::uint8_t> payload;
};

// Writes the header's length() octets to `out` (which must have room for 18).
std::size_t encode_ddp_header(const DdpHeader& header, std::span<std::uint8_t> out);

// Parses and validates one ULPDU (no MPA length field, no CRC).
Expected<DdpSegment, WireError> decode_ddp_segment(std::span<const std::uint8_t> ulpdu);

// Which buffer model and queue an opcode travels on (RFC 5040 s4.3 table).
bool opcode_is_tagged(RdmapOpcode op);
std::uint32_t opcode_queue_number(RdmapOpcode op);  // untagged opcodes only
bool opcode_is_reserved(std::uint8_t raw_opcode);
std::string_view opcode_name(RdmapOpcode op);

// Headers for each RDMAP message, so callers do not pick bits by hand.
DdpHeader rdma_write_header(std::uint32_t sink_stag, std::uint64_t sink_to, bool last);
DdpHeader read_response_header(std::uint32_t sink_stag, std::uint64_t sink_to, bool last);
DdpHeader read_request_header(std::uint32_t msn);
// Send family: solicited_event and invalidate_stag (non-empty) pick among the four opcodes.
DdpHeader send_header(std::uint32_t msn, std::uint32_t message_offset, bool last,
                      bool solicited_event = false,
                      std::optional<std::uint32_t> invalidate_stag = std::nullopt);
DdpHeader terminate_header(std::uint32_t msn);

std::string to_string(const DdpHeader& header);

}  // namespace rdma_interop::wire
