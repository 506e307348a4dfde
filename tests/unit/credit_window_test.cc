// The credit window, scenario by scenario: credits from the peer's posted receives, grants on
// data headers and on standalone updates, reserved control slots, EAGAIN without side
// effects, and the protocol errors a misbehaving peer gets.
#include "core/credit/credit_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

namespace rdma_interop::credit {
namespace {

CreditConfig small(std::uint32_t window = 4) {
  CreditConfig c;
  c.receive_window = c.peer_receive_window = window;
  c.initial_receives = c.peer_initial_receives = window;
  c.control_receives = c.peer_control_receives = 1;
  c.send_queue_depth = window + 1;
  c.control_send_slots = 1;
  c.grant_batch = 2;
  c.low_water = 0;
  return c;
}

std::vector<std::uint8_t> wire(const CreditHeader& h, std::size_t payload = 0) {
  const auto a = encode_credit_header(h);
  // Sized once (growing a copy of `a` trips GCC 12's -Warray-bounds in a Release build).
  std::vector<std::uint8_t> out(a.size() + payload, 0xAB);
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

#define EXPECT_ERROR(expr, code)              \
  do {                                        \
    auto r_ = (expr);                         \
    ASSERT_FALSE(r_) << #expr;                \
    EXPECT_EQ(r_.error(), CreditError::code); \
  } while (0)

#define EXPECT_SOUND(w) EXPECT_TRUE((w).broken_invariant().empty()) << (w).broken_invariant()

TEST(CreditWindow, ValidateRefusesConfigsThatCannotWork) {
  EXPECT_TRUE(validate(small()));
  auto c = small();
  c.receive_window = 0;
  EXPECT_ERROR(validate(c), kBadConfig);
  c = small();
  c.initial_receives = 5;
  EXPECT_ERROR(validate(c), kBadConfig);
  c = small();
  c.peer_receive_window = 0x10000;
  EXPECT_ERROR(validate(c), kBadConfig);
  c = small();
  c.control_receives = 256;
  EXPECT_ERROR(validate(c), kBadConfig);
  c = small();
  c.control_send_slots = c.send_queue_depth;
  EXPECT_ERROR(validate(c), kBadConfig);
  c = small();
  c.control_send_slots = 0;
  EXPECT_ERROR(validate(c), kBadConfig);
  EXPECT_TRUE(validate(CreditConfig{}));  // the defaults work
}

TEST(CreditWindow, StartsWithTheReceivesThePeerPostedAtSetup) {
  auto c = small(8);
  c.peer_initial_receives = 3;
  CreditWindow w(c);
  EXPECT_EQ(w.credits(), 3u);
  EXPECT_EQ(w.control_credits(), 1u);
  EXPECT_EQ(w.counters().granted, 8u);
  EXPECT_EQ(w.counters().posted, 8u);
  EXPECT_SOUND(w);
}

TEST(CreditWindow, SendWithoutCreditIsTryAgainAndChangesNothing) {
  auto c = small(2);
  c.send_queue_depth = 8;
  CreditWindow w(c);
  ASSERT_TRUE(w.send_message());
  ASSERT_TRUE(w.send_message());
  EXPECT_FALSE(w.can_send());
  auto before = w.counters();
  auto r = w.send_message();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), CreditError::kNoCredit);
  EXPECT_TRUE(is_try_again(r.error()));
  before.stalls_no_credit++;
  EXPECT_EQ(w.counters(), before);
  EXPECT_EQ(w.credits(), 0u);
  EXPECT_SOUND(w);
}

TEST(CreditWindow, GrantOnADataHeaderAddsCredits) {
  CreditWindow a(small()), b(small());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a.send_message());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a.on_send_completed(SendKind::kData));
  EXPECT_EQ(a.credits(), 0u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b.on_receive_header({}));
  ASSERT_TRUE(b.on_receive_posted());
  ASSERT_TRUE(b.on_receive_posted());
  auto h = b.send_message();  // B's reply carries both grants
  ASSERT_TRUE(h);
  EXPECT_EQ(*h, (CreditHeader{false, 0, 2}));
  EXPECT_EQ(b.counters().pending_grant, 0u);
  auto m = a.on_receive(wire(*h, 10));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, SendKind::kData);
  EXPECT_EQ(m->payload.size(), 10u);
  EXPECT_EQ(a.credits(), 2u);
  EXPECT_EQ(a.counters().credits_granted_total, 6u);
  EXPECT_SOUND(a);
  EXPECT_SOUND(b);
}

