// fpdu_stream_fuzzer - FpduDecoder (RFC 5044 s4-s6) over any byte stream, cut anywhere.
//
// Input: [flags][max_ulpdu(16)][seed][corrupt_at(16)][corrupt_xor] then the body.
//   flags bit 0      CRC on
//   flags bit 1      markers on
//   flags bit 2      constructed: the body describes ULPDUs, which FpduEncoder frames into
//                    a valid stream (then corrupt_xor, if non-zero, flips bits of one
//                    octet); otherwise the body is the wire stream itself
//   flags bits 3-4   MULPDU: 0 65535, 1 max_ulpdu, 2 18 + max_ulpdu % 256, 3 kMaxUlpduWithMarkers
//   flags bits 5-7   largest piece handed to step(): 1, 2, 3, 7, 64, 511, 4096, whole
// A constructed body is records [fill][length(16)][up to length octets]: the ULPDU is those
// octets, made up to max(length, 18) octets with `fill`, and handed to encode() as two parts
// cut at fill/255 of its length.
//
// Invariants: the stream fed whole, one octet at a time, in seeded random pieces, and in
// pieces between which the caller places some of the ULPDU in progress itself (place(), as
// the tcp provider reads a Write's payload straight to its place) gives the same ULPDUs
// (the placed octets put back where FpduStep::placed says) and the same error; step()
// always makes progress; a failed decoder stays failed; an uncorrupted constructed stream
// decodes to exactly the ULPDUs encoded.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "core/wire/fpdu_options.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::wire;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;
using rdma_interop::fuzz::fuzz_fail;
using rdma_interop::fuzz::SplitMix64;

using Bytes = std::vector<std::uint8_t>;

// Constructed streams hold up to one largest FPDU (64 KiB, FPDUPTR near its 16-bit limit)
// and a bit more; the one-octet-at-a-time pass (about 100 ns per octet under ASan) runs on
// streams up to kMaxOctetFedStream, and larger ones rely on the random pieces, whose largest
// size the input picks (down to 1), to keep the fuzzer above a few hundred runs a second.
constexpr std::size_t kMaxConstructedStream = 72 * 1024;
constexpr std::size_t kMaxOctetFedStream = 16 * 1024;
constexpr std::size_t kMaxConstructedUlpdus = 64;
constexpr std::size_t kMinConstructedUlpdu = kDdpUntaggedHeaderLen;
// What the tcp provider looks at before a read: the length field and a tagged header.
constexpr std::size_t kPeekLen = kUlpduLengthLen + kDdpTaggedHeaderLen;

struct DecodeResult {
  std::vector<Bytes> ulpdus;
  std::optional<WireError> error;
  std::uint64_t stream_position = 0;
  std::uint64_t fpdus_decoded = 0;
  bool at_boundary = false;
};

