// CRC32c as MPA uses it (RFC 5044 s4.1): the iSCSI polynomial, sent least-significant octet
// first. Check value and the RFC 3720 appendix B.4 examples, whose octets are listed in wire
// order.
#include "core/wire/crc32c.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>

#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::ascii;
using testing::Bytes;
using testing::hex;

TEST(Crc32c, CheckValueOf123456789) {
  EXPECT_EQ(crc32c(ascii("123456789")), 0xe3069283u);
}

TEST(Crc32c, EmptyInputIsZero) {
  EXPECT_EQ(crc32c({}), 0u);
}

struct Rfc3720Example {
  const char* name;
  Bytes data;
  std::uint32_t finished;
  const char* wire;
};

TEST(Crc32c, Rfc3720AppendixExamplesMatchValueAndWireOrder) {
  Bytes increasing(32), decreasing(32);
  std::iota(increasing.begin(), increasing.end(), 0);
  for (int i = 0; i < 32; ++i) decreasing[i] = static_cast<std::uint8_t>(31 - i);
  const Rfc3720Example examples[] = {
      {"32 zero octets", Bytes(32, 0x00), 0x8a9136aa, "aa 36 91 8a"},
      {"32 0xff octets", Bytes(32, 0xff), 0x62a8ab43, "43 ab a8 62"},
      {"32 increasing octets", increasing, 0x46dd794e, "4e 79 dd 46"},
      {"32 decreasing octets", decreasing, 0x113fdb5c, "5c db 3f 11"},
  };
  for (const auto& ex : examples) {
    SCOPED_TRACE(ex.name);
    EXPECT_EQ(crc32c(ex.data), ex.finished);
    const auto wire = crc32c_wire_bytes(ex.finished);
    EXPECT_EQ(Bytes(wire.begin(), wire.end()), hex(ex.wire));
    EXPECT_EQ(crc32c_from_wire(wire.data()), ex.finished);
  }
}

TEST(Crc32c, RunningUpdateInPiecesEqualsOneShot) {
  const Bytes data = testing::pattern(1000, 7);
  const std::uint32_t one_shot = crc32c(data);
  for (std::size_t split : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{512},
                            std::size_t{999}, std::size_t{1000}}) {
    SCOPED_TRACE(split);
    const std::span<const std::uint8_t> all(data);
    std::uint32_t running = crc32c_update(kCrc32cInit, all.first(split));
    running = crc32c_update(running, all.subspan(split));
    EXPECT_EQ(crc32c_finish(running), one_shot);
  }
}

TEST(Crc32c, OneByteAtATimeEqualsOneShot) {
  const Bytes data = ascii("123456789");
  std::uint32_t running = kCrc32cInit;
  for (std::uint8_t b : data)
    running = crc32c_update(running, std::span<const std::uint8_t>(&b, 1));
  EXPECT_EQ(crc32c_finish(running), 0xe3069283u);
}

TEST(Crc32c, WireBytesAreLeastSignificantOctetFirst) {
  const auto wire = crc32c_wire_bytes(0x11223344u);
  EXPECT_EQ(Bytes(wire.begin(), wire.end()), hex("44 33 22 11"));
  const Bytes check = hex("83 92 06 e3");
  EXPECT_EQ(crc32c_from_wire(check.data()), 0xe3069283u);
}

}  // namespace
}  // namespace rdma_interop::wire