TEST(CreditWindow, StandaloneUpdateWhenTheBatchIsReachedOrThePeerRunsDry) {
  auto c = small(8);
  c.grant_batch = 3;
  c.low_water = 1;
  CreditWindow b(c);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(b.on_receive_header({}));  // the peer holds 2
  ASSERT_TRUE(b.on_receive_posted());
  ASSERT_TRUE(b.on_receive_posted());
  EXPECT_FALSE(b.wants_credit_update());  // 2 pending < batch 3, peer above low water
  ASSERT_TRUE(b.on_receive_posted());
  EXPECT_TRUE(b.wants_credit_update());  // batch reached
  auto h = b.send_credit_update();
  ASSERT_TRUE(h);
  EXPECT_EQ(*h, (CreditHeader{true, 0, 3}));
  EXPECT_FALSE(b.wants_credit_update());
  EXPECT_ERROR(b.send_credit_update(), kNothingToGrant);

  CreditWindow b2(c);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(b2.on_receive_header({}));  // the peer holds 1
  ASSERT_TRUE(b2.on_receive_posted());
  EXPECT_TRUE(b2.wants_credit_update());  // 1 pending, peer at low water
}

TEST(CreditWindow, DataNeverTakesTheControlSlotsSoAGrantIsNeverStuckBehindData) {
  auto c = small(8);
  c.send_queue_depth = 4;
  c.control_send_slots = 1;
  CreditWindow w(c);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.send_message());
  EXPECT_ERROR(w.send_message(), kNoSendSlot);  // credits left, data slots are not
  EXPECT_EQ(w.counters().stalls_no_slot, 1u);
  ASSERT_TRUE(w.on_receive_header({}));
  ASSERT_TRUE(w.on_receive_posted());
  auto h = w.send_credit_update();  // the reserved slot
  ASSERT_TRUE(h);
  EXPECT_EQ(h->grant, 1u);
  EXPECT_EQ(w.counters().control_slots_in_use, 1u);
  ASSERT_TRUE(w.on_send_completed(SendKind::kData));
  EXPECT_TRUE(w.send_message());
  EXPECT_SOUND(w);
}

TEST(CreditWindow, ControlUpdateMayUseAFreeDataSlotButNotAFullQueue) {
  auto c = small(8);
  c.send_queue_depth = 3;
  c.control_send_slots = 1;
  c.control_receives = c.peer_control_receives = 4;
  CreditWindow w(c);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(w.on_receive_header({}));
    ASSERT_TRUE(w.on_receive_posted());
    ASSERT_TRUE(w.send_credit_update());
  }
  ASSERT_TRUE(w.on_receive_header({}));
  ASSERT_TRUE(w.on_receive_posted());
  EXPECT_ERROR(w.send_credit_update(), kNoSendSlot);
  EXPECT_ERROR(w.send_message(), kNoSendSlot);
  ASSERT_TRUE(w.on_send_completed(SendKind::kControl));
  EXPECT_TRUE(w.send_credit_update());
  EXPECT_SOUND(w);
}

TEST(CreditWindow, ControlCreditsComeBackOnTheNextHeaderOfThePeer) {
  CreditWindow a(small()), b(small());
  auto first = b.send_message();
  ASSERT_TRUE(first);
  ASSERT_TRUE(a.on_receive_header(*first));
  ASSERT_TRUE(a.on_receive_posted());
  auto u = a.send_credit_update();
  ASSERT_TRUE(u);
  EXPECT_EQ(a.control_credits(), 0u);
  auto second = b.send_message();
  ASSERT_TRUE(second);
  ASSERT_TRUE(a.on_receive_header(*second));
  ASSERT_TRUE(a.on_receive_posted());
  EXPECT_ERROR(a.send_credit_update(), kNoControlCredit);
  EXPECT_EQ(a.counters().update_stalls, 1u);

  auto m = b.on_receive(wire(*u));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, SendKind::kControl);
  EXPECT_TRUE(m->payload.empty());
  EXPECT_EQ(b.counters().control_posted, 0u);
  ASSERT_TRUE(b.on_control_receive_posted());
  // The return alone never asks for an update (no ping-pong)...
  EXPECT_FALSE(b.wants_credit_update());
  EXPECT_ERROR(b.send_credit_update(), kNothingToGrant);
  // ...it rides on B's next message.
  auto d = b.send_message();
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, (CreditHeader{false, 1, 0}));
  ASSERT_TRUE(a.on_receive_header(*d));
  EXPECT_EQ(a.control_credits(), 1u);
  EXPECT_TRUE(a.send_credit_update());
  EXPECT_SOUND(a);
  EXPECT_SOUND(b);
}

