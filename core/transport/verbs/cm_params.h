// cm_params.h - the numbers rdma_connect and rdma_accept take (rdma_conn_param): RDMA Read
// depths from the MPA policy within the device's limits, the RC retry counts from the URI,
// and the private data within what the CM message can carry.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_policy.h"
#include "core/transport/verbs/queue_pair.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport::verbs {

struct Depths {
  std::uint8_t ird = 0;  // responder_resources: the peer's Reads we accept at once
  std::uint8_t ord = 0;  // initiator_depth: our Reads outstanding at once
};

// Connecting: the policy's IRD/ORD, at most what the device allows (librdmacm refuses more
// with EINVAL) and what rdma_conn_param's 8 bits hold.
Depths connect_depths(const cm::MpaPolicy& policy, const QpDeviceLimits& limits);
// Accepting: as connecting, and the ORD no higher than the requester's IRD (the request's
// initiator_depth): RFC 6581's relaxed rule, and what the IB CM requires.
Depths accept_depths(const cm::MpaPolicy& policy, const QpDeviceLimits& limits,
                     std::uint8_t peer_ird);

enum class CmMessage : std::uint8_t { kRequest, kReply, kReject };
// How much private data the CM message carries: IB/RoCE REQ 56 (92 minus rdma_cm's 36-octet
// header), REP 196, REJ 148 (IBA 12.6); iWARP 255 (rdma_conn_param's 8-bit length, below
// MPA's 512). Over IB/RoCE the receiver sees the whole field, zero-padded: the CM does not
// carry the length.
std::size_t private_data_limit(bool iwarp, CmMessage message);
// A sentence when `private_data` is too long for `message`, else nullopt.
std::optional<std::string> check_private_data(const std::vector<std::uint8_t>& private_data,
                                              bool iwarp, CmMessage message);

// The rdma_conn_param for rdma_connect / rdma_accept; points into `private_data`.
rdma_conn_param conn_param(const Depths& depths, const VerbsOptions& options,
                           const std::vector<std::uint8_t>& private_data);

// Applies the URI's ACK timeout to the id (before rdma_connect / rdma_accept). The error is
// a sentence.
std::optional<std::string> apply_ack_timeout(rdma_cm_id* id, const VerbsOptions& options);

}  // namespace rdma_interop::transport::verbs
