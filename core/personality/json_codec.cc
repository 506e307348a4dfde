#include "core/personality/json_codec.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/personality/policy_names.h"
#include "core/wire/iwarp_constants.h"

namespace rdma_interop::personality {
namespace {

using nlohmann::json;
using namespace rdma_interop::cm;

// Wire names (policy_names.h), shared by the parser and to_json() so the two always agree.
constexpr const auto& kRtrNames = PolicyNames<RtrType>::table;
constexpr const auto& kCrcNames = PolicyNames<CrcMode>::table;
constexpr const auto& kP2pNames = PolicyNames<PeerToPeer>::table;
constexpr const auto& kNewerNames = PolicyNames<OnNewerRevision>::table;
constexpr const auto& kRefusalNames = PolicyNames<Refusal>::table;
constexpr const auto& kMalformedNames = PolicyNames<OnMalformed>::table;
constexpr const auto& kRtrReplyNames = PolicyNames<RtrReply>::table;
constexpr const auto& kNoCommonNames = PolicyNames<NoCommonRtr>::table;
constexpr const auto& kRtrCheckNames = PolicyNames<RtrCheck>::table;
constexpr const auto& kFromReplyNames = PolicyNames<RtrFromReply>::table;

template <class E, std::size_t N>
std::string_view name_of(const std::pair<std::string_view, E> (&table)[N], E value) {
  for (const auto& [name, v] : table) {
    if (v == value) return name;
  }
  return "?";
}

template <class E, std::size_t N>
std::string names_of(const std::pair<std::string_view, E> (&table)[N]) {
  std::string out;
  for (const auto& [name, v] : table) {
    if (!out.empty()) out += " | ";
    out += name;
  }
  return out;
}

constexpr std::string_view kTopKeys[] = {"name", "description", "source", "mpa", "private_data"};
constexpr std::string_view kSourceKeys[] = {"file", "version"};
constexpr std::string_view kMpaKeys[] = {"revision",
                                         "crc",
                                         "markers_wanted",
                                         "markers_supported",
                                         "peer_to_peer",
                                         "rtr_offer",
                                         "rtr_accepted",
                                         "rtr_preference",
                                         "rtr_reply",
                                         "no_common_rtr",
                                         "rtr_check",
                                         "rtr_from_reply",
                                         "rtr_in_revision1",
                                         "read_rtr_sink_stag",
                                         "read_rtr_source_stag",
                                         "refuse_zero_stag_read_rtr",
                                         "ird",
                                         "ord",
                                         "strict_ird_ord",
                                         "private_data_limit",
                                         "reject_reserved_bits",
                                         "fallback_to_revision1",
                                         "on_newer_revision",
                                         "refuse_with",
                                         "on_malformed_frame",
                                         "echo_reserved_bits",
                                         "extension_bits",
                                         "ird_ord_sentinel",
                                         "send_rtr",
                                         "request_timeout_ms",
                                         "reply_timeout_ms",
                                         "rtr_timeout_ms",
                                         "first_fpdu_delay_ms"};

// One hour: longer than any handshake wait makes sense, short enough to catch a unit slip
// (seconds written where milliseconds belong the other way round are caught by review).
constexpr std::int64_t kMaxTimeoutMs = 3'600'000;

template <std::size_t N>
std::string join(const std::string_view (&keys)[N]) {
  std::string out;
  for (auto k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

std::size_t line_of_offset(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + offset, '\n'));
}

// Errors are "origin:line: sentence". nlohmann keeps no positions once parsed, so the line
// of a key is found by searching the text for "key" (after its parent key for nested ones):
// right for any file a person writes, and the error is still exact without it.
class ErrorContext {
  // Built by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on `"\"" + std::string(k)`.
  static std::string quoted(std::string_view key) {
    std::string q;
    q.reserve(key.size() + 2);
    q += '"';
    q += key;
    q += '"';
    return q;
  }

