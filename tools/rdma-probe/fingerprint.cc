#include "tools/rdma-probe/fingerprint.h"

#include <algorithm>
#include <cstdio>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using cm::RtrSet;
using cm::RtrType;

// What rdma-probe offers (probe_session.h): IRD and ORD 0x3ffe, one below the 0x3fff that
// irdma reads as "no IRD/ORD" (its own probe asks that separately).
constexpr std::uint16_t kProbeIrdOrd = wire::kMpaIrdOrdMask - 1;
constexpr std::size_t kRfcPrivateData = wire::kMpaMaxPrivateDataRfc;

std::optional<RtrType> first_preferred(const cm::MpaPolicy& p, const RtrSet& candidates) {
  for (RtrType t : p.rtr_preference) {
    if (candidates.contains(t)) return t;
  }
  for (RtrType t : {RtrType::kRead, RtrType::kWrite, RtrType::kSend}) {
    if (candidates.contains(t)) return t;
  }
  return std::nullopt;
}

RtrSet intersect(const RtrSet& a, const RtrSet& b) {
  return RtrSet{.send = a.send && b.send, .write = a.write && b.write, .read = a.read && b.read};
}

// "send,write,read" order, as the probe writes what a Reply names.
std::string list(const RtrSet& s) {
  std::string out;
  for (RtrType t : {RtrType::kSend, RtrType::kWrite, RtrType::kRead}) {
    if (!s.contains(t)) continue;
    if (!out.empty()) out += ",";
    out += cm::rtr_name(t);
  }
  return out;
}

std::string refusal(const cm::MpaPolicy& p) {
  return p.refuse_with == cm::Refusal::kReset ? "reset" : "rejected";
}

// mpa_policy.h's Reply rules, read directly: what a peer-to-peer Request offering `offer`
// gets back from a responder with policy `p`.
std::string rtr_answer(const cm::MpaPolicy& p, const RtrSet& offer) {
  const RtrSet accepted = cm::accepted_rtrs(p);
  const RtrSet common = intersect(offer, accepted);
  if (!common.empty()) {
    switch (p.rtr_reply) {
      case cm::RtrReply::kChosen:
        return std::string(cm::rtr_name(*first_preferred(p, common)));
      case cm::RtrReply::kOwn:
        return list(p.rtr_offer);
      case cm::RtrReply::kAllCommon:
        return list(common);
    }
  }
  switch (p.no_common_rtr) {
    case cm::NoCommonRtr::kRefuse:
      return p.refuse_with == cm::Refusal::kReset ? "reset" : "none";
    case cm::NoCommonRtr::kPropose: {
      const auto t = first_preferred(p, accepted);
      return t ? std::string(cm::rtr_name(*t)) : "none";
    }
    case cm::NoCommonRtr::kOfferAll:
      return accepted.empty() ? "none" : list(accepted);
    case cm::NoCommonRtr::kDecline:
      return "declined";
  }
  return "none";
}

std::string newer(cm::OnNewerRevision n) {
  switch (n) {
    case cm::OnNewerRevision::kReplyOwnRevision:
      return "reply";
    case cm::OnNewerRevision::kReset:
      return "reset";
    case cm::OnNewerRevision::kClose:
      return "close";
  }
  return "reply";
}

std::string crc_name(cm::CrcMode c) {
  switch (c) {
    case cm::CrcMode::kWant:
      return "want";
    case cm::CrcMode::kOptional:
      return "optional";
    case cm::CrcMode::kRefuse:
      return "refuse";
  }
  return "optional";
}

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

bool is_setting(const std::string& trait) {
  return trait == "ird" || trait == "ord";
}

