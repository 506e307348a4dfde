#include "tools/rdma-storm/storm_runner.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "core/transport/connect_retry.h"
#include "tools/rdma-storm/raw_tcp_try.h"

namespace rdma_interop::storm {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Shared by the client threads and the progress line, nothing else.
struct Progress {
  std::atomic<std::uint64_t> finished{0};
  std::atomic<std::uint64_t> connected{0};
  std::atomic<std::uint64_t> tries{0};
};

// What the provider says about the tries behind a success, where it says it at all.
template <class Info>
std::optional<std::uint32_t> attempts_of(const Info& info) {
  if constexpr (requires { info.attempts; }) {
    return static_cast<std::uint32_t>(info.attempts);
  } else {
    return std::nullopt;
  }
}

// One provider connect (with the provider's retries in RetryMode::kProvider), held for
// config.hold and disconnected. `tries` is how many TCP connections it took, when known.
transport::ConnectOptions connect_options(const StormConfig& config, unsigned retries,
                                          std::uint64_t seed) {
  transport::ConnectOptions options;
  options.policy = config.personality.mpa;
  options.private_data = config.personality.private_data;
  options.timeout = config.try_timeout;
  options.retries = retries;
  options.retry_backoff = config.retry_backoff;
  options.retry_backoff_max = config.retry_backoff_max;
  options.retry_seed = seed;
  return options;
}

TryResult provider_connect(transport::Provider& provider, const StormConfig& config,
                           unsigned retries, std::uint64_t seed,
                           std::optional<std::uint32_t>& tries) {
  const auto options = connect_options(config, retries, seed);
  auto connected = provider.connect(config.target, options);
  if (!connected) {
    tries = std::max<std::uint32_t>(connected.error().attempts, 1);
    return classify(connected.error());
  }
  tries = retries == 0 ? std::optional<std::uint32_t>(1) : attempts_of((*connected)->info());
  if (config.hold.count() > 0) std::this_thread::sleep_for(config.hold);
  auto& connection = **connected;
  if (connection.state() == transport::ConnectionState::kConnected) {
    connection.disconnect(Millis(200));
  }
  return {Outcome::kConnected};
}

class ClientThread {
 public:
  ClientThread(const StormConfig& config, transport::Provider* provider, std::uint64_t quota,
               unsigned index, Clock::time_point stop_at, const std::atomic<bool>* stop,
               Progress& progress)
      : config_(config),
        provider_(provider),
        quota_(quota),
        stop_at_(stop_at),
        stop_(stop),
        progress_(progress),
        backoff_(connect_options(config, config.retries, 0)),
        rng_(config.seed + index) {
    tally_.threads.resize(1);
  }

  void run() {
    while (tally_.threads[0].attempts < quota_ && Clock::now() < stop_at_ && !stopped()) {
      attempt();
    }
  }
  const Tally& tally() const { return tally_; }

 private:
  bool stopped() const { return stop_ != nullptr && stop_->load(std::memory_order_relaxed); }

  // One try in RetryMode::kStorm (or without retries); counted as it ends.
  TryResult one_try() {
    std::optional<std::uint32_t> tries;
    auto r = config_.raw_tcp
                 ? raw_tcp_try(config_.target, config_.try_timeout, config_.hold)
                 : provider_connect(*provider_, config_, 0, 0, tries);
    count_tries(r, 1);
    return r;
  }

  void count_tries(const TryResult& last, std::uint32_t n) {
    // Tries before the last were retryable failures; which ones the provider does not say,
    // so they are counted as the last failure's kind (and marked inexact).
    tally_.tries_by[static_cast<std::size_t>(last.outcome)] += 1;
    if (n > 1) {
      const auto earlier = last.outcome == Outcome::kConnected ? Outcome::kOverflowRejected
                                                               : last.outcome;
      tally_.tries_by[static_cast<std::size_t>(earlier)] += n - 1;
      tally_.tries_exact = false;
    }
    tally_.threads[0].tries += n;
    progress_.tries.fetch_add(n, std::memory_order_relaxed);
  }

  // RetryMode::kProvider: the provider's own retry policy does the whole attempt.
  Outcome provider_attempt(TryResult& last) {
    std::optional<std::uint32_t> tries;
    last = provider_connect(*provider_, config_, config_.retries, rng_(), tries);
    if (!tries) tally_.tries_exact = false;
    count_tries(last, tries.value_or(1));
    if (!worth_retry(last)) return last.outcome;
    return tries.value_or(1) > config_.retries ? Outcome::kGaveUp : last.outcome;
  }

