// The TCP-shaped setup of a stream (core/stream/upgrade.h, plain_peer_cache.h): the OFFER and
// ANSWER octet by octet and every error, every decision of both engines whole and one octet at
// a time, the plain-peer cache's expiry and bound, and real sockets on 127.0.0.1: plain TCP
// servers (one speaks first, one waits, one answers garbage) against UpgradeClient, a plain
// client against UpgradeServer with every octet it sent kept, and the two engines upgrading.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/stream/plain_peer_cache.h"
#include "core/stream/upgrade.h"
#include "loopback_socket.h"

namespace rdma_interop::stream {
namespace {

using namespace std::chrono_literals;
using Octets = std::vector<std::uint8_t>;

const TimePoint t0{};

Octets octets(std::string_view s) {
  return Octets(s.begin(), s.end());
}
Octets join(Octets a, const Octets& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

EndpointId id_of(std::uint8_t first) {
  EndpointId id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(first + i);
  return id;
}

Offer sample_offer() {
  Offer o;
  o.client_id = id_of(0x10);
  o.nonce = 0x0102030405060708;
  o.providers = {"tcp", "verbs"};
  return o;
}

Answer upgrade_answer(const Offer& o, std::string uri = "tcp://198.18.0.1:41234") {
  Answer a;
  a.status = AnswerStatus::kUpgrade;
  a.server_id = id_of(0xA0);
  a.nonce = o.nonce;
  a.uri = std::move(uri);
  return a;
}

Answer decline_answer(const Offer& o) {
  Answer a;
  a.server_id = id_of(0xA0);
  a.nonce = o.nonce;
  return a;
}

ServerOptions server_options() {
  ServerOptions s;
  s.server_id = id_of(0xA0);
  s.listeners = {"verbs://198.18.0.1:41235", "tcp://198.18.0.1:41234"};
  return s;
}

// ---- codec ----------------------------------------------------------------------------

TEST(StreamUpgradeCodec, OfferLaysOutTheFieldsInNetworkOrder) {
  const Octets wire = encode_offer(sample_offer());
  Octets expected = octets("RDMASTRM");
  expected.insert(expected.end(), {1, 0, 0, 0});
  for (std::uint8_t i = 0; i < 16; ++i) expected.push_back(static_cast<std::uint8_t>(0x10 + i));
  expected.insert(expected.end(), {1, 2, 3, 4, 5, 6, 7, 8, 0, 9});
  expected = join(expected, octets("tcp,verbs"));
  EXPECT_EQ(wire, expected);
}

TEST(StreamUpgradeCodec, AnswerLaysOutTheFieldsInNetworkOrder) {
  const Octets wire = encode_answer(upgrade_answer(sample_offer(), "tcp://h:1"));
  Octets expected = octets("RDMASTRM");
  expected.insert(expected.end(), {1, 0});
  for (std::uint8_t i = 0; i < 16; ++i) expected.push_back(static_cast<std::uint8_t>(0xA0 + i));
  expected.insert(expected.end(), {1, 2, 3, 4, 5, 6, 7, 8, 0, 9});
  expected = join(expected, octets("tcp://h:1"));
  EXPECT_EQ(wire, expected);
}

TEST(StreamUpgradeCodec, OfferRoundTripsWithFlagsAndAnEmptyList) {
  for (Offer o : {sample_offer(), Offer{}}) {
    o.flags = 0x81;
    const Octets wire = join(encode_offer(o), octets("after"));
    auto d = decode_offer(wire);
    ASSERT_TRUE(d) << error_name(d.error());
    EXPECT_EQ(d->message, o);
    EXPECT_EQ(d->size, wire.size() - 5);
  }
}

TEST(StreamUpgradeCodec, AnswerRoundTripsBothStatuses) {
  for (const Answer& a : {upgrade_answer(sample_offer()), decline_answer(sample_offer())}) {
    const Octets wire = join(encode_answer(a), octets("x"));
    auto d = decode_answer(wire);
    ASSERT_TRUE(d) << error_name(d.error());
    EXPECT_EQ(d->message, a);
    EXPECT_EQ(d->size, wire.size() - 1);
  }
}

TEST(StreamUpgradeCodec, EveryProperPrefixIsTruncated) {
  const Octets offer = encode_offer(sample_offer());
  const Octets answer = encode_answer(upgrade_answer(sample_offer()));
  for (std::size_t n = 0; n < offer.size(); ++n) {
    auto d = decode_offer(std::span(offer).first(n));
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error(), UpgradeError::kTruncated) << n;
  }
  for (std::size_t n = 0; n < answer.size(); ++n) {
    auto d = decode_answer(std::span(answer).first(n));
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error(), UpgradeError::kTruncated) << n;
  }
}

TEST(StreamUpgradeCodec, AnOctetOffTheMagicAnywhereIsBadMagicAtOnce) {
  for (std::size_t at = 0; at < kUpgradeMagic.size(); ++at) {
    Octets wire(kUpgradeMagic.begin(), kUpgradeMagic.begin() + static_cast<std::ptrdiff_t>(at));
    wire.push_back('x');
    EXPECT_EQ(decode_offer(wire).error(), UpgradeError::kBadMagic) << at;
    EXPECT_EQ(decode_answer(wire).error(), UpgradeError::kBadMagic) << at;
  }
  EXPECT_EQ(decode_offer(octets("GET / HTTP/1.1\r\n")).error(), UpgradeError::kBadMagic);
}

TEST(StreamUpgradeCodec, OfferFieldErrors) {
  Octets wire = encode_offer(sample_offer());
  Octets bad = wire;
  bad[8] = 2;
  EXPECT_EQ(decode_offer(std::span(bad).first(9)).error(), UpgradeError::kBadVersion);
  bad = wire;
  bad[11] = 1;
  EXPECT_EQ(decode_offer(bad).error(), UpgradeError::kReservedNotZero);
  bad = wire;
  bad[36] = 0x01;  // 0x0109 = 265 > 256: refused as soon as the length is in
  bad[37] = 0x01;
  EXPECT_EQ(decode_offer(std::span(bad).first(kOfferFixedSize)).error(), UpgradeError::kTooLong);
  for (std::string list : {"tcp,,verbs", "tcp,", ",tcp", "1tcp", "tc p", "t\xc3\xa9p", "tcp\n"}) {
    Offer o = sample_offer();
    o.providers = {list};
    EXPECT_EQ(decode_offer(encode_offer(o)).error(), UpgradeError::kBadProviders) << list;
  }
  Offer longest;
  longest.providers = {std::string(kMaxProvidersLength, 'a')};
  EXPECT_TRUE(decode_offer(encode_offer(longest)));
  longest.providers[0] += 'a';
  EXPECT_EQ(decode_offer(encode_offer(longest)).error(), UpgradeError::kTooLong);
}

TEST(StreamUpgradeCodec, AnswerFieldErrors) {
  Octets bad = encode_answer(decline_answer(sample_offer()));
  bad[9] = 2;
  EXPECT_EQ(decode_answer(std::span(bad).first(10)).error(), UpgradeError::kBadStatus);
  Answer a = decline_answer(sample_offer());
  a.uri = "tcp://h:1";
  EXPECT_EQ(decode_answer(encode_answer(a)).error(), UpgradeError::kUriOnDecline);
  for (std::string uri : {"", "tcp:/h", "://h", "tcp://h h", "tcp://h\x7f", "9p://h"}) {
    EXPECT_EQ(decode_answer(encode_answer(upgrade_answer(sample_offer(), uri))).error(),
              UpgradeError::kBadUri)
        << uri;
  }
  const std::string longest = "tcp://" + std::string(kMaxUriLength - 6, 'h');
  EXPECT_TRUE(decode_answer(encode_answer(upgrade_answer(sample_offer(), longest))));
  EXPECT_EQ(decode_answer(encode_answer(upgrade_answer(sample_offer(), longest + "h"))).error(),
            UpgradeError::kTooLong);
}

TEST(StreamUpgradeCodec, CheckAnswerWantsOurNonceAndAnOfferedScheme) {
  const Offer o = sample_offer();
  EXPECT_TRUE(check_answer(upgrade_answer(o, "TCP://h:1"), o));  // schemes ignore case
  EXPECT_TRUE(check_answer(decline_answer(o), o));
  Answer a = upgrade_answer(o);
  a.nonce ^= 1;
  EXPECT_EQ(check_answer(a, o).error(), UpgradeError::kNonceMismatch);
  EXPECT_EQ(check_answer(upgrade_answer(o, "iwarp://h:1"), o).error(),
            UpgradeError::kUriNotOffered);
}

TEST(StreamUpgradeCodec, NamesAndSentences) {
  for (int e = 0; e <= static_cast<int>(UpgradeError::kOfferCut); ++e) {
    EXPECT_NE(error_name(static_cast<UpgradeError>(e)), "unknown") << e;
    EXPECT_NE(describe(static_cast<UpgradeError>(e)), "unknown stream upgrade error") << e;
  }
  std::ostringstream os;
  os << sample_offer() << " " << upgrade_answer(sample_offer());
  EXPECT_EQ(os.str(),
            "offer{client=101112131415161718191a1b1c1d1e1f nonce=0x102030405060708 "
            "providers=tcp,verbs flags=0x00} answer{upgrade "
            "server=a0a1a2a3a4a5a6a7a8a9aaabacadaeaf nonce=0x102030405060708 "
            "uri=tcp://198.18.0.1:41234}");
}

// ---- client ---------------------------------------------------------------------------

TEST(StreamUpgradeClient, SendsItsOfferOnceAndUpgradesOnAnAnswer) {
  UpgradeClient c(sample_offer(), {}, t0);
  EXPECT_EQ(c.take_output(), encode_offer(sample_offer()));
  EXPECT_TRUE(c.take_output().empty());
  EXPECT_EQ(c.next_deadline(), t0 + 200ms);
  c.on_bytes(encode_answer(upgrade_answer(sample_offer())), t0 + 1ms);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->outcome, ClientOutcome::kUpgrade);
  EXPECT_EQ(c.decision()->answer, upgrade_answer(sample_offer()));
  EXPECT_TRUE(c.decision()->peer_octets.empty());
  EXPECT_EQ(c.next_deadline(), std::nullopt);
}

