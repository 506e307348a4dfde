// verbs_connector.h - the active side of one connect(): address resolution, route
// resolution, the queue pair, rdma_connect; then the connection state waits for ESTABLISHED.
//
//   rdma_resolve_addr (from the URI's source=, if any) -> ADDR_RESOLVED (the id has a device)
//   rdma_resolve_route -> ROUTE_RESOLVED
//   QueuePair + VerbsConnectionState, initial receives posted, rdma_connect
//   -> the state answers: ESTABLISHED, REJECTED, UNREACHABLE, CONNECT_ERROR, or the deadline
//
// ADDR_ERROR and ROUTE_ERROR (no RDMA device routes to the address, no ARP/neighbour
// answer) are "unreachable". Every step is bounded by ConnectOptions::timeout: the connector
// arms a timer for the resolution steps and hands the rest of the budget to the core.
// Event thread only.
#pragma once

#include <memory>
#include <optional>

#include "core/transport/provider.h"
#include "core/transport/verbs/cm_address.h"
#include "core/transport/verbs/cm_channel.h"
#include "core/transport/verbs/verbs_connection.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport::verbs {

class Connector : public CmHandler, public std::enable_shared_from_this<Connector> {
 public:
  // `source`: the local address to resolve from (VerbsOptions::source, resolved); none: the
  // route's choice.
  Connector(runtime::EventLoop& loop, CmChannel& channel, const CmAddress& peer,
            std::optional<CmAddress> source, ConnectOptions options, VerbsOptions verbs_options,
            std::shared_ptr<SetupRendezvous> result);

  void start();
  void on_cm_event(const CmEvent& event) override;

 private:
  void on_route_resolved();
  void fail(ConnectError::Kind kind, std::string detail);
  int step_timeout_ms() const;

  runtime::EventLoop& loop_;
  CmChannel& channel_;
  CmAddress peer_;
  std::optional<CmAddress> source_;
  ConnectOptions options_;
  VerbsOptions verbs_options_;
  std::shared_ptr<SetupRendezvous> result_;
  runtime::TimePoint deadline_;
  rdma_cm_id* id_ = nullptr;
  std::optional<runtime::EventLoop::TimerId> timer_;
  bool done_ = false;  // answered, or handed over to the connection state
  // The channel and timer hold us weakly: this keeps us alive until done_.
  std::shared_ptr<Connector> self_;
};

}  // namespace rdma_interop::transport::verbs
