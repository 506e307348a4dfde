// negotiated_params.h - what both sides settled on when MPA setup succeeded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_policy.h"

namespace rdma_interop::cm {

struct NegotiatedParams {
  std::uint8_t revision = wire::kMpaRevision1;
  bool crc = false;              // both directions (RFC 5044 s7.1)
  bool markers_to_peer = false;  // we insert markers into what we send
  bool markers_from_peer = false;
  bool enhanced = false;         // IRD/ORD words were exchanged (RFC 6581)
  bool peer_to_peer = false;
  std::optional<RtrType> rtr;    // set in peer-to-peer mode
  // Settled RDMA Read depths: we may have `ord` Reads outstanding towards the peer, and
  // accept `ird` from it. For revision 1 they are the local policy's (nothing is exchanged).
  std::uint16_t ird = 0;
  std::uint16_t ord = 0;
  // What the peer sent in its frame (for reports), and its private data.
  std::uint16_t peer_ird = 0;
  std::uint16_t peer_ord = 0;
  std::vector<std::uint8_t> peer_private_data;

  friend bool operator==(const NegotiatedParams&, const NegotiatedParams&) = default;
};

// "rev 2 crc p2p rtr=read ird=16 ord=16" - for logs and the interop matrix.
std::string to_string(const NegotiatedParams& params);

}  // namespace rdma_interop::cm
