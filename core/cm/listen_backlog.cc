#include "core/cm/listen_backlog.h"

#include <algorithm>

namespace rdma_interop::cm {

std::string_view overflow_name(BacklogOverflow o) {
  return o == BacklogOverflow::kDrop ? "drop" : "reject";
}

std::vector<std::uint8_t> backlog_full_private_data() {
  return {kBacklogFullMarker.begin(), kBacklogFullMarker.end()};
}

bool is_backlog_full_marker(std::span<const std::uint8_t> private_data) {
  return std::ranges::equal(private_data, kBacklogFullMarker, [](std::uint8_t a, char b) {
    return a == static_cast<std::uint8_t>(b);
  });
}

std::uint32_t default_half_open_limit(std::uint32_t backlog) {
  const std::uint64_t four = 4ULL * std::max<std::uint32_t>(backlog, 1);
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(four, 64, UINT32_MAX));
}

std::string_view reason_name(BacklogCloseReason r) {
  switch (r) {
    case BacklogCloseReason::kNone:
      return "none";
    case BacklogCloseReason::kHalfOpenExpired:
      return "half_open_expired";
    case BacklogCloseReason::kHalfOpenEvicted:
      return "half_open_evicted";
    case BacklogCloseReason::kOverflowDropped:
      return "overflow_dropped";
  }
  return "unknown";
}

std::string_view event_name(BacklogEventType t) {
  return t == BacklogEventType::kAdded ? "backlog_added" : "backlog_removed";
}

std::string_view reason_name(BacklogEventReason r) {
  switch (r) {
    case BacklogEventReason::kRequest:
      return "request";
    case BacklogEventReason::kWaited:
      return "waited";
    case BacklogEventReason::kAccepted:
      return "accepted";
    case BacklogEventReason::kRejected:
      return "rejected";
    case BacklogEventReason::kExpired:
      return "expired";
    case BacklogEventReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

ListenBacklog::ListenBacklog(const BacklogConfig& config) : config_(config) {
  config_.backlog = std::max<std::uint32_t>(config_.backlog, 1);
  if (config_.half_open_limit == 0) {
    config_.half_open_limit = default_half_open_limit(config_.backlog);
  }
  counters_.backlog = config_.backlog;
  counters_.half_open_limit = config_.half_open_limit;
}

ListenBacklog::TimePoint ListenBacklog::clamp(TimePoint now) {
  // Queues are FIFO and every stage has one timeout, so queue order is deadline order only
  // while time does not go backwards.
  latest_ = std::max(latest_, now);
  return latest_;
}

ListenBacklog::Queue& ListenBacklog::queue_of(BacklogStage stage) {
  switch (stage) {
    case BacklogStage::kHalfOpen:
      return half_open_;
    case BacklogStage::kPending:
      return pending_;
    case BacklogStage::kWaiting:
      return waiting_;
  }
  return half_open_;
}

void ListenBacklog::enqueue(BacklogConnId id, Entry& e, BacklogStage stage, TimePoint deadline) {
  e.stage = stage;
  e.seq = next_seq_++;
  e.deadline = deadline;
  queue_of(stage).emplace(e.seq, id);
}

void ListenBacklog::dequeue(const Entry& e) {
  queue_of(e.stage).erase(e.seq);
}

void ListenBacklog::emit(BacklogEventType type, BacklogConnId id, BacklogEventReason reason) {
  if (events_.size() == kMaxEvents) {
    events_.pop_front();
    ++events_dropped_;
  }
  events_.push_back({type, id, reason, counters_.pending});
}

std::vector<BacklogEvent> ListenBacklog::take_events() {
  std::vector<BacklogEvent> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

std::vector<BacklogAction> ListenBacklog::on_tcp_accepted(BacklogConnId id, TimePoint now) {
  now = clamp(now);
  std::vector<BacklogAction> actions;
  if (entries_.contains(id)) return actions;
  if (half_open_.size() >= config_.half_open_limit) {
    // The oldest is the likeliest to be a flood connection that will never finish.
    const BacklogConnId victim = half_open_.begin()->second;
    half_open_.erase(half_open_.begin());
    entries_.erase(victim);
    counters_.half_open--;
    counters_.half_open_evicted++;
    actions.push_back({BacklogActionType::kClose, victim, BacklogCloseReason::kHalfOpenEvicted});
  }
  Entry& e = entries_[id];
  enqueue(id, e, BacklogStage::kHalfOpen, now + config_.request_timeout);
  counters_.half_open++;
  counters_.half_open_opened++;
  return actions;
}

void ListenBacklog::take_slot(BacklogConnId id, BacklogEventReason reason, TimePoint now,
                              std::vector<BacklogAction>& actions) {
  Entry& e = entries_.at(id);
  enqueue(id, e, BacklogStage::kPending, now + config_.decision_timeout);
  counters_.pending++;
  counters_.high_water = std::max(counters_.high_water, counters_.pending);
  emit(BacklogEventType::kAdded, id, reason);
  actions.push_back({BacklogActionType::kDeliver, id});
}

std::vector<BacklogAction> ListenBacklog::on_request_complete(BacklogConnId id, TimePoint now) {
  now = clamp(now);
  std::vector<BacklogAction> actions;
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.stage != BacklogStage::kHalfOpen) return actions;
  dequeue(it->second);
  counters_.half_open--;
  counters_.half_open_completed++;
  counters_.requests++;
  // A waiting Request is older than this one: it gets the next slot, never this newcomer.
  if (counters_.pending < config_.backlog && waiting_.empty()) {
    take_slot(id, BacklogEventReason::kRequest, now, actions);
  } else if (config_.overflow == BacklogOverflow::kReject) {
    entries_.erase(it);
    counters_.overflow_rejected++;
    actions.push_back({BacklogActionType::kRejectOverflow, id});
  } else {
    enqueue(id, it->second, BacklogStage::kWaiting, now + config_.overflow_timeout);
    counters_.overflow_waiting++;
  }
  return actions;
}

void ListenBacklog::free_slot(std::unordered_map<BacklogConnId, Entry>::iterator it,
                              BacklogEventReason why, TimePoint now,
                              std::vector<BacklogAction>& actions) {
  const BacklogConnId id = it->first;
  dequeue(it->second);
  entries_.erase(it);
  counters_.pending--;
  emit(BacklogEventType::kRemoved, id, why);
  while (!waiting_.empty() && counters_.pending < config_.backlog) {
    const BacklogConnId next = waiting_.begin()->second;
    waiting_.erase(waiting_.begin());
    counters_.overflow_waiting--;
    take_slot(next, BacklogEventReason::kWaited, now, actions);
  }
}

bool ListenBacklog::decide(BacklogConnId id, BacklogEventReason why,
                           std::vector<BacklogAction>& actions) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.stage != BacklogStage::kPending) return false;
  if (why == BacklogEventReason::kAccepted) {
    counters_.accepted++;
  } else {
    counters_.rejected_by_app++;
  }
  free_slot(it, why, latest_, actions);
  return true;
}

