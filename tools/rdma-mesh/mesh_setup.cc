#include "tools/rdma-mesh/mesh_setup.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "core/credit/credit_params.h"
#include "core/transport/connect_retry.h"
#include "tools/rdma-mesh/mesh_caller.h"

namespace rdma_interop::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Millis;

// How long one connect attempt may take, and the retry backoff (full jitter).
constexpr Millis kAttemptTimeout{5000};
constexpr Millis kBackoff{50};
constexpr Millis kBackoffMax{500};
// The accept loop's wait slice: how soon it sees the deadline or a stop request.
constexpr Millis kAcceptSlice{100};

std::vector<std::uint8_t> bytes_of(std::string_view s) {
  return {s.begin(), s.end()};
}

Millis remaining(Clock::time_point deadline) {
  return std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
}

}  // namespace

Expected<std::vector<messaging::PeerId>, std::string> join_mesh(
    messaging::MessageEndpoint& endpoint, transport::Provider& provider,
    transport::Listener& listener, const MeshConfig& config, Clock::time_point deadline,
    const std::atomic<bool>& stop, const ConnectedFn& on_connected, const NoticeFn& notice) {
  const std::size_t n = config.peers.size();
  std::vector<std::optional<messaging::PeerId>> ids(n);
  std::vector<std::string> errors(n);
  std::mutex mu;  // ids, errors, and the callbacks' output order

  // Every later-named peer at once, one thread each: a peer that starts late delays only its
  // own connection. jthreads, declared after what they use: if anything below throws, they
  // are joined on the way out instead of ending the process (std::terminate).
  std::vector<std::jthread> connectors;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& peer = config.peers[i];
    if (!(config.name < peer.name)) continue;
    connectors.emplace_back([&, i] {
      // One attempt at a time, each within what is left of the setup time, and the retry
      // policy's wait between them (connect_retry.h), so setup ends at its deadline and a
      // signal is seen between attempts: the provider's own retries know neither.
      transport::ConnectOptions policy;
      policy.retries = std::numeric_limits<std::uint32_t>::max();
      policy.retry_backoff = kBackoff;
      policy.retry_backoff_max = kBackoffMax;
      transport::RetrySchedule schedule(policy);
      transport::ConnectOptions options;
      options.private_data = bytes_of(config.name);
      std::optional<messaging::PeerId> connected;
      transport::ConnectError last;
      for (std::uint32_t attempts = 1;; ++attempts) {
        options.timeout = std::min(kAttemptTimeout, remaining(deadline));
        auto result = endpoint.connect(provider, peer.uri, options, peer.name);
        if (result) {
          connected = *result;
          break;
        }
        last = result.error();
        last.attempts = attempts;
        const auto wait = schedule.after_failure(last, attempts);
        if (!wait) break;
        const auto resume = Clock::now() + *wait;
        while (Clock::now() < std::min(resume, deadline) && !stop.load()) {
          std::this_thread::sleep_for(std::min(kAcceptSlice, remaining(resume)));
        }
        if (Clock::now() >= deadline || stop.load()) break;
      }
      std::lock_guard lock(mu);
      if (connected) {
        ids[i] = *connected;
        on_connected(i, *connected, "connect");
      } else {
        errors[i] = "connect to " + peer.uri.to_string() + " failed after " +
                    std::to_string(last.attempts) + " attempts: " + transport::to_string(last) +
                    (stop.load() ? " (stopped by a signal)" : "");
      }
    });
  }

  // Every earlier-named peer calls us.
  auto callers_left = [&] {
    std::lock_guard lock(mu);
    std::size_t left = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (config.peers[i].name < config.name && !ids[i]) ++left;
    }
    return left;
  };
  while (callers_left() > 0 && Clock::now() < deadline && !stop.load()) {
    auto pending = listener.next_request(std::min(kAcceptSlice, remaining(deadline)));
    if (!pending) continue;
    CallerVerdict verdict;
    {
      std::lock_guard lock(mu);
      std::vector<bool> connected(n);
      for (std::size_t i = 0; i < n; ++i) connected[i] = ids[i].has_value();
      verdict = classify_caller(config, pending->request().private_data, connected);
    }
    if (!verdict.peer) {
      pending->reject(bytes_of(verdict.reject_reason));
      notice("rejected a request from " + pending->peer_address() + ": " + verdict.reject_reason);
      continue;
    }
    const std::size_t index = *verdict.peer;
    const std::string& name = verdict.name;
    auto accepted = endpoint.accept(*pending, name);
    std::lock_guard lock(mu);
    if (accepted) {
      ids[index] = *accepted;
      on_connected(index, *accepted, "accept");
    } else {
      // The caller's connect fails too and is retried (or gives up and says why).
      errors[index] = "accept failed: " + transport::to_string(accepted.error());
      notice("accepting " + name + " failed: " + transport::to_string(accepted.error()));
    }
  }

  for (auto& t : connectors) t.join();  // before reading what they wrote

  std::string problems;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i]) continue;
    const auto& peer = config.peers[i];
    std::string why = errors[i];
    if (why.empty()) {
      why = peer.name < config.name ? "never connected to us" : "not connected";
      if (stop.load()) why += " (stopped by a signal)";
    }
    if (!problems.empty()) problems += "; ";
    problems += peer.name + ": " + why;
  }
  if (!problems.empty()) return unexpected(problems);
  std::vector<messaging::PeerId> out;
  for (auto& id : ids) out.push_back(*id);
  return out;
}

}  // namespace rdma_interop::mesh
