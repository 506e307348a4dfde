// event_loop.h - the tcp provider's one event thread: epoll for sockets, an eventfd for
// work from application threads, and timers.
//
// Sockets and protocol engines are touched only on this thread. Application threads hand
// it work with post() (fire and forget) or run() (wait for the result); they never block
// the loop, and the loop never blocks on them. Handlers are held by shared_ptr while
// registered, so a handler may unwatch itself (or another) from inside a callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/transport/tcp/socket_util.h"

namespace rdma_interop::transport::tcp {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

class IoHandler {
 public:
  virtual ~IoHandler() = default;
  // EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP bits for the watched fd.
  virtual void on_io(std::uint32_t events) = 0;
};

class EventLoop {
 public:
  using Task = std::function<void()>;
  using Token = std::uint64_t;
  using TimerId = std::pair<TimePoint, std::uint64_t>;

  // Starts the event thread. Throws std::system_error if epoll or eventfd cannot be made.
  EventLoop();
  // Stops and joins the thread, then drops every handler still registered (closing their
  // sockets). Must not run on the event thread.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Any thread. Tasks run on the event thread in the order posted.
  void post(Task task);
  // Any thread: runs `task` on the event thread and waits for it (inline on the loop).
  void run(const Task& task);
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

  // Event thread only.
  Token watch(int fd, std::uint32_t events, std::shared_ptr<IoHandler> handler);
  void rewatch(Token token, std::uint32_t events);
  void unwatch(Token token);  // removes the fd from epoll before its owner closes it
  TimerId add_timer(TimePoint when, Task task);
  void cancel_timer(TimerId id);

 private:
  struct Watch {
    int fd;
    std::shared_ptr<IoHandler> handler;
  };
  void loop();
  void run_posted();
  void run_due_timers();
  int next_timeout_ms() const;

  Fd epoll_;
  Fd wakeup_;  // eventfd
  std::mutex mu_;
  std::deque<Task> posted_;  // guarded by mu_
  bool stop_ = false;        // event thread only
  std::unordered_map<Token, Watch> watches_;
  std::map<TimerId, Task> timers_;
  Token next_token_ = 1;  // 0 is the eventfd
  std::uint64_t next_timer_ = 1;
  std::thread::id thread_id_;
  std::thread thread_;
};

// A value handed from the event thread to one waiting application thread.
template <class T>
class Rendezvous {
 public:
  void set(T value) {
    std::lock_guard lock(mu_);
    if (value_) return;  // first answer wins
    value_.emplace(std::move(value));
    cv_.notify_all();
  }
  bool ready() const {
    std::lock_guard lock(mu_);
    return value_.has_value();
  }
  T take() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return value_.has_value(); });
    return std::move(*value_);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

}  // namespace rdma_interop::transport::tcp
