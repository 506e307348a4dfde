#include "core/stream/upgrade.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/util/byte_order.h"

namespace rdma_interop::stream {
namespace {

// Field offsets of the layouts in upgrade.h.
constexpr std::size_t kVersionAt = 8;
constexpr std::size_t kOfferFlagsAt = 9;
constexpr std::size_t kOfferReservedAt = 10;
constexpr std::size_t kOfferIdAt = 12;
constexpr std::size_t kOfferNonceAt = 28;
constexpr std::size_t kOfferLengthAt = 36;
static_assert(kOfferLengthAt + 2 == kOfferFixedSize, "the OFFER's fixed part ends at its length");
constexpr std::size_t kAnswerStatusAt = 9;
constexpr std::size_t kAnswerIdAt = 10;
constexpr std::size_t kAnswerNonceAt = 26;
constexpr std::size_t kAnswerLengthAt = 34;
static_assert(kAnswerLengthAt + 2 == kAnswerFixedSize,
              "the ANSWER's fixed part ends at its length");

// kBadMagic as soon as an octet present differs; true when all 8 are in and match.
Expected<bool, UpgradeError> check_magic(std::span<const std::uint8_t> in) {
  const std::size_t n = std::min(in.size(), kUpgradeMagic.size());
  if (!std::equal(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n), kUpgradeMagic.begin())) {
    return unexpected(UpgradeError::kBadMagic);
  }
  return n == kUpgradeMagic.size();
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool same_scheme(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

// RFC 3986 s3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
bool is_scheme(std::string_view s) {
  if (s.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
  });
}

Expected<std::vector<std::string>, UpgradeError> parse_providers(std::string_view text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  for (;;) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (!is_scheme(item)) return unexpected(UpgradeError::kBadProviders);
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

// RFC 3986 s2: a URI is printable ASCII; "scheme://" must lead.
bool is_listener_uri(std::string_view uri) {
  return std::all_of(uri.begin(), uri.end(), [](char c) { return c > 0x20 && c < 0x7f; }) &&
         uri_scheme(uri).has_value();
}

std::string_view as_text(std::span<const std::uint8_t> octets) {
  return {reinterpret_cast<const char*>(octets.data()), octets.size()};
}

std::ostream& print_id(std::ostream& os, const EndpointId& id) {
  char hex[3];
  for (const std::uint8_t b : id) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    os << hex;
  }
  return os;
}

std::ostream& print_nonce(std::ostream& os, std::uint64_t nonce) {
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(nonce));
  return os << hex;
}

}  // namespace

// ---- names ----------------------------------------------------------------------------

std::string_view status_name(AnswerStatus s) {
  switch (s) {
    case AnswerStatus::kUpgrade:
      return "upgrade";
    case AnswerStatus::kDecline:
      return "decline";
  }
  return "unknown";
}

std::string_view error_name(UpgradeError e) {
  switch (e) {
    case UpgradeError::kTruncated:
      return "truncated";
    case UpgradeError::kBadMagic:
      return "bad_magic";
    case UpgradeError::kBadVersion:
      return "bad_version";
    case UpgradeError::kReservedNotZero:
      return "reserved_not_zero";
    case UpgradeError::kBadStatus:
      return "bad_status";
    case UpgradeError::kTooLong:
      return "too_long";
    case UpgradeError::kBadProviders:
      return "bad_providers";
    case UpgradeError::kBadUri:
      return "bad_uri";
    case UpgradeError::kUriOnDecline:
      return "uri_on_decline";
    case UpgradeError::kNonceMismatch:
      return "nonce_mismatch";
    case UpgradeError::kUriNotOffered:
      return "uri_not_offered";
    case UpgradeError::kOfferCut:
      return "offer_cut";
  }
  return "unknown";
}

