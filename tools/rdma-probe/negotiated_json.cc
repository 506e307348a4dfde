#include "tools/rdma-probe/negotiated_json.h"

#include "core/cm/mpa_policy.h"

namespace rdma_interop::probe {

nlohmann::ordered_json to_json(const cm::NegotiatedParams& n) {
  using json = nlohmann::ordered_json;
  return json{
      {"revision", n.revision},
      {"crc", n.crc},
      {"markers_to_peer", n.markers_to_peer},
      {"markers_from_peer", n.markers_from_peer},
      {"enhanced", n.enhanced},
      {"peer_to_peer", n.peer_to_peer},
      {"rtr", n.rtr ? json(cm::rtr_name(*n.rtr)) : json(nullptr)},
      {"ird", n.ird},
      {"ord", n.ord},
      {"peer_ird", n.peer_ird},
      {"peer_ord", n.peer_ord},
  };
}

}  // namespace rdma_interop::probe