TEST(StreamUpgradeClient, ADeclineKeepsTheServersFirstOctets) {
  UpgradeClient c(sample_offer(), {}, t0);
  (void)c.take_output();
  c.on_bytes(join(encode_answer(decline_answer(sample_offer())), octets("220 hello\r\n")), t0);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->outcome, ClientOutcome::kDeclined);
  EXPECT_EQ(c.decision()->peer_octets, octets("220 hello\r\n"));
}

TEST(StreamUpgradeClient, AnyCutOfTheAnswerGivesTheSameDecision) {
  const std::size_t message = encode_answer(upgrade_answer(sample_offer())).size();
  const Octets wire = join(encode_answer(upgrade_answer(sample_offer())), octets("tail"));
  UpgradeClient whole(sample_offer(), {}, t0);
  whole.on_bytes(wire, t0);
  for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
    UpgradeClient c(sample_offer(), {}, t0);
    c.on_bytes(std::span(wire).first(cut), t0);
    c.on_bytes(std::span(wire).subspan(cut), t0);
    // Octets behind the ANSWER come with the decision as far as the chunk that completed it
    // went; later ones are the driver's to read.
    ClientDecision expected = *whole.decision();
    const std::size_t end = cut < message ? wire.size() : cut;
    expected.peer_octets.assign(wire.begin() + static_cast<std::ptrdiff_t>(message),
                                wire.begin() + static_cast<std::ptrdiff_t>(end));
    EXPECT_EQ(c.decision(), expected) << cut;
  }
  UpgradeClient bytewise(sample_offer(), {}, t0);
  for (std::uint8_t b : wire) bytewise.on_bytes(std::span(&b, 1), t0);
  // One octet at a time, the decision comes with the ANSWER's last octet: "tail" is the
  // driver's to read afterwards.
  ASSERT_TRUE(bytewise.decision());
  EXPECT_EQ(bytewise.decision()->answer, whole.decision()->answer);
  EXPECT_TRUE(bytewise.decision()->peer_octets.empty());
}

