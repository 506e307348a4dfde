// The per-peer channel (core/credit/peer_channel.h) message by message: two channels wired
// back to back through a model of two RC queue pairs (receive queues in post order, sends
// arriving in order), with no thread, socket or clock. Every step checks both channels'
// invariants and that no Send ever finds the peer's receive queue empty: the condition
// behind DDP's "no buffer" Terminate (RFC 5041 s7.2, code 0x02), which credits exist to
// make impossible. The seeded random test drives thousands of interleavings the same way.
// Tagged writes ride the same send queue: the model places one when it reaches the peer,
// and a message sent with a write must find its write the last one placed (RFC 5040 s5.5).
#include "core/credit/peer_channel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::credit {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Type = ChannelAction::Type;
using TimePoint = PeerChannel::TimePoint;

Bytes bytes_of(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

// One side: its channel, and what its "RNIC" holds: receive buffers posted, in order, and
// sends posted and not yet completed, in order.
struct Side {
  explicit Side(const ChannelConfig& c) : ch(c) {
    for (std::uint32_t i = 0; i < ch.receive_buffers(); ++i) rq.push_back(i);
  }
  PeerChannel ch;
  std::deque<std::uint32_t> rq;  // receive buffers posted, oldest first
  struct Sent {
    std::uint32_t index = 0;
    Bytes octets;
    bool signaled = true;              // completes on success too (else only when it fails)
    std::optional<TaggedWrite> write;  // an RDMA Write: placed, takes no receive
  };
  std::deque<Sent> sq;  // posted sends not yet on the wire
  std::vector<Bytes> delivered;
  std::vector<std::uint32_t> delivering;  // buffers of delivered messages, not yet let go
  std::vector<ChannelAction> events;      // ready, failed, closed, terminate
  std::uint32_t refused_posts = 0;        // refuse this many next posts (a broken provider)
  std::vector<ChannelAction> scratch;
  // Remote offsets of the writes the peer placed here, oldest first.
  std::vector<std::uint64_t> placed;
  bool misordered = false;  // a write not followed at once by its message's send

  // Carries out what the channel asked for, as the endpoint does (PeerLink): a refused
  // write's message is refused too.
  void act() {
    while (ch.has_actions()) {
      ch.take_actions(scratch);
      const std::vector<ChannelAction> todo = scratch;
      bool write_refused = false;
      for (std::size_t k = 0; k < todo.size(); ++k) {
        const ChannelAction& a = todo[k];
        if (a.type == Type::kPostWrite &&
            (k + 1 == todo.size() || todo[k + 1].type != Type::kPostSend)) {
          misordered = true;
        }
        if (write_refused && a.type == Type::kPostSend) {
          write_refused = false;
          ch.on_post_refused(a, "its write was refused");
          continue;
        }
        switch (a.type) {
          case Type::kPostWrite:
            if (refused_posts > 0) {
              --refused_posts;
              write_refused = true;
              ch.on_post_refused(a, "refused by the test");
            } else {
              sq.push_back(Sent{a.index, {}, a.signaled, a.write});
            }
            break;
          case Type::kPostSend:
          case Type::kPostRecv:
            if (refused_posts > 0) {
              --refused_posts;
              ch.on_post_refused(a, "refused by the test");
            } else if (a.type == Type::kPostSend) {
              const std::uint8_t* b = ch.send_buffer(a.index);
              sq.push_back(Sent{a.index, Bytes(b, b + a.length), a.signaled, std::nullopt});
            } else {
              rq.push_back(a.index);
            }
            break;
          case Type::kDeliver:
            check_placed(a.payload);
            delivered.emplace_back(a.payload.begin(), a.payload.end());
            delivering.push_back(a.index);
            break;
          default:
            events.push_back(a);
        }
      }
    }
  }
  // A message "...+w<n>" was sent with the write to offset n: it must be placed by now, and
  // be the last write placed (nothing comes between a write and its message).
  void check_placed(std::span<const std::uint8_t> payload) {
    const std::string text(payload.begin(), payload.end());
    const auto at = text.find("+w");
    if (at == std::string::npos) return;
    const std::uint64_t n = std::stoull(text.substr(at + 2));
    if (placed.empty() || placed.back() != n) misordered = true;
  }
  bool has_event(Type t) const {
    for (const auto& e : events) {
      if (e.type == t) return true;
    }
    return false;
  }
};

struct Pair {
  explicit Pair(const ChannelConfig& a, const ChannelConfig& b) : side{Side(a), Side(b)} {
    const CreditParams pa = side[0].ch.announced();
    const CreditParams pb = side[1].ch.announced();
    EXPECT_TRUE(side[0].ch.established(pb, now).has_value());
    EXPECT_TRUE(side[1].ch.established(pa, now).has_value());
  }
  explicit Pair(const ChannelConfig& c = {}) : Pair(c, c) {}

  Side side[2];
  TimePoint now{};
  bool overrun = false;  // a Send found no receive posted: what credits must prevent

  // The oldest send of side `from` reaches the peer: it lands in the peer's oldest posted
  // receive buffer and both sides see their completion (RC: the send completes once the
  // peer has it), the sender only if it asked for one (signaled). False when nothing is in
  // flight.
  bool deliver_one(int from) {
    Side& s = side[from];
    Side& r = side[1 - from];
    if (s.sq.empty()) return false;
    Side::Sent m = std::move(s.sq.front());
    s.sq.pop_front();
    if (m.write) {
      // Placed in the peer's region; no receive consumed, no completion there.
      r.placed.push_back(m.write->remote_offset);
      if (m.signaled) s.ch.on_send_completed(m.index, rdmap::WcStatus::kSuccess, now);
      s.act();
      return true;
    }
    if (r.rq.empty()) {
      overrun = true;
      return true;
    }
    const std::uint32_t into = r.rq.front();
    r.rq.pop_front();
    EXPECT_LE(m.octets.size(), r.ch.buffer_size());
    std::memcpy(r.ch.receive_buffer(into), m.octets.data(), m.octets.size());
    r.ch.on_receive_completed(into, static_cast<std::uint32_t>(m.octets.size()),
                              rdmap::WcStatus::kSuccess, now);
    if (m.signaled) s.ch.on_send_completed(m.index, rdmap::WcStatus::kSuccess, now);
    s.act();
    r.act();
    return true;
  }
  // Everything in flight reaches its peer, each receiver lets its messages go and flushes
  // at the end of the batch, until nothing moves.
  void settle(bool let_go = true) {
    for (int round = 0; round < 100000; ++round) {
      bool moved = false;
      for (int i = 0; i < 2; ++i) {
        while (deliver_one(i)) moved = true;
      }
      for (Side& s : side) {
        if (let_go) {
          // Done with everything delivered, held ones included.
          for (std::uint32_t idx : s.delivering) (void)s.ch.release(idx, now);
          s.delivering.clear();
        }
        s.ch.flush(now);
        s.act();
      }
      for (Side& s : side) {
        if (!s.sq.empty()) moved = true;
      }
      if (!moved) return;
    }
    ADD_FAILURE() << "the pair never settled";
  }
  ::testing::AssertionResult healthy() const {
    if (overrun) return ::testing::AssertionFailure() << "a Send found no posted receive";
    for (int i = 0; i < 2; ++i) {
      if (side[i].misordered) {
        return ::testing::AssertionFailure()
               << "side " << i << ": a write not right before its message";
      }
      const std::string broken = side[i].ch.broken_invariant();
      if (!broken.empty()) return ::testing::AssertionFailure() << "side " << i << ": " << broken;
    }
    return ::testing::AssertionSuccess();
  }
};

ChannelConfig config(std::uint32_t window, std::uint32_t limit = 64) {
  ChannelConfig c;
  c.max_message = 64;
  c.receive_window = window;
  c.send_queue_depth = window + 2;
  c.send_queue_limit = limit;
  return c;
}

TEST(PeerChannel, DeliversEveryMessageInOrderAndConservesCredits) {
  Pair p(config(8, 4));
  std::uint32_t next = 0;
  while (next < 1000) {
    const Bytes m = bytes_of("m" + std::to_string(next));
    const SendStatus s = p.side[0].ch.send(m, p.now);
    p.side[0].act();
    if (s == SendStatus::kTryAgain) {
      p.settle();
      continue;
    }
    ASSERT_EQ(s, SendStatus::kOk);
    ++next;
    ASSERT_TRUE(p.healthy());
  }
  p.settle();
  ASSERT_TRUE(p.healthy());
  ASSERT_EQ(p.side[1].delivered.size(), 1000u);
  for (std::uint32_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(p.side[1].delivered[i], bytes_of("m" + std::to_string(i)));
  }
  const ChannelCounters a = p.side[0].ch.counters(p.now);
  const ChannelCounters b = p.side[1].ch.counters(p.now);
  EXPECT_EQ(a.messages_sent, 1000u);
  EXPECT_EQ(b.messages_received, 1000u);
  EXPECT_EQ(a.credit.credits_granted_total, a.credit.sent + a.credit.credits);
  EXPECT_EQ(a.lost, 0u);
}

TEST(PeerChannel, TryAgainExactlyWhenCreditsAndTheQueueAreUsedUp) {
  ChannelConfig c = config(8, 5);
  c.reply_reserve = 1;
  Pair p(c);
  Side& a = p.side[0];
  // 7 go at once (the 8th credit is the reply reserve), 5 queue, then EAGAIN.
  for (int i = 0; i < 12; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk) << i;
  a.act();
  EXPECT_EQ(a.sq.size(), 7u);
  EXPECT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kTryAgain);
  const ChannelCounters before = a.ch.counters(p.now);
  EXPECT_EQ(before.queued, 5u);
  EXPECT_EQ(before.refused, 1u);
  // The 8th message was stopped by the reply reserve: a stall like any other (counted once).
  EXPECT_EQ(before.credit.stalls_no_credit, 1u);
  // Once the peer grants again, the queue drains and the sender hears it may try again.
  p.settle();
  EXPECT_TRUE(a.has_event(Type::kReady));
  EXPECT_EQ(a.ch.counters(p.now).queued, 0u);
  EXPECT_EQ(p.side[1].delivered.size(), 12u);
  EXPECT_TRUE(p.healthy());
}

