#include "core/cm/mpa_negotiation.h"

#include <algorithm>

namespace rdma_interop::cm {
namespace {

constexpr wire::TerminateCause kNoMatchingRtrCause{wire::TermLayer::kLlp, wire::kMpaEtype,
                                                   wire::kMpaCodeNoMatchingRtr};
constexpr wire::TerminateCause kInsufficientIrdCause{wire::TermLayer::kLlp, wire::kMpaEtype,
                                                     wire::kMpaCodeInsufficientIrd};

RtrSet offered_rtrs(const wire::MpaEnhancedParams& e) {
  return RtrSet{.send = e.rtr_send, .write = e.rtr_write, .read = e.rtr_read};
}

std::optional<RtrType> pick_rtr(const MpaPolicy& policy, const RtrSet& offered) {
  auto usable = [&](RtrType t) { return offered.contains(t) && policy.rtr_offer.contains(t); };
  for (RtrType t : policy.rtr_preference) {
    if (usable(t)) return t;
  }
  for (RtrType t : {RtrType::kRead, RtrType::kWrite, RtrType::kSend}) {
    if (usable(t)) return t;
  }
  return std::nullopt;
}

// The RTR type of a Reply, which names exactly one (RFC 6581 s3).
std::optional<RtrType> single_rtr(const RtrSet& s) {
  if (s.send + s.write + s.read != 1) return std::nullopt;
  return s.send ? RtrType::kSend : s.write ? RtrType::kWrite : RtrType::kRead;
}

wire::MpaEnhancedParams rtr_bits(std::optional<RtrType> rtr, wire::MpaEnhancedParams e) {
  e.rtr_send = rtr == RtrType::kSend;
  e.rtr_write = rtr == RtrType::kWrite;
  e.rtr_read = rtr == RtrType::kRead;
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

}  // namespace

wire::MpaFrame make_request(const MpaPolicy& policy, std::vector<std::uint8_t> private_data) {
  wire::MpaFrame f;
  f.kind = wire::MpaFrameKind::kRequest;
  f.revision = policy.revision;
  f.crc = policy.crc == CrcMode::kWant;
  f.markers = policy.markers_wanted;
  if (policy.revision == wire::kMpaRevision2) {
    const bool p2p = policy.peer_to_peer == PeerToPeer::kOn;
    f.enhanced = wire::MpaEnhancedParams{
        .peer_to_peer = p2p,
        .rtr_send = p2p && policy.rtr_offer.send,
        .rtr_write = p2p && policy.rtr_offer.write,
        .rtr_read = p2p && policy.rtr_offer.read,
        .ird = policy.ird,
        .ord = policy.ord,
    };
  }
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

  auto refuse = [&](CmFailure failure, std::string detail) {
    reply.reject = true;
    reply.enhanced.reset();
    reply.private_data.clear();
    a.failure = failure;
    a.detail = std::move(detail);
    return a;
  };

  if (request.revision > policy.revision) {
    if (policy.on_newer_revision == OnNewerRevision::kReset) {
      a.reset = true;
      a.failure = CmFailure::kRevisionUnsupported;
      a.detail = "revision " + std::to_string(request.revision) +
                 " Request to a revision-1-only responder that resets the connection";
      return a;
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
    wire::MpaEnhancedParams e{.ird = policy.ird, .ord = std::min(policy.ord, req.ird)};
    p.ord = e.ord;
    if (req.peer_to_peer && policy.peer_to_peer != PeerToPeer::kOff) {
      e.peer_to_peer = true;
      p.peer_to_peer = true;
      p.rtr = pick_rtr(policy, offered_rtrs(req));
      e = rtr_bits(p.rtr, e);
    }
    reply.enhanced = e;
    reply.private_data = std::move(private_data);
    if (p.peer_to_peer && !p.rtr) {
      a.failure = CmFailure::kNoMatchingRtr;
      a.terminate = kNoMatchingRtrCause;
      a.detail = "initiator offers RTR " + rtr_list(offered_rtrs(req)) + ", responder accepts " +
                 rtr_list(policy.rtr_offer);
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
    // mismatch only from a Reply, the initiator (settle_reply below).
    if (policy.strict_ird_ord && (req.ord > policy.ird || policy.ord > req.ird)) {
      reply.reject = true;
      reply.enhanced = wire::MpaEnhancedParams{.ird = policy.ird, .ord = policy.ord};
      reply.private_data.clear();
      a.failure = CmFailure::kInsufficientIrd;
      if (req.ord > policy.ird) {
        a.detail = "initiator ORD " + std::to_string(req.ord) + " exceeds responder IRD " +
                   std::to_string(policy.ird);
      } else {
        a.detail = "responder ORD " + std::to_string(policy.ord) + " exceeds initiator IRD " +
                   std::to_string(req.ird);
      }
      a.detail += " (strict): rejected in the Reply";
      return a;
    }
  } else {
    reply.private_data = std::move(private_data);
  }
  a.params = std::move(p);
  return a;
}

InitiatorVerdict settle_reply(const MpaPolicy& policy, const wire::MpaFrame& request,
                              const wire::MpaFrame& reply) {
  InitiatorVerdict v;
  auto fail = [&](CmFailure f, std::string detail,
                  std::optional<wire::TerminateCause> terminate = std::nullopt) {
    v.failure = f;
    v.detail = std::move(detail);
    v.terminate = terminate;
    return v;
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
    return fail(CmFailure::kRevisionUnsupported,
                "the responder answered in revision " + std::to_string(reply.revision) +
                    " and this initiator does not fall back");
  }
  if (reply.crc && policy.crc == CrcMode::kRefuse) {
    return fail(CmFailure::kCrcRefused, "the responder asked for CRC; this initiator refuses it");
  }
  if (reply.markers && !policy.markers_supported) {
    return fail(CmFailure::kMarkersRefused,
                "the responder asked for markers; this initiator cannot send them");
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
        return fail(CmFailure::kNoMatchingRtr, "the responder accepts none of the offered RTR "
                                               "types (" + rtr_list(offered_rtrs(req)) + ")");
      }
      p.rtr = single_rtr(chosen);
      if (!p.rtr || !offered_rtrs(req).contains(*p.rtr)) {
        return fail(CmFailure::kNoMatchingRtr,
                    "the responder chose RTR " + rtr_list(chosen) + " from an offer of " +
                        rtr_list(offered_rtrs(req)),
                    kNoMatchingRtrCause);
      }
    }
    if (policy.strict_ird_ord && (policy.ord > rep.ird || rep.ord > policy.ird)) {
      return fail(CmFailure::kInsufficientIrd,
                  policy.ord > rep.ird
                      ? "this initiator's ORD " + std::to_string(policy.ord) +
                            " exceeds the responder's IRD " + std::to_string(rep.ird) +
                            " (strict)"
                      : "the responder's ORD " + std::to_string(rep.ord) +
                            " exceeds this initiator's IRD " + std::to_string(policy.ird) +
                            " (strict)",
                  kInsufficientIrdCause);
    }
    p.ord = std::min(policy.ord, rep.ird);
  }
  v.params = std::move(p);
  return v;
}

}  // namespace rdma_interop::cm