TEST(StreamUpgradeClient, OtherOctetsAfterTheOfferAreAPlainPeerButNoBanner) {
  UpgradeClient c(sample_offer(), {.min_round_trip = 1ms}, t0);
  (void)c.take_output();
  c.on_bytes(octets("HTTP/1.0 400 Bad request\r\n"), t0 + 2ms);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->outcome, ClientOutcome::kPlainPeer);
  EXPECT_EQ(c.decision()->reason, PlainPeerReason::kOtherOctets);
  EXPECT_FALSE(c.decision()->banner);
  EXPECT_EQ(c.decision()->peer_octets, octets("HTTP/1.0 400 Bad request\r\n"));
}

TEST(StreamUpgradeClient, OctetsSoonerThanARoundTripAreABanner) {
  UpgradeClient c(sample_offer(), {.min_round_trip = 1ms}, t0);
  (void)c.take_output();
  c.on_bytes(octets("SSH-2.0-OpenSSH_9.2\r\n"), t0 + 500us);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->reason, PlainPeerReason::kOtherOctets);
  EXPECT_TRUE(c.decision()->banner);
}

TEST(StreamUpgradeClient, OctetsBeforeTheOfferLeftAreABanner) {
  UpgradeClient c(sample_offer(), {}, t0);
  c.on_bytes(octets("220 "), t0 + 5ms);
  ASSERT_TRUE(c.decision());
  EXPECT_TRUE(c.decision()->banner);
  EXPECT_EQ(c.decision()->peer_octets, octets("220 "));
  EXPECT_TRUE(c.take_output().empty());  // the OFFER is dropped unsent
}

