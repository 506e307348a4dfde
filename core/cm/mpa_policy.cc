#include "core/cm/mpa_policy.h"

namespace rdma_interop::cm {

std::string_view rtr_name(RtrType t) {
  switch (t) {
    case RtrType::kSend: return "send";
    case RtrType::kWrite: return "write";
    case RtrType::kRead: return "read";
  }
  return "unknown";
}

bool RtrSet::contains(RtrType t) const {
  switch (t) {
    case RtrType::kSend: return send;
    case RtrType::kWrite: return write;
    case RtrType::kRead: return read;
  }
  return false;
}

std::vector<std::string> validate(const MpaPolicy& p) {
  std::vector<std::string> problems;
  if (p.revision != wire::kMpaRevision1 && p.revision != wire::kMpaRevision2) {
    problems.push_back("revision must be 1 or 2, not " + std::to_string(p.revision));
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
  for (RtrType t : p.rtr_preference) {
    if (!p.rtr_offer.contains(t)) {
      problems.push_back("rtr_preference names " + std::string(rtr_name(t)) +
                         ", which rtr_offer does not accept");
    }
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
