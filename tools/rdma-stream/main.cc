// rdma-stream: sockets over RDMA from the command line, like nc and iperf3 (issue 24).
//
// This file parses the command line (CLI11) and hands over to one command: serve
// (serve_command.cc), connect (connect_command.cc) or measure (measure_command.cc).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/signal_watch.h"
#include "tools/common/tool_docs.h"
#include "tools/rdma-stream/connect_command.h"
#include "tools/rdma-stream/measure_command.h"
#include "tools/rdma-stream/serve_command.h"

namespace {

using namespace rdma_interop;
using namespace rdma_interop::stream_cli;
using std::chrono::milliseconds;
using tools::TimeUnit;

constexpr const char* kDescription =
    R"(rdma-stream - byte streams over RDMA with TCP's setup, like nc and iperf3.

A stream connects to an ordinary TCP port. When both ends are rdma-stream (or any program on
rdma-interop's stream sockets), the first connection offers to upgrade in-band and the stream
then runs over an RDMA session between the two processes (the tcp provider, a software
iWARP); every further stream to the same server opens over that session with one message,
without a TCP or RDMA handshake. A server that does not answer the offer is a plain TCP
server: the client reconnects and stays plain TCP, and remembers it. A plain TCP client of
'rdma-stream serve' (nc, curl, a browser) is served over its TCP connection, every octet it
sent kept. So rdma-stream passes anything that passes TCP.

  serve    listen on HOST:PORT and serve every connection (echo, discard or source)
  connect  standard input to a stream, the stream to standard output, like nc -N
  measure  throughput, round trips or streams opened per second against a serve

--no-upgrade, on every command, keeps to plain TCP (a client never offers, a server declines
every offer): the same commands measure TCP itself, for comparison.
)";

constexpr const char* kServeDescription =
    R"(Listen on HOST:PORT and serve every connection on a thread of its own.

Each connection, upgraded or plain TCP, is served by --mode:
  echo     every octet read is sent back; the peer's end of stream is answered with ours
  discard  every octet read is counted and dropped
  source   --size octets at a time are sent until the peer goes away
The first line says where it listens (the real port when PORT is 0). Then one line per
connection when it ends: the peer, how it came (upgraded or plain), what it is carried over,
octets received and sent, its duration and how it ended (eof, reset, stopped). With --json
each line is one JSON object, "event" naming it: listening {"address","port","mode",
"upgrade"}, connection {"peer","how","transport","received","sent","seconds","end"}, and
stopped {"connections","upgraded","plain","reason"} last.

SIGINT or SIGTERM ends the server cleanly: no new connection is accepted, each one open is
closed, and the last line is printed; so does --max-connections once that many have ended.
)";

constexpr const char* kConnectDescription =
    R"(Connect to HOST:PORT: standard input to the stream, the stream to standard output.

Like 'nc -N': at the end of standard input the stream is shut down for writing (half-close)
and the command goes on reading until the peer's end of stream, then ends. Whether the stream
was upgraded, and what it runs over, is said on stderr; stdout carries only the peer's octets.
)";

constexpr const char* kMeasureDescription =
    R"(Measure streams to an 'rdma-stream serve' at HOST:PORT for --seconds.

--mode:
  throughput  --size octets per send (default 64 KiB) on each of --streams streams, as fast as
              they go: octets per second (the server: discard, or echo)
  rr          request/response: --size octets (default 64) sent, as many read back, one round
              trip at a time on each stream (the server: echo)
  open        streams opened per second: each opened, one octet sent and read back, closed
              (the server: echo); over a session all of them but the first open with one
              message, with --no-upgrade each is a TCP connection
The first stream (which sets up the session, or finds the server plain) is opened before the
clock starts. A progress line goes to stderr every --progress, then one summary line to stdout
(one JSON object with --json: {"schema":"rdma-interop/stream-measure/1","mode","address","how",
"transport","streams","size","seconds","stopped_by_signal","error","octets","node":{...} and
"bits_per_second", or "round_trips"|"opens", their rate per second and "latency_us":{"mean",
"p50","p99"}}).
)";

constexpr const char* kFooter = R"(
EXAMPLES
  rdma-stream serve 0.0.0.0:5201 --mode discard
  rdma-stream measure 198.18.0.1:5201 --seconds 10 --streams 4
  rdma-stream measure 198.18.0.1:5201 --mode rr --no-upgrade     (the same over TCP)
  rdma-stream serve 127.0.0.1:7000 &  echo hello | rdma-stream connect 127.0.0.1:7000
)";

std::string exit_status() {
  return tools::exit_status_section(
      {{tools::kExitOk,
        "serve ended by SIGINT, SIGTERM or --max-connections; connect read the peer's end of "
        "stream; measure measured"},
       {tools::kExitFailed,
        "a stream failed (reset, or no reply in time), or SIGINT/SIGTERM cut a connect or a "
        "measure short (measure prints what it measured first)"},
       {tools::kExitUsage, "HOST:PORT, option values"},
       {tools::kExitUnreachable,
        "connect, measure: the TCP connect was refused, found no route, or was not answered "
        "within --timeout"},
       {tools::kExitCannotRun, "serve: the address is in use or not ours to listen on"}});
}