TEST(StreamUpgradeClient, APrefixOfTheMagicThenOtherOctetsKeepsThemAll) {
  UpgradeClient c(sample_offer(), {}, t0);
  (void)c.take_output();
  for (char ch : std::string_view("RDMAS")) {
    const auto b = static_cast<std::uint8_t>(ch);
    c.on_bytes(std::span(&b, 1), t0);
  }
  EXPECT_FALSE(c.decision());
  c.on_bytes(octets("X!"), t0);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->reason, PlainPeerReason::kOtherOctets);
  EXPECT_EQ(c.decision()->peer_octets, octets("RDMASX!"));
}

TEST(StreamUpgradeClient, MalformedAnswersAreAPlainPeerWithTheError) {
  struct Case {
    Octets wire;
    UpgradeError error;
  };
  Answer wrong_nonce = upgrade_answer(sample_offer());
  wrong_nonce.nonce = 7;
  Octets bad_status = encode_answer(decline_answer(sample_offer()));
  bad_status[9] = 9;
  const Case cases[] = {
      {encode_answer(wrong_nonce), UpgradeError::kNonceMismatch},
      {encode_answer(upgrade_answer(sample_offer(), "ib://h:1")), UpgradeError::kUriNotOffered},
      {bad_status, UpgradeError::kBadStatus},
  };
  for (const Case& k : cases) {
    UpgradeClient c(sample_offer(), {}, t0);
    (void)c.take_output();
    c.on_bytes(k.wire, t0);
    ASSERT_TRUE(c.decision());
    EXPECT_EQ(c.decision()->outcome, ClientOutcome::kPlainPeer);
    EXPECT_EQ(c.decision()->reason, PlainPeerReason::kMalformedAnswer);
    EXPECT_EQ(c.decision()->error, k.error);
    EXPECT_FALSE(c.decision()->banner);
    EXPECT_EQ(c.decision()->peer_octets, k.wire);
  }
}

TEST(StreamUpgradeClient, AnEchoServerIsAPlainPeer) {
  UpgradeClient c(sample_offer(), {}, t0);
  const Octets offer = c.take_output();
  c.on_bytes(offer, t0 + 1ms);
  c.on_timer(t0 + 200ms);
  ASSERT_TRUE(c.decision());
  EXPECT_EQ(c.decision()->outcome, ClientOutcome::kPlainPeer);
  EXPECT_EQ(c.decision()->peer_octets, offer);
}

TEST(StreamUpgradeClient, ClosedOrSilentPeersArePlain) {
  UpgradeClient closed(sample_offer(), {}, t0);
  closed.on_bytes(octets("RDMA"), t0);
  closed.on_peer_closed(t0 + 1ms);
  ASSERT_TRUE(closed.decision());
  EXPECT_EQ(closed.decision()->reason, PlainPeerReason::kClosed);
  EXPECT_EQ(closed.decision()->peer_octets, octets("RDMA"));

  UpgradeClient silent(sample_offer(), {.answer_timeout = 50ms}, t0);
  silent.on_timer(t0 + 49ms);
  EXPECT_FALSE(silent.decision());
  silent.on_timer(t0 + 50ms);
  ASSERT_TRUE(silent.decision());
  EXPECT_EQ(silent.decision()->reason, PlainPeerReason::kTimeout);
  EXPECT_FALSE(silent.decision()->banner);
  // Decided: later input is the driver's, not the engine's.
  silent.on_bytes(encode_answer(upgrade_answer(sample_offer())), t0 + 60ms);
  EXPECT_EQ(silent.decision()->reason, PlainPeerReason::kTimeout);
}

// ---- server ---------------------------------------------------------------------------

Answer answer_sent_by(UpgradeServer& s) {
  const Octets wire = s.take_output();
  auto d = decode_answer(wire);
  EXPECT_TRUE(d);
  EXPECT_EQ(d->size, wire.size());
  return d->message;
}

