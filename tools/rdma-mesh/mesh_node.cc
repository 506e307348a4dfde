#include "tools/rdma-mesh/mesh_node.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/messaging/message_endpoint.h"
#include "core/telemetry/publisher.h"
#include "core/transport/provider.h"
#include "tools/common/listen_exit.h"
#include "tools/rdma-mesh/mesh_payload.h"
#include "tools/rdma-mesh/mesh_sender.h"
#include "tools/rdma-mesh/mesh_setup.h"
#include "tools/rdma-mesh/peer_tally.h"
#include "tools/rdma-mesh/slow_consumer.h"

namespace rdma_interop::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using messaging::MessageEndpoint;
using messaging::PeerId;
using messaging::SendStatus;
constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr std::uint32_t kControlSendSlots = 2;
// How often waits look at the stop flag.
constexpr auto kSlice = std::chrono::milliseconds(100);
// How long a node waits for its peers' end messages before it closes anyway.
constexpr auto kEndBarrierTimeout = std::chrono::seconds(3);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

messaging::EndpointConfig endpoint_config(const MeshConfig& c) {
  messaging::EndpointConfig e;
  e.max_message = c.max_message;
  e.receive_window = c.window;
  e.control_receives = c.control_receives;
  e.control_send_slots = kControlSendSlots;
  e.send_queue_depth = c.send_depth != 0 ? c.send_depth : c.window + kControlSendSlots;
  e.send_queue_limit = c.queue_limit;
  e.ignore_credits = c.ignore_credits;
  // Default options: the run directory from the environment, as every other tool.
  e.publisher = std::make_shared<telemetry::Publisher>();
  return e;
}

// Everything the endpoint's handlers and the reporter share. Declared before the endpoint,
// so it outlives the endpoint's progress thread.
struct NodeState {
  explicit NodeState(const MeshConfig& c) : config(c), tallies(c.peers.size()) {}

  const MeshConfig& config;
  std::vector<PeerTally> tallies;
  // Handler thread only: the next sequence number expected per peer and tag.
  std::vector<std::array<std::uint64_t, kTagCount>> expected =
      std::vector<std::array<std::uint64_t, kTagCount>>(config.peers.size());

  // PeerId -> index in config.peers. A message can arrive before connect()/accept() has
  // returned its id, so the map is filled on first sight from the endpoint's name for it.
  std::mutex ids_mu;
  std::unordered_map<PeerId, std::size_t> index_of_id;

  // The start and end barriers.
  std::mutex barrier_mu;
  std::condition_variable barrier_cv;

  std::optional<std::size_t> index_of(const MessageEndpoint& ep, PeerId id) {
    {
      std::lock_guard lock(ids_mu);
      auto it = index_of_id.find(id);
      if (it != index_of_id.end()) return it->second;
    }
    auto stats = ep.stats(id);
    if (!stats) return std::nullopt;
    for (std::size_t i = 0; i < config.peers.size(); ++i) {
      if (config.peers[i].name == stats->name) {
        std::lock_guard lock(ids_mu);
        index_of_id[id] = i;
        return i;
      }
    }
    return std::nullopt;
  }

  bool all_received(MessageTag tag, const std::vector<bool>& from) const {
    for (std::size_t i = 0; i < tallies.size(); ++i) {
      if (from[i] && tallies[i].received_of(tag) == 0) return false;
    }
    return true;
  }
};

// Counts an outcome of send()/reply()/hold()/release() that is neither kOk nor kTryAgain.
void count_status(PeerTally& tally, SendStatus s) {
  if (s != SendStatus::kOk && s != SendStatus::kTryAgain) tally.send_errors.fetch_add(1, kRelaxed);
}

// The peer's connection ended (failed or closed): its held messages went with it.
bool gone_status(SendStatus s) {
  return s == SendStatus::kPeerFailed || s == SendStatus::kUnknownPeer;
}

