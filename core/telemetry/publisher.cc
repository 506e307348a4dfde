#include "core/telemetry/publisher.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <random>

#include "core/telemetry/run_dir.h"

namespace rdma_interop::telemetry {
namespace {

std::string own_process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "unknown" : name;
}

// A token tells apart several publishers in one process (each provider owns one) and a
// pid reused after a crash whose file was not yet cleaned.
std::string file_name_for(pid_t pid) {
  std::random_device random;
  char token[9];
  std::snprintf(token, sizeof token, "%08x", static_cast<unsigned>(random()));
  return std::to_string(pid) + "-" + token + ".json";
}

Publisher::Options completed(Publisher::Options o) {
  if (o.pid == 0) o.pid = ::getpid();
  if (o.process_name.empty()) o.process_name = own_process_name();
  if (!o.clock) o.clock = Publisher::system_time;
  return o;
}

}  // namespace

Publisher::Timestamps Publisher::system_time() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  Timestamps t;
  t.monotonic_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  t.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return t;
}

Publisher::Publisher(Options options)
    : options_(completed(std::move(options))),
      file_(options_.run_dir / file_name_for(options_.pid)),
      file_name_(file_.filename().string()) {}

Publisher::Publisher() : Publisher([] {
  Options o;
  o.run_dir = run_dir_from_environment();
  return o;
}()) {}

Publisher::~Publisher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (dir_ready_ && !disabled_) ::unlink(file_.c_str());
}

Publisher::Id Publisher::register_listener(SnapshotFn snapshot) {
  std::lock_guard lock(mu_);
  const Id id = next_id_++;
  listeners_.emplace(id, std::move(snapshot));
  start_locked();
  return id;
}

Publisher::Id Publisher::register_connections(ConnectionsFn snapshots) {
  std::lock_guard lock(mu_);
  const Id id = next_id_++;
  connections_.emplace(id, std::move(snapshots));
  start_locked();
  return id;
}

void Publisher::start_locked() {
  if (!disabled_ && !dir_ready_) {
    if (auto e = ensure_run_dir(options_.run_dir)) {
      disable_locked(*e);
    } else {
      dir_ready_ = true;
    }
  }
  publish_locked();
  if (options_.own_thread && !disabled_ && !thread_.joinable()) {
    thread_ = std::thread([this] { run(); });
  }
}

void Publisher::poll() {
  std::lock_guard lock(mu_);
  publish_locked();
}

void Publisher::unregister(Id id) {
  std::lock_guard lock(mu_);
  if (listeners_.erase(id) + connections_.erase(id) == 0) return;
  publish_locked();
}

bool Publisher::enabled() const {
  std::lock_guard lock(mu_);
  return !disabled_;
}

std::uint64_t Publisher::writes() const {
  std::lock_guard lock(mu_);
  return sequence_;
}

void Publisher::disable_locked(const std::string& why) {
  disabled_ = true;
  std::fprintf(stderr, "rdma-interop: telemetry off (backlog-stat will not see this process): %s\n",
               why.c_str());
}

void Publisher::publish_locked() {
  if (disabled_ || !dir_ready_) return;
  std::pair<std::vector<ListenerSnapshot>, std::vector<ConnectionSnapshot>> now;
  now.first.reserve(listeners_.size());
  for (const auto& [id, fn] : listeners_) now.first.push_back(fn());
  for (const auto& [id, fn] : connections_) {
    auto some = fn();
    now.second.insert(now.second.end(), std::make_move_iterator(some.begin()),
                      std::make_move_iterator(some.end()));
  }
  if (last_ && *last_ == now) return;
  ProcessSnapshot s;
  s.pid = options_.pid;
  s.process = options_.process_name;
  s.sequence = sequence_ + 1;
  const Timestamps taken = options_.clock();
  s.monotonic_ns = taken.monotonic_ns;
  s.wall_ms = taken.wall_ms;
  s.listeners = now.first;
  s.connections = now.second;
  if (auto e = write_atomically(options_.run_dir, file_name_, to_json_text(s))) {
    disable_locked(*e);
    ::unlink(file_.c_str());  // a stale file would show wrong figures
    return;
  }
  sequence_ = s.sequence;
  last_ = std::move(now);
}

void Publisher::run() {
  std::unique_lock lock(mu_);
  while (!stopping_ && !disabled_) {
    cv_.wait_for(lock, options_.interval, [this] { return stopping_; });
    if (stopping_) break;
    publish_locked();
  }
}

PublisherRegistration::PublisherRegistration(std::shared_ptr<Publisher> publisher,
                                             Publisher::SnapshotFn snapshot)
    : publisher_(std::move(publisher)) {
  if (publisher_) id_ = publisher_->register_listener(std::move(snapshot));
}

PublisherRegistration::PublisherRegistration(std::shared_ptr<Publisher> publisher,
                                             Publisher::ConnectionsFn snapshots)
    : publisher_(std::move(publisher)) {
  if (publisher_) id_ = publisher_->register_connections(std::move(snapshots));
}

PublisherRegistration::PublisherRegistration(PublisherRegistration&& other) noexcept
    : publisher_(std::move(other.publisher_)), id_(other.id_) {
  other.id_ = 0;
}

PublisherRegistration& PublisherRegistration::operator=(PublisherRegistration&& other) noexcept {
  if (this != &other) {
    reset();
    publisher_ = std::move(other.publisher_);
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

void PublisherRegistration::reset() {
  if (publisher_) publisher_->unregister(id_);
  publisher_.reset();
  id_ = 0;
}

}  // namespace rdma_interop::telemetry
