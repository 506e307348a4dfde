#include "tools/rdma-probe/mpa_probes.h"

#include <algorithm>
#include <cerrno>
#include <map>

#include "core/cm/listen_backlog.h"
#include "core/cm/mpa_negotiation.h"
#include "tools/rdma-probe/data_path_probes.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using cm::RtrType;

constexpr RtrType kAllRtrs[] = {RtrType::kSend, RtrType::kWrite, RtrType::kRead};

void not_tested(Capability& c, std::string why) {
  c.value = "not tested";
  c.verdict = Verdict::kNotTested;
  c.why = std::move(why);
}

void not_applicable(Capability& c, std::string value) {
  c.value = std::move(value);
  c.verdict = Verdict::kNotApplicable;
}

std::vector<std::uint8_t> filler(std::size_t n) {
  return std::vector<std::uint8_t>(n, 'p');
}

cm::RtrSet only(RtrType t) {
  cm::RtrSet set;
  set.send = t == RtrType::kSend;
  set.write = t == RtrType::kWrite;
  set.read = t == RtrType::kRead;
  return set;
}

std::string rtr_text(const cm::RtrSet& set) {
  std::string out;
  for (auto t : kAllRtrs) {
    if (!set.contains(t)) continue;
    if (!out.empty()) out += ", ";
    out += cm::rtr_name(t);
  }
  return out.empty() ? "none" : out;
}

json rtr_json(const cm::RtrSet& set) {
  json out = json::array();
  for (auto t : kAllRtrs) {
    if (set.contains(t)) out.push_back(cm::rtr_name(t));
  }
  return out;
}

// Keeps the first example of each form of refusal.
void note_refusal(PeerFacts& f, std::string form, const Evidence& e) {
  if (form.empty()) return;
  for (const auto& seen : f.refusals) {
    if (seen.form == form) return;
  }
  f.refusals.push_back({std::move(form), e});
}

// Without peer-to-peer or revision 2 there is nothing to ask about RTRs and IRD/ORD.
bool speaks_revision2(const PeerFacts& f) {
  return f.answers_revision2;
}

std::string pd_text(const wire::MpaFrame& frame) {
  if (frame.private_data.empty()) return "none";
  // Piece by piece: GCC 12 -O3 flags `"x" + std::string&&` (-Wrestrict, bug 105329).
  std::string s = "\"";
  s += printable_prefix(frame.private_data);
  s += '"';
  return s;
}

// A refusal in the traits' vocabulary (fingerprint.h): rejected, reset, closed, silent.
// Only a Reply reads differently there: a Reject is "rejected"; every other kind keeps the
// name raw_mpa_client.h gives it.
std::string trait_form(const RawAnswer& a) {
  if (a.kind == RawAnswer::Kind::kReply && a.reply && a.reply->reject) return "rejected";
  return std::string(kind_name(a.kind));
}

// The same for a connection: rejected, reset, closed, silent, or terminate (a Reply, then a
// Terminate: RFC 6581's refusal after the Reply).
std::string trait_form(const Attempt& a) {
  if (a.established()) return "connected";
  if (!a.error || !a.error->failure) return "silent";
  switch (*a.error->failure) {
    case cm::CmFailure::kPeerRejected:
    case cm::CmFailure::kBacklogFull:
      return "rejected";
    case cm::CmFailure::kConnectionReset:
      return "reset";
    case cm::CmFailure::kConnectionClosed:
      return "closed";
    case cm::CmFailure::kReplyTimeout:
      return "silent";
    default:
      break;
  }
  if (a.error->terminate) return "terminate";
  return std::string(cm::failure_name(*a.error->failure));
}

// What a responder's refusals say about refuse_with (mpa_policy.h): a reset for what its
// policy refuses means "reset", an MPA Reject or a Terminate "reject".
void note_policy_refusal(PeerFacts& f, const std::string& form) {
  auto& key = f.responder_policy["refuse_with"];
  if (form == "reset") {
    key = "reset";
  } else if ((form == "rejected" || form == "terminate" || form == "none") && key.is_null()) {
    key = "reject";
  }
}