json peers_json(const MeshConfig& config, const MessageEndpoint& ep, const std::vector<PeerId>& ids,
                const NodeState& state) {
  json peers = json::object();
  for (std::size_t i = 0; i < config.peers.size(); ++i) {
    std::optional<messaging::PeerStats> stats;
    if (i < ids.size()) stats = ep.stats(ids[i]);
    peers[config.peers[i].name] = peer_json(stats, state.tallies[i]);
  }
  return peers;
}

// A barrier over the mesh: sends one `tag` message to each peer in `with` (there is always a
// credit this early or this late; the wait is for a peer slow to grant), then waits until
// one came from each of them. False, with the peers missing in `why`, at the deadline.
bool barrier(MessageEndpoint& ep, const std::vector<PeerId>& ids, const std::vector<bool>& with,
             MessageTag tag, NodeState& state, const MeshConfig& config, Clock::time_point deadline,
             const std::atomic<bool>* stop, std::string& why) {
  const auto payload = make_payload(tag, 0, config.size);
  auto stopped = [&] { return stop != nullptr && stop->load(); };
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!with[i]) continue;
    SendStatus s;
    while ((s = ep.send(ids[i], payload)) == SendStatus::kTryAgain && Clock::now() < deadline &&
           !stopped()) {
      ep.wait_ready(ids[i], kSlice);
    }
    if (s != SendStatus::kOk) {
      why = std::string(tag_name(tag)) + " barrier: sending to " + config.peers[i].name + ": " +
            std::string(messaging::status_name(s));
      return false;
    }
    state.tallies[i].sent[tag_index(tag)].fetch_add(1, kRelaxed);
  }
  std::unique_lock lock(state.barrier_mu);
  while (!state.all_received(tag, with)) {
    if (Clock::now() >= deadline || stopped()) {
      why = std::string(tag_name(tag)) + " barrier: nothing from";
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (with[i] && state.tallies[i].received_of(tag) == 0) why += " " + config.peers[i].name;
      }
      return false;
    }
    state.barrier_cv.wait_for(lock, kSlice);
  }
  return true;
}

}  // namespace

