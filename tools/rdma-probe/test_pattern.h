// test_pattern.h - the bytes the interop exchange writes, reads and checks.
//
// pattern(seed)[i] is the low byte of the i-th output (from 0) of a splitmix64 stream seeded
// with `seed`; in Python, for another implementation of the exchange:
//
//   state = seed
//   for each byte: state = (state + 0x9e3779b97f4a7c15) % 2**64
//                  z = state; z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) % 2**64
//                  z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) % 2**64
//                  byte = (z ^ (z >> 31)) & 0xff Both rdma-probe roles (and anything else that
//                  speaks the exchange) derive the same
// bytes from the seed carried in the exchange's messages, so a single flipped, lost or
// misplaced byte is found without shipping the expected data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace rdma_interop::probe {

void fill_pattern(std::span<std::uint8_t> buffer, std::uint64_t seed);

// The offset of the first byte that differs from pattern(seed); nullopt when all match.
std::optional<std::size_t> find_pattern_mismatch(std::span<const std::uint8_t> buffer,
                                                 std::uint64_t seed);

// A fresh seed for one run, below 2^53 so every JSON reader keeps it exact.
std::uint64_t random_seed();

}  // namespace rdma_interop::probe