 public:
  ErrorContext(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  std::string at_key(std::string_view parent, std::string_view key, const std::string& what) const {
    std::size_t from = 0;
    if (!parent.empty()) {
      auto p = text_.find(quoted(parent));
      if (p != std::string_view::npos) from = p;
    }
    auto pos = text_.find(quoted(key), from);
    if (pos == std::string_view::npos) return std::string(origin_) + ": " + what;
    return std::string(origin_) + ":" + std::to_string(line_of_offset(text_, pos)) + ": " + what;
  }
  std::string plain(const std::string& what) const { return std::string(origin_) + ": " + what; }

 private:
  std::string_view text_;
  std::string_view origin_;
};

std::string type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number with a fraction";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// Reads the "mpa" object's fields into a policy; the first problem is the error.
class MpaReader {
 public:
  MpaReader(const json& mpa, const ErrorContext& ctx) : mpa_(mpa), ctx_(ctx) {}

  std::optional<std::string> read(MpaPolicy& p) {
    for (const auto& [key, value] : mpa_.items()) {
      if (std::find(std::begin(kMpaKeys), std::end(kMpaKeys), key) == std::end(kMpaKeys)) {
        return ctx_.at_key(
            "mpa", key,
            "unknown key \"mpa." + key + "\" (known keys in \"mpa\": " + join(kMpaKeys) + ")");
      }
    }
    std::int64_t n = 0;
    if (auto e = integer("revision", wire::kMpaRevision1, wire::kMpaRevisionErdma, n)) return e;
    if (given("revision")) {
      if (n != wire::kMpaRevision1 && n != wire::kMpaRevision2 && n != wire::kMpaRevisionErdma) {
        return ctx_.at_key("mpa", "revision",
                           "\"mpa.revision\" is " + std::to_string(n) +
                               ", not 1 (RFC 5044), 2 (RFC 6581) or 129 (erdma's own)");
      }
      p.revision = static_cast<std::uint8_t>(n);
    }
    if (auto e = enumerated("crc", kCrcNames, p.crc)) return e;
    if (auto e = boolean("markers_wanted", p.markers_wanted)) return e;
    if (auto e = boolean("markers_supported", p.markers_supported)) return e;
    if (auto e = enumerated("peer_to_peer", kP2pNames, p.peer_to_peer)) return e;
    if (auto e = rtr_list("rtr_offer", nullptr, &p.rtr_offer)) return e;
    if (given("rtr_accepted")) {
      RtrSet accepted;
      if (auto e = rtr_list("rtr_accepted", nullptr, &accepted)) return e;
      p.rtr_accepted = accepted;
    }
    if (auto e = rtr_list("rtr_preference", &p.rtr_preference, nullptr)) return e;
    if (auto e = enumerated("rtr_reply", kRtrReplyNames, p.rtr_reply)) return e;
    if (auto e = enumerated("no_common_rtr", kNoCommonNames, p.no_common_rtr)) return e;
    if (auto e = enumerated("rtr_check", kRtrCheckNames, p.rtr_check)) return e;
    if (auto e = enumerated("rtr_from_reply", kFromReplyNames, p.rtr_from_reply)) return e;
    if (auto e = boolean("rtr_in_revision1", p.rtr_in_revision1)) return e;
    if (auto e = integer("read_rtr_sink_stag", 0, 0xffffffff, n)) return e;
    if (given("read_rtr_sink_stag")) p.read_rtr_sink_stag = static_cast<std::uint32_t>(n);
    if (auto e = integer("read_rtr_source_stag", 0, 0xffffffff, n)) return e;
    if (given("read_rtr_source_stag")) p.read_rtr_source_stag = static_cast<std::uint32_t>(n);
    if (auto e = boolean("refuse_zero_stag_read_rtr", p.refuse_zero_stag_read_rtr)) return e;
    if (auto e = integer("ird", 0, wire::kMpaIrdOrdMask, n)) return e;
    if (given("ird")) p.ird = static_cast<std::uint16_t>(n);
    if (auto e = integer("ord", 0, wire::kMpaIrdOrdMask, n)) return e;
    if (given("ord")) p.ord = static_cast<std::uint16_t>(n);
    if (auto e = boolean("strict_ird_ord", p.strict_ird_ord)) return e;
    if (auto e = integer("private_data_limit", 0, wire::kMpaMaxPrivateDataRfc, n)) return e;
    if (given("private_data_limit")) p.private_data_limit = static_cast<std::size_t>(n);
    if (auto e = boolean("reject_reserved_bits", p.reject_reserved_bits)) return e;
    if (auto e = boolean("fallback_to_revision1", p.fallback_to_revision1)) return e;
    if (auto e = enumerated("on_newer_revision", kNewerNames, p.on_newer_revision)) return e;
    if (auto e = enumerated("refuse_with", kRefusalNames, p.refuse_with)) return e;
    if (auto e = enumerated("on_malformed_frame", kMalformedNames, p.on_malformed_frame)) return e;
    if (auto e = boolean("echo_reserved_bits", p.echo_reserved_bits)) return e;
    if (auto e = integer("extension_bits", 0, wire::kMpaFlagReservedMask, n)) return e;
    if (given("extension_bits")) p.extension_bits = static_cast<std::uint8_t>(n);
    if (auto e = boolean("ird_ord_sentinel", p.ird_ord_sentinel)) return e;
    if (auto e = boolean("send_rtr", p.send_rtr)) return e;
    if (auto e = timeout("request_timeout_ms", p.request_timeout)) return e;
    if (auto e = timeout("reply_timeout_ms", p.reply_timeout)) return e;
    if (auto e = timeout("rtr_timeout_ms", p.rtr_timeout)) return e;
    if (auto e = integer("first_fpdu_delay_ms", 0, kMaxTimeoutMs, n)) return e;
    if (given("first_fpdu_delay_ms")) p.first_fpdu_delay = std::chrono::milliseconds(n);
    return std::nullopt;
  }