TEST(StreamUpgradeServer, UpgradesToItsPreferredListenerTheClientCanRun) {
  UpgradeServer s(server_options(), t0);
  EXPECT_EQ(s.next_deadline(), t0 + 1s);
  s.on_bytes(encode_offer(sample_offer()), t0);
  ASSERT_TRUE(s.decision());
  EXPECT_EQ(s.decision()->outcome, ServerOutcome::kUpgrade);
  EXPECT_EQ(s.decision()->uri, "verbs://198.18.0.1:41235");
  EXPECT_EQ(s.decision()->offer, sample_offer());
  const Answer a = answer_sent_by(s);
  EXPECT_EQ(a.status, AnswerStatus::kUpgrade);
  EXPECT_EQ(a.nonce, sample_offer().nonce);
  EXPECT_EQ(a.server_id, id_of(0xA0));
  EXPECT_EQ(a.uri, "verbs://198.18.0.1:41235");
  EXPECT_TRUE(s.take_output().empty());
  EXPECT_EQ(s.next_deadline(), std::nullopt);

  Offer tcp_only = sample_offer();
  tcp_only.providers = {"TCP"};
  UpgradeServer s2(server_options(), t0);
  s2.on_bytes(encode_offer(tcp_only), t0);
  EXPECT_EQ(s2.decision()->uri, "tcp://198.18.0.1:41234");
}

TEST(StreamUpgradeServer, DeclinesWithoutACommonProviderOrWhenAskedTo) {
  Offer other = sample_offer();
  other.providers = {"ib"};
  ServerOptions refusing = server_options();
  refusing.accept_upgrades = false;
  for (auto [options, offer] :
       {std::pair{server_options(), other}, std::pair{refusing, sample_offer()}}) {
    UpgradeServer s(options, t0);
    s.on_bytes(join(encode_offer(offer), octets("app")), t0);
    ASSERT_TRUE(s.decision());
    EXPECT_EQ(s.decision()->outcome, ServerOutcome::kDeclined);
    EXPECT_EQ(s.decision()->client_octets, octets("app"));
    const Answer a = answer_sent_by(s);
    EXPECT_EQ(a.status, AnswerStatus::kDecline);
    EXPECT_TRUE(a.uri.empty());
  }
}

TEST(StreamUpgradeServer, APlainClientKeepsEveryOctet) {
  const Octets request = octets("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  UpgradeServer s(server_options(), t0);
  s.on_bytes(request, t0);
  ASSERT_TRUE(s.decision());
  EXPECT_EQ(s.decision()->outcome, ServerOutcome::kPlain);
  EXPECT_EQ(s.decision()->reason, PlainClientReason::kNotOffer);
  EXPECT_EQ(s.decision()->client_octets, request);
  EXPECT_TRUE(s.take_output().empty());

  // A plain client whose first octets happen to begin the magic: still all kept.
  UpgradeServer p(server_options(), t0);
  for (std::uint8_t b : octets("RDMASTRX-data")) p.on_bytes(std::span(&b, 1), t0);
  ASSERT_TRUE(p.decision());
  EXPECT_EQ(p.decision()->outcome, ServerOutcome::kPlain);
  EXPECT_EQ(p.decision()->client_octets, octets("RDMASTRX"));  // decided at the 'X'
}

TEST(StreamUpgradeServer, AnyCutOfTheOfferGivesTheSameDecision) {
  const std::size_t message = encode_offer(sample_offer()).size();
  const Octets wire = join(encode_offer(sample_offer()), octets("tail"));
  UpgradeServer whole(server_options(), t0);
  whole.on_bytes(wire, t0);
  for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
    UpgradeServer s(server_options(), t0);
    s.on_bytes(std::span(wire).first(cut), t0);
    s.on_bytes(std::span(wire).subspan(cut), t0);
    ServerDecision expected = *whole.decision();
    const std::size_t end = cut < message ? wire.size() : cut;
    expected.client_octets.assign(wire.begin() + static_cast<std::ptrdiff_t>(message),
                                  wire.begin() + static_cast<std::ptrdiff_t>(end));
    EXPECT_EQ(s.decision(), expected) << cut;
    EXPECT_EQ(s.take_output(),
              encode_answer(upgrade_answer(sample_offer(), whole.decision()->uri)));
  }
}

TEST(StreamUpgradeServer, TheApplicationWritingFirstMakesItPlain) {
  UpgradeServer s(server_options(), t0);
  EXPECT_TRUE(s.on_application_write(t0));
  ASSERT_TRUE(s.decision());
  EXPECT_EQ(s.decision()->reason, PlainClientReason::kApplicationFirst);

  // A prefix of the magic is in: the write waits for the decision, offer_wait at most.
  UpgradeServer held(server_options(), t0);
  held.on_bytes(octets("RD"), t0);
  EXPECT_FALSE(held.on_application_write(t0 + 1ms));
  EXPECT_FALSE(held.decision());
  held.on_timer(t0 + 1s);
  ASSERT_TRUE(held.decision());
  EXPECT_EQ(held.decision()->reason, PlainClientReason::kSilent);
  EXPECT_EQ(held.decision()->client_octets, octets("RD"));
  EXPECT_TRUE(held.on_application_write(t0 + 1s));
}

