// upgrade.h - the TCP-shaped setup of a stream: an ordinary TCP connection that becomes a
// stream over an RDMA session when both ends speak this protocol, and stays plain TCP when
// either does not. The codec of its two messages and a sans-I/O engine for each role.
//
// Why in-band on the application's own TCP port: a stream must pass wherever TCP passes
// (firewalls, load balancers, a server that was never ours). So the client connects to the
// port the application named, as any TCP client would, and asks on that connection whether
// the server can do better. SDP needed a separate port space and its own address family
// (the OFA's 2007 review lists the setup "so unlike TCP's" among what made it unusable);
// this is STARTTLS's and TLS's shape instead: the client speaks first with an offer, the
// server answers or, not being ours, does whatever it does with unknown octets.
//
// Wire (all integers in network byte order):
//
//   OFFER (client -> server, the client's first octets on the connection)
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +---------------------------------------------------------------+
//   |                  Magic "RDMASTRM" (8 octets)                  |
//   +---------------+---------------+-------------------------------+
//   |    Version    |     Flags     |           Reserved            |
//   +---------------+---------------+-------------------------------+
//   |                 Client endpoint id (16 octets)                |
//   +---------------------------------------------------------------+
//   |                          Nonce (64 bits)                      |
//   +-------------------------------+-------------------------------+
//   |      Providers length         |  Providers (UTF-8, "tcp,verbs") ...
//   +-------------------------------+
//
//   ANSWER (server -> client, the server's first octets, only ever after an OFFER)
//   +---------------------------------------------------------------+
//   |                  Magic "RDMASTRM" (8 octets)                  |
//   +---------------+---------------+-------------------------------+
//   |    Version    |    Status     |  Server endpoint id (16 octets) ...
//   +---------------+---------------+-------------------------------+
//   |                   Echoed nonce (64 bits)                      |
//   +-------------------------------+-------------------------------+
//   |         URI length            |  Session listener URI ("tcp://198.18.0.1:41234") ...
//   +-------------------------------+
//
//   Magic      why 8 octets of ASCII: the server must tell our client from any other by its
//              first octets, and an 8-octet string no other protocol starts with is cheap to
//              test on a prefix (see "Deciding" below). It is also what a capture shows.
//   Version    kUpgradeVersion (1). A receiver refuses another (kBadVersion): the layout after
//              this octet belongs to the version, so an unknown one cannot even be measured.
//              A client of a later version then sees its connection closed and falls back to
//              plain TCP (below), which still works.
//   Flags      none defined in version 1; bits a receiver does not know are kept and ignored,
//              so a later client can ask for something optional without a version change.
//   Reserved   zero (else kReservedNotZero), so a later version can give it a meaning.
//   Endpoint   16 opaque octets naming the sending endpoint (its process-wide identity, not
//   id         the connection's): what lets a later connect between the same two endpoints
//              find and reuse the RDMA session this one sets up, at the cost of one message.
//   Nonce      chosen by the client (an input here, never drawn inside), echoed in the ANSWER:
//              an ANSWER carries the nonce of the very OFFER it answers, so octets that merely
//              begin with the magic (a plain echo server sends back our own OFFER) are no
//              ANSWER (kNonceMismatch).
//   Providers  the provider schemes the client can run its session over, comma-separated,
//              each a URI scheme (RFC 3986 s3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ));
//              at most kMaxProvidersLength octets. An empty list is valid (the server declines).
//   Status     0 upgrade: the server's session listener is at URI, both close this TCP
//              connection and the stream continues over the session; 1 decline: the stream
//              stays plain TCP on this very connection (no reconnect). Others: kBadStatus.
//   URI        upgrade: where the server's session listener is, a URI whose scheme is one of
//              the OFFER's providers (else kUriNotOffered), printable ASCII (RFC 3986 s2), at
//              most kMaxUriLength octets. Decline: empty (else kUriOnDecline).
//
// Deciding, server side (UpgradeServer). Every accepted connection's first octets are
// compared with the magic, octet by octet as they arrive; the engine consumes nothing it does
// not recognise:
//   - an octet that differs from the magic at its position: a plain TCP client. The stream is
//     plain and every octet the client sent goes to the application, in order (nothing lost).
//   - the whole magic: an OFFER. The engine reads exactly the OFFER (bounded: at most
//     kMaxOfferSize octets) and answers: upgrade when it accepts upgrades and one of its
//     listeners' schemes is among the client's providers (its own order of preference, as a
//     TLS server picks the cipher), else decline. A malformed OFFER (bad version, reserved,
//     list) fails the connection: its end cannot be trusted, so nothing after it can be
//     handed to the application; the client then falls back as from a plain server.
//   - nothing yet: undecided. A client that sends nothing may be waiting for the server to
//     speak first (SMTP, SSH): when the server application writes first, the stream is plain
//     (our client always speaks first, so this client is not ours). A prefix of the magic is
//     still undecided, and the application's write waits for the decision.
//   - bounded: by offer_wait after accept the engine decides. Silence or a prefix of the magic
//     -> plain (our client sends its OFFER with the connection's first segment, so a client
//     still silent then is not ours); an OFFER begun but not complete -> failed. A peer that
//     closes before deciding: plain with what it sent, or failed inside an OFFER.
//
// Deciding, client side (UpgradeClient). The client sends its OFFER at once and waits up to
// answer_timeout (the caller's, e.g. 200 ms) for the ANSWER:
//   - ANSWER upgrade -> kUpgrade; ANSWER decline -> kDeclined (plain on this connection; any
//     octets behind the ANSWER are the server application's, delivered first).
//   - anything else -> kPlainPeer, with the reason: octets that cannot start an ANSWER
//     (kOtherOctets), the magic followed by what no ANSWER to our OFFER holds
//     (kMalformedAnswer), the peer closing (kClosed), or no ANSWER in time (kTimeout). The
//     peer is a plain TCP server, which took our OFFER as its client's first octets: the
//     driver closes this connection, connects again without an OFFER, and remembers the
//     address as plain for a while (PlainPeerCache, plain_peer_cache.h).
//   - every octet received is kept (peer_octets). When they are a plain server's banner -
//     octets the server sent before it could have read our OFFER: they arrived before the
//     OFFER left, or earlier than min_round_trip after it, which no answer to it can - the
//     decision says so (banner), and the driver may keep this connection as plain TCP,
//     delivering those octets first (nothing lost) instead of reconnecting.
//
// Why keeping a banner connection is acceptable only where it is: the plain server has read
// our OFFER as the first octets of its client's request. A server-speaks-first protocol that
// skips or rejects a bad first line and carries on (a line-based service that answers an
// unknown command with an error) survives that; one that takes the client's first octets as
// its identification does not (SSH, RFC 4253 s4.2: the server disconnects on a bad version
// string) and neither does one that glues them to the next request. Only the application
// knows its server, so keeping is the driver's option, off unless the application asks;
// reconnecting without an OFFER is always safe. (A banner that arrived before the OFFER left -
// a driver that listened a moment before offering - is the exception: the OFFER can then be
// dropped unsent, the server has seen nothing of ours, and keeping is always safe.)
// The cache is what keeps the price to once: after one plain_peer, connects to that address
// go out without an OFFER until the entry expires, so a plain server sees at most one OFFER
// per expiry period, and a server later replaced by one of ours is found again once the entry
// has expired.
//
// Errors are values (UpgradeError); malformed or oversized fields never crash, and an engine
// never waits for more than the longest message's octets (a chunk that decides is kept whole:
// past the message, its octets are the application's). tests/fuzz/stream_upgrade_fuzzer.cc
// feeds both decoders and both engines arbitrary octets in arbitrary cuts.
//
// Threading: none. Each engine is one connection's; its owner calls it from one thread at a
// time. Time is always an input (`now`); nothing here reads a clock, sleeps or draws a random
// number.
//
//   UpgradeClient c(offer, {.answer_timeout = 200ms}, now);
//   send(c.take_output());                 // the OFFER
//   on data: c.on_bytes(data, now);  on EOF: c.on_peer_closed(now);  at deadline: c.on_timer(now)
//   until c.decision(): kUpgrade -> connect the session at answer->uri, close TCP;
//                       kDeclined -> plain here, peer_octets first;
//                       kPlainPeer -> cache.remember(address), reconnect without an OFFER
//                                     (or, banner and the application allows, keep).
//
//   UpgradeServer s({.server_id = id, .listeners = {"tcp://198.18.0.1:41234"}}, now);
//   on data: s.on_bytes(data, now);  app write: if (!s.on_application_write(now)) hold it;
//   until s.decision(): send(s.take_output()) (the ANSWER, upgrade or decline), then
//                       kUpgrade -> await the client's session, close TCP;
//                       kDeclined / kPlain -> plain here, octets first; kFailed -> close.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::stream {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

