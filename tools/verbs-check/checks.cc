#include "tools/verbs-check/checks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/transport/provider.h"
#include "core/transport/verbs/cm_address.h"
#include "core/xrc/liveness_probe.h"
#include "tools/rdma-probe/test_pattern.h"
#include "tools/verbs-check/message_link.h"

namespace rdma_interop::verbs_check {
namespace {

using json = nlohmann::ordered_json;
using probe::fill_pattern;
using probe::find_pattern_mismatch;
using probe::random_seed;
using rdmap::WcStatus;
using rdmap::WrOpcode;
using transport::ConnectionState;
using namespace std::chrono_literals;

constexpr std::size_t kRegionSize = 64 * 1024;
constexpr std::size_t kDataSize = ReceiveRing::kSlotSize;
constexpr std::uint32_t kRemoteAccess =
    rdmap::kLocalWrite | rdmap::kRemoteWrite | rdmap::kRemoteRead;
// Same MR index, another key: an rkey no region has (one key per index at a time).
constexpr std::uint32_t kKeyFlip = 0xff;
// Two nodes: how often a refused connect is tried again (the server of the check is not
// listening yet).
constexpr auto kRefusedRetry = std::chrono::milliseconds(200);

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const auto n = ::write(fd, text.data(), text.size());
}

// The listener's URI (`client` false) names `address`; the client's names the peer on two
// nodes, where a given `address` becomes the connect's source (source=, verbs_options.h),
// and `address` on one.
std::string uri_for(const Config& c, std::uint16_t port, bool client, bool rc_knobs) {
  const bool remote = client && !c.peer.empty();
  const std::string& target = remote ? c.peer : c.address;
  std::string host = target.find(':') != std::string::npos ? "[" + target + "]" : target;
  std::string uri = "verbs://" + host + ":" + std::to_string(port);
  std::vector<std::string> query;
  if (rc_knobs) {
    query.push_back("ack_timeout=" + std::to_string(c.ack_timeout));
    query.push_back("retry_count=" + std::to_string(c.retry_count));
  }
  if (remote && !c.address.empty()) query.push_back("source=" + c.address);
  for (std::size_t i = 0; i < query.size(); ++i) uri += (i == 0 ? "?" : "&") + query[i];
  return uri;
}

// "10.9.0.2" of "10.9.0.2:4711", "fe80::1%2" of "[fe80::1%2]:4711".
std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::vector<std::uint8_t> pattern_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  fill_pattern(v, seed);
  return v;
}

std::string mismatch_text(std::span<const std::uint8_t> bytes, std::uint64_t seed) {
  if (auto at = find_pattern_mismatch(bytes, seed)) {
    return "byte " + std::to_string(*at) + " of " + std::to_string(bytes.size()) +
           " differs from pattern(" + std::to_string(seed) + ")";
  }
  return {};
}

// ---- Server -------------------------------------------------------------------------------

// Answers the client's requests until it disconnects, says "bye", or `end`; or until it
// says "die", which this process does at once by SIGKILL, as the one-node client would kill
// it: no destructor runs, the kernel alone tears the queue pair and the connection down.
void serve_requests(MessageLink& link, std::vector<std::uint8_t>& region, Clock::time_point end,
                    int report_fd) {
  std::string why;
  while (Clock::now() < end) {
    link.set_deadline(std::min(end, Clock::now() + 250ms));
    auto text = link.receive_text(why);
    if (!text) {
      if (link.connection().state() != ConnectionState::kConnected) return;
      continue;
    }
    link.set_deadline(end);
    std::istringstream in(*text);
    std::string op;
    std::uint64_t seed = 0;
    in >> op >> seed;
    if (op == "verify-region") {
      const auto bad = mismatch_text(region, seed);
      link.send_text(bad.empty() ? "verdict ok" : "verdict " + bad, why);
    } else if (op == "expect-data") {
      auto data = link.receive(why);
      std::string verdict = "verdict ok";
      if (!data) {
        verdict = "verdict no data message: " + why;
      } else if (data->size() != kDataSize) {
        verdict = "verdict data message of " + std::to_string(data->size()) + " octets, expected " +
                  std::to_string(kDataSize);
      } else if (auto bad = mismatch_text(*data, seed); !bad.empty()) {
        verdict = "verdict " + bad;
      }
      link.send_text(verdict, why);
    } else if (op == "bye") {
      return;
    } else if (op == "die") {
      write_line(report_fd, "dying");
      ::raise(SIGKILL);
    }
  }
}