TEST(CreditWindow, PeerSendingWithoutCreditIsTheNoBufferError) {
  CreditWindow b(small(2));
  ASSERT_TRUE(b.on_receive_header({}));
  ASSERT_TRUE(b.on_receive_header({}));
  ASSERT_TRUE(b.on_receive_posted());  // posted but not yet granted: still not the peer's
  const auto before = b.counters();
  auto r = b.on_receive(wire({}, 8));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), CreditError::kPeerOverrun);
  EXPECT_TRUE(terminate_needed(r.error()));
  EXPECT_EQ(b.counters(), before);
}

TEST(CreditWindow, UpdateWithoutAControlReceiveIsRefused) {
  CreditWindow b(small());
  ASSERT_TRUE(b.on_receive_header({true, 0, 0}));
  ASSERT_TRUE(b.on_control_receive_posted());  // re-posted, return not yet sent
  EXPECT_ERROR(b.on_receive_header({true, 0, 0}), kControlOverrun);
}

TEST(CreditWindow, GrantsAndReturnsBeyondWhatThePeerCouldHaveAreRefused) {
  CreditWindow a(small(4));
  EXPECT_ERROR(a.on_receive_header({false, 0, 1}), kGrantOverflow);  // already holds 4
  ASSERT_TRUE(a.send_message());
  EXPECT_TRUE(a.on_receive_header({false, 0, 1}));
  EXPECT_ERROR(a.on_receive_header({false, 1, 0}), kReturnOverflow);  // no update sent
  EXPECT_ERROR(a.on_receive(std::vector<std::uint8_t>{0x20, 0, 0, 0}), kBadVersion);
  EXPECT_SOUND(a);
}

TEST(CreditWindow, CallerBugsAreRefusedWithoutHarm) {
  CreditWindow w(small(2));
  EXPECT_ERROR(w.on_receive_posted(), kReceiveWindowFull);
  EXPECT_ERROR(w.on_control_receive_posted(), kControlReceivesFull);
  EXPECT_ERROR(w.on_send_completed(SendKind::kData), kNotPosted);
  EXPECT_ERROR(w.on_send_completed(SendKind::kControl), kNotPosted);
  EXPECT_SOUND(w);
}

TEST(CreditWindow, InvalidConfigIsClampedToAWorkingOne) {
  CreditConfig c;
  c.receive_window = 0;
  c.send_queue_depth = 1;
  c.control_send_slots = 5;
  c.control_receives = 0;
  CreditWindow w(c);
  EXPECT_TRUE(validate(w.config()));
  EXPECT_SOUND(w);
}

// One direction only, a window of 2 and a batch of 1: every credit comes back on a standalone
// update, and 10000 messages get through without a stall that never ends.
TEST(CreditWindow, OneWayTrafficLivesOnStandaloneUpdates) {
  auto c = small(2);
  c.grant_batch = 1;
  CreditWindow a(c), b(c);
  std::uint64_t delivered = 0;
  for (int step = 0; delivered < 10000; ++step) {
    ASSERT_LT(step, 100000) << "stalled";
    if (auto h = a.send_message()) {
      ASSERT_TRUE(a.on_send_completed(SendKind::kData));
      ASSERT_TRUE(b.on_receive(wire(*h, 1)));
      ++delivered;
      ASSERT_TRUE(b.on_receive_posted());
    }
    while (b.wants_credit_update()) {
      auto u = b.send_credit_update();
      if (!u) break;
      ASSERT_TRUE(b.on_send_completed(SendKind::kControl));
      ASSERT_TRUE(a.on_receive(wire(*u)));
      ASSERT_TRUE(a.on_control_receive_posted());
    }
    EXPECT_SOUND(a);
    EXPECT_SOUND(b);
  }
  EXPECT_EQ(b.counters().received, 10000u);
}

TEST(CreditWindow, KindNames) {
  EXPECT_EQ(kind_name(SendKind::kData), "data");
  EXPECT_EQ(kind_name(SendKind::kControl), "control");
}

}  // namespace
}  // namespace rdma_interop::credit