TEST(PeerChannel, GrantsGoInBatchesOfHalfTheWindowWhenNothingElseCarriesThem) {
  Pair p(config(16, 1000));
  Side& a = p.side[0];
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  p.settle();
  ASSERT_TRUE(p.healthy());
  ASSERT_EQ(p.side[1].delivered.size(), 1000u);
  // One-way traffic lives on standalone updates, one per 8 messages here (window / 2).
  const auto updates = p.side[1].ch.counters(p.now).credit.updates_sent;
  EXPECT_GE(updates, 1000u / 16);
  EXPECT_LE(updates, 1000u / 8 + 1);
}

TEST(PeerChannel, ReceiverSendsNoUpdateForLessThanABatchWhileThePeerHasCredit) {
  Pair p(config(16));
  Side& a = p.side[0];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  p.settle();
  // Three grants owed, the peer still holds 13 credits: nothing goes on its own.
  EXPECT_EQ(p.side[1].ch.counters(p.now).credit.updates_sent, 0u);
  EXPECT_EQ(p.side[1].ch.counters(p.now).credit.pending_grant, 3u);
}

TEST(PeerChannel, RepliesCarryTheGrantsSoRequestReplyNeedsNoUpdates) {
  Pair p(config(8));
  Side& a = p.side[0];
  Side& b = p.side[1];
  for (int round = 0; round < 200; ++round) {
    ASSERT_EQ(a.ch.send(bytes_of("q"), p.now), SendStatus::kOk);
    a.act();
    ASSERT_TRUE(p.deliver_one(0));
    ASSERT_EQ(b.delivering.size(), 1u);
    ASSERT_EQ(b.ch.reply(b.delivering[0], bytes_of("r"), p.now), SendStatus::kOk);
    b.delivering.clear();
    b.act();
    ASSERT_TRUE(p.deliver_one(1));
    for (std::uint32_t idx : a.delivering) a.ch.delivered(idx, p.now);
    a.delivering.clear();
    a.ch.flush(p.now);
    b.ch.flush(p.now);
    a.act();
    b.act();
    ASSERT_TRUE(p.healthy());
  }
  p.settle();
  EXPECT_EQ(b.ch.counters(p.now).credit.updates_sent, 0u);
  EXPECT_EQ(b.delivered.size(), 200u);
  EXPECT_EQ(a.delivered.size(), 200u);
}