 private:
  // A key whose value is null is as if it were absent: rdma-probe writes null for what it
  // could not find out about a peer, and its report loads as a personality as it is.
  bool given(std::string_view key) const {
    auto it = mpa_.find(key);
    return it != mpa_.end() && !it->is_null();
  }
  json::const_iterator lookup(std::string_view key) const {
    auto it = mpa_.find(key);
    return it != mpa_.end() && it->is_null() ? mpa_.end() : it;
  }

  std::string wrong_type(std::string_view key, std::string_view wanted, const json& v) const {
    return ctx_.at_key("mpa", key,
                       "\"mpa." + std::string(key) + "\" must be " + std::string(wanted) +
                           ", not " + type_name(v));
  }

  std::optional<std::string> boolean(std::string_view key, bool& out) const {
    auto it = lookup(key);
    if (it == mpa_.end()) return std::nullopt;
    if (!it->is_boolean()) return wrong_type(key, "true or false", *it);
    out = it->get<bool>();
    return std::nullopt;
  }

  std::optional<std::string> integer(std::string_view key, std::int64_t lo, std::int64_t hi,
                                     std::int64_t& out) const {
    auto it = lookup(key);
    if (it == mpa_.end()) return std::nullopt;
    if (!it->is_number_integer()) return wrong_type(key, "an integer", *it);
    bool too_big = it->is_number_unsigned() &&
                   it->get<std::uint64_t>() >
                       static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    std::int64_t v = too_big ? std::numeric_limits<std::int64_t>::max() : it->get<std::int64_t>();
    if (v < lo || v > hi) {
      std::ostringstream s;
      s << "\"mpa." << key << "\" is " << it->dump() << ", out of range " << lo << ".." << hi;
      if (key == "ird" || key == "ord") s << " (0x3fff: RFC 6581 s3 IRD/ORD are 14 bits)";
      if (key == "private_data_limit") s << " (RFC 5044 s7.1 allows at most 512 octets)";
      if (key == "revision") s << " (1: RFC 5044, 2: RFC 6581, 129: erdma)";
      if (key == "extension_bits") s << " (the four reserved flag bits)";
      return ctx_.at_key("mpa", key, s.str());
    }
    out = v;
    return std::nullopt;
  }

