// Two credit windows wired back to back, driven at random for thousands of steps: messages
// and grants delivered in order per direction with random interleaving, receive buffers held
// by the application and re-posted at random, send completions (and so control slot
// availability) at random. After every step each engine's invariants hold, the two engines
// agree with each other and with an independent model of both receive queues, and no message
// is ever sent, or arrives, without a posted receive at the peer: the condition that keeps
// DDP's "no buffer" Terminate (RFC 5041 s7.2, code 0x02) from ever being sent. Then both sides
// must still get 500 more messages each through (no deadlock).
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <sstream>
#include <vector>

#include "core/credit/credit_window.h"

namespace rdma_interop::credit {
namespace {

using Bytes = std::vector<std::uint8_t>;

// What the wire and the peer's queues really hold, kept apart from the engines' own counts.
struct Side {
  explicit Side(const CreditConfig& c)
      : w(c), rq_data(c.initial_receives), rq_control(c.control_receives) {}
  CreditWindow w;
  std::uint32_t rq_data;     // data receives posted at this side (the RDMA receive queue)
  std::uint32_t rq_control;  // control receives posted at this side
  std::uint32_t held = 0;    // consumed buffers the application still holds
  std::deque<SendKind> sq;   // posted sends, completing in order (RC)
  std::uint64_t payloads_sent = 0, payloads_received = 0;
  std::uint32_t free_buffers() const { return w.config().receive_window - rq_data - held; }
};

struct Pair {
  Pair(const CreditConfig& a, const CreditConfig& b) : side{Side(a), Side(b)} {}
  Side side[2];
  std::deque<Bytes> wire[2];  // wire[i]: from side i to side 1 - i, in order

  struct InFlight {
    std::uint32_t data = 0, control = 0, grants = 0, returns = 0;
  };
  InFlight in_flight(int from) const {
    InFlight f;
    for (const auto& m : wire[from]) {
      const auto h = decode_credit_header(m);
      (h->control ? f.control : f.data)++;
      f.grants += h->grant;
      f.returns += h->control_return;
    }
    return f;
  }

