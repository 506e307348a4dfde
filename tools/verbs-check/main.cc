// verbs-check: RC error-semantics checks on one rdma_cm address, or between two nodes,
// through rdma-interop's verbs provider. This file parses the command line and prints
// results; checks.h says what each check does, isolated_run.h how it runs on one node,
// serve_run.h how the responder node of the two-node form serves it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/common/help_wrap.h"
#include "tools/verbs-check/checks.h"
#include "tools/verbs-check/isolated_run.h"
#include "tools/verbs-check/serve_run.h"
#include "core/util/json_text.h"
#include "tools/common/number_option.h"

namespace {

using namespace rdma_interop::verbs_check;
using json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

constexpr const char* kDescription =
    R"help(verbs-check - does an RDMA device keep the RC error semantics?

verbs-check runs short scenarios between two processes on one machine, through the RDMA
device that holds ADDRESS (a real HCA or RNIC, or the kernel's siw and rxe), using
rdma-interop's verbs provider (librdmacm + libibverbs). A server child listens on ADDRESS,
accepts, registers a 64 KiB region and tells the client its rkey; the client then runs the
check against it. Loopback through the device is enough: rxe and siw both serve it.

TWO NODES
The same checks run between two machines (or two devices), so that the wire, two kernels
and two devices are in the path, not one device's loopback. The responder node runs
  verbs-check --serve --address ADDRESS [--port PORT] [--check NAME]...
which serves each check's server side in turn (check i on ADDRESS:PORT+i, a forked child
each, exactly what the one-node form forks) and exits once every check was served. The
initiator node runs
  verbs-check --peer ADDRESS [--address LOCAL] [--port PORT] [--check NAME]...
which plays each check's client against the server on ADDRESS:PORT+i, connecting from LOCAL
if given (which picks the local device) or as the route decides. Give both the same --port,
--check and --timeout. Where the one-node client SIGKILLs its server (dead-peer-read,
dead-peer-bad-rkey-read, liveness-probe), the two-node client asks it to die over the
connection: the server raises SIGKILL on itself, its kernel tears down the queue pair and
the connection as for any dying process, and the client takes it for dead when the CM
reports that disconnect; then the check goes on exactly as on one node. Either node may
start first: the client retries a refused connect (nothing listens yet) until --timeout.
The client ends every check within --timeout (+15 s at worst). The serve waits up to
--timeout for each check's client and then serves it for up to --timeout; a check nobody
came for is reported as an error (after --timeout) and the serve goes on, so with no client
at all it ends within checks x --timeout. SIGTERM or SIGINT stop the serve at once, its
current server child included (exit status 0).

CHECKS (all by default, in this order; --check picks some)
  send-recv         a 4 KiB Send each way, every byte verified
  write             RDMA Write of 64 KiB into the server's region; the server verifies it
  read              RDMA Read of the server's 64 KiB region, verified
  bad-rkey-read     RDMA Read of 64 octets with a bad rkey (the region's, key byte flipped)
                    must complete with remote_access_error
  zero-length-read  a zero-length RDMA Read with that bad rkey must succeed: the rkey of a
                    zero-length Read is not checked (IB C9-88); a good Read must work after
  dead-peer-read    the server process is SIGKILLed after setup; a Read to its region must
                    end in retry_exceeded after --retry-count retries of --ack-timeout
                    (4.096 us * 2^N each), i.e. within seconds. iWARP has no retry counter
                    (TCP carries it, and the dead process's kernel closes the connection):
                    there the Read must complete flushed
  dead-peer-bad-rkey-read
                    the server is SIGKILLed; a 1-octet Read with the bad rkey (the invalid-
                    rkey liveness probe) must end in retry_exceeded: a live peer NAKs it
                    (bad-rkey-read), a dead one cannot, so the probe tells them apart
  liveness-probe    the XRC liveness probe (core/xrc, zero-length Reads every 2 x the retry
                    time, 1 retry) against the live server: every probe answered, a good
                    Read after them; then the server is SIGKILLed and the probe must find it
                    dead within its detection bound (+1 s); "got" is the verdict (dead)

Each check runs in fresh processes (a runner that plays the client, and its forked server),
so one that hangs or crashes cannot take the others down; check i listens on PORT+i.

OUTPUT
Without --json, one line per check: PASS/FAIL/ERROR, the name, expected and observed
status, and what happened. With --json, one JSON object per check and line:
  {"check":"bad-rkey-read","ok":true,"result":"pass","expected":"remote_access_error",
   "got":"remote_access_error","detail":"...","address":"10.0.2.15","port":7474,
   "uri":"verbs://10.0.2.15:7474","negotiated":{"ird":16,"ord":16},"server":"exit 0",
   "device":"rxe0","transport":"roce","elapsed_ms":41.2}
"result" is pass, fail (the device answered otherwise: "got" says how) or error (the check
could not run: no device, connection refused...); "ok" is true only for pass. With --peer
the line also has "peer" (the serve's address), "address" is the local one, and "server" is
"remote (verbs-check --serve)" or "killed by the check (die request)".

With --serve, one line per served check: SERVED or ERROR, the name, the port, how its
server ended, and the client; with --json one object per check and line:
  {"check":"dead-peer-read","port":7476,"address":"10.9.0.1","ok":true,"result":"pass",
   "expected":"killed as requested","server":"killed as requested",
   "client":"10.9.0.2:39210","detail":"...","device":"rxe0","transport":"roce",
   "elapsed_ms":2210.5}
"server" is how the server child ended: "exit 0" (served until the client left), "killed as
requested" (the client's die request), "exit 2" (no client within --timeout, or it could not
listen: "detail" says), "signal N", "killed after N s" (overran), "stopped" (SIGTERM/SIGINT);
"result" is pass when it ended as "expected" says, else error.
)help";

constexpr const char* kFooter = R"(
EXAMPLES
  verbs-check --address 10.0.2.15 --port 7100                  (all checks, siw0 in the guest)
  verbs-check --address 10.9.0.1 --check dead-peer-read --json (rxe0)
  verbs-check --address 10.9.0.1 --check bad-rkey-read --check zero-length-read
  verbs-check --list

  Two nodes (responder 198.18.4.2, initiator 198.18.4.1; siw0 on both):
    node2$ verbs-check --serve --address 198.18.4.2 --port 7500 --json
    node1$ verbs-check --peer 198.18.4.2 --address 198.18.4.1 --port 7500 --json
  Two devices in one machine (rxe0 on 10.9.0.1, rxe1 on 10.9.0.2):
    verbs-check --serve -a 10.9.0.1 -p 7600 &  verbs-check --peer 10.9.0.1 -a 10.9.0.2 -p 7600

EXIT CODES
  0  every check passed (--serve: every check's server ended as expected, or a
     SIGTERM/SIGINT stopped it)
  1  a check failed or could not run (--serve: a server did not end as expected, e.g. no
     client came within --timeout)
  2  bad arguments)";

// CLI11 does not wrap option help; keep it within the column like rdma-probe does.
std::string wrap(std::string_view text) { return rdma_interop::tools::wrap_help(text, 56); }

const CheckInfo* find_check(const std::string& name) {
  for (const auto& c : kChecks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

void print_human(const json& r) {
  const std::string result = r["result"].get<std::string>();
  const std::string tag = result == "pass" ? "PASS " : result == "fail" ? "FAIL " : "ERROR";
  std::string got = r["got"].is_null() ? "-" : r["got"].get<std::string>();
  std::printf("%s %-17s expected %-20s got %-20s (%.0f ms)\n", tag.c_str(),
              r["check"].get<std::string>().c_str(), r["expected"].get<std::string>().c_str(),
              got.c_str(), r["elapsed_ms"].get<double>());
  if (!r["detail"].get<std::string>().empty()) {
    std::printf("      %s\n", r["detail"].get<std::string>().c_str());
  }
  std::fflush(stdout);
}

void print_served(const json& r) {
  const std::string tag = r["ok"].get<bool>() ? "SERVED" : "ERROR ";
  const std::string client = r["client"].is_null() ? "no client" : r["client"].get<std::string>();
  std::printf("%s %-23s port %-5d server %-20s %s (%.0f ms)\n", tag.c_str(),
              r["check"].get<std::string>().c_str(), r["port"].get<int>(),
              r["server"].get<std::string>().c_str(), client.c_str(),
              r["elapsed_ms"].get<double>());
  if (!r["ok"].get<bool>() && !r["detail"].get<std::string>().empty()) {
    std::printf("       %s\n", r["detail"].get<std::string>().c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "verbs-check");
  app.footer(kFooter);
  app.get_formatter()->column_width(30);
  Config config;
  int port = 7471;
  double timeout_s = 15.0;
  std::vector<std::string> names;
  bool as_json = false;
  bool list = false;
  bool serve = false;
  app.add_option("-a,--address", config.address,
                 wrap("This node's rdma_cm address: an IPv4 or IPv6 address held by an RDMA "
                      "device's network interface (10.0.2.15 for siw0 in the kernel guest, "
                      "10.9.0.1 for rxe0). The servers listen on it (one node, --serve); "
                      "with --peer the client connects from it (optional there: without it "
                      "the route picks the local device)"))
      ->type_name("ADDRESS");
  auto* serve_flag = app.add_flag(
      "--serve", serve,
      wrap("Two nodes, the responder: serve each check's server side, one after another, for "
           "a verbs-check --peer on another node (see TWO NODES)"));
  app.add_option("--peer", config.peer,
                 wrap("Two nodes, the initiator: run each check's client against the "
                      "verbs-check --serve listening on ADDRESS (see TWO NODES)"))
      ->type_name("ADDRESS")
      ->excludes(serve_flag);
  app.add_option("-p,--port", port, wrap("First port: check i listens on PORT+i (default 7471)"))
      ->type_name("PORT")
      ->check(rdma_interop::tools::integer_in(1, 65535 - 16));
  app.add_option("-c,--check", names, wrap("Run only this check; repeatable (see CHECKS)"))
      ->type_name("NAME");
  app.add_option("-t,--timeout", timeout_s,
                 wrap("Seconds one check may take, setup included (default 15); --serve: "
                      "how long each check's server waits for its client"))
      ->type_name("SECONDS")
      ->check(rdma_interop::tools::number_in(1.0, 600.0, "seconds"));
  app.add_option("--ack-timeout", config.ack_timeout,
                 wrap("dead-peer-read: the client's ACK timeout exponent, 4.096 us * 2^N "
                      "(default 16: 268 ms)"))
      ->type_name("N")
      ->check(rdma_interop::tools::integer_in(1, 31));
  app.add_option("--retry-count", config.retry_count,
                 wrap("dead-peer-read: transport retries before retry_exceeded (default 2)"))
      ->type_name("N")
      ->check(rdma_interop::tools::integer_in(0, 7));
  app.add_flag("--json", as_json, wrap("One JSON object per check and line instead of text"));
  app.add_flag("--list", list, wrap("List the checks and exit"));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (list) {
    for (const auto& c : kChecks) {
      std::printf("%-17s %s\n", std::string(c.name).c_str(), std::string(c.summary).c_str());
    }
    return kExitOk;
  }
  if (config.address.empty() && config.peer.empty()) {
    std::fprintf(stderr, "verbs-check: error: --address ADDRESS is required (see --help)\n");
    return kExitUsage;
  }
  std::vector<const CheckInfo*> selected;
  for (const auto& name : names) {
    const CheckInfo* c = find_check(name);
    if (c == nullptr) {
      std::string known;
      for (const auto& k : kChecks) known += (known.empty() ? "" : ", ") + std::string(k.name);
      std::fprintf(stderr, "verbs-check: error: unknown check '%s' (checks: %s)\n", name.c_str(),
                   known.c_str());
      return kExitUsage;
    }
    selected.push_back(c);
  }
  if (selected.empty()) {
    for (const auto& c : kChecks) selected.push_back(&c);
  }
  config.port = static_cast<std::uint16_t>(port);
  config.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));

  bool all_ok = true;
  if (serve) {
    install_stop_handlers();
    std::size_t served = 0;
    for (const CheckInfo* check : selected) {
      if (g_stop_signal != 0) break;
      const auto index = static_cast<std::uint16_t>(check - kChecks);
      const json r = serve_check(config, *check, static_cast<std::uint16_t>(config.port + index));
      all_ok = all_ok && r["ok"].get<bool>();
      ++served;
      if (as_json) {
        std::cout << rdma_interop::json_text(r) << std::endl;
      } else {
        print_served(r);
      }
    }
    if (g_stop_signal != 0) {
      std::fprintf(stderr, "verbs-check: stopped by signal %d after %zu of %zu check(s)\n",
                   static_cast<int>(g_stop_signal), served, selected.size());
      return kExitOk;
    }
    return all_ok ? kExitOk : kExitFailed;
  }
  for (const CheckInfo* check : selected) {
    const auto index = static_cast<std::uint16_t>(check - kChecks);
    json r = run_isolated(config, *check, static_cast<std::uint16_t>(config.port + index));
    all_ok = all_ok && r["ok"].get<bool>();
    if (as_json) {
      std::cout << rdma_interop::json_text(r) << std::endl;
    } else {
      print_human(r);
    }
  }
  return all_ok ? kExitOk : kExitFailed;
}
