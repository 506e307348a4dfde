// signal_watch.h - SIGTERM/SIGINT as a flag a tool's main loop checks between bounded waits.
//
// Construct it before any other thread exists (before the provider is opened: its event
// thread would otherwise be born with the signals unblocked, take one, and the process would
// die with status 130 or 143 and print nothing). The signals are blocked in the constructing
// thread, so every thread created afterwards inherits the mask and only the watcher's own
// thread takes them (sigtimedwait).
//
// A stop request sets stop_requested(); the tool then stops, prints what it has and exits
// with its documented status (exit_status.h). If the main thread has not called finished()
// within `grace` (it is inside a provider call that waits longer, e.g. a connect or an
// accept waiting for an RTR), or a second signal comes, the watcher runs the forced-exit
// report (set_forced_exit: the tool's partial result, printed from the watcher's thread),
// flushes stdout and ends the process with the forced-exit status: a requested stop is never
// held up by a stalled peer, and never loses what was found.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace rdma_interop::tools {

class SignalWatch {
 public:
  // `program` names the tool in the message printed on a forced exit; `forced_status` is the
  // exit status then (servers: 0, their normal end; bounded runs: 1, cut short).
  SignalWatch(std::string program, std::chrono::milliseconds grace, int forced_status = 0);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  const std::atomic<bool>& stop_requested() const { return stop_; }
  int signal_number() const { return signal_.load(); }
  // What to print before a forced exit, run on the watcher's thread with the signal's number;
  // it must take whatever lock guards what it prints. Replaces any earlier one.
  void set_forced_exit(std::function<void(int)> report);
  void set_grace(std::chrono::milliseconds grace);
  // The main thread has stopped cleanly; no forced exit.
  void finished();

 private:
  void run();

  std::string program_;
  std::atomic<bool> stop_{false};
  std::atomic<int> signal_{0};
  std::mutex mutex_;  // guards everything below
  std::condition_variable cv_;
  std::chrono::milliseconds grace_;
  int forced_status_;
  std::function<void(int)> report_;
  bool finished_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace rdma_interop::tools
