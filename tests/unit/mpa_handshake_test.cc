// MPA setup between two MpaHandshake engines wired back to back in memory: every octet one
// side outputs is fed to the other, with the application's decision and the clock driven by
// the test. Each test names the scenario of RFC 5044 s7.1 / RFC 6581 s3 it checks.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/terminate.h"

namespace rdma_interop::cm {
namespace {

using std::chrono::milliseconds;

MpaPolicy siw() {
  MpaPolicy p;
  p.peer_to_peer = PeerToPeer::kWhenAsked;
  p.rtr_offer = {.write = true, .read = true};
  p.rtr_preference = {RtrType::kWrite, RtrType::kRead};
  p.private_data_limit = 256;
  return p;
}

MpaPolicy p2p(RtrSet offer) {
  MpaPolicy p;
  p.peer_to_peer = PeerToPeer::kOn;
  p.rtr_offer = offer;
  return p;
}

struct Side {
  MpaHandshake hs;
  std::vector<CmEvent> events;
  void drain() {
    while (auto ev = hs.poll_event()) events.push_back(*ev);
  }
  const CmEvent* last(CmEventType t) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (it->type == t) return &*it;
    }
    return nullptr;
  }
};

// Runs both engines until neither has output; the responder's application accepts (or
// rejects) on kConnectRequest. Returns when quiet.
struct Pair {
  Side init;
  Side resp;
  TimePoint now = Clock::now();
  bool reject = false;
  std::vector<std::uint8_t> resp_pd = {'o', 'k'};

  Pair(const MpaPolicy& ip, const MpaPolicy& rp, std::vector<std::uint8_t> pd = {'h', 'i'})
      : init{MpaHandshake::initiator(ip, std::move(pd), Clock::now()), {}},
        resp{MpaHandshake::responder(rp, Clock::now()), {}} {}

  void pump() {
    for (int round = 0; round < 20; ++round) {
      bool moved = false;
      auto a = init.hs.take_output();
      if (!a.empty() && !resp.hs.finished()) {
        resp.hs.on_bytes(a, now);
        moved = true;
      }
      resp.drain();
      if (auto* req = resp.last(CmEventType::kConnectRequest); req && !decided) {
        decided = true;
        reject ? resp.hs.reject(resp_pd, now) : resp.hs.accept(resp_pd, now);
        resp.drain();
      }
      auto b = resp.hs.take_output();
      if (!b.empty() && !init.hs.finished()) {
        init.hs.on_bytes(b, now);
        moved = true;
      }
      init.drain();
      if (!moved) return;
    }
    FAIL() << "handshake did not settle";
  }
  bool decided = false;
};

TEST(MpaHandshake, Revision2PeerToPeerEstablishesWithEachRtrType) {
  for (RtrType rtr : {RtrType::kSend, RtrType::kWrite, RtrType::kRead}) {
    SCOPED_TRACE(std::string(rtr_name(rtr)));
    RtrSet only;
    only.send = rtr == RtrType::kSend;
    only.write = rtr == RtrType::kWrite;
    only.read = rtr == RtrType::kRead;
    MpaPolicy responder = p2p({.send = true, .write = true, .read = true});
    Pair pair(p2p(only), responder);
    pair.pump();
    ASSERT_TRUE(pair.init.hs.established());
    ASSERT_TRUE(pair.resp.hs.established());
    Handover i = pair.init.hs.take_handover();
    Handover r = pair.resp.hs.take_handover();
    EXPECT_EQ(i.params.rtr, rtr);
    EXPECT_EQ(r.params.rtr, rtr);
    EXPECT_TRUE(i.params.peer_to_peer && r.params.peer_to_peer);
    EXPECT_EQ(i.params.revision, 2);
    EXPECT_TRUE(i.params.crc && r.params.crc);
    EXPECT_TRUE(i.leftover.empty());
    EXPECT_TRUE(r.leftover.empty());
    EXPECT_FALSE(r.hold_tx_until_first_rx);  // the RTR already arrived
    // The RTR used MSN 1 of its queue on both sides.
    EXPECT_EQ(i.sequence.next_send_msn_tx, rtr == RtrType::kSend ? 2u : 1u);
    EXPECT_EQ(r.sequence.next_send_msn_rx, rtr == RtrType::kSend ? 2u : 1u);
    EXPECT_EQ(i.sequence.next_read_msn_tx, rtr == RtrType::kRead ? 2u : 1u);
    EXPECT_EQ(r.sequence.next_read_msn_rx, rtr == RtrType::kRead ? 2u : 1u);
    EXPECT_EQ(i.tx_stream_position, r.rx_stream_position);
    EXPECT_EQ(r.tx_stream_position, i.rx_stream_position);
    EXPECT_EQ(r.params.peer_private_data, (std::vector<std::uint8_t>{'h', 'i'}));
    EXPECT_EQ(i.params.peer_private_data, (std::vector<std::uint8_t>{'o', 'k'}));
  }
}

