// rdma-mesh: one node of an N:N message mesh over credit flow control (issue 6), for the mesh
// tests and benchmarks.
//
// This file parses the command line (CLI11) and hands over to run_node() (mesh_node.cc).
// Exit status (tools/common/exit_status.h): 0 the run finished, 1 setup did not complete, a
// peer failed with --fail-on-peer-error, or a signal cut it short; 2 bad arguments (a scheme
// no provider serves too); 5 the --listen address could not be listened on.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/signal_watch.h"
#include "tools/common/tool_docs.h"
#include "tools/rdma-mesh/mesh_config.h"
#include "tools/rdma-mesh/mesh_node.h"
#include "tools/rdma-mesh/mesh_report.h"

namespace {

using namespace rdma_interop;
using std::chrono::milliseconds;
using tools::TimeUnit;

constexpr const char* kDescription =
    R"(rdma-mesh - one node of an N:N message mesh with end-to-end credit flow control.

Each node is one process with one message endpoint (rdma-interop's messaging layer): a
connection to every other node, receive buffers posted per peer (--window data + --control-
receives control, --max-message octets each), and a bounded send queue per peer
(--queue-limit). A message goes only with a credit, i.e. onto a buffer the peer posted for
it; a peer that stops consuming runs out of its own credits and fills its own queue, and
sends to it are refused (EAGAIN) while every other peer goes on.
)";

constexpr const char* kNodeDescription =
    R"(Run one mesh node: connect to every peer, send to all of them, report.

Setup. The node listens on --listen. Of each pair of nodes, the one whose --name sorts first
connects (retrying until --setup-timeout: the other may not listen yet) and puts its name in
the MPA private data; the other accepts. Once every peer is connected, a start message goes
to each, and the run starts when one came from every peer: all nodes measure the same window.

Traffic, for --duration after the start:
  stream         messages of --size octets to every peer at --rate per peer (0: as fast as
                 credits allow), round robin; the receiver counts them
  request-reply  the same messages as requests; every request received is answered with a
                 reply of --size octets; replies are counted, never answered
A send refused with EAGAIN (the peer's queue is full) skips that peer for this round: the
message is not sent and counts as refused. --handler-delay makes this node a slow
consumer: each received message is held (its buffer is not granted again) and handled one at
a time, round robin over peers, taking that long each, then answered or released.
--shared-queue is the negative control: one FIFO for all peers, so a refused head message
blocks everything behind it (head-of-line blocking). --ignore-credits is the misbehaving
peer: it sends without credits, and the receiver must end that connection with a Terminate
(DDP untagged "no buffer", code 0x02). After the run, --drain more with no new sends, then
the summary and an orderly close.

Output, one line per event (JSON with --json, one object per line, "event" naming it):
  listening, connected (per peer), started, report every --report-interval (t since the
  start, VmRSS in KiB, per peer: sent, received, bytes, refused, credits, queued, held,
  stalls, state, terminate_sent / terminate_received as layer/etype/code, and the
  application's counts by kind with sequence gaps), peer_failed (its connection failed),
  peer_closed (it closed its connection in order: not a failure), and a final summary.
The endpoint publishes every peer's credit figures to the run directory ($RDMA_INTEROP_RUN_DIR):
'backlog-stat --connections' shows them while the node runs. SIGTERM or SIGINT ends the run
early, with a summary ("stopped_by_signal" true) and exit status 1.

Durations take a unit: 500ms, 5s, 2m; a bare number keeps the option's unit (its help says
which). --handler-delay-us, --report-interval-ms and --drain-ms are the older names of
--handler-delay, --report-interval and --drain.
)";

constexpr const char* kNodeFooter = R"(
EXAMPLES
  Three nodes (each line on its own host or network namespace):
  rdma-mesh node --name N1 --listen tcp://198.18.0.1:7300 \
      --peer N2=tcp://198.18.0.2:7300 --peer N3=tcp://198.18.0.3:7300 --duration 10 --json
  rdma-mesh node --name N2 --listen tcp://198.18.0.2:7300 \
      --peer N1=tcp://198.18.0.1:7300 --peer N3=tcp://198.18.0.3:7300 --duration 10 --json
  rdma-mesh node --name N3 --listen tcp://198.18.0.3:7300 \
      --peer N1=tcp://198.18.0.1:7300 --peer N2=tcp://198.18.0.2:7300 --duration 10 --json
  A slow party in request/reply:  ... --mode request-reply --handler-delay 2ms
  Two nodes on one machine:
  rdma-mesh node --name a --listen tcp://127.0.0.1:7301 --peer b=tcp://127.0.0.1:7302 &
  rdma-mesh node --name b --listen tcp://127.0.0.1:7302 --peer a=tcp://127.0.0.1:7301
)";

