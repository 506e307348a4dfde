// terminate.h - the RDMAP Terminate message (RFC 5040 s4.8).
//
//   Terminate Control: |Layer(4)|EType(4)|Error Code(8)|M|D|R|Reserved(13)|
//   then, if M or D: DDP Segment Length(16) and, if D, the terminated DDP header
//   (14 or 18 octets); if R and that header is a Read Request, its 28-octet body.
//
// The Terminate travels as an untagged DDP segment on queue 2 with L set and MO 0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/util/expected.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

struct TerminateMessage {
  TerminateCause cause;
  // M: the length of the segment that caused the error. The 16-bit field is on the wire
  // whenever M or D is set; without M it means nothing (RFC 5040 s4.8), so it is sent as
  // zero and ignored on receipt.
  std::optional<std::uint16_t> ddp_segment_length;
  // D: the DDP (and RDMAP control) header of that segment, as it arrived.
  std::vector<std::uint8_t> ddp_header;
  // R: the RDMAP header was included. Its bytes beyond the DDP header exist only for a
  // Read Request (28 octets); siw sets R for a Send with nothing more to include.
  bool rdmap_header_included = false;
  std::vector<std::uint8_t> rdmap_header;

  friend bool operator==(const TerminateMessage&, const TerminateMessage&) = default;
};

// The Terminate body (what follows the DDP header).
std::vector<std::uint8_t> encode_terminate_body(const TerminateMessage& message);
// A whole Terminate ULPDU: DDP header (QN 2, this MSN, MO 0, L) plus body.
std::vector<std::uint8_t> encode_terminate(const TerminateMessage& message, std::uint32_t msn);
// Parses a Terminate body (the payload of a decoded Terminate segment).
Expected<TerminateMessage, WireError> decode_terminate_body(std::span<const std::uint8_t> body);

// The Terminate a receiver sends for `error` found in `offending_ulpdu`, including the
// offending headers when their layout is known (as siw and the RFC examples do).
TerminateMessage terminate_for_ulpdu(WireError error,
                                     std::span<const std::uint8_t> offending_ulpdu);
// The Terminate for a placement error the provider found (invalid STag, bounds, rights).
TerminateMessage terminate_for_cause(const TerminateCause& cause,
                                     std::span<const std::uint8_t> offending_ulpdu);

std::string to_string(const TerminateMessage& message);

// A Terminate that did not decode, read as far as it can be: a finding about the peer (kernel
// siw writes Terminate Control's M/D/R flags into the low bits, from little-endian bitfields).
struct MalformedTerminate {
  WireError error;
  // Layer, EType and Error Code from the first two octets, when the layer is one RFC 5040
  // s4.8 names: what the peer meant to say, whatever went wrong after.
  std::optional<TerminateCause> cause;
  // The same octets read as little-endian bitfields lay them out (EType in the high nibble,
  // M/D/R in the low bits of the third octet), when the flags sit there: kernel siw's
  // struct iwarp_terminate on x86. Its Read Terminate 10 00 07 00 means RDMAP/remote
  // protection/invalid STag, which the RFC layout reads as DDP/local catastrophic.
  std::optional<TerminateCause> little_endian_cause;
  std::vector<std::uint8_t> octets;  // the body's first kMalformedTerminateKept octets
  friend bool operator==(const MalformedTerminate&, const MalformedTerminate&) = default;
};
inline constexpr std::size_t kMalformedTerminateKept = 32;
MalformedTerminate read_malformed_terminate(std::span<const std::uint8_t> body, WireError error);
// "malformed Terminate (<why>), octets 11 00 03 00 ...; its first octets name DDP/tagged
// buffer/invalid STag (1/1/0x00)"
std::string to_string(const MalformedTerminate& terminate);

}  // namespace rdma_interop::wire
