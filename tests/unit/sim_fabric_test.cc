// The simulated IB fabric's transport behaviours, each as IB specifies it: retries, RNR,
// access errors at both ends, C9-88, APM, partitions, XRC delivery through an SRQ.
#include "core/sim/fabric.h"

#include <gtest/gtest.h>

#include <vector>

namespace rdma_interop::sim {
namespace {

using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;
using std::chrono::milliseconds;

class SimFabricTest : public ::testing::Test {
 protected:
  SimFabricTest() {
    a_ = fabric_.add_node();
    b_ = fabric_.add_node();
    fabric_.link(a_, b_, 2);
    fabric_.on_completion([this](const SimCompletion& c) { wcs_.push_back(c); });
    fabric_.on_async([this](const AsyncEvent& e) { events_.push_back(e); });
    pa_ = fabric_.spawn(a_);
    pb_ = fabric_.spawn(b_);
    qa_ = fabric_.create_rc_qp(pa_, attrs_);
    qb_ = fabric_.create_rc_qp(pb_, attrs_);
  }

  void connect() { ASSERT_TRUE(fabric_.connect(qa_, qb_)); }
  void run_for(milliseconds d) { fabric_.clock().run_until(fabric_.now() + d); }
  std::vector<SimCompletion> of(Qpn qpn) const {
    std::vector<SimCompletion> out;
    for (const auto& c : wcs_) {
      if (c.qpn == qpn) out.push_back(c);
    }
    return out;
  }
  bool saw(AsyncType type, Qpn qpn) const {
    for (const auto& e : events_) {
      if (e.type == type && e.qpn == qpn) return true;
    }
    return false;
  }

  RcAttrs attrs_{.retry_cnt = 3,
                 .rnr_retry = 2,
                 .ack_timeout = milliseconds(10),
                 .min_rnr_timer = milliseconds(2)};
  Fabric fabric_;
  NodeId a_ = 0, b_ = 0;
  Pid pa_ = 0, pb_ = 0;
  Qpn qa_ = 0, qb_ = 0;
  std::vector<SimCompletion> wcs_;
  std::vector<AsyncEvent> events_;
};

TEST_F(SimFabricTest, SendMeetsAPostedReceive) {
  connect();
  ASSERT_FALSE(fabric_.post_recv(qb_, 5, 100));
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kSend, 64, 0, {}}));
  run_for(milliseconds(1));
  ASSERT_EQ(of(qb_).size(), 1u);
  EXPECT_EQ(of(qb_)[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(of(qb_)[0].byte_len, 64u);
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kSuccess);
}

TEST_F(SimFabricTest, DeadPeerEndsInRetryExceededAfterRetryCountTimeouts) {
  connect();
  fabric_.kill(pb_);
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 0, 0, {}}));
  run_for(milliseconds(39));
  EXPECT_TRUE(of(qa_).empty());  // 1 + 3 retries of 10 ms each: not before 40 ms
  run_for(milliseconds(2));
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(fabric_.qp_state(qa_), QpState::kError);
}

TEST_F(SimFabricTest, RnrNakIsRetriedUntilAReceiveIsPosted) {
  connect();
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kSend, 8, 0, {}}));
  run_for(milliseconds(3));
  EXPECT_TRUE(of(qa_).empty());
  ASSERT_FALSE(fabric_.post_recv(qb_, 9, 100));
  run_for(milliseconds(5));
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kSuccess);
}

TEST_F(SimFabricTest, RnrRetryExceededMovesTheRequesterToError) {
  connect();
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kSend, 8, 0, {}}));
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{2, WrOpcode::kSend, 8, 0, {}}));
  run_for(milliseconds(50));
  ASSERT_EQ(of(qa_).size(), 2u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(of(qa_)[1].status, WcStatus::kFlushed);
  EXPECT_EQ(fabric_.qp_state(qa_), QpState::kError);
  EXPECT_EQ(fabric_.qp_state(qb_), QpState::kRts);  // RNR is not the responder's error
}

TEST_F(SimFabricTest, InvalidRkeyIsAClassCErrorAtBothEnds) {
  connect();
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 1, 0xDEAD, {}}));
  run_for(milliseconds(1));
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(fabric_.qp_state(qa_), QpState::kError);
  EXPECT_EQ(fabric_.qp_state(qb_), QpState::kError);
  EXPECT_TRUE(saw(AsyncType::kQpFatal, qb_));
  // Recycling the pair brings both back.
  ASSERT_TRUE(fabric_.reconnect(qa_, qb_));
  EXPECT_EQ(fabric_.qp_state(qb_), QpState::kRts);
}

TEST_F(SimFabricTest, ZeroLengthReadIsNotRkeyChecked) {
  connect();
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 0, 0xDEAD, {}}));
  run_for(milliseconds(1));
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(fabric_.qp_state(qb_), QpState::kRts);
}

