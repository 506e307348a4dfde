// stream_upgrade_fuzzer - the TCP-shaped setup of a stream (core/stream/upgrade.h): both
// decoders, and both engines fed a peer's arbitrary octets in arbitrary cuts.
//
// Input: [options][cut seed] then the peer's octets. options bit 0: the server accepts
// upgrades; bit 1: the peer closes after its octets; bit 2: the server application writes
// before the first octet; bit 3: the client sees its first octets before its OFFER left.
// The client's OFFER is fixed (nonce 0x0102030405060708, providers "tcp,verbs"), so the
// seeds can hold ANSWERs to it.
// Invariants:
//   - a decoded OFFER or ANSWER re-encodes to the octets it took, every proper prefix of them
//     is kTruncated, and it took no more than the bound (kMaxOfferSize, kMaxAnswerSize);
//   - nothing is lost: a plain decision holds every octet fed (client: peer_octets; server:
//     client_octets); an upgrade or decline's message re-encodes to the octets before them;
//   - a decision comes by the bound: undecided means fewer octets than the longest message,
//     and the deadline decides; next_deadline() is there exactly while undecided;
//   - the server's ANSWER answers its OFFER (check_answer), and a failed server sends nothing;
//   - a banner is only ever a plain peer's other octets.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/stream/upgrade.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::stream;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;
using rdma_interop::fuzz::SplitMix64;
using Octets = std::vector<std::uint8_t>;

template <class Decode, class Encode>
void check_codec(std::span<const std::uint8_t> in, Decode decode, Encode encode, std::size_t max) {
  auto d = decode(in);
  if (!d) {
    fuzz_check(error_name(d.error()) != "unknown", "a decoding error has no name");
    fuzz_check(d.error() != UpgradeError::kTruncated || in.size() < max,
               "more octets than the longest message are still truncated");
    return;
  }
  fuzz_check(d->size <= in.size() && d->size <= max, "a message took more than it may");
  const Octets again = encode(d->message);
  fuzz_check(again.size() == d->size && std::equal(again.begin(), again.end(), in.begin()),
             "a decoded message does not re-encode to its octets");
  for (std::size_t n : {std::size_t{0}, d->size / 2, d->size - 1}) {
    auto prefix = decode(in.first(n));
    fuzz_check(!prefix && prefix.error() == UpgradeError::kTruncated,
               "a proper prefix of a message is not truncated");
  }
}

// Feeds `octets` in cuts the generator chooses, time moving on a little each cut; returns
// what was fed until the engine decided.
template <class Engine>
Octets feed(Engine& engine, std::span<const std::uint8_t> octets, SplitMix64& rng, TimePoint& now) {
  Octets fed;
  now += std::chrono::microseconds(rng.in_range(0, 200));
  while (!octets.empty() && !engine.decision()) {
    const std::size_t n = rng.in_range(1, std::min<std::size_t>(octets.size(), 64));
    fed.insert(fed.end(), octets.begin(), octets.begin() + static_cast<std::ptrdiff_t>(n));
    engine.on_bytes(octets.first(n), now);
    octets = octets.subspan(n);
    now += std::chrono::microseconds(rng.in_range(0, 300));
    fuzz_check(engine.next_deadline().has_value() == !engine.decision().has_value(),
               "a deadline while decided, or none while undecided");
  }
  return fed;
}

bool equal_at_front(const Octets& whole, const Octets& head, const Octets& tail) {
  return head.size() + tail.size() == whole.size() &&
         std::equal(head.begin(), head.end(), whole.begin()) &&
         std::equal(tail.begin(), tail.end(),
                    whole.begin() + static_cast<std::ptrdiff_t>(head.size()));
}

