// Property tests for FPDU framing: seeded random ULPDUs (14..70000 octets, clipped to the
// MULPDU the options allow) go through the encoder and come back byte-exact from the decoder
// under every segmentation, for all four CRC x marker combinations. The encoder's bytes are
// also compared with a small reference framer written here from RFC 5044 s4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/wire/crc32c.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "fpdu_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::Bytes;
using testing::decode_stream;
using testing::encode_stream;

// RFC 5044 s4 framing of a whole stream, octet by octet, independent of FpduEncoder.
Bytes reference_stream(const std::vector<Bytes>& ulpdus, const FpduOptions& options) {
  Bytes out;
  for (const Bytes& u : ulpdus) {
    Bytes plain = {static_cast<std::uint8_t>(u.size() >> 8), static_cast<std::uint8_t>(u.size())};
    plain.insert(plain.end(), u.begin(), u.end());
    while (plain.size() % 4 != 0) plain.push_back(0);
    const std::size_t fpdu_start = out.size();
    std::size_t length_field = 0;
    auto maybe_marker = [&](bool fpdu_has_begun) {
      if (!options.markers || out.size() % 512 != 0) return;
      const std::size_t ptr = fpdu_has_begun ? out.size() - length_field : 0;
      out.insert(out.end(),
                 {0, 0, static_cast<std::uint8_t>(ptr >> 8), static_cast<std::uint8_t>(ptr)});
    };
    for (std::size_t i = 0; i < plain.size(); ++i) {
      maybe_marker(i != 0);
      if (i == 0) length_field = out.size();
      out.push_back(plain[i]);
    }
    maybe_marker(true);
    const std::uint32_t crc =
        options.crc ? crc32c(std::span(out).subspan(fpdu_start)) : 0;  // finished value
    for (int shift = 0; shift < 32; shift += 8)
      out.push_back(static_cast<std::uint8_t>(crc >> shift));
  }
  return out;
}