TEST(MpaHandshake, ResponderReportsEstablishedOnlyWhenTheRtrArrives) {
  MpaPolicy never = p2p({.write = true});
  never.send_rtr = false;
  MpaPolicy responder = siw();
  responder.rtr_timeout = milliseconds(200);
  Pair pair(never, responder);
  pair.pump();
  EXPECT_TRUE(pair.init.hs.established());
  EXPECT_FALSE(pair.resp.hs.finished());
  ASSERT_TRUE(pair.resp.hs.next_deadline().has_value());
  pair.resp.hs.on_timer(*pair.resp.hs.next_deadline());
  pair.resp.drain();
  const CmEvent* failed = pair.resp.last(CmEventType::kFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->failure, CmFailure::kRtrTimeout);
}

TEST(MpaHandshake, FirstFpduDelayHoldsTheRtrAndEstablishmentAfterTheReply) {
  for (const bool peer_to_peer : {true, false}) {
    SCOPED_TRACE(peer_to_peer ? "peer-to-peer, Write RTR" : "no peer-to-peer");
    MpaPolicy initiator = peer_to_peer ? p2p({.write = true}) : siw();
    initiator.first_fpdu_delay = milliseconds(40);
    Pair pair(initiator, siw());
    pair.pump();
    // The Reply is in, but nothing has gone out behind it yet.
    EXPECT_FALSE(pair.init.hs.established());
    EXPECT_EQ(pair.init.last(CmEventType::kEstablished), nullptr);
    ASSERT_TRUE(pair.init.hs.next_deadline().has_value());
    const TimePoint due = *pair.init.hs.next_deadline();
    EXPECT_EQ(due, pair.now + milliseconds(40));
    pair.init.hs.on_timer(due - milliseconds(1));
    EXPECT_TRUE(pair.init.hs.take_output().empty());
    EXPECT_FALSE(pair.init.hs.established());

    pair.now = due;
    pair.init.hs.on_timer(due);
    pair.init.drain();
    EXPECT_TRUE(pair.init.hs.established());
    EXPECT_NE(pair.init.last(CmEventType::kEstablished), nullptr);
    pair.pump();  // the RTR, if any, reaches the responder now
    EXPECT_TRUE(pair.resp.hs.established());
    EXPECT_EQ(pair.init.hs.take_handover().params.peer_to_peer, peer_to_peer);
  }
}

TEST(MpaHandshake, FirstFpduDelayMustBeShorterThanTheReplyTimeout) {
  MpaPolicy p;
  p.first_fpdu_delay = p.reply_timeout;
  EXPECT_EQ(validate(p).size(), 1u);
  p.first_fpdu_delay = milliseconds(50);
  EXPECT_TRUE(validate(p).empty());
}

