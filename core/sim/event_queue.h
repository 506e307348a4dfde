// event_queue.h - the simulator's clock: a discrete-event queue in virtual time.
//
// Events run in time order, and events due at the same time in the order they were
// scheduled, so a run is a pure function of its inputs (and the seed that made them). Time
// starts at zero and only moves when an event runs; nothing here reads a real clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

namespace rdma_interop::sim {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;  // virtual: TimePoint{} is the start of the run
using Nanos = std::chrono::nanoseconds;

class EventQueue {
 public:
  using Action = std::function<void()>;

  TimePoint now() const { return now_; }
  // Runs `action` at `when` (at now() if `when` is past). Returns an id for cancel().
  std::uint64_t at(TimePoint when, Action action);
  std::uint64_t after(Nanos delay, Action action) { return at(now_ + delay, std::move(action)); }
  // Forgets a scheduled event; false if it ran or was cancelled already.
  bool cancel(std::uint64_t id);
  // Runs the next event; false when there is none.
  bool run_next();
  // Runs every event due at or before `until`, then moves the clock to `until`.
  void run_until(TimePoint until);
  std::size_t pending() const { return events_.size(); }
  std::uint64_t executed() const { return executed_; }

 private:
  using Key = std::pair<TimePoint, std::uint64_t>;  // time, then scheduling order
  TimePoint now_{};
  std::uint64_t next_id_ = 1;
  std::uint64_t executed_ = 0;
  std::map<Key, Action> events_;
  std::map<std::uint64_t, TimePoint> when_;  // id -> time, for cancel()
};

}  // namespace rdma_interop::sim
