// The credit parameters of the MPA private data: the documented octet layout, round trips,
// every decoding error, and the CreditConfig each side builds from both announcements.
#include "core/credit/credit_params.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

namespace rdma_interop::credit {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes encoded(const CreditParams& p) {
  const auto a = encode_credit_params(p);
  return Bytes(a.begin(), a.end());
}

CreditParams params(std::uint16_t window, std::uint16_t initial, std::uint8_t control,
                    std::uint32_t max_message) {
  CreditParams p;
  p.receive_window = window;
  p.initial_receives = initial;
  p.control_receives = control;
  p.max_message = max_message;
  return p;
}

ParamsError error_of(const Bytes& octets) {
  auto p = decode_credit_params(octets);
  EXPECT_FALSE(p) << "decoded " << *p;
  return p ? ParamsError::kShort : p.error();
}

TEST(CreditParams, OctetsAreMagicVersionControlWindowInitialReservedMaxMessage) {
  EXPECT_EQ(encoded(params(0x1234, 0x0102, 0x05, 0x00ABCDEF)),
            (Bytes{'R', 'I', 'C', 'R',         // magic 0x52494352
                   0x01, 0x05, 0x12, 0x34,     // version, control, window
                   0x01, 0x02, 0x00, 0x00,     // initial, reserved
                   0x00, 0xAB, 0xCD, 0xEF}));  // max message
}

TEST(CreditParams, DefaultsRoundTrip) {
  auto p = decode_credit_params(encoded(CreditParams{}));
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, CreditParams{});
}

TEST(CreditParams, ExtremeValuesRoundTrip) {
  for (const auto& want : {params(1, 0, 1, kCreditHeaderSize),
                           params(0xFFFF, 0xFFFF, 0xFF, 0xFFFFFFFF), params(64, 8, 3, 65536 + 4)}) {
    auto p = decode_credit_params(encoded(want));
    ASSERT_TRUE(p) << want;
    EXPECT_EQ(*p, want);
  }
}

TEST(CreditParams, LongerPrivateDataIsTheApplicationsAndIgnored) {
  Bytes pd = encoded(params(32, 16, 4, 1028));
  pd.insert(pd.end(), {'n', 'o', 'd', 'e', '2'});
  auto p = decode_credit_params(pd);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, params(32, 16, 4, 1028));
}

TEST(CreditParams, ReplyReserveIsOctetsTenAndElevenAndAnyValueDecodes) {
  CreditParams want = params(8, 8, 2, 100);
  want.reply_reserve = 3;
  Bytes pd = encoded(want);
  EXPECT_EQ(pd[10], 0x00);
  EXPECT_EQ(pd[11], 0x03);
  EXPECT_EQ(*decode_credit_params(pd), want);
  // Peers before the field sent zero there (it was Reserved): no reserve. A value beyond
  // the window decodes too; the receiver clamps it (config_for).
  pd[10] = 0xFF;
  auto p = decode_credit_params(pd);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->reply_reserve, 0xFF03);
  EXPECT_EQ(config_for(params(8, 8, 2, 100), *p, 10, 2).peer_reply_reserve, 7u);
}

TEST(CreditParams, ShortPrivateDataIsRefused) {
  const Bytes whole = encoded(CreditParams{});
  for (std::size_t n = 0; n < kCreditParamsSize; ++n) {
    EXPECT_EQ(error_of(Bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n))),
              ParamsError::kShort)
        << n << " octets";
  }
}

TEST(CreditParams, OtherMagicIsRefused) {
  for (std::size_t i = 0; i < 4; ++i) {
    Bytes pd = encoded(CreditParams{});
    pd[i] ^= 0x20;  // "rICR", "RiCR", ...
    EXPECT_EQ(error_of(pd), ParamsError::kBadMagic) << "octet " << i;
  }
  // An application's own 16 octets, e.g. text, are not credit parameters.
  const std::string text = "hello from node2";
  EXPECT_EQ(error_of(Bytes(text.begin(), text.end())), ParamsError::kBadMagic);
}

TEST(CreditParams, OtherVersionsAreRefused) {
  for (std::uint8_t v : {0, 2, 0xFF}) {
    Bytes pd = encoded(CreditParams{});
    pd[4] = v;
    EXPECT_EQ(error_of(pd), ParamsError::kBadParamsVersion) << unsigned{v};
  }
}

TEST(CreditParams, MagicIsCheckedBeforeVersion) {
  Bytes pd = encoded(CreditParams{});
  pd[0] = 0;
  pd[4] = 9;
  EXPECT_EQ(error_of(pd), ParamsError::kBadMagic);
}

