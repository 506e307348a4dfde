// wire_test_util.h - helpers shared by the codec tests: hex literals and byte-stream builders.
//
// Expected bytes in these tests are spelled out by hand from the RFCs, never produced by the
// code under test. hex("4d 50 41") reads them; to_hex() prints them when a test fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rdma_interop::wire::testing {

using Bytes = std::vector<std::uint8_t>;

// "4d 50 41 20" -> {0x4d, 0x50, 0x41, 0x20}; whitespace and '|' are ignored.
inline Bytes hex(std::string_view text) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Bytes out;
  int high = -1;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '|') continue;
    int n = nibble(c);
    if (n < 0) throw std::invalid_argument("bad hex digit in test vector");
    if (high < 0) {
      high = n;
    } else {
      out.push_back(static_cast<std::uint8_t>(high << 4 | n));
      high = -1;
    }
  }
  if (high >= 0) throw std::invalid_argument("odd number of hex digits in test vector");
  return out;
}

inline std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i != 0) out += (i % 32 == 0) ? '\n' : ' ';
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xf];
  }
  return out;
}

inline Bytes ascii(std::string_view text) {
  return Bytes(text.begin(), text.end());
}

// Payload filler whose every octet depends on its position: byte i is (seed + i) mod 256.
inline Bytes pattern(std::size_t length, std::uint8_t seed = 0) {
  Bytes out(length);
  for (std::size_t i = 0; i < length; ++i) out[i] = static_cast<std::uint8_t>(seed + i);
  return out;
}

// Concatenates pieces into one expected byte stream.
class StreamBuilder {
 public:
  StreamBuilder& hex(std::string_view text) { return bytes(testing::hex(text)); }
  StreamBuilder& bytes(std::span<const std::uint8_t> b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  // Octets [from, from + length) of `source`.
  StreamBuilder& slice(std::span<const std::uint8_t> source, std::size_t from, std::size_t length) {
    return bytes(source.subspan(from, length));
  }
  std::size_t size() const { return out_.size(); }
  const Bytes& get() const { return out_; }

 private:
  Bytes out_;
};

}  // namespace rdma_interop::wire::testing