TEST(PeerChannel, AHeldMessageIsNotGrantedAgainUntilReleased) {
  ChannelConfig c = config(4, 100);
  c.reply_reserve = 0;
  Pair p(c);
  Side& a = p.side[0];
  Side& b = p.side[1];
  for (int i = 0; i < 10; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  // b holds everything it gets: after 4 messages a has no credit left and queues the rest.
  for (int round = 0; round < 5; ++round) {
    while (p.deliver_one(0)) {
    }
    for (std::uint32_t idx : b.delivering) ASSERT_EQ(b.ch.hold(idx), SendStatus::kOk);
    b.ch.flush(p.now);
    b.act();
    a.ch.flush(p.now);
    a.act();
  }
  EXPECT_EQ(b.delivered.size(), 4u);
  EXPECT_EQ(b.ch.counters(p.now).held, 4u);
  EXPECT_EQ(a.ch.counters(p.now).queued, 6u);
  EXPECT_TRUE(p.healthy());
  for (std::uint32_t idx : b.delivering) ASSERT_EQ(b.ch.release(idx, p.now), SendStatus::kOk);
  b.delivering.clear();
  b.ch.flush(p.now);
  b.act();
  p.settle();
  EXPECT_EQ(b.delivered.size(), 10u);
  EXPECT_TRUE(p.healthy());
}

TEST(PeerChannel, RepliesAlwaysFindABufferWhenBothSidesHoldEachOthersRequests) {
  ChannelConfig c = config(4, 100);
  c.reply_reserve = 1;
  Pair p(c);
  // Both send more requests than the window and hold all they receive: without the reserve
  // each would hold the other's every buffer and no reply could go.
  for (int i = 0; i < 8; ++i) {
    for (Side& s : p.side) ASSERT_EQ(s.ch.send(bytes_of("req"), p.now), SendStatus::kOk);
  }
  for (Side& s : p.side) s.act();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 2; ++i) {
      while (p.deliver_one(i)) {
      }
    }
    for (Side& s : p.side) {
      for (std::uint32_t idx : s.delivering) ASSERT_EQ(s.ch.hold(idx), SendStatus::kOk);
      s.ch.flush(p.now);
      s.act();
    }
  }
  ASSERT_TRUE(p.healthy());
  // Now each answers the requests it holds (and lets replies go): every reply goes, and the
  // queued requests follow.
  std::size_t seen[2] = {0, 0};
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 2; ++i) {
      Side& s = p.side[i];
      const std::vector<std::uint32_t> held = std::move(s.delivering);
      s.delivering.clear();
      for (std::uint32_t idx : held) {
        const Bytes& m = s.delivered.at(seen[i]++);
        if (m == bytes_of("req")) {
          ASSERT_EQ(s.ch.reply(idx, bytes_of("rep"), p.now), SendStatus::kOk);
        } else {
          ASSERT_EQ(s.ch.release(idx, p.now), SendStatus::kOk);
        }
      }
      s.act();
    }
    for (int i = 0; i < 2; ++i) {
      while (p.deliver_one(i)) {
      }
    }
    for (Side& s : p.side) {
      s.ch.flush(p.now);
      s.act();
    }
    ASSERT_TRUE(p.healthy());
  }
  EXPECT_EQ(p.side[0].ch.counters(p.now).queued, 0u);
  EXPECT_EQ(p.side[1].ch.counters(p.now).queued, 0u);
  EXPECT_EQ(p.side[0].delivered.size(), 16u) << "8 requests and 8 replies";
}

