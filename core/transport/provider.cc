#include "core/transport/provider.h"

#include "core/transport/tcp/tcp_provider.h"
#include "core/transport/verbs/verbs_provider.h"
#include "core/wire/terminate.h"

namespace rdma_interop::transport {

std::string_view kind_name(ConnectError::Kind kind) {
  switch (kind) {
    case ConnectError::Kind::kSetup: return "setup";
    case ConnectError::Kind::kUnreachable: return "unreachable";
    case ConnectError::Kind::kAddressInUse: return "address_in_use";
    case ConnectError::Kind::kInvalidArgument: return "invalid_argument";
    case ConnectError::Kind::kTimeout: return "timeout";
  }
  return "unknown";
}

std::string to_string(const ConnectError& e) {
  std::string s(kind_name(e.kind));
  if (e.failure) s += " (" + std::string(cm::failure_name(*e.failure)) + ")";
  if (!e.detail.empty()) s += ": " + e.detail;
  if (e.terminate) s += "; terminate " + wire::describe(*e.terminate);
  if (e.peer_frame) s += "; peer sent " + wire::to_string(*e.peer_frame);
  return s;
}

Expected<std::unique_ptr<Provider>, std::string> open_provider(std::string_view scheme) {
  if (scheme == "tcp") return tcp::make_tcp_provider();
  if (scheme == "verbs") return verbs::make_verbs_provider();
  return unexpected("no provider for scheme '" + std::string(scheme) +
                    "': this build has tcp and verbs");
}

}  // namespace rdma_interop::transport