Traits expected_traits(const cm::MpaPolicy& p) {
  Traits t = json::object();
  const bool rev2 = p.revision == wire::kMpaRevision2;
  t["revision"] = p.revision;
  t["newer_revision"] = newer(p.on_newer_revision);
  t["crc"] = crc_name(p.crc);
  t["crc_refusal"] = p.crc == cm::CrcMode::kRefuse ? json(refusal(p)) : json(nullptr);
  t["markers_wanted"] = p.markers_wanted;
  t["markers_supported"] = p.markers_supported;
  t["markers_refusal"] = p.markers_supported ? json(nullptr) : json(refusal(p));
  if (rev2) {
    switch (p.peer_to_peer) {
      case cm::PeerToPeer::kOff:
        t["peer_to_peer"] = "off";
        break;
      case cm::PeerToPeer::kWhenAsked:
      case cm::PeerToPeer::kOn:
        t["peer_to_peer"] = "accepted";
        break;
      case cm::PeerToPeer::kRequired:
        t["peer_to_peer"] = "required";
        break;
    }
    t["peer_to_peer_refusal"] =
        p.peer_to_peer == cm::PeerToPeer::kRequired ? json(refusal(p)) : json(nullptr);
    if (p.peer_to_peer != cm::PeerToPeer::kOff) {
      t["rtr_send"] = rtr_answer(p, {.send = true});
      t["rtr_write"] = rtr_answer(p, {.write = true});
      t["rtr_read"] = rtr_answer(p, {.read = true});
      t["rtr_all"] = rtr_answer(p, {.send = true, .write = true, .read = true});
    }
  }
  if (p.revision == wire::kMpaRevision1 || rev2) {
    std::string rev1 = "none";
    if (p.rtr_in_revision1) rev1 = list(p.rtr_offer);
    t["rtr_revision1"] = rev1;
  }
  if (rev2) {
    // An ORD of 0x3ffe cannot exceed an IRD of 0x3ffe or more: nothing to see then.
    const bool visible = p.ird < kProbeIrdOrd;
    t["strict_ird_ord"] = visible ? json(p.strict_ird_ord) : json(nullptr);
    t["strict_refusal"] = visible && p.strict_ird_ord ? json(refusal(p)) : json(nullptr);
    t["ird_ord_sentinel"] = p.ird_ord_sentinel;
  }
  t["private_data_limit"] = p.private_data_limit;
  t["oversize_refusal"] =
      p.private_data_limit < kRfcPrivateData
          ? json(p.on_malformed_frame == cm::OnMalformed::kClose ? "closed" : "reset")
          : json(nullptr);
  t["reserved_rejected"] = p.reject_reserved_bits;
  t["reserved_echoed"] = p.echo_reserved_bits;
  t["extension_rejected"] = false;  // the codec keeps the vendor bits (mpa_frame.h)
  if (rev2) {
    t["ird"] = p.ird;
    t["ord"] = std::min<std::uint16_t>(p.ord, kProbeIrdOrd);
  }
  return t;
}

