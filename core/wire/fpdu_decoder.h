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

struct FpduStep {
  std::size_t consumed = 0;                            // octets of the input used
  std::optional<std::span<const std::uint8_t>> ulpdu;  // a complete, verified ULPDU
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
  std::vector<std::uint8_t> buffer_;
  std::array<std::uint8_t, 4> small_{};  // length field or CRC being collected
  std::array<std::uint8_t, 4> marker_{};
  std::size_t marker_have_ = 0;
};

}  // namespace rdma_interop::wire
