#include "tools/rdma-probe/test_pattern.h"

#include <random>

namespace rdma_interop::probe {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): one add and a mixing function per output, so the
// stream is cheap to regenerate and has no short cycles for any seed.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

void fill_pattern(std::span<std::uint8_t> buffer, std::uint64_t seed) {
  SplitMix64 stream(seed);
  for (auto& b : buffer) b = static_cast<std::uint8_t>(stream.next());
}

std::optional<std::size_t> find_pattern_mismatch(std::span<const std::uint8_t> buffer,
                                                 std::uint64_t seed) {
  SplitMix64 stream(seed);
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] != static_cast<std::uint8_t>(stream.next())) return i;
  }
  return std::nullopt;
}

std::uint64_t random_seed() {
  std::random_device rd;
  std::uint64_t s = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  return s & ((std::uint64_t{1} << 53) - 1);
}

}  // namespace rdma_interop::probe
