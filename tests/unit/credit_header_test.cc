// The credit header: the documented octet layout, round trips, and every decoding error.
#include "core/credit/credit_header.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

namespace rdma_interop::credit {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes encoded(const CreditHeader& h) {
  const auto a = encode_credit_header(h);
  return Bytes(a.begin(), a.end());
}

TEST(CreditHeader, DataHeaderOctetsAreVersionFlagsReturnGrant) {
  EXPECT_EQ(encoded({false, 0x05, 0x1234}), (Bytes{0x10, 0x05, 0x12, 0x34}));
  EXPECT_EQ(encoded({}), (Bytes{0x10, 0x00, 0x00, 0x00}));
}

TEST(CreditHeader, ControlFlagIsTheLowBitOfOctetZero) {
  EXPECT_EQ(encoded({true, 0xFF, 0xFFFF}), (Bytes{0x11, 0xFF, 0xFF, 0xFF}));
}

TEST(CreditHeader, RoundTripsWithPayloadAfterTheHeader) {
  Bytes msg = encoded({false, 2, 300});
  msg.insert(msg.end(), {'h', 'i'});
  auto h = decode_credit_header(msg);
  ASSERT_TRUE(h);
  EXPECT_EQ(*h, (CreditHeader{false, 2, 300}));
  auto c = decode_credit_header(encoded({true, 1, 7}));
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (CreditHeader{true, 1, 7}));
}

TEST(CreditHeader, ShortMessageIsRefused) {
  for (std::size_t n = 0; n < kCreditHeaderSize; ++n) {
    const Bytes msg(n, 0x10);
    auto h = decode_credit_header(msg);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), CreditError::kShortHeader);
  }
}

TEST(CreditHeader, OtherVersionsAreRefused) {
  for (unsigned v : {0u, 2u, 15u}) {
    const Bytes msg{static_cast<std::uint8_t>(v << 4), 0, 0, 1};
    auto h = decode_credit_header(msg);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), CreditError::kBadVersion);
  }
}

TEST(CreditHeader, ReservedBitsAreRefused) {
  for (std::uint8_t bit : {0x02, 0x04, 0x08}) {
    const Bytes msg{static_cast<std::uint8_t>(0x10 | bit), 0, 0, 1};
    auto h = decode_credit_header(msg);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), CreditError::kReservedBits);
  }
}

TEST(CreditHeader, ControlUpdateWithPayloadIsRefused) {
  Bytes msg = encoded({true, 0, 1});
  msg.push_back(0);
  auto h = decode_credit_header(msg);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error(), CreditError::kControlWithPayload);
  EXPECT_TRUE(terminate_needed(h.error()));
}

TEST(CreditHeader, PrintsItself) {
  std::ostringstream os;
  os << CreditHeader{true, 1, 4};
  EXPECT_EQ(os.str(), "credit_update{grant=4 control_return=1}");
}

TEST(CreditError, EveryCodeHasANameASentenceAndOneFamily) {
  for (int i = 0; i <= static_cast<int>(CreditError::kBadConfig); ++i) {
    const auto e = static_cast<CreditError>(i);
    EXPECT_NE(error_name(e), "unknown") << i;
    EXPECT_FALSE(describe(e).empty()) << i;
    EXPECT_FALSE(is_try_again(e) && terminate_needed(e)) << error_name(e);
  }
  EXPECT_EQ(error_name(CreditError::kNoCredit), "no_credit");
  EXPECT_EQ(error_name(CreditError::kPeerOverrun), "peer_overrun");
  EXPECT_EQ(error_name(CreditError::kBadConfig), "bad_config");
  EXPECT_TRUE(is_try_again(CreditError::kNoCredit));
  EXPECT_TRUE(is_try_again(CreditError::kCompletionQueueFull));
  EXPECT_TRUE(terminate_needed(CreditError::kPeerOverrun));
  EXPECT_FALSE(terminate_needed(CreditError::kNotPosted));
}

}  // namespace
}  // namespace rdma_interop::credit
