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

}  // namespace

SignalWatch::SignalWatch(std::string program, std::chrono::milliseconds grace)
    : program_(std::move(program)), grace_(grace) {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { run(); });
}

SignalWatch::~SignalWatch() {
  finished();
  if (thread_.joinable()) thread_.join();
}

void SignalWatch::finished() {
  std::lock_guard lock(mutex_);
  finished_ = true;
  cv_.notify_all();
}

void SignalWatch::run() {
  sigset_t set = stop_signals();
  const timespec slice{0, 100'000'000};  // 100 ms: how soon finished() is noticed
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
    }
    int sig = sigtimedwait(&set, nullptr, &slice);
    if (sig > 0) {
      signal_ = sig;
      stop_ = true;
      break;
    }
  }
  std::unique_lock lock(mutex_);
  if (cv_.wait_for(lock, grace_, [this] { return finished_; })) return;
  std::fprintf(stderr, "%s: stopping on signal %d while a connection is in progress\n",
               program_.c_str(), signal_.load());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
}

}  // namespace rdma_interop::tools
