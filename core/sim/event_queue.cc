#include "core/sim/event_queue.h"

namespace rdma_interop::sim {

std::uint64_t EventQueue::at(TimePoint when, Action action) {
  if (when < now_) when = now_;
  const std::uint64_t id = next_id_++;
  events_.emplace(Key{when, id}, std::move(action));
  when_.emplace(id, when);
  return id;
}

bool EventQueue::cancel(std::uint64_t id) {
  auto w = when_.find(id);
  if (w == when_.end()) return false;
  events_.erase(Key{w->second, id});
  when_.erase(w);
  return true;
}

bool EventQueue::run_next() {
  if (events_.empty()) return false;
  auto it = events_.begin();
  now_ = it->first.first;
  when_.erase(it->first.second);
  Action action = std::move(it->second);
  events_.erase(it);
  ++executed_;
  action();
  return true;
}

void EventQueue::run_until(TimePoint until) {
  while (!events_.empty() && events_.begin()->first.first <= until) run_next();
  if (until > now_) now_ = until;
}

}  // namespace rdma_interop::sim
