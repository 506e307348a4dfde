// fpdu_encoder.h - frames ULPDUs as MPA FPDUs (RFC 5044 s4): ULPDU_Length, pad to 4 octets,
// CRC32c, and markers every 512 octets of the stream with their FPDU back-pointer.
//
// The encoder does not copy a payload of any size: an FpduFrame is a list of slices, some
// pointing into the caller's buffers, some into the frame's own few octets (length field,
// markers, pad and CRC). A transport hands the slices to writev/sendmsg. A small FPDU is the
// one exception: one that fits kInlineCapacity octets, without markers, is built whole in
// the frame and goes as one slice, as verbs providers copy small sends (IBV_SEND_INLINE):
// below a few hundred octets each extra iovec costs the kernel more than the copy. The
// encoder keeps the stream position, so one encoder serves one direction of one connection,
// in order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/util/expected.h"
#include "core/wire/fpdu_options.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

// One encoded FPDU as slices in wire order. Leading parts of the ULPDU that fit in 62 octets
// (headers) are copied into the frame; everything after them is referenced, never copied,
// unless the whole FPDU fits kInlineCapacity (no markers): then it is one slice of the
// frame's own. Valid until the next encode into it, and only while the caller's ULPDU
// buffers live. Not copyable: slices point into the frame itself.
class FpduFrame {
 public:
  static constexpr std::size_t kInlineCapacity = 256;
  FpduFrame();
  FpduFrame(const FpduFrame&) = delete;
  FpduFrame& operator=(const FpduFrame&) = delete;

  const std::vector<std::span<const std::uint8_t>>& slices() const { return slices_; }
  std::size_t wire_length() const { return wire_length_; }
  // Copies the FPDU's bytes to the end of `out` (tests, captures, the Python API).
  void append_to(std::vector<std::uint8_t>& out) const;

 private:
  friend class FpduEncoder;
  void clear();

  // The length field followed by the ULPDU's small leading parts (its DDP/RDMAP header),
  // so they cost one CRC call: ISA-L's per-call cost dominates below a few dozen octets.
  static constexpr std::size_t kHeadCapacity = 64;
  // Room for a whole FPDU of up to kInlineCapacity octets (length field, ULPDU, pad, CRC).
  std::array<std::uint8_t, kInlineCapacity> head_{};
  std::array<std::uint8_t, 8> trailer_{};  // up to 3 pad octets + CRC
  std::vector<std::array<std::uint8_t, 4>> markers_;
  std::vector<std::span<const std::uint8_t>> slices_;
  std::size_t wire_length_ = 0;
};

class FpduEncoder {
 public:
  explicit FpduEncoder(const FpduOptions& options);
  // Continues a stream that already carried `stream_position` octets of FPDUs (the RTR that
  // MPA setup sent), so markers stay at multiples of 512 from the stream's first FPDU octet.
  FpduEncoder(const FpduOptions& options, std::uint64_t stream_position);

  // Frames one ULPDU given as gather parts in order (usually the DDP/RDMAP header, then the
  // payload). Returns the FPDU's length on the wire; fails with kFpduUlpduTooLong if the
  // parts add up to more than the MULPDU, and then leaves the stream position unchanged.
  Expected<std::size_t, WireError> encode(std::span<const std::span<const std::uint8_t>> parts,
                                          FpduFrame& out);
  // The same for a ULPDU that is already one contiguous buffer.
  Expected<std::size_t, WireError> encode(std::span<const std::uint8_t> ulpdu, FpduFrame& out) {
    return encode(std::span<const std::span<const std::uint8_t>>(&ulpdu, 1), out);
  }

  // Octets of this direction's FPDU stream written so far (marker phase).
  std::uint64_t stream_position() const { return stream_position_; }
  const FpduOptions& options() const { return options_; }

 private:
  void place_marker_if_due(FpduFrame& out);
  void emit(std::span<const std::uint8_t> bytes, FpduFrame& out);
  std::size_t encode_inline(std::span<const std::span<const std::uint8_t>> parts,
                            std::size_t ulpdu_length, std::size_t pad, FpduFrame& out);

  FpduOptions options_;
  std::uint64_t stream_position_ = 0;
  // Per-FPDU state while encoding.
  std::uint64_t fpdu_start_ = 0;
  std::uint64_t length_field_position_ = 0;
  std::uint32_t crc_running_ = 0;
};

}  // namespace rdma_interop::wire
