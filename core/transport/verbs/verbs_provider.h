// verbs_provider.h - the rdma-core provider ("verbs://ADDRESS:PORT"): librdmacm for
// connection management, libibverbs for queue pairs, completion queues and memory.
//
// It drives whatever RDMA device holds the address: a real HCA or RNIC, or the kernel's
// soft devices (siw for iWARP, rxe for RoCE). URI forms and options: provider_uri.h and
// verbs/verbs_options.h. One event thread per provider (core/runtime/event_loop.h)
// watches the rdma_cm event channel and every connection's completion channel; all calls
// are thread-safe and every blocking call has a deadline.
//
// What maps how (details in each header):
//   listen       rdma_bind_addr + rdma_listen (verbs_listener.h); request() is synthesized
//   connect      resolve address and route, QP, rdma_connect (verbs_connector.h)
//   IRD / ORD    the MPA policy's ird/ord as responder_resources / initiator_depth, within
//                the device's limits; ConnectionInfo reports what the CM settled
//   connection   verbs_connection.h: memory, posts, completions, state, disconnect
// The rest of the MPA policy (revision, CRC, markers, peer-to-peer and RTR, timeouts) is
// the kernel's business on iWARP and has no meaning on IB/RoCE: it is ignored.
//
// The provider object is cheap: nothing touches rdma_cm until the first listen or
// connect, so a host without RDMA gets a ConnectError (kind unreachable, "rdma_cm is not
// available: ...") there rather than a failure to open the provider.
#pragma once

#include <memory>

#include "core/transport/provider.h"

namespace rdma_interop::transport::verbs {

std::unique_ptr<Provider> make_verbs_provider();

}  // namespace rdma_interop::transport::verbs