TEST(MpaHandshake, MissingReadResponseToTheReadRtrIsAnRtrTimeout) {
  MpaPolicy initiator = p2p({.read = true});
  initiator.rtr_timeout = milliseconds(300);
  Side init{MpaHandshake::initiator(initiator, {}, Clock::now()), {}};
  Side resp{MpaHandshake::responder(siw(), Clock::now()), {}};
  const TimePoint now = Clock::now();
  resp.hs.on_bytes(init.hs.take_output(), now);
  resp.drain();
  resp.hs.accept({}, now);
  init.hs.on_bytes(resp.hs.take_output(), now);  // the Reply; the Read RTR goes out...
  EXPECT_FALSE(init.hs.take_output().empty());   // ...and its Response never comes back
  ASSERT_TRUE(init.hs.next_deadline().has_value());
  EXPECT_EQ(*init.hs.next_deadline(), now + milliseconds(300));
  init.hs.on_timer(*init.hs.next_deadline());
  init.drain();
  const CmEvent* failed = init.last(CmEventType::kFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->failure, CmFailure::kRtrTimeout);
  EXPECT_NE(failed->detail.find("Read RTR"), std::string::npos);
}

TEST(MpaHandshake, ResponderPicksRtrByPreferenceFromTheIntersection) {
  MpaPolicy cxgb4 = p2p({.send = true, .write = true, .read = true});
  cxgb4.rtr_preference = {RtrType::kRead};
  Pair pair(p2p({.send = true, .write = true, .read = true}), cxgb4);
  pair.pump();
  ASSERT_TRUE(pair.resp.hs.established());
  EXPECT_EQ(pair.resp.hs.take_handover().params.rtr, RtrType::kRead);

  Pair to_siw(p2p({.send = true, .write = true, .read = true}), siw());
  to_siw.pump();
  ASSERT_TRUE(to_siw.resp.hs.established());
  EXPECT_EQ(to_siw.resp.hs.take_handover().params.rtr, RtrType::kWrite);
}

TEST(MpaHandshake, NoCommonRtrFailsBothSidesWithTerminate0x07) {
  Pair pair(p2p({.send = true}), siw());
  pair.pump();
  const CmEvent* r = pair.resp.last(CmEventType::kFailed);
  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(r->failure, CmFailure::kNoMatchingRtr);
  EXPECT_EQ(i->failure, CmFailure::kNoMatchingRtr);
  ASSERT_TRUE(r->terminate.has_value());
  EXPECT_EQ(*r->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x07}));
}

// A strict initiator learns the responder's IRD only from the Reply, so its refusal comes
// after it: a Terminate with MPA code 0x06 (RFC 6581 s3). With a Read RTR the responder is
// still in setup, awaiting the RTR, when the Terminate arrives.
TEST(MpaHandshake, StrictInitiatorTerminatesWith0x06AndTheResponderLearnsIt) {
  MpaPolicy greedy = p2p({.read = true});
  greedy.strict_ird_ord = true;
  greedy.ord = 32;
  MpaPolicy shallow = p2p({.read = true});
  shallow.ird = 4;
  Pair pair(greedy, shallow);
  pair.pump();
  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->failure, CmFailure::kInsufficientIrd);
  EXPECT_EQ(*i->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x06}));
  EXPECT_FALSE(pair.init.hs.received_frame()->reject);
  const CmEvent* r = pair.resp.last(CmEventType::kFailed);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->failure, CmFailure::kInsufficientIrd);
}

// Found by rdma-probe: with first_fpdu_delay the initiator holds a responder's Terminate
// (MPA code 0x06) unread when the close arrives behind it; the Terminate must win. Our own
// responders refuse in the Reply now, but a peer may still accept and then Terminate, so
// the peer here is written out octet by octet.
TEST(MpaHandshake, TerminateThenCloseInsideTheFirstFpduDelayReportsTheTerminate) {
  for (const bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "reset" : "close");
    MpaPolicy greedy;
    greedy.ord = 32;
    greedy.first_fpdu_delay = milliseconds(50);
    const TimePoint now = Clock::now();
    MpaHandshake init = MpaHandshake::initiator(greedy, {}, now);
    ASSERT_FALSE(init.take_output().empty());
    wire::MpaFrame reply;  // accepts, with CRC as the initiator asked
    reply.kind = wire::MpaFrameKind::kReply;
    reply.revision = wire::kMpaRevision2;
    reply.crc = true;
    reply.enhanced = wire::MpaEnhancedParams{.ird = 4, .ord = 16};
    auto octets = wire::encode_mpa_frame(reply);
    ASSERT_TRUE(octets);
    wire::TerminateMessage term;
    term.cause = wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x06};
    wire::FpduEncoder encoder(wire::FpduOptions{.crc = true, .markers = false});
    wire::FpduFrame frame;
    const auto ulpdu = wire::encode_terminate(term, 1);  // the frame refers to it
    ASSERT_TRUE(encoder.encode(ulpdu, frame));
    frame.append_to(*octets);

    init.on_bytes(*octets, now);
    EXPECT_FALSE(init.finished());  // the Reply is in; the Terminate waits unread
    init.on_peer_closed(reset, now);
    std::optional<CmEvent> failed;
    while (auto ev = init.poll_event()) {
      if (ev->type == CmEventType::kFailed) failed = *ev;
    }
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->failure, CmFailure::kInsufficientIrd);
    EXPECT_EQ(*failed->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x06}));
    ASSERT_TRUE(failed->peer_frame.has_value());
  }
}