inline constexpr std::array<std::uint8_t, 8> kUpgradeMagic = {'R', 'D', 'M', 'A',
                                                              'S', 'T', 'R', 'M'};
inline constexpr std::uint8_t kUpgradeVersion = 1;
inline constexpr std::size_t kOfferFixedSize = 38;   // up to and with the providers length
inline constexpr std::size_t kAnswerFixedSize = 36;  // up to and with the URI length
inline constexpr std::size_t kMaxProvidersLength = 256;
inline constexpr std::size_t kMaxUriLength = 512;
inline constexpr std::size_t kMaxOfferSize = kOfferFixedSize + kMaxProvidersLength;
inline constexpr std::size_t kMaxAnswerSize = kAnswerFixedSize + kMaxUriLength;

using EndpointId = std::array<std::uint8_t, 16>;

struct Offer {
  std::uint8_t flags = 0;  // kept as sent; none defined in version 1
  EndpointId client_id{};
  std::uint64_t nonce = 0;
  std::vector<std::string> providers;  // schemes, in the client's order: {"tcp", "verbs"}
  friend bool operator==(const Offer&, const Offer&) = default;
};
// "offer{client=00112233... nonce=0x2a providers=tcp,verbs flags=0x00}"
std::ostream& operator<<(std::ostream& os, const Offer& o);