  std::optional<std::string> timeout(std::string_view key, std::chrono::milliseconds& out) const {
    std::int64_t v = 0;
    if (auto e = integer(key, 1, kMaxTimeoutMs, v)) return e;
    if (given(key)) out = std::chrono::milliseconds(v);
    return std::nullopt;
  }

  template <class E, std::size_t N>
  std::optional<std::string> enumerated(std::string_view key,
                                        const std::pair<std::string_view, E> (&table)[N],
                                        E& out) const {
    auto it = lookup(key);
    if (it == mpa_.end()) return std::nullopt;
    if (!it->is_string()) return wrong_type(key, "one of " + names_of(table), *it);
    auto text = it->get<std::string>();
    for (const auto& [name, v] : table) {
      if (name == text) {
        out = v;
        return std::nullopt;
      }
    }
    return ctx_.at_key(
        "mpa", key,
        "\"mpa." + std::string(key) + "\" is \"" + text + "\", not one of " + names_of(table));
  }

  // Either a list (preference order) or a set (offer); duplicates are errors in both.
  std::optional<std::string> rtr_list(std::string_view key, std::vector<RtrType>* list,
                                      RtrSet* set) const {
    auto it = lookup(key);
    if (it == mpa_.end()) return std::nullopt;
    std::string wanted = "an array of RTR types (" + names_of(kRtrNames) + ")";
    if (!it->is_array()) return wrong_type(key, wanted, *it);
    std::vector<RtrType> types;
    for (const auto& item : *it) {
      if (!item.is_string()) {
        return ctx_.at_key(
            "mpa", key,
            "\"mpa." + std::string(key) + "\" must be " + wanted + "; it holds " + type_name(item));
      }
      auto text = item.get<std::string>();
      std::optional<RtrType> type;
      for (const auto& [name, v] : kRtrNames) {
        if (name == text) type = v;
      }
      if (!type) {
        return ctx_.at_key("mpa", key,
                           "\"mpa." + std::string(key) + "\" holds \"" + text +
                               "\", not an RTR type (" + names_of(kRtrNames) + ")");
      }
      if (std::find(types.begin(), types.end(), *type) != types.end()) {
        return ctx_.at_key("mpa", key,
                           "\"mpa." + std::string(key) + "\" names \"" + text + "\" twice");
      }
      types.push_back(*type);
    }
    if (list) *list = types;
    if (set) {
      *set = RtrSet{};
      for (auto t : types) {
        (t == RtrType::kSend ? set->send : t == RtrType::kWrite ? set->write : set->read) = true;
      }
    }
    return std::nullopt;
  }

