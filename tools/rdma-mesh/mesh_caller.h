// mesh_caller.h - who is calling, and the answer: the acceptor's side of mesh setup
// (mesh_setup.h), as a pure function so it can be fuzzed with any private data.
//
// A connecting node puts its name in the MPA Request's private data after the endpoint's 16
// octets of credit parameters (credit::kCreditParamsSize). Those are bytes a peer chose: the
// name is compared as it came, and only ever printed escaped (printable_text.h), so a '\xff'
// or an escape sequence in it cannot break a report or a terminal (issue 17: it aborted the
// node).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tools/rdma-mesh/mesh_config.h"

namespace rdma_interop::mesh {

struct CallerVerdict {
  std::string name;                 // the caller's name, raw, as it came
  std::optional<std::size_t> peer;  // accept: its index in config.peers
  std::string reject_reason;        // refuse: one printable sentence (for the Reject and logs)
};

// The caller's name in `private_data` (empty when there is nothing after the credit
// parameters), without the zeros the IB CM pads private data with (the device tier found
// every RoCE mesh refused for 'A\x00\x00...').
std::string caller_name(std::span<const std::uint8_t> private_data);

// Accept a caller that is a peer of ours whose name sorts before ours (of a pair, the lower
// name connects) and is not connected yet (`connected[i]` for config.peers[i]); refuse any
// other, saying why.
CallerVerdict classify_caller(const MeshConfig& config, std::span<const std::uint8_t> private_data,
                              const std::vector<bool>& connected);

}  // namespace rdma_interop::mesh
