#include "core/runtime/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <system_error>

#include "core/runtime/rendezvous.h"

namespace rdma_interop::runtime {

EventLoop::EventLoop()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wakeup_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!epoll_ || !wakeup_) throw std::system_error(errno, std::generic_category(), "epoll/eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &ev) != 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_ctl(eventfd)");
  }
  std::mutex started_mu;
  std::condition_variable started_cv;
  bool started = false;
  thread_ = std::thread([&] {
    {
      // Notified under the lock: the constructor's locals die as soon as it sees `started`.
      std::lock_guard lock(started_mu);
      thread_id_ = std::this_thread::get_id();
      started = true;
      started_cv.notify_one();
    }
    loop();
  });
  std::unique_lock lock(started_mu);
  started_cv.wait(lock, [&] { return started; });
  gate_->loop = this;
}

EventLoop::~EventLoop() {
  {
    std::lock_guard gate(gate_->mu);
    gate_->loop = nullptr;
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    wake_locked();
  }
  thread_.join();
  // Handlers close their sockets as they go; nothing runs on the loop any more.
  std::unordered_map<Token, Watch> watches;
  std::map<TimerId, Task> timers;
  std::deque<Task> posted;
  {
    std::lock_guard lock(mu_);
    for (auto& [token, w] : watches_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.fd, nullptr);
    watches.swap(watches_);
    timers.swap(timers_);
    posted.swap(posted_);
  }
}

void EventLoop::wake_locked() {
  if (wake_pending_) return;
  wake_pending_ = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wakeup_.get(), &one, sizeof one);
}

void EventLoop::post(Task task) {
  std::lock_guard lock(mu_);
  posted_.push_back(std::move(task));
  // A loop that is awake looks at posted_ before it sleeps again: no eventfd write.
  if (sleeping_) wake_locked();
}

std::function<bool(EventLoop::Task)> EventLoop::executor() {
  return [gate = gate_](Task task) {
    std::lock_guard lock(gate->mu);  // the loop is not destroyed while a task goes in
    if (gate->loop == nullptr) return false;
    gate->loop->post(std::move(task));
    return true;
  };
}

void EventLoop::run(const Task& task) {
  if (in_loop_thread()) {
    task();
    return;
  }
  Rendezvous<bool> done;
  post([&] {
    task();
    done.set(true);
  });
  done.take();
}

Expected<EventLoop::Token, int> EventLoop::watch(int fd, std::uint32_t events,
                                                 std::shared_ptr<IoHandler> handler) {
  // epoll_ctl runs outside the lock (the event thread takes it several times a turn). The
  // token is known before the fd is in epoll, so no event finds it missing.
  Token token = 0;
  {
    std::lock_guard lock(mu_);
    token = next_token_++;
    watches_.emplace(token, Watch{fd, std::move(handler)});
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    std::shared_ptr<IoHandler> dropped;  // released outside the lock
    std::lock_guard lock(mu_);
    if (const auto it = watches_.find(token); it != watches_.end()) {
      dropped = std::move(it->second.handler);
      watches_.erase(it);
    }
    return unexpected(err);
  }
  return token;
}

void EventLoop::modify(Token token, int fd, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::hand_over(Token token, std::uint32_t events, std::shared_ptr<IoHandler> handler) {
  std::shared_ptr<IoHandler> previous;  // released outside the lock: its destructor may call us
  std::lock_guard lock(mu_);
  const auto it = watches_.find(token);
  if (it == watches_.end()) return;
  previous = std::exchange(it->second.handler, std::move(handler));
  modify(token, it->second.fd, events);
}

void EventLoop::unwatch(Token token) {
  std::shared_ptr<IoHandler> handler;  // released outside the lock, as above
  int fd = -1;
  {
    std::lock_guard lock(mu_);
    const auto it = watches_.find(token);
    if (it == watches_.end()) return;
    fd = it->second.fd;
    handler = std::move(it->second.handler);
    watches_.erase(it);
  }
  // Outside the lock: the owner closes the fd only after this returns, and an event epoll
  // still reports for the token finds it gone.
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

EventLoop::TimerId EventLoop::add_timer(TimePoint when, Task task) {
  std::lock_guard lock(mu_);
  const TimerId id{when, next_timer_++};
  timers_.emplace(id, std::move(task));
  // Only a sleeping loop that would wake later than this timer needs telling.
  if (sleeping_ && when < sleeping_until_) wake_locked();
  return id;
}

void EventLoop::cancel_timer(TimerId id) {
  Task task;  // destroyed outside the lock: it may hold the last reference to a handler
  std::lock_guard lock(mu_);
  const auto it = timers_.find(id);
  if (it == timers_.end()) return;
  task = std::move(it->second);
  timers_.erase(it);
}

int EventLoop::next_timeout_ms_locked(TimePoint now) const {
  if (!posted_.empty()) return 0;
  if (timers_.empty()) return -1;
  const auto wait = timers_.begin()->first.first - now;
  if (wait <= Clock::duration::zero()) return 0;
  // Round up: waking a little late is harmless, waking early spins.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

void EventLoop::loop() {
  std::array<epoll_event, 64> events{};
  for (;;) {
    int timeout = 0;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      const TimePoint now = Clock::now();
      timeout = next_timeout_ms_locked(now);
      sleeping_ = true;
      sleeping_until_ = timeout < 0 ? TimePoint::max() : now + std::chrono::milliseconds(timeout);
    }
    const int n =
        ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout);
    {
      std::lock_guard lock(mu_);
      sleeping_ = false;
    }
    for (int i = 0; i < n; ++i) {
      const Token token = events[i].data.u64;
      std::shared_ptr<IoHandler> handler;
      {
        std::lock_guard lock(mu_);
        if (token == 0) {
          std::uint64_t count = 0;
          [[maybe_unused]] const auto r = ::read(wakeup_.get(), &count, sizeof count);
          wake_pending_ = false;
          continue;
        }
        const auto it = watches_.find(token);
        if (it == watches_.end()) continue;  // unwatched since epoll_wait returned
        handler = it->second.handler;
      }
      handler->on_io(events[i].events);
    }
    for (;;) {  // due timers, earliest first
      Task task;
      {
        std::lock_guard lock(mu_);
        if (timers_.empty() || timers_.begin()->first.first > Clock::now()) break;
        task = std::move(timers_.extract(timers_.begin()).mapped());
      }
      task();
    }
    std::deque<Task> tasks;
    {
      std::lock_guard lock(mu_);
      tasks.swap(posted_);
    }
    for (auto& task : tasks) task();
  }
}

}  // namespace rdma_interop::runtime