TEST(PeerChannel, APeerSendingWithoutCreditGetsTheNoBufferTerminate) {
  ChannelConfig rogue = config(4, 100);
  rogue.ignore_credits = true;
  Pair p(rogue, config(4, 100));
  Side& a = p.side[0];
  Side& b = p.side[1];
  // b holds what it gets, so grants stop; the fifth message has no credit behind it.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(p.deliver_one(0));
    for (std::uint32_t idx : b.delivering) (void)b.ch.hold(idx);
    b.delivering.clear();
  }
  ASSERT_FALSE(p.overrun) << "the fifth message lands on a control receive buffer";
  ASSERT_TRUE(b.has_event(Type::kTerminate));
  for (const auto& e : b.events) {
    if (e.type != Type::kTerminate) continue;
    EXPECT_EQ(e.cause.layer, wire::TermLayer::kDdp);
    EXPECT_EQ(e.cause.etype, wire::kDdpEtypeUntaggedBuffer);
    EXPECT_EQ(e.cause.code, wire::kDdpUntaggedCodeNoBuffer);
  }
  EXPECT_EQ(b.ch.state(), ChannelState::kFailed);
  EXPECT_TRUE(b.has_event(Type::kFailed));
  EXPECT_EQ(b.delivered.size(), 4u) << "nothing beyond the credits is delivered";
  // The four it held are released and counted, not left dangling.
  EXPECT_EQ(b.ch.counters(p.now).held, 0u);
  EXPECT_EQ(b.ch.counters(p.now).held_released, 4u);
  EXPECT_TRUE(b.ch.broken_invariant().empty()) << b.ch.broken_invariant();
}

TEST(PeerChannel, MalformedOrLyingHeadersEndTheConnectionWithATerminate) {
  struct Case {
    const char* what;
    Bytes octets;
    wire::TermLayer layer;
  };
  const std::vector<Case> cases = {
      {"short", {0x10, 0x00}, wire::TermLayer::kRdmap},
      {"version 2", {0x20, 0x00, 0x00, 0x00}, wire::TermLayer::kRdmap},
      {"reserved bits", {0x1E, 0x00, 0x00, 0x00}, wire::TermLayer::kRdmap},
      {"grant beyond the window", {0x10, 0x00, 0x00, 0x40}, wire::TermLayer::kRdmap},
      {"return never owed", {0x10, 0x05, 0x00, 0x00}, wire::TermLayer::kRdmap},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Pair p(config(4));
    Side& b = p.side[1];
    const std::uint32_t into = b.rq.front();
    b.rq.pop_front();
    std::memcpy(b.ch.receive_buffer(into), c.octets.data(), c.octets.size());
    b.ch.on_receive_completed(into, static_cast<std::uint32_t>(c.octets.size()),
                              rdmap::WcStatus::kSuccess, p.now);
    b.act();
    ASSERT_TRUE(b.has_event(Type::kTerminate));
    EXPECT_EQ(b.events.front().cause.layer, c.layer);
    EXPECT_EQ(b.ch.state(), ChannelState::kFailed);
    EXPECT_TRUE(b.delivered.empty());
    EXPECT_TRUE(b.ch.broken_invariant().empty()) << b.ch.broken_invariant();
  }
}

TEST(PeerChannel, APeerThatClosesInOrderIsClosedNotFailed) {
  Pair p(config(4, 100));
  Side& a = p.side[0];
  for (int i = 0; i < 6; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  a.ch.peer_closed("the peer closed the connection");
  a.act();
  EXPECT_EQ(a.ch.state(), ChannelState::kClosed);
  EXPECT_TRUE(a.has_event(Type::kClosed));
  EXPECT_FALSE(a.has_event(Type::kFailed));
  EXPECT_EQ(a.ch.counters(p.now).lost, 3u) << "4 - 1 reserved went, 3 were queued";
  EXPECT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kUnknownPeer);
  // The flushes that follow change nothing more.
  while (!a.sq.empty()) {
    a.ch.on_send_completed(a.sq.front().index, rdmap::WcStatus::kFlushed, p.now);
    a.sq.pop_front();
  }
  a.act();
  EXPECT_FALSE(a.has_event(Type::kFailed));
  EXPECT_TRUE(a.ch.broken_invariant().empty()) << a.ch.broken_invariant();
}

