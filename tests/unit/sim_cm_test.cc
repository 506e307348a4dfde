// The simulated IB CM (core/sim/ib_cm.h): the REQ/REP/RTU handshake, REQ and REP
// retries under loss, MRA, and a listener's backlog (kDrop and kReject) under a connect burst,
// all in virtual time with the times IB's timers give.
#include "core/sim/ib_cm.h"

#include <gtest/gtest.h>

#include <vector>

namespace rdma_interop::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr ServiceId kService = 0x1234;
constexpr Nanos kHop = microseconds(5);

TimePoint at(Nanos t) {
  return TimePoint{} + t;
}

class SimCmTest : public ::testing::Test {
 protected:
  // response_timeout 20 ms, 3 retries, MRA asks for 100 ms; auto-MRA on.
  void start(const CmConfig& config = {}, cm::BacklogOverflow overflow = cm::BacklogOverflow::kDrop,
             std::uint32_t backlog = 16) {
    a_ = fabric_.add_node();
    b_ = fabric_.add_node();
    fabric_.link(a_, b_, 1);
    pa_ = fabric_.spawn(a_);
    pb_ = fabric_.spawn(b_);
    cm_.emplace(fabric_, config);
    cm_->on_event([this](const CmEvent& e) { events_.push_back(e); });
    ListenConfig lc;
    lc.service = kService;
    lc.backlog.backlog = backlog;
    lc.backlog.overflow = overflow;
    lc.backlog.overflow_timeout = milliseconds(1000);
    auto l = cm_->listen(b_, lc);
    ASSERT_TRUE(l.has_value());
    listener_ = *l;
  }

  CmId connect() {
    auto id = cm_->connect(pa_, b_, kService);
    EXPECT_TRUE(id.has_value());
    return id.has_value() ? *id : 0;
  }
  void run_until(Nanos t) { fabric_.clock().run_until(at(t)); }
  // The server application: at each of these times it takes the oldest request (if any)
  // and accepts it.
  void accept_at(std::vector<Nanos> times) {
    for (Nanos t : times) {
      fabric_.clock().at(at(t), [this] {
        max_pending_ = std::max(max_pending_, cm_->backlog_counters(listener_).pending);
        if (auto id = cm_->take_request(listener_)) {
          accept_errors_ += cm_->accept(*id, pb_).has_value() ? 1 : 0;
        }
      });
    }
  }
  void accept_every(Nanos period, int ticks) {
    std::vector<Nanos> times;
    for (int i = 1; i <= ticks; ++i) times.push_back(period * i);
    accept_at(times);
  }
  std::vector<CmEvent> of(NodeId node, CmOutcome o) const {
    std::vector<CmEvent> out;
    for (const auto& e : events_) {
      if (e.node == node && e.outcome == o) out.push_back(e);
    }
    return out;
  }
  static void expect_reconciled(const cm::BacklogCounters& c) {
    EXPECT_EQ(c.requests, c.pending + c.overflow_waiting + c.accepted + c.rejected_by_app +
                              c.pending_expired + c.pending_aborted + c.overflow_rejected +
                              c.overflow_dropped);
    EXPECT_LE(c.pending, c.backlog);
    EXPECT_LE(c.high_water, c.backlog);
    EXPECT_EQ(c.half_open_opened, c.half_open + c.half_open_completed + c.half_open_expired +
                                      c.half_open_aborted + c.half_open_evicted);
    EXPECT_EQ(c.half_open, 0u);  // IB has no half-open phase: a REQ arrives complete
  }

  Fabric fabric_;
  std::optional<IbCm> cm_;
  NodeId a_ = 0, b_ = 0;
  Pid pa_ = 0, pb_ = 0;
  ListenerId listener_ = 0;
  std::vector<CmEvent> events_;
  std::uint32_t max_pending_ = 0;
  int accept_errors_ = 0;
};

