// backlog-stat - every RDMA listener on this node with its backlog figures, like `ss -lnt`;
// with --connections every credit-managed connection with its credit figures, like `ss -tn`.
//
// Reads the snapshots that processes using rdma-interop publish under the run directory
// (core/telemetry/run_dir.h, which treats that directory as untrusted and deletes only our
// own files of dead processes), and with --kernel the kernel's RDMA CM listeners through
// iproute2's `rdma` tool. Everything read is escaped before it reaches the terminal
// (core/util/printable_text.h), and --json is valid JSON whatever the bytes
// (core/util/json_text.h).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "core/telemetry/run_dir.h"
#include "core/util/json_text.h"
#include "core/util/printable_text.h"
#include "tools/backlog-stat/exit_codes.h"
#include "tools/backlog-stat/kernel_cm_ids.h"
#include "tools/backlog-stat/report.h"
#include "tools/backlog-stat/watch_delta.h"
#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/tool_docs.h"

namespace rdma_interop::backlog_stat {
namespace {

constexpr const char* kDescription =
    R"(backlog-stat - RDMA listeners and their backlog figures, or connections and their credits

Lists every listener that processes using rdma-interop (rdma-probe serve, the Python
package, the storm tools) have open on this node, one line each, like `ss -lnt`: where it
listens, how many connect requests hold a backlog slot against how many there are, and
what happened to the requests that found the backlog full.

A connect request (a complete MPA Request) holds a slot from the moment it is received
until the application accepts or rejects it, or it expires; TCP connections that have not
sent a complete Request yet are "half-open" and never hold a slot. Each process publishes
its listeners' counters at most every 100 ms, when they change; entries of processes that
are gone are not shown, and their files are deleted by the next reader run by the same
user as the process.

With --kernel, the kernel's own RDMA CM listeners (kernel siw, rxe, HCAs) are listed too,
from `rdma -j resource show cm_id`. The kernel keeps no backlog figures for them.

With --connections, lists instead every connection of the processes' message endpoints
(rdma-mesh, the Python messaging API), one line each, like `ss -tn`: who the peer is, how
many credits this side holds (receive buffers the peer has posted for it), how many
messages wait for one, and how often a send found none. A connection whose peer stopped
consuming shows 0 credits, a full queue and a growing Refused count, while the process's
other connections keep moving.

With --watch, the view is refreshed in place until SIGINT or SIGTERM: each figure that
changed since the last refresh is marked '*', and rate columns follow the counters
(listeners: Req/s, Acc/s, Rej/s: requests, accepted, and rejected or dropped per second;
connections: Sent/s, Recv/s, Refused/s). With --watch --json, one document per refresh and
line, each row with "rates" (every cumulative counter per second, null at first) and
"changed" (the figures that moved), and the document with "interval_s".)";

constexpr const char* kFooter = R"(COLUMNS
  Proto               the provider ("tcp": rdma-interop's iWARP over TCP)
  Local Address:Port  where the listener listens
  Pend/Backlog        requests holding a slot now / slots (the listen() backlog)
  HighW               most slots ever held at once (never above Backlog)
  Wait                drop policy: requests over the backlog waiting, unanswered, now
  Dropped             drop policy: requests that waited for a slot until they expired or
                      their initiator gave up
  OvfRej              reject policy: requests answered with the listener-overflow Reject
                      (our initiators report it as backlog_full)
  AppRej              requests the application rejected
  Accepted            requests the application accepted
  HalfOpen            TCP connections without a complete MPA Request now
  HOExpired           half-open connections closed after the request timeout
  Policy              overflow policy: drop or reject ("-": the provider does not say)
  PID, Process        the listening process (its /proc/PID/comm)
  The --json document has every counter of the listener's backlog, not only these.

CONNECTION COLUMNS (--connections)
  Proto               the provider ("tcp", "verbs"; "-" when the endpoint does not say)
  Local Address:Port  this side of the connection
  Peer Address:Port   the other side
  Peer                the endpoint's name for the peer
  State               connected, failed (ended by an error or a Terminate) or closed
  Credits             messages this side may send now: data receive buffers the peer has
                      posted for it and announced (0: the peer is not consuming)
  Ctl                 control credits: standalone credit updates this side may send now
  Queued/Limit        messages waiting for a credit / the most that may wait; at the limit,
                      sends to this peer are refused (try again) and nothing else waits
  Held                received messages the application holds for a reply: their buffers
                      are not granted back to the peer until it answers
  Refused             sends refused with try-again because the queue was full
  NoCredit, NoSlot    times a message could not go: no credit / no free send queue slot
  Sent, Received      data messages sent and received
  Updates             standalone credit updates sent/received
  PID, Process        the process of the endpoint (its /proc/PID/comm)
  The --json document has every credit counter of the connection, not only these.

FILES
  /run/rdma-interop/PID-TOKEN.json
      one snapshot per publisher (each provider, or a message endpoint given one): its
      listeners and connections. The run directory is created 0755: only its owner (root
      for the default) publishes there; any user reads it. backlog-stat never follows a
      symbolic link there (a run directory that is one is refused), reads only regular
      files of at most 1 MiB owned by root, itself or the directory's owner, and deletes
      only its own user's files of dead processes, never anything else
  /sys/class/infiniband
      present when the kernel has RDMA devices; --kernel says so when it is not

ENVIRONMENT
  RDMA_INTEROP_RUN_DIR
      the run directory, for publishers and for backlog-stat (--run-dir overrides it here);
      default /run/rdma-interop. If you cannot write the default (only its owner
      publishes there), point it at a directory of your own, for your processes and your
      backlog-stat alike (e.g. $XDG_RUNTIME_DIR/rdma-interop)

EXAMPLES
  backlog-stat                       every listener on the node
  backlog-stat --port 7174           the listener(s) on port 7174
  backlog-stat --watch 0.5           refresh twice a second until Ctrl-C
  backlog-stat --json --pid 4242     one process's listeners as one JSON document
  backlog-stat --kernel              also kernel siw/rxe/HCA listeners (rping -s, ...)
  backlog-stat --connections         every message connection and its credits
  backlog-stat --connections --peer node5 --watch 0.5
                                     watch one peer's credits and queue (a stalled peer)
  backlog-stat --connections --json  every credit counter of every connection
  RDMA_INTEROP_RUN_DIR=/tmp/lab backlog-stat --watch --json   a JSON line per second
)";

std::string exit_status() {
  return tools::exit_status_section(
      {{tools::kExitOk,
        "shown; also when there is nothing to show (no listener or connection is published, "
        "or none matches the filters: a line on stderr says why, as ss shows an empty "
        "table), and --watch stopped by SIGINT or SIGTERM"},
       {tools::kExitUsage, ""},
       {tools::kExitCannotRun,
        "the run directory cannot be read: no permission, or it is a symbolic link (never "
        "followed) or not a directory"}});
}

struct Args {
  bool json = false;
  std::optional<double> watch;  // seconds
  std::optional<std::uint16_t> port;
  std::optional<std::int64_t> pid;
  std::optional<std::string> peer;
  std::string run_dir;
  bool kernel = false;
  bool connections = false;
};

struct Snapshot {
  Report report;                 // the listener view
  ConnectionReport connections;  // --connections
  std::size_t unfiltered_connections = 0;
  std::optional<telemetry::ScanError> error;  // the run directory could not be read
  bool empty(const Args& args) const {
    return args.connections ? connections.empty() : report.empty();
  }
};

Snapshot take(const Args& args) {
  Snapshot s;
  s.report.run_dir = args.run_dir;
  s.connections.run_dir = args.run_dir;
  const Filter filter{args.port, args.pid};
  auto scan = telemetry::scan_run_dir(args.run_dir);
  if (scan) {
    if (args.connections) {
      s.connections.connections =
          connection_rows_of(*scan, ConnectionFilter{args.port, args.pid, args.peer});
    } else {
      s.report.listeners = rows_of(*scan, filter);
      s.unfiltered_connections = connection_count(*scan);
    }
  } else {
    s.error = scan.error();
  }
  if (args.kernel) {
    auto k = scan_kernel_listeners();
    k.listeners = filtered(std::move(k.listeners), filter);
    s.report.kernel = std::move(k);
  }
  return s;
}

// Why there is nothing to show, in one sentence.
std::string nothing_message(const Args& args, const Snapshot& s) {
  const std::string what = args.connections ? "connection" : "listener";
  std::string why;
  if (s.error && s.error->kind == telemetry::ScanError::Kind::kMissing) {
    why = args.run_dir + " does not exist: no process has published a " + what +
          " on this node (processes started with another RDMA_INTEROP_RUN_DIR publish "
          "elsewhere)";
  } else if (args.port || args.pid || args.peer) {
    why = "no " + what + " matches the filters";
  } else {
    why = "no " + what + " is published in " + args.run_dir;
    if (s.unfiltered_connections > 0) {
      why += " (" + std::to_string(s.unfiltered_connections) +
             " message connections are: see --connections)";
    }
  }
  if (s.report.kernel && s.report.kernel->status != KernelScan::Status::kOk) {
    why += "; " + s.report.kernel->detail;
  } else if (s.report.kernel) {
    why += "; the kernel has no RDMA CM listener either";
  }
  // The run directory and the kernel's sentence are not ours to trust on a terminal.
  return "backlog-stat: nothing to show: " + printable(why) + ".";
}

nlohmann::ordered_json document(const Args& args, const Snapshot& s) {
  return args.connections ? to_json(s.connections) : to_json(s.report);
}

std::string table(const Args& args, const Snapshot& s) {
  return args.connections ? to_text(s.connections) : to_text(s.report);
}

// One report. Returns the exit status.
int show_once(const Args& args) {
  const Snapshot s = take(args);
  if (s.error && s.error->kind != telemetry::ScanError::Kind::kMissing) {
    std::cerr << "backlog-stat: " << printable(s.error->detail) << "\n";
    return kExitCannotRead;
  }
  if (args.json) {
    std::cout << json_text(document(args, s), 2) << "\n";
  } else if (!s.empty(args)) {
    std::cout << table(args, s);
  }
  // Nothing to show is an answer, not an error (ss -lnt exits 0 with an empty table).
  if (s.empty(args)) std::cerr << nothing_message(args, s) << "\n";
  return kExitShown;
}

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%H:%M:%S", std::localtime(&now));
  return text;
}