TEST(PeerChannel, OneSendInHalfTheDataSlotsAsksForACompletionThatConfirmsTheOthers) {
  Pair p(config(16, 100));  // 18 send buffers, 16 for data: every 8th send is signaled
  Side& a = p.side[0];
  for (int i = 0; i < 15; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  ASSERT_EQ(a.sq.size(), 15u);
  std::vector<bool> signaled;
  for (const auto& sent : a.sq) signaled.push_back(sent.signaled);
  for (std::size_t i = 0; i < signaled.size(); ++i) {
    EXPECT_EQ(signaled[i], (i + 1) % 8 == 0) << "send " << i;
  }
  // Eight reach the peer: the eighth's completion confirms all eight.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(p.deliver_one(0));
  EXPECT_EQ(a.ch.counters(p.now).budget.send_reserved, 7u);
  EXPECT_EQ(a.ch.awaited(), a.ch.receive_buffers() + 0u) << "no signaled send left";
  EXPECT_TRUE(p.healthy());
  // The connection fails: each of the seven still posted completes flushed, on its own.
  a.ch.fail("reset");
  while (!a.sq.empty()) {
    a.ch.on_send_completed(a.sq.front().index, rdmap::WcStatus::kFlushed, p.now);
    a.sq.pop_front();
  }
  a.act();
  EXPECT_EQ(a.ch.counters(p.now).budget.send_reserved, 0u);
  EXPECT_TRUE(a.ch.broken_invariant().empty()) << a.ch.broken_invariant();
}

TEST(PeerChannel, ARefusedPostFailsThePeerAndGivesEverythingBack) {
  Pair p(config(4, 100));
  Side& a = p.side[0];
  a.refused_posts = 1;
  EXPECT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  EXPECT_EQ(a.ch.state(), ChannelState::kFailed);
  EXPECT_TRUE(a.has_event(Type::kFailed));
  const ChannelCounters c = a.ch.counters(p.now);
  EXPECT_EQ(c.messages_sent, 0u);
  EXPECT_EQ(c.lost, 1u);
  EXPECT_EQ(c.budget.send_reserved, 0u);
  EXPECT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kPeerFailed);
  EXPECT_TRUE(a.ch.broken_invariant().empty()) << a.ch.broken_invariant();
}

TEST(PeerChannel, CompletionsBeforeSetupEndsAreProcessedOnceItDoes) {
  Side a(config(4));
  Side b(config(4));
  ASSERT_TRUE(b.ch.established(a.ch.announced(), TimePoint{}).has_value());
  ASSERT_EQ(b.ch.send(bytes_of("early"), TimePoint{}), SendStatus::kOk);
  b.act();
  // The message reaches a before a knows b's numbers (connect() has not returned yet).
  const std::uint32_t into = a.rq.front();
  a.rq.pop_front();
  const Bytes& m = b.sq.front().octets;
  std::memcpy(a.ch.receive_buffer(into), m.data(), m.size());
  a.ch.on_receive_completed(into, static_cast<std::uint32_t>(m.size()), rdmap::WcStatus::kSuccess,
                            TimePoint{});
  a.act();
  EXPECT_TRUE(a.delivered.empty());
  ASSERT_TRUE(a.ch.established(b.ch.announced(), TimePoint{}).has_value());
  a.act();
  ASSERT_EQ(a.delivered.size(), 1u);
  EXPECT_EQ(a.delivered[0], bytes_of("early"));
}

TEST(PeerChannel, NumbersThatCannotWorkAreRefusedAtSetup) {
  PeerChannel ch(config(4));
  CreditParams theirs = ch.announced();
  theirs.max_message = 2;  // smaller than the credit header
  auto r = ch.established(theirs, TimePoint{});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(ch.state(), ChannelState::kFailed);
  EXPECT_NE(config_problem(ChannelConfig{.reply_reserve = 16}), "");
  EXPECT_EQ(config_problem(ChannelConfig{}), "");
}

TEST(PeerChannel, StalledForIsHowLongMessagesHaveWaitedForCredit) {
  Pair p(config(2, 100));
  Side& a = p.side[0];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  EXPECT_EQ(a.ch.counters(p.now).stalled_for, std::chrono::nanoseconds(0))
      << "one credit is the reply reserve: the second and third queue from now";
  const TimePoint later = p.now + std::chrono::milliseconds(1500);
  EXPECT_EQ(a.ch.counters(later).stalled_for, std::chrono::milliseconds(1500));
  p.now = later;
  p.settle();
  EXPECT_EQ(a.ch.counters(later).stalled_for, std::chrono::nanoseconds(0));
}