  void attempt() {
    const auto start = Clock::now();
    TryResult last;
    Outcome outcome = Outcome::kOther;
    const bool provider_retries = !config_.raw_tcp && config_.retries > 0 &&
                                  config_.retry_mode == StormConfig::RetryMode::kProvider;
    for (unsigned t = 0; !provider_retries; ++t) {
      last = one_try();
      if (!worth_retry(last)) {
        outcome = last.outcome;
        break;
      }
      if (t >= config_.retries || Clock::now() >= stop_at_ || stopped()) {
        outcome = config_.retries > 0 ? Outcome::kGaveUp : last.outcome;
        break;
      }
      // The providers' own backoff (connect_retry.h), drawn from this thread's generator.
      std::this_thread::sleep_for(transport::retry_delay(backoff_, t + 1, rng_));
    }
    if (provider_retries) outcome = provider_attempt(last);
    const double ms = ms_since(start);
    if (never_reached(last)) ++tally_.unreached;
    ++tally_.outcomes[static_cast<std::size_t>(outcome)];
    ++tally_.threads[0].attempts;
    tally_.all_ms.push_back(ms);
    if (outcome == Outcome::kConnected) {
      ++tally_.threads[0].connected;
      tally_.connected_ms.push_back(ms);
      progress_.connected.fetch_add(1, std::memory_order_relaxed);
    } else if (outcome == Outcome::kOther) {
      ++tally_.other[last.other_name];
    } else if (outcome == Outcome::kGaveUp) {
      ++tally_.gave_up_last[last.outcome == Outcome::kOther
                                ? last.other_name
                                : std::string(outcome_name(last.outcome))];
    }
    progress_.finished.fetch_add(1, std::memory_order_relaxed);
  }

  const StormConfig& config_;
  transport::Provider* provider_;
  const std::uint64_t quota_;
  const Clock::time_point stop_at_;
  const std::atomic<bool>* stop_;
  Progress& progress_;
  const transport::ConnectOptions backoff_;  // retry_backoff and its cap, for retry_delay()
  std::mt19937_64 rng_;
  Tally tally_;
};

}  // namespace

StormResult run_storm(const StormConfig& config, transport::Provider* provider,
                      const std::atomic<bool>* stop) {
  StormResult result;
  result.planned = config.attempts;
  result.retry_mode = config.retries == 0 ? "none"
                      : config.retry_mode == StormConfig::RetryMode::kStorm || config.raw_tcp
                          ? "storm"
                          : "provider";
  const unsigned k = std::max(1u, config.concurrency);
  const auto start = Clock::now();
  const auto stop_at =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(config.duration_limit_s));
  Progress progress;

  std::vector<std::unique_ptr<ClientThread>> clients;
  for (unsigned i = 0; i < k; ++i) {
    // Even shares, the remainder to the first threads: each client asks for the same amount,
    // so their connected counts measure how fairly the listener served them.
    const std::uint64_t quota = config.attempts / k + (i < config.attempts % k ? 1 : 0);
    clients.push_back(
        std::make_unique<ClientThread>(config, provider, quota, i, stop_at, stop, progress));
  }
  std::vector<std::thread> threads;
  for (auto& c : clients) threads.emplace_back([&c] { c->run(); });

  // Progress on stderr while the clients run, one line per interval, none for short runs.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread reporter;
  if (config.progress_interval_s > 0) {
    reporter = std::thread([&] {
      const auto interval = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(config.progress_interval_s));
      std::unique_lock lock(mu);
      while (!cv.wait_for(lock, interval, [&] { return done; })) {
        std::fprintf(stderr,
                     "rdma-storm: %.1f s: %llu/%llu attempts finished, %llu connected, %llu tries\n",
                     ms_since(start) / 1000.0,
                     static_cast<unsigned long long>(progress.finished.load()),
                     static_cast<unsigned long long>(config.attempts),
                     static_cast<unsigned long long>(progress.connected.load()),
                     static_cast<unsigned long long>(progress.tries.load()));
      }
    });
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  if (reporter.joinable()) reporter.join();

  result.elapsed_s = ms_since(start) / 1000.0;
  for (auto& c : clients) result.tally.merge(c->tally());
  result.stopped_by_signal = stop != nullptr && stop->load();
  result.hit_duration_limit =
      !result.stopped_by_signal && result.tally.attempts() < config.attempts;
  return result;
}

}  // namespace rdma_interop::storm
