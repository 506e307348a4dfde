// signal_watch.h - SIGTERM/SIGINT as a flag a tool's main loop checks between bounded waits.
//
// The signals are blocked in the constructing thread, so every thread created afterwards
// (the provider's event thread included) inherits the mask and only the watcher's own
// thread takes them (sigtimedwait). A stop request sets stop_requested(); if the main
// thread has not called finished() within `grace` (it is inside a provider call that waits
// longer, e.g. an accept waiting for an RTR), the watcher flushes stdout and ends the
// process with status 0: a requested stop is never held up by a stalled peer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace rdma_interop::tools {

class SignalWatch {
 public:
  // `program` names the tool in the message printed when the grace runs out.
  SignalWatch(std::string program, std::chrono::milliseconds grace);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  const std::atomic<bool>& stop_requested() const { return stop_; }
  int signal_number() const { return signal_.load(); }
  // The main thread has stopped cleanly; no forced exit.
  void finished();

 private:
  void run();

  std::string program_;
  std::chrono::milliseconds grace_;
  std::atomic<bool> stop_{false};
  std::atomic<int> signal_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace rdma_interop::tools
