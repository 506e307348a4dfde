#include "tools/rdma-mesh/mesh_sender.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "tools/rdma-mesh/token_bucket.h"

namespace rdma_interop::mesh {
namespace {

using messaging::SendStatus;
constexpr auto kRelaxed = std::memory_order_relaxed;
// The longest the sender sleeps in one go, so a stop request is seen quickly.
constexpr auto kMaxSleep = std::chrono::milliseconds(20);
// Tokens a paced peer may save up: 100 ms of its rate, at least one message. Enough to ride
// out a descheduled sender on a loaded machine (the rate is what the tests compare against),
// small next to a stall: a refused message uses its token, so a stalled peer never saves up.
constexpr double kBurstSeconds = 0.1;

}  // namespace

MeshSender::MeshSender(const MeshConfig& config, std::vector<PeerTally*> tallies)
    : config_(config),
      tag_(config.mode == TrafficMode::kRequestReply ? MessageTag::kRequest : MessageTag::kStream),
      next_sequence_(tallies.size(), 0),
      payload_(make_payload(tag_, 0, config.size)),
      blocked_(tallies.size(), false) {
  for (auto* t : tallies) targets_.push_back(Target{0, t});
}

void MeshSender::notify_ready(std::size_t peer) {
  {
    std::lock_guard lock(mu_);
    if (peer < blocked_.size()) blocked_[peer] = false;
    ++ready_events_;
  }
  ready_cv_.notify_all();
}

bool MeshSender::usable(std::size_t i) const {
  return !targets_[i].tally->gone.load(kRelaxed);
}

SendStatus MeshSender::send_next(std::size_t i) {
  auto& tally = *targets_[i].tally;
  stamp_sequence(payload_, next_sequence_[i]);
  const SendStatus s = endpoint_->send(targets_[i].id, payload_);
  switch (s) {
    case SendStatus::kOk:
      ++next_sequence_[i];  // a refused message is not sent: its number goes to the next one
      tally.sent[tag_index(tag_)].fetch_add(1, kRelaxed);
      break;
    case SendStatus::kTryAgain:
      tally.refused.fetch_add(1, kRelaxed);
      break;
    default:
      tally.send_errors.fetch_add(1, kRelaxed);
      // kPeerFailed / kUnknownPeer: nothing more will go there (on_failure or on_close may
      // come later).
      if (s == SendStatus::kPeerFailed || s == SendStatus::kUnknownPeer) {
        tally.gone.store(true, kRelaxed);
      }
      break;
  }
  return s;
}

void MeshSender::run(messaging::MessageEndpoint& endpoint,
                     const std::vector<messaging::PeerId>& ids, Clock::time_point deadline,
                     const std::atomic<bool>& stop) {
  if (targets_.empty() || ids.size() != targets_.size()) return;
  endpoint_ = &endpoint;
  for (std::size_t i = 0; i < ids.size(); ++i) targets_[i].id = ids[i];
  if (config_.shared_queue) {
    run_shared(deadline, stop);
  } else if (config_.rate > 0) {
    run_paced(deadline, stop);
  } else {
    run_unthrottled(deadline, stop);
  }
}

void MeshSender::run_paced(Clock::time_point deadline, const std::atomic<bool>& stop) {
  const auto start = Clock::now();
  std::vector<TokenBucket> buckets;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    buckets.emplace_back(config_.rate, config_.rate * kBurstSeconds, start);
  }
  std::size_t first = 0;
  while (!stop.load(kRelaxed)) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    auto wake = std::min(deadline, now + kMaxSleep);
    // Round robin, starting one further each pass, so no peer is always served first.
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const std::size_t i = (first + k) % targets_.size();
      if (!usable(i)) continue;
      auto& bucket = buckets[i];
      bucket.refill(now);
      while (bucket.take()) {
        if (send_next(i) != SendStatus::kOk) break;  // skip this peer until its next token
      }
      wake = std::min(wake, bucket.next_due());
    }
    first = (first + 1) % targets_.size();
    std::this_thread::sleep_until(wake);
  }
}

void MeshSender::run_unthrottled(Clock::time_point deadline, const std::atomic<bool>& stop) {
  std::size_t first = 0;
  while (!stop.load(kRelaxed) && Clock::now() < deadline) {
    bool progress = false;
    bool any_usable = false;
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const std::size_t i = (first + k) % targets_.size();
      if (!usable(i)) continue;
      any_usable = true;
      {
        std::lock_guard lock(mu_);
        if (blocked_[i]) continue;
      }
      if (send_next(i) == SendStatus::kOk) {
        progress = true;
      } else {
        std::lock_guard lock(mu_);
        blocked_[i] = true;
      }
    }
    first = (first + 1) % targets_.size();
    if (!any_usable) break;  // every peer is gone: nothing left to do
    if (progress) continue;
    // Every usable peer refused: wait for one to have room. A wake-up that raced its refusal
    // is caught by the timeout, which unblocks everyone for another try.
    std::unique_lock lock(mu_);
    const auto seen = ready_events_;
    if (!ready_cv_.wait_until(lock, std::min(deadline, Clock::now() + kMaxSleep),
                              [&] { return ready_events_ != seen || stop.load(kRelaxed); })) {
      std::fill(blocked_.begin(), blocked_.end(), false);
    }
  }
}

void MeshSender::run_shared(Clock::time_point deadline, const std::atomic<bool>& stop) {
  const double rate = config_.rate * static_cast<double>(targets_.size());
  std::optional<TokenBucket> bucket;
  if (rate > 0) bucket.emplace(rate, rate * kBurstSeconds, Clock::now());
  std::size_t head = 0;
  while (!stop.load(kRelaxed)) {
    auto now = Clock::now();
    if (now >= deadline) break;
    if (bucket) {
      bucket->refill(now);
      if (!bucket->take()) {
        std::this_thread::sleep_until(std::min({deadline, now + kMaxSleep, bucket->next_due()}));
        continue;
      }
    }
    // The head of the one queue: the next peer in turn that is still there.
    std::size_t k = 0;
    while (k < targets_.size() && !usable(head)) {
      head = (head + 1) % targets_.size();
      ++k;
    }
    if (k == targets_.size()) break;  // every peer is gone
    // Head-of-line blocking: nothing behind this message moves until it is taken.
    if (send_next(head) == SendStatus::kTryAgain) {
      const auto blocked_since = Clock::now();
      do {
        endpoint_->wait_ready(targets_[head].id, kMaxSleep);
      } while (!stop.load(kRelaxed) && Clock::now() < deadline && usable(head) &&
               send_next(head) == SendStatus::kTryAgain);
      targets_[head].tally->head_blocked_us.fetch_add(
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - blocked_since)
                  .count()),
          kRelaxed);
    }
    head = (head + 1) % targets_.size();
  }
}

}  // namespace rdma_interop::mesh