// The rows of a snapshot as --watch compares them, in the report's order.
std::vector<WatchDelta::Row> watch_rows(const Args& args, const Snapshot& s) {
  std::vector<WatchDelta::Row> rows;
  if (args.connections) {
    for (const auto& row : s.connections.connections) rows.push_back(watch_row(row));
  } else {
    for (const auto& row : s.report.listeners) rows.push_back(watch_row(row));
  }
  return rows;
}

// The --watch --json document: each row with its "rates" and "changed", and "interval_s".
nlohmann::ordered_json watch_document(const Args& args, const Snapshot& s,
                                      const WatchMarks& marks) {
  auto doc = document(args, s);
  doc["interval_s"] = marks.interval_s ? nlohmann::ordered_json(*marks.interval_s)
                                       : nlohmann::ordered_json(nullptr);
  auto& rows = doc[args.connections ? "connections" : "listeners"];
  for (std::size_t i = 0; i < rows.size() && i < marks.rows.size(); ++i) {
    const auto& change = marks.rows[i];
    nlohmann::ordered_json rates = nullptr;
    if (!change.is_new && marks.interval_s) {
      rates = nlohmann::ordered_json::object();
      for (const auto& [name, rate] : change.rates) rates[name] = rate;
    }
    rows[i]["rates"] = rates;
    rows[i]["changed"] = change.changed;
  }
  return doc;
}

