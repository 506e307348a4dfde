// plain_peer_cache.h - the addresses that answered our OFFER as a plain TCP server, until when
// to connect to them without one.
//
// Why: a plain server takes our OFFER as its client's first octets (upgrade.h), and finding
// out costs a round trip or the answer timeout, then a second connect. Remembering the
// address makes that a price paid once per entry's lifetime: until the entry expires,
// connects to the address go out without an OFFER. Expiry, not forever, because a server can
// be replaced by one of ours (a restart, a new deployment), which the next OFFER finds.
//
// Bounded: at most `capacity` entries. Remembering one more first drops the expired ones,
// then, if still full, the one that expires soonest (it has the least plain time left to
// save). Lookups and inserts are O(1) on average; an insert into a full cache is O(capacity).
//
// Time is an input. Threading: none; the owner serialises calls.
//
//   PlainPeerCache cache(1024, 5min);
//   if (cache.is_plain(address, now)) connect plain;
//   else offer, and on plain_peer: cache.remember(address, now);
//   on an upgrade or a decline (the server is ours after all): cache.forget(address);
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rdma_interop::stream {

class PlainPeerCache {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // capacity 0 remembers nothing (every connect offers).
  PlainPeerCache(std::size_t capacity, Clock::duration ttl) : capacity_(capacity), ttl_(ttl) {}

  // The address ("198.18.0.1:5201", as the driver names it) is plain until now + ttl.
  void remember(std::string_view address, TimePoint now);
  // True while an entry for the address has not expired; an expired one is dropped.
  bool is_plain(std::string_view address, TimePoint now);
  // Until when the address is plain, if it is at `now`.
  std::optional<TimePoint> plain_until(std::string_view address, TimePoint now);
  void forget(std::string_view address);

  std::size_t size() const { return until_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  void make_room(TimePoint now);

  std::size_t capacity_;
  Clock::duration ttl_;
  std::unordered_map<std::string, TimePoint> until_;
};

}  // namespace rdma_interop::stream
