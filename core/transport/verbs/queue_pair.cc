#include "core/transport/verbs/queue_pair.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "core/transport/verbs/cm_address.h"

namespace rdma_interop::transport::verbs {

Expected<QpDeviceLimits, std::string> query_limits(const rdma_cm_id* id) {
  if (id == nullptr || id->verbs == nullptr) {
    return unexpected(std::string("the cm_id is not bound to an RDMA device"));
  }
  ibv_device_attr attr{};
  if (const int rc = ibv_query_device(id->verbs, &attr); rc != 0) {
    return unexpected("ibv_query_device failed: " + errno_sentence(rc));
  }
  QpDeviceLimits limits;
  limits.device = ibv_get_device_name(id->verbs->device);
  limits.iwarp = id->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
  limits.max_qp_wr = static_cast<std::uint32_t>(std::max(attr.max_qp_wr, 1));
  limits.max_cqe = static_cast<std::uint32_t>(std::max(attr.max_cqe, 2));
  // rdma_conn_param carries 8-bit depths.
  limits.max_ird = static_cast<std::uint8_t>(std::clamp(attr.max_qp_rd_atom, 0, 255));
  limits.max_ord = static_cast<std::uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 0, 255));
  return limits;
}

Expected<std::unique_ptr<QueuePair>, std::string> QueuePair::create(rdma_cm_id* id,
                                                                    const QpCaps& caps) {
  auto limits = query_limits(id);
  if (!limits) return unexpected(limits.error());
  std::unique_ptr<QueuePair> qp(new QueuePair(id));
  qp->limits_ = *limits;

  qp->pd_ = ibv_alloc_pd(id->verbs);
  if (qp->pd_ == nullptr) return unexpected("ibv_alloc_pd failed: " + errno_sentence(errno));
  qp->channel_ = ibv_create_comp_channel(id->verbs);
  if (qp->channel_ == nullptr) {
    return unexpected("ibv_create_comp_channel failed: " + errno_sentence(errno));
  }
  // The event thread reads it until EAGAIN.
  const int flags = ::fcntl(qp->channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(qp->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return unexpected("cannot make the completion channel nonblocking: " + errno_sentence(errno));
  }
  const std::uint32_t send_wr = std::clamp<std::uint32_t>(caps.max_send_wr, 1, limits->max_qp_wr);
  const std::uint32_t recv_wr = std::clamp<std::uint32_t>(
      std::max<std::uint32_t>(caps.max_recv_wr,
                              static_cast<std::uint32_t>(caps.initial_recvs.size())),
      1, limits->max_qp_wr);
  const std::uint32_t cqe = std::min(send_wr + recv_wr, limits->max_cqe);
  qp->cq_ = ibv_create_cq(id->verbs, static_cast<int>(cqe), nullptr, qp->channel_, 0);
  if (qp->cq_ == nullptr) return unexpected("ibv_create_cq failed: " + errno_sentence(errno));
  if (const int rc = ibv_req_notify_cq(qp->cq_, 0); rc != 0) {
    return unexpected("ibv_req_notify_cq failed: " + errno_sentence(rc));
  }

  ibv_qp_init_attr init{};
  init.send_cq = qp->cq_;
  init.recv_cq = qp->cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // SendWr::signaled decides
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = 0;
  if (rdma_create_qp(id, qp->pd_, &init) != 0) {
    return unexpected("rdma_create_qp failed: " + errno_sentence(errno));
  }
  // rdma_create_qp writes back what it was told (rxe: 8 asked, 8 said), ibv_query_qp what
  // the device made (rxe rounds its ring: 15). Posting stops at the latter.
  qp->send_depth_ = init.cap.max_send_wr;
  ibv_qp_attr attr{};
  ibv_qp_init_attr made{};
  if (ibv_query_qp(id->qp, &attr, IBV_QP_CAP, &made) == 0) {
    qp->send_depth_ = std::max(qp->send_depth_, attr.cap.max_send_wr);
  }
  return qp;
}

QueuePair::~QueuePair() {
  if (id_->qp != nullptr) rdma_destroy_qp(id_);
  // Every completion event was acknowledged as it was read, so the CQ can go.
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
}

}  // namespace rdma_interop::transport::verbs
