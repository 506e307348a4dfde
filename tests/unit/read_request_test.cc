// RDMA Read Request body, RFC 5040 s4.4: sink STag(4) sink TO(8) size(4) source STag(4)
// source TO(8), all big-endian, 28 octets.
#include "core/wire/read_request.h"

#include <gtest/gtest.h>

#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::Bytes;
using testing::hex;
using testing::to_hex;

TEST(ReadRequest, EncodesFieldsInRfcOrderBigEndian) {
  const ReadRequest r{.sink_stag = 0x0a0b0c0d,
                      .sink_tagged_offset = 0x1122334455667788,
                      .size = 0x1000,
                      .source_stag = 0xdeadbeef,
                      .source_tagged_offset = 0x40};
  const Bytes want = hex("0a0b0c0d | 1122334455667788 | 00001000 | deadbeef | 0000000000000040");
  const auto got = encode_read_request(r);
  EXPECT_EQ(to_hex(got), to_hex(want));
  auto decoded = decode_read_request(want);
  ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
  EXPECT_EQ(*decoded, r);
}

TEST(ReadRequest, ZeroLengthReadLikeTheRfc6581ReadRtr) {
  const ReadRequest rtr{};
  EXPECT_EQ(to_hex(encode_read_request(rtr)), to_hex(Bytes(28, 0)));
  auto decoded = decode_read_request(Bytes(28, 0));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, rtr);
}

TEST(ReadRequest, AllOnesSurviveTheRoundTrip) {
  const ReadRequest r{.sink_stag = 0xffffffff,
                      .sink_tagged_offset = ~0ull,
                      .size = 0xffffffff,
                      .source_stag = 0xffffffff,
                      .source_tagged_offset = ~0ull};
  EXPECT_EQ(to_hex(encode_read_request(r)), to_hex(Bytes(28, 0xff)));
  auto decoded = decode_read_request(Bytes(28, 0xff));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, r);
}

TEST(ReadRequest, BodyOtherThan28OctetsIsRejected) {
  for (std::size_t n :
       {std::size_t{0}, std::size_t{4}, std::size_t{27}, std::size_t{29}, std::size_t{56}}) {
    SCOPED_TRACE(n);
    auto decoded = decode_read_request(Bytes(n, 0));
    ASSERT_FALSE(decoded.has_value());
    EXPECT_EQ(decoded.error(), WireError::kRdmapReadRequestBadLength);
  }
}

}  // namespace
}  // namespace rdma_interop::wire