TEST(MpaHandshake, CloseInsideTheFirstFpduDelayWithoutATerminateIsAClose) {
  MpaPolicy initiator;
  initiator.first_fpdu_delay = milliseconds(50);
  Pair pair(initiator, MpaPolicy{});
  pair.pump();
  EXPECT_FALSE(pair.init.hs.finished());
  pair.init.hs.on_bytes(std::vector<std::uint8_t>{0x00}, pair.now);  // half an FPDU header
  pair.init.hs.on_peer_closed(false, pair.now);
  pair.init.drain();
  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->failure, CmFailure::kConnectionClosed);
}

TEST(MpaHandshake, RelaxedIrdOrdLowersEachOrdToThePeersIrd) {
  MpaPolicy a = p2p({.write = true});
  a.ird = 8;
  a.ord = 32;
  MpaPolicy b = siw();
  b.ird = 16;
  b.ord = 64;
  Pair pair(a, b);
  pair.pump();
  ASSERT_TRUE(pair.init.hs.established() && pair.resp.hs.established());
  const auto i = pair.init.hs.take_handover().params;
  const auto r = pair.resp.hs.take_handover().params;
  EXPECT_EQ(i.ord, 16);  // min(32, responder IRD 16)
  EXPECT_EQ(r.ord, 8);   // min(64, initiator IRD 8)
  EXPECT_EQ(i.ird, 8);
  EXPECT_EQ(r.ird, 16);
}

TEST(MpaHandshake, Revision2ResponderAnswersARevision1InitiatorInRevision1) {
  MpaPolicy rev1;
  rev1.revision = 1;
  Pair pair(rev1, siw());
  pair.pump();
  ASSERT_TRUE(pair.resp.hs.established());
  const auto r = pair.resp.hs.take_handover();
  EXPECT_EQ(r.params.revision, 1);
  EXPECT_FALSE(r.params.enhanced);
  EXPECT_TRUE(r.hold_tx_until_first_rx);  // RFC 5044: the responder waits for an FPDU
  EXPECT_EQ(pair.resp.hs.sent_frame()->revision, 1);
}

TEST(MpaHandshake, Revision2InitiatorMeetsRevision1ResponderFailsOrFallsBack) {
  MpaPolicy old;
  old.revision = 1;
  {
    Pair pair(siw(), old);  // siw: no fallback
    pair.pump();
    const CmEvent* i = pair.init.last(CmEventType::kFailed);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->failure, CmFailure::kRevisionUnsupported);
  }
  {
    MpaPolicy cxgb4 = p2p({.read = true});
    cxgb4.fallback_to_revision1 = true;
    Pair pair(cxgb4, old);
    pair.pump();
    ASSERT_TRUE(pair.init.hs.established());
    EXPECT_EQ(pair.init.hs.take_handover().params.revision, 1);
    // To a revision-1 responder the IRD/ORD words are private data.
    EXPECT_EQ(pair.resp.hs.take_handover().params.peer_private_data.size(), 4u + 2u);
  }
}