Fingerprint fingerprint(const Traits& observed, const std::vector<cm::Personality>& known) {
  Fingerprint fp;
  for (const auto& k : known) {
    PersonalityMatch m;
    m.name = k.name;
    if (!k.source_file.empty()) {
      m.source = k.source_file;
      if (!k.source_version.empty()) m.source += ", " + k.source_version;
    }
    const Traits expected = expected_traits(k.mpa);
    // Every trait the peer showed counts; one the personality would not show at all (a
    // peer-to-peer answer from what would be a revision-1 peer) is a difference. A trait
    // the peer did not show (not applicable, or the budget ran out) decides nothing.
    for (const auto& [trait, got] : observed.items()) {
      if (got.is_null()) continue;
      auto it = expected.find(trait);
      const json want = it == expected.end() ? json(nullptr) : *it;
      if (is_setting(trait)) {
        if (got != want) m.settings_differ.push_back({trait, got, want});
        continue;
      }
      ++m.compared;
      if (got == want) {
        ++m.matched;
      } else {
        m.differs.push_back({trait, got, want});
      }
    }
    m.score = m.compared ? static_cast<double>(m.matched) / m.compared : 0.0;
    fp.matches.push_back(std::move(m));
  }
  std::stable_sort(fp.matches.begin(), fp.matches.end(),
                   [](const PersonalityMatch& a, const PersonalityMatch& b) {
                     if (a.score != b.score) return a.score > b.score;
                     return a.settings_differ.size() < b.settings_differ.size();
                   });
  for (const auto& m : fp.matches) {
    if (m.compared > 0 && m.matched == m.compared) fp.behaves_like.push_back(m.name);
  }
  // Full matches in `known`'s order, not the sort's.
  std::vector<std::string> ordered;
  for (const auto& k : known) {
    if (std::find(fp.behaves_like.begin(), fp.behaves_like.end(), k.name) !=
        fp.behaves_like.end()) {
      ordered.push_back(k.name);
    }
  }
  fp.behaves_like = ordered;
  if (!fp.matches.empty()) fp.closest = fp.matches.front().name;

  auto counts = [](const PersonalityMatch& m) {
    return std::to_string(m.matched) + " of " + std::to_string(m.compared) + " traits";
  };
  auto settings = [](const PersonalityMatch& m) {
    std::string s;
    for (const auto& d : m.settings_differ) {
      if (!s.empty()) s += ", ";
      s += d.trait + " " + value_text(d.peer) + " (" + m.name + ": " + value_text(d.personality) +
           ")";
    }
    return s;
  };
  if (fp.behaves_like.size() == 1) {
    fp.verdict = "known";
    const auto& m = fp.matches.front();
    fp.summary = "behaves like " + m.name + " (" + counts(m) + " match";
    if (!m.settings_differ.empty()) fp.summary += "; settings differ: " + settings(m);
    fp.summary += ")";
  } else if (fp.behaves_like.size() > 1) {
    fp.verdict = "ambiguous";
    std::string names;
    for (std::size_t i = 0; i < fp.behaves_like.size(); ++i) {
      if (i) names += i + 1 == fp.behaves_like.size() ? " or " : ", ";
      names += fp.behaves_like[i];
    }
    fp.summary = "behaves like " + names + ": they match every trait the probe sees (" +
                 counts(fp.matches.front()) +
                 ") and differ only in what it cannot see from outside";
  } else if (!fp.matches.empty() && fp.matches.front().compared > 0) {
    const auto& m = fp.matches.front();
    fp.summary = "unknown stack, closest: " + m.name + " (" + counts(m) + "; differs in ";
    for (std::size_t i = 0; i < m.differs.size(); ++i) {
      if (i) fp.summary += ", ";
      fp.summary += m.differs[i].trait + " " + value_text(m.differs[i].peer) + " (" + m.name +
                    ": " + value_text(m.differs[i].personality) + ")";
    }
    fp.summary += ")";
  } else {
    fp.summary = "unknown stack: no known personality to compare with";
  }
  return fp;
}

json to_json(const Fingerprint& fp) {
  json matches = json::array();
  auto diffs = [](const std::vector<TraitDifference>& ds) {
    json out = json::array();
    for (const auto& d : ds) {
      out.push_back(json{{"trait", d.trait}, {"peer", d.peer}, {"personality", d.personality}});
    }
    return out;
  };
  for (const auto& m : fp.matches) {
    matches.push_back(
        json{{"name", m.name},
             {"source", m.source},
             {"matched", m.matched},
             {"compared", m.compared},
             {"score", static_cast<double>(static_cast<int>(m.score * 1000 + 0.5)) / 1000},
             {"differs", diffs(m.differs)},
             {"settings_differ", diffs(m.settings_differ)}});
  }
  return json{{"verdict", fp.verdict},
              {"behaves_like", fp.behaves_like},
              {"closest", fp.closest.empty() ? json(nullptr) : json(fp.closest)},
              {"summary", fp.summary},
              {"matches", std::move(matches)}};
}

void print_fingerprint(const Fingerprint& fp, std::ostream& out) {
  out << "\nSTACK\n  " << fp.summary << "\n";
  std::size_t width = 11;
  for (const auto& m : fp.matches) width = std::max(width, m.name.size());
  for (const auto& m : fp.matches) {
    std::string name = m.name;
    name.resize(width, ' ');
    char score[32];
    std::snprintf(score, sizeof score, "%2d/%-2d", m.matched, m.compared);
    out << "  " << name << "  " << score;
    std::string rest;
    for (const auto& d : m.differs) {
      rest += (rest.empty() ? "  differs: " : ", ") + d.trait + " " + value_text(d.peer) + " (" +
              value_text(d.personality) + ")";
    }
    for (const auto& d : m.settings_differ) {
      rest += (rest.empty() ? "  settings: " : ", ") + d.trait + " " + value_text(d.peer) + " (" +
              value_text(d.personality) + ")";
    }
    out << rest << "\n";
  }
}

}  // namespace rdma_interop::probe
