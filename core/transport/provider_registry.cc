#include "core/transport/provider_registry.h"

#include <array>
#include <vector>

#include "core/transport/tcp/tcp_provider.h"
#include "core/transport/verbs/verbs_provider.h"

namespace rdma_interop::transport {
namespace {

constexpr std::array<ProviderEntry, 2> kProviders = {{
    {"tcp", "tcp://ADDRESS:PORT", &tcp::make_tcp_provider},
    {"verbs", "verbs://ADDRESS:PORT, verbs://DEVICE", &verbs::make_verbs_provider},
}};

// "a", "a and b", "a, b and c".
std::string join(const std::vector<std::string_view>& items, std::string_view last_separator) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += i + 1 == items.size() ? last_separator : std::string_view(", ");
    s += items[i];
  }
  return s;
}

}  // namespace

std::span<const ProviderEntry> registered_providers() {
  return kProviders;
}

const ProviderEntry* find_provider(std::string_view scheme) {
  for (const auto& entry : kProviders) {
    if (entry.scheme == scheme) return &entry;
  }
  return nullptr;
}

std::string known_schemes() {
  std::vector<std::string_view> schemes;
  for (const auto& entry : kProviders) schemes.push_back(entry.scheme);
  return join(schemes, " and ");
}

std::string known_uri_forms() {
  // Each entry's forms, split at their commas, so the whole list reads "a, b or c".
  std::vector<std::string_view> forms;
  for (const auto& entry : kProviders) {
    std::string_view rest = entry.uri_forms;
    for (auto comma = rest.find(", "); comma != std::string_view::npos; comma = rest.find(", ")) {
      forms.push_back(rest.substr(0, comma));
      rest.remove_prefix(comma + 2);
    }
    forms.push_back(rest);
  }
  return join(forms, " or ");
}

}  // namespace rdma_interop::transport
