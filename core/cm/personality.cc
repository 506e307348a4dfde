#include "core/cm/personality.h"

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::cm {

std::size_t private_data_room(const MpaPolicy& policy) {
  const bool enhanced = policy.revision == wire::kMpaRevision2;
  return wire::kMpaMaxPrivateDataRfc - (enhanced ? wire::kMpaEnhancedParamsLen : 0);
}

}  // namespace rdma_interop::cm
