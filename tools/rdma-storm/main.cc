// rdma-storm: a bounded connect storm against one listener, for backlog tests and benchmarks.
//
// This file parses the command line (CLI11) and prints the report; the storm itself is
// storm_runner.cc. Exit status (tools/common/exit_status.h): 0 the storm ran, 1 a signal cut
// it short (the partial report printed), 2 bad arguments, 3 no attempt reached the listener,
// 5 the provider could not be opened.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/personality/file_loader.h"
#include "core/transport/provider.h"
#include "core/transport/provider_registry.h"
#include "core/util/json_text.h"
#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/retry_option.h"
#include "tools/common/signal_watch.h"
#include "tools/common/tool_docs.h"
#include "tools/rdma-storm/storm_report.h"
#include "tools/rdma-storm/storm_runner.h"

namespace {

using namespace rdma_interop;
using std::chrono::milliseconds;
using tools::TimeUnit;

constexpr const char* kDescription =
    R"(rdma-storm - a bounded connect storm against one MPA listener.

Opens the provider named by URI (tcp:// or verbs://) and runs --attempts connects in total from
--concurrency client threads, each connecting one at a time (its even share of the attempts),
holding each connection --hold, then disconnecting. No attempt starts after --duration-limit,
or after SIGINT or SIGTERM; those already running finish, and the report counts what was done.
Retryable failures (an overflow Reject, no Reply in time, a refused or unanswered TCP connect)
are tried again up to --retries times with full-jitter exponential backoff (--retry-backoff,
--retry-backoff-max, as in rdma-probe connect): by the provider's own retry policy (what an
application gets; --retry-mode provider, the default), or by rdma-storm's loop, one provider
connect per try, so that every try's outcome is counted and the tries can be reconciled one
for one with the listener's per-Request counters (--retry-mode storm). Both retry the same
failures with the same backoff: the one policy every provider follows.

verbs://ADDR:PORT storms an rdma_cm listener (rdma-probe serve --listen verbs://...) through
the verbs provider: each try is one rdma_connect, ADDR's RDMA device carries it, and
?source=LOCAL picks the local address and device. A listener's overflow Reject carries the
backlog-full marker over verbs too (zero-padded in an IB/RoCE REJ), so overflow_rejected
counts the same; the listener counts requests where tcp counts TCP connections
(half_open_opened stays 0).

Every attempt ends in exactly one outcome:
  connected          established (the server counts it as accepted)
  overflow_rejected  a Reject with the listener-overflow marker (failure backlog_full)
  app_rejected       the server application's own Reject (failure peer_rejected)
  expired            no Reply in time, or a reset/close after the server gave up on us
  tcp_timeout        no answer to the TCP SYN in time: the network, or the listener's kernel
                     accept queue full; the server never saw the attempt
  gave_up            --retries exhausted (gave_up_last says what the last try got)
  other              anything else, counted by failure name ("unreachable": refused, ...)

Output: per-outcome tallies, each try's outcome, per-thread attempts and connected counts,
latency percentiles (attempt start to established, and to any outcome) and Jain's fairness
index over the client threads' connected counts; with no attempt connected there is nothing
to measure, and those figures read n/a (null in the JSON). With --json one document, schema
rdma-interop/storm/1 (its fields: 'man rdma-storm'). Progress lines go to stderr.

Durations take a unit: 500ms, 5s, 2m; a bare number keeps the option's unit (its help says
which).

JSON (--json): {"schema":"rdma-interop/storm/1","uri","mode","personality","planned",
  "attempts","concurrency","retries","retry_mode","seed","hold_ms","elapsed_s","hit_duration_limit",
  "stopped_by_signal","outcomes":{each outcome above: n},"other":{"name":n},
  "gave_up_last":{"outcome":n},"tries","tries_exact","tries_by_outcome":{...},
  "threads":[{"index","attempts","connected","tries"}],"unreached","jain_index"|null,
  "connected_per_s","latency_ms":{"connected":{"count","mean","p50","p90","p99","max"},
  "all":{...}}}
)";

