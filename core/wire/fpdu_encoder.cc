#include "core/wire/fpdu_encoder.h"

#include <algorithm>

#include "core/util/byte_order.h"
#include "core/wire/crc32c.h"

namespace rdma_interop::wire {
namespace {

// The marker positions an FPDU carrying `ulpdu_length` octets can meet. Its wire length W is
// at most 2 + ULPDU + 3 pad + 4 CRC + 4 per marker, and it meets at most W / 512 + 1
// markers; solved for W, (13 + ULPDU) / 508 + 1 markers, plus one for rounding.
constexpr std::size_t max_markers(std::size_t ulpdu_length) {
  return (13 + ulpdu_length) / (kMarkerInterval - kMarkerLen) + 2;
}

std::uint16_t effective_max_ulpdu(const FpduOptions& o) {
  return o.markers ? std::min(o.max_ulpdu, kMaxUlpduWithMarkers) : o.max_ulpdu;
}

}  // namespace

FpduFrame::FpduFrame() = default;

void FpduFrame::clear() {
  markers_.clear();
  slices_.clear();
  wire_length_ = 0;
}

void FpduFrame::append_to(std::vector<std::uint8_t>& out) const {
  out.reserve(out.size() + wire_length_);
  for (auto s : slices_) out.insert(out.end(), s.begin(), s.end());
}

FpduEncoder::FpduEncoder(const FpduOptions& options) : options_(options) {}

FpduEncoder::FpduEncoder(const FpduOptions& options, std::uint64_t stream_position)
    : options_(options), stream_position_(stream_position) {}

void FpduEncoder::place_marker_if_due(FpduFrame& out) {
  if (!options_.markers || stream_position_ % kMarkerInterval != 0) return;
  // RFC 5044 s4.3: FPDUPTR is the distance back to this FPDU's ULPDU_Length; a marker at
  // the FPDU's very first octet belongs to it and carries 0.
  const std::uint64_t back =
      stream_position_ == fpdu_start_ ? 0 : stream_position_ - length_field_position_;
  auto& m = out.markers_.emplace_back();
  m = {0, 0, static_cast<std::uint8_t>(back >> 8), static_cast<std::uint8_t>(back)};
  out.slices_.emplace_back(m);
  if (options_.crc) crc_running_ = crc32c_update(crc_running_, m);
  stream_position_ += kMarkerLen;
  out.wire_length_ += kMarkerLen;
}

void FpduEncoder::emit(std::span<const std::uint8_t> bytes, FpduFrame& out) {
  while (!bytes.empty()) {
    place_marker_if_due(out);
    std::size_t n = bytes.size();
    if (options_.markers) {
      n = std::min<std::size_t>(n, kMarkerInterval - stream_position_ % kMarkerInterval);
    }
    auto piece = bytes.first(n);
    out.slices_.push_back(piece);
    if (options_.crc) crc_running_ = crc32c_update(crc_running_, piece);
    stream_position_ += n;
    out.wire_length_ += n;
    bytes = bytes.subspan(n);
  }
}

Expected<std::size_t, WireError> FpduEncoder::encode(
    std::span<const std::span<const std::uint8_t>> parts, FpduFrame& out) {
  std::size_t ulpdu_length = 0;
  for (auto p : parts) ulpdu_length += p.size();
  if (ulpdu_length > effective_max_ulpdu(options_)) {
    return unexpected(WireError::kFpduUlpduTooLong);
  }

  out.clear();
  // Slices point into markers_: it must not reallocate while the frame is built. Reserved
  // for this FPDU's size (a frame keeps its capacity), so a frame that only ever carries
  // small FPDUs stays small.
  if (options_.markers) out.markers_.reserve(max_markers(ulpdu_length));
  fpdu_start_ = stream_position_;
  const bool leading_marker = options_.markers && fpdu_start_ % kMarkerInterval == 0;
  length_field_position_ = fpdu_start_ + (leading_marker ? kMarkerLen : 0);
  crc_running_ = kCrc32cInit;

  // RFC 5044 s4.1: pad so that ULPDU_Length + ULPDU + PAD is a multiple of 4.
  const std::size_t pad =
      (kFpduAlignment - (kUlpduLengthLen + ulpdu_length) % kFpduAlignment) % kFpduAlignment;
  store_be16(out.head_.data(), static_cast<std::uint16_t>(ulpdu_length));
  if (!options_.markers &&
      kUlpduLengthLen + ulpdu_length + pad + kCrcLen <= FpduFrame::kInlineCapacity) {
    return encode_inline(parts, ulpdu_length, pad, out);
  }
  std::size_t head_length = kUlpduLengthLen;
  std::size_t next_part = 0;
  for (; next_part < parts.size(); ++next_part) {
    const auto part = parts[next_part];
    if (head_length + part.size() > FpduFrame::kHeadCapacity) break;
    std::copy(part.begin(), part.end(),
              out.head_.begin() + static_cast<std::ptrdiff_t>(head_length));
    head_length += part.size();
  }
  emit(std::span<const std::uint8_t>(out.head_).first(head_length), out);
  for (auto p : parts.subspan(next_part)) emit(p, out);

  std::fill(out.trailer_.begin(), out.trailer_.end(), 0);
  const auto pad_octets = std::span<const std::uint8_t>(out.trailer_).first(pad);
  if (options_.markers) {
    emit(pad_octets, out);
    // A marker due right before the CRC belongs to this FPDU and is covered by its CRC.
    place_marker_if_due(out);
  } else if (options_.crc) {
    crc_running_ = crc32c_update(crc_running_, pad_octets);
  }
  const auto crc = options_.crc ? crc32c_wire_bytes(crc32c_finish(crc_running_))
                                : std::array<std::uint8_t, 4>{0, 0, 0, 0};
  std::copy(crc.begin(), crc.end(), out.trailer_.begin() + static_cast<std::ptrdiff_t>(pad));
  // Without markers pad and CRC are adjacent: one slice for both.
  const std::size_t trailer_start = options_.markers ? pad : 0;
  const std::size_t trailer_length = pad + kCrcLen - trailer_start;
  out.slices_.push_back(
      std::span<const std::uint8_t>(out.trailer_).subspan(trailer_start, trailer_length));
  stream_position_ += trailer_length;
  out.wire_length_ += trailer_length;
  return out.wire_length_;
}

// The whole FPDU in the frame's own octets, one slice: length field (already stored),
// ULPDU, pad, CRC over all of it in one call. No markers (the caller checked).
std::size_t FpduEncoder::encode_inline(std::span<const std::span<const std::uint8_t>> parts,
                                       std::size_t ulpdu_length, std::size_t pad, FpduFrame& out) {
  std::uint8_t* at = out.head_.data() + kUlpduLengthLen;
  for (auto p : parts) at = std::copy(p.begin(), p.end(), at);
  at = std::fill_n(at, pad, std::uint8_t{0});
  const std::size_t covered = kUlpduLengthLen + ulpdu_length + pad;
  const auto crc = options_.crc ? crc32c_wire_bytes(crc32c_finish(crc32c_update(
                                      kCrc32cInit, std::span(out.head_).first(covered))))
                                : std::array<std::uint8_t, 4>{0, 0, 0, 0};
  std::copy(crc.begin(), crc.end(), at);
  const std::size_t length = covered + kCrcLen;
  out.slices_.push_back(std::span<const std::uint8_t>(out.head_).first(length));
  stream_position_ += length;
  out.wire_length_ = length;
  return length;
}

}  // namespace rdma_interop::wire
