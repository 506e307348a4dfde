// verbs-check: RC error-semantics checks on one rdma_cm address, or between two nodes,
// through rdma-interop's verbs provider. This file parses the command line and prints
// results; checks.h says what each check does, isolated_run.h how it runs on one node,
// serve_run.h how the responder node of the two-node form serves it.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/transport/provider_uri.h"
#include "core/util/json_text.h"
#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/tool_docs.h"
#include "tools/verbs-check/checks.h"
#include "tools/verbs-check/isolated_run.h"
#include "tools/verbs-check/serve_run.h"

namespace {

using namespace rdma_interop::verbs_check;
using json = nlohmann::ordered_json;
namespace tools = rdma_interop::tools;

constexpr int kExitOk = tools::kExitOk;
constexpr int kExitFailed = tools::kExitFailed;
constexpr int kExitUsage = tools::kExitUsage;
constexpr std::uint16_t kDefaultPort = 7471;

constexpr const char* kDescription =
    R"help(verbs-check - does an RDMA device keep the RC error semantics?

  verbs-check [OPTIONS] verbs://ADDRESS[:PORT]

verbs-check runs short scenarios between two processes on one machine, through the RDMA
device that holds ADDRESS (a real HCA or RNIC, or the kernel's siw and rxe), using
rdma-interop's verbs provider (librdmacm + libibverbs). A server child listens on ADDRESS,
accepts, registers a 64 KiB region and tells the client its rkey; the client then runs the
check against it. Loopback through the device is enough: rxe and siw both serve it. Check i
uses port PORT+i (PORT: 7471 when the URI has none).

TWO NODES
The same checks run between two machines (or two devices), so that the wire, two kernels
and two devices are in the path, not one device's loopback. The responder node runs
  verbs-check --serve verbs://ADDRESS[:PORT] [--check NAME]...
which serves each check's server side in turn (check i on ADDRESS:PORT+i, a forked child
each, exactly what the one-node form forks) and exits once every check was served. The
initiator node runs
  verbs-check --peer verbs://ADDRESS[:PORT][?source=LOCAL] [--check NAME]...
which plays each check's client against the server on ADDRESS:PORT+i, connecting from LOCAL
if given (which picks the local device; a URI of this node's address does the same) or as
the route decides. Give both the same PORT, --check and --timeout. Where the one-node
client SIGKILLs its server (dead-peer-read, dead-peer-bad-rkey-read, liveness-probe), the
two-node client asks it to die over the
connection: the server raises SIGKILL on itself, its kernel tears down the queue pair and
the connection as for any dying process, and the client takes it for dead when the CM
reports that disconnect; then the check goes on exactly as on one node. Either node may
start first: the client retries a refused connect (nothing listens yet) until --timeout.
The client ends every check within --timeout (+15 s at worst). The serve waits up to
--timeout for each check's client and then serves it for up to --timeout; a check nobody
came for is reported as an error (after --timeout) and the serve goes on, so with no client
at all it ends within checks x --timeout. SIGTERM or SIGINT stop the serve at once, its
current server child included (exit status 0: a server's normal end), and stop the client
at once too: the check under way is killed and reported as stopped, the checks after it are
not run, and the exit status is 1.

The older form --address ADDRESS --port PORT (and --peer ADDRESS) still works, for scripts
written before the URI; the URI is the one to use.

CHECKS (all by default, in this order; --check picks some)
  send-recv         a 4 KiB Send each way, every byte verified
  write             RDMA Write of 64 KiB into the server's region; the server verifies it
  read              RDMA Read of the server's 64 KiB region, verified
  sq-overflow       one chain of 64-octet Writes four times the send queue the device
                    granted (64 asked; ibv_create_qp may grant more): what fits (at least
                    the granted depth) must be posted and complete, the rest be refused
                    (ibv_post_send(3): an errno return, *bad_wr at the first not posted) and
                    never complete; a device that took them all passes as all_posted
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
  liveness-probe    the XRC liveness probe (zero-length Reads every 2 x the retry time, 1
                    retry) against the live server: every probe answered, a good
                    Read after them; then the server is SIGKILLed and the probe must find it
                    dead within its detection bound (+1 s); "got" is the verdict (dead)

Each check runs in fresh processes (a runner that plays the client, and its forked server),
so one that hangs or crashes cannot take the others down; check i listens on PORT+i.

OUTPUT
Without --json, one line per check: PASS/FAIL/ERROR, the name, expected and observed
status, and what happened. With --json, one JSON object per check and line:
  {"check":"bad-rkey-read","ok":true,"result":"pass","expected":"remote_access_error",
   "got":"remote_access_error","detail":"...","address":"10.0.2.15","port":7475,
   "uri":"verbs://10.0.2.15:7475","negotiated":{"ird":16,"ord":16},"server":"exit 0",
   "device":"rxe0","transport":"roce","elapsed_ms":41.2}
"result" is pass, fail (the device answered otherwise: "got" says how) or error (the check
could not run: no device, connection refused...); "ok" is true only for pass. With --peer
the line also has "peer" (the serve's address), "address" is the local one, and "server" is
"remote (verbs-check --serve)" or "killed by the check (die request)".

With --serve, one line per served check: SERVED or ERROR, the name, the port, how its
server ended, and the client; with --json one object per check and line:
  {"check":"dead-peer-read","port":7477,"address":"10.9.0.1","ok":true,"result":"pass",
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
  verbs-check verbs://10.0.2.15:7100                           (all checks, siw0 in the guest)
  verbs-check verbs://10.9.0.1 --check dead-peer-read --json   (rxe0)
  verbs-check verbs://10.9.0.1 --check bad-rkey-read --check zero-length-read
  verbs-check --list

  Two nodes (responder 198.18.4.2, initiator 198.18.4.1; siw0 on both):
    node2$ verbs-check --serve verbs://198.18.4.2:7500 --json
    node1$ verbs-check --peer verbs://198.18.4.2:7500?source=198.18.4.1 --json
  Two devices in one machine (rxe0 on 10.9.0.1, rxe1 on 10.9.0.2):
    verbs-check --serve verbs://10.9.0.1:7600 &
    verbs-check --peer verbs://10.9.0.1:7600?source=10.9.0.2
)";

std::string exit_status() {
  return tools::exit_status_section(
      {{tools::kExitOk,
        "every check passed; --serve: every check's server ended as expected, or SIGTERM or "
        "SIGINT stopped the serve (its normal end); --list"},
       {tools::kExitFailed,
        "a check failed or could not run (--serve: a server did not end as expected, e.g. no "
        "client came within --timeout); or SIGINT/SIGTERM stopped the checks (the results so "
        "far are printed, the check under way as stopped)"},
       {tools::kExitUsage, ""}});
}

// Where the checks run, from the URIs and the older --address/--port/--peer forms.
struct Where {
  std::string uri;          // positional: this node's address, [first port]
  std::string peer;         // --peer: the serve node, as a URI or (older form) an address
  std::string address;      // --address (older form)
  std::optional<int> port;  // --port (older form)
};

// Fills config.address, config.peer and config.port; the error is a sentence for stderr.
std::optional<std::string> resolve_where(const Where& w, Config& config) {
  std::optional<std::uint16_t> port;
  auto take_port = [&](std::uint16_t p, const char* from) -> std::optional<std::string> {
    if (p == 0) return std::nullopt;
    if (port && *port != p) {
      return std::string("two first ports: ") + std::to_string(*port) + " and " +
             std::to_string(p) + " (" + from + ")";
    }
    port = p;
    return std::nullopt;
  };
  auto parse = [](const std::string& text, const char* what)
      -> rdma_interop::Expected<rdma_interop::transport::ProviderUri, std::string> {
    auto uri = rdma_interop::transport::parse_provider_uri(text);
    if (!uri) return rdma_interop::unexpected(std::string(what) + " " + text + ": " + uri.error());
    if (uri->scheme != "verbs") {
      return rdma_interop::unexpected(std::string(what) + " " + text +
                                      ": verbs-check runs over rdma-core: a verbs:// URI");
    }
    return uri;
  };
  if (!w.uri.empty()) {
    auto uri = parse(w.uri, "URI");
    if (!uri) return uri.error();
    if (!uri->query.empty()) {
      return "URI " + w.uri +
             ": no options here (--ack-timeout and --retry-count set the RC "
             "timing; source= belongs to --peer)";
    }
    if (!w.address.empty() && w.address != uri->host) {
      return "--address " + w.address + " and the URI " + w.uri + " name two addresses";
    }
    config.address = uri->host;
    if (auto e = take_port(uri->port, "the URI")) return e;
  } else {
    config.address = w.address;
  }
  if (!w.peer.empty()) {
    if (w.peer.find("://") == std::string::npos) {
      config.peer = w.peer;  // the older form: an address; --port names the port
    } else {
      auto uri = parse(w.peer, "--peer");
      if (!uri) return uri.error();
      config.peer = uri->host;
      if (auto e = take_port(uri->port, "--peer")) return e;
      for (const auto& [key, value] : uri->query) {
        if (key != "source") {
          return "--peer " + w.peer +
                 ": only source= is an option here (--ack-timeout and "
                 "--retry-count set the RC timing)";
        }
        if (!config.address.empty() && config.address != value) {
          return "--peer " + w.peer + ": source=" + value + " and " + config.address +
                 " name two local addresses";
        }
        config.address = value;
      }
    }
  }
  if (w.port) {
    if (auto e = take_port(static_cast<std::uint16_t>(*w.port), "--port")) return e;
  }
  config.port = port.value_or(kDefaultPort);
  if (config.port > 65535 - std::size(kChecks)) {
    return "first port " + std::to_string(config.port) + ": check i uses PORT+i, so at most " +
           std::to_string(65535 - std::size(kChecks));
  }
  if (config.address.empty() && config.peer.empty()) {
    return "verbs://ADDRESS[:PORT] is required (the address of an RDMA device of this node; "
           "see --help)";
  }
  return std::nullopt;
}

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
  tools::setup_tool_app(app, "verbs-check", 30);
  app.footer(std::string(kFooter) + "\n" + exit_status());
  Config config;
  Where where;
  double timeout_s = 15.0;
  std::vector<std::string> names;
  bool as_json = false;
  bool list = false;
  bool serve = false;
  app.add_option("uri", where.uri,
                 "This node's rdma_cm address and the first port: verbs://ADDRESS[:PORT], "
                 "ADDRESS an IPv4 or IPv6 address held by an RDMA device's network interface "
                 "(10.0.2.15 for siw0 in the kernel guest, 10.9.0.1 for rxe0), check i on "
                 "PORT+i (default 7471). The servers listen on it (one node, --serve); with "
                 "--peer the client connects from it (optional there)")
      ->type_name("URI");
  auto* serve_flag = app.add_flag(
      "--serve", serve,
      "Two nodes, the responder: serve each check's server side, one after another, for a "
      "verbs-check --peer on another node (see TWO NODES)");
  app.add_option("--peer", where.peer,
                 "Two nodes, the initiator: run each check's client against the verbs-check "
                 "--serve at verbs://ADDRESS[:PORT][?source=LOCAL] (see TWO NODES)")
      ->type_name("URI")
      ->excludes(serve_flag);
  app.add_option("--address", where.address,
                 "Deprecated: this node's address, as the URI's ADDRESS (the older form)")
      ->type_name("ADDRESS");
  app.add_option("--port", where.port, "Deprecated: the first port, as the URI's PORT")
      ->type_name("PORT")
      ->check(tools::integer_in(1, 65535 - static_cast<std::int64_t>(std::size(kChecks))));
  app.add_option("--check", names, "Run only this check; repeatable (see CHECKS)")
      ->type_name("NAME");
  app.add_option("-t,--timeout", timeout_s,
                 "How long one check may take, setup included (default 15s; a bare number is "
                 "seconds); --serve: how long each check's server waits for its client")
      ->type_name("DURATION")
      ->transform(tools::duration_in(std::chrono::seconds(1), std::chrono::minutes(10),
                                     tools::TimeUnit::kSeconds));
  app.add_option("--ack-timeout", config.ack_timeout,
                 "dead-peer-read: the client's ACK timeout exponent, 4.096 us * 2^N (default "
                 "16: 268 ms)")
      ->type_name("N")
      ->check(tools::integer_in(1, 31));
  app.add_option("--retry-count", config.retry_count,
                 "dead-peer-read: transport retries before retry_exceeded (default 2)")
      ->type_name("N")
      ->check(tools::integer_in(0, 7));
  app.add_flag("--json", as_json, "One JSON object per check and line instead of text");
  app.add_flag("--list", list, "List the checks and exit");

  if (auto status = tools::answer_documentation_request(app, argc, argv)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (list) {
    for (const auto& c : kChecks) {
      std::printf("%-17s %s\n", std::string(c.name).c_str(), std::string(c.summary).c_str());
    }
    return kExitOk;
  }
  if (auto why = resolve_where(where, config)) {
    std::fprintf(stderr, "verbs-check: error: %s\n", why->c_str());
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
  config.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));

  // SIGINT/SIGTERM stop the serve and the checks alike, between or during checks (the child
  // processes are killed); this process has no threads, its waits poll the flag.
  install_stop_handlers();
  bool all_ok = true;
  if (serve) {
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
  std::size_t ran = 0;
  for (const CheckInfo* check : selected) {
    if (g_stop_signal != 0) break;
    const auto index = static_cast<std::uint16_t>(check - kChecks);
    json r = run_isolated(config, *check, static_cast<std::uint16_t>(config.port + index));
    all_ok = all_ok && r["ok"].get<bool>();
    ++ran;
    if (as_json) {
      std::cout << rdma_interop::json_text(r) << std::endl;
    } else {
      print_human(r);
    }
  }
  if (g_stop_signal != 0) {
    // Cut short: the results so far are printed (the check under way as stopped).
    std::fprintf(stderr, "verbs-check: stopped by signal %d after %zu of %zu check(s)\n",
                 static_cast<int>(g_stop_signal), ran, selected.size());
    return kExitFailed;
  }
  return all_ok ? kExitOk : kExitFailed;
}