TEST_F(SimCmTest, ReqRepRtuEstablishesAConnectedQpPair) {
  start();
  const CmId id = connect();
  const Qpn qa = *cm_->qpn(id);
  run_until(microseconds(10));  // the REQ arrived at 5 us
  auto req = cm_->take_request(listener_);
  ASSERT_TRUE(req.has_value());
  ASSERT_FALSE(cm_->accept(*req, pb_));
  const Qpn qb = *cm_->qpn(*req);
  run_until(milliseconds(1));
  ASSERT_EQ(of(a_, CmOutcome::kEstablished).size(), 1u);
  ASSERT_EQ(of(b_, CmOutcome::kEstablished).size(), 1u);
  EXPECT_EQ(of(a_, CmOutcome::kEstablished)[0].at, at(microseconds(10) + kHop));      // REP in
  EXPECT_EQ(of(b_, CmOutcome::kEstablished)[0].at, at(microseconds(10) + 2 * kHop));  // RTU in
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 1u);
  EXPECT_EQ(cm_->sent(CmMsgType::kRep), 1u);
  EXPECT_EQ(cm_->sent(CmMsgType::kRtu), 1u);
  EXPECT_EQ(cm_->sent(CmMsgType::kMra), 0u);  // accepted well before response_timeout / 2
  EXPECT_EQ(cm_->state(id), CmState::kEstablished);
  EXPECT_EQ(cm_->state(*req), CmState::kEstablished);

  // The QPs really are a connected pair.
  std::vector<SimCompletion> wcs;
  fabric_.on_completion([&](const SimCompletion& c) { wcs.push_back(c); });
  ASSERT_FALSE(fabric_.post_recv(qb, 7, 64));
  ASSERT_FALSE(fabric_.post_send(qa, SimWr{1, rdmap::WrOpcode::kSend, 64, 0, {}}));
  run_until(milliseconds(2));
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, rdmap::WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, rdmap::WcStatus::kSuccess);

  // DREQ / DREP: both ends disconnected, both QPs destroyed.
  ASSERT_FALSE(cm_->disconnect(id));
  run_until(milliseconds(3));
  EXPECT_EQ(cm_->count(a_, CmOutcome::kDisconnected), 1u);
  EXPECT_EQ(cm_->count(b_, CmOutcome::kDisconnected), 1u);
  EXPECT_FALSE(fabric_.qp_exists(qa));
  EXPECT_FALSE(fabric_.qp_exists(qb));
  EXPECT_EQ(cm_->connections(), 0u);
}

TEST_F(SimCmTest, ReqLostInAPartitionThatHealsIsRetriedAndEstablishes) {
  start();
  fabric_.partition(a_, b_);
  fabric_.clock().at(at(milliseconds(30)), [this] { fabric_.heal(a_, b_); });
  accept_every(milliseconds(1), 100);
  connect();
  run_until(milliseconds(200));
  // REQs at 0 and 20 ms are lost; the one at 40 ms arrives and the 41 ms tick accepts it.
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 3u);
  EXPECT_EQ(cm_->lost(CmMsgType::kReq), 2u);
  ASSERT_EQ(of(a_, CmOutcome::kEstablished).size(), 1u);
  EXPECT_EQ(of(a_, CmOutcome::kEstablished)[0].at, at(milliseconds(41) + kHop));
  EXPECT_EQ(of(b_, CmOutcome::kEstablished).size(), 1u);
  EXPECT_EQ(cm_->backlog_counters(listener_).requests, 1u);
}

TEST_F(SimCmTest, LongPartitionTimesOutAfterOnePlusMaxRetriesReqs) {
  start();
  fabric_.partition(a_, b_);
  const CmId id = connect();
  const Qpn qa = *cm_->qpn(id);
  run_until(milliseconds(79));
  EXPECT_TRUE(events_.empty());
  run_until(milliseconds(500));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].outcome, CmOutcome::kTimedOut);
  EXPECT_EQ(events_[0].at, at(milliseconds(80)));  // (1 + 3) x 20 ms
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 4u);
  EXPECT_EQ(cm_->lost(CmMsgType::kReq), 4u);
  EXPECT_EQ(cm_->sent(CmMsgType::kRej), 1u);  // the timeout REJ, lost as well
  EXPECT_FALSE(cm_->state(id).has_value());
  EXPECT_FALSE(fabric_.qp_exists(qa));
  EXPECT_EQ(cm_->backlog_counters(listener_).requests, 0u);
}

