// publisher.h - publishes one process's listener and connection snapshots to the run
// directory (run_dir.h) for backlog-stat, owned by a provider or a message endpoint: no
// global state, one file per publisher (a process with one provider has one file).
//
// Listeners register a function that returns their current snapshot; a message endpoint
// registers one that returns a snapshot per connection (connection_snapshot.h). Both kinds
// share one id space, and unregister() takes either. The publisher writes the file at once on
// every register and unregister, and otherwise polls the functions (poll()) every `interval`
// (100 ms) from its own thread and rewrites the file only when a snapshot changed: at most
// ten writes a second, and nothing while the node is idle.
//
// Time is an input: the file's timestamps come from Options::clock, and with
// Options::own_thread off nothing polls but the owner's poll() calls, so a test steps the
// intervals itself instead of sleeping through them.
//
// Nothing touches the file system until the first register. If the run directory cannot
// be created or written, telemetry is off for this publisher after one warning on stderr;
// registering still succeeds (telemetry never fails a listen()).
//
// Threading: every member is thread-safe. The snapshot functions (and the clock) are called
// with the publisher's lock held, from the thread that registers, unregisters or polls, or
// the publisher's own thread, never after their unregister returned: a function may refer
// to an object that unregisters in its destructor. They must not call back into the
// publisher, and an object whose function takes its own lock must not register, unregister
// or poll while holding that lock (the publisher's thread may be inside the function,
// waiting for it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/telemetry/listener_snapshot.h"

namespace rdma_interop::telemetry {

class Publisher {
 public:
  // When a snapshot was taken, as the file says it (ProcessSnapshot's two clocks).
  struct Timestamps {
    std::int64_t monotonic_ns = 0;  // CLOCK_MONOTONIC
    std::int64_t wall_ms = 0;       // Unix time
  };
  using Clock = std::function<Timestamps()>;
  // The system's clocks: what a Publisher uses unless told otherwise.
  static Timestamps system_time();

  struct Options {
    std::filesystem::path run_dir;              // where the file goes
    std::chrono::milliseconds interval{100};    // how often the own thread polls
    pid_t pid = 0;                              // 0: getpid()
    std::string process_name;                   // empty: /proc/self/comm
    // Who calls poll(): a thread of the publisher's own every `interval` (true), or only the
    // owner (false: a test stepping the intervals, with no thread and no sleep).
    bool own_thread = true;
    Clock clock;                                // empty: system_time()
  };
  using SnapshotFn = std::function<ListenerSnapshot()>;
  // Every connection of one message endpoint, in the order the file should list them.
  using ConnectionsFn = std::function<std::vector<ConnectionSnapshot>()>;
  using Id = std::uint64_t;

  explicit Publisher(Options options);
  // The run directory from the environment (run_dir_from_environment()), default options.
  Publisher();
  // Stops the thread and removes the file.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  Id register_listener(SnapshotFn snapshot);
  Id register_connections(ConnectionsFn snapshots);
  // Unregisters a listener or a connections function. Unknown or already unregistered ids
  // are ignored.
  void unregister(Id id);
  void unregister_listener(Id id) { unregister(id); }

  // One interval's work: takes every snapshot and rewrites the file if any changed since the
  // last write (at most one write a call). The own thread calls it every `interval`.
  void poll();

  // False once the run directory proved unusable (the warning has been printed).
  bool enabled() const;
  // The file this publisher writes (it exists only while at least one write succeeded).
  const std::filesystem::path& file() const { return file_; }
  // How many times the file was written (its "sequence" is this number).
  std::uint64_t writes() const;

 private:
  void start_locked();    // the run directory and the thread, on the first register
  void publish_locked();  // takes the snapshots and writes them
  void run();             // the own thread: poll() every interval
  void disable_locked(const std::string& why);

  const Options options_;
  const std::filesystem::path file_;
  const std::string file_name_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // By id: the file lists them in registration order.
  std::map<Id, SnapshotFn> listeners_;
  std::map<Id, ConnectionsFn> connections_;
  Id next_id_ = 1;
  // What the file holds now.
  std::optional<std::pair<std::vector<ListenerSnapshot>, std::vector<ConnectionSnapshot>>> last_;
  std::uint64_t sequence_ = 0;
  bool dir_ready_ = false;
  bool disabled_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

// Keeps one listener (or one endpoint's connections) registered for as long as it lives.
// Holds the publisher alive, so a listener may outlive the provider that created it. A null
// publisher registers nothing.
class PublisherRegistration {
 public:
  PublisherRegistration() = default;
  PublisherRegistration(std::shared_ptr<Publisher> publisher, Publisher::SnapshotFn snapshot);
  PublisherRegistration(std::shared_ptr<Publisher> publisher, Publisher::ConnectionsFn snapshots);
  ~PublisherRegistration() { reset(); }
  PublisherRegistration(PublisherRegistration&& other) noexcept;
  PublisherRegistration& operator=(PublisherRegistration&& other) noexcept;
  PublisherRegistration(const PublisherRegistration&) = delete;
  PublisherRegistration& operator=(const PublisherRegistration&) = delete;

  void reset();  // unregisters now

 private:
  std::shared_ptr<Publisher> publisher_;
  Publisher::Id id_ = 0;
};

}  // namespace rdma_interop::telemetry
