// The credit engine (core/credit/credit_window.h) on IB semantics: two CreditWindows drive
// Sends over a connected RC QP pair of the simulated fabric, with a slow receiver that
// re-posts each buffer only after it has processed the message in it (and sometimes stalls).
//
// On iWARP a Send without a posted receive is fatal, which is why the engine exists. On IB
// the same Send is RNR-NAKed and retried; with rnr_retry < 7 enough of them end the QP
// (IBV_WC_RNR_RETRY_EXC_ERR). The scenario shows both sides of that: gated by credits, no Send
// ever meets an empty receive queue; sent blindly on the same workload, Sends are RNR-NAKed,
// and a finite rnr_retry kills the connection at the receiver's first long stall.
//
// The credit header travels beside the Send, not in it: the sender queues each header in a
// FIFO as it posts the Send, and the receiver takes the next one at each receive completion
// (an RC QP delivers in order, and a duplicate is never executed twice).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "core/credit/credit_window.h"
#include "core/sim/fabric.h"
#include "core/sim/random.h"

namespace rdma_interop::sim {
namespace {

using credit::CreditConfig;
using credit::CreditHeader;
using credit::CreditWindow;
using credit::SendKind;
using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr std::size_t kMessages = 3000;
constexpr std::uint32_t kWindow = 16;  // the receiver's data receives: its memory bound
constexpr std::uint32_t kControl = 2;  // control receives each side keeps for updates
constexpr std::uint32_t kSize = 256;
constexpr std::uint64_t kSeed = 0x5EED0006;

// Per message: the sender's gap before it is ready, and the receiver's time on it before its
// buffer goes back. Drawn up front so the credited and the blind run see the same workload.
struct Workload {
  std::vector<Nanos> gap;
  std::vector<Nanos> work;
};

Workload make_workload(std::uint64_t seed) {
  Random r(seed);
  Workload w;
  for (std::size_t i = 0; i < kMessages; ++i) {
    w.gap.push_back(microseconds(r.between(0, 100)));
    // Mostly quick; now and then a pause (a page fault, a busy core) longer than the
    // (rnr_retry + 1) x min_rnr_timer a blind sender's head Send can wait.
    Nanos t = microseconds(r.between(20, 200));
    if (r.chance(2)) t += milliseconds(8);
    w.work.push_back(t);
  }
  return w;
}

// Sender A's numbers and receiver B's: B keeps kWindow data receives for A; A keeps one
// (B sends no data, only credit updates, into A's control receives).
CreditConfig config(bool receiver) {
  CreditConfig c;
  c.receive_window = c.initial_receives = receiver ? kWindow : 1;
  c.peer_receive_window = c.peer_initial_receives = receiver ? 1 : kWindow;
  c.control_receives = c.peer_control_receives = kControl;
  c.send_queue_depth = kWindow + kControl;
  c.control_send_slots = kControl;
  return c;
}

struct Result {
  std::uint64_t delivered = 0;     // data messages B received
  std::uint64_t sent_ok = 0;       // A's Sends completed successfully
  std::uint64_t rnr_naks = 0;      // Fabric::rnr_naks()
  std::uint64_t rnr_exceeded = 0;  // A's Sends completed IBV_WC_RNR_RETRY_EXC_ERR
  std::uint32_t max_posted = 0;    // B's data receives posted, at most (the engine's count)
  std::uint32_t max_buffers = 0;   // B's buffers on the fabric's receive queue, at most
  std::uint64_t stalls_no_credit = 0;
  std::uint64_t updates = 0;  // B's standalone credit updates
  std::string broken;         // the first broken engine invariant or protocol error
  TimePoint last_delivery{};
  std::uint64_t trace_hash = 0;
};

class CreditRun {
 public:
  CreditRun(const Workload& w, bool credited, std::uint8_t rnr_retry)
      : w_(w), credited_(credited), a_(config(false)), b_(config(true)) {
    const NodeId na = fabric_.add_node();
    const NodeId nb = fabric_.add_node();
    fabric_.link(na, nb, 1);
    const RcAttrs attrs{.retry_cnt = 7,
                        .rnr_retry = rnr_retry,
                        .ack_timeout = milliseconds(8),
                        .min_rnr_timer = milliseconds(1)};
    qa_ = fabric_.create_rc_qp(fabric_.spawn(na), attrs);
    qb_ = fabric_.create_rc_qp(fabric_.spawn(nb), attrs);
    EXPECT_TRUE(fabric_.connect(qa_, qb_));
    fabric_.on_completion([this](const SimCompletion& c) { handle(c); });
    // The same memory either way: B's window plus its control receives, all posted.
    for (std::uint32_t i = 0; i < kWindow + kControl; ++i) post_b();
    r_.max_posted = b_.counters().posted;  // the initial receives, announced at setup
    for (std::uint32_t i = 0; i < 1 + kControl; ++i) fabric_.post_recv(qa_, next_wr_++, kSize);
    TimePoint t{};
    for (Nanos gap : w_.gap) {
      t += gap;
      fabric_.clock().at(t, [this] {
        ++ready_;
        pump_a();
      });
    }
  }

