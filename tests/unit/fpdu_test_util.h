// fpdu_test_util.h - drive FpduEncoder/FpduDecoder over whole streams in tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "wire_test_util.h"

namespace rdma_interop::wire::testing {

// Frames each ULPDU (as one part) and returns the concatenated wire bytes. Also checks the
// frame's bookkeeping: returned length == wire_length() == sum of slice lengths.
inline Bytes encode_stream(FpduEncoder& encoder, const std::vector<Bytes>& ulpdus) {
  Bytes out;
  FpduFrame frame;
  for (const Bytes& ulpdu : ulpdus) {
    const std::span<const std::uint8_t> parts[] = {ulpdu};
    auto length = encoder.encode(parts, frame);
    if (!length.has_value()) {
      ADD_FAILURE() << "encode failed: " << error_name(length.error());
      return out;
    }
    std::size_t slice_total = 0;
    for (const auto& s : frame.slices()) slice_total += s.size();
    EXPECT_EQ(*length, frame.wire_length());
    EXPECT_EQ(slice_total, frame.wire_length());
    const std::size_t before = out.size();
    frame.append_to(out);
    EXPECT_EQ(out.size() - before, *length);
  }
  return out;
}

struct DecodeResult {
  std::vector<Bytes> ulpdus;
  std::optional<WireError> error;
};

// Feeds `stream` to the decoder in chunks whose sizes `next_chunk` picks (always >= 1),
// following the loop documented in fpdu_decoder.h. Stops at the first error.
inline DecodeResult decode_stream(FpduDecoder& decoder, std::span<const std::uint8_t> stream,
                                  const std::function<std::size_t()>& next_chunk) {
  DecodeResult result;
  while (!stream.empty()) {
    std::span<const std::uint8_t> in = stream.first(std::min(next_chunk(), stream.size()));
    stream = stream.subspan(in.size());
    while (!in.empty()) {
      auto step = decoder.step(in);
      if (!step.has_value()) {
        result.error = step.error();
        return result;
      }
      if (step->consumed == 0 && !step->ulpdu) {
        ADD_FAILURE() << "decoder made no progress on " << in.size() << " octets";
        return result;
      }
      in = in.subspan(step->consumed);
      if (step->ulpdu) result.ulpdus.emplace_back(step->ulpdu->begin(), step->ulpdu->end());
    }
  }
  return result;
}

inline DecodeResult decode_whole(FpduDecoder& decoder, std::span<const std::uint8_t> stream) {
  const std::size_t all = stream.size();
  return decode_stream(decoder, stream, [all] { return all == 0 ? 1 : all; });
}

}  // namespace rdma_interop::wire::testing