TEST(StreamUpgradeServer, SilenceAndCloseBeforeTheMagicArePlain) {
  UpgradeServer silent(server_options(), t0);
  silent.on_timer(t0 + 999ms);
  EXPECT_FALSE(silent.decision());
  silent.on_timer(t0 + 1s);
  EXPECT_EQ(silent.decision()->reason, PlainClientReason::kSilent);

  UpgradeServer closed(server_options(), t0);
  closed.on_bytes(octets("RDM"), t0);
  closed.on_peer_closed(t0);
  ASSERT_TRUE(closed.decision());
  EXPECT_EQ(closed.decision()->outcome, ServerOutcome::kPlain);
  EXPECT_EQ(closed.decision()->reason, PlainClientReason::kClosed);
  EXPECT_EQ(closed.decision()->client_octets, octets("RDM"));
  EXPECT_TRUE(closed.decision()->peer_closed);
}

TEST(StreamUpgradeServer, ACutOrMalformedOfferFails) {
  const Octets offer = encode_offer(sample_offer());
  UpgradeServer cut(server_options(), t0);
  cut.on_bytes(std::span(offer).first(20), t0);
  cut.on_peer_closed(t0);
  EXPECT_EQ(cut.decision()->outcome, ServerOutcome::kFailed);
  EXPECT_EQ(cut.decision()->error, UpgradeError::kOfferCut);

  UpgradeServer slow(server_options(), t0);
  slow.on_bytes(std::span(offer).first(8), t0);
  slow.on_timer(t0 + 1s);
  EXPECT_EQ(slow.decision()->error, UpgradeError::kOfferCut);

  Octets too_long(offer.begin(), offer.begin() + kOfferFixedSize);
  too_long[36] = 0xFF;
  UpgradeServer greedy(server_options(), t0);
  greedy.on_bytes(too_long, t0);
  EXPECT_EQ(greedy.decision()->error, UpgradeError::kTooLong);
  EXPECT_TRUE(greedy.take_output().empty());

  Octets bad_version = offer;
  bad_version[8] = 2;
  UpgradeServer later(server_options(), t0);
  later.on_bytes(bad_version, t0);
  EXPECT_EQ(later.decision()->error, UpgradeError::kBadVersion);
}

TEST(StreamUpgradeEngines, ClientAndServerAgree) {
  for (bool accept : {true, false}) {
    ServerOptions options = server_options();
    options.accept_upgrades = accept;
    UpgradeClient c(sample_offer(), {}, t0);
    UpgradeServer s(options, t0);
    s.on_bytes(c.take_output(), t0);
    c.on_bytes(s.take_output(), t0);
    ASSERT_TRUE(c.decision());
    EXPECT_EQ(c.decision()->outcome, accept ? ClientOutcome::kUpgrade : ClientOutcome::kDeclined);
    EXPECT_EQ(c.decision()->answer->uri, s.decision()->uri);
    EXPECT_EQ(s.decision()->offer, sample_offer());
  }
}

// ---- the cache ------------------------------------------------------------------------

TEST(PlainPeerCacheTest, RemembersUntilTheEntryExpires) {
  PlainPeerCache cache(8, 10s);
  EXPECT_FALSE(cache.is_plain("a:1", t0));
  cache.remember("a:1", t0);
  EXPECT_TRUE(cache.is_plain("a:1", t0 + 9s));
  EXPECT_EQ(cache.plain_until("a:1", t0), t0 + 10s);
  EXPECT_FALSE(cache.is_plain("a:1", t0 + 10s));
  EXPECT_EQ(cache.size(), 0u);  // the expired entry went with the lookup
  cache.remember("a:1", t0);
  cache.remember("a:1", t0 + 5s);  // seen plain again: the entry lives on
  EXPECT_TRUE(cache.is_plain("a:1", t0 + 14s));
  cache.forget("a:1");
  EXPECT_FALSE(cache.is_plain("a:1", t0 + 1s));
}

