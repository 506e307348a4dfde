#include "core/transport/tcp/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>

namespace rdma_interop::transport::tcp {

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
}

EventLoop::~EventLoop() {
  post([this] { stop_ = true; });
  thread_.join();
  // Handlers close their sockets as they go; nothing runs on the loop any more.
  for (auto& [token, w] : watches_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.fd, nullptr);
  watches_.clear();
  timers_.clear();
  std::lock_guard lock(mu_);
  posted_.clear();
}

void EventLoop::post(Task task) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    wake = posted_.empty();
    posted_.push_back(std::move(task));
  }
  if (wake) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wakeup_.get(), &one, sizeof one);
  }
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

EventLoop::Token EventLoop::watch(int fd, std::uint32_t events,
                                  std::shared_ptr<IoHandler> handler) {
  const Token token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_ctl(ADD)");
  }
  watches_.emplace(token, Watch{fd, std::move(handler)});
  return token;
}

void EventLoop::rewatch(Token token, std::uint32_t events) {
  const auto it = watches_.find(token);
  if (it == watches_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, it->second.fd, &ev);
}

void EventLoop::unwatch(Token token) {
  const auto it = watches_.find(token);
  if (it == watches_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  // The handler may be the caller: keep it alive until the current dispatch ends.
  post([keep = std::move(it->second.handler)] {});
  watches_.erase(it);
}

EventLoop::TimerId EventLoop::add_timer(TimePoint when, Task task) {
  const TimerId id{when, next_timer_++};
  timers_.emplace(id, std::move(task));
  return id;
}

void EventLoop::cancel_timer(TimerId id) { timers_.erase(id); }

int EventLoop::next_timeout_ms() const {
  if (timers_.empty()) return -1;
  const auto wait = timers_.begin()->first.first - Clock::now();
  if (wait <= Clock::duration::zero()) return 0;
  // Round up: waking a little late is harmless, waking early spins.
  return static_cast<int>(
      std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

void EventLoop::run_posted() {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto n = ::read(wakeup_.get(), &count, sizeof count);
  std::deque<Task> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

void EventLoop::run_due_timers() {
  const TimePoint now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto node = timers_.extract(timers_.begin());
    node.mapped()();
  }
}

void EventLoop::loop() {
  std::array<epoll_event, 64> events{};
  while (!stop_) {
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                               next_timeout_ms());
    for (int i = 0; i < n; ++i) {
      const Token token = events[i].data.u64;
      if (token == 0) {
        run_posted();
        continue;
      }
      const auto it = watches_.find(token);
      if (it == watches_.end()) continue;  // unwatched earlier in this batch
      const auto handler = it->second.handler;
      handler->on_io(events[i].events);
    }
    run_due_timers();
  }
}

}  // namespace rdma_interop::transport::tcp