constexpr const char* kFooter = R"(
Run 'rdma-mesh node --help' for the options, the output and examples, or 'man rdma-mesh'.
)";

std::string exit_status() {
  return tools::exit_status_section(
      {{tools::kExitOk,
        "the run finished; failed peers are in the report (unless --fail-on-peer-error)"},
       {tools::kExitFailed,
        "a peer did not connect or start within --setup-timeout, --fail-on-peer-error and a "
        "peer failed, or SIGINT/SIGTERM cut the run short (the summary is printed first)"},
       {tools::kExitUsage, ""},
       {tools::kExitCannotRun,
        "the --listen address could not be listened on (in use, not this host's, no RDMA "
        "device there)"}});
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists: SIGTERM/SIGINT go to the watcher's thread only. A run cut
  // short exits 1, also when it must be forced past the grace.
  tools::SignalWatch signals("rdma-mesh", std::chrono::seconds(15), tools::kExitFailed);

  CLI::App app(kDescription, "rdma-mesh");
  tools::setup_tool_app(app, "rdma-mesh", 32);
  app.footer(std::string(kFooter) + "\n" + exit_status());
  app.require_subcommand(1);

  mesh::MeshConfig config;
  std::string listen_text;
  std::vector<std::string> peer_texts;
  std::string mode = "stream";
  long long interval_ms = config.report_interval.count();
  long long drain_ms = config.drain.count();

  auto* node = app.add_subcommand("node", kNodeDescription);
  node->footer(std::string(kNodeFooter) + "\n" + exit_status());
  node->add_option("--name", config.name,
                   ("This node's name, unique in the mesh: 1-64 of A-Z a-z 0-9 _ . - "
                    "(of a pair, the name that sorts first connects)"))
      ->required()
      ->type_name("NAME");
  node->add_option("--listen", listen_text,
                   ("Where this node listens: tcp://ADDR:PORT with a fixed port (the "
                    "peers' --peer says the same)"))
      ->required()
      ->type_name("URI");
  node->add_option("--peer", peer_texts,
                   ("Another node and where it listens; repeat for every peer"))
      ->required()
      ->type_name("NAME=URI");
  node->add_option("--duration", config.duration_s,
                   ("How long the traffic runs after the start barrier (default 10s; a bare "
                    "number is seconds)"))
      ->type_name("DURATION")
      ->transform(
          tools::duration_in(milliseconds(100), std::chrono::hours(24), TimeUnit::kSeconds));
  node->add_option("--size", config.size,
                   ("Payload octets of every message, at least 9 to carry the sequence "
                    "number that gaps are checked with (default 64)"))
      ->type_name("N")
      ->check(tools::integer_in(9, 1 << 20));
  node->add_option("--rate", config.rate,
                   ("Messages per second to each peer; 0: as fast as credits allow "
                    "(default 2000)"))
      ->type_name("R")
      ->check(tools::number_in(0.0, 1e7, "messages per second"));
  node->add_option("--mode", mode, ("What to send: stream (default) or request-reply"))
      ->type_name("stream|request-reply")
      ->check(CLI::IsMember({"stream", "request-reply"}).description(""));
  node->add_option("--handler-delay,--handler-delay-us", config.handler_delay_us,
                   ("A slow consumer: every received message is held and handled one at a "
                    "time, taking this long each (default 0: at once; a bare number is "
                    "microseconds)"))
      ->type_name("DURATION")
      ->transform(tools::whole_duration_in(milliseconds(0), std::chrono::seconds(10),
                                           TimeUnit::kMicroseconds));
  node->add_option("--window", config.window,
                   ("Data receive buffers posted per peer: the peer's credits (2-65535, "
                    "default 16)"))
      ->type_name("N")
      ->check(tools::integer_in(2, 0xFFFF));
  node->add_option("--control-receives", config.control_receives,
                   ("Receive buffers per peer for standalone credit updates (1-255, "
                    "default 2)"))
      ->type_name("N")
      ->check(tools::integer_in(1, 255));
  node->add_option("--queue-limit", config.queue_limit,
                   ("Messages per peer that may wait for a credit; then sends to it are "
                    "refused (default 64)"))
      ->type_name("N")
      ->check(tools::integer_in(1, 1 << 20));
  node->add_option("--max-message", config.max_message,
                   ("Largest payload in octets; every receive buffer holds this plus the "
                    "4-octet credit header (default 4096)"))
      ->type_name("N")
      ->check(tools::integer_in(1, 1 << 24, "octets"));
  node->add_option("--send-depth", config.send_depth,
                   ("Sends posted per peer at once, 2 of them for credit updates only "
                    "(default: --window + 2)"))
      ->type_name("N")
      ->check(tools::integer_in(3, 1 << 16));
  node->add_option("--report-interval,--report-interval-ms", interval_ms,
                   ("Time between report lines (default 500ms; a bare number is "
                    "milliseconds)"))
      ->type_name("DURATION")
      ->transform(tools::whole_duration_in(milliseconds(10), std::chrono::hours(1),
                                           TimeUnit::kMilliseconds));
  node->add_option("--drain,--drain-ms", drain_ms,
                   ("After the run, how long without new sends before the summary, so replies "
                    "in flight are counted (default 500ms; a bare number is milliseconds)"))
      ->type_name("DURATION")
      ->transform(tools::whole_duration_in(milliseconds(0), std::chrono::minutes(10),
                                           TimeUnit::kMilliseconds));
  node->add_option("--setup-timeout", config.setup_timeout_s,
                   ("How long listen, every connection and the start barrier may take "
                    "(default 20s; a bare number is seconds)"))
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(100), std::chrono::hours(1), TimeUnit::kSeconds));
  node->add_flag("--shared-queue", config.shared_queue,
                 ("Negative control: one send FIFO for all peers; a refused head message "
                  "blocks every message behind it"));
  node->add_flag("--ignore-credits", config.ignore_credits,
                 ("Misbehave: send even without a credit, so the peer must end the "
                  "connection with a Terminate (never for real use)"));
  node->add_flag("--fail-on-peer-error", config.fail_on_peer_error,
                 ("Exit 1 when a peer's connection failed during the run"));
  node->add_flag("--json", config.json, ("One JSON object per line (see above)"));

  if (auto status = tools::answer_documentation_request(app, argc, argv)) {
    signals.finished();
    return *status;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    signals.finished();
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    signals.finished();
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    signals.finished();
    const int rc = app.exit(e);
    return rc == 0 ? 0 : mesh::kExitBadArguments;
  }
  auto usage_error = [&](const std::string& why) {
    std::fprintf(stderr, "rdma-mesh: error: %s (see 'rdma-mesh node --help')\n", why.c_str());
    signals.finished();
    return mesh::kExitBadArguments;
  };

  auto listen = transport::parse_provider_uri(listen_text);
  if (!listen) return usage_error("--listen " + listen_text + ": " + listen.error());
  config.listen = *listen;
  for (const auto& text : peer_texts) {
    auto peer = mesh::parse_peer_spec(text);
    if (!peer) return usage_error(peer.error());
    config.peers.push_back(*peer);
  }
  config.mode =
      mode == "request-reply" ? mesh::TrafficMode::kRequestReply : mesh::TrafficMode::kStream;
  config.report_interval = mesh::Millis(interval_ms);
  config.drain = mesh::Millis(drain_ms);
  if (auto why = mesh::check_config(config); !why.empty()) return usage_error(why);

  int rc = mesh::kExitFailed;
  try {
    mesh::ReportWriter out(config.name, config.json);
    rc = mesh::run_node(config, signals.stop_requested(), out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdma-mesh: internal error: %s\n", e.what());
    rc = mesh::kExitFailed;
  }
  signals.finished();
  return rc;
}