TEST(MpaHandshake, ResettingRevision1ResponderLeadsToRetryOrReset) {
  MpaPolicy old;
  old.revision = 1;
  old.on_newer_revision = OnNewerRevision::kReset;
  MpaPolicy cxgb4 = p2p({.read = true});
  cxgb4.fallback_to_revision1 = true;
  Pair pair(cxgb4, old);
  pair.pump();
  const CmEvent* r = pair.resp.last(CmEventType::kFailed);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->failure, CmFailure::kRevisionUnsupported);
  EXPECT_EQ(pair.resp.hs.close_requested(), CloseKind::kAbortive);
  pair.init.hs.on_peer_closed(/*reset=*/true, pair.now);
  pair.init.drain();
  EXPECT_NE(pair.init.last(CmEventType::kRetryRevision1), nullptr);

  Pair no_fallback(siw(), old);
  no_fallback.pump();
  no_fallback.init.hs.on_peer_closed(true, no_fallback.now);
  no_fallback.init.drain();
  ASSERT_NE(no_fallback.init.last(CmEventType::kFailed), nullptr);
  EXPECT_EQ(no_fallback.init.last(CmEventType::kFailed)->failure, CmFailure::kConnectionReset);
}

TEST(MpaHandshake, ApplicationRejectCarriesPrivateDataToTheInitiator) {
  Pair pair(siw(), siw());
  pair.reject = true;
  pair.resp_pd = {'b', 'u', 's', 'y'};
  pair.pump();
  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->failure, CmFailure::kPeerRejected);
  ASSERT_TRUE(i->peer_frame.has_value());
  EXPECT_TRUE(i->peer_frame->reject);
  EXPECT_EQ(i->peer_frame->private_data, pair.resp_pd);
  EXPECT_EQ(pair.resp.last(CmEventType::kFailed)->failure, CmFailure::kLocalRejected);
}

TEST(MpaHandshake, MarkersAreRefusedBySideThatCannotSendThem) {
  MpaPolicy wants = p2p({.write = true});
  wants.markers_wanted = true;
  Pair pair(wants, siw());
  pair.pump();
  EXPECT_EQ(pair.resp.last(CmEventType::kFailed)->failure, CmFailure::kMarkersRefused);
  EXPECT_EQ(pair.init.last(CmEventType::kFailed)->failure, CmFailure::kPeerRejected);
}

TEST(MpaHandshake, MarkersBothWaysWhenBothAskAndCan) {
  MpaPolicy strict = p2p({.send = true, .write = true, .read = true});
  strict.markers_wanted = true;
  strict.markers_supported = true;
  Pair pair(strict, strict);
  pair.pump();
  ASSERT_TRUE(pair.init.hs.established() && pair.resp.hs.established());
  const auto i = pair.init.hs.take_handover();
  EXPECT_TRUE(i.params.markers_to_peer && i.params.markers_from_peer);
  EXPECT_TRUE(i.tx_options.markers && i.rx_options.markers);
}

TEST(MpaHandshake, CrcIsUsedWhenEitherSideAsks) {
  MpaPolicy quiet = siw();
  quiet.crc = CrcMode::kOptional;
  Pair pair(quiet, siw());
  pair.pump();
  EXPECT_TRUE(pair.init.hs.take_handover().params.crc);
  Pair none(quiet, quiet);
  none.pump();
  EXPECT_FALSE(none.init.hs.take_handover().params.crc);
  MpaPolicy refuse = siw();
  refuse.crc = CrcMode::kRefuse;
  Pair refused(siw(), refuse);
  refused.pump();
  EXPECT_EQ(refused.resp.last(CmEventType::kFailed)->failure, CmFailure::kCrcRefused);
}

TEST(MpaHandshake, GarbageInsteadOfARequestIsAMalformedFrame) {
  MpaHandshake resp = MpaHandshake::responder(siw(), Clock::now());
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  resp.on_bytes(std::span(reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size()),
                Clock::now());
  auto ev = resp.poll_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->failure, CmFailure::kMalformedFrame);
  EXPECT_EQ(ev->wire_error, wire::WireError::kMpaBadKey);
  EXPECT_EQ(resp.close_requested(), CloseKind::kAbortive);
}

