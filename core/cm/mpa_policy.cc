#include "core/cm/mpa_policy.h"

namespace rdma_interop::cm {

std::string_view rtr_name(RtrType t) {
  switch (t) {
    case RtrType::kSend:
      return "send";
    case RtrType::kWrite:
      return "write";
    case RtrType::kRead:
      return "read";
  }
  return "unknown";
}

bool RtrSet::contains(RtrType t) const {
  switch (t) {
    case RtrType::kSend:
      return send;
    case RtrType::kWrite:
      return write;
    case RtrType::kRead:
      return read;
  }
  return false;
}

RtrSet accepted_rtrs(const MpaPolicy& policy) {
  return policy.rtr_accepted.value_or(policy.rtr_offer);
}

namespace {

int count(const RtrSet& s) {
  return int{s.send} + int{s.write} + int{s.read};
}

}  // namespace

std::vector<std::string> validate(const MpaPolicy& p) {
  std::vector<std::string> problems;
  const bool erdma = p.revision == wire::kMpaRevisionErdma;
  if (p.revision != wire::kMpaRevision1 && p.revision != wire::kMpaRevision2 && !erdma) {
    problems.push_back("revision must be 1, 2 or 129 (erdma), not " + std::to_string(p.revision));
  }
  if (erdma && (p.peer_to_peer == PeerToPeer::kOn || p.peer_to_peer == PeerToPeer::kRequired)) {
    problems.push_back("revision 129 (erdma) has no peer-to-peer mode: no IRD/ORD words, no RTR");
  }
  if (erdma && p.on_newer_revision == OnNewerRevision::kReplyOwnRevision) {
    problems.push_back(
        "revision 129 (erdma) speaks no other revision: on_newer_revision must be "
        "close or reset");
  }
  if (p.peer_to_peer == PeerToPeer::kRequired && p.revision != wire::kMpaRevision2) {
    problems.push_back("peer_to_peer \"required\" needs MPA revision 2 (RFC 6581)");
  }
  if (p.ird > wire::kMpaIrdOrdMask || p.ord > wire::kMpaIrdOrdMask) {
    problems.push_back("ird and ord must fit in 14 bits (at most 16383)");
  }
  if (p.peer_to_peer == PeerToPeer::kOn && p.revision != wire::kMpaRevision2) {
    problems.push_back("peer-to-peer mode needs MPA revision 2 (RFC 6581)");
  }
  if (p.peer_to_peer != PeerToPeer::kOff && p.revision == wire::kMpaRevision2 &&
      p.rtr_offer.empty()) {
    problems.push_back("peer-to-peer mode needs at least one RTR type in rtr_offer");
  }
  const RtrSet accepted = accepted_rtrs(p);
  for (RtrType t : p.rtr_preference) {
    if (!accepted.contains(t) && !p.rtr_offer.contains(t)) {
      problems.push_back("rtr_preference names " + std::string(rtr_name(t)) +
                         ", which neither rtr_offer nor rtr_accepted holds");
    }
  }
  if (p.rtr_reply == RtrReply::kOwn && count(p.rtr_offer) != 1) {
    problems.push_back(
        "rtr_reply \"own\" names the responder's own RTR type: rtr_offer must hold "
        "exactly one");
  }
  if (p.rtr_in_revision1 && count(p.rtr_offer) != 1) {
    problems.push_back(
        "rtr_in_revision1 sends the one RTR type of rtr_offer: it must hold exactly "
        "one");
  }
  if ((p.extension_bits & ~wire::kMpaFlagFpduSizeMask) != 0) {
    problems.push_back(
        "extension_bits may set only the known vendor bits 0x04, 0x08 and 0x0c, "
        "not " +
        std::to_string(p.extension_bits));
  }
  if (p.private_data_limit > wire::kMpaMaxPrivateDataRfc) {
    problems.push_back("private_data_limit above 512, the RFC 5044 maximum");
  }
  if (p.request_timeout.count() <= 0 || p.reply_timeout.count() <= 0 ||
      p.rtr_timeout.count() <= 0) {
    problems.push_back("timeouts must be positive");
  }
  if (p.first_fpdu_delay.count() < 0 || p.first_fpdu_delay >= p.reply_timeout) {
    problems.push_back("first_fpdu_delay must be at least 0 and below the reply timeout");
  }
  return problems;
}

}  // namespace rdma_interop::cm
