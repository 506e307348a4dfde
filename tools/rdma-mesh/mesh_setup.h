// mesh_setup.h - connects a node to every other node of the mesh, once each.
//
// Of each pair, the node whose name sorts first connects and the other accepts, so every
// pair gets exactly one connection without coordination. The connecting node puts its name
// in the MPA private data after the endpoint's credit parameters (offset
// credit::kCreditParamsSize), which is how the acceptor knows who is calling; a Request
// from a name it does not expect (or a second one from the same name) is rejected with a
// reason in the reject's private data. Connects are retried with jittered backoff until the
// setup deadline, because the peer's listener may not be up yet: the nodes of a mesh start
// in any order.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/messaging/message_endpoint.h"
#include "core/transport/provider.h"
#include "core/util/expected.h"
#include "tools/rdma-mesh/mesh_config.h"

namespace rdma_interop::mesh {

// A peer connected: its index in config.peers, its id, "connect" or "accept".
using ConnectedFn =
    std::function<void(std::size_t peer, messaging::PeerId id, std::string_view role)>;
// Something worth a line while setup goes on (a rejected stranger, a failed accept).
using NoticeFn = std::function<void(const std::string& what)>;

// Connects to every later-named peer and accepts every earlier-named one on `listener`.
// Returns the peers' ids in config.peers order, or one sentence per peer that did not
// connect by `deadline` (or before `stop` was set).
Expected<std::vector<messaging::PeerId>, std::string> join_mesh(
    messaging::MessageEndpoint& endpoint, transport::Provider& provider,
    transport::Listener& listener, const MeshConfig& config,
    std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& stop,
    const ConnectedFn& on_connected, const NoticeFn& notice);

}  // namespace rdma_interop::mesh