// Feeds `stream` in the pieces `next_piece` chooses, as the fpdu_decoder.h loop does. Before
// each piece, where the decoder has a ULPDU in progress, `place_some(octets to come)` of it
// are placed instead (FpduDecoder::place) and put back into the ULPDU handed out.
template <class NextPiece, class PlaceSome>
DecodeResult decode(const FpduOptions& options, std::span<const std::uint8_t> stream,
                    NextPiece next_piece, PlaceSome place_some, bool look = false) {
  FpduDecoder decoder(options);
  DecodeResult r;
  Bytes placed;  // the octets placed of the ULPDU in progress, from placed_at on
  std::size_t placed_at = 0;
  while (!stream.empty() && !r.error) {
    if (const auto u = decoder.ulpdu_in_progress()) {
      fuzz_check(!options.markers, "a ULPDU to place with markers on");
      fuzz_check(u->head.size() <= u->received && u->received < u->length,
                 "a ULPDU in progress with nothing to come");
      fuzz_check(placed.empty() || placed_at + placed.size() == u->received,
                 "placing would leave two ranges in one ULPDU");
      const std::size_t n = std::min(place_some(u->length - u->received), stream.size());
      if (n > 0) {
        fuzz_check(n <= u->length - u->received, "placed beyond the ULPDU");
        if (placed.empty()) placed_at = u->received;
        placed.insert(placed.end(), stream.begin(), stream.begin() + static_cast<long>(n));
        decoder.place(stream.first(n));
        stream = stream.subspan(n);
        continue;
      }
    }
    auto piece = stream.first(std::min(stream.size(), next_piece(stream.size())));
    // At a boundary, what next_ulpdu reads from the next octets looked at is what the
    // decoder holds once it has them (the tcp provider's MSG_PEEK).
    std::optional<UlpduInProgress> announced;
    bool looked = false;
    if (look && decoder.at_boundary() && !options.markers && piece.size() >= kPeekLen) {
      piece = stream.first(kPeekLen);
      announced = decoder.next_ulpdu(piece);
      looked = true;
    }
    stream = stream.subspan(piece.size());
    while (!piece.empty()) {
      auto step = decoder.step(piece);
      if (!step) {
        r.error = step.error();
        break;
      }
      fuzz_check(step->consumed <= piece.size(), "step consumed more than it was given");
      fuzz_check(step->consumed > 0 || step->ulpdu.has_value(), "step made no progress");
      if (step->ulpdu) {
        fuzz_check(step->ulpdu->size() <= options.max_ulpdu, "ULPDU above the MULPDU");
        Bytes& ulpdu = r.ulpdus.emplace_back(step->ulpdu->begin(), step->ulpdu->end());
        fuzz_check(step->placed.length == placed.size(), "the placed range is not what was placed");
        if (!placed.empty()) {
          fuzz_check(step->placed.offset == placed_at, "the placed range starts elsewhere");
          fuzz_check(placed_at + placed.size() <= ulpdu.size(), "the placed range is outside");
          std::copy(placed.begin(), placed.end(), ulpdu.begin() + static_cast<long>(placed_at));
          placed.clear();
        }
      } else {
        fuzz_check(step->placed.empty(), "a placed range without a ULPDU");
      }
      piece = piece.subspan(step->consumed);
    }
    if (looked && !announced) {
      fuzz_check(r.error.has_value(), "next_ulpdu refused a length the decoder took");
    }
    if (announced) {
      fuzz_check(!r.error, "a ULPDU next_ulpdu announced failed in its first octets");
      const auto held = decoder.ulpdu_in_progress();
      fuzz_check(held.has_value() || announced->length == kDdpTaggedHeaderLen,
                 "next_ulpdu announced a ULPDU the decoder does not hold");
      if (held) {
        fuzz_check(held->length == announced->length && held->received == announced->received &&
                       std::equal(held->head.begin(), held->head.end(), announced->head.begin(),
                                  announced->head.end()),
                   "next_ulpdu and the decoder disagree");
      }
    }
  }
  if (r.error) {
    // fpdu_decoder.h: after an error the decoder stays failed.
    const std::array<std::uint8_t, 1> more{0};
    auto again = decoder.step(more);
    fuzz_check(!again.has_value(), "a failed decoder accepted more bytes");
    fuzz_check(again.error() == WireError::kFpduStreamFailed,
               "a failed decoder did not answer kFpduStreamFailed");
    fuzz_check(!decoder.at_boundary(), "a failed decoder claims to be at a boundary");
  } else {
    fuzz_check(decoder.fpdus_decoded() == r.ulpdus.size(), "fpdus_decoded miscounts");
  }
  r.stream_position = decoder.stream_position();
  r.fpdus_decoded = decoder.fpdus_decoded();
  r.at_boundary = decoder.at_boundary();
  return r;
}

void check_same(const DecodeResult& a, const DecodeResult& b, const char* what) {
  if (a.ulpdus != b.ulpdus) fuzz_fail(what);
  if (a.error != b.error) fuzz_fail(what);
  if (!a.error && (a.stream_position != b.stream_position || a.at_boundary != b.at_boundary)) {
    fuzz_fail(what);
  }
}