void add_common(CLI::App* cmd, Common& common, bool with_timeout, bool with_json) {
  cmd->add_flag("--no-upgrade", common.no_upgrade,
                "Plain TCP only: never offer to upgrade, decline every offer (for comparison)");
  if (with_timeout) {
    cmd->add_option("-t,--timeout", common.timeout_s,
                    "How long a connect (TCP setup and upgrade) or a reply may take (default "
                    "10s; a bare number is seconds)")
        ->type_name("DURATION")
        ->transform(tools::duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kSeconds));
  }
  if (with_json) cmd->add_flag("--json", common.json, "JSON output (see above)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "rdma-stream");
  tools::setup_tool_app(app, "rdma-stream", 30);
  app.footer(std::string(kFooter) + "\n" + exit_status());
  app.require_subcommand(1);

  std::string address_text;
  ServeOptions serve;
  std::string serve_mode_text = "echo";
  long long serve_size = 64 * 1024;
  ConnectOptions connect;
  MeasureOptions measure;
  std::string measure_mode_text = "throughput";
  long long measure_size = 0;

  auto* serve_cmd = app.add_subcommand("serve", kServeDescription);
  serve_cmd->footer(std::string(kFooter) + "\n" + exit_status());
  serve_cmd->add_option("address", address_text, "Where to listen, HOST:PORT (PORT 0: any)")
      ->required()
      ->type_name("ADDRESS");
  serve_cmd->add_option("--mode", serve_mode_text, "echo (default), discard or source")
      ->type_name("echo|discard|source")
      ->check(CLI::IsMember({"echo", "discard", "source"}).description(""));
  serve_cmd->add_option("--max-connections", serve.max_connections,
                        "End once this many connections were accepted and served (default: "
                        "no limit)")
      ->type_name("N")
      ->check(tools::integer_in(1, 1LL << 40));
  serve_cmd->add_option("--size", serve_size,
                        "Octets per send of --mode source (default 65536)")
      ->type_name("N")
      ->check(tools::integer_in(1, 16 << 20, "octets"));
  add_common(serve_cmd, serve.common, false, true);

  auto* connect_cmd = app.add_subcommand("connect", kConnectDescription);
  connect_cmd->footer(std::string(kFooter) + "\n" + exit_status());
  connect_cmd->add_option("address", address_text, "The server, HOST:PORT")
      ->required()
      ->type_name("ADDRESS");
  add_common(connect_cmd, connect.common, true, false);

  auto* measure_cmd = app.add_subcommand("measure", kMeasureDescription);
  measure_cmd->footer(std::string(kFooter) + "\n" + exit_status());
  measure_cmd->add_option("address", address_text, "The rdma-stream serve, HOST:PORT")
      ->required()
      ->type_name("ADDRESS");
  measure_cmd->add_option("--mode", measure_mode_text, "throughput (default), rr or open")
      ->type_name("throughput|rr|open")
      ->check(CLI::IsMember({"throughput", "rr", "open"}).description(""));
  measure_cmd->add_option("--seconds", measure.seconds,
                          "How long to measure (default 5s; a bare number is seconds)")
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(10), std::chrono::hours(24), TimeUnit::kSeconds));
  measure_cmd->add_option("--size", measure_size,
                          "Octets per send (throughput, default 65536) or per request (rr, "
                          "default 64)")
      ->type_name("N")
      ->check(tools::integer_in(1, 16 << 20, "octets"));
  measure_cmd->add_option("--streams", measure.streams,
                          "Streams measured at once, each on a thread of its own (default 1)")
      ->type_name("N")
      ->check(tools::integer_in(1, 1024));
  measure_cmd->add_option("--progress", measure.progress_s,
                          "Time between stderr progress lines; 0: none (default 1s; a bare "
                          "number is seconds)")
      ->type_name("DURATION")
      ->transform(tools::duration_in(milliseconds(0), std::chrono::hours(1), TimeUnit::kSeconds));
  add_common(measure_cmd, measure.common, true, true);

  if (auto status = tools::answer_documentation_request(app, argc, argv)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? tools::kExitOk : tools::kExitUsage;
  }
  const bool serving = serve_cmd->parsed();
  auto address = parse_address(address_text, serving);
  if (!address) {
    std::fprintf(stderr, "rdma-stream: error: %s\n", address.error().c_str());
    return tools::kExitUsage;
  }

  // Before any thread exists (the node's provider starts one): the signals go to the
  // watcher's thread only. A server's stop is its normal end; a connect's or a measure's is a
  // run cut short. Each command sees the flag within a bounded wait; the grace covers it.
  const milliseconds grace =
      serving ? milliseconds(5000)
              : milliseconds(static_cast<long long>(
                    (connect_cmd->parsed() ? connect.common : measure.common).timeout_s * 1000) +
                             2000);
  tools::SignalWatch signals("rdma-stream", grace,
                             serving ? tools::kExitOk : tools::kExitFailed);
  int status = tools::kExitFailed;
  try {
    if (serving) {
      serve.address = *address;
      serve.mode = serve_mode(serve_mode_text);
      serve.size = static_cast<std::size_t>(serve_size);
      status = run_serve(serve, signals.stop_requested());
    } else if (connect_cmd->parsed()) {
      connect.address = *address;
      status = run_connect(connect, signals.stop_requested());
    } else {
      measure.address = *address;
      measure.mode = measure_mode(measure_mode_text);
      measure.size = static_cast<std::size_t>(measure_size);
      status = run_measure(measure, signals.stop_requested());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdma-stream: internal error: %s\n", e.what());
    status = tools::kExitFailed;
  }
  signals.finished();
  return status;
}
