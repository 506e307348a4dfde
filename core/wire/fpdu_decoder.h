// fpdu_decoder.h - a streaming MPA FPDU receiver (RFC 5044 s4-s6).
//
// Feed it the TCP byte stream in pieces of any size, down to one octet; it finds FPDU
// boundaries, removes and checks markers, checks pad and CRC, and hands out each ULPDU.
//
//   while (!in.empty()) {
//     auto step = decoder.step(in);
//     if (!step) { /* step.error(): send terminate_for(error) and close */ }
//     in = in.subspan(step->consumed);
//     if (step->ulpdu) handle(*step->ulpdu);
//   }
//
// A ULPDU that arrived whole in one piece (markers off) is handed out as a view into the
// caller's bytes, without a copy; otherwise it is a view into the decoder's buffer. Either
// view is valid until the next call to step(). After an error the decoder stays failed.
//
// Direct placement (markers off): while a ULPDU is still arriving, ulpdu_in_progress() shows
// its first octets and its length, so the caller can name where the rest belongs (a tagged
// buffer: RdmapEndpoint::placement_target) and read it there from the socket itself, as an
// RNIC places a segment's payload with no buffer in between (RFC 5041 s1.1). place() hands
// the decoder what was read there: the CRC covers it as any octet, but it is not kept, and
// the ULPDU step() then hands out names the range (FpduStep::placed) its view does not hold.
//
//   if (auto u = decoder.ulpdu_in_progress(); u && (target = where(*u))) {
//     n = readv(socket, {target, buffer});
//     decoder.place(target.first(min(n, target.size())));
//     ... step() over the rest, as above
//   }
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/util/expected.h"
#include "core/wire/fpdu_options.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

// Octets [offset, offset + length) of a ULPDU, placed by the decoder's caller (place()).
struct PlacedRange {
  std::size_t offset = 0;
  std::size_t length = 0;
  bool empty() const { return length == 0; }
};

struct FpduStep {
  std::size_t consumed = 0;                            // octets of the input used
  std::optional<std::span<const std::uint8_t>> ulpdu;  // a complete, verified ULPDU
  // The part of `ulpdu` the caller placed itself: the view is the ULPDU's full length, but
  // these octets of it are not the ULPDU's (they are where the caller put them).
  PlacedRange placed;
};

// A ULPDU partly received: what can be placed directly (FpduDecoder::ulpdu_in_progress).
struct UlpduInProgress {
  std::span<const std::uint8_t> head;  // its first octets, held by the decoder (none placed)
  std::size_t received = 0;            // octets of it so far, placed ones included
  std::size_t length = 0;              // its full length: length - received to come
};

class FpduDecoder {
 public:
  explicit FpduDecoder(const FpduOptions& options);
  // Continues a stream whose first `stream_position` octets (the RTR during MPA setup) were
  // decoded elsewhere; the next octet must start an FPDU. Markers are expected at multiples
  // of 512 from the stream's first FPDU octet.
  FpduDecoder(const FpduOptions& options, std::uint64_t stream_position);

  Expected<FpduStep, WireError> step(std::span<const std::uint8_t> input);

  std::uint64_t stream_position() const { return stream_position_; }
  std::uint64_t fpdus_decoded() const { return fpdus_decoded_; }
  // Direct placement needs markers off: with them a payload's octets are not contiguous on
  // the wire (RFC 5044 s4.3).
  bool can_place() const { return !options_.markers; }
  // The ULPDU still arriving, if its next octets may be placed by the caller: markers off,
  // inside its ULPDU (not its pad), and nothing of it came through step() since a place().
  std::optional<UlpduInProgress> ulpdu_in_progress() const;
  // The ULPDU the next FPDU carries, from its first octets looked at before they are read
  // (MSG_PEEK) at a boundary: its length field, then `peeked` - 2 octets of the ULPDU as
  // head and received. nullopt with markers on, off a boundary, with under 2 octets, or a
  // length the decoder would refuse. Feed the octets looked at to step() before place().
  std::optional<UlpduInProgress> next_ulpdu(std::span<const std::uint8_t> peeked) const;
  // The ULPDU's next octets, read by the caller where it placed them: at most
  // length - received of ulpdu_in_progress(), which must have a value. Counted into the CRC
  // and the stream position, not kept. Called otherwise (a caller's mistake), the decoder
  // fails: step() then answers kFpduStreamFailed.
  void place(std::span<const std::uint8_t> octets);

  // True between FPDUs (no partial FPDU buffered): where a clean close may happen.
  bool at_boundary() const { return state_ == State::kLength && have_ == 0 && marker_have_ == 0; }

 private:
  enum class State : std::uint8_t { kLength, kBody, kCrc, kFailed };

  Expected<FpduStep, WireError> fail(WireError e);
  std::optional<WireError> check_length(std::uint16_t ulpdu_length) const;
  std::optional<WireError> take_marker_octet(std::uint8_t octet);

  FpduOptions options_;
  State state_ = State::kLength;
  std::uint64_t stream_position_ = 0;
  std::uint64_t fpdus_decoded_ = 0;
  std::uint64_t length_field_position_ = 0;  // stream position of this FPDU's ULPDU_Length
  std::uint32_t crc_running_ = 0;
  std::uint16_t ulpdu_length_ = 0;
  std::size_t body_length_ = 0;  // ULPDU + pad
  std::size_t have_ = 0;         // octets collected for the current state
  PlacedRange placed_;           // the current ULPDU's octets the caller placed (place())
  std::vector<std::uint8_t> buffer_;
  std::array<std::uint8_t, 4> small_{};  // length field or CRC being collected
  std::array<std::uint8_t, 4> marker_{};
  std::size_t marker_have_ = 0;
};

}  // namespace rdma_interop::wire
