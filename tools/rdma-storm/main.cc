// rdma-storm: a bounded connect storm against one listener, for backlog tests and benchmarks.
//
// This file parses the command line (CLI11) and prints the report; the storm itself is
// storm_runner.cc. Exit status: 0 the storm ran (whatever its outcomes), 1 it could not run
// (no provider), 2 bad arguments.
#include <limits>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "core/personality/file_loader.h"
#include "core/transport/provider.h"
#include "tools/rdma-storm/storm_report.h"
#include "tools/rdma-storm/storm_runner.h"
#include "core/util/json_text.h"
#include "tools/common/number_option.h"

namespace {

using namespace rdma_interop;

constexpr const char* kDescription =
    R"(rdma-storm - a bounded connect storm against one MPA listener.

Opens the provider named by URI (tcp:// or verbs://) and runs --attempts connects in total from
--concurrency client threads, each connecting one at a time (its even share of the attempts),
holding each connection --hold milliseconds, then disconnecting. No attempt starts after
--duration-limit; those already running finish. Retryable failures (an overflow Reject, no
Reply in time, a refused TCP connect) are tried again up to --retries times with full-jitter
exponential backoff: by the provider's own retry policy (ConnectOptions retries, what an
application gets; --retry-mode provider, the default), or by rdma-storm's loop, one provider
connect per try, so that every try's outcome is counted and the tries can be reconciled
one for one with the listener's per-Request counters (--retry-mode storm).

verbs://ADDR:PORT storms an rdma_cm listener (rdma-probe serve --listen verbs://...) through
the verbs provider: each try is one rdma_connect, ADDR's RDMA device carries it, and
?source=LOCAL picks the local address and device. The provider has no retry policy of its
own, so retries over verbs need --retry-mode storm. A listener's overflow Reject carries the
backlog-full marker over verbs too (zero-padded in an IB/RoCE REJ), so overflow_rejected
counts the same; the listener counts requests where tcp counts TCP connections
(half_open_opened stays 0).

Every attempt ends in exactly one outcome:
  connected          established (the server counts it as accepted)
  overflow_rejected  a Reject with the listener-overflow marker (failure backlog_full)
  app_rejected       the server application's own Reject (failure peer_rejected)
  expired            no Reply in time, or a reset/close after the server gave up on us
  gave_up            --retries exhausted (gave_up_last says what the last try got)
  other              anything else, counted by failure name ("unreachable", ...)

Output: per-outcome tallies, each try's outcome, per-thread attempts and connected counts,
latency percentiles (attempt start to established, and to any outcome) and Jain's fairness
index over the client threads' connected counts. With --json one document, schema
rdma-interop/storm/1 (see tools/rdma-storm/storm_report.h). Progress lines go to stderr.
)";

constexpr const char* kFooter = R"(
EXAMPLES
  rdma-storm tcp://198.18.0.1:7174 --attempts 2000 --concurrency 32 --json
  rdma-storm tcp://198.18.0.1:7174 --attempts 500 --retries 3 --retry-backoff 20 --hold 50
  rdma-storm tcp://127.0.0.1:7175 --raw-tcp --attempts 1000   (benchmark baseline)
  rdma-storm verbs://10.9.0.1:7400?source=10.9.0.2 --attempts 20 --concurrency 4 --json