bool ListenBacklog::on_accepted(BacklogConnId id, std::vector<BacklogAction>& actions) {
  return decide(id, BacklogEventReason::kAccepted, actions);
}

bool ListenBacklog::on_rejected(BacklogConnId id, std::vector<BacklogAction>& actions) {
  return decide(id, BacklogEventReason::kRejected, actions);
}

std::vector<BacklogAction> ListenBacklog::on_accepted(BacklogConnId id) {
  std::vector<BacklogAction> actions;
  on_accepted(id, actions);
  return actions;
}

std::vector<BacklogAction> ListenBacklog::on_rejected(BacklogConnId id) {
  std::vector<BacklogAction> actions;
  on_rejected(id, actions);
  return actions;
}

std::vector<BacklogAction> ListenBacklog::on_peer_gone(BacklogConnId id) {
  std::vector<BacklogAction> actions;
  auto it = entries_.find(id);
  if (it == entries_.end()) return actions;
  switch (it->second.stage) {
    case BacklogStage::kHalfOpen:
      dequeue(it->second);
      entries_.erase(it);
      counters_.half_open--;
      counters_.half_open_aborted++;
      break;
    case BacklogStage::kPending:
      counters_.pending_aborted++;
      free_slot(it, BacklogEventReason::kAborted, latest_, actions);
      break;
    case BacklogStage::kWaiting:
      dequeue(it->second);
      entries_.erase(it);
      counters_.overflow_waiting--;
      counters_.overflow_dropped++;
      break;
  }
  return actions;
}

std::vector<BacklogAction> ListenBacklog::on_timer(TimePoint now) {
  now = clamp(now);
  std::vector<BacklogAction> actions;
  // Each queue is in deadline order (FIFO, one timeout per queue): stop at the first not due.
  while (!half_open_.empty()) {
    auto it = entries_.find(half_open_.begin()->second);
    if (it->second.deadline > now) break;
    actions.push_back({BacklogActionType::kClose, it->first, BacklogCloseReason::kHalfOpenExpired});
    dequeue(it->second);
    entries_.erase(it);
    counters_.half_open--;
    counters_.half_open_expired++;
  }
  // Waiting before pending: a slot freed by an expiry below must not go to a Request that
  // is itself already past its own deadline.
  while (!waiting_.empty()) {
    auto it = entries_.find(waiting_.begin()->second);
    if (it->second.deadline > now) break;
    actions.push_back({BacklogActionType::kClose, it->first, BacklogCloseReason::kOverflowDropped});
    dequeue(it->second);
    entries_.erase(it);
    counters_.overflow_waiting--;
    counters_.overflow_dropped++;
  }
  while (!pending_.empty()) {
    auto it = entries_.find(pending_.begin()->second);
    if (it->second.deadline > now) break;
    actions.push_back({BacklogActionType::kRejectExpired, it->first});
    counters_.pending_expired++;
    free_slot(it, BacklogEventReason::kExpired, now, actions);
  }
  return actions;
}

std::optional<ListenBacklog::TimePoint> ListenBacklog::next_deadline() const {
  std::optional<TimePoint> next;
  for (const Queue* q : {&half_open_, &pending_, &waiting_}) {
    if (q->empty()) continue;
    const TimePoint d = entries_.at(q->begin()->second).deadline;
    if (!next || d < *next) next = d;
  }
  return next;
}

std::optional<BacklogStage> ListenBacklog::stage_of(BacklogConnId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.stage;
}

std::vector<BacklogConnId> ListenBacklog::ids() const {
  std::vector<BacklogConnId> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(id);
  return out;
}

}  // namespace rdma_interop::cm