enum class AnswerStatus : std::uint8_t {
  kUpgrade = 0,  // the session listener is at Answer::uri
  kDecline = 1,  // stay plain TCP on this connection
};
std::string_view status_name(AnswerStatus s);  // "upgrade", "decline"

struct Answer {
  AnswerStatus status = AnswerStatus::kDecline;
  EndpointId server_id{};
  std::uint64_t nonce = 0;
  std::string uri;  // upgrade: the session listener; decline: empty
  friend bool operator==(const Answer&, const Answer&) = default;
};
// "answer{upgrade server=... nonce=0x2a uri=tcp://198.18.0.1:41234}"
std::ostream& operator<<(std::ostream& os, const Answer& a);

enum class UpgradeError : std::uint8_t {
  kTruncated,        // the octets so far are a proper prefix of a message: more are needed
  kBadMagic,         // the first octets are not (a prefix of) "RDMASTRM": not this protocol
  kBadVersion,       // a version other than kUpgradeVersion
  kReservedNotZero,  // the OFFER's Reserved field is not zero
  kBadStatus,        // an ANSWER status other than upgrade (0) or decline (1)
  kTooLong,          // a providers list over kMaxProvidersLength or a URI over kMaxUriLength
  kBadProviders,     // the providers list is not comma-separated URI schemes
  kBadUri,           // an upgrade's URI is empty, not printable ASCII, or has no "scheme://"
  kUriOnDecline,     // a decline carries a URI
  kNonceMismatch,    // the ANSWER's nonce is not our OFFER's: not an answer to it
  kUriNotOffered,    // the upgrade URI's scheme is not among the OFFER's providers
  kOfferCut,         // server: the OFFER was begun, then the peer closed or offer_wait passed
};
std::string_view error_name(UpgradeError e);  // stable id: "bad_magic"
std::string_view describe(UpgradeError e);    // one sentence for a human

// A message decoded from the front of some octets, and how many octets it took: what follows
// (size onward) is not the message's.
template <class Message>
struct Decoded {
  Message message;
  std::size_t size = 0;
};

// Write the fields as they are (Reserved zero); they are not checked, so a test can build a
// malformed message. The decoders are where every field is checked.
std::vector<std::uint8_t> encode_offer(const Offer& offer);
std::vector<std::uint8_t> encode_answer(const Answer& answer);