// ---- Client helpers -------------------------------------------------------------------------

std::string device_of(const std::string& address) {
  auto resolved = transport::verbs::resolve_verbs_host(address, 0);
  if (!resolved) return {};
  return transport::verbs::device_of_address(resolved->get()).value_or("");
}

struct Region {
  std::uint32_t stag = 0;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint64_t seed_r = 0;
  std::uint64_t seed_s = 0;
};

std::optional<Region> parse_region(const std::string& text) {
  std::istringstream in(text);
  std::string op;
  Region r;
  if (!(in >> op >> r.stag >> r.addr >> r.length >> r.seed_r >> r.seed_s) || op != "region") {
    return std::nullopt;
  }
  return r;
}

// A check's verdict as it goes into the JSON line.
struct Outcome {
  bool ok = false;
  std::string result = "fail";  // pass | fail | error
  std::string got;              // the status or "verified"
  std::string detail;
  json extra = json::object();
};

Outcome error_outcome(std::string detail) {
  Outcome o;
  o.result = "error";
  o.detail = std::move(detail);
  return o;
}

// The server's check of what it received: "verdict ok", or "verdict " and what was wrong.
Outcome verdict_outcome(const std::string& verdict, std::string ok_detail,
                        const std::string& fail_prefix) {
  Outcome o;
  o.ok = verdict == "verdict ok";
  o.result = o.ok ? "pass" : "fail";
  o.got = o.ok ? "verified" : "corrupted";
  o.detail = o.ok ? std::move(ok_detail) : fail_prefix + verdict.substr(8);
  return o;
}

Outcome status_outcome(const rdmap::WorkCompletion& wc, WcStatus expected, std::string detail) {
  Outcome o;
  o.got = std::string(rdmap::wc_status_name(wc.status));
  o.ok = wc.status == expected;
  o.result = o.ok ? "pass" : "fail";
  o.detail = std::move(detail);
  return o;
}

rdmap::SendWr read_wr(std::uint8_t* local, std::uint32_t length, std::uint32_t lkey,
                      std::uint32_t rkey, std::uint64_t remote_addr) {
  rdmap::SendWr wr;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.sge = {reinterpret_cast<std::uint64_t>(local), length, lkey};
  wr.remote_stag = rkey;
  wr.remote_addr = remote_addr;
  return wr;
}

// How long the RC transport tries before retry exceeded: (retry_count + 1) ACK timeouts of
// 4.096 us * 2^ack_timeout each.
double retry_exceeded_ms(const Config& config) {
  return 4.096e-3 * static_cast<double>(1u << config.ack_timeout) * (config.retry_count + 1);
}

// How long a server asked to die has to show it: the die request's completion, then the
// CM's disconnect. Its kernel sends the disconnect as the process's files close.
constexpr auto kDeathWait = 5s;

// The server as the client sees it: its pid on one node (0: on another), and whether the
// check has ended it.
struct ServerEnd {
  int pid = 0;
  bool ended = false;
};

struct Death {
  Clock::time_point at;  // the moment the server is known dead
  std::string note;      // two nodes: how its death showed, for the detail
};

// Ends the server's process. One node: SIGKILL to the forked child, reaped (its kernel
// objects are gone once it is reaped). Two nodes (pid 0): "die" over the link, then
// the server counts as dead when the CM reports the disconnect its kernel made, the first
// sign of the death that reaches this node (or after kDeathWait without one: the request
// was delivered, and SIGKILL cannot be ignored). nullopt: the request could not be sent
// (`why` says).
std::optional<Death> end_server(MessageLink& link, ServerEnd& server, std::string& why) {
  if (server.pid > 0) {
    ::kill(server.pid, SIGKILL);
    int status = 0;
    ::waitpid(server.pid, &status, 0);
    server.ended = true;
    return Death{Clock::now(), {}};
  }
  const auto asked = Clock::now();
  link.set_deadline(asked + kDeathWait);  // the caller sets its own for what follows
  if (!link.send_text("die", why)) {
    why = "asking the server to die: " + why;
    return std::nullopt;
  }
  server.ended = true;
  auto& c = link.connection();
  while (c.state() == ConnectionState::kConnected && Clock::now() < asked + kDeathWait) {
    std::this_thread::sleep_for(2ms);
  }
  const auto at = Clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - asked).count();
  if (c.state() == ConnectionState::kConnected) {
    return Death{at, "the server was asked to die; no disconnect in " + std::to_string(ms) +
                         " ms, taken for dead then"};
  }
  return Death{
      at, "the server was asked to die; its disconnect came " + std::to_string(ms) + " ms later"};
}