TEST(PlainPeerCacheTest, IsBoundedDroppingExpiredThenTheSoonestToExpire) {
  PlainPeerCache cache(2, 10s);
  cache.remember("a:1", t0);
  cache.remember("b:1", t0 + 1s);
  cache.remember("c:1", t0 + 2s);  // full: a:1 expires soonest
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.is_plain("a:1", t0 + 3s));
  EXPECT_TRUE(cache.is_plain("b:1", t0 + 3s));
  EXPECT_TRUE(cache.is_plain("c:1", t0 + 3s));
  cache.remember("d:1", t0 + 11s);  // b:1 has expired: it goes, c:1 stays
  EXPECT_TRUE(cache.is_plain("c:1", t0 + 11s));
  EXPECT_TRUE(cache.is_plain("d:1", t0 + 11s));

  PlainPeerCache none(0, 10s);
  none.remember("a:1", t0);
  EXPECT_FALSE(none.is_plain("a:1", t0));
}

// ---- real sockets on 127.0.0.1 ---------------------------------------------------------

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A listener on 127.0.0.1, port chosen by the kernel.
Socket listen_loopback(std::uint16_t& port) { return Socket(test_util::listen_loopback(port)); }

Socket connect_loopback(std::uint16_t port) { return Socket(test_util::connect_loopback(port)); }

void send_all(int fd, const Octets& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    done += static_cast<std::size_t>(n);
  }
}

// Everything until the peer closes.
Octets read_to_end(int fd) {
  Octets all;
  std::uint8_t buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return all;
    all.insert(all.end(), buf, buf + n);
  }
}

// The driver's loop, as thin as nghttp2's: output out, octets, end of stream and deadlines in.
// `reads` bounds each recv so a test can make the engine see small cuts.
template <class Engine>
void drive(Engine& engine, int fd, std::size_t reads = 4096) {
  const Octets out = engine.take_output();
  if (!out.empty()) send_all(fd, out);
  while (!engine.decision()) {
    const auto deadline = engine.next_deadline();
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(wait.count() + 1, 0)));
    if (ready == 1) {
      std::uint8_t buf[4096];
      const ssize_t n = ::recv(fd, buf, std::min(reads, sizeof buf), 0);
      if (n > 0) {
        engine.on_bytes(std::span(buf, static_cast<std::size_t>(n)), Clock::now());
      } else {
        engine.on_peer_closed(Clock::now());
      }
    } else {
      engine.on_timer(Clock::now());
    }
  }
  const Octets answer = engine.take_output();
  if (!answer.empty()) send_all(fd, answer);
}

