// queue_pair.h - the verbs objects behind one connection: a protection domain, a completion
// channel and one completion queue for both work queues, and the RC queue pair created on
// the connection's cm_id (rdma_create_qp, which also moves it to INIT so receives can be
// posted before rdma_connect / rdma_accept).
//
// Sizes follow QpCaps, lowered to what the device offers (ibv_query_device): the send and
// receive queues to max_qp_wr, the completion queue to max_cqe. One scatter/gather element
// per request (rdmap::Sge), no inline data. QpCaps::max_ulpdu has no meaning here: the
// device segments by its path MTU.
//
// Event thread only. Memory regions registered on pd() must be deregistered before the
// QueuePair is destroyed; the cm_id outlives it and is destroyed by its owner afterwards.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/transport/provider.h"
#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

// What the device allows, from ibv_query_device, and which transport it speaks.
struct QpDeviceLimits {
  std::string device;  // "rxe0"
  bool iwarp = false;  // IBV_TRANSPORT_IWARP (siw, cxgb4...); else IB or RoCE
  std::uint32_t max_qp_wr = 0;
  std::uint32_t max_cqe = 0;
  std::uint8_t max_ird = 0;  // max_qp_rd_atom: inbound RDMA Reads per QP (IRD)
  std::uint8_t max_ord = 0;  // max_qp_init_rd_atom: outbound RDMA Reads per QP (ORD)
};

// Queries the device an id is bound to (id->verbs set: after address resolution or for a
// connection request's id).
Expected<QpDeviceLimits, std::string> query_limits(const rdma_cm_id* id);

class QueuePair {
 public:
  static Expected<std::unique_ptr<QueuePair>, std::string> create(rdma_cm_id* id,
                                                                  const QpCaps& caps);
  ~QueuePair();  // destroys the QP (rdma_destroy_qp), then CQ, channel and PD
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* channel() const { return channel_; }
  ibv_qp* qp() const { return id_->qp; }
  const QpDeviceLimits& limits() const { return limits_; }
  // The send queue's depth the device granted: what was asked, or more (a device may round
  // its ring up).
  std::uint32_t send_depth() const { return send_depth_; }

 private:
  explicit QueuePair(rdma_cm_id* id) : id_(id) {}

  rdma_cm_id* id_;
  QpDeviceLimits limits_;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint32_t send_depth_ = 0;
};

}  // namespace rdma_interop::transport::verbs