TEST_F(SimCmTest, DropBacklogUnderABurstEstablishesEveryConnectAsTheAppAcceptsSlowly) {
  start({}, cm::BacklogOverflow::kDrop, 2);
  std::vector<CmId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(connect());
  accept_every(milliseconds(30), 10);
  run_until(microseconds(10));
  {
    const auto c = cm_->backlog_counters(listener_);
    EXPECT_EQ(c.pending, 2u);
    EXPECT_EQ(c.overflow_waiting, 6u);
    EXPECT_EQ(cm_->sent(CmMsgType::kRej), 0u);  // kDrop: nothing is sent
    expect_reconciled(c);
  }
  run_until(milliseconds(1000));
  EXPECT_EQ(cm_->count(a_, CmOutcome::kEstablished), 8u);
  EXPECT_EQ(cm_->count(b_, CmOutcome::kEstablished), 8u);
  EXPECT_EQ(events_.size(), 16u);  // nothing but the 8 x 2 establishments
  for (CmId id : ids) EXPECT_EQ(cm_->state(id), CmState::kEstablished);
  // The last request waited for six accepts: established at the 8th tick (240 ms).
  EXPECT_EQ(of(a_, CmOutcome::kEstablished).back().at, at(milliseconds(240) + kHop));
  EXPECT_EQ(accept_errors_, 0);
  EXPECT_LE(max_pending_, 2u);

  const auto c = cm_->backlog_counters(listener_);
  expect_reconciled(c);
  EXPECT_EQ(c.requests, 8u);  // retried REQs were recognised, not counted again
  EXPECT_EQ(c.accepted, 8u);
  EXPECT_EQ(c.high_water, 2u);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_EQ(c.overflow_waiting, 0u);
  EXPECT_EQ(c.overflow_dropped, 0u);
  // The six waiting requests each retried at 20 ms (the MRA moved their wait to 120 ms); the
  // three still undelivered or only just delivered at 120 ms retried once more.
  EXPECT_EQ(cm_->duplicate_reqs(), 9u);
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 8u + cm_->duplicate_reqs());
  EXPECT_EQ(cm_->count(a_, CmOutcome::kTimedOut), 0u);
}

TEST_F(SimCmTest, RejectBacklogUnderTheSameBurstAnswersBacklogFull) {
  start({}, cm::BacklogOverflow::kReject, 2);
  for (int i = 0; i < 8; ++i) connect();
  accept_every(milliseconds(30), 10);
  run_until(milliseconds(1000));
  const auto full = of(a_, CmOutcome::kRejectedBacklogFull);
  ASSERT_EQ(full.size(), 6u);
  for (const auto& e : full) EXPECT_EQ(e.at, at(2 * kHop));  // REQ in, REJ straight back
  EXPECT_EQ(cm_->count(b_, CmOutcome::kRejectedBacklogFull), 6u);
  EXPECT_EQ(cm_->count(a_, CmOutcome::kEstablished), 2u);
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 8u);  // a REJ ends the attempt: no retries
  EXPECT_EQ(cm_->sent(CmMsgType::kRej), 6u);
  const auto c = cm_->backlog_counters(listener_);
  expect_reconciled(c);
  EXPECT_EQ(c.requests, 8u);
  EXPECT_EQ(c.overflow_rejected, 6u);
  EXPECT_EQ(c.accepted, 2u);
  EXPECT_EQ(cm_->connections(), 4u);  // two established pairs
}

TEST_F(SimCmTest, LostRtuIsRecoveredByTheResentRep) {
  start();
  int rtus = 0;
  cm_->set_loss([&](const CmMessage& m) { return m.type == CmMsgType::kRtu && rtus++ == 0; });
  accept_at({milliseconds(1)});
  connect();
  run_until(milliseconds(200));
  // REP at 1 ms (its RTU lost), REP again at 21 ms, answered by the RTU again.
  EXPECT_EQ(cm_->sent(CmMsgType::kRep), 2u);
  EXPECT_EQ(cm_->sent(CmMsgType::kRtu), 2u);
  EXPECT_EQ(cm_->lost(CmMsgType::kRtu), 1u);
  ASSERT_EQ(of(a_, CmOutcome::kEstablished).size(), 1u);  // not twice for the duplicate REP
  EXPECT_EQ(of(a_, CmOutcome::kEstablished)[0].at, at(milliseconds(1) + kHop));
  ASSERT_EQ(of(b_, CmOutcome::kEstablished).size(), 1u);
  EXPECT_EQ(of(b_, CmOutcome::kEstablished)[0].at, at(milliseconds(21) + 2 * kHop));
}

