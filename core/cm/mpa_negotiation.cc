#include "core/cm/mpa_negotiation.h"

#include <algorithm>

namespace rdma_interop::cm {
namespace {

constexpr wire::TerminateCause kInsufficientIrdCause{wire::TermLayer::kLlp, wire::kMpaEtype,
                                                     wire::kMpaCodeInsufficientIrd};
constexpr RtrType kDefaultOrder[] = {RtrType::kRead, RtrType::kWrite, RtrType::kSend};

RtrSet offered_rtrs(const wire::MpaEnhancedParams& e) {
  return RtrSet{.send = e.rtr_send, .write = e.rtr_write, .read = e.rtr_read};
}

RtrSet intersect(const RtrSet& a, const RtrSet& b) {
  return RtrSet{.send = a.send && b.send, .write = a.write && b.write, .read = a.read && b.read};
}

// The first of `policy`'s preference, then Read, Write, Send, that `candidates` holds.
std::optional<RtrType> first_preferred(const MpaPolicy& policy, const RtrSet& candidates) {
  for (RtrType t : policy.rtr_preference) {
    if (candidates.contains(t)) return t;
  }
  for (RtrType t : kDefaultOrder) {
    if (candidates.contains(t)) return t;
  }
  return std::nullopt;
}

// The RTR type of a Reply, which names exactly one (RFC 6581 s3).
std::optional<RtrType> single_rtr(const RtrSet& s) {
  if (s.send + s.write + s.read != 1) return std::nullopt;
  return s.send ? RtrType::kSend : s.write ? RtrType::kWrite : RtrType::kRead;
}

RtrSet only(RtrType t) {
  return RtrSet{
      .send = t == RtrType::kSend, .write = t == RtrType::kWrite, .read = t == RtrType::kRead};
}

wire::MpaEnhancedParams with_rtr_bits(const RtrSet& rtrs, wire::MpaEnhancedParams e) {
  e.rtr_send = rtrs.send;
  e.rtr_write = rtrs.write;
  e.rtr_read = rtrs.read;
  return e;
}

std::string rtr_list(const RtrSet& s) {
  std::string out;
  for (RtrType t : {RtrType::kSend, RtrType::kWrite, RtrType::kRead}) {
    if (!s.contains(t)) continue;
    if (!out.empty()) out += ",";
    out += rtr_name(t);
  }
  return out.empty() ? "none" : out;
}

bool is_sentinel(const wire::MpaEnhancedParams& e) {
  return e.ird == wire::kMpaIrdOrdMask || e.ord == wire::kMpaIrdOrdMask;
}

}  // namespace

bool foreign_revision(const MpaPolicy& policy, std::uint8_t revision) {
  if (policy.revision == wire::kMpaRevisionErdma) return revision != wire::kMpaRevisionErdma;
  return revision > policy.revision;
}

wire::MpaFrame make_request(const MpaPolicy& policy, std::vector<std::uint8_t> private_data) {
  wire::MpaFrame f;
  f.kind = wire::MpaFrameKind::kRequest;
  f.revision = policy.revision;
  f.crc = policy.crc == CrcMode::kWant;
  f.markers = policy.markers_wanted;
  f.reserved_bits = policy.extension_bits;
  if (policy.revision == wire::kMpaRevision2) {
    const bool p2p =
        policy.peer_to_peer == PeerToPeer::kOn || policy.peer_to_peer == PeerToPeer::kRequired;
    f.enhanced = wire::MpaEnhancedParams{
        .peer_to_peer = p2p,
        .rtr_send = p2p && policy.rtr_offer.send,
        .rtr_write = p2p && policy.rtr_offer.write,
        .rtr_read = p2p && policy.rtr_offer.read,
        .ird = policy.ird,
        .ord = policy.ord,
    };
  }
  if (policy.revision == wire::kMpaRevisionErdma) f.erdma = wire::ErdmaExtension{};
  f.private_data = std::move(private_data);
  return f;
}

ResponderAnswer answer_request(const MpaPolicy& policy, const wire::MpaFrame& request,
                               std::vector<std::uint8_t> private_data) {
  ResponderAnswer a;
  wire::MpaFrame& reply = a.reply;
  reply.kind = wire::MpaFrameKind::kReply;
  reply.revision = std::min(request.revision, policy.revision);
  reply.crc = request.crc || policy.crc == CrcMode::kWant;
  reply.markers = policy.markers_wanted;
  reply.reserved_bits = policy.echo_reserved_bits ? request.reserved_bits : policy.extension_bits;
  if (reply.revision == wire::kMpaRevisionErdma) reply.erdma = wire::ErdmaExtension{};

  // A refusal this responder's policy decides: the standard's Reject, or (refuse_with reset)
  // a TCP reset and nothing else.
  auto refuse = [&](CmFailure failure, std::string detail) {
    a.failure = failure;
    a.detail = std::move(detail);
    if (policy.refuse_with == Refusal::kReset) {
      a.hangup = Hangup::kReset;
      a.detail += "; refused with a TCP reset";
      return a;
    }
    reply.reject = true;
    reply.enhanced.reset();
    reply.private_data.clear();
    // erdma clears M and C in its Reject (erdma_proc_mpareq(), reject_conn).
    if (reply.revision == wire::kMpaRevisionErdma) reply.crc = reply.markers = false;
    return a;
  };

  if (foreign_revision(policy, request.revision)) {
    const std::string what = "revision " + std::to_string(request.revision) + " Request to a " +
                             "revision-" + std::to_string(policy.revision) + " responder";
    switch (policy.on_newer_revision) {
      case OnNewerRevision::kReset:
        a.hangup = Hangup::kReset;
        a.failure = CmFailure::kRevisionUnsupported;
        a.detail = what + " that resets the connection";
        return a;
      case OnNewerRevision::kClose:
        a.hangup = Hangup::kClose;
        a.failure = CmFailure::kRevisionUnsupported;
        a.detail = what + " that closes the connection without a Reply";
        return a;
      case OnNewerRevision::kReplyOwnRevision:
        break;  // RFC 5044 s7.1: answered in its own revision, below
    }
  }
  if (request.crc && policy.crc == CrcMode::kRefuse) {
    return refuse(CmFailure::kCrcRefused, "the initiator asked for CRC; this responder refuses it");
  }
  // RFC 5044 s7.1: M asks the receiver of the Request to send markers.
  if (request.markers && !policy.markers_supported) {
    return refuse(CmFailure::kMarkersRefused,
                  "the initiator asked for markers; this responder cannot send them");
  }
  if (policy.peer_to_peer == PeerToPeer::kRequired && reply.revision == wire::kMpaRevision2 &&
      (!request.enhanced || !request.enhanced->peer_to_peer)) {
    return refuse(CmFailure::kPeerToPeerRequired,
                  "a revision-2 Request without the peer-to-peer flag; this responder requires "
                  "peer-to-peer mode");
  }

  NegotiatedParams p;
  p.revision = reply.revision;
  p.crc = reply.crc;
  p.markers_to_peer = request.markers;
  p.markers_from_peer = policy.markers_wanted;
  p.ird = policy.ird;
  p.ord = policy.ord;
  // A revision-1 responder does not know the IRD/ORD words: to it they are private data.
  std::vector<std::uint8_t> peer_pd = request.private_data;
  if (request.enhanced && reply.revision == wire::kMpaRevision1) {
    const auto words = wire::encode_enhanced_params(*request.enhanced);
    peer_pd.insert(peer_pd.begin(), words.begin(), words.end());
  }
  p.peer_private_data = std::move(peer_pd);

  if (request.enhanced && reply.revision == wire::kMpaRevision2) {
    const auto& req = *request.enhanced;
    p.enhanced = true;
    p.peer_ird = req.ird;
    p.peer_ord = req.ord;
    const bool no_ird_ord = policy.ird_ord_sentinel && is_sentinel(req);
    wire::MpaEnhancedParams e{.ird = policy.ird, .ord = std::min(policy.ord, req.ird)};
    if (no_ird_ord)
      e = wire::MpaEnhancedParams{.ird = wire::kMpaIrdOrdMask, .ord = wire::kMpaIrdOrdMask};
    p.ord = no_ird_ord ? policy.ord : e.ord;
    if (req.peer_to_peer && policy.peer_to_peer != PeerToPeer::kOff) {
      const RtrSet offered = offered_rtrs(req);
      const RtrSet common = intersect(offered, accepted_rtrs(policy));
      e.peer_to_peer = true;
      p.peer_to_peer = true;
      p.rtr = first_preferred(policy, common);
      RtrSet named;
      if (p.rtr) {
        switch (policy.rtr_reply) {
          case RtrReply::kChosen:
            named = only(*p.rtr);
            break;
          case RtrReply::kOwn:
            named = policy.rtr_offer;
            break;
          case RtrReply::kAllCommon:
            named = common;
            break;
        }
      } else {
        switch (policy.no_common_rtr) {
          case NoCommonRtr::kRefuse:
            break;
          case NoCommonRtr::kPropose:
            p.rtr = first_preferred(policy, accepted_rtrs(policy));
            if (p.rtr) named = only(*p.rtr);
            break;
          case NoCommonRtr::kOfferAll:
            named = accepted_rtrs(policy);
            p.rtr = first_preferred(policy, named);
            break;
          case NoCommonRtr::kDecline:
            e.peer_to_peer = false;
            p.peer_to_peer = false;
            break;
        }
      }
      e = with_rtr_bits(named, e);
    }
    reply.enhanced = e;
    reply.private_data = std::move(private_data);
    if (p.peer_to_peer && !p.rtr) {
      const std::string detail = "initiator offers RTR " + rtr_list(offered_rtrs(req)) +
                                 ", responder accepts " + rtr_list(accepted_rtrs(policy));
      if (policy.refuse_with == Refusal::kReset) return refuse(CmFailure::kNoMatchingRtr, detail);
      a.failure = CmFailure::kNoMatchingRtr;
      a.terminate = kNoMatchingRtrCause;
      a.detail = detail;
      return a;
    }
    // Strict (RFC 6581 s3 without the relaxed lowering): each side's ORD must fit the
    // other side's IRD as offered, in both directions. RFC 6581 s3 leaves a responder
    // whose IRD is below the initiator's ORD (an IRD of 0 against any ORD above 0) to raise
    // its IRD, to answer and let the initiator lower its ORD, or to refuse; a strict one
    // refuses. It knows before it answers, so its Reply is the refusal: the Reject flag
    // (RFC 5044 s7.1), carrying the IRD and ORD it really has (not lowered: strict) so the
    // initiator can see why, as iw_cxgb4 does (c4iw_accept_cr, send_mpa_reject). It does not
    // accept and then Terminate: MPA code 0x06 is the answer of a side that learns of the
    // mismatch only from a Reply, the initiator (judge_reply below).
    if (policy.strict_ird_ord && !no_ird_ord && (req.ord > policy.ird || policy.ord > req.ird)) {
      std::string detail;
      if (req.ord > policy.ird) {
        detail = "initiator ORD " + std::to_string(req.ord) + " exceeds responder IRD " +
                 std::to_string(policy.ird);
      } else {
        detail = "responder ORD " + std::to_string(policy.ord) + " exceeds initiator IRD " +
                 std::to_string(req.ird);
      }
      detail += " (strict)";
      if (policy.refuse_with == Refusal::kReset) return refuse(CmFailure::kInsufficientIrd, detail);
      reply.reject = true;
      reply.enhanced = wire::MpaEnhancedParams{.ird = policy.ird, .ord = policy.ord};
      reply.private_data.clear();
      a.failure = CmFailure::kInsufficientIrd;
      a.detail = detail + ": rejected in the Reply";
      return a;
    }
  } else {
    reply.private_data = std::move(private_data);
  }
  // iw_cxgb4 in revision 1 with peer2peer: it waits for its own RTR type regardless.
  if (p.revision == wire::kMpaRevision1 && policy.rtr_in_revision1) {
    p.peer_to_peer = true;
    p.rtr = single_rtr(policy.rtr_offer);
  }
  a.params = std::move(p);
  return a;
}

InitiatorVerdict judge_reply(const MpaPolicy& policy, const wire::MpaFrame& request,
                             const wire::MpaFrame& reply) {
  InitiatorVerdict v;
  auto fail = [&](CmFailure f, std::string detail,
                  std::optional<wire::TerminateCause> terminate = std::nullopt) {
    v.failure = f;
    v.detail = std::move(detail);
    v.terminate = terminate;
    return v;
  };
  // A refusal this initiator's policy decides (after a Reply it will not take): its Terminate,
  // or with refuse_with reset a TCP reset instead.
  auto refuse = [&](CmFailure f, std::string detail,
                    std::optional<wire::TerminateCause> terminate = std::nullopt) {
    if (policy.refuse_with == Refusal::kReset) {
      v.hangup = Hangup::kReset;
      return fail(f, std::move(detail) + "; refused with a TCP reset");
    }
    return fail(f, std::move(detail), terminate);
  };
  if (reply.kind != wire::MpaFrameKind::kReply) {
    return fail(CmFailure::kUnexpectedFrame, "received an MPA Request where the Reply belongs");
  }
  if (reply.reject) {
    std::string detail = "the responder rejected the connection (" +
                         std::to_string(reply.private_data.size()) + " octets of private data)";
    // A revision-2 Reject may carry the responder's IRD and ORD (a strict responder's does):
    // when they cannot meet ours, that is why (RFC 6581 s3).
    if (request.enhanced && reply.enhanced) {
      const auto& req = *request.enhanced;
      const auto& rep = *reply.enhanced;
      if (req.ord > rep.ird || rep.ord > req.ird) {
        detail += "; its IRD " + std::to_string(rep.ird) + " / ORD " + std::to_string(rep.ord) +
                  " do not fit this initiator's ORD " + std::to_string(req.ord) + " / IRD " +
                  std::to_string(req.ird) + " (insufficient IRD, RFC 6581 s3)";
      }
    }
    return fail(CmFailure::kPeerRejected, std::move(detail));
  }
  if (reply.revision > request.revision) {
    return fail(CmFailure::kRevisionUnsupported,
                "Reply revision " + std::to_string(reply.revision) + " is above the Request's " +
                    std::to_string(request.revision));
  }
  if (reply.revision < request.revision && !policy.fallback_to_revision1) {
    return fail(CmFailure::kRevisionUnsupported, "the responder answered in revision " +
                                                     std::to_string(reply.revision) +
                                                     " and this initiator does not fall back");
  }
  if (reply.revision < request.revision && request.revision == wire::kMpaRevisionErdma) {
    return fail(CmFailure::kRevisionUnsupported,
                "the responder answered erdma's revision 129 in revision " +
                    std::to_string(reply.revision));
  }
  if (reply.crc && policy.crc == CrcMode::kRefuse) {
    return refuse(CmFailure::kCrcRefused, "the responder asked for CRC; this initiator refuses it");
  }
  if (reply.markers && !policy.markers_supported) {
    return refuse(CmFailure::kMarkersRefused,
                  "the responder asked for markers; this initiator cannot send them");
  }
  if (policy.peer_to_peer == PeerToPeer::kRequired && reply.revision == wire::kMpaRevision2 &&
      (!reply.enhanced || !reply.enhanced->peer_to_peer)) {
    return refuse(CmFailure::kPeerToPeerRequired,
                  "a revision-2 Reply without the peer-to-peer flag; this initiator requires "
                  "peer-to-peer mode");
  }

  NegotiatedParams p;
  p.revision = reply.revision;
  p.crc = request.crc || reply.crc;
  p.markers_to_peer = reply.markers;
  p.markers_from_peer = request.markers;
  p.ird = policy.ird;
  p.ord = policy.ord;
  p.peer_private_data = reply.private_data;

  if (request.enhanced && reply.enhanced && reply.revision == wire::kMpaRevision2) {
    const auto& req = *request.enhanced;
    const auto& rep = *reply.enhanced;
    p.enhanced = true;
    p.peer_ird = rep.ird;
    p.peer_ord = rep.ord;
    if (rep.peer_to_peer && !req.peer_to_peer) {
      return fail(CmFailure::kPeerToPeerMismatch,
                  "the Reply sets peer-to-peer mode, which the Request did not offer");
    }
    if (rep.peer_to_peer) {
      p.peer_to_peer = true;
      const RtrSet chosen = offered_rtrs(rep);
      if (chosen.empty()) {
        // The responder found nothing in common; its Terminate (0x07) follows the Reply.
        return fail(CmFailure::kNoMatchingRtr,
                    "the responder accepts none of the offered RTR "
                    "types (" +
                        rtr_list(offered_rtrs(req)) + ")");
      }
      if (policy.rtr_from_reply == RtrFromReply::kPreference) {
        p.rtr = first_preferred(policy, intersect(chosen, offered_rtrs(req)));
      } else {
        p.rtr = single_rtr(chosen);
      }
      if (!p.rtr || !offered_rtrs(req).contains(*p.rtr)) {
        return refuse(CmFailure::kNoMatchingRtr,
                      "the responder chose RTR " + rtr_list(chosen) + " from an offer of " +
                          rtr_list(offered_rtrs(req)),
                      kNoMatchingRtrCause);
      }
    }
    const bool no_ird_ord = policy.ird_ord_sentinel && is_sentinel(rep);
    if (policy.strict_ird_ord && !no_ird_ord && (policy.ord > rep.ird || rep.ord > policy.ird)) {
      return refuse(
          CmFailure::kInsufficientIrd,
          policy.ord > rep.ird
              ? "this initiator's ORD " + std::to_string(policy.ord) +
                    " exceeds the responder's IRD " + std::to_string(rep.ird) + " (strict)"
              : "the responder's ORD " + std::to_string(rep.ord) +
                    " exceeds this initiator's IRD " + std::to_string(policy.ird) + " (strict)",
          kInsufficientIrdCause);
    }
    p.ord = no_ird_ord ? policy.ord : std::min(policy.ord, rep.ird);
  }
  // iw_cxgb4 in revision 1 with peer2peer: it sends its own RTR type regardless.
  if (p.revision == wire::kMpaRevision1 && policy.rtr_in_revision1) {
    p.peer_to_peer = true;
    p.rtr = single_rtr(policy.rtr_offer);
  }
  v.params = std::move(p);
  return v;
}

}  // namespace rdma_interop::cm