// The RTR types a Reply names, in the traits' spelling: "write", "send,write,read".
std::string named_text(const cm::RtrSet& set) {
  std::string out;
  for (auto t : kAllRtrs) {
    if (!set.contains(t)) continue;
    if (!out.empty()) out += ",";
    out += cm::rtr_name(t);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string refusal_form(const Attempt& a) {
  if (a.established() || !a.error) return {};
  const auto& e = *a.error;
  if (e.kind == transport::ConnectError::Kind::kUnreachable) {
    return e.sys_errno == ETIMEDOUT ? "no answer to the TCP SYN" : "TCP connect refused";
  }
  if (e.kind == transport::ConnectError::Kind::kInvalidArgument) return "not tried: " + e.detail;
  if (!e.failure) return "no Reply in time";
  switch (*e.failure) {
    case cm::CmFailure::kBacklogFull:
      return "listener overflow: MPA Reject with \"" + std::string(cm::kBacklogFullMarker) + "\"";
    case cm::CmFailure::kPeerRejected:
      return "MPA Reject (R) with " +
             std::to_string(e.peer_frame ? e.peer_frame->private_data.size() : 0) +
             " octets of private data";
    case cm::CmFailure::kConnectionReset:
      return e.peer_frame ? "a Reply, then a TCP reset" : "TCP reset without a Reply";
    case cm::CmFailure::kConnectionClosed:
      return e.peer_frame ? "a Reply, then a TCP close" : "TCP close without a Reply";
    case cm::CmFailure::kReplyTimeout:
      return "no Reply (silence)";
    case cm::CmFailure::kNoMatchingRtr:
      return "a Reply choosing no RTR type (RFC 6581 MPA code 0x07)";
    default:
      break;
  }
  if (e.terminate) return "a Reply, then Terminate " + wire::describe(*e.terminate);
  return std::string(cm::failure_name(*e.failure));
}

std::string refusal_form(const RawAnswer& a) {
  switch (a.kind) {
    case RawAnswer::Kind::kReply:
      if (a.reply && a.reply->reject) {
        return "MPA Reject (R) with " + std::to_string(a.reply->private_data.size()) +
               " octets of private data";
      }
      return {};
    case RawAnswer::Kind::kReset:
      return "TCP reset without a Reply";
    case RawAnswer::Kind::kClosed:
      return "TCP close without a Reply";
    case RawAnswer::Kind::kSilent:
      return "no Reply (silence)";
    default:
      return {};
  }
}

ProbeOutcome first_contact(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows,
                           std::string& detail) {
  auto iwarp = new_capability("iwarp", "iWARP (MPA) peer");
  auto revisions = new_capability("mpa_revisions", "MPA revisions answered");
  auto fallback = new_capability("revision2_to_revision1", "Revision-2 Request to it");
  const auto pd = ProbeSession::plain_private_data();

  const auto request2 = cm::make_request(s.plain_policy(2), pd);
  auto r2 = s.raw(request2, "first contact: a plain MPA revision-2 Request");
  if (!r2) {
    detail = s.why_not();
    return ProbeOutcome::kUnreachable;
  }
  iwarp.evidence.push_back({wire::to_string(request2), describe(*r2)});
  if (r2->kind == RawAnswer::Kind::kUnreachable) {
    detail = "unreachable: " + r2->detail;
    return ProbeOutcome::kUnreachable;
  }
  if (r2->kind == RawAnswer::Kind::kNotMpa || r2->kind == RawAnswer::Kind::kBadReply) {
    detail = "not an iWARP peer: it " + r2->detail;
    if (auto server = guess_server(r2->first_bytes); !server.empty()) detail += " (" + server + ")";
    iwarp.value = "no: " + r2->detail;
    iwarp.verdict = Verdict::kFail;
    rows.push_back(std::move(iwarp));
    return ProbeOutcome::kNotIwarp;
  }

  std::optional<RawAnswer> r1;
  wire::MpaFrame request1;
  auto ask_revision1 = [&] {
    request1 = cm::make_request(s.plain_policy(1), pd);
    r1 = s.raw(request1, "a plain MPA revision-1 Request");
    if (r1) iwarp.evidence.push_back({wire::to_string(request1), describe(*r1)});
  };

  auto rev2_answered = [&] {
    f.answers_revision2 = true;
    f.revision = 2;
    ask_revision1();
    f.answers_revision1 =
        r1 && r1->kind == RawAnswer::Kind::kReply && !r1->reply->reject && r1->reply->revision == 1;
    if (r1 && !f.answers_revision1) note_refusal(f, refusal_form(*r1), iwarp.evidence.back());
    f.responder_policy["revision"] = 2;
  };

  if (r2->kind == RawAnswer::Kind::kReply) {
    const auto& reply = *r2->reply;
    if (reply.reject) {
      note_refusal(f, refusal_form(*r2), iwarp.evidence.back());
      const bool overflow =
          std::string_view(reinterpret_cast<const char*>(reply.private_data.data()),
                           reply.private_data.size()) == cm::kBacklogFullMarker;
      detail = overflow ? "an iWARP peer whose listener is over its backlog: it rejected the "
                          "plain Request with \"" +
                              std::string(cm::kBacklogFullMarker) + "\"; try again later"
                        : "an iWARP peer that rejected even a plain Request (private data " +
                              pd_text(reply) + ")";
      iwarp.value = "yes, but it rejects: " + wire::to_string(reply);
      iwarp.verdict = Verdict::kWarn;
      rows.push_back(std::move(iwarp));
      return ProbeOutcome::kRejected;
    }
    f.plain_reply = reply;
    if (reply.revision >= 2) {
      rev2_answered();
      not_applicable(fallback, "answered in revision 2");
    } else {
      // A revision-1 peer answering a revision-2 Request in its own revision (RFC 5044 s7.1).
      f.answers_revision1 = true;
      f.revision = 1;
      fallback.value = "answers with a revision-1 Reply, as RFC 5044 s7.1 asks";
      fallback.verdict = Verdict::kOk;
      fallback.evidence.push_back(iwarp.evidence.back());
      f.responder_policy["revision"] = 1;
      f.responder_policy["on_newer_revision"] = "reply";
      f.traits["newer_revision"] = "reply";
    }
  } else {
    // Reset, closed or silent. A peer that requires peer-to-peer mode (irdma) refuses a
    // revision-2 Request without it; a revision-1-only peer refuses any; erdma speaks only
    // its own revision 129.
    const std::string plain_refusal = trait_form(*r2);
    auto asking = s.plain_policy(2);
    asking.peer_to_peer = cm::PeerToPeer::kOn;
    asking.rtr_offer = {.send = true, .write = true, .read = true};
    const auto request_p2p = cm::make_request(asking, pd);
    auto rp = s.raw(request_p2p, "a revision-2 Request asking for peer-to-peer mode");
    if (rp) iwarp.evidence.push_back({wire::to_string(request_p2p), describe(*rp)});
    const bool p2p_answered = rp && rp->kind == RawAnswer::Kind::kReply && !rp->reply->reject &&
                              rp->reply->revision == 2 && rp->reply->enhanced &&
                              rp->reply->enhanced->peer_to_peer;
    if (p2p_answered) {
      f.peer_to_peer_required = true;
      note_refusal(f, refusal_form(*r2), iwarp.evidence.front());
      note_policy_refusal(f, plain_refusal);
      f.traits["peer_to_peer_refusal"] = plain_refusal;
      f.plain_reply = *rp->reply;
      s.require_peer_to_peer({.send = true, .write = true, .read = true});
      rev2_answered();
      not_applicable(fallback, "answered in revision 2 when asked for peer-to-peer mode");
    } else {
      ask_revision1();
      if (r1 && r1->kind == RawAnswer::Kind::kReply && !r1->reply->reject) {
        f.answers_revision1 = true;
        f.revision = 1;
        f.plain_reply = *r1->reply;
        note_refusal(f, refusal_form(*r2), iwarp.evidence.front());
        fallback.evidence.push_back(iwarp.evidence.front());
        f.responder_policy["revision"] = 1;
        const json newer = r2->kind == RawAnswer::Kind::kSilent  ? json(nullptr)
                           : r2->kind == RawAnswer::Kind::kReset ? json("reset")
                                                                 : json("close");
        f.responder_policy["on_newer_revision"] = newer;
        f.traits["newer_revision"] = r2->kind == RawAnswer::Kind::kSilent ? "silent" : newer;
        // Does an initiator that retries in revision 1 (cxgb4) get through?
        auto policy = s.plain_policy(2);
        policy.fallback_to_revision1 = true;
        auto retry = s.connect(policy, pd, "revision 2 with a revision-1 retry");
        if (retry) fallback.evidence.push_back(retry->evidence());
        const bool retried = retry && retry->established() && retry->info->fell_back_to_revision1;
        const std::string how = r2->kind == RawAnswer::Kind::kSilent  ? "ignores it"
                                : r2->kind == RawAnswer::Kind::kReset ? "resets the connection"
                                                                      : "closes the connection";
        fallback.value = how + (retried ? "; an initiator that retries in revision 1 connects"
                                        : "; a revision-1 retry does not connect either");
        fallback.verdict = Verdict::kWarn;
        fallback.why =
            "RFC 5044 s7.1 has a revision-1 responder answer a newer Request in revision 1; this "
            "one " +
            how +
            ", so only initiators that retry in revision 1 after a reset (cxgb4's "
            "retry_with_mpa_v1, irdma_handle_rst_pkt) reach it, and siw does not";
      } else {
        // erdma's own revision 129 (erdma_cm.h), the last thing to try.
        const auto request129 = cm::make_request(s.plain_policy(wire::kMpaRevisionErdma), pd);
        auto r129 = s.raw(request129, "an erdma revision-129 Request");
        if (r129) iwarp.evidence.push_back({wire::to_string(request129), describe(*r129)});
        if (!r129 || r129->kind != RawAnswer::Kind::kReply || r129->reply->reject ||
            r129->reply->revision != wire::kMpaRevisionErdma) {
          const std::string how2 = std::string(kind_name(r2->kind));
          const std::string how1 = r1 ? std::string(kind_name(r1->kind)) : "not asked";
          detail = "not an iWARP peer: no MPA Reply to a revision-2 Request (" + how2 +
                   ") nor to a revision-1 Request (" + how1 +
                   ") nor to erdma's revision 129; or an iWARP listener over its backlog that "
                   "drops Requests";
          iwarp.value = "no MPA Reply";
          iwarp.verdict = Verdict::kFail;
          rows.push_back(std::move(iwarp));
          return ProbeOutcome::kNotIwarp;
        }
        f.revision = wire::kMpaRevisionErdma;
        f.plain_reply = *r129->reply;
        note_refusal(f, refusal_form(*r2), iwarp.evidence.front());
        f.responder_policy["revision"] = wire::kMpaRevisionErdma;
        const json newer = r2->kind == RawAnswer::Kind::kReset ? json("reset") : json("close");
        f.responder_policy["on_newer_revision"] =
            r2->kind == RawAnswer::Kind::kSilent ? json(nullptr) : newer;
        f.traits["newer_revision"] = r2->kind == RawAnswer::Kind::kSilent ? json("silent") : newer;
        fallback.evidence.push_back(iwarp.evidence.front());
        fallback.value = "refused (" + refusal_form(*r2) + "): it speaks only erdma's revision 129";
        fallback.verdict = Verdict::kWarn;
        fallback.why =
            "erdma (erdma_cm.h MPA_REVISION_EXT_1) answers no IETF revision: no "
            "RFC 5044 or RFC 6581 initiator can connect to it";
      }
    }
  }
  f.traits["revision"] = f.revision;

  iwarp.value =
      "yes: " + wire::to_string(f.plain_reply) + ", private data " + pd_text(f.plain_reply);
  iwarp.verdict = Verdict::kOk;
  iwarp.data = {{"reply", wire::to_string(f.plain_reply)},
                {"private_data", std::string(f.plain_reply.private_data.begin(),
                                             f.plain_reply.private_data.end())}};
  f.private_data = iwarp.data["private_data"].get<std::string>();

  if (f.revision == wire::kMpaRevisionErdma) {
    revisions.value =
        "129 only: erdma's own revision; revision-1 and revision-2 Requests are "
        "refused";
    revisions.verdict = Verdict::kWarn;
    revisions.why =
        "erdma_cm.h MPA_REVISION_EXT_1 with an 8-octet extension outside PD_Length: "
        "no RFC 5044 or RFC 6581 peer can meet it";
  } else if (f.answers_revision2 && f.answers_revision1) {
    revisions.value = "2 and 1";
    revisions.verdict = Verdict::kOk;
  } else if (f.answers_revision2) {
    revisions.value = "2 only: a revision-1 Request is refused";
    revisions.verdict = Verdict::kWarn;
    revisions.why = "revision-1-only initiators (older firmware) cannot connect";
  } else {
    revisions.value = "1 only";
    revisions.verdict = Verdict::kNote;
    revisions.why = "no IRD/ORD negotiation and no peer-to-peer RTR (RFC 6581 needs revision 2)";
  }
  revisions.data = {{"revision2", f.answers_revision2},
                    {"revision1", f.answers_revision1},
                    {"revision129", f.revision == wire::kMpaRevisionErdma}};
  revisions.evidence = iwarp.evidence;
  rows.push_back(std::move(iwarp));
  rows.push_back(std::move(revisions));
  rows.push_back(std::move(fallback));
  detail = "an iWARP peer speaking MPA revision " + std::to_string(f.revision);
  if (f.revision == wire::kMpaRevisionErdma) detail += " (erdma's own)";
  if (f.peer_to_peer_required) detail += ", peer-to-peer mode required";
  return ProbeOutcome::kProbed;
}

void probe_crc(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("crc", "CRC32c");
  const auto plain =
      cm::make_request(s.plain_policy(f.revision), ProbeSession::plain_private_data());
  c.evidence.push_back({wire::to_string(plain), wire::to_string(f.plain_reply)});
  if (f.plain_reply.crc) {
    c.value = "required: its Reply sets C to a Request without it";
    c.verdict = Verdict::kOk;
    f.responder_policy["crc"] = "want";
  } else {
    auto policy = s.plain_policy(f.revision);
    policy.crc = cm::CrcMode::kWant;
    auto a = s.connect(policy, ProbeSession::plain_private_data(), "CRC asked for (C set)");
    if (!a) {
      not_tested(c, s.why_not());
      f.responder_policy["crc"] = nullptr;
    } else {
      c.evidence.push_back(a->evidence());
      if (a->established() && a->info->params.crc) {
        c.value = "optional: used when asked, not asked for";
        c.verdict = Verdict::kOk;
        f.responder_policy["crc"] = "optional";
      } else {
        note_refusal(f, refusal_form(*a), c.evidence.back());
        c.value = "refused: a Request with C fails (" + refusal_form(*a) + ")";
        c.verdict = Verdict::kNote;
        c.why =
            "RFC 5044 s7.1 has CRC used when either side asks; initiators that want CRC "
            "(cxgb4's default) cannot connect";
        f.responder_policy["crc"] = "refuse";
        f.traits["crc_refusal"] = trait_form(*a);
        note_policy_refusal(f, trait_form(*a));
      }
    }
  }
  f.traits["crc"] = f.responder_policy["crc"];
  c.data = {{"crc", f.responder_policy["crc"]}};
  rows.push_back(std::move(c));
}

void probe_markers(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("markers", "Markers");
  const bool wanted = f.plain_reply.markers;
  f.responder_policy["markers_wanted"] = wanted;
  f.traits["markers_wanted"] = wanted;
  auto policy = s.plain_policy(f.revision);
  policy.markers_wanted = true;
  auto a = s.connect(policy, ProbeSession::plain_private_data(), "markers asked for (M set)");
  std::string sends;
  if (!a) {
    f.responder_policy["markers_supported"] = nullptr;
    sends = "sending them not tested (" + s.why_not() + ")";
  } else {
    c.evidence.push_back(a->evidence());
    const bool supported = a->established() && a->info->params.markers_from_peer;
    f.responder_policy["markers_supported"] = supported;
    f.traits["markers_supported"] = supported;
    if (!supported) {
      note_refusal(f, refusal_form(*a), c.evidence.back());
      f.traits["markers_refusal"] = trait_form(*a);
      note_policy_refusal(f, trait_form(*a));
    }
    sends = supported ? "sends them when asked" : "refuses to send them (" + refusal_form(*a) + ")";
  }
  c.value =
      std::string(wanted ? "asks for them (M in its Reply); " : "does not ask for them; ") + sends;
  c.verdict = Verdict::kOk;
  if (wanted) {
    c.verdict = Verdict::kNote;
    c.why = "initiators that cannot insert markers (Linux siw) fail to connect";
  }
  c.data = {{"wanted", wanted}, {"supported", f.responder_policy["markers_supported"]}};
  rows.push_back(std::move(c));
}

namespace {

// A responder's answer to a peer-to-peer offer, read on a raw socket. Nothing is sent after
// its Reply, so an RTR picked outside the offer never draws a Terminate from us before any
// RTR: kernel siw answers a Send-only offer with a Write RTR, and iw_cm hits a BUG() when
// the initiator then Terminates (the kernel tier's finding).
struct RtrAnswer {
  bool answered = false;      // a Reply without the Reject flag
  bool peer_to_peer = false;  // the Reply keeps the peer-to-peer bit
  cm::RtrSet chosen;          // the RTR bits of the Reply
  std::string refusal;        // how it refused, when not answered
  std::string trait;          // fingerprint.h's rtr_* value: "write", "declined", "reset"...
  Evidence evidence;
};

std::optional<RtrAnswer> ask_rtr(ProbeSession& s, const cm::RtrSet& offer, std::string what) {
  auto policy = s.plain_policy(2);
  policy.peer_to_peer = cm::PeerToPeer::kOn;
  policy.rtr_offer = offer;
  const auto request = cm::make_request(policy, ProbeSession::plain_private_data());
  auto a = s.raw(request, what);
  if (!a) return std::nullopt;
  RtrAnswer r;
  r.evidence = {wire::to_string(request), describe(*a)};
  if (a->kind == RawAnswer::Kind::kReply && !a->reply->reject) {
    r.answered = true;
    if (const auto& e = a->reply->enhanced) {
      r.peer_to_peer = e->peer_to_peer;
      r.chosen = {.send = e->rtr_send, .write = e->rtr_write, .read = e->rtr_read};
    }
    r.trait = r.peer_to_peer ? named_text(r.chosen) : "declined";
  } else {
    r.refusal = refusal_form(*a);
    r.trait = trait_form(*a);
  }
  return r;
}

std::optional<RtrType> single_rtr(const cm::RtrSet& set) {
  int n = set.send + set.write + set.read;
  if (n != 1) return std::nullopt;
  return set.send ? RtrType::kSend : set.write ? RtrType::kWrite : RtrType::kRead;
}

bool within(const cm::RtrSet& chosen, const cm::RtrSet& offer) {
  return (!chosen.send || offer.send) && (!chosen.write || offer.write) &&
         (!chosen.read || offer.read);
}

}  // namespace

void probe_peer_to_peer(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto mode = new_capability("peer_to_peer", "Peer-to-peer mode (RFC 6581)");
  auto types = new_capability("rtr_types", "RTR types accepted");
  auto pick = new_capability("rtr_choice", "RTR picked when offered all");
  auto finish = [&] {
    rows.push_back(std::move(mode));
    rows.push_back(std::move(types));
    rows.push_back(std::move(pick));
  };
  auto& policy_out = f.responder_policy;
  const json unknown = nullptr;
  for (const auto* key : {"peer_to_peer", "rtr_offer", "rtr_accepted", "rtr_preference",
                          "rtr_reply", "no_common_rtr"}) {
    policy_out[key] = unknown;
  }
  if (!speaks_revision2(f)) {
    const std::string why = f.revision == wire::kMpaRevisionErdma
                                ? "erdma's revision 129 has no peer-to-peer mode"
                                : "revision 1 has no peer-to-peer mode";
    for (auto* c : {&mode, &types, &pick}) not_applicable(*c, why);
    return finish();
  }
  const cm::RtrSet all{.send = true, .write = true, .read = true};
  auto first = ask_rtr(s, all, "peer-to-peer, every RTR type offered");
  if (!first) {
    for (auto* c : {&mode, &types, &pick}) not_tested(*c, s.why_not());
    return finish();
  }
  mode.evidence.push_back(first->evidence);
  pick.evidence.push_back(first->evidence);
  f.peer_to_peer = first->answered && first->peer_to_peer;
  policy_out["peer_to_peer"] = !f.peer_to_peer           ? "off"
                               : f.peer_to_peer_required ? "required"
                                                         : "when-asked";
  f.traits["peer_to_peer"] = !f.peer_to_peer           ? "off"
                             : f.peer_to_peer_required ? "required"
                                                       : "accepted";
  mode.data = {{"accepted", f.peer_to_peer}, {"required", f.peer_to_peer_required}};
  if (!f.peer_to_peer) {
    if (!first->answered) note_refusal(f, first->refusal, first->evidence);
    mode.value = first->answered ? "declined: its Reply clears the peer-to-peer bit"
                                 : "refused: " + first->refusal;
    mode.verdict = Verdict::kNote;
    mode.why =
        "without peer-to-peer mode the initiator cannot send first; RFC 6581 "
        "applications that need an RTR cannot use this peer";
    not_applicable(types, "no peer-to-peer mode");
    not_applicable(pick, "no peer-to-peer mode");
    policy_out["rtr_offer"] = json::array();
    policy_out["rtr_preference"] = json::array();
    return finish();
  }
  if (f.peer_to_peer_required) {
    mode.value = "required: a revision-2 Request without it is refused (" +
                 f.traits.value("peer_to_peer_refusal", std::string("?")) + ")";
    mode.verdict = Verdict::kWarn;
    mode.why =
        "RFC 6581 leaves peer-to-peer mode to the initiator; this responder refuses "
        "initiators that do not ask for it (Linux siw by default), and irdma does so "
        "with a TCP reset (irdma_negotiate_mpa_v2_ird_ord)";
  } else {
    mode.value = "accepted";
    mode.verdict = Verdict::kOk;
  }

  // Each type alone. The Reply should name exactly that type; the connection is then made
  // for real (RTR sent) to see the peer take it.
  std::string refused_how;
  std::vector<std::string> outside;  // "send answered with write"
  std::map<RtrType, RtrAnswer> single;
  for (auto t : kAllRtrs) {
    const std::string name(cm::rtr_name(t));
    auto answer = ask_rtr(s, only(t), "peer-to-peer, only a " + name + " RTR offered");
    if (!answer) {
      not_tested(types, s.why_not());
      break;
    }
    types.evidence.push_back(answer->evidence);
    single[t] = *answer;
    f.traits["rtr_" + name] = answer->trait;
    if (!answer->answered || !answer->peer_to_peer) {
      note_refusal(f, answer->refusal.empty() ? "a Reply without peer-to-peer" : answer->refusal,
                   answer->evidence);
      if (refused_how.empty()) refused_how = answer->refusal;
      if (!answer->answered) note_policy_refusal(f, answer->trait);
      continue;
    }
    if (answer->chosen.empty()) {
      note_refusal(f, "a Reply choosing no RTR type (RFC 6581 MPA code 0x07 follows)",
                   answer->evidence);
      if (refused_how.empty()) refused_how = "a Reply choosing no RTR type";
      note_policy_refusal(f, "none");
      continue;
    }
    if (!within(answer->chosen, only(t))) {
      outside.push_back(name + " answered with " + rtr_text(answer->chosen));
      continue;
    }
    auto policy = s.plain_policy(2);
    policy.peer_to_peer = cm::PeerToPeer::kOn;
    policy.rtr_offer = only(t);
    auto confirm = s.connect(policy, ProbeSession::plain_private_data(),
                             "peer-to-peer with a " + name + " RTR, connected");
    if (!confirm) {
      not_tested(types, s.why_not());
      break;
    }
    types.evidence.push_back(confirm->evidence());
    if (confirm->established() && confirm->info->params.rtr == t) {
      if (t == RtrType::kSend) f.rtr_accepted.send = true;
      if (t == RtrType::kWrite) f.rtr_accepted.write = true;
      if (t == RtrType::kRead) f.rtr_accepted.read = true;
    } else {
      note_refusal(f, refusal_form(*confirm), types.evidence.back());
      outside.push_back(name + " chosen, then the connection failed: " + refusal_form(*confirm));
    }
  }
  f.traits["rtr_all"] = first->trait;
  if (types.value.empty()) {
    types.value = rtr_text(f.rtr_accepted);
    if (!refused_how.empty()) types.value += "; others refused: " + refused_how;
    types.verdict = Verdict::kOk;
    if (!outside.empty()) {
      std::string list;
      for (const auto& o : outside) list += (list.empty() ? "" : "; ") + o;
      types.value += "; " + list;
      types.verdict = Verdict::kFail;
      types.why =
          "RFC 6581 s3: the responder picks one of the RTR types the initiator offered; "
          "an initiator that offered only what it can receive fails the connection (and "
          "the peer may not survive our Terminate, so this probe sends none)";
    } else if (f.rtr_accepted.empty()) {
      types.verdict = Verdict::kFail;
      types.why = "it accepts peer-to-peer mode but none of the three RTR types";
    }
  }
  types.data = {{"accepted", rtr_json(f.rtr_accepted)}, {"outside_offer", outside}};

  // How it answers, in personality terms (mpa_policy.h), so the report replays as a
  // personality: every common type named at once (qed), its own type whatever was offered
  // (iw_cxgb4), or the one it picked (RFC 6581 s3).
  const bool several = first->chosen.send + first->chosen.write + first->chosen.read > 1;
  auto named_alone = [&](RtrType t) -> std::optional<RtrType> {
    auto it = single.find(t);
    if (it == single.end() || !it->second.peer_to_peer) return std::nullopt;
    return single_rtr(it->second.chosen);
  };
  std::optional<RtrType> own;
  if (!several) {
    if (auto all_pick = single_rtr(first->chosen)) {
      int same = 0;
      bool only_itself_is_itself = true;
      for (auto t : kAllRtrs) {
        auto n = named_alone(t);
        if (n == *all_pick) ++same;
        if (n && *n == t && t != *all_pick) only_itself_is_itself = false;
      }
      if (same >= 2 && only_itself_is_itself) own = *all_pick;
    }
  }
  cm::RtrSet accepted = f.rtr_accepted;
  std::string reply_mode = "chosen";
  if (several) {
    reply_mode = "all-common";
    accepted = first->chosen;
  } else if (own) {
    reply_mode = "own";
    for (auto t : kAllRtrs) {
      if (named_alone(t) == *own) {
        if (t == RtrType::kSend) accepted.send = true;
        if (t == RtrType::kWrite) accepted.write = true;
        if (t == RtrType::kRead) accepted.read = true;
      }
    }
  }
  // What it does with an offer of types it does not take: the first such single offer.
  json no_common = nullptr;
  for (auto t : kAllRtrs) {
    if (accepted.contains(t) || !single.count(t)) continue;
    const auto& a = single[t];
    if (!a.answered) {
      no_common = "refuse";
    } else if (!a.peer_to_peer) {
      no_common = "decline";
    } else if (a.chosen.empty()) {
      no_common = "refuse";
    } else if (a.chosen.send + a.chosen.write + a.chosen.read > 1) {
      no_common = "offer-all";
    } else if (reply_mode != "own") {
      no_common = "propose";
    }
    if (!no_common.is_null()) break;
  }
  policy_out["rtr_offer"] = rtr_json(own ? only(*own) : accepted);
  policy_out["rtr_accepted"] = rtr_json(accepted);
  policy_out["rtr_reply"] = reply_mode;
  policy_out["no_common_rtr"] = no_common;

  // The pick from all three, then from the accepted ones left: the preference order.
  json preference = json::array();
  auto picked = single_rtr(first->chosen);
  if (several) {
    pick.value = "several: " + rtr_text(first->chosen) + "; it names every type both offer";
    pick.verdict = Verdict::kFail;
    pick.why =
        "RFC 6581 s3: the Reply names exactly one of the offered RTR types; qed "
        "(qed_iwarp_mpa_received) names every common one, and an initiator that holds "
        "to RFC 6581 fails with MPA code 0x07";
    preference = nullptr;
  } else if (!picked || !within(first->chosen, all)) {
    pick.value = "none: its Reply names no RTR type";
    pick.verdict = Verdict::kFail;
    pick.why = "RFC 6581 s3: the Reply names exactly one of the offered RTR types";
  } else if (own) {
    pick.value = std::string(cm::rtr_name(*own)) + ", its own type, whatever is offered";
    pick.verdict = Verdict::kWarn;
    pick.why =
        "its Reply names the same RTR type to offers that did not include it: iw_cxgb4 "
        "(send_mpa_reply) names its own p2p_type and waits for the type it picked from "
        "the offer; an initiator that offered only another type fails with MPA code 0x07";
    preference = nullptr;
  } else {
    preference.push_back(cm::rtr_name(*picked));
    cm::RtrSet rest = f.rtr_accepted;
    if (*picked == RtrType::kSend) rest.send = false;
    if (*picked == RtrType::kWrite) rest.write = false;
    if (*picked == RtrType::kRead) rest.read = false;
    std::vector<RtrType> left;
    for (auto t : {RtrType::kRead, RtrType::kWrite, RtrType::kSend}) {
      if (rest.contains(t)) left.push_back(t);
    }
    if (left.size() >= 2) {
      auto second = ask_rtr(s, rest, "peer-to-peer, the accepted RTR types it did not pick");
      if (second) pick.evidence.push_back(second->evidence);
      auto t2 = second ? single_rtr(second->chosen) : std::nullopt;
      if (t2 && rest.contains(*t2)) {
        preference.push_back(cm::rtr_name(*t2));
        for (auto t : left) {
          if (t != *t2) preference.push_back(cm::rtr_name(t));
        }
      }
    } else if (left.size() == 1) {
      preference.push_back(cm::rtr_name(left.front()));
    }
    pick.value = std::string(cm::rtr_name(*picked));
    if (preference.size() > 1) {
      std::string order;
      for (const auto& t : preference) order += (order.empty() ? "" : " > ") + t.get<std::string>();
      pick.value += "; preference " + order;
    }
    pick.verdict = Verdict::kOk;
  }
  policy_out["rtr_preference"] = preference;
  pick.data = {{"picked", picked ? json(cm::rtr_name(*picked)) : json(nullptr)},
               {"preference", preference},
               {"reply", reply_mode}};
  finish();
}

void probe_ird_ord(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto limits = new_capability("ird_ord", "IRD/ORD it grants");
  auto mode = new_capability("ird_ord_check", "IRD/ORD check");
  auto finish = [&] {
    rows.push_back(std::move(limits));
    rows.push_back(std::move(mode));
  };
  constexpr std::uint16_t kAsk = wire::kMpaIrdOrdMask - 1;  // 0x3ffe: see plain_policy()
  const char* keys[] = {"ird", "ord", "strict_ird_ord", "ird_ord_sentinel"};
  if (!speaks_revision2(f) || !f.plain_reply.enhanced) {
    const std::string why = f.revision == wire::kMpaRevisionErdma
                                ? "erdma's revision 129 exchanges no IRD/ORD"
                                : "revision 1 exchanges no IRD/ORD";
    not_applicable(limits, why);
    not_applicable(mode, why);
    for (auto key : keys) f.responder_policy[key] = nullptr;
    return finish();
  }
  // The plain Request offered IRD 0x3ffe and ORD 1, which any responder takes. Now ORD 0x3ffe
  // too: a strict responder refuses it (ours with a Reject in its Reply, others may accept
  // and then send a Terminate with MPA code 0x06) and its limits are what it answered the
  // plain Request; a relaxed one answers with its own limits (kernel siw lowers its IRD to
  // the initiator's ORD, so the plain Request alone would read "IRD 1").
  const auto& plain = *f.plain_reply.enhanced;
  const auto plain_request =
      cm::make_request(s.plain_policy(2), ProbeSession::plain_private_data());
  limits.evidence.push_back({wire::to_string(plain_request), wire::to_string(f.plain_reply)});
  auto policy = s.plain_policy(2);
  policy.ord = kAsk;
  auto a = s.connect(policy, ProbeSession::plain_private_data(),
                     "ORD " + std::to_string(policy.ord) + ", above any IRD but 0x3ffe and 0x3fff");
  if (!a) {
    not_tested(mode, s.why_not());
    not_tested(limits, s.why_not());
    for (auto key : keys) f.responder_policy[key] = nullptr;
    return finish();
  }
  mode.evidence.push_back(a->evidence());
  limits.evidence.push_back(a->evidence());
  const bool strict = !a->established();
  std::uint16_t ird = plain.ird;
  std::uint16_t ord = plain.ord;
  if (strict) {
    note_refusal(f, refusal_form(*a), mode.evidence.back());
    note_policy_refusal(f, trait_form(*a));
    f.traits["strict_refusal"] = trait_form(*a);
    mode.value = "strict: ORD " + std::to_string(policy.ord) + " above its IRD fails (" +
                 refusal_form(*a) + ")";
    mode.verdict = Verdict::kWarn;
    mode.why =
        "RFC 6581 s3 lets an initiator lower its ORD to the responder's IRD; a strict "
        "peer fails initiators that offer more (a Reject, or MPA code 0x06)";
  } else if (a->info->params.peer_ird >= kAsk) {
    ird = a->info->params.peer_ird;
    ord = a->info->params.peer_ord;
    not_applicable(mode, "its IRD is at least 0x3ffe: no ORD the probe offers can exceed it");
  } else {
    ird = a->info->params.peer_ird;
    ord = a->info->params.peer_ord;
    mode.value = "relaxed: ORD " + std::to_string(policy.ord) + " accepted, our ORD settled at " +
                 std::to_string(a->info->params.ord);
    mode.verdict = Verdict::kOk;
  }
  limits.value = "IRD " + std::to_string(ird) + ", ORD " + std::to_string(ord);
  if (!strict && plain.ird != ird) {
    limits.value += "; its IRD follows the initiator's ORD (IRD " + std::to_string(plain.ird) +
                    " to an ORD of 1)";
  }
  // irdma's IETF_NO_IRD_ORD: an IRD of 0x3fff means "no IRD/ORD negotiation", and its Reply
  // then carries 0x3fff/0x3fff (irdma_negotiate_mpa_v2_ird_ord, irdma_build_mpa_v2).
  auto sentinel_policy = s.plain_policy(2);
  sentinel_policy.ird = wire::kMpaIrdOrdMask;
  const auto sentinel_request =
      cm::make_request(sentinel_policy, ProbeSession::plain_private_data());
  auto sa = s.raw(sentinel_request, "IRD 0x3fff (irdma reads it as no IRD/ORD negotiation)");
  json sentinel = nullptr;
  if (sa) {
    limits.evidence.push_back({wire::to_string(sentinel_request), describe(*sa)});
    if (sa->kind == RawAnswer::Kind::kReply && !sa->reply->reject && sa->reply->enhanced) {
      sentinel = sa->reply->enhanced->ird == wire::kMpaIrdOrdMask &&
                 sa->reply->enhanced->ord == wire::kMpaIrdOrdMask && ird != wire::kMpaIrdOrdMask;
      if (sentinel.get<bool>()) {
        limits.value +=
            "; IRD 0x3fff is answered with IRD and ORD 0x3fff (no IRD/ORD "
            "negotiation, as irdma's IETF_NO_IRD_ORD)";
      }
    }
  }
  limits.verdict = ird == 0 ? Verdict::kWarn : Verdict::kOk;
  if (ird == 0) limits.why = "IRD 0: the peer accepts no RDMA Read at all";
  limits.data = {{"ird", ird}, {"ord", ord}, {"ird_to_ord_1", plain.ird}, {"sentinel", sentinel}};
  f.responder_policy["ird"] = ird;
  f.responder_policy["ord"] = ord;
  f.traits["ird"] = ird;
  f.traits["ord"] = ord;
  const json strict_json = mode.verdict == Verdict::kNotApplicable ? json(nullptr) : json(strict);
  f.responder_policy["strict_ird_ord"] = strict_json;
  f.responder_policy["ird_ord_sentinel"] = sentinel;
  f.traits["strict_ird_ord"] = strict_json;
  f.traits["ird_ord_sentinel"] = sentinel;
  mode.data = {{"strict", strict_json}};
  finish();
}

void probe_private_data(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("private_data", "Largest private data (PD_Length)");
  // PD_Length counts the IRD/ORD words in revision 2 (RFC 6581 s3).
  const std::size_t words = f.revision == 2 ? wire::kMpaEnhancedParamsLen : 0;
  bool budget_spent = false;
  std::string oversize;  // how the first size refused was refused
  auto answered = [&](std::size_t pd_length) {
    auto request = cm::make_request(s.plain_policy(f.revision), filler(pd_length - words));
    auto a = s.raw(request, "PD_Length " + std::to_string(pd_length));
    if (!a) {
      budget_spent = true;
      return false;
    }
    c.evidence.push_back(
        {"PD_Length " + std::to_string(pd_length) + ": " + wire::to_string(request), describe(*a)});
    const bool ok = a->kind == RawAnswer::Kind::kReply && !a->reply->reject;
    if (!ok) {
      note_refusal(f, refusal_form(*a), c.evidence.back());
      if (oversize.empty()) oversize = trait_form(*a);
    }
    return ok;
  };
  // A plain Request of this size was answered at first contact: the search starts there.
  std::size_t lo = words + ProbeSession::plain_private_data().size();
  std::size_t hi = 0;  // the smallest size refused, once known
  std::optional<std::size_t> largest;
  if (answered(wire::kMpaMaxPrivateDataRfc)) {
    largest = wire::kMpaMaxPrivateDataRfc;
  } else if (!budget_spent) {
    hi = wire::kMpaMaxPrivateDataRfc;
    if (answered(wire::kMpaMaxPrivateDataLinux)) {
      lo = wire::kMpaMaxPrivateDataLinux;
    } else {
      hi = wire::kMpaMaxPrivateDataLinux;
    }
    while (!budget_spent && hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (answered(mid)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    if (!budget_spent) largest = lo;
  }
  f.responder_policy["on_malformed_frame"] = nullptr;
  if (!largest) {
    not_tested(c, s.why_not());
    f.responder_policy["private_data_limit"] = nullptr;
  } else {
    c.value = std::to_string(*largest) + " octets";
    if (hi) c.value += " (" + std::to_string(*largest + 1) + " refused)";
    if (words) c.value += ", IRD/ORD words included";
    c.verdict = *largest >= wire::kMpaMaxPrivateDataRfc ? Verdict::kOk : Verdict::kNote;
    if (c.verdict == Verdict::kNote) {
      c.why = "RFC 5044 s7.1 allows 512 octets; initiators sending more than " +
              std::to_string(*largest) + " are refused (Linux allows 256)";
    }
    f.responder_policy["private_data_limit"] = *largest;
    f.traits["private_data_limit"] = *largest;
    if (hi && !oversize.empty()) {
      f.traits["oversize_refusal"] = oversize;
      f.responder_policy["on_malformed_frame"] = oversize == "reset"    ? json("reset")
                                                 : oversize == "closed" ? json("close")
                                                                        : json(nullptr);
    }
    c.data = {{"largest", *largest}};
  }
  rows.push_back(std::move(c));
}

void probe_reserved_bits(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  // Two Requests: the reserved bits no stack is known to use (0x03), and the ones vendors
  // use (0x0c: siw's GSO_EXP 0x08, Chelsio's FPDU-size proposal; iwarp_constants.h), which
  // a receiver should report as extensions rather than refuse.
  auto c = new_capability("reserved_bits", "Reserved Request bits (Res)");
  auto x = new_capability("extension_bits", "Vendor bits 0x0c (siw GSO, FPDU size)");
  auto ask = [&](std::uint8_t bits, const std::string& what) {
    auto request = cm::make_request(s.plain_policy(f.revision), ProbeSession::plain_private_data());
    request.reserved_bits = bits;
    auto a = s.raw(request, what);
    std::optional<Evidence> e;
    if (a) e = Evidence{wire::to_string(request), describe(*a)};
    return std::make_pair(a, e);
  };
  auto [a, ea] = ask(wire::kMpaFlagUnusedReservedMask, "Res bits 0x03 set in the Request");
  auto [b, eb] = ask(wire::kMpaFlagFpduSizeMask, "vendor bits 0x0c set in the Request");
  json echoed = nullptr;
  if (!a) {
    not_tested(c, s.why_not());
    f.responder_policy["reject_reserved_bits"] = nullptr;
  } else {
    c.evidence.push_back(*ea);
    const bool answered = a->kind == RawAnswer::Kind::kReply && !a->reply->reject;
    f.responder_policy["reject_reserved_bits"] = !answered;
    f.traits["reserved_rejected"] = !answered;
    if (answered) {
      echoed = a->reply->reserved_bits != 0;
      c.value = echoed.get<bool>() ? "ignored, and echoed in its Reply" : "ignored";
      c.verdict = echoed.get<bool>() ? Verdict::kWarn : Verdict::kOk;
      if (echoed.get<bool>()) {
        c.why =
            "RFC 5044 s7.1: Res is set to zero when sending; this Reply carries them (siw and "
            "erdma build their Reply from the Request's header)";
      }
    } else {
      note_refusal(f, refusal_form(*a), c.evidence.back());
      c.value = "rejected (" + refusal_form(*a) + ")";
      c.verdict = Verdict::kWarn;
      c.why =
          "RFC 5044 s7.1: Res is not checked on reception; a later revision's flags would be "
          "refused";
    }
    c.data = {{"rejected", !answered}, {"echoed", echoed}};
  }
  if (!b) {
    not_tested(x, s.why_not());
  } else {
    x.evidence.push_back(*eb);
    const bool answered = b->kind == RawAnswer::Kind::kReply && !b->reply->reject;
    f.traits["extension_rejected"] = !answered;
    json back = nullptr;
    if (answered) {
      back = b->reply->reserved_bits;
      if (echoed.is_null()) echoed = (b->reply->reserved_bits & wire::kMpaFlagFpduSizeMask) != 0;
      const std::uint8_t bits = b->reply->reserved_bits & wire::kMpaFlagFpduSizeMask;
      x.value = bits == wire::kMpaFlagFpduSizeMask ? "accepted; its Reply carries them back (" +
                                                         wire::describe_reserved_bits(bits) + ")"
                : bits ? "accepted; its Reply announces " + wire::describe_reserved_bits(bits)
                       : "accepted and not used";
      x.verdict = Verdict::kOk;
    } else {
      note_refusal(f, refusal_form(*b), x.evidence.back());
      x.value = "rejected (" + refusal_form(*b) + ")";
      x.verdict = Verdict::kNote;
      x.why =
          "siw's GSO bit (0x08) and Chelsio's FPDU-size proposal (0x0c) are extensions in the "
          "reserved bits; a peer that sets them cannot connect to this one";
    }
    x.data = {{"rejected", !answered}, {"reply_bits", back}};
  }
  f.responder_policy["echo_reserved_bits"] = echoed;
  f.traits["reserved_echoed"] = echoed;
  rows.push_back(std::move(c));
  rows.push_back(std::move(x));
}

void probe_newer_revision(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("newer_revision", "A Request of a newer revision (3)");
  if (f.revision != wire::kMpaRevision2) {
    not_applicable(c, f.revision == 1 ? "revision 1: see the revision-2 Request above"
                                      : "erdma: see the revision-2 Request above");
    rows.push_back(std::move(c));
    return;
  }
  // No IRD/ORD words: revision 3 has none anyone knows.
  wire::MpaFrame request;
  request.kind = wire::MpaFrameKind::kRequest;
  request.revision = 3;
  request.private_data = ProbeSession::plain_private_data();
  auto a = s.raw(request, "an MPA revision-3 Request");
  json newer = nullptr;
  if (!a) {
    not_tested(c, s.why_not());
  } else {
    c.evidence.push_back({wire::to_string(request), describe(*a)});
    if (a->kind == RawAnswer::Kind::kReply && !a->reply->reject) {
      newer = "reply";
      c.value =
          "answered in revision " + std::to_string(a->reply->revision) + ", as RFC 5044 s7.1 asks";
      c.verdict = Verdict::kOk;
    } else {
      newer = a->kind == RawAnswer::Kind::kReset    ? json("reset")
              : a->kind == RawAnswer::Kind::kClosed ? json("close")
                                                    : json(nullptr);
      note_refusal(f, refusal_form(*a), c.evidence.back());
      c.value = "refused: " + refusal_form(*a);
      c.verdict = Verdict::kNote;
      c.why =
          "RFC 5044 s7.1 has a responder answer a newer revision in its own, so a later "
          "revision's initiator can fall back; irdma and iw_cxgb4 reset, siw closes";
    }
    f.traits["newer_revision"] = newer.is_null() ? json(trait_form(*a)) : newer;
  }
  f.responder_policy["on_newer_revision"] = newer;
  c.data = {{"answer", newer}};
  rows.push_back(std::move(c));
}

void probe_revision1_rtr(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("rtr_revision1", "RTR in revision 1");
  f.responder_policy["rtr_in_revision1"] = nullptr;
  if (!f.answers_revision1) {
    not_applicable(c, "it does not answer revision 1");
    rows.push_back(std::move(c));
    return;
  }
  // Revision 1 has no RTR (RFC 5044), but iw_cxgb4 with peer2peer waits for its own anyway
  // (process_mpa_request: revision 1 and peer2peer set p2p_type) and refuses another type
  // as its "no matching RTR" (MPA code 0x07). One connection starts with a zero-length RDMA
  // Read, whose Response ends the setup; one with a zero-length RDMA Write, then listens a
  // moment for a Terminate. Only a refusal with code 0x07 says an RTR is expected: a Read
  // refused otherwise (kernel siw under rping has IRD 0 in revision 1) says nothing of it.
  constexpr wire::TerminateCause kNoMatch{wire::TermLayer::kLlp, wire::kMpaEtype,
                                          wire::kMpaCodeNoMatchingRtr};
  struct Outcome {
    bool served = false;
    bool refused = false;  // with MPA code 0x07
  };
  auto first = [&](RtrType t) -> std::optional<Outcome> {
    auto policy = s.plain_policy(1);
    policy.rtr_in_revision1 = true;
    policy.rtr_offer = only(t);
    Outcome o;
    std::string after;
    const auto window =
        std::min<std::chrono::milliseconds>(s.settings().timeout, std::chrono::milliseconds(300));
    auto a = s.connect(policy, ProbeSession::plain_private_data(),
                       "revision 1, a zero-length " + std::string(cm::rtr_name(t)) + " first",
                       [&](transport::Connection& conn, ExchangeMemory&) {
                         const auto until = std::chrono::steady_clock::now() + window;
                         while (std::chrono::steady_clock::now() < until &&
                                conn.state() == transport::ConnectionState::kConnected) {
                           (void)conn.poll_completions(4, std::chrono::milliseconds(20));
                         }
                         if (auto term = conn.terminate_received()) {
                           o.refused = term->cause == kNoMatch;
                           after = "; then Terminate " + wire::describe(term->cause);
                         } else if (conn.state() != transport::ConnectionState::kConnected) {
                           after = "; then the connection ended";
                         } else {
                           o.served = true;
                           after =
                               "; still connected " + std::to_string(window.count()) + " ms later";
                         }
                       });
    if (!a) return std::nullopt;
    auto e = a->evidence();
    e.came_back += after;
    c.evidence.push_back(e);
    if (!a->established()) {
      o.served = false;
      o.refused = a->error && a->error->terminate && *a->error->terminate == kNoMatch;
    }
    return o;
  };
  const auto read = first(RtrType::kRead);
  const auto write = read ? first(RtrType::kWrite) : std::nullopt;
  json needs = nullptr;
  if (!read || !write) {
    not_tested(c, s.why_not());
  } else if ((read->served || write->served) && !read->refused && !write->refused) {
    c.value = "none needed: a zero-length " +
              std::string(read->served && write->served ? "Read or Write"
                          : read->served                ? "Read"
                                                        : "Write") +
              " may come first, as RFC 5044 allows";
    c.verdict = Verdict::kOk;
    needs = "none";
    f.responder_policy["rtr_in_revision1"] = false;
  } else if (read->served != write->served && (read->refused || write->refused)) {
    const RtrType type = read->served ? RtrType::kRead : RtrType::kWrite;
    c.value = "a zero-length " + std::string(cm::rtr_name(type)) +
              " first: the other type is refused with MPA code 0x07 (no matching RTR)";
    c.verdict = Verdict::kWarn;
    c.why =
        "RFC 5044 has no RTR; iw_cxgb4 with peer2peer=1 waits for its p2p_type RTR in "
        "revision 1 too (process_mpa_request), so RFC 5044 initiators fail against it";
    needs = std::string(cm::rtr_name(type));
    f.responder_policy["rtr_in_revision1"] = true;
    f.revision1_rtr = type;
    s.use_revision1_rtr(type);
  } else {
    c.value = "unclear: neither a zero-length Read nor a Write first is served";
    c.verdict = Verdict::kWarn;
  }
  if (!needs.is_null()) f.traits["rtr_revision1"] = needs;
  c.data = {{"needs", needs}};
  rows.push_back(std::move(c));
}

void summarize_refusals(const PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("rejects", "How it refuses");
  if (f.refusals.empty()) {
    c.value = "it refused nothing the probes offered";
  } else {
    for (const auto& r : f.refusals) {
      c.value += (c.value.empty() ? "" : "; ") + r.form;
      c.evidence.push_back(r.evidence);
    }
  }
  c.value += "; listener overflow not provoked (the probe never floods)";
  c.verdict = Verdict::kOk;
  json forms = json::array();
  for (const auto& r : f.refusals) forms.push_back(r.form);
  c.data = {{"forms", forms}};
  rows.push_back(std::move(c));
}

void recheck_plain_request(ProbeSession& s, const PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("still_answering", "Still answers a plain Request");
  const auto request =
      cm::make_request(s.plain_policy(f.revision), ProbeSession::plain_private_data());
  auto a = s.raw(request, "a plain Request again: is the peer unchanged?");
  if (!a) {
    not_tested(c, s.why_not());
  } else {
    c.evidence.push_back({wire::to_string(request), describe(*a)});
    const bool same = a->kind == RawAnswer::Kind::kReply && !a->reply->reject &&
                      a->reply->revision == f.plain_reply.revision;
    c.data = {{"unchanged", same}};
    if (same) {
      c.value = "yes, as at first contact";
      c.verdict = Verdict::kOk;
    } else {
      c.value = "no: " + describe(*a);
      c.verdict = Verdict::kFail;
      c.why =
          "the peer answered a plain Request at first contact and no longer does: it "
          "crashed, restarted or ran out of something during the probe, so the rows "
          "measured after that describe a broken peer, not its settings";
    }
  }
  rows.push_back(std::move(c));
}

}  // namespace rdma_interop::probe
