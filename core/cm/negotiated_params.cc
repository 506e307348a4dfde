#include "core/cm/negotiated_params.h"

namespace rdma_interop::cm {

std::string to_string(const NegotiatedParams& p) {
  std::string s = "rev " + std::to_string(p.revision);
  s += p.crc ? " crc" : " no-crc";
  if (p.markers_to_peer) s += " markers-tx";
  if (p.markers_from_peer) s += " markers-rx";
  if (p.peer_to_peer) {
    s += " p2p rtr=";
    s += p.rtr ? rtr_name(*p.rtr) : "none";
  }
  s += " ird=" + std::to_string(p.ird) + " ord=" + std::to_string(p.ord);
  if (p.enhanced) {
    s += " peer_ird=" + std::to_string(p.peer_ird) + " peer_ord=" + std::to_string(p.peer_ord);
  }
  return s;
}

}  // namespace rdma_interop::cm
