// wire_error.h - every way wire bytes can be wrong, and the protocol's answer to each.
//
// Each decoder returns one of these codes instead of throwing. `describe()` gives the
// sentence an operator reads; `terminate_for()` gives the RDMAP Terminate (layer, error
// type, code) that RFC 5040/5041/5044/6581 say the receiver sends for it. MPA Request/Reply
// errors happen before FPDU framing exists, so their answer is the MPA code 0x04 ("invalid
// Request or Reply"), which a revision-2 peer may carry in a Terminate and a revision-1 peer
// answers by closing the connection. A malformed Terminate is never answered with another
// Terminate: its mapping names what went wrong, and the receiver just closes.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::wire {

enum class WireError : std::uint8_t {
  // MPA Request/Reply frame (RFC 5044 s7.1, RFC 6581 s3).
  kMpaTruncated,                   // fewer bytes than the header or PD_Length says
  kMpaTrailingBytes,               // more bytes than the frame holds
  kMpaBadKey,                      // neither "MPA ID Req Frame" nor "MPA ID Rep Frame"
  kMpaReservedBits,                // a reserved flag bit is set
  kMpaRejectInRequest,             // R flag set in a Request
  kMpaUnknownRevision,             // Rev is not 1 or 2
  kMpaPrivateDataTooLong,          // PD_Length above the configured limit
  kMpaEnhancedNeedsRevision2,      // enhanced flag with Rev 1
  kMpaEnhancedParamsTruncated,     // enhanced flag but PD_Length < 4 (no IRD/ORD words)
  kMpaIrdOrdOutOfRange,            // encoder: IRD or ORD does not fit in 14 bits
  // FPDU framing (RFC 5044 s4-s6).
  kFpduCrcMismatch,                // received CRC32c differs from the computed one
  kFpduMarkerReservedBits,         // marker's reserved 16 bits are not zero
  kFpduMarkerPointerMismatch,      // marker's FPDUPTR does not point at this FPDU
  kFpduUlpduTooShort,              // ULPDU_Length cannot hold a DDP header
  kFpduUlpduTooLong,               // ULPDU_Length above the configured MULPDU
  kFpduStreamFailed,               // bytes fed after the decoder already failed
  // DDP (RFC 5041) and RDMAP (RFC 5040) headers.
  kDdpTruncated,                   // ULPDU shorter than the DDP header its T flag implies
  kDdpTaggedBadVersion,            // DV != 1 on a tagged segment
  kDdpUntaggedBadVersion,          // DV != 1 on an untagged segment
  kDdpInvalidQueueNumber,          // untagged QN is not 0, 1 or 2, or wrong for the opcode
  kRdmapBadVersion,                // RV != 1
  kRdmapBadOpcode,                 // reserved opcode (8..15)
  kRdmapOpcodeWrongBufferModel,    // tagged opcode on untagged segment or vice versa
  kRdmapReadRequestBadLength,      // Read Request body is not exactly 28 octets
  kRdmapSingleSegmentRequired,     // Read Request/Terminate not one segment with L set, MO 0
  // Terminate (RFC 5040 s4.8).
  kTerminateTruncated,             // shorter than the Terminate Control field or its headers
  kTerminateBadLayer,              // layer is not RDMAP, DDP or LLP
  kTerminateReservedBits,          // reserved Hdr Ctrl bits set
  kTerminateHeaderLengthMismatch,  // D/R flags disagree with the bytes that follow
};

// How many WireError values there are; they run from 0 to kWireErrorCount - 1.
inline constexpr std::size_t kWireErrorCount =
    static_cast<std::size_t>(WireError::kTerminateHeaderLengthMismatch) + 1;

// The (layer, error type, error code) triple of an RDMAP Terminate Control field.
struct TerminateCause {
  TermLayer layer = TermLayer::kRdmap;
  std::uint8_t etype = 0;
  std::uint8_t code = 0;
  friend bool operator==(const TerminateCause&, const TerminateCause&) = default;
};

// Stable identifier, e.g. "mpa_bad_key" (used by Python exceptions and JSON reports).
std::string_view error_name(WireError e);
// One sentence for a human, e.g. "MPA frame key is neither 'MPA ID Req Frame' nor ...".
std::string_view describe(WireError e);
// What the receiver of the malformed bytes sends back (see the file comment).
TerminateCause terminate_for(WireError e);
// "RDMAP/remote protection/invalid STag" style text for any (layer, etype, code).
std::string describe(const TerminateCause& cause);

// Values print themselves (test failures, logs): the error_name() and the triple.
std::ostream& operator<<(std::ostream& os, WireError e);
std::ostream& operator<<(std::ostream& os, const TerminateCause& cause);

}  // namespace rdma_interop::wire