  // Side i sends one data message if the engine allows. Returns false on EAGAIN.
  ::testing::AssertionResult send_data(int i, bool& sent) {
    Side& s = side[i];
    sent = false;
    auto h = s.w.send_message();
    if (!h) {
      if (!is_try_again(h.error())) {
        return ::testing::AssertionFailure() << "send: " << error_name(h.error());
      }
      return ::testing::AssertionSuccess();
    }
    // The property that matters: a receive is posted at the peer for this message, beyond
    // every message already on its way there.
    if (side[1 - i].rq_data <= in_flight(i).data) {
      return ::testing::AssertionFailure() << "side " << i << " sent without a posted receive";
    }
    const auto hb = encode_credit_header(*h);
    Bytes m(hb.begin(), hb.end());
    m.push_back(static_cast<std::uint8_t>(s.payloads_sent++));
    wire[i].push_back(std::move(m));
    s.sq.push_back(SendKind::kData);
    sent = true;
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult send_update(int i) {
    Side& s = side[i];
    auto h = s.w.send_credit_update();
    if (!h) {
      if (!is_try_again(h.error())) {
        return ::testing::AssertionFailure() << "update: " << error_name(h.error());
      }
      return ::testing::AssertionSuccess();
    }
    if (side[1 - i].rq_control <= in_flight(i).control) {
      return ::testing::AssertionFailure() << "side " << i << " update without a control receive";
    }
    const auto hb = encode_credit_header(*h);
    wire[i].emplace_back(hb.begin(), hb.end());
    s.sq.push_back(SendKind::kControl);
    return ::testing::AssertionSuccess();
  }

  // Delivers the oldest message from side i to side 1 - i.
  ::testing::AssertionResult deliver(int i) {
    if (wire[i].empty()) return ::testing::AssertionSuccess();
    Side& to = side[1 - i];
    const Bytes m = std::move(wire[i].front());
    wire[i].pop_front();
    auto r = to.w.on_receive(m);
    if (!r) return ::testing::AssertionFailure() << "receive: " << error_name(r.error());
    if (r->kind == SendKind::kData) {
      if (to.rq_data == 0) return ::testing::AssertionFailure() << "DDP no buffer (data)";
      --to.rq_data;
      ++to.held;
      if (r->payload.size() != 1 ||
          r->payload[0] != static_cast<std::uint8_t>(to.payloads_received++)) {
        return ::testing::AssertionFailure() << "payload out of order";
      }
    } else {
      if (to.rq_control == 0) return ::testing::AssertionFailure() << "DDP no buffer (control)";
      --to.rq_control;
      // A control receive holds no application data: providers post it again at once.
      ++to.rq_control;
      if (!to.w.on_control_receive_posted()) {
        return ::testing::AssertionFailure() << "control re-post refused";
      }
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult complete_send(int i) {
    Side& s = side[i];
    if (s.sq.empty()) return ::testing::AssertionSuccess();
    const SendKind k = s.sq.front();
    s.sq.pop_front();
    if (!s.w.on_send_completed(k)) return ::testing::AssertionFailure() << "completion refused";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult post_receive(int i) {
    Side& s = side[i];
    if (s.free_buffers() == 0) return ::testing::AssertionSuccess();
    ++s.rq_data;
    if (!s.w.on_receive_posted()) return ::testing::AssertionFailure() << "post refused";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult check() const {
    for (int i = 0; i < 2; ++i) {
      const Side& s = side[i];
      const Side& peer = side[1 - i];
      if (!s.w.broken_invariant().empty()) {
        return ::testing::AssertionFailure() << "side " << i << ": " << s.w.broken_invariant();
      }
      const CreditCounters c = s.w.counters();
      const CreditCounters pc = peer.w.counters();
      const InFlight out = in_flight(i), back = in_flight(1 - i);
      std::ostringstream where;
      where << "side " << i << ": credits " << c.credits << " in flight " << out.data
            << " grants coming " << back.grants << " peer granted " << pc.granted << " peer rq "
            << peer.rq_data;
      // The engine's posted count is the real receive queue.
      if (c.posted != s.rq_data || c.control_posted != s.rq_control) {
        return ::testing::AssertionFailure() << where.str() << ": engine and queue disagree";
      }
      // Never more credits than posted receives (counting what is already on its way).
      if (c.credits + out.data > peer.rq_data) {
        return ::testing::AssertionFailure() << where.str() << ": credits over posted receives";
      }
      // Grants conserved across the connection: what the peer granted and has not seen used
      // is our credits, our messages on the way, and its grants on the way.
      if (pc.granted != c.credits + out.data + back.grants) {
        return ::testing::AssertionFailure() << where.str() << ": grants not conserved";
      }
      if (pc.control_posted - pc.control_return_pending !=
          c.control_credits + out.control + back.returns) {
        return ::testing::AssertionFailure() << where.str() << ": control credits not conserved";
      }
      if (c.sent != pc.received + out.data) {
        return ::testing::AssertionFailure() << where.str() << ": messages lost";
      }
      if (s.sq.size() > s.w.config().send_queue_depth) {
        return ::testing::AssertionFailure() << where.str() << ": send queue overrun";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

// A pair of configurations that agree with each other, drawn at random.
std::pair<CreditConfig, CreditConfig> random_configs(std::mt19937& rng) {
  auto pick = [&](std::uint32_t lo, std::uint32_t hi) { return lo + rng() % (hi - lo + 1); };
  CreditConfig a, b;
  a.receive_window = pick(1, 8);
  b.receive_window = pick(1, 8);
  a.initial_receives = pick(0, a.receive_window);
  b.initial_receives = pick(0, b.receive_window);
  a.control_receives = pick(1, 3);
  b.control_receives = pick(1, 3);
  for (CreditConfig* c : {&a, &b}) {
    c->control_send_slots = pick(1, 2);
    c->send_queue_depth = c->control_send_slots + pick(1, 6);
    c->grant_batch = pick(1, c->receive_window);
    c->low_water = pick(0, c->receive_window);
  }
  a.peer_receive_window = b.receive_window;
  b.peer_receive_window = a.receive_window;
  a.peer_initial_receives = b.initial_receives;
  b.peer_initial_receives = a.initial_receives;
  a.peer_control_receives = b.control_receives;
  b.peer_control_receives = a.control_receives;
  return {a, b};
}

class CreditWindowRandom : public ::testing::TestWithParam<unsigned> {};

TEST_P(CreditWindowRandom, BackToBackEnginesKeepEveryInvariantAndNeverOverrunAReceiveQueue) {
  std::mt19937 rng(GetParam());
  const auto [ca, cb] = random_configs(rng);
  ASSERT_TRUE(validate(ca));
  ASSERT_TRUE(validate(cb));
  Pair p(ca, cb);
  ASSERT_TRUE(p.check());
  // Per run, how often sends complete (control slots free up) and buffers come back.
  const unsigned complete_pct = 10 + rng() % 80;
  const unsigned release_pct = 10 + rng() % 80;
  std::uint64_t eagain = 0;
  for (int step = 0; step < 4000; ++step) {
    const int i = static_cast<int>(rng() % 2);
    bool sent = false;
    switch (rng() % 7) {
      case 0:
      case 1:
        ASSERT_TRUE(p.send_data(i, sent)) << "step " << step;
        eagain += !sent;
        break;
      case 2:
        ASSERT_TRUE(p.deliver(i)) << "step " << step;
        break;
      case 3:
        if (rng() % 100 < complete_pct) {
          ASSERT_TRUE(p.complete_send(i));
        }
        break;
      case 4:
        if (p.side[i].held > 0 && rng() % 100 < release_pct) p.side[i].held--;
        break;
      case 5:
        ASSERT_TRUE(p.post_receive(i));
        break;
      case 6:
        // Usually only when the policy asks; sometimes forced (a provider flushing grants).
        if (p.side[i].w.wants_credit_update() || rng() % 4 == 0) {
          ASSERT_TRUE(p.send_update(i));
        }
        break;
    }
    ASSERT_TRUE(p.check()) << "step " << step;
  }
  EXPECT_GT(eagain, 0u) << "the run never hit back-pressure";

  // Liveness: with every buffer eventually returned and every send eventually completed,
  // 500 more messages each way get through, following only the policy (wants_credit_update).
  const std::uint64_t target[2] = {p.side[0].payloads_sent + 500, p.side[1].payloads_sent + 500};
  for (int round = 0;; ++round) {
    ASSERT_LT(round, 20000) << "deadlock: " << p.side[0].payloads_sent << "/" << target[0] << " "
                            << p.side[1].payloads_sent << "/" << target[1];
    bool done = true;
    for (int i = 0; i < 2; ++i) {
      bool sent = false;
      if (p.side[i].payloads_sent < target[i]) {
        ASSERT_TRUE(p.send_data(i, sent));
        done = false;
      }
      if (rng() % 2) {
        ASSERT_TRUE(p.deliver(i));
      }
      if (rng() % 2) {
        ASSERT_TRUE(p.complete_send(i));
      }
      if (p.side[i].held > 0 && rng() % 2) p.side[i].held--;
      ASSERT_TRUE(p.post_receive(i));
      if (p.side[i].w.wants_credit_update()) {
        ASSERT_TRUE(p.send_update(i));
      }
      ASSERT_TRUE(p.check());
    }
    if (done && p.wire[0].empty() && p.wire[1].empty()) break;
  }
  EXPECT_EQ(p.side[1].payloads_received, p.side[0].payloads_sent);
  EXPECT_EQ(p.side[0].payloads_received, p.side[1].payloads_sent);
}

INSTANTIATE_TEST_SUITE_P(Seeds, CreditWindowRandom, ::testing::Range(1u, 61u));

}  // namespace
}  // namespace rdma_interop::credit