// Decode the message at the front of `in` (any length: octets after it are left alone). The
// checks go in layout order and stop at the first failure, so a prefix is judged as far as it
// goes: kBadMagic as soon as one octet differs from the magic, kTooLong as soon as the length
// field is in, kTruncated when everything present is right but the message goes on. The ANSWER
// is checked on its own here (status, URI form); that it answers our OFFER (nonce, scheme) is
// check_answer()'s.
Expected<Decoded<Offer>, UpgradeError> decode_offer(std::span<const std::uint8_t> in);
Expected<Decoded<Answer>, UpgradeError> decode_answer(std::span<const std::uint8_t> in);

// An ANSWER answers `offer`: the nonce is the OFFER's, and an upgrade's URI scheme is one
// the OFFER listed (schemes compare case-insensitively, RFC 3986 s3.1).
Expected<Answer, UpgradeError> check_answer(const Answer& answer, const Offer& offer);

// The scheme of "tcp://..." ("tcp"), or nullopt when the text does not start with a scheme
// followed by "://".
std::optional<std::string_view> uri_scheme(std::string_view uri);

// ---- client ---------------------------------------------------------------------------

struct ClientOptions {
  // No ANSWER by then (from construction): the peer is plain (kTimeout).
  Clock::duration answer_timeout = std::chrono::milliseconds(200);
  // A lower bound on the connection's round trip (e.g. the TCP connect's handshake time, or
  // TCP_INFO's min RTT): octets that arrive sooner after the OFFER left were sent before the
  // server could have read it, so they are a banner. Zero: unknown; only octets that arrive
  // before the OFFER was taken from the engine count as a banner.
  Clock::duration min_round_trip = Clock::duration::zero();
};

enum class ClientOutcome : std::uint8_t {
  kUpgrade,    // continue over the session at answer->uri; close this TCP connection
  kDeclined,   // plain TCP on this connection
  kPlainPeer,  // a plain TCP server: reconnect without an OFFER (or keep a banner connection)
};
std::string_view outcome_name(ClientOutcome o);  // "upgrade", "declined", "plain_peer"

enum class PlainPeerReason : std::uint8_t {
  kNone,             // not kPlainPeer
  kOtherOctets,      // octets that cannot begin an ANSWER
  kMalformedAnswer,  // the magic, then what no ANSWER to our OFFER holds (see error)
  kClosed,           // the peer closed (FIN or RST) before a whole ANSWER
  kTimeout,          // no whole ANSWER within answer_timeout
};
std::string_view reason_name(PlainPeerReason r);  // "other_octets", ...

struct ClientDecision {
  ClientOutcome outcome = ClientOutcome::kPlainPeer;
  std::optional<Answer> answer;  // kUpgrade, kDeclined
  PlainPeerReason reason = PlainPeerReason::kNone;
  std::optional<UpgradeError> error;  // kMalformedAnswer: why
  // kPlainPeer: the octets are a plain server's banner, sent before it could have read our
  // OFFER (see ClientOptions::min_round_trip). The driver may keep the connection.
  bool banner = false;
  // kPlainPeer: every octet the peer sent, in order. kUpgrade, kDeclined: those after the
  // ANSWER (for a decline, the server application's first octets; for an upgrade, none from
  // a correct server: the driver drops them with the connection).
  std::vector<std::uint8_t> peer_octets;
  friend bool operator==(const ClientDecision&, const ClientDecision&) = default;
};
// "client_decision{plain_peer other_octets banner octets=24}"
std::ostream& operator<<(std::ostream& os, const ClientDecision& d);

class UpgradeClient {
 public:
  // The OFFER goes at `now` (take_output() holds it); the answer deadline runs from here.
  UpgradeClient(Offer offer, ClientOptions options, TimePoint now);

  // The OFFER, the first time; empty afterwards, and once decided: a driver that read a
  // banner before it took the OFFER sends nothing of ours.
  std::vector<std::uint8_t> take_output();
  // The peer's octets, in order, any cut. Ignored once decided (the driver owns the
  // connection again).
  void on_bytes(std::span<const std::uint8_t> bytes, TimePoint now);
  // The peer closed (FIN or RST).
  void on_peer_closed(TimePoint now);
  // Call at or after next_deadline().
  void on_timer(TimePoint now);

  // When to call on_timer(); nullopt once decided.
  std::optional<TimePoint> next_deadline() const;
  const std::optional<ClientDecision>& decision() const { return decision_; }
  const Offer& offer() const { return offer_; }