int run_node(const MeshConfig& config, const std::atomic<bool>& stop, ReportWriter& out) {
  const auto setup_start = Clock::now();
  const auto setup_deadline =
      setup_start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(config.setup_timeout_s));
  auto fail = [&](const std::string& why) {
    out.emit(json{{"event", "error"}, {"error", why}});
    return kExitFailed;
  };

  auto provider = transport::open_provider(config.listen.scheme);
  if (!provider) {
    fail(provider.error());
    return tools::kExitUsage;  // a scheme no provider serves: as rdma-probe serve says
  }
  transport::ListenOptions listen_options(std::max(16, static_cast<int>(config.peers.size())));
  auto listener = (*provider)->listen(config.listen, cm::MpaPolicy{}, listen_options);
  if (!listener) {
    fail(listener.error().detail.empty() ? transport::to_string(listener.error())
                                         : listener.error().detail);
    return tools::listen_exit_status(listener.error());
  }
  out.emit(json{{"event", "listening"},
                {"address", (*listener)->local_address()},
                {"pid", static_cast<int>(::getpid())}});

  NodeState state(config);
  std::vector<PeerTally*> tally_ptrs;
  for (auto& t : state.tallies) tally_ptrs.push_back(&t);
  MessageEndpoint* ep_for_consumer = nullptr;  // set once the endpoint exists
  std::unique_ptr<SlowConsumer> consumer;
  if (config.handler_delay_us > 0) {
    consumer = std::make_unique<SlowConsumer>(
        config.peers.size(), std::chrono::microseconds(config.handler_delay_us),
        [&](const ConsumerJob& job) {
          auto& tally = state.tallies[job.peer];
          if (job.reply) {
            const auto s = ep_for_consumer->reply(
                job.message, make_payload(MessageTag::kReply, job.sequence, config.size));
            if (s == SendStatus::kOk) {
              tally.sent[tag_index(MessageTag::kReply)].fetch_add(1, kRelaxed);
            }
            // A peer gone meanwhile took its held messages with it: not our error.
            if (!gone_status(s)) count_status(tally, s);
          } else {
            const auto s = ep_for_consumer->release(job.message);
            if (!gone_status(s)) count_status(tally, s);
          }
        });
  }

  MeshSender sender(config, tally_ptrs);
  Clock::time_point run_start = setup_start;  // the reporter's t = 0, set at the barrier
  std::atomic<bool> running{false};           // run_start is set
  // Declared after everything its handlers use, so it (and its progress thread) goes first.
  MessageEndpoint ep(endpoint_config(config));
  ep_for_consumer = &ep;
  // The consumer calls into the endpoint: it stops before the endpoint is destroyed.
  struct StopFirst {
    SlowConsumer* consumer;
    ~StopFirst() {
      if (consumer) consumer->stop();
    }
  } stop_consumer_first{consumer.get()};

  ep.on_message([&](const messaging::Message& m) {
    auto index = state.index_of(ep, m.peer);
    if (!index) return;
    auto& tally = state.tallies[*index];
    auto header = parse_payload(m.payload);
    if (!header) {
      tally.unknown.fetch_add(1, kRelaxed);
      return;
    }
    const std::size_t tag = tag_index(header->tag);
    tally.received[tag].fetch_add(1, kRelaxed);
    if (header->sequence) {
      // One connection delivers in order: any other number is a lost, repeated or
      // reordered message.
      auto& expected = state.expected[*index][tag];
      if (*header->sequence != expected) tally.sequence_errors.fetch_add(1, kRelaxed);
      expected = *header->sequence + 1;
    }
    switch (header->tag) {
      case MessageTag::kStart:
      case MessageTag::kEnd: {
        std::lock_guard lock(state.barrier_mu);
        state.barrier_cv.notify_all();
        break;
      }
      case MessageTag::kStream:
        if (consumer) {
          const auto s = ep.hold(m.id);
          count_status(tally, s);
          if (s == SendStatus::kOk) consumer->submit({*index, m.id, false, 0});
        }
        break;
      case MessageTag::kRequest: {
        const std::uint64_t sequence = header->sequence.value_or(0);
        if (consumer) {
          const auto s = ep.hold(m.id);
          count_status(tally, s);
          if (s == SendStatus::kOk) consumer->submit({*index, m.id, true, sequence});
        } else {
          const auto s = ep.reply(m.id, make_payload(MessageTag::kReply, sequence, config.size));
          if (s == SendStatus::kOk) {
            tally.sent[tag_index(MessageTag::kReply)].fetch_add(1, kRelaxed);
          }
          count_status(tally, s);
        }
        break;
      }
      case MessageTag::kReply:
        break;  // counted above; a reply is never answered
    }
  });
  ep.on_ready([&](PeerId id) {
    if (auto index = state.index_of(ep, id)) sender.notify_ready(*index);
  });
  // A peer whose connection failed, or that closed it in order: nothing more goes there.
  auto peer_gone = [&](PeerId id, std::string_view event, const std::string& detail) {
    auto index = state.index_of(ep, id);
    if (!index) return;
    state.tallies[*index].gone.store(true, kRelaxed);
    if (consumer) consumer->drop_peer(*index);
    sender.notify_ready(*index);
    out.emit(json{{"event", event},
                  {"peer", config.peers[*index].name},
                  {"t", running.load() ? seconds_between(run_start, Clock::now()) : 0.0},
                  {"detail", detail}});
  };
  ep.on_failure(
      [&](PeerId id, const std::string& detail) { peer_gone(id, "peer_failed", detail); });
  ep.on_close([&](PeerId id, const std::string& detail) { peer_gone(id, "peer_closed", detail); });

  auto joined = join_mesh(
      ep, **provider, **listener, config, setup_deadline, stop,
      [&](std::size_t i, PeerId id, std::string_view role) {
        {
          std::lock_guard lock(state.ids_mu);
          state.index_of_id[id] = i;
        }
        auto stats = ep.stats(id);
        out.emit(json{{"event", "connected"},
                      {"peer", config.peers[i].name},
                      {"role", role},
                      {"local_address", stats ? stats->local_address : ""},
                      {"peer_address", stats ? stats->peer_address : ""}});
      },
      [&](const std::string& what) {
        out.emit(json{{"event", "notice"}, {"notice", what}});
      });
  (*listener)->close();  // every peer is connected (or never will be): no more callers
  if (!joined) return fail("mesh setup incomplete: " + joined.error());
  const std::vector<PeerId> ids = *joined;

  std::string why;
  if (!barrier(ep, ids, std::vector<bool>(ids.size(), true), MessageTag::kStart, state, config,
               setup_deadline, &stop, why)) {
    return fail(why);
  }

  run_start = Clock::now();
  running = true;
  json peer_names = json::array();
  for (const auto& p : config.peers) peer_names.push_back(p.name);
  out.emit(json{{"event", "started"},
                {"setup_ms", seconds_between(setup_start, run_start) * 1000.0},
                {"peers", peer_names}});

  const auto run_end = run_start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(config.duration_s));
  std::thread sending([&] { sender.run(ep, ids, run_end, stop); });

  const auto rss_start = vm_rss_kib().value_or(0);
  std::uint64_t rss_peak = rss_start;
  auto report = [&](Clock::time_point now) {
    const auto rss = vm_rss_kib().value_or(0);
    rss_peak = std::max(rss_peak, rss);
    out.emit(json{{"event", "report"},
                  {"t", seconds_between(run_start, now)},
                  {"rss_kib", rss},
                  {"peers", peers_json(config, ep, ids, state)}});
  };
  auto next_report = run_start + config.report_interval;
  while (!stop.load()) {
    const auto now = Clock::now();
    if (now >= run_end) break;
    if (now >= next_report) {
      report(now);
      // Skip the reports a stopped process (SIGSTOP) missed instead of printing them in a burst.
      while (next_report <= now) next_report += config.report_interval;
      continue;
    }
    std::this_thread::sleep_until(std::min({next_report, run_end, now + kSlice}));
  }
  sending.join();
  const auto run_done = std::min(Clock::now(), run_end);
  report(Clock::now());  // the run's end

  // Drain: nothing new is sent; what is in flight (replies above all) still arrives.
  std::this_thread::sleep_for(config.drain);

  const json peers = peers_json(config, ep, ids, state);
  bool ok = true;
  bool peer_failed = false;
  for (const auto& [name, p] : peers.items()) {
    // A peer that closed in order (it finished first) is not a failure.
    if (p.value("state", "") == "failed") peer_failed = true;
    if (p["app"].value("sequence_errors", 0) != 0) ok = false;
  }
  ok = ok && !peer_failed;
  const auto rss_end = vm_rss_kib().value_or(0);
  out.emit(json{
      {"event", "summary"},
      {"ok", ok},
      {"stopped_by_signal", stop.load()},
      {"run_s", seconds_between(run_start, run_done)},
      {"rss_kib", {{"start", rss_start}, {"peak", std::max(rss_peak, rss_end)}, {"end", rss_end}}},
      {"endpoint", endpoint_json(ep.endpoint_stats())},
      {"peers", peers}});

  // End barrier: every node has taken its summary before any closes, so no summary sees a
  // peer that merely finished first. Peers that failed are not waited for; one that does not
  // answer (stopped, or killed) is given up on after a while.
  std::vector<bool> still_there(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto s = ep.stats(ids[i]);
    still_there[i] = s && s->state == messaging::PeerState::kConnected;
  }
  if (!barrier(ep, ids, still_there, MessageTag::kEnd, state, config,
               Clock::now() + kEndBarrierTimeout, nullptr, why)) {
    out.emit(json{{"event", "notice"}, {"notice", why + "; closing anyway"}});
  }
  // A run a signal cut short did not run its --duration: failed (exit_status.h), after its
  // summary.
  if (stop.load()) return kExitFailed;
  return config.fail_on_peer_error && peer_failed ? kExitFailed : kExitRan;
}

}  // namespace rdma_interop::mesh
