// negotiated_json.h - rdma-probe's "negotiated" object: what an MPA setup agreed.
#pragma once

#include <nlohmann/json.hpp>

#include "core/cm/negotiated_params.h"

namespace rdma_interop::probe {

// {"revision":2,"crc":true,"markers_to_peer":false,"markers_from_peer":false,
//  "enhanced":true,"peer_to_peer":true,"rtr":"read"|null,"ird":16,"ord":16,
//  "peer_ird":32,"peer_ord":32}
nlohmann::ordered_json to_json(const cm::NegotiatedParams& params);

}  // namespace rdma_interop::probe
