#include "tools/rdma-mesh/mesh_caller.h"

#include "core/credit/credit_params.h"
#include "core/util/printable_text.h"

namespace rdma_interop::mesh {

std::string caller_name(std::span<const std::uint8_t> private_data) {
  if (private_data.size() <= credit::kCreditParamsSize) return {};
  auto name = private_data.subspan(credit::kCreditParamsSize);
  // The IB CM's REQ carries a fixed 92 octets of private data (IBA 12.6.5; rdma_cm keeps
  // 56 of them), so over InfiniBand and RoCE the name arrives followed by zeros. A name has
  // no NUL (mesh_config.h), so trailing NULs are padding, never the caller's.
  while (!name.empty() && name.back() == 0) name = name.first(name.size() - 1);
  return std::string(name.begin(), name.end());
}

CallerVerdict classify_caller(const MeshConfig& config, std::span<const std::uint8_t> private_data,
                              const std::vector<bool>& connected) {
  CallerVerdict v;
  v.name = caller_name(private_data);
  for (std::size_t i = 0; i < config.peers.size(); ++i) {
    if (config.peers[i].name != v.name || !(v.name < config.name)) continue;
    if (i < connected.size() && connected[i]) {
      v.reject_reason = "rdma-mesh " + config.name + ": already connected to " + printable(v.name);
    } else {
      v.peer = i;
    }
    return v;
  }
  v.reject_reason =
      "rdma-mesh " + config.name + ": not a peer that calls us: '" + printable(v.name) + "'";
  return v;
}

}  // namespace rdma_interop::mesh
