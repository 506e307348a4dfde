#include "core/stream/plain_peer_cache.h"

#include <algorithm>

namespace rdma_interop::stream {

void PlainPeerCache::remember(std::string_view address, TimePoint now) {
  if (capacity_ == 0) return;
  const std::string key(address);
  if (auto it = until_.find(key); it != until_.end()) {
    it->second = now + ttl_;
    return;
  }
  if (until_.size() >= capacity_) make_room(now);
  until_.emplace(key, now + ttl_);
}

bool PlainPeerCache::is_plain(std::string_view address, TimePoint now) {
  return plain_until(address, now).has_value();
}

std::optional<PlainPeerCache::TimePoint> PlainPeerCache::plain_until(std::string_view address,
                                                                     TimePoint now) {
  const auto it = until_.find(std::string(address));
  if (it == until_.end()) return std::nullopt;
  if (now >= it->second) {
    until_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void PlainPeerCache::forget(std::string_view address) {
  until_.erase(std::string(address));
}

void PlainPeerCache::make_room(TimePoint now) {
  std::erase_if(until_, [&](const auto& entry) { return now >= entry.second; });
  if (until_.size() < capacity_) return;
  const auto soonest =
      std::min_element(until_.begin(), until_.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  until_.erase(soonest);
}

}  // namespace rdma_interop::stream