  Result run() {
    while (fabric_.clock().run_next()) {
    }
    r_.rnr_naks = fabric_.rnr_naks();
    r_.stalls_no_credit = a_.counters().stalls_no_credit;
    r_.updates = b_.counters().updates_sent;
    r_.trace_hash = fabric_.trace_hash();
    return r_;
  }

 private:
  void pump_a() {
    while (ready_ > 0) {
      std::optional<CreditHeader> h;
      if (credited_) {
        auto got = a_.send_message();
        if (!got) return;  // no credit (or slot): the message waits for a grant
        h = *got;
      } else if (blind_outstanding_ >= kWindow) {
        return;  // the same send queue depth, nothing else holds it back
      }
      if (fabric_.post_send(qa_, SimWr{next_wr_++, WrOpcode::kSend, kSize, 0, {}})) return;
      if (h) a_to_b_.push_back(*h);
      ++blind_outstanding_;
      --ready_;
    }
  }

  void post_b() {
    if (fabric_.post_recv(qb_, next_wr_++, kSize)) return;
    ++b_buffers_;
    r_.max_buffers = std::max(r_.max_buffers, b_buffers_);
  }

  void send_updates_b() {
    while (b_.wants_credit_update()) {
      auto h = b_.send_credit_update();
      if (!h) return;  // no control credit or slot: a later event retries
      if (fabric_.post_send(qb_, SimWr{next_wr_++, WrOpcode::kSend, 4, 0, {}})) return;
      b_to_a_.push_back(*h);
    }
  }

  // The receiver's application: one message at a time, the buffer re-posted when done.
  void process_next_b() {
    if (b_busy_ || b_queue_ == 0) return;
    b_busy_ = true;
    --b_queue_;
    fabric_.clock().after(w_.work[processed_++], [this] {
      post_b();
      if (credited_) {
        if (!b_.on_receive_posted()) fail("B posted beyond its receive window");
        r_.max_posted = std::max(r_.max_posted, b_.counters().posted);
        send_updates_b();
      }
      b_busy_ = false;
      process_next_b();
    });
  }

  void handle(const SimCompletion& c) {
    if (c.qpn == qb_ && c.opcode == WcOpcode::kRecv && c.status == WcStatus::kSuccess) {
      --b_buffers_;
      ++r_.delivered;
      r_.last_delivery = fabric_.now();
      if (credited_) {
        auto kind = b_.on_receive_header(a_to_b_.front());
        a_to_b_.pop_front();
        if (!kind || *kind != SendKind::kData) fail("B refused A's data header");
        send_updates_b();  // a control return may have unblocked an update
      }
      ++b_queue_;
      process_next_b();
    } else if (c.qpn == qb_ && c.opcode == WcOpcode::kSend) {
      if (!b_.on_send_completed(SendKind::kControl)) fail("B's update slot was not in use");
      send_updates_b();
    } else if (c.qpn == qa_ && c.opcode == WcOpcode::kRecv && c.status == WcStatus::kSuccess) {
      auto kind = a_.on_receive_header(b_to_a_.front());
      b_to_a_.pop_front();
      if (!kind || *kind != SendKind::kControl) fail("A refused B's credit update");
      // Control receives go back at once: B's next update depends on their return.
      fabric_.post_recv(qa_, next_wr_++, kSize);
      if (!a_.on_control_receive_posted()) fail("A over its control receives");
      pump_a();
    } else if (c.qpn == qa_ && c.opcode == WcOpcode::kSend) {
      if (c.status == WcStatus::kSuccess) ++r_.sent_ok;
      if (c.status == WcStatus::kRnrRetryExceeded) ++r_.rnr_exceeded;
      --blind_outstanding_;
      if (credited_ && !a_.on_send_completed(SendKind::kData)) fail("A's data slot not in use");
      pump_a();
    }
    r_.max_posted = std::max(r_.max_posted, b_.counters().posted);
    if (credited_ && b_buffers_ != b_.counters().posted + b_.counters().control_posted) {
      fail("B's receive queue and its engine disagree");
    }
    for (const CreditWindow* w : {&a_, &b_}) {
      if (!w->broken_invariant().empty()) fail(std::string(w->broken_invariant()));
    }
  }