// Refreshes until SIGINT/SIGTERM. The signals are blocked and taken with sigtimedwait, which
// is also the wait between refreshes: no handler, no global flag. The screens shown so far
// are the result; a signal is the normal end (status 0).
int watch(const Args& args) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  const auto period = std::chrono::duration<double>(*args.watch);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  WatchDelta delta;
  for (;;) {
    const Snapshot s = take(args);
    if (s.error && s.error->kind != telemetry::ScanError::Kind::kMissing) {
      std::cerr << "backlog-stat: " << printable(s.error->detail) << "\n";
      return kExitCannotRead;
    }
    WatchMarks marks;
    marks.rows = delta.update(watch_rows(args, s), std::chrono::steady_clock::now());
    marks.interval_s = delta.interval_s();
    if (args.json) {
      // One document per line, so a sampler can read the stream line by line.
      std::cout << json_text(watch_document(args, s, marks)) << std::endl;
    } else {
      std::string screen;
      if (tty) screen += "\033[H\033[2J";  // home, clear: refresh in place
      char every[64];
      std::snprintf(every, sizeof every, "Every %gs: backlog-stat  ", *args.watch);
      screen += every + clock_text() + "\n\n";
      if (s.empty(args)) {
        screen += nothing_message(args, s) + "\n";
      } else {
        screen += args.connections ? to_text(s.connections, &marks) : to_text(s.report, &marks);
      }
      std::cout << screen << std::flush;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();
    timespec wait{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    const int sig = ::sigtimedwait(&stop, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      if (!args.json && tty) std::cout << "\n";
      std::cout << std::flush;
      return kExitShown;
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app(kDescription, "backlog-stat");
  tools::setup_tool_app(app, "backlog-stat", 28);
  app.footer(std::string(kFooter) + "\n" + exit_status());
  Args args;
  args.run_dir = telemetry::run_dir_from_environment().string();
  app.add_flag("--json", args.json,
               ("print one JSON document (schema rdma-interop/backlog-stat/1, or "
                ".../connections/1 with --connections); with --watch, one document per line"));
  app.add_option("--watch", args.watch,
                 "refresh every INTERVAL (default 1s; a bare number is seconds) in place until "
                 "Ctrl-C or SIGTERM, which exit 0; figures that changed are marked '*', and "
                 "rates per second follow")
      ->expected(0, 1)
      ->type_name("[INTERVAL]")
      ->transform(tools::duration_in(std::chrono::milliseconds(50), std::chrono::hours(24),
                                     tools::TimeUnit::kSeconds));
  app.add_flag("--connections", args.connections,
               ("list the message endpoints' connections and their credits (see CONNECTION "
                "COLUMNS) instead of the listeners"));
  app.add_option("--port", args.port,
                 ("only listeners on this local port; with --connections, connections with "
                  "this port at either end"))
      ->type_name("N")
      ->check(tools::integer_in(1, 65535));
  app.add_option("--pid", args.pid, ("only listeners (or connections) of this process"))
      ->type_name("N")
      ->check(tools::integer_in(1, std::numeric_limits<std::int32_t>::max()));
  app.add_option("--peer", args.peer,
                 ("with --connections: only connections to the peer its endpoint calls NAME"))
      ->type_name("NAME");
  app.add_option("--run-dir", args.run_dir,
                 ("read snapshots from DIR instead of $RDMA_INTEROP_RUN_DIR or "
                  "/run/rdma-interop (a directory, not a symbolic link to one)"))
      ->type_name("DIR")
      ->check([](const std::string& dir) {
        return dir.empty() ? std::string("an empty name is no directory") : std::string();
      });
  app.add_flag("--kernel", args.kernel,
               ("also list the kernel's RDMA CM listeners (rdma -j resource show cm_id); "
                "not with --connections"));
  if (auto status = tools::answer_documentation_request(app, argc, argv)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitShown : kExitUsage;
  }
  // `--watch` with no value: every second.
  if (app.count("--watch") > 0 && !args.watch) args.watch = 1.0;
  // Checked here rather than with CLI11's needs/excludes, whose notes clutter --help.
  if (args.connections && args.kernel) {
    std::cerr << "backlog-stat: --kernel lists the kernel's listeners; it does not combine "
                 "with --connections (the kernel publishes no credit figures)\n";
    return kExitUsage;
  }
  if (args.peer && !args.connections) {
    std::cerr << "backlog-stat: --peer filters connections: add --connections\n";
    return kExitUsage;
  }
  if (args.watch) return watch(args);
  return show_once(args);
}

}  // namespace
}  // namespace rdma_interop::backlog_stat

int main(int argc, char** argv) {
  return rdma_interop::backlog_stat::run(argc, argv);
}
