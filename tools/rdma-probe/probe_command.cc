// rdma-probe URI: probe a peer and print what it speaks (peer_probe.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/personality/file_loader.h"
#include "core/transport/provider_registry.h"
#include "tools/common/signal_watch.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/json_report.h"
#include "tools/rdma-probe/peer_probe.h"

namespace rdma_interop::probe {

namespace {

// The "still_answering" row failed: the peer broke during the probe.
bool peer_broke(const ProbeReport& report) {
  return std::any_of(
      report.capabilities.begin(), report.capabilities.end(),
      [](const Capability& c) { return c.id == "still_answering" && c.verdict == Verdict::kFail; });
}

}  // namespace

int run_probe(const ProbeOptions& options) {
  auto uri = transport::parse_provider_uri(options.uri);
  if (!uri) {
    print_usage_error("probe", options.uri + ": " + uri.error());
    return kExitUsage;
  }
  if (transport::find_provider(uri->scheme) == nullptr) {
    print_usage_error("probe", options.uri + ": rdma-probe probes the peers of a provider: " +
                                   transport::known_uri_forms());
    return kExitUsage;
  }
  if (uri->port == 0) {
    print_usage_error("probe", options.uri + ": a probe needs the peer's port");
    return kExitUsage;
  }
  for (const auto& d : options.personality_dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) {
      print_usage_error("probe", "--personality-dir " + d + ": no such directory");
      return kExitUsage;
    }
  }

  ProbeSettings settings;
  settings.uri = *uri;
  // The stacks the fingerprint compares the peer with; files that do not load are named on
  // stderr and left out, as `rdma-probe personalities` does.
  std::vector<std::string> problems;
  settings.known =
      personality::list_personalities(personality::personality_search_dirs(options.personality_dirs),
                                      &problems);
  for (const auto& p : problems) std::fprintf(stderr, "rdma-probe: skipped %s\n", p.c_str());
  settings.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options.timeout_s));
  settings.rtr_wait = std::chrono::milliseconds(options.rtr_wait_ms);
  settings.first_fpdu_delay = std::chrono::milliseconds(options.first_fpdu_delay_ms);
  settings.max_connections = options.max_connections;
  // Before the provider starts its event thread, which must inherit the blocked signals (or
  // a Ctrl-C ends the process with 130 and no report). The connection under way is bounded
  // by --timeout: let it finish, then report what was found (exit 1: cut short).
  tools::SignalWatch signals(
      "rdma-probe", settings.timeout + settings.rtr_wait + std::chrono::seconds(1), kExitFailed);
  settings.cancel = &signals.stop_requested();
  auto provider = transport::open_provider(uri->scheme);
  if (!provider) {
    signals.finished();
    print_usage_error("probe", provider.error());
    return kExitUsage;
  }
  const bool progress = !options.quiet && ::isatty(STDERR_FILENO);
  if (progress) {
    settings.progress = [](int n, std::string_view what) {
      std::fprintf(stderr, "\rrdma-probe: connection %2d: %-60.60s", n, std::string(what).c_str());
      std::fflush(stderr);
    };
  }

  auto report = probe_peer(settings, **provider);
  if (progress) std::fprintf(stderr, "\r%80s\r", "");
  const bool cancelled = signals.stop_requested().load();
  if (cancelled) {
    report.stopped_by_signal = true;
    report.detail += "; stopped early by a signal, later probes not tested";
  }
  if (peer_broke(report)) {
    report.detail +=
        "; but it stopped answering plain Requests during the probe (see "
        "still_answering): the rows after that describe a broken peer";
  }
  if (options.json) {
    print_json_line(to_json(report));
  } else {
    print_table(report, options.evidence, std::cout);
    std::cout.flush();
  }
  signals.finished();
  // Cut short, the outcome may be what the first probes found before the signal (a peer
  // not yet known to be iWARP): the run was incomplete, whatever it found.
  if (cancelled) return kExitFailed;
  switch (report.outcome) {
    case ProbeOutcome::kProbed:
      return peer_broke(report) ? kExitFailed : kExitOk;
    case ProbeOutcome::kUnreachable:
      return kExitUnreachable;
    case ProbeOutcome::kNotIwarp:
      return kExitNotIwarp;
    case ProbeOutcome::kRejected:
      return kExitFailed;
  }
  return kExitFailed;
}

}  // namespace rdma_interop::probe