  void fail(const std::string& why) {
    if (r_.broken.empty()) r_.broken = why;
  }

  const Workload& w_;
  const bool credited_;
  Fabric fabric_;
  CreditWindow a_;  // the sender
  CreditWindow b_;  // the receiver (blind run: untouched, its counts stay at setup)
  Qpn qa_ = 0, qb_ = 0;
  std::uint64_t next_wr_ = 1;
  std::size_t ready_ = 0;  // messages ready at A, not yet posted
  std::uint32_t blind_outstanding_ = 0;
  std::uint32_t b_buffers_ = 0;
  std::size_t b_queue_ = 0;  // received, waiting for B's application
  bool b_busy_ = false;
  std::size_t processed_ = 0;
  std::deque<CreditHeader> a_to_b_;
  std::deque<CreditHeader> b_to_a_;
  Result r_;
};

TEST(SimCreditRnrTest, CreditedSendsNeverMeetAnEmptyReceiveQueue) {
  const Workload w = make_workload(kSeed);
  const Result r = CreditRun(w, true, 3).run();
  EXPECT_EQ(r.broken, "");
  EXPECT_EQ(r.delivered, kMessages);
  EXPECT_EQ(r.sent_ok, kMessages);
  EXPECT_EQ(r.rnr_naks, 0u);
  EXPECT_EQ(r.rnr_exceeded, 0u);
  // The memory bound: never more than the window posted, and the gate really held Sends back.
  EXPECT_EQ(r.max_posted, kWindow);
  EXPECT_EQ(r.max_buffers, kWindow + kControl);
  EXPECT_GT(r.stalls_no_credit, 0u);
  EXPECT_GT(r.updates, 0u);
  RecordProperty("credited_stalls_no_credit", std::to_string(r.stalls_no_credit));
  RecordProperty("credited_updates", std::to_string(r.updates));
  RecordProperty("credited_last_delivery_us",
                 std::to_string(r.last_delivery.time_since_epoch().count() / 1000));
}

TEST(SimCreditRnrTest, BlindSendsOnTheSameWorkloadAreRnrNakedUntilTheQpDies) {
  const Workload w = make_workload(kSeed);
  const Result r = CreditRun(w, false, 3).run();
  EXPECT_GT(r.rnr_naks, 0u);
  EXPECT_EQ(r.rnr_exceeded, 1u);  // the head Send dies; the rest are flushed
  EXPECT_LT(r.delivered, kMessages);
  EXPECT_LE(r.max_buffers, kWindow + kControl);
  RecordProperty("blind_rnr_naks", std::to_string(r.rnr_naks));
  RecordProperty("blind_delivered", std::to_string(r.delivered));
}

TEST(SimCreditRnrTest, BlindSendsWithInfiniteRnrRetryArriveButAreNakedOften) {
  const Workload w = make_workload(kSeed);
  const Result r = CreditRun(w, false, 7).run();
  EXPECT_EQ(r.delivered, kMessages);
  EXPECT_EQ(r.sent_ok, kMessages);
  EXPECT_EQ(r.rnr_exceeded, 0u);
  EXPECT_GT(r.rnr_naks, 0u);
  RecordProperty("blind7_rnr_naks", std::to_string(r.rnr_naks));
  RecordProperty("blind7_last_delivery_us",
                 std::to_string(r.last_delivery.time_since_epoch().count() / 1000));
}

TEST(SimCreditRnrTest, EverySeedKeepsTheCreditedRunFreeOfRnrAndReplaysExactly) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const Workload w = make_workload(seed);
    const Result r = CreditRun(w, true, 0).run();  // rnr_retry 0: a single RNR NAK is fatal
    EXPECT_EQ(r.broken, "") << "seed " << seed;
    EXPECT_EQ(r.delivered, kMessages) << "seed " << seed;
    EXPECT_EQ(r.rnr_naks, 0u) << "seed " << seed;
    EXPECT_LE(r.max_posted, kWindow) << "seed " << seed;
    EXPECT_EQ(CreditRun(w, true, 0).run().trace_hash, r.trace_hash) << "seed " << seed;
  }
}

}  // namespace
}  // namespace rdma_interop::sim