std::vector<Bytes> random_ulpdus(std::mt19937_64& rng, std::size_t count, std::size_t max_ulpdu) {
  std::uniform_int_distribution<std::size_t> size(14, 70000);
  std::uniform_int_distribution<int> octet(0, 255);
  std::vector<Bytes> out;
  for (std::size_t i = 0; i < count; ++i) {
    Bytes u(std::min(size(rng), max_ulpdu));
    for (auto& b : u) b = static_cast<std::uint8_t>(octet(rng));
    out.push_back(std::move(u));
  }
  // A few small ones too, so many FPDUs share a marker interval.
  for (std::size_t n : {14, 15, 16, 17, 30, 509, 510, 511, 512}) out.push_back(Bytes(n, 0x5a));
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

struct Combo {
  const char* name;
  FpduOptions options;
};
const Combo kCombos[] = {
    {"crc_no_markers", {.crc = true, .markers = false}},
    {"no_crc_no_markers", {.crc = false, .markers = false}},
    {"crc_markers", {.crc = true, .markers = true}},
    {"no_crc_markers", {.crc = false, .markers = true}},
};

std::size_t allowed_max(const FpduOptions& o) {
  return o.markers ? std::min<std::size_t>(o.max_ulpdu, kMaxUlpduWithMarkers) : o.max_ulpdu;
}

void PrintTo(const Combo& combo, std::ostream* os) {
  *os << combo.name;
}

class FpduRoundTrip : public ::testing::TestWithParam<Combo> {};

TEST_P(FpduRoundTrip, EncoderMatchesTheReferenceFramer) {
  const FpduOptions options = GetParam().options;
  std::mt19937_64 rng(0x5044);
  const auto ulpdus = random_ulpdus(rng, 8, allowed_max(options));
  FpduEncoder encoder(options);
  const Bytes wire = encode_stream(encoder, ulpdus);
  const Bytes reference = reference_stream(ulpdus, options);
  ASSERT_EQ(wire.size(), reference.size());
  const auto diff = std::mismatch(wire.begin(), wire.end(), reference.begin());
  EXPECT_TRUE(diff.first == wire.end())
      << "first difference at octet " << (diff.first - wire.begin());
}

TEST_P(FpduRoundTrip, OneOctetFeedsGiveBackEveryUlpdu) {
  const FpduOptions options = GetParam().options;
  std::mt19937_64 rng(1);
  const auto ulpdus = random_ulpdus(rng, 6, allowed_max(options));
  FpduEncoder encoder(options);
  const Bytes wire = encode_stream(encoder, ulpdus);
  ASSERT_GT(wire.size(), 100000u) << "the seed should give a stream worth feeding octet by octet";
  FpduDecoder decoder(options);
  auto result = decode_stream(decoder, wire, [] { return 1; });
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_TRUE(result.ulpdus == ulpdus);
  EXPECT_TRUE(decoder.at_boundary());
}

TEST_P(FpduRoundTrip, RandomChunkSizesGiveBackEveryUlpdu) {
  const FpduOptions options = GetParam().options;
  for (std::uint64_t seed = 100; seed < 110; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const auto ulpdus = random_ulpdus(rng, 8, allowed_max(options));
    FpduEncoder encoder(options);
    const Bytes wire = encode_stream(encoder, ulpdus);
    // Mostly small pieces (TCP segments, partial reads), sometimes large ones.
    std::uniform_int_distribution<std::size_t> small(1, 1500), large(1, 200000);
    std::bernoulli_distribution pick_large(0.2);
    FpduDecoder decoder(options);
    auto result =
        decode_stream(decoder, wire, [&] { return pick_large(rng) ? large(rng) : small(rng); });
    ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
    EXPECT_TRUE(result.ulpdus == ulpdus);
    EXPECT_EQ(decoder.fpdus_decoded(), ulpdus.size());
  }
}

TEST_P(FpduRoundTrip, WholeStreamInOneFeed) {
  const FpduOptions options = GetParam().options;
  std::mt19937_64 rng(7);
  const auto ulpdus = random_ulpdus(rng, 8, allowed_max(options));
  FpduEncoder encoder(options);
  const Bytes wire = encode_stream(encoder, ulpdus);
  FpduDecoder decoder(options);
  auto result = testing::decode_whole(decoder, wire);
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_TRUE(result.ulpdus == ulpdus);
}

// Without CRC a flipped payload bit is undetectable, so this runs on the CRC combos only.
class FpduCrcDamage : public ::testing::TestWithParam<Combo> {};

TEST_P(FpduCrcDamage, AnyFlippedBitIsCaught) {
  const FpduOptions options = GetParam().options;
  std::mt19937_64 rng(11);
  const auto ulpdus = random_ulpdus(rng, 2, 3000);
  FpduEncoder encoder(options);
  const Bytes wire = encode_stream(encoder, ulpdus);
  std::uniform_int_distribution<std::size_t> where(0, wire.size() - 1);
  for (int trial = 0; trial < 50; ++trial) {
    Bytes damaged = wire;
    const std::size_t at = where(rng);
    damaged[at] ^= static_cast<std::uint8_t>(1u << (trial % 8));
    FpduDecoder decoder(options);
    auto result = testing::decode_whole(decoder, damaged);
    // Caught means an error, or a stream left mid-FPDU (a longer length field waits for
    // octets that never come); never a damaged ULPDU handed out as good.
    EXPECT_TRUE(result.error.has_value() || !decoder.at_boundary())
        << "flip at octet " << at << " went unnoticed";
    for (std::size_t i = 0; i < result.ulpdus.size(); ++i) {
      EXPECT_TRUE(i < ulpdus.size() && result.ulpdus[i] == ulpdus[i])
          << "ULPDU " << i << " damaged";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptionCombos, FpduRoundTrip, ::testing::ValuesIn(kCombos),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(CrcCombos, FpduCrcDamage,
                         ::testing::Values(kCombos[0], kCombos[2]),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rdma_interop::wire