std::string with_note(std::string detail, const Death& death) {
  return death.note.empty() ? detail : detail + " (" + death.note + ")";
}

// How long to wait for a request to the dead server: the retry time four times over, but at
// least 5 s.
Clock::time_point dead_peer_deadline(const Config& config, Clock::time_point dead_at) {
  return dead_at + std::max(5000ms, std::chrono::milliseconds(
                                        static_cast<long>(4 * retry_exceeded_ms(config))));
}

// The check itself, on an established connection with the server's region known.
// `local` (kRegionSize) must outlive the connection: the device may write it until then.
Outcome run_check(const Config& config, std::string_view name, MessageLink& link,
                  const Region& region, const std::vector<std::uint8_t>& server_data,
                  ServerEnd& server, bool iwarp, std::vector<std::uint8_t>& local) {
  auto& c = link.connection();
  std::string why;
  const std::uint32_t lkey = c.register_memory(local.data(), local.size(), rdmap::kLocalWrite);
  if (lkey == 0) return error_outcome("register_memory failed for the local buffer");

  if (name == "send-recv") {
    if (server_data.size() != kDataSize) {
      return error_outcome("the server's data message has " + std::to_string(server_data.size()) +
                           " octets, expected " + std::to_string(kDataSize));
    }
    if (auto bad = mismatch_text(server_data, region.seed_s); !bad.empty()) {
      Outcome o;
      o.got = "corrupted";
      o.detail = "server to client: " + bad;
      return o;
    }
    const std::uint64_t seed = random_seed();
    if (!link.send_text("expect-data " + std::to_string(seed), why) ||
        !link.send(pattern_bytes(kDataSize, seed), why)) {
      return error_outcome("sending to the server: " + why);
    }
    auto verdict = link.receive_text(why);
    if (!verdict) return error_outcome("no verdict from the server: " + why);
    return verdict_outcome(*verdict, "4096 octets each way verified", "client to server: ");
  }

  if (name == "write") {
    const std::uint64_t seed = random_seed();
    fill_pattern(local, seed);
    rdmap::SendWr wr;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.sge = {reinterpret_cast<std::uint64_t>(local.data()),
              static_cast<std::uint32_t>(kRegionSize), lkey};
    wr.remote_stag = region.stag;
    wr.remote_addr = region.addr;
    auto wc = link.post_and_wait(wr, why);
    if (!wc) return error_outcome("RDMA Write: " + why);
    if (wc->status != WcStatus::kSuccess)
      return status_outcome(*wc, WcStatus::kSuccess, "RDMA Write failed");
    if (!link.send_text("verify-region " + std::to_string(seed), why)) {
      return error_outcome("asking the server to verify: " + why);
    }
    auto verdict = link.receive_text(why);
    if (!verdict) return error_outcome("no verdict from the server: " + why);
    return verdict_outcome(*verdict, "65536 octets written and verified by the server", "");
  }

  if (name == "sq-overflow") {
    // Four times the send queue's depth of 64-octet Writes into R, in one ibv_post_send
    // chain: the device must post what fits (at least the depth it granted) and refuse the
    // rest. Four times the granted depth, not the asked: a device that rounds the queue up
    // (ibv_create_qp(3) allows it) would otherwise take a chain of four times the asked
    // whole, and its refusal would go untested.
    const std::size_t asked = ReceiveRing::kSendDepth;
    const std::size_t granted = c.info().send_queue_depth;  // 0: the provider does not say
    const std::size_t depth = std::max(granted, asked);
    const std::size_t kChain = 4 * depth;
    std::vector<rdmap::SendWr> chain(kChain);
    for (std::size_t i = 0; i < kChain; ++i) {
      // Past R's end the Writes wrap: which octets they overwrite does not matter here.
      const std::size_t at = (64 * i) % kRegionSize;
      chain[i].opcode = WrOpcode::kRdmaWrite;
      chain[i].sge = {reinterpret_cast<std::uint64_t>(local.data() + at), 64, lkey};
      chain[i].remote_stag = region.stag;
      chain[i].remote_addr = region.addr + at;
    }
    transport::Connection::PostBatch batch;
    auto wcs = link.post_batch_and_wait(chain, batch, why);
    if (!wcs) return error_outcome("the Writes posted did not all complete: " + why);
    const auto failed = std::count_if(wcs->begin(), wcs->end(), [](const auto& wc) {
      return wc.status != WcStatus::kSuccess;
    });
    const std::size_t strays = link.strays(300ms);
    Outcome o;
    o.extra["chain"] = kChain;
    o.extra["asked"] = asked;
    o.extra["granted"] = granted;
    o.extra["posted"] = batch.posted;
    o.extra["returned_success"] = batch.returned_success;
    const std::string posted = std::to_string(batch.posted) + " of " + std::to_string(kChain);
    const std::string queue = "a send queue of " + std::to_string(asked) + " asked, " +
                              (granted == 0 ? std::string("its depth not said")
                                            : std::to_string(granted) + " granted");
    if (batch.returned_success) {
      // ibv_post_send(3): on failure it returns the errno value and *bad_wr names the first
      // request not posted. A caller trusting the 0 loses every request from there on:
      // never executed, never completed.
      o.got = "refused_with_success";
      o.detail = "ibv_post_send returned 0 for a chain of " + std::to_string(kChain) +
                 " Writes on " + queue + ", yet named request " +
                 std::to_string(batch.posted) + " as the first not posted; " + posted +
                 " completed (rdma-core's libsiw: siw_post_send's -ENOMEM is replaced by "
                 "its doorbell's result)";
    } else if (batch.error && *batch.error != rdmap::PostError::kQueueFull) {
      o.got = std::string(rdmap::post_error_name(*batch.error));
      o.detail = posted + " posted, then refused as " + o.got + ", not for a full queue";
    } else if (batch.posted < depth) {
      o.got = "refused_early";
      o.detail = posted + " posted before the refusal, on " + queue + " and empty";
    } else if (failed > 0 || strays > 0) {
      o.got = failed > 0 ? "completed_in_error" : "refused_completed";
      o.detail = posted + " posted; " + std::to_string(failed) + " completed in error, " +
                 std::to_string(strays) + " completion(s) of refused requests";
    } else {
      o.ok = true;
      o.result = "pass";
      o.got = batch.error ? "refused" : "all_posted";
      o.detail = batch.error ? posted + " posted (the queue's room) and completed, the rest "
                                        "refused: queue full"
                             : "the queue took all " + std::to_string(kChain) + " on " +
                                   queue + " and all completed";
    }
    return o;
  }

  if (name == "read") {
    auto wc =
        link.post_and_wait(read_wr(local.data(), kRegionSize, lkey, region.stag, region.addr), why);
    if (!wc) return error_outcome("RDMA Read: " + why);
    if (wc->status != WcStatus::kSuccess)
      return status_outcome(*wc, WcStatus::kSuccess, "RDMA Read failed");
    Outcome o;
    const auto bad = mismatch_text(local, region.seed_r);
    o.ok = bad.empty() && wc->byte_len == kRegionSize;
    o.result = o.ok ? "pass" : "fail";
    o.got = o.ok ? "verified" : "corrupted";
    o.detail = o.ok ? "65536 octets read and verified"
                    : (bad.empty() ? "byte_len " + std::to_string(wc->byte_len) : bad);
    return o;
  }

  if (name == "bad-rkey-read") {
    const std::uint32_t bad_rkey = region.stag ^ kKeyFlip;
    auto wc = link.post_and_wait(read_wr(local.data(), 64, lkey, bad_rkey, region.addr), why);
    if (!wc) return error_outcome("RDMA Read with a bad rkey: " + why);
    auto o = status_outcome(*wc, WcStatus::kRemoteAccessError,
                            "64-octet Read with rkey " + std::to_string(bad_rkey) +
                                " (valid: " + std::to_string(region.stag) + ")");
    if (!o.ok && wc->status == WcStatus::kFlushed) {
      o.detail +=
          "; the Read was flushed instead: the peer's Terminate (iWARP) moved the queue "
          "pair to error without reporting the access error in the completion";
    }
    o.extra["connection"] = c.error_detail();
    return o;
  }

  if (name == "zero-length-read") {
    const std::uint32_t bad_rkey = region.stag ^ kKeyFlip;
    auto wc = link.post_and_wait(read_wr(local.data(), 0, lkey, bad_rkey, region.addr), why);
    if (!wc) return error_outcome("zero-length RDMA Read: " + why);
    auto o = status_outcome(*wc, WcStatus::kSuccess,
                            "0-octet Read with bad rkey " + std::to_string(bad_rkey));
    if (!o.ok) return o;
    // The QP must still be usable: a zero-length Read cannot have hurt it.
    auto good = link.post_and_wait(read_wr(local.data(), 64, lkey, region.stag, region.addr), why);
    if (!good || good->status != WcStatus::kSuccess) {
      o.ok = false;
      o.result = "fail";
      o.detail += "; but the good 64-octet Read after it " +
                  (good ? "completed with " + std::string(rdmap::wc_status_name(good->status))
                        : "failed: " + why);
      return o;
    }
    o.detail += "; a good 64-octet Read after it succeeded too";
    return o;
  }

  if (name == "dead-peer-read") {
    const auto death = end_server(link, server, why);
    if (!death) return error_outcome(why);
    const auto dead_at = death->at;
    const auto state_before = c.state();
    const std::string detail_before = c.error_detail();
    link.set_deadline(dead_peer_deadline(config, dead_at));
    // iWARP has no transport retry counter: the dead process's kernel closes its TCP
    // connection, our QP goes to ERROR with it, and the Read must complete flushed.
    const WcStatus expected = iwarp ? WcStatus::kFlushed : WcStatus::kRetryExceeded;
    auto wc = link.post_and_wait(read_wr(local.data(), 64, lkey, region.stag, region.addr), why);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - dead_at).count();
    if (!wc) {
      Outcome o;
      o.got = "no_completion";
      o.detail = with_note("Read to the dead peer, posted " +
                               std::string(state_before == ConnectionState::kConnected
                                               ? "before the CM reported the disconnect"
                                               : "after: " + detail_before) +
                               ": " + why +
                               (iwarp ? "; a request posted to a queue pair in ERROR must "
                                        "complete flushed, this device neither ran nor "
                                        "flushed it"
                                      : ""),
                           *death);
      return o;
    }
    auto o = status_outcome(*wc, expected,
                            with_note("Read posted " +
                                          std::string(state_before == ConnectionState::kConnected
                                                          ? "while still connected"
                                                          : "after: " + detail_before) +
                                          "; completed " + std::to_string(static_cast<long>(ms)) +
                                          " ms after the peer died",
                                      *death));
    o.extra["completion_ms"] = static_cast<long>(ms);
    o.extra["connection"] = c.error_detail();
    return o;
  }
  if (name == "dead-peer-bad-rkey-read") {
    const auto death = end_server(link, server, why);
    if (!death) return error_outcome(why);
    const auto dead_at = death->at;
    link.set_deadline(dead_peer_deadline(config, dead_at));
    const WcStatus expected = iwarp ? WcStatus::kFlushed : WcStatus::kRetryExceeded;
    const std::uint32_t bad_rkey = region.stag ^ kKeyFlip;
    const auto state_before = c.state();
    auto wc = link.post_and_wait(read_wr(local.data(), 1, lkey, bad_rkey, region.addr), why);
    if (!wc) {
      // As in dead-peer-read: a device answer, not a harness error (siw neither runs nor
      // flushes a request posted to a queue pair the dead peer's disconnect left behind).
      Outcome o;
      o.got = "no_completion";
      o.detail = with_note("1-octet Read with a bad rkey to the dead peer, posted " +
                               std::string(state_before == ConnectionState::kConnected
                                               ? "before the CM reported the disconnect"
                                               : "after it") +
                               ": " + why,
                           *death);
      o.extra["probe_outcome"] = "timed_out";
      return o;
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - dead_at).count();
    auto o =
        status_outcome(*wc, expected,
                       with_note("1-octet Read with bad rkey " + std::to_string(bad_rkey) +
                                     " to the killed server; completed " +
                                     std::to_string(static_cast<long>(ms)) + " ms after it died",
                                 *death));
    o.extra["completion_ms"] = static_cast<long>(ms);
    o.extra["probe_outcome"] = std::string(xrc::probe_outcome_name(
        xrc::probe_outcome_of(wc->status, xrc::ProbeKind::kInvalidRkeyRead)));
    o.extra["connection"] = c.error_detail();
    return o;
  }

  if (name == "liveness-probe") {
    // A probe ends in retry exceeded after (retry_count + 1) ACK timeouts; the probe's own
    // timeout and interval leave room for that, so a dead peer shows as "no answer".
    const double retry_ms = retry_exceeded_ms(config);
    xrc::ProbeConfig pc;
    pc.kind = xrc::ProbeKind::kZeroLengthRead;
    pc.interval = std::max(500ms, std::chrono::milliseconds(static_cast<long>(2 * retry_ms)));
    pc.timeout = pc.interval;
    pc.retries = 1;
    const auto bound = xrc::detection_bound(pc);
    const std::uint32_t bad_rkey = region.stag ^ kKeyFlip;
    xrc::LivenessProbe probe(pc, Clock::now());
    json outcomes = json::array();
    // Runs the probe until `until` or `stop`; each Read is waited for up to the probe timeout.
    auto drive = [&](Clock::time_point until, auto stop) {
      while (Clock::now() < until && !stop()) {
        const auto due = probe.next_deadline().value_or(until);
        if (due > Clock::now()) std::this_thread::sleep_until(std::min(due, until));
        const auto now = Clock::now();
        const auto request = probe.on_timer(now);
        if (request != xrc::ProbeRequest::kIssue) continue;
        link.set_deadline(now + pc.timeout);
        std::string w;
        auto wc = link.post_and_wait(read_wr(local.data(), 0, lkey, bad_rkey, region.addr), w);
        if (!wc) {
          outcomes.push_back("timed_out");
          probe.on_timer(now + pc.timeout);  // no completion: the probe's timeout decides
          continue;
        }
        const auto outcome = xrc::probe_outcome_of(wc->status, pc.kind);
        outcomes.push_back(std::string(xrc::probe_outcome_name(outcome)));
        // A QP in error cannot be recycled here (one connection per check): the next probes
        // find it not ready, as they would a dead peer's.
        probe.on_result(outcome, Clock::now());
      }
    };
    drive(Clock::now() + pc.interval * 3 + pc.interval / 2, [] { return false; });
    const auto live = probe.counters();
    Outcome o;
    o.extra["probe"] = {{"interval_ms", pc.interval.count()},
                        {"timeout_ms", pc.timeout.count()},
                        {"retries", pc.retries},
                        {"detection_bound_ms", bound.count()}};
    o.extra["live_answered"] = live.answered;
    o.extra["live_failed"] = live.failed;
    if (live.answered < 3 || live.failed != 0 || probe.state() != xrc::SenderState::kAlive) {
      o.got = std::string(xrc::sender_state_name(probe.state()));
      o.detail = "against the live server " + std::to_string(live.answered) + " answered, " +
                 std::to_string(live.failed) + " failed: expected 3 answered and none failed";
      o.extra["outcomes"] = outcomes;
      end_server(link, server, why);
      return o;
    }
    link.set_deadline(Clock::now() + 5s);
    auto good = link.post_and_wait(read_wr(local.data(), 64, lkey, region.stag, region.addr), why);
    if (!good || good->status != WcStatus::kSuccess) {
      o.got = "connection_hurt";
      o.detail = "after the probes a good 64-octet Read " +
                 (good ? "completed " + std::string(rdmap::wc_status_name(good->status))
                       : "failed: " + why);
      end_server(link, server, why);
      return o;
    }
    link.set_deadline(Clock::now() + 5s);
    const auto death = end_server(link, server, why);
    if (!death) {
      o.result = "error";
      o.detail = why;
      return o;
    }
    const auto dead_at = death->at;
    drive(dead_at + bound + 3s, [&] { return probe.state() == xrc::SenderState::kDead; });
    const auto found_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - dead_at).count();
    o.got = std::string(xrc::sender_state_name(probe.state()));
    o.extra["found_dead_ms"] = found_ms;
    o.extra["outcomes"] = outcomes;
    o.extra["connection"] = c.error_detail();
    const bool in_bound = found_ms <= bound.count() + 1000;
    o.ok = probe.state() == xrc::SenderState::kDead && in_bound;
    o.result = o.ok ? "pass" : "fail";
    o.detail = with_note(std::to_string(live.answered) +
                             " probes answered by the live server, a good Read after them; "
                             "killed, it was found " +
                             o.got + " after " + std::to_string(found_ms) + " ms (bound " +
                             std::to_string(bound.count()) + " ms)",
                         *death);
    return o;
  }
  return error_outcome("unknown check");
}

}  // namespace

