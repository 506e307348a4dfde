// mpa_frame.h - MPA Request and Reply frames (RFC 5044 s7.1, RFC 6581 s3).
//
//   0..15  Key "MPA ID Req Frame" or "MPA ID Rep Frame"
//   16     |M|C|R|E|Res(4)|   M markers, C CRC, R reject, E enhanced (RFC 6581)
//   17     Rev (1 or 2)
//   18..19 PD_Length, counting the IRD/ORD words when E is set
//   20..   [IRD word][ORD word] (E set) then the application's private data
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
  // Reserved flag bits as received (0 when encoding, unless a test wants to send garbage).
  std::uint8_t reserved_bits = 0;

  friend bool operator==(const MpaFrame&, const MpaFrame&) = default;
};

struct MpaLimits {
  // Largest PD_Length accepted or produced (IRD/ORD words included). RFC 5044: 512.
  std::size_t private_data_limit = kMpaMaxPrivateDataRfc;
  // RFC 5044 says senders zero the reserved bits. Strict receivers reject them; lenient
  // ones (to meet a peer that sets them) keep them in MpaFrame::reserved_bits.
  bool reject_reserved_bits = true;
};

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

// Total length (header + PD_Length) of the frame whose first kMpaHeaderLen bytes are given,
// after validating the header. Lets a stream reader know how much to wait for.
Expected<std::size_t, WireError> mpa_frame_length(std::span<const std::uint8_t> header,
                                                  const MpaLimits& limits = {});

// Decodes exactly one frame: `bytes` must hold the whole frame and nothing more.
Expected<MpaFrame, WireError> decode_mpa_frame(std::span<const std::uint8_t> bytes,
                                               const MpaLimits& limits = {});

// "MPA Request rev 2 CRC p2p rtr=write,read ird=16 ord=16 pd=12" - for logs and reports.
std::string to_string(const MpaFrame& frame);

}  // namespace rdma_interop::wire
