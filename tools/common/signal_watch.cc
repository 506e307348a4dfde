#include "tools/common/signal_watch.h"

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <ctime>

namespace rdma_interop::tools {
namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

constexpr timespec kSlice{0, 100'000'000};  // 100 ms: how soon finished() is noticed

}  // namespace

SignalWatch::SignalWatch(std::string program, std::chrono::milliseconds grace, int forced_status)
    : program_(std::move(program)), grace_(grace), forced_status_(forced_status) {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { run(); });
}

SignalWatch::~SignalWatch() {
  finished();
  if (thread_.joinable()) thread_.join();
}

void SignalWatch::set_forced_exit(std::function<void(int)> report) {
  std::lock_guard lock(mutex_);
  report_ = std::move(report);
}

void SignalWatch::set_grace(std::chrono::milliseconds grace) {
  std::lock_guard lock(mutex_);
  grace_ = grace;
}

void SignalWatch::finished() {
  std::lock_guard lock(mutex_);
  finished_ = true;
  cv_.notify_all();
}

void SignalWatch::run() {
  sigset_t set = stop_signals();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
    }
    const int sig = sigtimedwait(&set, nullptr, &kSlice);
    if (sig > 0) {
      signal_ = sig;
      stop_ = true;
      break;
    }
  }
  // The grace, in slices: a second signal ends it at once (an operator pressing Ctrl-C again).
  std::unique_lock lock(mutex_);
  const auto until = std::chrono::steady_clock::now() + grace_;
  while (!finished_ && std::chrono::steady_clock::now() < until) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return finished_; })) break;
    lock.unlock();
    const timespec none{0, 0};
    const int again = sigtimedwait(&set, nullptr, &none);
    lock.lock();
    if (again > 0) break;
  }
  if (finished_) return;
  // The report runs without mutex_: it takes the tool's own lock, which the main thread may
  // hold while it calls finished(). If the main thread finished meanwhile, it exits itself.
  const auto report = report_;
  lock.unlock();
  std::fprintf(stderr, "%s: stopping on signal %d while a connection is in progress\n",
               program_.c_str(), signal_.load());
  if (report) report(signal_.load());
  lock.lock();
  if (finished_) return;
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(forced_status_);
}

}  // namespace rdma_interop::tools