bool kills_server(std::string_view check) {
  return check == "dead-peer-read" || check == "dead-peer-bad-rkey-read" ||
         check == "liveness-probe";
}

int run_server(const Config& config, std::uint16_t port, int report_fd) {
  auto provider = transport::open_provider("verbs");
  if (!provider) {
    write_line(report_fd, "error " + provider.error());
    return 2;
  }
  auto where = transport::parse_provider_uri(uri_for(config, port, false, false));
  if (!where) {
    write_line(report_fd, "error " + where.error());
    return 2;
  }
  auto listener = (*provider)->listen(*where, cm::MpaPolicy{}, 1);
  if (!listener) {
    write_line(report_fd, "error " + transport::to_string(listener.error()));
    return 2;
  }
  write_line(report_fd, "ready " + (*listener)->local_address());
  if (const auto device = device_of(config.address); !device.empty()) {
    write_line(report_fd,
               "device " + device + " " + transport::verbs::rdma_device_transport(device));
  }
  auto failed = [&](int status, const std::string& why) {
    write_line(report_fd, "failed " + why);
    return status;
  };
  auto pending = (*listener)->next_request(config.timeout);
  if (!pending) {
    return failed(
        2, "no client connected within " + std::to_string(config.timeout.count() / 1000) + " s");
  }
  // The client's whole check from here: on two nodes it may come late (its previous check
  // still ran after that check's server had died), and must still get all of it.
  const auto end = Clock::now() + config.timeout;
  ReceiveRing ring;  // before the connection, after it in destruction order
  std::vector<std::uint8_t> region(kRegionSize, 0);
  const std::uint64_t seed_r = random_seed();
  const std::uint64_t seed_s = random_seed();
  fill_pattern(region, seed_r);
  auto accepted = pending->accept({}, ring.caps());
  if (!accepted) return failed(2, "accept: " + transport::to_string(accepted.error()));
  auto& connection = **accepted;
  write_line(report_fd, "client " + connection.info().peer_address);
  {
    MessageLink link(connection, ring, end);
    std::string why;
    if (!link.open(why)) return failed(2, why);
    // The client speaks first. Over iWARP without peer-to-peer mode, MPA's responder sends
    // no FPDU before the initiator's first has arrived (RFC 5044 s7.1): siw's initiator,
    // finding our first message behind the MPA Reply, failed the connect (CONNECT_ERROR,
    // -EINVAL from siw_recv_mpa_rr()) in every CI run between two siw nodes.
    const auto hello = link.receive_text(why);
    if (!hello) return failed(2, "no hello from the client: " + why);
    if (*hello != "hello") return failed(2, "not a hello: " + hello->substr(0, 80));
    const std::uint32_t stag =
        connection.register_memory(region.data(), region.size(), kRemoteAccess);
    if (stag == 0) return failed(2, "register_memory failed for the region");
    const std::string announce = "region " + std::to_string(stag) + " " +
                                 std::to_string(reinterpret_cast<std::uint64_t>(region.data())) +
                                 " " + std::to_string(region.size()) + " " +
                                 std::to_string(seed_r) + " " + std::to_string(seed_s);
    if (!link.send_text(announce, why) || !link.send(pattern_bytes(kDataSize, seed_s), why)) {
      return failed(1, "telling the client the region: " + why);
    }
    serve_requests(link, region, end, report_fd);
  }
  if (connection.state() == ConnectionState::kConnected) connection.disconnect(1000ms);
  return 0;
}

