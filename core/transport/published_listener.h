// published_listener.h - a provider's listener as the application sees it, plus its telemetry
// registration (core/telemetry/publisher.h), so `backlog-stat` lists the listeners of every
// provider, not only tcp's. Registered while it lives; unregistered, before the listener goes,
// when it is closed or destroyed (a closed listener leaves backlog-stat at once).
#pragma once

#include <memory>
#include <string>

#include "core/telemetry/publisher.h"
#include "core/transport/provider.h"

namespace rdma_interop::transport {

// Wraps `inner` (a provider's listener of scheme `scheme`, "tcp" or "verbs"); everything else
// is forwarded. `overflow` is the backlog policy it was created with, for the snapshot.
std::unique_ptr<Listener> publish_listener(std::unique_ptr<Listener> inner, std::string scheme,
                                           std::shared_ptr<telemetry::Publisher> publisher,
                                           cm::BacklogOverflow overflow);

}  // namespace rdma_interop::transport
