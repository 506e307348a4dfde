// provider_registry.h - which provider opens which URI scheme: the one list of the schemes
// this build knows. open_provider() opens from it, the URI parser names its schemes when it
// refuses one, and the tools check a URI's scheme and word their help with it, so a new
// provider is one entry here (and its parser in provider_uri.cc), not a hunt for string
// compares.
//
//   if (const ProviderEntry* entry = find_provider(uri.scheme)) auto provider = entry->open();
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/transport/provider.h"

namespace rdma_interop::transport {

struct ProviderEntry {
  std::string_view scheme;     // "tcp"
  std::string_view uri_forms;  // how its URIs look, for errors: "tcp://ADDRESS:PORT"
  std::unique_ptr<Provider> (*open)();
};

// Every provider of this build, in the order errors and help list them.
std::span<const ProviderEntry> registered_providers();

// The entry for `scheme`, or null when no provider opens it.
const ProviderEntry* find_provider(std::string_view scheme);

// "tcp and verbs"; with `uri_forms`, "tcp://ADDRESS:PORT, verbs://ADDRESS:PORT or
// verbs://DEVICE": the words every error and help text uses for the known schemes.
std::string known_schemes();
std::string known_uri_forms();

}  // namespace rdma_interop::transport