TEST_F(SimCmTest, RtuLostForeverFailsThePassiveSideAndFreesEverything) {
  start();
  cm_->set_loss([](const CmMessage& m) { return m.type == CmMsgType::kRtu; });
  accept_at({milliseconds(1)});
  const CmId id = connect();
  const Qpn qa = *cm_->qpn(id);
  run_until(milliseconds(2));
  ASSERT_EQ(cm_->connections(), 2u);
  std::optional<Qpn> qb;
  for (CmId other = 1; other < 10 && !qb; ++other) {
    if (other != id && cm_->qpn(other)) qb = cm_->qpn(other);
  }
  ASSERT_TRUE(qb.has_value());
  run_until(milliseconds(500));
  EXPECT_EQ(cm_->sent(CmMsgType::kRep), 4u);  // 1 + 3 retries
  EXPECT_EQ(cm_->lost(CmMsgType::kRtu), 4u);
  ASSERT_EQ(of(b_, CmOutcome::kRtuTimeout).size(), 1u);
  EXPECT_EQ(of(b_, CmOutcome::kRtuTimeout)[0].at, at(milliseconds(81)));  // 1 + 4 x 20 ms
  EXPECT_EQ(cm_->count(b_, CmOutcome::kEstablished), 0u);
  // The active side was established; the passive side's timeout REJ ends it too.
  EXPECT_EQ(cm_->count(a_, CmOutcome::kEstablished), 1u);
  EXPECT_EQ(cm_->count(a_, CmOutcome::kPeerAbandoned), 1u);
  EXPECT_EQ(cm_->connections(), 0u);
  EXPECT_FALSE(fabric_.qp_exists(*qb));
  EXPECT_FALSE(fabric_.qp_exists(qa));
  const auto c = cm_->backlog_counters(listener_);
  expect_reconciled(c);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(cm_->queued_requests(listener_), 0u);
}

TEST_F(SimCmTest, AutoMraKeepsTheActiveSideWaitingForASlowAcceptor) {
  start();
  accept_at({milliseconds(400)});
  connect();
  run_until(milliseconds(1000));
  // MRAs at 10 ms (response_timeout / 2) and every 50 ms after: 8 before the accept.
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 1u);  // no retry spent
  EXPECT_EQ(cm_->sent(CmMsgType::kMra), 8u);
  ASSERT_EQ(of(a_, CmOutcome::kEstablished).size(), 1u);
  EXPECT_EQ(of(a_, CmOutcome::kEstablished)[0].at, at(milliseconds(400) + kHop));
  EXPECT_EQ(cm_->count(a_, CmOutcome::kTimedOut), 0u);
}

TEST_F(SimCmTest, WithoutAutoMraTheSameSlowAcceptorOutlastsTheRetries) {
  CmConfig config;
  config.auto_mra = false;
  start(config);
  accept_at({milliseconds(400)});
  connect();
  run_until(milliseconds(1000));
  // Each retried REQ is answered by an MRA (100 ms more), but each one spends a retry:
  // 20 ms, then three 100 ms waits (plus the MRAs' round trips), then the REJ.
  EXPECT_EQ(cm_->sent(CmMsgType::kReq), 4u);
  EXPECT_EQ(cm_->sent(CmMsgType::kMra), 3u);
  EXPECT_EQ(cm_->duplicate_reqs(), 3u);
  ASSERT_EQ(of(a_, CmOutcome::kTimedOut).size(), 1u);
  EXPECT_EQ(of(a_, CmOutcome::kTimedOut)[0].at, at(milliseconds(320) + 6 * kHop));
  // The timeout REJ freed the slot at once and took the request out of the application's
  // queue: the late accept finds nothing to take.
  EXPECT_EQ(cm_->count(b_, CmOutcome::kAborted), 1u);
  EXPECT_EQ(cm_->queued_requests(listener_), 0u);
  EXPECT_EQ(accept_errors_, 0);
  const auto c = cm_->backlog_counters(listener_);
  expect_reconciled(c);
  EXPECT_EQ(c.pending_aborted, 1u);
  EXPECT_EQ(c.accepted, 0u);
}

TEST_F(SimCmTest, RequestForAServiceNobodyListensToIsRejected) {
  start();
  auto id = cm_->connect(pa_, b_, kService + 1);
  ASSERT_TRUE(id.has_value());
  run_until(milliseconds(1));
  EXPECT_EQ(cm_->count(a_, CmOutcome::kRejectedNoListener), 1u);
  EXPECT_EQ(cm_->count(b_, CmOutcome::kRejectedNoListener), 1u);
  EXPECT_EQ(cm_->backlog_counters(listener_).requests, 0u);
}

TEST_F(SimCmTest, ApplicationRejectReachesTheActiveSide) {
  start();
  connect();
  run_until(microseconds(10));
  auto req = cm_->take_request(listener_);
  ASSERT_TRUE(req.has_value());
  ASSERT_FALSE(cm_->reject(*req));
  EXPECT_TRUE(cm_->accept(*req, pb_).has_value());  // decided already
  run_until(milliseconds(1));
  EXPECT_EQ(cm_->count(a_, CmOutcome::kRejectedByApp), 1u);
  EXPECT_EQ(cm_->count(b_, CmOutcome::kRejectedByApp), 1u);
  EXPECT_EQ(cm_->backlog_counters(listener_).rejected_by_app, 1u);
  EXPECT_EQ(cm_->connections(), 0u);
}

}  // namespace
}  // namespace rdma_interop::sim