EXIT STATUS
  0  the storm ran; the outcomes are in the report
  1  the storm could not run (the provider could not be opened)
  2  bad arguments: URI, personality, option values)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "rdma-storm");
  app.footer(kFooter);
  app.get_formatter()->column_width(34);

  std::string uri_text;
  std::string personality = "siw";
  std::vector<std::string> personality_dirs;
  storm::StormConfig config;
  double try_timeout_s = 15;
  long long backoff_ms = config.retry_backoff.count();
  long long backoff_max_ms = config.retry_backoff_max.count();
  long long hold_ms = 0;
  bool as_json = false;
  std::string retry_mode = "provider";

  app.add_option("uri", uri_text, "The listener: tcp://ADDR:PORT or verbs://ADDR:PORT[?...]")
      ->required()
      ->type_name("URI");
  app.add_option("-n,--attempts", config.attempts, "Attempts in total (default 1000)")
      ->check(rdma_interop::tools::integer_in(1, std::numeric_limits<std::int32_t>::max()));
  app.add_option("-c,--concurrency", config.concurrency,
                 "Client threads, each one connect at a time (default 16)")
      ->check(rdma_interop::tools::integer_in(1, 4096));
  app.add_option("--duration-limit", config.duration_limit_s,
                 "Seconds after which no attempt starts (default 120)")
      ->type_name("S")
      ->check(rdma_interop::tools::number_in(0.001, 86400.0, "seconds"));
  app.add_option("--retries", config.retries,
                 "Further tries of a retryable failure per attempt (default 0)")
      ->check(rdma_interop::tools::integer_in(0, 1000));
  app.add_option("--retry-mode", retry_mode,
                 "Who retries: provider (ConnectOptions retries, the default) or storm (our "
                 "loop: one connect per try, so every try's outcome is counted)")
      ->type_name("provider|storm")
      ->check(CLI::IsMember({"provider", "storm"}));
  app.add_option("--retry-backoff", backoff_ms,
                 "Backoff base in ms: before try t, sleep uniform [0, min(max, base*2^t)]")
      ->type_name("MS")
      ->check(rdma_interop::tools::integer_in(0, 600000, "milliseconds"));
  app.add_option("--retry-backoff-max", backoff_max_ms, "Backoff cap in ms (default 1000)")
      ->type_name("MS")
      ->check(rdma_interop::tools::integer_in(0, 600000, "milliseconds"));
  app.add_option("--hold", hold_ms, "Keep each connection established MS before disconnecting")
      ->type_name("MS")
      ->check(rdma_interop::tools::integer_in(0, 3600000, "milliseconds"));
  app.add_option("-t,--timeout", try_timeout_s,
                 "Seconds one try (TCP connect + MPA setup) may take (default 15)")
      ->type_name("S")
      ->check(rdma_interop::tools::number_in(0.001, 3600.0, "seconds"));
  app.add_option("-p,--personality", personality,
                 "The initiator's MPA personality: a name or a JSON file (default siw)")
      ->type_name("NAME|PATH");
  app.add_option("--personality-dir", personality_dirs, "Search DIR for NAME.json first")
      ->type_name("DIR");
  app.add_option("--seed", config.seed, "Seed of the retry jitter (thread i: seed + i)");
  app.add_flag("--raw-tcp", config.raw_tcp,
               "Baseline: plain TCP connects that wait for one byte ('A' accepted, 'R' "
               "rejected) instead of MPA");
  app.add_option("--progress", config.progress_interval_s,
                 "Seconds between stderr progress lines; 0: none (default 1)")
      ->type_name("S")
      ->check(rdma_interop::tools::number_in(0.0, 3600.0, "seconds"));
  app.add_flag("--json", as_json, "Print one rdma-interop/storm/1 JSON document");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  config.retry_mode = retry_mode == "storm" ? storm::StormConfig::RetryMode::kStorm
                                            : storm::StormConfig::RetryMode::kProvider;
  config.retry_backoff = storm::Millis(backoff_ms);
  config.retry_backoff_max = storm::Millis(backoff_max_ms);
  config.hold = storm::Millis(hold_ms);
  config.try_timeout = std::chrono::duration_cast<storm::Millis>(
      std::chrono::duration<double>(try_timeout_s));

  auto target = transport::parse_provider_uri(uri_text);
  const bool usable =
      target && (target->scheme == "tcp" || target->scheme == "verbs") && target->port != 0;
  if (!usable) {
    std::fprintf(stderr, "rdma-storm: error: %s: %s\n", uri_text.c_str(),
                 target ? "a tcp://ADDR:PORT or verbs://ADDR:PORT URI with a non-zero port is "
                          "needed"
                        : target.error().c_str());
    return 2;
  }
  if (target->scheme == "verbs" && config.raw_tcp) {
    std::fprintf(stderr,
                 "rdma-storm: error: --raw-tcp makes plain TCP connects: it needs a "
                 "tcp:// URI\n");
    return 2;
  }
  // The verbs provider has no retry policy (ConnectOptions::retries): its retries would
  // silently not happen.
  if (target->scheme == "verbs" && config.retries > 0 &&
      config.retry_mode == storm::StormConfig::RetryMode::kProvider) {
    std::fprintf(stderr,
                 "rdma-storm: error: the verbs provider does not retry a connect "
                 "itself: use --retry-mode storm with --retries over verbs://\n");
    return 2;
  }
  config.target = *target;

  std::unique_ptr<transport::Provider> provider;
  if (!config.raw_tcp) {
    auto found = personality::find_personality(
        personality, personality::personality_search_dirs(personality_dirs));
    if (!found) {
      std::fprintf(stderr, "rdma-storm: error: %s\n", found.error().c_str());
      return 2;
    }
    config.personality = *found;
    auto opened = transport::open_provider(config.target.scheme);
    if (!opened) {
      std::fprintf(stderr, "rdma-storm: %s\n", opened.error().c_str());
      return 1;
    }
    provider = std::move(*opened);
  }

  try {
    auto result = storm::run_storm(config, provider.get());
    auto report = storm::report_json(config, result);
    if (as_json) {
      std::cout << json_text(report) << std::endl;
    } else {
      std::cout << storm::report_text(report) << std::flush;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdma-storm: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