  const json& mpa_;
  const ErrorContext& ctx_;
};

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

Expected<cm::Personality, std::string> parse_personality(std::string_view json_text,
                                                         std::string_view origin,
                                                         std::string_view default_name) {
  ErrorContext ctx(json_text, origin);
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string what = e.what();
    if (auto p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
    return unexpected(std::string(origin) + ":" + std::to_string(line_of_offset(json_text, at)) +
                      ": invalid JSON: " + what);
  }
  if (!doc.is_object()) {
    return unexpected(
        ctx.plain("a personality is a JSON object ({\"name\": ..., \"mpa\": {...}}), "
                  "not " +
                  type_name(doc)));
  }
  for (const auto& [key, value] : doc.items()) {
    if (std::find(std::begin(kTopKeys), std::end(kTopKeys), key) == std::end(kTopKeys)) {
      return unexpected(
          ctx.at_key({}, key, "unknown key \"" + key + "\" (known keys: " + join(kTopKeys) + ")"));
    }
  }

  cm::Personality p;
  if (auto it = doc.find("name"); it != doc.end()) {
    if (!it->is_string()) {
      return unexpected(ctx.at_key({}, "name", "\"name\" must be a string, not " + type_name(*it)));
    }
    p.name = it->get<std::string>();
  } else if (!default_name.empty()) {
    p.name = std::string(default_name);
  } else {
    return unexpected(ctx.plain("\"name\" is missing"));
  }
  if (!valid_name(p.name)) {
    return unexpected(ctx.at_key(
        {}, "name", "\"name\" is \"" + p.name + "\"; use letters, digits, '-', '_' and '.' only"));
  }
  if (auto it = doc.find("description"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) {
      return unexpected(
          ctx.at_key({}, "description", "\"description\" must be a string, not " + type_name(*it)));
    }
    p.description = it->get<std::string>();
  }
  if (auto it = doc.find("source"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) {
      return unexpected(
          ctx.at_key({}, "source",
                     "\"source\" must be an object ({\"file\": ..., \"version\": ...}), not " +
                         type_name(*it)));
    }
    for (const auto& [key, value] : it->items()) {
      if (std::find(std::begin(kSourceKeys), std::end(kSourceKeys), key) == std::end(kSourceKeys)) {
        return unexpected(ctx.at_key("source", key,
                                     "unknown key \"source." + key +
                                         "\" (known keys in \"source\": " + join(kSourceKeys) +
                                         ")"));
      }
      if (!value.is_null() && !value.is_string()) {
        return unexpected(ctx.at_key(
            "source", key, "\"source." + key + "\" must be a string, not " + type_name(value)));
      }
    }
    if (auto f = it->find("file"); f != it->end() && f->is_string()) p.source_file = *f;
    if (auto v = it->find("version"); v != it->end() && v->is_string()) p.source_version = *v;
  }
  if (auto it = doc.find("mpa"); it != doc.end()) {
    if (!it->is_object()) {
      return unexpected(ctx.at_key({}, "mpa", "\"mpa\" must be an object, not " + type_name(*it)));
    }
    if (auto e = MpaReader(*it, ctx).read(p.mpa)) return unexpected(*e);
  }
  if (auto it = doc.find("private_data"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) {
      return unexpected(
          ctx.at_key({}, "private_data",
                     "\"private_data\" must be a string (UTF-8 text), not " + type_name(*it)));
    }
    auto text = it->get<std::string>();
    p.private_data.assign(text.begin(), text.end());
    if (p.private_data.size() > p.mpa.private_data_limit) {
      return unexpected(ctx.at_key({}, "private_data",
                                   "\"private_data\" is " + std::to_string(p.private_data.size()) +
                                       " octets, above \"mpa.private_data_limit\" (" +
                                       std::to_string(p.mpa.private_data_limit) + ")"));
    }
    // What our own frames can carry: a personality that could never send its Request or
    // Reply is refused here, not on every connection later.
    const bool enhanced = p.mpa.revision == wire::kMpaRevision2;
    const std::size_t room = cm::private_data_room(p.mpa);
    if (p.private_data.size() > room) {
      return unexpected(ctx.at_key(
          {}, "private_data",
          "\"private_data\" is " + std::to_string(p.private_data.size()) +
              " octets; an MPA revision-" + std::to_string(p.mpa.revision) +
              " frame carries at most " + std::to_string(room) +
              (enhanced ? " (RFC 5044 s7.1: 512 octets of private data, 4 of them the RFC 6581 "
                          "s3 IRD/ORD words)"
                        : " (RFC 5044 s7.1)")));
    }
  }
  if (auto problems = cm::validate(p.mpa); !problems.empty()) {
    std::string all;
    for (const auto& problem : problems) {
      if (!all.empty()) all += "; ";
      all += problem;
    }
    return unexpected(ctx.plain("the \"mpa\" policy is not usable: " + all));
  }
  return p;
}

nlohmann::ordered_json to_json(const cm::MpaPolicy& p) {
  using json = nlohmann::ordered_json;
  json offer = json::array();
  for (const auto& [name, t] : kRtrNames) {
    if (p.rtr_offer.contains(t)) offer.push_back(name);
  }
  json preference = json::array();
  for (auto t : p.rtr_preference) preference.push_back(name_of(kRtrNames, t));
  json accepted = nullptr;
  if (p.rtr_accepted) {
    accepted = json::array();
    for (const auto& [name, t] : kRtrNames) {
      if (p.rtr_accepted->contains(t)) accepted.push_back(name);
    }
  }
  return json{
      {"revision", p.revision},
      {"crc", name_of(kCrcNames, p.crc)},
      {"markers_wanted", p.markers_wanted},
      {"markers_supported", p.markers_supported},
      {"peer_to_peer", name_of(kP2pNames, p.peer_to_peer)},
      {"rtr_offer", offer},
      {"rtr_accepted", accepted},
      {"rtr_preference", preference},
      {"rtr_reply", name_of(kRtrReplyNames, p.rtr_reply)},
      {"no_common_rtr", name_of(kNoCommonNames, p.no_common_rtr)},
      {"rtr_check", name_of(kRtrCheckNames, p.rtr_check)},
      {"rtr_from_reply", name_of(kFromReplyNames, p.rtr_from_reply)},
      {"rtr_in_revision1", p.rtr_in_revision1},
      {"read_rtr_sink_stag", p.read_rtr_sink_stag},
      {"read_rtr_source_stag", p.read_rtr_source_stag},
      {"refuse_zero_stag_read_rtr", p.refuse_zero_stag_read_rtr},
      {"ird", p.ird},
      {"ord", p.ord},
      {"strict_ird_ord", p.strict_ird_ord},
      {"private_data_limit", p.private_data_limit},
      {"reject_reserved_bits", p.reject_reserved_bits},
      {"fallback_to_revision1", p.fallback_to_revision1},
      {"on_newer_revision", name_of(kNewerNames, p.on_newer_revision)},
      {"refuse_with", name_of(kRefusalNames, p.refuse_with)},
      {"on_malformed_frame", name_of(kMalformedNames, p.on_malformed_frame)},
      {"echo_reserved_bits", p.echo_reserved_bits},
      {"extension_bits", p.extension_bits},
      {"ird_ord_sentinel", p.ird_ord_sentinel},
      {"send_rtr", p.send_rtr},
      {"request_timeout_ms", p.request_timeout.count()},
      {"reply_timeout_ms", p.reply_timeout.count()},
      {"rtr_timeout_ms", p.rtr_timeout.count()},
      {"first_fpdu_delay_ms", p.first_fpdu_delay.count()},
  };
}

nlohmann::ordered_json to_json(const cm::Personality& p) {
  using json = nlohmann::ordered_json;
  json j{{"name", p.name}, {"description", p.description}};
  if (!p.source_file.empty() || !p.source_version.empty()) {
    j["source"] = json{{"file", p.source_file}, {"version", p.source_version}};
  }
  j["mpa"] = to_json(p.mpa);
  if (!p.private_data.empty()) {
    // Stored as text; bytes that are not valid UTF-8 are replaced when printed.
    j["private_data"] = std::string(p.private_data.begin(), p.private_data.end());
  }
  return j;
}

}  // namespace rdma_interop::personality

namespace rdma_interop::cm {

std::ostream& operator<<(std::ostream& os, const Personality& personality) {
  return os << personality::to_json(personality).dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
}

}  // namespace rdma_interop::cm