constexpr const char* kFooter = R"(
EXAMPLES
  rdma-storm tcp://198.18.0.1:7174 --attempts 2000 --concurrency 32 --json
  rdma-storm tcp://198.18.0.1:7174 --attempts 500 --retries 3 --retry-backoff 20ms --hold 50ms
  rdma-storm tcp://127.0.0.1:7175 --raw-tcp --attempts 1000   (benchmark baseline)
  rdma-storm verbs://10.9.0.1:7400?source=10.9.0.2 --attempts 20 --concurrency 4 --json
)";

std::string exit_status() {
  return tools::exit_status_section(
      {{tools::kExitOk, "the storm ran; the outcomes are in the report"},
       {tools::kExitFailed,
        "SIGINT or SIGTERM cut the storm short (the report of what was done is printed, "
        "\"stopped_by_signal\" true)"},
       {tools::kExitUsage, "URI, personality, option values"},
       {tools::kExitUnreachable,
        "no attempt reached the listener: every one was refused or its SYN went unanswered "
        "(the report is printed)"},
       {tools::kExitCannotRun, "the provider could not be opened"}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "rdma-storm");
  tools::setup_tool_app(app, "rdma-storm", 34);
  app.footer(std::string(kFooter) + "\n" + exit_status());

  std::string uri_text;
  std::string personality = "siw";
  std::vector<std::string> personality_dirs;
  storm::StormConfig config;
  double try_timeout_s = 15;
  tools::RetryBackoff backoff;
  backoff.base_ms = config.retry_backoff.count();
  long long hold_ms = 0;
  bool as_json = false;
  std::string retry_mode = "provider";

  app.add_option("uri", uri_text, "The listener: tcp://ADDR:PORT or verbs://ADDR:PORT[?...]")
      ->required()
      ->type_name("URI");
  app.add_option("-n,--attempts", config.attempts, "Attempts in total (default 1000)")
      ->type_name("N")
      ->check(tools::integer_in(1, std::numeric_limits<std::int32_t>::max()));
  app.add_option("-c,--concurrency", config.concurrency,
                 "Client threads, each one connect at a time (default 16)")
      ->type_name("N")
      ->check(tools::integer_in(1, 4096));
  app.add_option("--duration-limit", config.duration_limit_s,
                 "After this long no attempt starts (default 120s; a bare number is seconds)")
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(1), std::chrono::hours(24), TimeUnit::kSeconds));
  app.add_option("--retries", config.retries,
                 "Further tries of a retryable failure per attempt (default 0)")
      ->type_name("N")
      ->check(tools::integer_in(0, 1000));
  app.add_option("--retry-mode", retry_mode,
                 "Who retries: provider (ConnectOptions retries, the default) or storm (our "
                 "loop: one connect per try, so every try's outcome is counted)")
      ->type_name("provider|storm")
      ->check(CLI::IsMember({"provider", "storm"}).description(""));
  tools::add_retry_backoff_options(&app, backoff);
  app.add_option("--hold", hold_ms,
                 "Keep each connection established this long before disconnecting (default 0; "
                 "a bare number is milliseconds)")
      ->type_name("DURATION")
      ->transform(tools::whole_duration_in(milliseconds(0), std::chrono::hours(1),
                                           TimeUnit::kMilliseconds));
  app.add_option("-t,--timeout", try_timeout_s,
                 "How long one try (TCP connect + MPA setup) may take (default 15s; a bare "
                 "number is seconds)")
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kSeconds));
  app.add_option("-p,--personality", personality,
                 "The initiator's MPA personality: a name or a JSON file (default siw)")
      ->type_name("NAME|PATH");
  app.add_option("--personality-dir", personality_dirs,
                 "Search DIR for personalities first; repeatable")
      ->type_name("DIR");
  app.add_option("--seed", config.seed, "Seed of the retry jitter (thread i: seed + i)")
      ->type_name("N")
      ->check(tools::integer_in(0, INT64_MAX));
  app.add_flag("--raw-tcp", config.raw_tcp,
               "Baseline: plain TCP connects that wait for one byte ('A' accepted, 'R' "
               "rejected) instead of MPA");
  app.add_option("--progress", config.progress_interval_s,
                 "Time between stderr progress lines; 0: none (default 1s; a bare number is "
                 "seconds)")
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(0), std::chrono::hours(1), TimeUnit::kSeconds));
  app.add_flag("--json", as_json, "Print one rdma-interop/storm/1 JSON document");

  if (auto status = tools::answer_documentation_request(app, argc, argv)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? tools::kExitOk : tools::kExitUsage;
  }
  config.retry_mode = retry_mode == "storm" ? storm::StormConfig::RetryMode::kStorm
                                            : storm::StormConfig::RetryMode::kProvider;
  config.retry_backoff = backoff.base();
  config.retry_backoff_max = backoff.cap();
  config.hold = storm::Millis(hold_ms);
  config.try_timeout =
      std::chrono::duration_cast<storm::Millis>(std::chrono::duration<double>(try_timeout_s));

  auto target = transport::parse_provider_uri(uri_text);
  const bool usable =
      target && transport::find_provider(target->scheme) != nullptr && target->port != 0;
  if (!usable) {
    const std::string why = target ? "a URI with a non-zero port and the scheme of a provider (" +
                                         transport::known_schemes() + ") is needed"
                                   : target.error();
    std::fprintf(stderr, "rdma-storm: error: %s: %s\n", uri_text.c_str(), why.c_str());
    return tools::kExitUsage;
  }
  if (target->scheme == "verbs" && config.raw_tcp) {
    std::fprintf(stderr,
                 "rdma-storm: error: --raw-tcp makes plain TCP connects: it needs a "
                 "tcp:// URI\n");
    return tools::kExitUsage;
  }
  config.target = *target;

  if (!config.raw_tcp) {
    auto found = personality::find_personality(
        personality, personality::personality_search_dirs(personality_dirs));
    if (!found) {
      std::fprintf(stderr, "rdma-storm: error: %s\n", found.error().c_str());
      return tools::kExitUsage;
    }
    config.personality = *found;
  }

  // Before the provider's and the clients' threads, which inherit the blocked signals. The
  // attempts under way finish after a stop request (each bounded by its tries); past that
  // grace the process ends anyway, cut short.
  const auto worst_attempt =
      (config.try_timeout + config.retry_backoff_max) * static_cast<long long>(config.retries + 1) +
      config.hold + std::chrono::seconds(2);
  tools::SignalWatch signals("rdma-storm", worst_attempt, tools::kExitFailed);
  std::unique_ptr<transport::Provider> provider;
  if (!config.raw_tcp) {
    auto opened = transport::open_provider(config.target.scheme);
    if (!opened) {
      signals.finished();
      std::fprintf(stderr, "rdma-storm: %s\n", opened.error().c_str());
      return tools::kExitCannotRun;
    }
    provider = std::move(*opened);
  }

  int status = tools::kExitOk;
  try {
    auto result = storm::run_storm(config, provider.get(), &signals.stop_requested());
    auto report = storm::report_json(config, result);
    if (as_json) {
      std::cout << json_text(report) << std::endl;
    } else {
      std::cout << storm::report_text(report) << std::flush;
    }
    const auto attempts = result.tally.attempts();
    if (result.stopped_by_signal) {
      std::fprintf(stderr, "rdma-storm: stopped by signal %d after %llu of %llu attempts\n",
                   signals.signal_number(), static_cast<unsigned long long>(attempts),
                   static_cast<unsigned long long>(config.attempts));
      status = tools::kExitFailed;
    } else if (attempts > 0 && result.tally.unreached == attempts) {
      std::fprintf(stderr, "rdma-storm: no attempt reached %s (refused or unanswered)\n",
                   config.target.to_string().c_str());
      status = tools::kExitUnreachable;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdma-storm: internal error: %s\n", e.what());
    status = tools::kExitFailed;
  }
  signals.finished();
  return status;
}
