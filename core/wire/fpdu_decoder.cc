#include "core/wire/fpdu_decoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/util/byte_order.h"
#include "core/wire/crc32c.h"

namespace rdma_interop::wire {
namespace {

std::size_t pad_for(std::size_t ulpdu_length) {
  return (kFpduAlignment - (kUlpduLengthLen + ulpdu_length) % kFpduAlignment) % kFpduAlignment;
}

}  // namespace

FpduDecoder::FpduDecoder(const FpduOptions& options)
    : options_(options), crc_running_(kCrc32cInit) {}

FpduDecoder::FpduDecoder(const FpduOptions& options, std::uint64_t stream_position)
    : options_(options), stream_position_(stream_position), crc_running_(kCrc32cInit) {}

Expected<FpduStep, WireError> FpduDecoder::fail(WireError e) {
  state_ = State::kFailed;
  return unexpected(e);
}

std::optional<WireError> FpduDecoder::check_length(std::uint16_t ulpdu_length) const {
  // The smallest ULPDU is a tagged DDP header with no payload (RFC 5041 s4.3).
  if (ulpdu_length < kDdpTaggedHeaderLen) return WireError::kFpduUlpduTooShort;
  const std::uint16_t max =
      options_.markers ? std::min(options_.max_ulpdu, kMaxUlpduWithMarkers) : options_.max_ulpdu;
  if (ulpdu_length > max) return WireError::kFpduUlpduTooLong;
  return std::nullopt;
}

std::optional<WireError> FpduDecoder::take_marker_octet(std::uint8_t octet) {
  marker_[marker_have_++] = octet;
  stream_position_ += 1;
  if (marker_have_ < kMarkerLen) return std::nullopt;
  marker_have_ = 0;
  const std::uint64_t marker_position = stream_position_ - kMarkerLen;
  const bool fpdu_not_started = state_ == State::kLength && have_ == 0;
  // RFC 5044 s4.3: a marker at an FPDU boundary points at the FPDU that follows it (0);
  // inside an FPDU it points back to that FPDU's ULPDU_Length. The two low bits of
  // FPDUPTR are always zero on the wire and treated as zero on receipt.
  const std::uint64_t expected =
      fpdu_not_started ? 0 : marker_position - length_field_position_;
  if (marker_[0] != 0 || marker_[1] != 0) return WireError::kFpduMarkerReservedBits;
  if ((load_be16(&marker_[2]) & ~0x3u) != expected) return WireError::kFpduMarkerPointerMismatch;
  if (options_.crc) crc_running_ = crc32c_update(crc_running_, marker_);
  return std::nullopt;
}

std::optional<UlpduInProgress> FpduDecoder::ulpdu_in_progress() const {
  if (options_.markers || state_ != State::kBody || have_ >= ulpdu_length_) return std::nullopt;
  // The placed octets are one range ending where the ULPDU stands: octets collected after it
  // would leave two ranges for one ULPDU.
  if (!placed_.empty() && placed_.offset + placed_.length != have_) return std::nullopt;
  const std::size_t held = placed_.empty() ? have_ : placed_.offset;
  return UlpduInProgress{std::span<const std::uint8_t>(buffer_).first(held), have_, ulpdu_length_};
}

std::optional<UlpduInProgress> FpduDecoder::next_ulpdu(std::span<const std::uint8_t> peeked) const {
  if (options_.markers || !at_boundary() || peeked.size() < kUlpduLengthLen) return std::nullopt;
  const std::uint16_t length = load_be16(peeked.data());
  if (check_length(length)) return std::nullopt;
  const auto head = peeked.subspan(kUlpduLengthLen).first(
      std::min<std::size_t>(length, peeked.size() - kUlpduLengthLen));
  return UlpduInProgress{head, head.size(), length};
}

void FpduDecoder::place(std::span<const std::uint8_t> octets) {
  if (octets.empty()) return;
  if (!ulpdu_in_progress() || octets.size() > ulpdu_length_ - have_) {
    state_ = State::kFailed;  // more than the ULPDU holds would overrun step()'s buffer
    return;
  }
  if (placed_.empty()) placed_.offset = have_;
  placed_.length += octets.size();
  if (options_.crc) crc_running_ = crc32c_update(crc_running_, octets);
  have_ += octets.size();
  stream_position_ += octets.size();
  if (have_ == body_length_) {  // no pad: the CRC comes next
    have_ = 0;
    state_ = State::kCrc;
  }
}

Expected<FpduStep, WireError> FpduDecoder::step(std::span<const std::uint8_t> input) {
  if (state_ == State::kFailed) return unexpected(WireError::kFpduStreamFailed);

  // Fast path: a whole FPDU at the front of the input, no markers, nothing buffered. The
  // ULPDU is handed out in place.
  if (!options_.markers && state_ == State::kLength && have_ == 0 &&
      input.size() >= kUlpduLengthLen) {
    const std::uint16_t length = load_be16(input.data());
    if (auto e = check_length(length)) return fail(*e);
    const std::size_t total = kUlpduLengthLen + length + pad_for(length) + kCrcLen;
    if (input.size() >= total) {
      if (options_.crc) {
        const std::uint32_t computed = crc32c(input.first(total - kCrcLen));
        if (computed != crc32c_from_wire(&input[total - kCrcLen])) {
          return fail(WireError::kFpduCrcMismatch);
        }
      }
      stream_position_ += total;
      ++fpdus_decoded_;
      return FpduStep{total, input.subspan(kUlpduLengthLen, length), {}};
    }
  }

  // Slow path: collect octets into the current state until an FPDU completes.
  std::size_t used = 0;
  while (used < input.size()) {
    if (options_.markers &&
        (marker_have_ > 0 || stream_position_ % kMarkerInterval == 0)) {
      if (auto e = take_marker_octet(input[used++])) return fail(*e);
      continue;
    }
    std::size_t room = input.size() - used;
    if (options_.markers) {
      room = std::min<std::size_t>(room, kMarkerInterval - stream_position_ % kMarkerInterval);
    }
    switch (state_) {
      case State::kLength: {
        if (have_ == 0) length_field_position_ = stream_position_;
        const std::size_t n = std::min(room, kUlpduLengthLen - have_);
        std::memcpy(&small_[have_], &input[used], n);
        if (options_.crc) crc_running_ = crc32c_update(crc_running_, input.subspan(used, n));
        have_ += n;
        used += n;
        stream_position_ += n;
        if (have_ == kUlpduLengthLen) {
          ulpdu_length_ = load_be16(small_.data());
          if (auto e = check_length(ulpdu_length_)) return fail(*e);
          body_length_ = ulpdu_length_ + pad_for(ulpdu_length_);
          // Grown, never shrunk: a resize up zero-fills, 64 KiB each time an FPDU that
          // arrives in pieces follows a small one.
          if (buffer_.size() < body_length_) buffer_.resize(body_length_);
          have_ = 0;
          state_ = State::kBody;
        }
        break;
      }
      case State::kBody: {
        const std::size_t n = std::min(room, body_length_ - have_);
        std::memcpy(&buffer_[have_], &input[used], n);
        if (options_.crc) crc_running_ = crc32c_update(crc_running_, input.subspan(used, n));
        have_ += n;
        used += n;
        stream_position_ += n;
        if (have_ == body_length_) {
          have_ = 0;
          state_ = State::kCrc;
        }
        break;
      }
      case State::kCrc: {
        const std::size_t n = std::min(room, kCrcLen - have_);
        std::memcpy(&small_[have_], &input[used], n);
        have_ += n;
        used += n;
        stream_position_ += n;
        if (have_ == kCrcLen) {
          if (options_.crc &&
              crc32c_finish(crc_running_) != crc32c_from_wire(small_.data())) {
            return fail(WireError::kFpduCrcMismatch);
          }
          have_ = 0;
          state_ = State::kLength;
          crc_running_ = kCrc32cInit;
          ++fpdus_decoded_;
          const PlacedRange placed = std::exchange(placed_, PlacedRange{});
          return FpduStep{used, std::span<const std::uint8_t>(buffer_).first(ulpdu_length_),
                          placed};
        }
        break;
      }
      case State::kFailed:
        return unexpected(WireError::kFpduStreamFailed);
    }
  }
  return FpduStep{used, std::nullopt, {}};
}

}  // namespace rdma_interop::wire