// Frames the ULPDUs the body describes; returns the stream and the ULPDUs it carries.
Bytes construct_stream(const FpduOptions& options, ByteReader& body, std::vector<Bytes>& sent) {
  FpduEncoder encoder(options);
  FpduFrame frame;
  Bytes stream;
  while (!body.empty() && sent.size() < kMaxConstructedUlpdus &&
         stream.size() < kMaxConstructedStream) {
    const std::uint8_t fill = body.u8();
    const std::size_t length = std::max<std::size_t>(body.u16(), kMinConstructedUlpdu);
    Bytes ulpdu;
    auto literal = body.take(length);
    ulpdu.assign(literal.begin(), literal.end());
    ulpdu.resize(length, fill);
    const std::size_t cut = ulpdu.size() * fill / 255;
    const std::array<std::span<const std::uint8_t>, 2> parts = {
        std::span<const std::uint8_t>(ulpdu).first(cut),
        std::span<const std::uint8_t>(ulpdu).subspan(cut)};

    const std::uint64_t before = encoder.stream_position();
    auto n = encoder.encode(parts, frame);
    if (!n) {
      fuzz_check(n.error() == WireError::kFpduUlpduTooLong, "encode failed for another reason");
      const std::size_t mulpdu =
          options.markers ? std::min(options.max_ulpdu, kMaxUlpduWithMarkers) : options.max_ulpdu;
      fuzz_check(ulpdu.size() > mulpdu, "encode refused a ULPDU within the MULPDU");
      fuzz_check(encoder.stream_position() == before, "a failed encode moved the stream");
      continue;
    }
    fuzz_check(*n == frame.wire_length(), "encode's length differs from the frame's");
    fuzz_check(encoder.stream_position() == before + *n, "stream position off after encode");
    const std::size_t at = stream.size();
    frame.append_to(stream);
    fuzz_check(stream.size() - at == *n, "append_to wrote a different length");
    fuzz_check(*n % kFpduAlignment == 0, "FPDU not padded to 4 octets");
    sent.push_back(std::move(ulpdu));
  }
  return stream;
}

std::size_t largest_piece(std::uint8_t selector) {
  static constexpr std::array<std::size_t, 8> kLargest = {1, 2, 3, 7, 64, 511, 4096, 0};
  return kLargest[selector & 0x07];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in(std::span<const std::uint8_t>(data, size));
  const std::uint8_t flags = in.u8();
  const std::uint16_t raw_max = in.u16();
  const std::uint8_t seed = in.u8();
  const std::uint16_t corrupt_at = in.u16();
  const std::uint8_t corrupt_xor = in.u8();

  FpduOptions options;
  options.crc = (flags & 0x01) != 0;
  options.markers = (flags & 0x02) != 0;
  switch ((flags >> 3) & 0x03) {
    case 0: options.max_ulpdu = kMaxUlpduLength; break;
    case 1: options.max_ulpdu = raw_max; break;
    case 2: options.max_ulpdu = static_cast<std::uint16_t>(18 + raw_max % 256); break;
    default: options.max_ulpdu = kMaxUlpduWithMarkers; break;
  }
  const bool constructed = (flags & 0x04) != 0;

  std::vector<Bytes> sent;
  Bytes stream;
  if (constructed) {
    stream = construct_stream(options, in, sent);
    if (corrupt_xor != 0 && !stream.empty()) stream[corrupt_at % stream.size()] ^= corrupt_xor;
  } else {
    auto rest = in.rest();
    stream.assign(rest.begin(), rest.end());
  }

  const std::size_t largest = largest_piece(flags >> 5);
  SplitMix64 rng(std::uint64_t{seed} << 8 | flags);
  const auto none = [](std::size_t) { return std::size_t{0}; };
  const auto whole = decode(options, stream, [](std::size_t left) { return left; }, none);
  const auto pieces = decode(options, stream, [&](std::size_t left) {
    return largest == 0 ? left : rng.in_range(1, largest);
  }, none);
  check_same(whole, pieces, "fed whole and fed in random pieces disagree");
  if (stream.size() <= kMaxOctetFedStream) {
    const auto octets =
        decode(options, stream, [](std::size_t) { return std::size_t{1}; }, none);
    check_same(whole, octets, "fed whole and fed one octet at a time disagree");
  }
  const auto placing = decode(options, stream, [&](std::size_t left) {
    return largest == 0 ? left : rng.in_range(1, largest);
  }, [&](std::size_t to_come) {
    // None, some or all of what is to come, as a reader's read would bring it.
    switch (rng.in_range(0, 3)) {
      case 0: return std::size_t{0};
      case 1: return to_come;
      default: return rng.in_range(1, to_come);
    }
  }, /*look=*/true);
  check_same(whole, placing, "fed whole and fed with octets placed by the caller disagree");

  if (!whole.error) {
    fuzz_check(whole.stream_position == stream.size(), "stream position is not the input size");
  }
  if (constructed && corrupt_xor == 0) {
    fuzz_check(!whole.error.has_value(), "an encoder-made stream failed to decode");
    fuzz_check(whole.ulpdus == sent, "decoded ULPDUs differ from the encoded ones");
    fuzz_check(whole.at_boundary, "decoder not at a boundary after whole FPDUs");
  }
  return 0;
}