std::string_view describe(UpgradeError e) {
  switch (e) {
    case UpgradeError::kTruncated:
      return "the octets so far begin a stream upgrade message that goes on";
    case UpgradeError::kBadMagic:
      return "the octets do not begin with the stream upgrade magic \"RDMASTRM\": the peer "
             "speaks another protocol";
    case UpgradeError::kBadVersion:
      return "the stream upgrade version is not 1, the only one this side speaks";
    case UpgradeError::kReservedNotZero:
      return "the OFFER's reserved field is not zero";
    case UpgradeError::kBadStatus:
      return "the ANSWER's status is neither upgrade (0) nor decline (1)";
    case UpgradeError::kTooLong:
      return "the providers list is over 256 octets or the URI over 512";
    case UpgradeError::kBadProviders:
      return "the providers list is not comma-separated URI schemes (RFC 3986 s3.1)";
    case UpgradeError::kBadUri:
      return "the upgrade's listener URI is empty, not printable ASCII, or has no scheme://";
    case UpgradeError::kUriOnDecline:
      return "a decline carries a listener URI";
    case UpgradeError::kNonceMismatch:
      return "the ANSWER's nonce is not the OFFER's: it answers no OFFER of ours";
    case UpgradeError::kUriNotOffered:
      return "the upgrade's listener URI has a scheme the OFFER did not list";
    case UpgradeError::kOfferCut:
      return "the client began an OFFER, then closed or did not finish it in time";
  }
  return "unknown stream upgrade error";
}

std::string_view outcome_name(ClientOutcome o) {
  switch (o) {
    case ClientOutcome::kUpgrade:
      return "upgrade";
    case ClientOutcome::kDeclined:
      return "declined";
    case ClientOutcome::kPlainPeer:
      return "plain_peer";
  }
  return "unknown";
}

std::string_view reason_name(PlainPeerReason r) {
  switch (r) {
    case PlainPeerReason::kNone:
      return "none";
    case PlainPeerReason::kOtherOctets:
      return "other_octets";
    case PlainPeerReason::kMalformedAnswer:
      return "malformed_answer";
    case PlainPeerReason::kClosed:
      return "closed";
    case PlainPeerReason::kTimeout:
      return "timeout";
  }
  return "unknown";
}

