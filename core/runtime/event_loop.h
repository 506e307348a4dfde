// event_loop.h - the runtime's event thread, shared by the providers: epoll for sockets and
// other file descriptors, timers, and tasks handed over from other threads.
//
// What the event thread is for (provider.h has the whole threading contract): it does the
// work nobody else is waiting to do. Listeners, timers, a transmit the socket could not take
// at once (EPOLLOUT), connections nobody is polling. A thread that posts a work request sends
// on the spot and a thread that waits for a completion receives itself; only when no
// application thread is at hand does the event thread step in.
//
// Every member is thread-safe. Handlers are held by shared_ptr while watched and are called
// without the loop's lock, so a handler may watch, unwatch (itself included), add or cancel
// timers from inside a callback, and so may any other thread; a handler's own lock must not
// be held around a call that waits for the loop (run()). An event already taken from epoll
// for a token unwatched before the loop looks the token up is not delivered; one unwatched
// from another thread just after that may still be, so a handler tolerates a late event. Tasks and
// timers run on the event thread, tasks in the order posted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/runtime/socket_util.h"
#include "core/util/expected.h"

namespace rdma_interop::runtime {

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

  // Runs `task` on the event thread. From the event thread itself it runs after the
  // current callback returns, without a wakeup.
  void post(Task task);
  // Runs `task` on the event thread and waits for it (inline when called on the loop).
  void run(const Task& task);
  // post() for holders that may outlive the loop (a shared completion queue's executor,
  // completion_queue.h): once the loop is being destroyed it answers false and drops the task.
  std::function<bool(Task)> executor();
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

  // Watches `fd` for `events`; the errno of epoll_ctl when the kernel refuses (EMFILE,
  // ENOMEM...), so the caller fails one connection, never the process.
  Expected<Token, int> watch(int fd, std::uint32_t events, std::shared_ptr<IoHandler> handler);
  // Changes what a watched fd is watched for: one epoll_ctl(MOD). The caller guarantees
  // the token is still watched (owners call it under the lock they unwatch with).
  void modify(Token token, int fd, std::uint32_t events);
  // The watched fd moves to a new owner without leaving epoll (MOD, never DEL + ADD).
  void hand_over(Token token, std::uint32_t events, std::shared_ptr<IoHandler> handler);
  // Removes the fd from epoll before its owner closes it.
  void unwatch(Token token);
  TimerId add_timer(TimePoint when, Task task);
  void cancel_timer(TimerId id);

 private:
  struct Watch {
    int fd;
    std::shared_ptr<IoHandler> handler;
  };
  void loop();
  void wake_locked();
  int next_timeout_ms_locked(TimePoint now) const;

  // What executor() holds: the loop while it lives, null from the start of its destruction.
  struct Gate {
    std::mutex mu;
    EventLoop* loop = nullptr;
  };
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  Fd epoll_;
  Fd wakeup_;      // eventfd: tasks and earlier timers from other threads
  std::mutex mu_;  // guards everything below; never held while a task, timer or handler runs
  std::deque<Task> posted_;
  std::unordered_map<Token, Watch> watches_;
  std::map<TimerId, Task> timers_;
  // The event thread is in epoll_wait until sleeping_until_ (max(): no timer) and must be
  // woken for new work; while awake it looks at posted_ and timers_ before it sleeps.
  bool sleeping_ = false;
  TimePoint sleeping_until_ = TimePoint::max();
  bool wake_pending_ = false;  // an eventfd write the loop has not read yet
  bool stop_ = false;
  Token next_token_ = 1;  // 0 is the eventfd
  std::uint64_t next_timer_ = 1;
  std::thread::id thread_id_;
  std::thread thread_;
};

}  // namespace rdma_interop::runtime