json run_client(const Config& config, std::string_view name, std::uint16_t port, int server_pid) {
  json out = json::object();
  auto finish = [&](const Outcome& o) {
    out["ok"] = o.ok;
    out["result"] = o.result;
    out["got"] = o.got.empty() ? json(nullptr) : json(o.got);
    out["detail"] = o.detail;
    for (auto& [k, v] : o.extra.items()) out[k] = v;
    return out;
  };
  auto provider = transport::open_provider("verbs");
  if (!provider) return finish(error_outcome(provider.error()));
  const bool remote = server_pid == 0;
  ServerEnd server{server_pid};
  const std::string uri_text = uri_for(config, port, true, kills_server(name));
  out["uri"] = uri_text;
  auto where = transport::parse_provider_uri(uri_text);
  if (!where) return finish(error_outcome(where.error()));

  ReceiveRing ring;  // these two outlive the connection
  std::vector<std::uint8_t> local(kRegionSize, 0);
  transport::ConnectOptions options;
  options.caps = ring.caps();
  options.timeout = std::min<std::chrono::milliseconds>(config.timeout, 10000ms);
  const auto end = Clock::now() + config.timeout;
  auto connected = (*provider)->connect(*where, options);
  // Two nodes: the --serve side listens on PORT+i only once check i-1's server is gone, and
  // either node may start first, so "nothing listens there" is tried again until the
  // check's deadline (a slice at a time).
  int tries = 1;
  while (remote && !connected &&
         connected.error().kind == transport::ConnectError::Kind::kUnreachable &&
         Clock::now() + kRefusedRetry < end) {
    std::this_thread::sleep_for(kRefusedRetry);
    options.timeout = std::clamp(
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()), 1ms, 10000ms);
    connected = (*provider)->connect(*where, options);
    ++tries;
  }
  if (!connected) {
    return finish(
        error_outcome("connect: " + transport::to_string(connected.error()) +
                      (tries > 1 ? " (" + std::to_string(tries) + " tries in " +
                                       std::to_string(config.timeout.count() / 1000) + " s)"
                                 : std::string())));
  }
  auto& connection = **connected;
  // One node: the device of the address under test. Two nodes: of the address this end
  // connected from (what --address named, or the route chose).
  const auto local_host = host_of(connection.info().local_address);
  const auto device = device_of(remote ? local_host : config.address);
  if (remote) {
    out["peer"] = config.peer;
    if (config.address.empty()) out["address"] = local_host;
    if (!device.empty()) {
      out["device"] = device;
      out["transport"] = transport::verbs::rdma_device_transport(device);
    }
  }
  const bool iwarp = transport::verbs::rdma_device_transport(device) == "iwarp";
  if (iwarp && (name == "dead-peer-read" || name == "dead-peer-bad-rkey-read")) {
    out["expected"] = "flushed";
  }
  out["negotiated"] =
      json{{"ird", connection.info().params.ird}, {"ord", connection.info().params.ord}};
  Outcome outcome;
  {
    MessageLink link(connection, ring, end);
    std::string why;
    if (!link.open(why)) return finish(error_outcome(why));
    // First, as MPA wants the initiator to be (run_server()).
    if (!link.send_text("hello", why)) return finish(error_outcome("saying hello: " + why));
    auto announce = link.receive_text(why);
    if (!announce) return finish(error_outcome("no region message from the server: " + why));
    auto region = parse_region(*announce);
    if (!region) return finish(error_outcome("not a region message: " + announce->substr(0, 80)));
    auto data = link.receive(why);
    if (!data) return finish(error_outcome("no data message from the server: " + why));
    outcome = run_check(config, name, link, *region, *data, server, iwarp, local);
    if (connection.state() == ConnectionState::kConnected && !kills_server(name)) {
      link.set_deadline(Clock::now() + 500ms);
      link.send_text("bye", why);
    }
  }
  if (connection.state() == ConnectionState::kConnected) connection.disconnect(1000ms);
  if (remote && server.ended) out["server"] = "killed by the check (die request)";
  return finish(outcome);
}

}  // namespace rdma_interop::verbs_check
