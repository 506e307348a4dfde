#include "core/transport/verbs/cm_params.h"

#include <algorithm>
#include <cerrno>

#include "core/transport/verbs/cm_address.h"

namespace rdma_interop::transport::verbs {

Depths connect_depths(const cm::MpaPolicy& policy, const QpDeviceLimits& limits) {
  return Depths{static_cast<std::uint8_t>(std::min<unsigned>({policy.ird, limits.max_ird, 255u})),
                static_cast<std::uint8_t>(std::min<unsigned>({policy.ord, limits.max_ord, 255u}))};
}

Depths accept_depths(const cm::MpaPolicy& policy, const QpDeviceLimits& limits,
                     std::uint8_t peer_ird) {
  Depths d = connect_depths(policy, limits);
  d.ord = std::min(d.ord, peer_ird);
  return d;
}

std::size_t private_data_limit(bool iwarp, CmMessage message) {
  if (iwarp) return 255;
  switch (message) {
    case CmMessage::kRequest:
      return 56;
    case CmMessage::kReply:
      return 196;
    case CmMessage::kReject:
      return 148;
  }
  return 0;
}

std::optional<std::string> check_private_data(const std::vector<std::uint8_t>& private_data,
                                              bool iwarp, CmMessage message) {
  const std::size_t limit = private_data_limit(iwarp, message);
  if (private_data.size() <= limit) return std::nullopt;
  const char* what = message == CmMessage::kRequest ? "connect request"
                     : message == CmMessage::kReply ? "connect reply"
                                                    : "reject";
  return "private data of " + std::to_string(private_data.size()) + " octets does not fit a " +
         (iwarp ? "iWARP " : "IB/RoCE ") + what + " through rdma_cm (at most " +
         std::to_string(limit) + ")";
}

rdma_conn_param conn_param(const Depths& depths, const VerbsOptions& options,
                           const std::vector<std::uint8_t>& private_data) {
  rdma_conn_param p{};
  p.private_data = private_data.empty() ? nullptr : private_data.data();
  p.private_data_len = static_cast<std::uint8_t>(std::min<std::size_t>(private_data.size(), 255));
  p.responder_resources = depths.ird;
  p.initiator_depth = depths.ord;
  p.flow_control = 1;  // IB end-to-end credits; ignored by iWARP
  p.retry_count = options.retry_count;
  p.rnr_retry_count = options.rnr_retry_count;
  return p;
}

std::optional<std::string> apply_ack_timeout(rdma_cm_id* id, const VerbsOptions& options) {
  if (!options.ack_timeout) return std::nullopt;
  std::uint8_t value = *options.ack_timeout;
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &value, sizeof value) != 0) {
    return "cannot set the ACK timeout (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT): " +
           errno_sentence(errno);
  }
  return std::nullopt;
}

}  // namespace rdma_interop::transport::verbs
