// fuzz_common.h - small helpers shared by the libFuzzer harnesses.
//
// Each harness reads a few leading octets as its configuration (limits, options, how to cut
// the stream) through ByteReader, so an input file fully determines one run and the seed
// corpus (make_corpus.py) can write inputs by hand. A broken invariant calls fuzz_fail(),
// which aborts: libFuzzer then saves the input as a crash reproducer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace rdma_interop::fuzz {

[[noreturn]] inline void fuzz_fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

inline void fuzz_check(bool ok, const char* what) {
  if (!ok) fuzz_fail(what);
}

// Takes octets from the front of the input; past the end it yields zeros, so every input is
// a valid configuration and short inputs still run.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::uint8_t u8() {
    if (bytes_.empty()) return 0;
    const std::uint8_t v = bytes_[0];
    bytes_ = bytes_.subspan(1);
    return v;
  }
  std::uint16_t u16() {  // big-endian, like the wire
    const std::uint16_t hi = u8();
    return static_cast<std::uint16_t>((hi << 8) | u8());
  }
  // Up to n octets (fewer at the end of the input).
  std::span<const std::uint8_t> take(std::size_t n) {
    if (n > bytes_.size()) n = bytes_.size();
    auto out = bytes_.first(n);
    bytes_ = bytes_.subspan(n);
    return out;
  }
  std::span<const std::uint8_t> rest() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }

 private:
  std::span<const std::uint8_t> bytes_;
};

// A deterministic generator for the choices the input does not spell out octet by octet
// (piece sizes): splitmix64, seeded from the input.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [lo, hi] for choosing piece sizes.
  std::size_t in_range(std::size_t lo, std::size_t hi) {
    return lo + static_cast<std::size_t>(next() % (hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

}  // namespace rdma_interop::fuzz