TEST(StreamUpgradeSockets, ABannerServerIsAPlainPeerAndItsBannerIsKept) {
  const Octets banner = octets("220 mail.example ESMTP ready\r\n");
  std::uint16_t port = 0;
  Socket listener = listen_loopback(port);
  std::thread server([&] {
    Socket conn(::accept(listener.get(), nullptr, nullptr));
    send_all(conn.get(), banner);
    (void)read_to_end(conn.get());  // our OFFER, taken as its client's first octets
  });
  {
    // Offering at once: a plain peer, whatever the banner raced.
    Socket c = connect_loopback(port);
    UpgradeClient client(sample_offer(), {}, Clock::now());
    drive(client, c.get());
    ASSERT_TRUE(client.decision());
    EXPECT_EQ(client.decision()->outcome, ClientOutcome::kPlainPeer);
    EXPECT_EQ(client.decision()->reason, PlainPeerReason::kOtherOctets);
    const Octets& got = client.decision()->peer_octets;
    ASSERT_FALSE(got.empty());
    // Nothing lost: what the engine kept and what the driver reads next are the banner.
    Octets rest(banner.begin() + static_cast<std::ptrdiff_t>(got.size()), banner.end());
    EXPECT_EQ(Octets(banner.begin(), banner.begin() + static_cast<std::ptrdiff_t>(got.size())),
              got);
    ::shutdown(c.get(), SHUT_WR);
    EXPECT_EQ(read_to_end(c.get()), rest);
  }
  server.join();

  // A driver that waited for the banner before offering: certainly a banner.
  std::thread server2([&] {
    Socket conn(::accept(listener.get(), nullptr, nullptr));
    send_all(conn.get(), banner);
    (void)read_to_end(conn.get());
  });
  {
    Socket c = connect_loopback(port);
    pollfd p{c.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    UpgradeClient client(sample_offer(), {}, Clock::now());
    std::uint8_t buf[256];
    const ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    client.on_bytes(std::span(buf, static_cast<std::size_t>(n)), Clock::now());
    ASSERT_TRUE(client.decision());
    EXPECT_TRUE(client.decision()->banner);
    EXPECT_TRUE(client.take_output().empty());  // nothing of ours: the server saw nothing
  }
  server2.join();
}

TEST(StreamUpgradeSockets, AServerThatWaitsIsAPlainPeerAfterTheTimeoutAndTheRetryIsPlain) {
  std::uint16_t port = 0;
  Socket listener = listen_loopback(port);
  Octets second_request;
  std::thread server([&] {
    // A request-then-response server that answers only a whole request line: our OFFER is
    // not one, so it waits; the client gives up on it and comes back plain.
    {
      Socket first(::accept(listener.get(), nullptr, nullptr));
      (void)read_to_end(first.get());
    }
    Socket second(::accept(listener.get(), nullptr, nullptr));
    second_request = read_to_end(second.get());
  });
  PlainPeerCache cache(16, 60s);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  {
    Socket c = connect_loopback(port);
    UpgradeClient client(sample_offer(), {.answer_timeout = 100ms}, Clock::now());
    drive(client, c.get());
    EXPECT_EQ(client.decision()->outcome, ClientOutcome::kPlainPeer);
    EXPECT_EQ(client.decision()->reason, PlainPeerReason::kTimeout);
    EXPECT_TRUE(client.decision()->peer_octets.empty());
    cache.remember(address, Clock::now());
  }
  ASSERT_TRUE(cache.is_plain(address, Clock::now()));
  {
    Socket c = connect_loopback(port);  // no OFFER this time
    send_all(c.get(), octets("PING\r\n"));
  }
  server.join();
  EXPECT_EQ(second_request, octets("PING\r\n"));
}

TEST(StreamUpgradeSockets, AServerAnsweringGarbageIsAPlainPeer) {
  std::uint16_t port = 0;
  Socket listener = listen_loopback(port);
  std::thread server([&] {
    Socket conn(::accept(listener.get(), nullptr, nullptr));
    std::uint8_t buf[64];
    ASSERT_GT(::recv(conn.get(), buf, sizeof buf, 0), 0);
    send_all(conn.get(), octets("HTTP/1.0 400 Bad request\r\n\r\n"));
  });
  Socket c = connect_loopback(port);
  UpgradeClient client(sample_offer(), {}, Clock::now());
  drive(client, c.get());
  server.join();
  EXPECT_EQ(client.decision()->outcome, ClientOutcome::kPlainPeer);
  EXPECT_EQ(client.decision()->reason, PlainPeerReason::kOtherOctets);
  EXPECT_FALSE(client.decision()->banner);  // it came after the OFFER left
}

TEST(StreamUpgradeSockets, APlainClientsOctetsAllReachTheServerApplication) {
  const Octets request = octets("GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nbody");
  std::uint16_t port = 0;
  Socket listener = listen_loopback(port);
  std::thread client([&] {
    Socket c = connect_loopback(port);
    // In small pieces, so the server engine sees cuts.
    for (std::size_t at = 0; at < request.size(); at += 7) {
      send_all(c.get(), Octets(request.begin() + static_cast<std::ptrdiff_t>(at),
                               request.begin() +
                                   static_cast<std::ptrdiff_t>(std::min(at + 7, request.size()))));
    }
  });
  Socket conn(::accept(listener.get(), nullptr, nullptr));
  UpgradeServer server(server_options(), Clock::now());
  drive(server, conn.get(), 3);
  client.join();
  ASSERT_TRUE(server.decision());
  EXPECT_EQ(server.decision()->outcome, ServerOutcome::kPlain);
  EXPECT_EQ(server.decision()->reason, PlainClientReason::kNotOffer);
  EXPECT_EQ(join(server.decision()->client_octets, read_to_end(conn.get())), request);
}

TEST(StreamUpgradeSockets, TwoEnginesUpgradeOverLoopback) {
  std::uint16_t port = 0;
  Socket listener = listen_loopback(port);
  std::optional<ServerDecision> served;
  std::thread server([&] {
    Socket conn(::accept(listener.get(), nullptr, nullptr));
    UpgradeServer s(server_options(), Clock::now());
    drive(s, conn.get(), 5);
    served = s.decision();
  });
  Socket c = connect_loopback(port);
  UpgradeClient client(sample_offer(), {.answer_timeout = 5s}, Clock::now());
  drive(client, c.get(), 5);
  server.join();
  ASSERT_TRUE(client.decision());
  EXPECT_EQ(client.decision()->outcome, ClientOutcome::kUpgrade);
  EXPECT_EQ(client.decision()->answer->uri, "verbs://198.18.0.1:41235");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->outcome, ServerOutcome::kUpgrade);
}

}  // namespace
}  // namespace rdma_interop::stream