 private:
  void plain_peer(PlainPeerReason reason, std::optional<UpgradeError> error);

  Offer offer_;
  ClientOptions options_;
  TimePoint deadline_;
  std::vector<std::uint8_t> out_;
  bool offer_taken_ = false;
  TimePoint offer_sent_at_;
  bool first_octet_early_ = false;  // the first octet arrived before the OFFER could be read
  std::vector<std::uint8_t> in_;
  std::optional<ClientDecision> decision_;
};

// ---- server ---------------------------------------------------------------------------

struct ServerOptions {
  EndpointId server_id{};
  // This endpoint's session listeners, most preferred first ("verbs://...", "tcp://...").
  // One whose URI has no scheme is never offered.
  std::vector<std::string> listeners;
  // False: every OFFER is declined (the stream stays plain).
  bool accept_upgrades = true;
  // How long after accept the engine waits for the client's first octets or a whole OFFER.
  Clock::duration offer_wait = std::chrono::seconds(1);
};

enum class ServerOutcome : std::uint8_t {
  kUpgrade,   // ANSWER upgrade sent (take_output): the client continues over the session
  kDeclined,  // ANSWER decline sent: plain TCP on this connection
  kPlain,     // not our client: plain TCP, every octet it sent goes to the application
  kFailed,    // a malformed or cut OFFER: close the connection
};
std::string_view outcome_name(ServerOutcome o);  // "upgrade", "declined", "plain", "failed"

enum class PlainClientReason : std::uint8_t {
  kNone,              // not kPlain
  kNotOffer,          // the client's first octets cannot begin an OFFER
  kApplicationFirst,  // the server application wrote before the client sent anything
  kSilent,            // nothing but (a prefix of) the magic within offer_wait
  kClosed,            // the client closed before its octets could begin an OFFER
};
std::string_view reason_name(PlainClientReason r);  // "not_offer", ...

struct ServerDecision {
  ServerOutcome outcome = ServerOutcome::kPlain;
  std::optional<Offer> offer;  // kUpgrade, kDeclined
  std::string uri;             // kUpgrade: the listener chosen
  PlainClientReason reason = PlainClientReason::kNone;
  std::optional<UpgradeError> error;  // kFailed: why
  // kPlain: every octet the client sent, in order, for the application. kDeclined: those
  // after the OFFER (our client sends none before the ANSWER; if it did, they are its
  // application's). kUpgrade: likewise, dropped with the connection.
  std::vector<std::uint8_t> client_octets;
  bool peer_closed = false;  // the client's end of stream came before the decision
  friend bool operator==(const ServerDecision&, const ServerDecision&) = default;
};
// "server_decision{plain not_offer octets=18}"
std::ostream& operator<<(std::ostream& os, const ServerDecision& d);

class UpgradeServer {
 public:
  // `now`: when the connection was accepted; offer_wait runs from here.
  UpgradeServer(ServerOptions options, TimePoint now);

  // The client's octets, in order, any cut. Ignored once decided.
  void on_bytes(std::span<const std::uint8_t> bytes, TimePoint now);
  // The client closed (FIN or RST).
  void on_peer_closed(TimePoint now);
  // Call at or after next_deadline().
  void on_timer(TimePoint now);
  // The server application wants to write. True: it may, now (decided plain if the client
  // has sent nothing: a server-speaks-first protocol). False: a prefix of the magic is in;
  // hold the write until decision() (next_deadline() bounds the wait).
  bool on_application_write(TimePoint now);

  // The ANSWER once decided upgrade or decline; empty otherwise and afterwards.
  std::vector<std::uint8_t> take_output();
  // When to call on_timer(); nullopt once decided.
  std::optional<TimePoint> next_deadline() const;
  const std::optional<ServerDecision>& decision() const { return decision_; }

 private:
  void decide_plain(PlainClientReason reason);
  void fail(UpgradeError error);
  void answer(Offer offer, std::size_t offer_size);

  ServerOptions options_;
  TimePoint deadline_;
  std::vector<std::uint8_t> in_;
  std::vector<std::uint8_t> out_;
  bool peer_closed_ = false;
  std::optional<ServerDecision> decision_;
};

}  // namespace rdma_interop::stream