void run_server(std::span<const std::uint8_t> peer, std::uint8_t options, std::uint8_t seed) {
  ServerOptions so;
  so.server_id[0] = 0xA0;
  so.listeners = {"verbs://198.18.0.1:41235", "tcp://198.18.0.1:41234", "no scheme"};
  so.accept_upgrades = options & 1;
  TimePoint now{};
  UpgradeServer s(so, now);
  if (options & 4) {
    fuzz_check(s.on_application_write(now), "an application writing first was held");
    fuzz_check(s.decision() && s.decision()->outcome == ServerOutcome::kPlain,
               "an application writing first did not make the stream plain");
    return;
  }
  SplitMix64 rng(seed);
  const Octets fed = feed(s, peer, rng, now);
  if (!s.decision()) {
    fuzz_check(fed.size() < kMaxOfferSize, "the server is undecided past the longest OFFER");
    if (options & 2) {
      s.on_peer_closed(now);
    } else {
      s.on_timer(*s.next_deadline());
    }
    fuzz_check(s.decision().has_value(), "the deadline or a close did not decide");
  }
  const ServerDecision& d = *s.decision();
  const Octets out = s.take_output();
  switch (d.outcome) {
    case ServerOutcome::kPlain:
      fuzz_check(d.client_octets == fed, "a plain client's octets were not all kept");
      fuzz_check(out.empty(), "the server answered a plain client");
      break;
    case ServerOutcome::kUpgrade:
    case ServerOutcome::kDeclined: {
      fuzz_check(d.offer.has_value(), "an answered client has no OFFER");
      fuzz_check(equal_at_front(fed, encode_offer(*d.offer), d.client_octets),
                 "the OFFER and the octets after it are not what was fed");
      auto answer = decode_answer(out);
      fuzz_check(answer && answer->size == out.size(), "the server's ANSWER does not decode");
      fuzz_check(check_answer(answer->message, *d.offer).has_value(),
                 "the server's ANSWER does not answer the OFFER");
      fuzz_check((answer->message.status == AnswerStatus::kUpgrade) ==
                     (d.outcome == ServerOutcome::kUpgrade),
                 "the ANSWER's status is not the decision");
      fuzz_check(d.outcome == ServerOutcome::kDeclined || so.accept_upgrades,
                 "an upgrade the options refuse");
      break;
    }
    case ServerOutcome::kFailed:
      fuzz_check(out.empty(), "a failed server sent an ANSWER");
      fuzz_check(d.error.has_value() && *d.error != UpgradeError::kTruncated &&
                     *d.error != UpgradeError::kBadMagic,
                 "a failed server has no error, or one that is not a failure");
      break;
  }
}

void run_client(std::span<const std::uint8_t> peer, std::uint8_t options, std::uint8_t seed) {
  Offer offer;
  offer.client_id[0] = 0x10;
  offer.nonce = 0x0102030405060708;
  offer.providers = {"tcp", "verbs"};
  TimePoint now{};
  UpgradeClient c(offer, {.min_round_trip = std::chrono::microseconds(100)}, now);
  if (!(options & 8)) fuzz_check(c.take_output() == encode_offer(offer), "the OFFER is not sent");
  SplitMix64 rng(seed ^ 0x5a);
  const Octets fed = feed(c, peer, rng, now);
  if (!c.decision()) {
    fuzz_check(fed.size() < kMaxAnswerSize, "the client is undecided past the longest ANSWER");
    if (options & 2) {
      c.on_peer_closed(now);
    } else {
      c.on_timer(*c.next_deadline());
    }
    fuzz_check(c.decision().has_value(), "the deadline or a close did not decide");
  }
  const ClientDecision& d = *c.decision();
  if (d.outcome == ClientOutcome::kPlainPeer) {
    fuzz_check(d.peer_octets == fed, "a plain peer's octets were not all kept");
    fuzz_check(!d.banner || d.reason == PlainPeerReason::kOtherOctets,
               "a banner that is not other octets");
    fuzz_check(d.error.has_value() == (d.reason == PlainPeerReason::kMalformedAnswer),
               "an error without a malformed answer, or the reverse");
    return;
  }
  fuzz_check(d.answer.has_value() && d.answer->nonce == offer.nonce, "an ANSWER to another OFFER");
  fuzz_check(equal_at_front(fed, encode_answer(*d.answer), d.peer_octets),
             "the ANSWER and the octets after it are not what was fed");
  fuzz_check((d.answer->status == AnswerStatus::kUpgrade) == (d.outcome == ClientOutcome::kUpgrade),
             "the decision is not the ANSWER's status");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in(std::span<const std::uint8_t>(data, size));
  const std::uint8_t options = in.u8();
  const std::uint8_t seed = in.u8();
  const auto peer = in.rest();

  check_codec(peer, decode_offer, encode_offer, kMaxOfferSize);
  check_codec(peer, decode_answer, encode_answer, kMaxAnswerSize);
  run_server(peer, options, seed);
  run_client(peer, options, seed);
  return 0;
}