TEST(CreditParams, OutOfRangeValuesAreRefused) {
  EXPECT_EQ(error_of(encoded(params(16, 16, 0, 100))), ParamsError::kBadValue);  // no control
  EXPECT_EQ(error_of(encoded(params(0, 0, 2, 100))), ParamsError::kBadValue);    // no window
  EXPECT_EQ(error_of(encoded(params(16, 17, 2, 100))), ParamsError::kBadValue);  // initial > window
  EXPECT_EQ(error_of(encoded(params(16, 16, 2, kCreditHeaderSize - 1))), ParamsError::kBadValue);
  EXPECT_EQ(error_of(encoded(params(16, 16, 2, 0))), ParamsError::kBadValue);
}

TEST(CreditParams, ErrorsHaveStableNamesAndSentences) {
  const std::vector<std::pair<ParamsError, std::string_view>> names = {
      {ParamsError::kShort, "short"},
      {ParamsError::kBadMagic, "bad_magic"},
      {ParamsError::kBadParamsVersion, "bad_params_version"},
      {ParamsError::kBadValue, "bad_value"},
  };
  for (const auto& [e, name] : names) {
    EXPECT_EQ(error_name(e), name);
    EXPECT_GT(describe(e).size(), 20u) << name;
    EXPECT_NE(describe(e),
              describe(e == ParamsError::kShort ? ParamsError::kBadValue : ParamsError::kShort));
  }
  EXPECT_NE(describe(ParamsError::kShort).find("does not announce credits"),
            std::string_view::npos);
}

TEST(CreditParams, PrintsItself) {
  std::ostringstream os;
  os << params(32, 8, 3, 1028);
  EXPECT_EQ(os.str(), "credit_params{window=32 initial=8 control=3 reply_reserve=0 max_message=1028}");
}

TEST(CreditParams, ConfigTakesOurReceivesAndThePeersAsPeer) {
  const auto ours = params(32, 8, 3, 1028);
  const auto peer = params(100, 50, 7, 65540);
  const CreditConfig c = config_for(ours, peer, 40, 4);
  EXPECT_EQ(c.receive_window, 32u);
  EXPECT_EQ(c.initial_receives, 8u);
  EXPECT_EQ(c.control_receives, 3u);
  EXPECT_EQ(c.peer_receive_window, 100u);
  EXPECT_EQ(c.peer_initial_receives, 50u);
  EXPECT_EQ(c.peer_control_receives, 7u);
  EXPECT_EQ(c.send_queue_depth, 40u);
  EXPECT_EQ(c.control_send_slots, 4u);
  EXPECT_EQ(c.grant_batch, CreditConfig{}.grant_batch);
  EXPECT_EQ(c.low_water, CreditConfig::kDefaultLowWater);
  EXPECT_TRUE(validate(c));
}

TEST(CreditParams, ConfigOfEveryDecodableParamsValidates) {
  for (const auto& ours : {CreditParams{}, params(1, 0, 1, 4), params(0xFFFF, 0xFFFF, 0xFF, 8)}) {
    for (const auto& peer : {CreditParams{}, params(1, 1, 1, 4), params(0xFFFF, 0, 0xFF, 8)}) {
      auto a = decode_credit_params(encoded(ours));
      auto b = decode_credit_params(encoded(peer));
      ASSERT_TRUE(a && b);
      EXPECT_TRUE(validate(config_for(*a, *b, 2, 1))) << ours << " / " << peer;
      EXPECT_TRUE(validate(config_for(*a, *b, 18, 2))) << ours << " / " << peer;
    }
  }
}

// Both ends build mirror-image configs: each one's send credits are the other's receives.
TEST(CreditParams, TwoSidesConfigsMirrorEachOtherAndStartInStep) {
  const auto a_params = params(8, 4, 2, 1028);
  const auto b_params = params(16, 16, 3, 4100);
  CreditWindow a(config_for(a_params, b_params, 18, 2));
  CreditWindow b(config_for(b_params, a_params, 18, 2));
  EXPECT_EQ(a.credits(), 16u);  // b's initial receives
  EXPECT_EQ(b.credits(), 4u);   // a's initial receives
  EXPECT_EQ(a.control_credits(), 3u);
  EXPECT_EQ(b.control_credits(), 2u);
  // Every credit b has lands on a receive a has posted: four messages go, the fifth waits.
  for (int i = 0; i < 4; ++i) {
    auto h = b.send_message();
    ASSERT_TRUE(h);
    const auto header = encode_credit_header(*h);
    ASSERT_TRUE(a.on_receive(header)) << i;
  }
  auto fifth = b.send_message();
  ASSERT_FALSE(fifth);
  EXPECT_EQ(fifth.error(), CreditError::kNoCredit);
}

// The configuration a peer cannot make invalid: the queue split is ours, and a bad one shows.
TEST(CreditParams, BadLocalQueueSplitIsRefusedByValidate) {
  auto c = config_for(CreditParams{}, CreditParams{}, 2, 2);
  auto v = validate(c);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), CreditError::kBadConfig);
}

}  // namespace
}  // namespace rdma_interop::credit
