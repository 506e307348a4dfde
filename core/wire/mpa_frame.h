// mpa_frame.h - MPA Request and Reply frames (RFC 5044 s7.1, RFC 6581 s3).
//
//   0..15  Key "MPA ID Req Frame" or "MPA ID Rep Frame"
//   16     |M|C|R|E|Res(4)|   M markers, C CRC, R reject, E enhanced (RFC 6581)
//   17     Rev (1 or 2; 129 is erdma's, decoded only when MpaLimits::accept_erdma)
//   18..19 PD_Length, counting the IRD/ORD words when E is set
//   20..   [IRD word][ORD word] (E set) then the application's private data
//   Rev 129: [erdma cookie(4)][erdma bits(4)] at 20..27, outside PD_Length, then the data.
//
// Res bits 0x0c are known vendor extensions (iwarp_constants.h: siw's GSO bit, Chelsio's FPDU
// size proposal): a strict receiver refuses only the other two (0x03) and keeps these.
//
// Frames are plain values: encode() writes the exact bytes; decode_mpa_frame() checks every
// field and names the first one that is wrong. Neither allocates more than the frame itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/util/expected.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

enum class MpaFrameKind : std::uint8_t { kRequest, kReply };

// RFC 6581 s3 IRD/ORD words: peer-to-peer mode, the RTR types offered (initiator) or
// chosen (responder), and the 14-bit inbound/outbound RDMA Read queue depths.
struct MpaEnhancedParams {
  bool peer_to_peer = false;
  bool rtr_send = false;   // zero-length Send (FPDU) RTR
  bool rtr_write = false;  // zero-length RDMA Write RTR
  bool rtr_read = false;   // zero-length RDMA Read RTR
  std::uint16_t ird = 0;
  std::uint16_t ord = 0;
  friend bool operator==(const MpaEnhancedParams&, const MpaEnhancedParams&) = default;
};

// erdma's extension (erdma_cm.h struct erdma_mpa_ext): the QP's device cookie and a word
// whose low 4 bits name the congestion control algorithm.
struct ErdmaExtension {
  std::uint32_t cookie = 0;
  std::uint32_t bits = 0;
  friend bool operator==(const ErdmaExtension&, const ErdmaExtension&) = default;
};

struct MpaFrame {
  MpaFrameKind kind = MpaFrameKind::kRequest;
  bool markers = false;
  bool crc = false;
  bool reject = false;
  std::uint8_t revision = kMpaRevision1;
  // Present exactly when the enhanced flag is set (revision 2 only).
  std::optional<MpaEnhancedParams> enhanced;
  // The application's private data; excludes the IRD/ORD words.
  std::vector<std::uint8_t> private_data;
  // Reserved flag bits as received (0 when encoding, unless a test wants to send garbage or a
  // personality sends or echoes vendor extension bits).
  std::uint8_t reserved_bits = 0;
  // Revision 129 (erdma) only: its extension. A revision-129 frame without it is encoded with
  // zeros; a decoded one always has it.
  std::optional<ErdmaExtension> erdma;

  friend bool operator==(const MpaFrame&, const MpaFrame&) = default;
};

struct MpaLimits {
  // Largest PD_Length accepted or produced (IRD/ORD words included). RFC 5044: 512.
  std::size_t private_data_limit = kMpaMaxPrivateDataRfc;
  // RFC 5044 says senders zero the reserved bits. Strict receivers reject them; lenient
  // ones (to meet a peer that sets them) keep them in MpaFrame::reserved_bits. The known
  // vendor extension bits (kMpaFlagFpduSizeMask) are kept by both: extensions, not errors.
  bool reject_reserved_bits = true;
  // Revision 129 frames decode, with erdma's 8-octet extension after the header; without it
  // Rev 129 is an unknown revision like any other.
  bool accept_erdma = false;
};

// The frame's header octets: 20, or 28 with erdma's extension (revision 129).
std::size_t mpa_header_length(const MpaFrame& frame);

// PD_Length as it goes on the wire for this frame.
std::size_t mpa_pd_length(const MpaFrame& frame);

// The IRD and ORD words as they lead the private data (RFC 6581 s3). A revision-1 peer
// that receives them takes them for private data.
std::array<std::uint8_t, kMpaEnhancedParamsLen> encode_enhanced_params(
    const MpaEnhancedParams& params);

// The frame's bytes. Fails if a field cannot be represented (IRD/ORD over 14 bits,
// private data over the limit, enhanced params on a revision-1 frame).
Expected<std::vector<std::uint8_t>, WireError> encode_mpa_frame(const MpaFrame& frame,
                                                                const MpaLimits& limits = {});

// Total length (header, erdma's extension for revision 129, PD_Length) of the frame whose
// first kMpaHeaderLen bytes are given, after validating the header. Lets a stream reader
// know how much to wait for.
Expected<std::size_t, WireError> mpa_frame_length(std::span<const std::uint8_t> header,
                                                  const MpaLimits& limits = {});

// Decodes exactly one frame: `bytes` must hold the whole frame and nothing more.
Expected<MpaFrame, WireError> decode_mpa_frame(std::span<const std::uint8_t> bytes,
                                               const MpaLimits& limits = {});

// "MPA Request rev 2 CRC p2p rtr=write,read ird=16 ord=16 pd=12" - for logs and reports.
std::string to_string(const MpaFrame& frame);

// What set reserved flag bits mean, for reports: "0x08 (siw GSO_EXP, or 32K FPDUs in
// Chelsio's proposal)", "0x01 (reserved)"; empty for 0.
std::string describe_reserved_bits(std::uint8_t bits);

}  // namespace rdma_interop::wire
