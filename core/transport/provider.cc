#include "core/transport/provider.h"

#include "core/transport/provider_registry.h"
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

ConnectError connect_error(ConnectError::Kind kind, std::string detail,
                           std::optional<cm::CmFailure> failure) {
  ConnectError e;
  e.kind = kind;
  e.failure = failure;
  e.detail = std::move(detail);
  return e;
}

ConnectError setup_failure(cm::CmFailure failure, std::string detail) {
  return connect_error(ConnectError::Kind::kSetup, std::move(detail), failure);
}

std::optional<ConnectError> policy_error(const cm::MpaPolicy& policy) {
  const auto problems = cm::validate(policy);
  if (problems.empty()) return std::nullopt;
  std::string detail = "unusable MPA policy:";
  for (const auto& p : problems) detail += " " + p + ";";
  detail.pop_back();
  return connect_error(ConnectError::Kind::kInvalidArgument, std::move(detail));
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
  if (const ProviderEntry* entry = find_provider(scheme)) return entry->open();
  return unexpected("no provider for scheme '" + std::string(scheme) + "': this build has " +
                    known_schemes());
}

}  // namespace rdma_interop::transport