TEST(MpaHandshake, RequestAndReplyTimeoutsFire) {
  MpaPolicy p = siw();
  p.request_timeout = milliseconds(100);
  p.reply_timeout = milliseconds(300);
  const TimePoint t0 = Clock::now();
  MpaHandshake resp = MpaHandshake::responder(p, t0);
  resp.on_timer(t0 + milliseconds(99));
  EXPECT_FALSE(resp.poll_event().has_value());
  resp.on_timer(t0 + milliseconds(100));
  EXPECT_EQ(resp.poll_event()->failure, CmFailure::kRequestTimeout);

  MpaHandshake init = MpaHandshake::initiator(p, {}, t0);
  EXPECT_EQ(*init.next_deadline(), t0 + milliseconds(300));
  init.on_timer(t0 + milliseconds(300));
  EXPECT_EQ(init.poll_event()->failure, CmFailure::kReplyTimeout);
}

TEST(MpaHandshake, RequestSplitIntoSingleOctetsIsStillUnderstood) {
  MpaHandshake init = MpaHandshake::initiator(siw(), {'x'}, Clock::now());
  MpaHandshake resp = MpaHandshake::responder(siw(), Clock::now());
  for (std::uint8_t octet : init.take_output()) resp.on_bytes({&octet, 1}, Clock::now());
  auto ev = resp.poll_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, CmEventType::kConnectRequest);
}

TEST(MpaHandshake, BytesBehindTheRtrAreHandedOverToTheDataPath) {
  Pair pair(p2p({.write = true}), siw());
  pair.pump();
  ASSERT_TRUE(pair.resp.hs.established());
  // Nothing extra was sent; now check a responder that gets RTR + data in one read.
  MpaHandshake init = MpaHandshake::initiator(p2p({.write = true}), {}, Clock::now());
  MpaHandshake resp = MpaHandshake::responder(siw(), Clock::now());
  resp.on_bytes(init.take_output(), Clock::now());
  (void)resp.poll_event();
  resp.accept({}, Clock::now());
  init.on_bytes(resp.take_output(), Clock::now());
  ASSERT_TRUE(init.established());
  auto rtr = init.take_output();
  const std::vector<std::uint8_t> extra = {0xde, 0xad};
  rtr.insert(rtr.end(), extra.begin(), extra.end());
  resp.on_bytes(rtr, Clock::now());
  ASSERT_TRUE(resp.established());
  EXPECT_EQ(resp.take_handover().leftover, extra);
}

}  // namespace
}  // namespace rdma_interop::cm

namespace rdma_interop::cm {
namespace {

TEST(MpaHandshake, PrivateDataAboveTheResponderLimitDropsTheConnection) {
  MpaPolicy rfc = siw();
  rfc.private_data_limit = 512;
  MpaHandshake init = MpaHandshake::initiator(rfc, std::vector<std::uint8_t>(300, 'x'),
                                              Clock::now());
  MpaHandshake resp = MpaHandshake::responder(siw(), Clock::now());  // siw: 256
  resp.on_bytes(init.take_output(), Clock::now());
  auto ev = resp.poll_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->failure, CmFailure::kMalformedFrame);
  EXPECT_EQ(ev->wire_error, wire::WireError::kMpaPrivateDataTooLong);
}

}  // namespace
}  // namespace rdma_interop::cm

namespace rdma_interop::cm {
namespace {

// ---- Review findings -------------------------------------------------------------------

// RFC 6581 s3: a responder whose IRD is below the initiator's ORD raises its IRD, answers
// and lets the initiator lower its ORD (relaxed), or refuses. A strict responder refuses,
// and it knows so before it answers: its Reply is the refusal (Reject flag, RFC 5044 s7.1),
// carrying the IRD and ORD it really has. It does not accept and then send a Terminate.
TEST(MpaHandshake, StrictResponderWithIrd0RejectsInTheReplyInsteadOfAcceptingAndTerminating) {
  MpaPolicy strict = p2p({.send = true, .write = true, .read = true});
  strict.strict_ird_ord = true;
  strict.ird = 0;
  strict.ord = 16;
  MpaPolicy reader = p2p({.send = true, .write = true, .read = true});
  reader.ord = 16;
  reader.ird = 16;
  Pair pair(reader, strict);
  pair.pump();

  const CmEvent* r = pair.resp.last(CmEventType::kFailed);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->failure, CmFailure::kInsufficientIrd);
  EXPECT_FALSE(r->terminate.has_value()) << "a Terminate after an accepting Reply";
  EXPECT_NE(r->detail.find("initiator ORD 16 exceeds responder IRD 0"), std::string::npos)
      << r->detail;
  ASSERT_TRUE(pair.resp.hs.sent_frame().has_value());
  const wire::MpaFrame& reply = *pair.resp.hs.sent_frame();
  EXPECT_TRUE(reply.reject);
  ASSERT_TRUE(reply.enhanced.has_value());
  EXPECT_EQ(reply.enhanced->ird, 0);
  EXPECT_EQ(reply.enhanced->ord, 16);  // as it is: a strict side lowers nothing
  EXPECT_FALSE(reply.enhanced->peer_to_peer);

  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->failure, CmFailure::kPeerRejected);
  EXPECT_FALSE(i->terminate.has_value());
  EXPECT_NE(i->detail.find("IRD 0"), std::string::npos) << i->detail;
}