TEST(PeerChannel, AnswersForUnknownOrSettledMessagesAreClear) {
  Pair p(config(4));
  Side& b = p.side[1];
  EXPECT_EQ(b.ch.reply(999, bytes_of("r"), p.now), SendStatus::kNotHeld);
  EXPECT_EQ(b.ch.hold(0), SendStatus::kNotHeld) << "buffer 0 is posted, not delivered";
  ASSERT_EQ(p.side[0].ch.send(bytes_of("q"), p.now), SendStatus::kOk);
  p.side[0].act();
  ASSERT_TRUE(p.deliver_one(0));
  const std::uint32_t idx = b.delivering.at(0);
  EXPECT_EQ(b.ch.reply(idx, Bytes(65, 0), p.now), SendStatus::kTooLong);
  EXPECT_EQ(b.ch.reply(idx, bytes_of("r"), p.now), SendStatus::kOk);
  EXPECT_EQ(b.ch.reply(idx, bytes_of("r"), p.now), SendStatus::kNotHeld) << "answered once";
  EXPECT_EQ(b.ch.release(idx, p.now), SendStatus::kNotHeld);
  EXPECT_EQ(p.side[0].ch.send(Bytes(65, 0), p.now), SendStatus::kTooLong);
}

TaggedWrite write_to(std::uint64_t remote_offset, std::uint32_t length = 1000) {
  return TaggedWrite{.local_addr = 0x1000,
                     .length = length,
                     .local_stag = 0x100,
                     .remote_stag = 0x200,
                     .remote_offset = remote_offset};
}

