// The departures of live iWARP stacks from RFC 5044 / RFC 6581, taught to the MPA engine as
// policy (mpa_policy.h), checked octet by octet. Each test names the stack and the kernel
// function whose behaviour it models (tools/personalities/README.md cites the versions);
// expected octets are written out by hand from the RFC layout:
//   0..15 key | 16 flags M=80 C=40 R=20 E=10 res=0f | 17 Rev | 18..19 PD_Length
//   20.. [IRD word: 8000 P2P, 4000 Send RTR][ORD word: 8000 Write RTR, 4000 Read RTR]
//   erdma (Rev 0x81): 20..27 cookie and bits, outside PD_Length.
// RTRs are read back with the FPDU decoder (CRC off where octets are compared) and their DDP
// and RDMAP headers spelled out (RFC 5041 s4, RFC 5040 s4).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/cm/mpa_negotiation.h"
#include "core/wire/fpdu_decoder.h"
#include "wire_test_util.h"

namespace rdma_interop::cm {
namespace {

using std::chrono::milliseconds;
using wire::testing::Bytes;
using wire::testing::hex;
using wire::testing::to_hex;

constexpr const char* kReqKey = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65";
constexpr const char* kRepKey = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65";

Bytes frame(const char* key, const std::string& rest) {
  return hex(std::string(key) + rest);
}

// RFC 5044 s4.1: an FPDU ends in its 4-octet CRC field, zero when CRC is not in use.
const std::string kNoCrc = " 00 00 00 00";

// The stacks as their personalities model them (tools/personalities/*.json), but with CRC
// optional (not asked for) so FPDUs can be compared octet for octet.
MpaPolicy plain() {
  MpaPolicy p;
  p.crc = CrcMode::kOptional;
  return p;
}
MpaPolicy p2p(RtrSet offer) {
  MpaPolicy p = plain();
  p.peer_to_peer = PeerToPeer::kOn;
  p.rtr_offer = offer;
  return p;
}
MpaPolicy irdma() {
  MpaPolicy p = p2p({.write = true, .read = true});
  p.peer_to_peer = PeerToPeer::kRequired;
  p.rtr_preference = {RtrType::kRead, RtrType::kWrite};
  p.rtr_from_reply = RtrFromReply::kPreference;
  p.read_rtr_sink_stag = 0xabcd;
  p.read_rtr_source_stag = 0x1234;
  p.ird = 127;
  p.ord = 255;
  p.refuse_with = Refusal::kReset;
  p.on_newer_revision = OnNewerRevision::kReset;
  p.ird_ord_sentinel = true;
  return p;
}
MpaPolicy cxgb4(RtrType own = RtrType::kRead) {
  MpaPolicy p = p2p({.write = own == RtrType::kWrite, .read = own == RtrType::kRead});
  p.rtr_accepted = RtrSet{.write = true, .read = true};
  p.rtr_preference = {RtrType::kWrite, RtrType::kRead};
  p.rtr_reply = RtrReply::kOwn;
  p.no_common_rtr = NoCommonRtr::kDecline;
  p.rtr_in_revision1 = true;
  p.read_rtr_sink_stag = p.read_rtr_source_stag = 1;
  p.ird = p.ord = 32;
  return p;
}
MpaPolicy qedr() {
  MpaPolicy p = p2p({.send = true, .write = true, .read = true});
  p.rtr_reply = RtrReply::kAllCommon;
  p.no_common_rtr = NoCommonRtr::kOfferAll;
  p.rtr_check = RtrCheck::kAny;
  p.rtr_from_reply = RtrFromReply::kPreference;
  return p;
}
MpaPolicy siw() {
  MpaPolicy p = plain();
  p.rtr_offer = {.write = true, .read = true};
  p.rtr_preference = {RtrType::kWrite, RtrType::kRead};
  p.no_common_rtr = NoCommonRtr::kPropose;
  p.rtr_check = RtrCheck::kAny;
  p.on_newer_revision = OnNewerRevision::kClose;
  p.on_malformed_frame = OnMalformed::kClose;
  p.echo_reserved_bits = true;
  p.private_data_limit = 256;
  return p;
}
MpaPolicy erdma() {
  MpaPolicy p;
  p.revision = wire::kMpaRevisionErdma;
  p.crc = CrcMode::kRefuse;
  p.peer_to_peer = PeerToPeer::kOff;
  p.rtr_offer = {};
  p.on_newer_revision = OnNewerRevision::kClose;
  p.on_malformed_frame = OnMalformed::kClose;
  p.echo_reserved_bits = true;
  p.private_data_limit = 256;
  return p;
}

std::vector<CmEvent> drain(MpaHandshake& hs) {
  std::vector<CmEvent> out;
  while (auto ev = hs.poll_event()) out.push_back(*ev);
  return out;
}

std::optional<CmEvent> failed(const std::vector<CmEvent>& events) {
  for (const auto& ev : events) {
    if (ev.type == CmEventType::kFailed) return ev;
  }
  return std::nullopt;
}

// A responder fed `request`; accepts it when it asks. Returns what it sent back.
struct Answered {
  MpaHandshake hs;
  Bytes out;
  std::vector<CmEvent> events;
};
Answered answer(const MpaPolicy& policy, const Bytes& request) {
  const TimePoint now = Clock::now();
  Answered a{MpaHandshake::responder(policy, now), {}, {}};
  a.hs.on_bytes(request, now);
  auto events = drain(a.hs);
  a.events.insert(a.events.end(), events.begin(), events.end());
  for (const auto& ev : events) {
    if (ev.type == CmEventType::kConnectRequest) a.hs.accept({}, now);
  }
  events = drain(a.hs);
  a.events.insert(a.events.end(), events.begin(), events.end());
  a.out = a.hs.take_output();
  return a;
}

// The ULPDUs in an FPDU stream (no markers), each as hex.
std::vector<std::string> ulpdus(const Bytes& stream, bool crc) {
  wire::FpduDecoder decoder(wire::FpduOptions{.crc = crc, .markers = false});
  std::vector<std::string> out;
  std::size_t used = 0;
  while (used < stream.size()) {
    auto step = decoder.step(std::span(stream).subspan(used));
    if (!step || step->consumed == 0) break;
    used += step->consumed;
    if (step->ulpdu) out.push_back(to_hex(*step->ulpdu));
  }
  return out;
}

// Untagged DDP header (RFC 5041 s4.3) with the RDMAP control octet: L, DV 1, RV 1, opcode;
// RsvdULP 0, QN, MSN, MO 0.
std::string untagged(std::uint8_t opcode, std::uint32_t qn, std::uint32_t msn) {
  char buf[96];
  std::snprintf(buf, sizeof buf,
                "41 %02x 00 00 00 00 %02x %02x %02x %02x %02x %02x %02x %02x 00 00 00 00",
                0x40 | opcode, qn >> 24, (qn >> 16) & 0xff, (qn >> 8) & 0xff, qn & 0xff, msn >> 24,
                (msn >> 16) & 0xff, (msn >> 8) & 0xff, msn & 0xff);
  return buf;
}

// ---- irdma: peer-to-peer required, every refusal a TCP reset (irdma_negotiate_mpa_v2_ird_ord,
// irdma_handle_rcv_mpa -> irdma_passive_open_err/irdma_active_open_err with reset) -------------

TEST(IrdmaPolicy, ARevision2RequestWithoutPeerToPeerIsResetWithoutAReply) {
  // Rev 2, E, PD_Length 4: IRD 16 (no P2P), ORD 16.
  auto a = answer(irdma(), frame(kReqKey, " 10 02 00 04 00 10 00 10"));
  EXPECT_TRUE(a.out.empty()) << to_hex(a.out);
  EXPECT_EQ(a.hs.close_requested(), CloseKind::kAbortive);
  auto f = failed(a.events);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kPeerToPeerRequired);
  EXPECT_NE(f->detail.find("TCP reset"), std::string::npos) << f->detail;
}

TEST(IrdmaPolicy, ARevision1RequestCarriesNoFlagAndIsAnswered) {
  auto a = answer(irdma(), frame(kReqKey, " 40 01 00 00"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 40 01 00 00")));
  EXPECT_TRUE(a.hs.established());
}

TEST(IrdmaPolicy, PicksReadThenWriteAndNamesOnlyThatOne) {
  // P2P offering Write and Read; IRD 16, ORD 16. Reply: P2P|IRD 127, Read|ORD min(255, 16).
  auto a = answer(irdma(), frame(kReqKey, " 10 02 00 04 80 10 c0 10"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 80 7f 40 10")));
  // Write alone: Write.
  auto w = answer(irdma(), frame(kReqKey, " 10 02 00 04 80 10 80 10"));
  EXPECT_EQ(to_hex(w.out), to_hex(frame(kRepKey, " 10 02 00 04 80 7f 80 10")));
}

TEST(IrdmaPolicy, NoWriteOrReadOfferedIsResetNotTerminated) {
  // P2P with only a Send RTR: -EOPNOTSUPP, so a reset and no MPA code 0x07.
  auto a = answer(irdma(), frame(kReqKey, " 10 02 00 04 c0 10 00 10"));
  EXPECT_TRUE(a.out.empty()) << to_hex(a.out);
  EXPECT_EQ(a.hs.close_requested(), CloseKind::kAbortive);
  EXPECT_EQ(failed(a.events)->failure, CmFailure::kNoMatchingRtr);
  EXPECT_FALSE(failed(a.events)->terminate.has_value());
}

TEST(IrdmaPolicy, IrdOrOrd0x3fffMeansNoNegotiationAndIsAnsweredInKind) {
  // IETF_NO_IRD_ORD: IRD 0x3fff, ORD 1 (what rdma-probe offers). Reply: 0x3fff both, P2P, Read.
  auto a = answer(irdma(), frame(kReqKey, " 10 02 00 04 bf ff c0 01"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 bf ff 7f ff")));
  EXPECT_TRUE(a.hs.take_handover().params.ord == 255);  // nothing lowered
}

TEST(IrdmaPolicy, AsInitiatorAReplyWithoutPeerToPeerIsResetWithoutATerminate) {
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(irdma(), {}, now);
  // The Request: E, P2P|IRD 127, Write|Read|ORD 255.
  EXPECT_EQ(to_hex(init.take_output()), to_hex(frame(kReqKey, " 10 02 00 04 80 7f c0 ff")));
  init.on_bytes(frame(kRepKey, " 10 02 00 04 00 10 00 10"), now);
  auto f = failed(drain(init));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kPeerToPeerRequired);
  EXPECT_TRUE(init.take_output().empty());
  EXPECT_EQ(init.close_requested(), CloseKind::kAbortive);
}

TEST(IrdmaPolicy, ReadsAReplyNamingWriteAndReadAsReadAndSendsItsOwnStags) {
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(irdma(), {}, now);
  init.take_output();
  init.on_bytes(frame(kRepKey, " 10 02 00 04 80 20 c0 20"), now);  // qed's multi-type Reply
  const auto rtr = ulpdus(init.take_output(), false);
  ASSERT_EQ(rtr.size(), 1u);
  // Read Request, QN 1, MSN 1; sink STag 0xabcd TO 0, size 0, source STag 0x1234 TO 0
  // (irdma_sc_send_rtt()).
  EXPECT_EQ(rtr[0],
            to_hex(hex(untagged(0x01, 1, 1) + " 00 00 ab cd 00 00 00 00 00 00 00 00 00 00 00 00"
                                              " 00 00 12 34 00 00 00 00 00 00 00 00")));
}

// ---- iw_cxgb4: its Reply names its own p2p_type (send_mpa_reply), it takes Write first from the
// Request (process_mpa_request), and an offer of neither gets no peer-to-peer -----------------

TEST(Cxgb4Policy, ReplyNamesItsOwnReadWhileItWaitsForTheWriteItPicked) {
  // Offer Write and Read: it picks Write, but the Reply says Read (ORD word 4000).
  auto a = answer(cxgb4(), frame(kReqKey, " 10 02 00 04 80 10 c0 10"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 80 20 40 10")));
  ASSERT_FALSE(a.hs.finished());
  // An initiator that obeys the Reply sends a Read RTR; the adapter was set up for a Write.
  const Bytes read_rtr = hex("00 2e" + std::string(" ") + untagged(0x01, 1, 1) +
                             " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                             " 00 00 00 00 00 00 00 00 00 00 00 00" +
                             kNoCrc);
  a.hs.on_bytes(read_rtr, Clock::now());
  auto f = failed(drain(a.hs));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kRtrMismatch);
  EXPECT_EQ(*f->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x07}));
}

TEST(Cxgb4Policy, ASendOnlyOfferIsAnsweredWithoutPeerToPeer) {
  auto a = answer(cxgb4(), frame(kReqKey, " 10 02 00 04 c0 10 00 10"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 00 20 00 10")));
  EXPECT_TRUE(a.hs.established());  // no RTR awaited
  EXPECT_FALSE(a.hs.take_handover().params.peer_to_peer);
}

TEST(Cxgb4Policy, InRevision1ItStillSendsItsReadRtrWithStagsOneAndOne) {
  MpaPolicy rev1 = cxgb4();
  rev1.revision = 1;
  rev1.peer_to_peer = PeerToPeer::kOff;
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(rev1, {}, now);
  EXPECT_EQ(to_hex(init.take_output()), to_hex(frame(kReqKey, " 00 01 00 00")));
  init.on_bytes(frame(kRepKey, " 00 01 00 00"), now);
  const auto rtr = ulpdus(init.take_output(), false);
  ASSERT_EQ(rtr.size(), 1u);
  EXPECT_EQ(rtr[0],
            to_hex(hex(untagged(0x01, 1, 1) + " 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00"
                                              " 00 00 00 01 00 00 00 00 00 00 00 00")));
  EXPECT_FALSE(init.established());  // the zero-length Read Response ends the setup
  // Tagged Read Response, L, to sink STag 1 TO 0, no payload.
  init.on_bytes(hex("00 0e c1 42 00 00 00 01 00 00 00 00 00 00 00 00 00 00" + kNoCrc), now);
  EXPECT_TRUE(init.established());
  const auto h = init.take_handover();
  EXPECT_TRUE(h.params.peer_to_peer);
  EXPECT_EQ(h.params.rtr, RtrType::kRead);
  EXPECT_EQ(h.sequence.next_read_msn_tx, 2u);
}

TEST(Cxgb4Policy, AsARevision1ResponderItWaitsForItsReadRtr) {
  auto a = answer(cxgb4(), frame(kReqKey, " 00 01 00 00"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 00 01 00 00")));
  EXPECT_FALSE(a.hs.finished());
  ASSERT_TRUE(a.hs.next_deadline().has_value());  // rtr_timeout
  // A revision-1 initiator sends no RTR: its first message is a Send of "hi" (ULPDU_Length
  // 20, two octets of pad).
  a.hs.on_bytes(hex("00 14 " + untagged(0x03, 0, 1) + " 68 69 00 00" + kNoCrc), Clock::now());
  auto f = failed(drain(a.hs));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kRtrMismatch);
}

// ---- qed: the Reply names every common type (qed_iwarp_mpa_received), all of its own when
// nothing is common ----------------------------------------------------------------------------

TEST(QedrPolicy, ReplyNamesEveryTypeBothOfferAndItsWholeSetWhenNoneIsCommon) {
  auto a = answer(qedr(), frame(kReqKey, " 10 02 00 04 80 10 c0 10"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 80 10 c0 10")));
  MpaPolicy write_only = qedr();
  write_only.rtr_offer = {.write = true};
  auto b = answer(write_only, frame(kReqKey, " 10 02 00 04 c0 10 00 10"));  // Send only
  EXPECT_EQ(to_hex(b.out), to_hex(frame(kRepKey, " 10 02 00 04 80 10 80 10")));
}

TEST(QedrPolicy, AnExactInitiatorRefusesAMultiTypeReplyWithTerminate0x07) {
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(p2p({.write = true, .read = true}), {}, now);
  init.take_output();
  init.on_bytes(frame(kRepKey, " 10 02 00 04 80 10 c0 10"), now);
  auto f = failed(drain(init));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kNoMatchingRtr);
  EXPECT_EQ(*f->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x07}));
  // The Terminate went out as an FPDU: RDMAP Terminate on QN 2, MSN 1, LLP/MPA/0x07.
  const auto sent = ulpdus(init.take_output(), false);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].substr(0, 3 * 22 - 1), to_hex(hex(untagged(0x07, 2, 1) + " 20 07 00 00")));
}

TEST(QedrPolicy, TakesAnyZeroLengthOperationAsTheRtr) {
  const TimePoint now = Clock::now();
  auto a = answer(qedr(), frame(kReqKey, " 10 02 00 04 80 10 c0 10"));
  ASSERT_FALSE(a.hs.finished());
  // A zero-length Write.
  a.hs.on_bytes(hex("00 0e c1 40 00 00 00 00 00 00 00 00 00 00 00 00 00 00" + kNoCrc), now);
  EXPECT_TRUE(a.hs.established());
  EXPECT_EQ(a.hs.take_handover().params.rtr, RtrType::kWrite);
}

// ---- siw: names Write to an offer of neither Write nor Read (siw_proc_mpareq), echoes the
// Request's header bits, closes a revision above 2 and a malformed frame -------------------

TEST(SiwPolicy, ProposesWriteToASendOnlyOffer) {
  auto a = answer(siw(), frame(kReqKey, " 10 02 00 04 c0 10 00 10"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 10 02 00 04 80 10 80 10")));
  EXPECT_FALSE(a.hs.finished());  // it waits for whatever comes first
}

TEST(SiwPolicy, EchoesReservedBitsIncludingItsOwnGsoBit) {
  auto a = answer(siw(), frame(kReqKey, " 0b 01 00 00"));  // GSO_EXP 0x08 and 0x03
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 0b 01 00 00")));
  MpaPolicy gso = plain();
  gso.extension_bits = wire::kMpaFlagGsoExp;  // siw built with try_gso
  auto init = MpaHandshake::initiator(gso, {}, Clock::now());
  EXPECT_EQ(to_hex(init.take_output()), to_hex(frame(kReqKey, " 18 02 00 04 00 10 00 10")));
}

TEST(SiwPolicy, ClosesANewerRevisionAndAnOversizedRequestWithoutAReply) {
  auto rev3 = answer(siw(), frame(kReqKey, " 40 03 00 00"));
  EXPECT_TRUE(rev3.out.empty());
  EXPECT_EQ(rev3.hs.close_requested(), CloseKind::kGraceful);
  EXPECT_EQ(failed(rev3.events)->failure, CmFailure::kRevisionUnsupported);
  auto big = answer(siw(), frame(kReqKey, " 40 01 01 01"));  // PD_Length 257
  EXPECT_TRUE(big.out.empty());
  EXPECT_EQ(big.hs.close_requested(), CloseKind::kGraceful);
  EXPECT_EQ(failed(big.events)->failure, CmFailure::kMalformedFrame);
}

// ---- erdma: revision 129 with its extension; standard peers and erdma do not meet ----------

TEST(ErdmaPolicy, TwoErdmaPeersSpeakRevision129) {
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(erdma(), {'h', 'i'}, now);
  const Bytes request = init.take_output();
  // No C (it refuses CRC), Rev 0x81, PD_Length 2 (the extension is outside it).
  EXPECT_EQ(to_hex(request), to_hex(frame(kReqKey, " 00 81 00 02 00 00 00 00 00 00 00 00 68 69")));
  auto a = answer(erdma(), request);
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 00 81 00 00 00 00 00 00 00 00 00 00")));
  EXPECT_TRUE(a.hs.established());
  init.on_bytes(a.out, now);
  ASSERT_TRUE(init.established());
  const auto p = init.take_handover().params;
  EXPECT_EQ(p.revision, wire::kMpaRevisionErdma);
  EXPECT_FALSE(p.crc || p.enhanced || p.peer_to_peer);
}

TEST(ErdmaPolicy, RefusesCrcWithARejectCarryingItsExtension) {
  auto a = answer(erdma(), frame(kReqKey, " 40 81 00 00 00 00 00 07 00 00 00 01"));
  EXPECT_EQ(to_hex(a.out), to_hex(frame(kRepKey, " 20 81 00 00 00 00 00 00 00 00 00 00")));
  EXPECT_EQ(failed(a.events)->failure, CmFailure::kCrcRefused);
}

TEST(ErdmaPolicy, AStandardRequestIsClosedWithoutAReply) {
  auto a = answer(erdma(), frame(kReqKey, " 10 02 00 04 00 10 00 10"));
  EXPECT_TRUE(a.out.empty());
  EXPECT_EQ(a.hs.close_requested(), CloseKind::kGraceful);
  EXPECT_EQ(failed(a.events)->failure, CmFailure::kRevisionUnsupported);
}

TEST(ErdmaPolicy, StandardRespondersAnswerRevision129AsTheirPolicySays) {
  const Bytes request = frame(kReqKey, " 00 81 00 00 00 00 00 00 00 00 00 00");
  auto reset = answer(irdma(), request);
  EXPECT_TRUE(reset.out.empty());
  EXPECT_EQ(reset.hs.close_requested(), CloseKind::kAbortive);
  auto closed = answer(siw(), request);
  EXPECT_TRUE(closed.out.empty());
  EXPECT_EQ(closed.hs.close_requested(), CloseKind::kGraceful);
  // RFC 5044 s7.1: answered in its own revision; the rest of the frame is unreadable, so it
  // closes after the answer.
  auto replied = answer(plain(), request);
  EXPECT_EQ(to_hex(replied.out), to_hex(frame(kRepKey, " 10 02 00 04 00 10 00 10")));
  EXPECT_EQ(replied.hs.close_requested(), CloseKind::kGraceful);
  EXPECT_EQ(failed(replied.events)->failure, CmFailure::kRevisionUnsupported);
  // And erdma, answered in revision 2, gives up.
  const TimePoint now = Clock::now();
  auto init = MpaHandshake::initiator(erdma(), {}, now);
  init.take_output();
  init.on_bytes(replied.out, now);
  EXPECT_EQ(failed(drain(init))->failure, CmFailure::kRevisionUnsupported);
  EXPECT_EQ(init.close_requested(), CloseKind::kGraceful);
}

// ---- The zero-length Read RTR and STag 0 -------------------------------------------------------

TEST(ReadRtrPolicy, ARefuserTerminatesAReadRtrNamingSourceStag0) {
  MpaPolicy refuser = p2p({.read = true});
  refuser.refuse_zero_stag_read_rtr = true;
  auto a = answer(refuser, frame(kReqKey, " 10 02 00 04 80 10 40 10"));
  ASSERT_FALSE(a.hs.finished());
  const std::string zero_stags = untagged(0x01, 1, 1) +
                                 " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                                 " 00 00 00 00 00 00 00 00 00 00 00 00";
  a.hs.on_bytes(hex("00 2e " + zero_stags + kNoCrc), Clock::now());
  auto f = failed(drain(a.hs));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->failure, CmFailure::kRtrRefused);
  // RDMAP, remote protection error, invalid STag (RFC 5040 s7.2).
  EXPECT_EQ(*f->terminate, (wire::TerminateCause{wire::TermLayer::kRdmap, 1, 0x00}));
  const auto sent = ulpdus(a.hs.take_output(), false);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].substr(0, 3 * 22 - 1), to_hex(hex(untagged(0x07, 2, 1) + " 01 00 00 00")));

  // siw's Read RTR (sink 0, source 1) gets its Response.
  auto b = answer(refuser, frame(kReqKey, " 10 02 00 04 80 10 40 10"));
  b.hs.on_bytes(hex("00 2e " + untagged(0x01, 1, 1) +
                    " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                    " 00 00 00 01 00 00 00 00 00 00 00 00" +
                    kNoCrc),
                Clock::now());
  EXPECT_TRUE(b.hs.established());
  EXPECT_EQ(ulpdus(b.hs.take_output(), false),
            (std::vector<std::string>{to_hex(hex("c1 42 00 00 00 00 00 00 00 00 00 00 00 00"))}));
}

// ---- The four pairings the matrix meets, end to end --------------------------------------------

struct Pair {
  MpaHandshake init;
  MpaHandshake resp;
  std::vector<CmEvent> init_events, resp_events;
  Pair(const MpaPolicy& i, const MpaPolicy& r)
      : init(MpaHandshake::initiator(i, {}, Clock::now())),
        resp(MpaHandshake::responder(r, Clock::now())) {
    const TimePoint now = Clock::now();
    for (int round = 0; round < 10; ++round) {
      auto a = init.take_output();
      if (!a.empty() && !resp.finished()) resp.on_bytes(a, now);
      for (auto& ev : drain(resp)) {
        if (ev.type == CmEventType::kConnectRequest) resp.accept({}, now);
        resp_events.push_back(ev);
      }
      for (auto& ev : drain(resp)) resp_events.push_back(ev);
      auto b = resp.take_output();
      if (!b.empty() && !init.finished()) init.on_bytes(b, now);
      for (auto& ev : drain(init)) init_events.push_back(ev);
      if (a.empty() && b.empty()) break;
    }
  }
};

TEST(StackPairs, IrdmaMeetsQedrOnRead) {
  Pair p(irdma(), qedr());
  ASSERT_TRUE(p.init.established() && p.resp.established());
  EXPECT_EQ(p.init.take_handover().params.rtr, RtrType::kRead);
  EXPECT_EQ(p.resp.take_handover().params.rtr, RtrType::kRead);
}

TEST(StackPairs, Cxgb4WriteMeetsCxgb4ReadAndBothSeeNoMatchingRtr) {
  // cxgb4 (Read) picks the Write its peer offers, names Read; the Write-only initiator
  // Terminates with 0x07 (process_mpa_reply: "RTR mismatch, sending TERM").
  Pair p(cxgb4(RtrType::kWrite), cxgb4(RtrType::kRead));
  auto fi = failed(p.init_events);
  auto fr = failed(p.resp_events);
  ASSERT_TRUE(fi && fr);
  EXPECT_EQ(fi->failure, CmFailure::kNoMatchingRtr);
  EXPECT_EQ(*fi->terminate, (wire::TerminateCause{wire::TermLayer::kLlp, 0, 0x07}));
  EXPECT_EQ(fr->failure, CmFailure::kNoMatchingRtr);
}

TEST(StackPairs, IrdmaMeetsCxgb4ReadOnlyWhenItsOwnTypeIsRead) {
  // irdma offers Write and Read: cxgb4 picks Write, names Read; irdma obeys the Reply.
  Pair p(irdma(), cxgb4(RtrType::kRead));
  auto fr = failed(p.resp_events);
  ASSERT_TRUE(fr.has_value());
  EXPECT_EQ(fr->failure, CmFailure::kRtrMismatch);
}

TEST(StackPairs, SiwInitiatorWithoutPeerToPeerMeetsIrdmaAsAReset) {
  Pair p(siw(), irdma());
  EXPECT_EQ(failed(p.resp_events)->failure, CmFailure::kPeerToPeerRequired);
  EXPECT_EQ(p.resp.close_requested(), CloseKind::kAbortive);
  EXPECT_FALSE(p.init.finished());  // it learns of it from the reset
  p.init.on_peer_closed(true, Clock::now());
  EXPECT_EQ(failed(drain(p.init))->failure, CmFailure::kConnectionReset);
}

}  // namespace
}  // namespace rdma_interop::cm