// The same when it is the strict responder's own ORD that does not fit: it could lower it
// in the Reply, but strict means it does not, so it refuses in the Reply.
TEST(MpaHandshake, StrictResponderRejectsInTheReplyWhenItsOwnOrdExceedsTheInitiatorsIrd) {
  MpaPolicy strict = siw();
  strict.strict_ird_ord = true;
  strict.ord = 64;
  MpaPolicy shallow = p2p({.write = true});
  shallow.ird = 16;
  Pair pair(shallow, strict);
  pair.pump();
  const CmEvent* r = pair.resp.last(CmEventType::kFailed);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->failure, CmFailure::kInsufficientIrd);
  EXPECT_NE(r->detail.find("responder ORD 64"), std::string::npos) << r->detail;
  EXPECT_FALSE(r->terminate.has_value());
  ASSERT_TRUE(pair.resp.hs.sent_frame().has_value());
  EXPECT_TRUE(pair.resp.hs.sent_frame()->reject);
  const CmEvent* i = pair.init.last(CmEventType::kFailed);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->failure, CmFailure::kPeerRejected);
}

// RFC 5044 s7.1 allows 512 octets of private data; in revision 2 the 4 octets of IRD/ORD
// (RFC 6581 s3) are part of them. Our own frame that cannot carry what the application
// gave is a local error, never the peer's malformed frame.
TEST(MpaHandshake, OwnPrivateDataTooLongForTheFrameIsALocalErrorNotThePeers) {
  MpaPolicy rfc;
  rfc.private_data_limit = 512;
  {
    SCOPED_TRACE("responder");
    Pair pair(rfc, rfc);
    pair.resp_pd.assign(510, 'x');  // 510 + 4 > 512
    pair.pump();
    const CmEvent* r = pair.resp.last(CmEventType::kFailed);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->failure, CmFailure::kLocalFrameInvalid) << r->detail;
    EXPECT_NE(r->detail.find("512"), std::string::npos) << r->detail;
    // The initiator hears a refusal, not a reset or a malformed Reply.
    const CmEvent* i = pair.init.last(CmEventType::kFailed);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->failure, CmFailure::kPeerRejected) << i->detail;
  }
  {
    SCOPED_TRACE("initiator");
    MpaHandshake init =
        MpaHandshake::initiator(rfc, std::vector<std::uint8_t>(509, 'x'), Clock::now());
    EXPECT_TRUE(init.take_output().empty());
    auto ev = init.poll_event();
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->type, CmEventType::kFailed);
    EXPECT_EQ(ev->failure, CmFailure::kLocalFrameInvalid) << ev->detail;
    EXPECT_EQ(failure_name(ev->failure), "local_frame_invalid");
  }
  {
    SCOPED_TRACE("508 octets fit");
    Pair pair(rfc, rfc, std::vector<std::uint8_t>(508, 'i'));
    pair.resp_pd.assign(508, 'r');
    pair.pump();
    EXPECT_TRUE(pair.init.hs.established());
    EXPECT_TRUE(pair.resp.hs.established());
  }
}

}  // namespace
}  // namespace rdma_interop::cm