TEST(PeerChannel, AWriteGoesRightBeforeItsMessageUnsignaledAndIsPlacedWhenItIsDelivered) {
  Pair p(config(16, 100));  // 16 data slots: every 8th send is signaled
  Side& a = p.side[0];
  for (int i = 0; i < 7; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  ASSERT_EQ(a.ch.send(bytes_of("placed+w7"), p.now, write_to(7)), SendStatus::kOk);
  a.act();
  ASSERT_EQ(a.sq.size(), 9u);
  const Side::Sent& w = a.sq[7];
  const Side::Sent& m = a.sq[8];
  ASSERT_TRUE(w.write.has_value());
  EXPECT_EQ(*w.write, write_to(7));
  EXPECT_FALSE(w.signaled) << "the eighth in the run, but a write is never signaled";
  EXPECT_FALSE(m.write.has_value());
  EXPECT_TRUE(m.signaled) << "its message follows the usual rule: the run reached 8";
  const ChannelCounters c = a.ch.counters(p.now);
  EXPECT_EQ(c.writes_sent, 1u);
  EXPECT_EQ(c.bytes_written, 1000u);
  EXPECT_EQ(c.messages_sent, 8u);
  EXPECT_EQ(c.budget.send_reserved, 9u) << "a message and its write: two entries";
  EXPECT_EQ(c.credit.data_slots_in_use, 8u) << "the write holds no credit";
  ASSERT_TRUE(p.healthy());
  p.settle();
  ASSERT_TRUE(p.healthy());
  EXPECT_EQ(p.side[1].placed, std::vector<std::uint64_t>{7});
  ASSERT_EQ(p.side[1].delivered.size(), 8u);
  EXPECT_EQ(p.side[1].delivered.back(), bytes_of("placed+w7"));
  EXPECT_EQ(a.ch.counters(p.now).budget.send_reserved, 0u)
      << "the signaled message confirmed its write and everything before";
}

TEST(PeerChannel, AWriteNeedsTwoSlotsDataMayTakeAndWaitsForThem) {
  ChannelConfig c = config(16, 100);
  c.send_queue_depth = 6;  // 4 data slots, 2 for credit updates
  Pair p(c);
  Side& a = p.side[0];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  ASSERT_EQ(a.ch.send(bytes_of("late+w1"), p.now, write_to(1)), SendStatus::kOk);
  a.act();
  EXPECT_EQ(a.sq.size(), 3u) << "one data slot left: neither goes, not even the message";
  EXPECT_EQ(a.ch.counters(p.now).queued, 1u);
  EXPECT_EQ(a.ch.counters(p.now).writes_sent, 0u);
  ASSERT_TRUE(p.healthy());
  p.settle();
  ASSERT_TRUE(p.healthy());
  EXPECT_EQ(p.side[1].placed, std::vector<std::uint64_t>{1});
  ASSERT_EQ(p.side[1].delivered.size(), 4u);
  EXPECT_EQ(p.side[1].delivered.back(), bytes_of("late+w1"));

  ChannelConfig narrow = config(4);
  narrow.send_queue_depth = 3;  // one data slot: a write could never go
  Pair q(narrow);
  EXPECT_EQ(q.side[0].ch.send(bytes_of("x"), q.now, write_to(0)), SendStatus::kTooLong);
  EXPECT_EQ(q.side[0].ch.send(bytes_of("x"), q.now), SendStatus::kOk);
}

// A borrowed Write's source is the caller's only during send(): posted then, or kNotNow with
// nothing queued and nothing counted, whatever held it (slots, credit, requests waiting).
TEST(PeerChannel, ABorrowedWriteIsPostedAtOnceOrRefusedWithNothingQueued) {
  ChannelConfig c = config(16, 100);
  c.send_queue_depth = 6;  // 4 data slots, 2 for credit updates
  Pair p(c);
  Side& a = p.side[0];
  TaggedWrite borrowed = write_to(1);
  borrowed.borrowed = true;
  ASSERT_EQ(a.ch.send(bytes_of("now+w1"), p.now, borrowed), SendStatus::kOk);
  a.act();
  ASSERT_EQ(a.sq.size(), 2u);
  ASSERT_TRUE(a.sq[0].write.has_value());
  EXPECT_TRUE(a.sq[0].write->borrowed);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(a.ch.send(bytes_of("x"), p.now), SendStatus::kOk);
  a.act();
  const ChannelCounters before = a.ch.counters(p.now);
  EXPECT_EQ(a.ch.send(bytes_of("later+w2"), p.now, borrowed), SendStatus::kNotNow)
      << "every data slot taken";
  ASSERT_EQ(a.ch.send(bytes_of("queued"), p.now), SendStatus::kOk);  // waits for a slot
  a.act();
  EXPECT_EQ(a.sq.size(), 4u);
  const ChannelCounters after = a.ch.counters(p.now);
  EXPECT_EQ(after.queued, 1u) << "the plain request only";
  EXPECT_EQ(after.writes_sent, before.writes_sent);
  EXPECT_EQ(after.refused, before.refused);
  EXPECT_EQ(after.credit, before.credit) << "a refusal here counts nothing";
  // The sends reach the peer and complete: the slots are free again, but the queued request
  // goes only at the end of the batch (flush). Until then a borrowed Write would overtake it.
  while (p.deliver_one(0)) {
  }
  EXPECT_EQ(a.ch.send(bytes_of("later+w3"), p.now, borrowed), SendStatus::kNotNow)
      << "a request waits before it";
  a.ch.flush(p.now);
  a.act();
  EXPECT_EQ(a.ch.counters(p.now).queued, 0u);
  TaggedWrite fourth = write_to(4);
  fourth.borrowed = true;
  EXPECT_EQ(a.ch.send(bytes_of("now+w4"), p.now, fourth), SendStatus::kOk)
      << "the queue gone, the same Write goes";
  a.act();
  ASSERT_TRUE(p.healthy());
  p.settle();
  ASSERT_TRUE(p.healthy());
  EXPECT_EQ(p.side[1].placed, (std::vector<std::uint64_t>{1, 4}));
  ASSERT_EQ(p.side[1].delivered.size(), 5u);
  EXPECT_EQ(p.side[1].delivered[3], bytes_of("queued"));
  EXPECT_EQ(p.side[1].delivered[4], bytes_of("now+w4"));
}

TEST(PeerChannel, AWriteWithoutACreditForItsMessageIsQueuedAndPostedWithItLater) {
  Pair p(config(2, 100));  // one credit for requests, the other is the reply reserve
  Side& a = p.side[0];
  ASSERT_EQ(a.ch.send(bytes_of("first"), p.now), SendStatus::kOk);
  ASSERT_EQ(a.ch.send(bytes_of("second+w5"), p.now, write_to(5, 4096)), SendStatus::kOk);
  a.act();
  ASSERT_EQ(a.sq.size(), 1u) << "no credit for the message: its write waits with it";
  EXPECT_FALSE(a.sq.front().write.has_value());
  EXPECT_EQ(a.ch.counters(p.now).queued, 1u);
  EXPECT_EQ(a.ch.counters(p.now).writes_sent, 0u);
  ASSERT_TRUE(p.deliver_one(0));
  EXPECT_TRUE(p.side[1].placed.empty());
  p.settle();
  ASSERT_TRUE(p.healthy());
  EXPECT_EQ(p.side[1].placed, std::vector<std::uint64_t>{5});
  ASSERT_EQ(p.side[1].delivered.size(), 2u);
  EXPECT_EQ(p.side[1].delivered[1], bytes_of("second+w5"));
  EXPECT_EQ(a.ch.counters(p.now).bytes_written, 4096u);
}

TEST(PeerChannel, ARefusedWriteFailsThePeerAndItsMessageNeverGoes) {
  Pair p(config(4, 100));
  Side& a = p.side[0];
  a.refused_posts = 1;
  ASSERT_EQ(a.ch.send(bytes_of("x+w3"), p.now, write_to(3)), SendStatus::kOk);
  a.act();
  EXPECT_TRUE(a.sq.empty()) << "the message after a refused write is refused too";
  EXPECT_EQ(a.ch.state(), ChannelState::kFailed);
  EXPECT_NE(a.ch.detail().find("refused a write"), std::string::npos) << a.ch.detail();
  ASSERT_TRUE(a.has_event(Type::kFailed));
  const ChannelCounters c = a.ch.counters(p.now);
  EXPECT_EQ(c.writes_sent, 0u);
  EXPECT_EQ(c.bytes_written, 0u);
  EXPECT_EQ(c.messages_sent, 0u);
  EXPECT_EQ(c.lost, 1u);
  EXPECT_EQ(c.budget.send_reserved, 0u);
  EXPECT_EQ(a.ch.outstanding(), a.ch.receive_buffers());
  EXPECT_TRUE(a.ch.broken_invariant().empty()) << a.ch.broken_invariant();
  EXPECT_EQ(a.ch.send(bytes_of("y"), p.now, write_to(4)), SendStatus::kPeerFailed);
  EXPECT_EQ(type_name(Type::kPostWrite), "post_write");
}

// Random interleavings: sends, replies, holds, releases, deliveries and flushes in any order,
// on both sides; the invariants after every step, no receive queue ever found empty, every
// message delivered once and in order, every write placed right before its message. Then,
// all let go, everything queued gets through.
class PeerChannelRandom : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(PeerChannelRandom, KeepsEveryInvariantAndNeverOverrunsAReceiveQueue) {
  std::mt19937 rng(GetParam());
  auto pick = [&](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  // Replies are sent here, so the reply reserve is at least 1: with none, two sides that
  // hold each other's requests deadlock by configuration (message_endpoint.h).
  ChannelConfig c = config(2 + pick(7), 1 + pick(6));
  c.reply_reserve = 1 + pick(c.receive_window - 1);
  c.control_receives = 1 + pick(3);
  c.send_queue_depth = c.receive_window + 1 + pick(3);
  c.control_send_slots = 1 + pick(c.send_queue_depth - c.receive_window);
  Pair p(c);
  std::uint64_t sent[2] = {0, 0};
  for (int step = 0; step < 400; ++step) {
    const int i = static_cast<int>(pick(2));
    Side& s = p.side[i];
    switch (pick(7)) {
      case 0:
      case 1: {
        // One send in three carries a write: offset n goes with message n ("+w<n>").
        const bool with_write = pick(3) == 0;
        const std::string text = std::to_string(i) + ":" + std::to_string(sent[i]) +
                                 (with_write ? "+w" + std::to_string(sent[i]) : "");
        const SendStatus st =
            with_write ? s.ch.send(bytes_of(text), p.now, write_to(sent[i], 1 + pick(5000)))
                       : s.ch.send(bytes_of(text), p.now);
        if (st == SendStatus::kOk) ++sent[i];
        ASSERT_TRUE(st == SendStatus::kOk || st == SendStatus::kTryAgain) << status_name(st);
        break;
      }
      case 2:
        (void)p.deliver_one(i);
        break;
      case 3:
        if (!s.delivering.empty()) {
          const std::uint32_t idx = s.delivering.back();
          s.delivering.pop_back();
          ASSERT_EQ(s.ch.reply(idx, bytes_of("reply"), p.now), SendStatus::kOk);
        }
        break;
      case 4:
        for (std::uint32_t idx : s.delivering) ASSERT_EQ(s.ch.hold(idx), SendStatus::kOk);
        break;
      case 5:
        if (!s.delivering.empty()) {
          const std::uint32_t idx = s.delivering.front();
          s.delivering.erase(s.delivering.begin());
          ASSERT_EQ(s.ch.release(idx, p.now), SendStatus::kOk);
        }
        break;
      case 6:
        s.ch.flush(p.now);
        break;
    }
    s.act();
    ASSERT_TRUE(p.healthy()) << "seed " << GetParam() << " step " << step;
  }
  p.settle();
  ASSERT_TRUE(p.healthy()) << "seed " << GetParam();
  for (int i = 0; i < 2; ++i) {
    // What side i delivered is side 1-i's messages in order, then the replies, which carry
    // no number: check the numbered ones are 0, 1, 2... with no gap or repeat.
    std::uint64_t expect = 0;
    for (const Bytes& m : p.side[i].delivered) {
      const std::string text(m.begin(), m.end());
      if (text == "reply") continue;
      const std::string plain = std::to_string(1 - i) + ":" + std::to_string(expect);
      EXPECT_TRUE(text == plain || text == plain + "+w" + std::to_string(expect))
          << "seed " << GetParam() << ": " << text;
      ++expect;
    }
    const ChannelCounters c = p.side[1 - i].ch.counters(p.now);
    EXPECT_EQ(expect, sent[1 - i])
        << "seed " << GetParam() << " queued " << c.queued << " replies " << c.replies_queued
        << " credits " << c.credit.credits << " held " << c.held << " pending_grant(peer) "
        << p.side[i].ch.counters(p.now).credit.pending_grant << " granted(peer) "
        << p.side[i].ch.counters(p.now).credit.granted << " held(peer) "
        << p.side[i].ch.counters(p.now).held;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PeerChannelRandom, ::testing::Range(1u, 301u));

}  // namespace
}  // namespace rdma_interop::credit