TEST_F(SimFabricTest, ReadWithTheRightRkeySucceedsAndOutOfBoundsDoesNot) {
  connect();
  const std::uint32_t rkey = fabric_.register_mr(pb_, 4096);
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 4096, rkey, {}}));
  run_for(milliseconds(1));
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{2, WrOpcode::kRdmaWrite, 4097, rkey, {}}));
  run_for(milliseconds(1));
  ASSERT_EQ(of(qa_).size(), 2u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(of(qa_)[1].status, WcStatus::kRemoteAccessError);
}

TEST_F(SimFabricTest, PathFailureWithArmedAlternateMigratesAndTheRequestCompletes) {
  connect();
  ASSERT_EQ(fabric_.qp_path(qa_), 0u);
  fabric_.set_path_up(a_, b_, 0, false);
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 0, 0, {}}));
  run_for(milliseconds(100));
  EXPECT_TRUE(saw(AsyncType::kMigrationStarted, qa_));
  EXPECT_TRUE(saw(AsyncType::kPathMigrated, qa_));
  EXPECT_TRUE(saw(AsyncType::kPathMigrated, qb_));
  EXPECT_EQ(fabric_.qp_path(qa_), 1u);
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kSuccess);
}

TEST_F(SimFabricTest, PartitionEndsInRetryExceededAndHealingAllowsReconnect) {
  connect();
  fabric_.partition(a_, b_);
  EXPECT_FALSE(fabric_.reachable(a_, b_));
  ASSERT_FALSE(fabric_.post_send(qa_, SimWr{1, WrOpcode::kRdmaRead, 0, 0, {}}));
  run_for(milliseconds(100));
  ASSERT_EQ(of(qa_).size(), 1u);
  EXPECT_EQ(of(qa_)[0].status, WcStatus::kRetryExceeded);
  EXPECT_FALSE(saw(AsyncType::kMigrationStarted, qa_));
  EXPECT_FALSE(fabric_.reconnect(qa_, qb_));
  fabric_.heal(a_, b_);
  EXPECT_TRUE(fabric_.reconnect(qa_, qb_));
}

TEST_F(SimFabricTest, XrcSendLandsInTheNamedSrqOfTheTargetsDomain) {
  const XrcdId x = fabric_.open_xrcd(b_, "/tmp/x");
  EXPECT_EQ(fabric_.open_xrcd(b_, "/tmp/x"), x);
  const Qpn tgt = fabric_.create_xrc_tgt(x);
  const SrqNum srq = fabric_.create_xrc_srq(pb_, x);
  const Pid sender = fabric_.spawn(a_);
  const Qpn ini = fabric_.create_xrc_ini(sender);
  ASSERT_TRUE(fabric_.connect(ini, tgt));
  ASSERT_FALSE(fabric_.post_srq_recv(srq, 3, 100));
  EXPECT_TRUE(fabric_.post_send(ini, SimWr{1, WrOpcode::kSend, 8, 0, {}}));  // no SRQ named
  ASSERT_FALSE(fabric_.post_send(ini, SimWr{1, WrOpcode::kSend, 8, 0, srq}));
  run_for(milliseconds(1));
  ASSERT_EQ(of(tgt).size(), 1u);
  EXPECT_EQ(of(tgt)[0].owner, pb_);
  EXPECT_EQ(of(tgt)[0].srq, srq);
  // The target QP belongs to the domain: the SRQ owner's death does not take it.
  fabric_.kill(pb_);
  EXPECT_TRUE(fabric_.qp_exists(tgt));
  EXPECT_FALSE(fabric_.destroy_xrcd(x));  // it still holds the target QP
  ASSERT_TRUE(fabric_.destroy_qp(tgt));
  EXPECT_TRUE(fabric_.destroy_xrcd(x));
}

TEST_F(SimFabricTest, SameStepsGiveTheSameTraceHash) {
  auto run = [](bool cut) {
    Fabric f;
    const NodeId a = f.add_node(), b = f.add_node();
    f.link(a, b);
    const Qpn qa = f.create_rc_qp(f.spawn(a)), qb = f.create_rc_qp(f.spawn(b));
    f.connect(qa, qb);
    if (cut) f.set_path_up(a, b, 0, false);
    f.post_send(qa, SimWr{1, WrOpcode::kRdmaRead, 0, 0, {}});
    f.clock().run_until(TimePoint{} + milliseconds(500));
    return f.trace_hash();
  };
  EXPECT_EQ(run(false), run(false));
  EXPECT_EQ(run(true), run(true));
  EXPECT_NE(run(false), run(true));
}

}  // namespace
}  // namespace rdma_interop::sim