std::string_view outcome_name(ServerOutcome o) {
  switch (o) {
    case ServerOutcome::kUpgrade:
      return "upgrade";
    case ServerOutcome::kDeclined:
      return "declined";
    case ServerOutcome::kPlain:
      return "plain";
    case ServerOutcome::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view reason_name(PlainClientReason r) {
  switch (r) {
    case PlainClientReason::kNone:
      return "none";
    case PlainClientReason::kNotOffer:
      return "not_offer";
    case PlainClientReason::kApplicationFirst:
      return "application_first";
    case PlainClientReason::kSilent:
      return "silent";
    case PlainClientReason::kClosed:
      return "closed";
  }
  return "unknown";
}

// ---- printing -------------------------------------------------------------------------

std::ostream& operator<<(std::ostream& os, const Offer& o) {
  os << "offer{client=";
  print_id(os, o.client_id) << " nonce=";
  print_nonce(os, o.nonce) << " providers=";
  for (std::size_t i = 0; i < o.providers.size(); ++i) os << (i ? "," : "") << o.providers[i];
  char flags[5];
  std::snprintf(flags, sizeof flags, "0x%02x", o.flags);
  return os << " flags=" << flags << "}";
}

std::ostream& operator<<(std::ostream& os, const Answer& a) {
  os << "answer{" << status_name(a.status) << " server=";
  print_id(os, a.server_id) << " nonce=";
  print_nonce(os, a.nonce);
  if (!a.uri.empty()) os << " uri=" << a.uri;
  return os << "}";
}

std::ostream& operator<<(std::ostream& os, const ClientDecision& d) {
  os << "client_decision{" << outcome_name(d.outcome);
  if (d.reason != PlainPeerReason::kNone) os << " " << reason_name(d.reason);
  if (d.error) os << " error=" << error_name(*d.error);
  if (d.banner) os << " banner";
  if (d.answer) os << " " << *d.answer;
  return os << " octets=" << d.peer_octets.size() << "}";
}

std::ostream& operator<<(std::ostream& os, const ServerDecision& d) {
  os << "server_decision{" << outcome_name(d.outcome);
  if (d.reason != PlainClientReason::kNone) os << " " << reason_name(d.reason);
  if (d.error) os << " error=" << error_name(*d.error);
  if (d.offer) os << " " << *d.offer;
  if (!d.uri.empty()) os << " uri=" << d.uri;
  if (d.peer_closed) os << " peer_closed";
  return os << " octets=" << d.client_octets.size() << "}";
}

// ---- codec ----------------------------------------------------------------------------

std::optional<std::string_view> uri_scheme(std::string_view uri) {
  const auto end = uri.find("://");
  if (end == std::string_view::npos || !is_scheme(uri.substr(0, end))) return std::nullopt;
  return uri.substr(0, end);
}

std::vector<std::uint8_t> encode_offer(const Offer& offer) {
  std::string providers;
  for (std::size_t i = 0; i < offer.providers.size(); ++i) {
    if (i) providers += ',';
    providers += offer.providers[i];
  }
  std::vector<std::uint8_t> out(kOfferFixedSize + providers.size());
  std::copy(kUpgradeMagic.begin(), kUpgradeMagic.end(), out.begin());
  out[kVersionAt] = kUpgradeVersion;
  out[kOfferFlagsAt] = offer.flags;
  store_be16(&out[kOfferReservedAt], 0);
  std::copy(offer.client_id.begin(), offer.client_id.end(), out.begin() + kOfferIdAt);
  store_be64(&out[kOfferNonceAt], offer.nonce);
  store_be16(&out[kOfferLengthAt], static_cast<std::uint16_t>(providers.size()));
  std::copy(providers.begin(), providers.end(), out.begin() + kOfferFixedSize);
  return out;
}

std::vector<std::uint8_t> encode_answer(const Answer& answer) {
  std::vector<std::uint8_t> out(kAnswerFixedSize + answer.uri.size());
  std::copy(kUpgradeMagic.begin(), kUpgradeMagic.end(), out.begin());
  out[kVersionAt] = kUpgradeVersion;
  out[kAnswerStatusAt] = static_cast<std::uint8_t>(answer.status);
  std::copy(answer.server_id.begin(), answer.server_id.end(), out.begin() + kAnswerIdAt);
  store_be64(&out[kAnswerNonceAt], answer.nonce);
  store_be16(&out[kAnswerLengthAt], static_cast<std::uint16_t>(answer.uri.size()));
  std::copy(answer.uri.begin(), answer.uri.end(), out.begin() + kAnswerFixedSize);
  return out;
}

Expected<Decoded<Offer>, UpgradeError> decode_offer(std::span<const std::uint8_t> in) {
  auto magic = check_magic(in);
  if (!magic) return unexpected(magic.error());
  if (in.size() <= kVersionAt) return unexpected(UpgradeError::kTruncated);
  if (in[kVersionAt] != kUpgradeVersion) return unexpected(UpgradeError::kBadVersion);
  if (in.size() < kOfferReservedAt + 2) return unexpected(UpgradeError::kTruncated);
  if (load_be16(&in[kOfferReservedAt]) != 0) return unexpected(UpgradeError::kReservedNotZero);
  if (in.size() < kOfferFixedSize) return unexpected(UpgradeError::kTruncated);
  const std::size_t length = load_be16(&in[kOfferLengthAt]);
  if (length > kMaxProvidersLength) return unexpected(UpgradeError::kTooLong);
  if (in.size() < kOfferFixedSize + length) return unexpected(UpgradeError::kTruncated);
  auto providers = parse_providers(as_text(in.subspan(kOfferFixedSize, length)));
  if (!providers) return unexpected(providers.error());
  Decoded<Offer> d;
  d.message.flags = in[kOfferFlagsAt];
  std::copy_n(&in[kOfferIdAt], d.message.client_id.size(), d.message.client_id.begin());
  d.message.nonce = load_be64(&in[kOfferNonceAt]);
  d.message.providers = std::move(*providers);
  d.size = kOfferFixedSize + length;
  return d;
}

Expected<Decoded<Answer>, UpgradeError> decode_answer(std::span<const std::uint8_t> in) {
  auto magic = check_magic(in);
  if (!magic) return unexpected(magic.error());
  if (in.size() <= kVersionAt) return unexpected(UpgradeError::kTruncated);
  if (in[kVersionAt] != kUpgradeVersion) return unexpected(UpgradeError::kBadVersion);
  if (in.size() <= kAnswerStatusAt) return unexpected(UpgradeError::kTruncated);
  const std::uint8_t status = in[kAnswerStatusAt];
  if (status != static_cast<std::uint8_t>(AnswerStatus::kUpgrade) &&
      status != static_cast<std::uint8_t>(AnswerStatus::kDecline)) {
    return unexpected(UpgradeError::kBadStatus);
  }
  if (in.size() < kAnswerFixedSize) return unexpected(UpgradeError::kTruncated);
  const std::size_t length = load_be16(&in[kAnswerLengthAt]);
  if (length > kMaxUriLength) return unexpected(UpgradeError::kTooLong);
  if (in.size() < kAnswerFixedSize + length) return unexpected(UpgradeError::kTruncated);
  Decoded<Answer> d;
  d.message.status = static_cast<AnswerStatus>(status);
  std::copy_n(&in[kAnswerIdAt], d.message.server_id.size(), d.message.server_id.begin());
  d.message.nonce = load_be64(&in[kAnswerNonceAt]);
  d.message.uri = std::string(as_text(in.subspan(kAnswerFixedSize, length)));
  if (d.message.status == AnswerStatus::kDecline) {
    if (length != 0) return unexpected(UpgradeError::kUriOnDecline);
  } else if (!is_listener_uri(d.message.uri)) {
    return unexpected(UpgradeError::kBadUri);
  }
  d.size = kAnswerFixedSize + length;
  return d;
}

Expected<Answer, UpgradeError> check_answer(const Answer& answer, const Offer& offer) {
  if (answer.nonce != offer.nonce) return unexpected(UpgradeError::kNonceMismatch);
  if (answer.status == AnswerStatus::kUpgrade) {
    const auto scheme = uri_scheme(answer.uri);
    if (!scheme) return unexpected(UpgradeError::kBadUri);
    const bool offered = std::any_of(offer.providers.begin(), offer.providers.end(),
                                     [&](const std::string& p) { return same_scheme(p, *scheme); });
    if (!offered) return unexpected(UpgradeError::kUriNotOffered);
  }
  return answer;
}

// ---- client ---------------------------------------------------------------------------

UpgradeClient::UpgradeClient(Offer offer, ClientOptions options, TimePoint now)
    : offer_(std::move(offer)),
      options_(options),
      deadline_(now + options.answer_timeout),
      out_(encode_offer(offer_)),
      offer_sent_at_(now) {}

std::vector<std::uint8_t> UpgradeClient::take_output() {
  if (decision_) out_.clear();
  offer_taken_ = true;
  return std::exchange(out_, {});
}

void UpgradeClient::on_bytes(std::span<const std::uint8_t> bytes, TimePoint now) {
  if (decision_ || bytes.empty()) return;
  if (in_.empty()) {
    // Causality: an answer to the OFFER cannot arrive before the OFFER has gone out and come
    // back; what does was sent before the server read it.
    first_octet_early_ = !offer_taken_ || now < offer_sent_at_ + options_.min_round_trip;
  }
  // Bounded: an ANSWER is at most kMaxAnswerSize octets, and decode_answer() decides (whole,
  // malformed or not ours) by then, so in_ never holds more than that plus one cut's worth.
  in_.insert(in_.end(), bytes.begin(), bytes.end());
  auto decoded = decode_answer(in_);
  if (!decoded) {
    switch (decoded.error()) {
      case UpgradeError::kTruncated:
        return;
      case UpgradeError::kBadMagic:
        plain_peer(PlainPeerReason::kOtherOctets, std::nullopt);
        return;
      default:
        plain_peer(PlainPeerReason::kMalformedAnswer, decoded.error());
        return;
    }
  }
  auto answer = check_answer(decoded->message, offer_);
  if (!answer) {
    plain_peer(PlainPeerReason::kMalformedAnswer, answer.error());
    return;
  }
  ClientDecision d;
  d.outcome =
      answer->status == AnswerStatus::kUpgrade ? ClientOutcome::kUpgrade : ClientOutcome::kDeclined;
  d.answer = std::move(*answer);
  d.peer_octets.assign(in_.begin() + static_cast<std::ptrdiff_t>(decoded->size), in_.end());
  in_.clear();
  decision_ = std::move(d);
}

void UpgradeClient::on_peer_closed(TimePoint) {
  if (!decision_) plain_peer(PlainPeerReason::kClosed, std::nullopt);
}

void UpgradeClient::on_timer(TimePoint now) {
  if (!decision_ && now >= deadline_) plain_peer(PlainPeerReason::kTimeout, std::nullopt);
}

std::optional<TimePoint> UpgradeClient::next_deadline() const {
  if (decision_) return std::nullopt;
  return deadline_;
}

void UpgradeClient::plain_peer(PlainPeerReason reason, std::optional<UpgradeError> error) {
  ClientDecision d;
  d.outcome = ClientOutcome::kPlainPeer;
  d.reason = reason;
  d.error = error;
  // Only octets that cannot begin an ANSWER can be a banner: a magic-led message is ours.
  d.banner = reason == PlainPeerReason::kOtherOctets && first_octet_early_;
  d.peer_octets = std::move(in_);
  in_.clear();
  decision_ = std::move(d);
}

// ---- server ---------------------------------------------------------------------------

UpgradeServer::UpgradeServer(ServerOptions options, TimePoint now)
    : options_(std::move(options)), deadline_(now + options_.offer_wait) {}

void UpgradeServer::on_bytes(std::span<const std::uint8_t> bytes, TimePoint) {
  if (decision_ || bytes.empty()) return;
  // Bounded: decode_offer() decides every OFFER by kMaxOfferSize octets, so in_ never holds
  // more than that plus one cut's worth.
  in_.insert(in_.end(), bytes.begin(), bytes.end());
  auto decoded = decode_offer(in_);
  if (decoded) {
    answer(std::move(decoded->message), decoded->size);
  } else if (decoded.error() == UpgradeError::kBadMagic) {
    decide_plain(PlainClientReason::kNotOffer);
  } else if (decoded.error() != UpgradeError::kTruncated) {
    fail(decoded.error());
  }
}

void UpgradeServer::on_peer_closed(TimePoint) {
  if (decision_) return;
  peer_closed_ = true;
  // A prefix of the magic followed by the end of stream is a plain client's last octets.
  if (in_.size() < kUpgradeMagic.size()) {
    decide_plain(PlainClientReason::kClosed);
  } else {
    fail(UpgradeError::kOfferCut);
  }
}

void UpgradeServer::on_timer(TimePoint now) {
  if (decision_ || now < deadline_) return;
  if (in_.size() < kUpgradeMagic.size()) {
    decide_plain(PlainClientReason::kSilent);
  } else {
    fail(UpgradeError::kOfferCut);
  }
}

bool UpgradeServer::on_application_write(TimePoint) {
  if (decision_) return true;
  if (!in_.empty()) return false;
  decide_plain(PlainClientReason::kApplicationFirst);
  return true;
}

std::vector<std::uint8_t> UpgradeServer::take_output() {
  return std::exchange(out_, {});
}

std::optional<TimePoint> UpgradeServer::next_deadline() const {
  if (decision_) return std::nullopt;
  return deadline_;
}

void UpgradeServer::decide_plain(PlainClientReason reason) {
  ServerDecision d;
  d.outcome = ServerOutcome::kPlain;
  d.reason = reason;
  d.client_octets = std::move(in_);
  in_.clear();
  d.peer_closed = peer_closed_;
  decision_ = std::move(d);
}

void UpgradeServer::fail(UpgradeError error) {
  ServerDecision d;
  d.outcome = ServerOutcome::kFailed;
  d.error = error;
  d.peer_closed = peer_closed_;
  in_.clear();
  decision_ = std::move(d);
}

void UpgradeServer::answer(Offer offer, std::size_t offer_size) {
  Answer a;
  a.server_id = options_.server_id;
  a.nonce = offer.nonce;
  if (options_.accept_upgrades) {
    // Our preference first: the first listener whose scheme the client can run.
    for (const std::string& listener : options_.listeners) {
      const auto scheme = uri_scheme(listener);
      if (!scheme || !is_listener_uri(listener) || listener.size() > kMaxUriLength) continue;
      const bool offered =
          std::any_of(offer.providers.begin(), offer.providers.end(),
                      [&](const std::string& p) { return same_scheme(p, *scheme); });
      if (offered) {
        a.status = AnswerStatus::kUpgrade;
        a.uri = listener;
        break;
      }
    }
  }
  ServerDecision d;
  d.outcome =
      a.status == AnswerStatus::kUpgrade ? ServerOutcome::kUpgrade : ServerOutcome::kDeclined;
  d.uri = a.uri;
  d.offer = std::move(offer);
  d.client_octets.assign(in_.begin() + static_cast<std::ptrdiff_t>(offer_size), in_.end());
  in_.clear();
  d.peer_closed = peer_closed_;
  out_ = encode_answer(a);
  decision_ = std::move(d);
}

}  // namespace rdma_interop::stream
