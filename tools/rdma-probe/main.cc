// rdma-probe: an iWARP responder and initiator for interop testing.
//
// This file only parses the command line (CLI11) and dispatches; each subcommand lives in
// its own file. Every parse error is a sentence on stderr and exit status 2.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/common/duration_option.h"
#include "tools/common/exit_status.h"
#include "tools/common/help_formatter.h"
#include "tools/common/number_option.h"
#include "tools/common/retry_option.h"
#include "tools/common/tool_docs.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"

namespace {

using namespace rdma_interop::probe;
using rdma_interop::tools::duration_in;
using rdma_interop::tools::exit_status_section;
using rdma_interop::tools::integer_in;
using rdma_interop::tools::TimeUnit;
using rdma_interop::tools::whole_duration_in;
using std::chrono::milliseconds;
namespace tools = rdma_interop::tools;

constexpr const char* kDescription =
    R"(rdma-probe - meet another iWARP stack: find out what it speaks, check that it interoperates.

  rdma-probe [--json] [--timeout T] tcp://HOST:PORT     what does this peer speak?
  rdma-probe serve | connect | personalities ...        the interop responder and initiator
  rdma-probe devices [--json]                           this node's RDMA devices: kind, driver,
                                                        ports, addresses, limits, capabilities
  rdma-probe xrc [--simulate SEED]                      XRC on this node's devices; the lifetime
                                                        engine on a simulated node

Given only a URI, rdma-probe probes the peer ('rdma-probe probe --help' says how and what).

rdma-probe speaks MPA connection setup (RFC 5044, RFC 6581 revision 2 with IRD/ORD and the
peer-to-peer ready-to-receive), then DDP/RDMAP (RFC 5041, RFC 5040) over a userspace iWARP
provider on real TCP sockets (tcp://). Each side takes a personality: a JSON file naming the
MPA choices of a known stack (siw, cxgb4 and its modes, irdma, qedr, erdma, freebsd-cxgbe,
rev1-only, never-rtr, strict; 'rdma-probe personalities' lists them) or your own.
With verbs:// URIs the same exchange runs over rdma-core (librdmacm + libibverbs) on a real
or soft RDMA device (siw, rxe): the kernel then does MPA, and the personality contributes
its IRD/ORD and private data only.

Both roles run the same interop exchange on every connection: Sends carrying JSON messages,
an RDMA Read and RDMA Writes of 64 KiB regions in both directions, every byte checked
against a seeded pattern, then an orderly disconnect. Each command prints its results for
people, and as JSON with --json.

Durations take a unit: 500ms, 5s, 2m (us, ms, s, m, h); a bare number is in the unit the
option names in its help, the one it always had.

SIGINT and SIGTERM stop every command that runs for a while with its partial result printed
(a probe, a connect, and serve, whose normal end it is).
)";

constexpr const char* kMainFooter = R"(
Run 'rdma-probe COMMAND --help' for each command's options, output and examples, or read
'man rdma-probe'. Personality files: <prefix>/share/rdma-interop/personalities/README.md.
)";

constexpr const char* kServeDescription =
    R"(Listen for MPA connections and answer them as the given personality.

Requests are taken one at a time (--accept-delay makes that decision slow on purpose) and
served at once, each on its own thread, up to --backlog of them (at most 64); further
requests wait in the listener's backlog, holding their slot. Each is accepted (MPA Reply, and
in peer-to-peer mode the wait for the initiator's RTR), the interop exchange runs as the
responder, and one line reports it. Before the exchange, {"op":"echo"} Sends are sent
back unchanged (rdma-probe URI times Send round trips with them). A connection that stalls is
cut off by the personality's MPA timeouts, by --idle-timeout (no word from the peer) and by
--exchange-timeout: a few silent peers cannot keep others out. serve runs until SIGTERM or
SIGINT (it stops within a second, also in the middle of a connection), or after
--max-connections / --once.

Output, one line per event on stdout, flushed at once: a log for people,
  12:00:01 listening on 198.18.0.2:7174 as siw (pid 123)
  12:00:03 connection from 198.18.0.1:40122: ok, revision 2, peer-to-peer rtr read, crc,
           ird 16 ord 16, 196608 bytes verified (3.2 ms)
  12:00:04 connection from 198.18.0.1:40124: FAILED setup no_matching_rtr: ... (Terminate
           layer 2 etype 0 code 7) (0.8 ms)
  12:00:09 counters: overflow reject, backlog 16, pending 0, high_water 1, requests 2, ...
or with --json one JSON object per line, for programs:
  {"event":"listening","address":"198.18.0.2:7174","personality":"siw","pid":123}
  {"event":"connection","peer":"198.18.0.1:40122","ok":true,"negotiated":{...},
   "initiator_view":{...},"exchange":{"ok":true,"bytes_verified":196608,"steps":[...]},
   "error":null,"elapsed_ms":3.2}
  a failed setup: "ok":false,"negotiated":null,"exchange":null,
   "error":{"kind":"setup","failure":"no_matching_rtr","detail":"...",
            "terminate":{"layer":2,"etype":0,"code":7}}
"negotiated" is this side's view: {"revision","crc","markers_to_peer","markers_from_peer",
"enhanced","peer_to_peer","rtr":"send"|"write"|"read"|null,"ird","ord","peer_ird","peer_ord"}.
With --backlog-events, a slot taken or freed:
  {"event":"backlog","type":"backlog_added"|"backlog_removed","reason":"request"|"waited"|
   "accepted"|"rejected"|"expired"|"aborted","peer":"...","pending":3}
At exit, the listener's backlog counters (as backlog-stat --json shows them):
  {"event":"counters","overflow":"reject","backlog":16,"pending":0,"high_water":16,
   "requests":...,"accepted":...,"rejected_by_app":...,"overflow_rejected":...,...}
Diagnostics go to stderr.
)";

constexpr const char* kServeFooter = R"(
EXAMPLES
  rdma-probe serve --listen tcp://198.18.0.2:7174 --personality siw
  rdma-probe serve --listen tcp://127.0.0.1:0 --personality cxgb4 --once
      (port 0: the kernel picks one; the "listening" line tells which)
  rdma-probe serve --listen tcp://0.0.0.0:7174 --personality ./my-peer.json
  rdma-probe serve --list-personalities
  rdma-probe serve --listen verbs://10.0.2.15:7174 --personality siw --once
      (rdma-core: the RDMA device holding 10.0.2.15, e.g. siw0 or rxe0)
  rdma-probe serve --listen tcp://127.0.0.1:7174 --personality siw --json | jq .event
)";

constexpr const char* kConnectDescription =
    R"(Connect to a responder as the given personality, run the interop exchange, disconnect.

The run - TCP connect, MPA setup (including a revision-1 retry when the personality allows
it), the exchange and the disconnect - must finish within --timeout. SIGINT or SIGTERM stops
it, with the report so far ("error" kind "interrupted"). Without --json a summary is printed;
with --json one object:
  {"schema":"rdma-interop/connect/1","ok":true,"uri":"tcp://...","personality":"cxgb4",
   "negotiated":{...},"responder_view":{...}|null,"fell_back_to_revision1":false,
   "exchange":{"ok":true,"bytes_verified":196608,"steps":[{"name":"...","ok":true}]},
   "error":null|{"kind":"setup|unreachable|timeout|exchange|interrupted",
                 "failure":"<cm failure name>",
                 "detail":"...","terminate":{...}|null},"elapsed_ms":12.3}
"failure" names the MPA setup failure (no_matching_rtr, reply_timeout, peer_rejected,
revision_unsupported, ...) or how the connection broke during the exchange
(connection_closed, connection_reset, terminate_received), and is null when the exchange
failed on a connection that stayed up (a bad message, a byte that differs); "terminate" is
the Terminate (layer, etype, code) sent or received. A personality that never sends its RTR
(never-rtr) stays silent after connecting and reports the responder's verdict.
)";

constexpr const char* kConnectFooter = R"(
EXAMPLES
  rdma-probe connect tcp://198.18.0.2:7174 --personality cxgb4
  rdma-probe connect tcp://127.0.0.1:7174 --personality rev1-only --json --timeout 5
  rdma-probe connect tcp://lab-b:7174 --personality mine --personality-dir ./personalities
  rdma-probe connect verbs://10.0.2.15:7174 --personality siw --json
  rdma-probe connect tcp://lab-b:7174 -p siw --retries 5 --retry-backoff 200ms
)";

constexpr const char* kProbeDescription =
    R"(Find out what an iWARP peer speaks, by connecting to it several times with different offers.

The first question about a new box at an interop event. Each probe is one connection whose
MPA Request differs from a plain one in the thing being asked; what came back is the
evidence. The report has one line per capability, with a verdict:
  iWARP (MPA) peer                 its Reply to a plain revision-2 Request (then, if refused,
                                   one asking for peer-to-peer, revision 1, erdma's 129)
  MPA revisions answered           1, 2, or erdma's 129; a revision-2 Request to a revision-1
                                   peer: answered in revision 1 (RFC 5044 s7.1), reset or
                                   closed (then whether an initiator that retries in revision
                                   1 gets through)
  RTR in revision 1                a zero-length Read first, a Write first: iw_cxgb4 waits for
                                   its own RTR even in revision 1
  A newer revision (3)             answered in revision 2, reset or closed
  Peer-to-peer mode, RTR types     RFC 6581: accepted, declined, or required (a revision-2
                                   Request without it refused: irdma); each RTR type offered
                                   alone; the one picked from all; preference; a Reply naming
                                   several types (qed) or its own type whatever is offered
                                   (iw_cxgb4)
  Waits for the RTR                the RTR withheld for --rtr-wait: does the peer send first?
  IRD/ORD                          what it grants; strict (an ORD above its IRD fails, MPA
                                   code 0x06) or relaxed (the initiator lowers its ORD),
                                   asked with ORD 1 and again with ORD 0x3ffe; whether IRD
                                   0x3fff means "no IRD/ORD negotiation" to it (irdma)
  CRC32c                           required (sets C unasked), optional, or refused
  Markers                          asked for in its Reply; sent when asked, or refused
  Largest private data             PD_Length answered: 512, 256 (the Linux limit), or found
                                   by a binary search between
  Reserved Request bits            0x03: ignored (RFC 5044), echoed, or rejected; the vendor
                                   bits 0x0c (siw's GSO bit, Chelsio's FPDU-size proposal)
  How it refuses                   MPA Reject (with its private data), a Terminate after the
                                   Reply, a reset, a close, silence; a listener overflow
                                   marker when one was seen
  Round trips                      a zero-length RDMA Read (16 of them), a 64-octet Send
                                   echoed by the peer (rdma-probe serve answers echoes)
  Terminate codes                  for an RDMA Write and an RDMA Read naming an unknown STag,
                                   and going past the end of a region the peer advertised
                                   (rdma-probe serve advertises one; other peers: not tested)
  Still answers a plain Request    asked again after the MPA probes: a peer that broke
                                   during the probe fails this row, and the run exits 1
Verdicts: ok (what the RFCs ask for), note (allowed, limits peers), warn (a known interop
hazard), fail (against the RFCs), n/a, not_tested (the WHY section says why).

The report ends with STACK: the known stack the peer behaves like. Every personality found
(rdma-probe personalities, plus --personality-dir) is compared trait by trait with what the
probe saw: a score per personality and the traits that differ; "behaves like X" when one
matches every trait, "behaves like X or Y" when several do (they differ only in what cannot be
seen from outside, e.g. cxgb4-rev1 and freebsd-cxgbe), "unknown stack, closest: X" when none
does. IRD and ORD are compared but never decide (the application chooses them).

Peer-to-peer offers are read on a raw socket and closed after the Reply, so an RTR type
picked outside the offer never draws a Terminate from the probe before any RTR (kernel siw
picks Write for a Send-only offer, and iw_cm crashes on the Terminate that follows).

The probe never floods: one connection at a time, at least 20 ms apart, each bounded by
--timeout, at most --max-connections (about 30 against a well-behaved peer). SIGINT or
SIGTERM ends it after the connection under way: the report so far is printed, the probes
not made are not_tested. Over verbs://
the kernel negotiates MPA, so only the connection-level rows are probed there.

With --json, one object (schema rdma-interop/probe/2):
  {"schema":"rdma-interop/probe/2","uri":"tcp://...","outcome":"probed"|"unreachable"|
   "not_iwarp"|"rejected","detail":"...","stopped_by_signal":false (true: cut short, the
   outcome is only what the probes before the signal found),"connections":23,"elapsed_ms":812.4,
   "capabilities":[{"id":"crc","title":"CRC32c","value":"optional: ...","verdict":"ok",
                    "why":"","data":{"crc":"optional"},
                    "evidence":[{"offered":"MPA Request rev 2 CRC ...","came_back":"..."}]}],
   "responder_policy":{"name":"probed-198.18.0.2-7174","description":"...",
                       "mpa":{"revision":2,"crc":"optional","markers_wanted":false,
                              "markers_supported":false,"peer_to_peer":"when-asked",
                              "rtr_offer":["write","read"],"rtr_accepted":["write","read"],
                              "rtr_preference":["write","read"],"rtr_reply":"chosen",
                              "no_common_rtr":"propose","rtr_in_revision1":false,"ird":16,
                              "ord":16,"strict_ird_ord":false,"private_data_limit":256,
                              "reject_reserved_bits":false,"on_newer_revision":"close",
                              "refuse_with":"reject","on_malformed_frame":"close",
                              "echo_reserved_bits":true,"ird_ord_sentinel":false},
                       "private_data":"siw"},
   "traits":{"revision":2,"newer_revision":"close","crc":"optional",...,"rtr_send":"write",
             "rtr_write":"write","rtr_read":"read","rtr_all":"write",...},
   "fingerprint":{"verdict":"known","behaves_like":["siw"],"closest":"siw",
                  "summary":"behaves like siw (21 of 21 traits match) ...",
                  "matches":[{"name":"siw","source":"drivers/infiniband/sw/siw/siw_cm.c ...",
                              "matched":21,"compared":21,"score":1.0,"differs":[],
                              "settings_differ":[]},...]}}
"responder_policy" is a personality file (rdma-probe personalities --json): save it and
`rdma-probe serve --personality ./saved.json` replays the peer as a responder; a key is null
where it could not be found out (the toolkit's default when loaded); "traits" is what the
fingerprint compared, each trait with the value the peer showed; in
"fingerprint", "verdict" is known, ambiguous or unknown, and each match lists the traits that
differ ("peer" observed, "personality" expected). Schema /2 differs from /1 in
responder_policy (a personality file instead of a flat object) and adds traits and
fingerprint. Capability ids: iwarp, mpa_revisions, revision2_to_revision1, rtr_revision1,
newer_revision, peer_to_peer, rtr_types, rtr_choice, rtr_wait, ird_ord, ird_ord_check, crc,
markers, private_data, reserved_bits, extension_bits, rtt_read0, rtt_send64,
terminate_write_invalid_stag, terminate_read_invalid_stag, terminate_write_out_of_bounds,
terminate_read_out_of_bounds, still_answering, rejects. New fields may be added; the schema
version changes when a field changes meaning.
)";

constexpr const char* kProbeFooter = R"(
EXAMPLES
  rdma-probe tcp://198.18.0.2:7174
  rdma-probe --json tcp://lab-b:7174 | python3 -m json.tool
  rdma-probe --evidence --timeout 5 tcp://127.0.0.1:2000     (each probe's offer and answer)
  rdma-probe probe verbs://10.0.2.15:7174                    (through rdma-core)
)";

constexpr const char* kListDescription =
    R"(List the personalities --personality can name.

Each entry gives the name (what --personality takes: the file's "name", which may differ from
its file name), its description, the source it was read from (the kernel file and functions,
and the version) and the file it comes from. A near miss of a name gets "did you mean".
Directories searched, first match of a name wins:
--personality-dir, $RDMA_INTEROP_PERSONALITY_DIR (':'-separated),
<prefix>/share/rdma-interop/personalities, and for a tool run from its build tree the
personalities of its source tree.
)";

constexpr const char* kListFooter = R"(
EXAMPLES
  rdma-probe personalities
  rdma-probe personalities --json | python3 -m json.tool
)";

constexpr const char* kXrcDescription =
    R"(XRC receive-side lifetime: which devices have XRC, and what the lifetime engine does.

Without --simulate: for each RDMA device (or each --device), whether it has XRC, asked two
ways: the IBV_DEVICE_XRC capability flag, and a real ibv_open_xrcd on a scratch file with
O_CREAT. siw and rxe answer "not supported" (EOPNOTSUPP); XRC needs an HCA (mlx5, ...).

With --simulate SEED: runs the XRC lifetime engine on a receive node of the
deterministic simulated IB fabric, through a seeded random life: processes opening and
closing shared domains and target QPs and dying, remote senders sending, dying and
disconnecting, paths failing and migrating (APM), partitions, a node crash. A checker holds
the engine to its guarantees (a target QP is never reaped while a process holds it, while
its sender answers, or during a migration and its grace; a dead sender's is reaped within
the detection bound; nothing leaks). It prints the node's domains, target QPs, references
and probe state at its busiest, the counters and the verdict. The same seed gives the same
run (the trace hash says so): a failing seed from the test suite replays here.

Table columns: REFS lists process:references; STATE is the sender's probe verdict (alive,
suspect, dead, or gone when it disconnected); FAILS the probes failed in a row; PROBES
issued/answered/failed/excused (excused: failed during a migration or its grace).
With --json, one object: {"schema":"rdma-interop/xrc-devices/1","devices":[{"device",
"transport","capability_flag","supported","errno","detail","initiator_supported",
"initiator_detail"}]} (initiator: an XRC_SEND QP, the sender's side) or
{"schema":"rdma-interop/xrc-sim/1","seed","ok","violation","trace_hash","probe":{...},
"busiest":{"domains":[...],"tqps":[...]},"counters":{...}[,"events"][,"trace"]}.
)";

constexpr const char* kXrcFooter = R"(
EXAMPLES
  rdma-probe xrc                          every device: XRC supported or not, and why
  rdma-probe xrc --device rxe0 --json
  rdma-probe xrc --simulate 7             a seeded life of a node, checked
  rdma-probe xrc --simulate 7 --events    ... with every decision and its reason
  rdma-probe xrc --simulate 7 --probe invalid_rkey_read --probe-retries 0
)";

constexpr const char* kDevicesDescription =
    R"(List this node's RDMA devices: what each one is, how to reach it, what it can do.

For an interop lab's report, and for a runner that pairs devices: two devices can talk when
their kinds are equal, at the IP addresses of their ports' network interfaces.

Each device (or each --device) is opened and asked:
  kind          iwarp (iWARP transport: siw, cxgb4, irdma), ib (InfiniBand), or for IB
                transport on Ethernet ports: roce-v2 when any GID entry is RoCE v2, else
                roce-v1 (roce: the GID table is empty, so the version cannot be told)
  driver        the kernel driver (siw, rxe, mlx5, ...) from RDMA netlink's uverbs driver id,
                the one rdma-core picks its provider by; else the basename of the
                /sys/class/infiniband/DEV/device/driver symlink. That symlink is also shown
                on its own as the bus driver (the parent device's, often the NIC's PCI
                driver); soft devices (siw, rxe) have none
  identity      fw_ver, hw_ver, vendor and part ids, node and system image GUIDs
  ports         state (DOWN, INIT, ARMED, ACTIVE) and physical state, active MTU, LID
                (InfiniBand), link layer, RoCE versions, the GID table (index, GID, type)
  netdev        each port's network interface with its IPv4 and IPv6 addresses: from RDMA
                netlink, as 'rdma link' shows it (iWARP GID entries name no interface), else
                from the RoCE GID entries; otherwise unknown, with the reason
  limits        ibv_query_device: max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr,
                max_mr_size, max_pd, max_srq, max_qp_rd_atom, max_qp_init_rd_atom
  capabilities  asked for real, each yes or no with the reason (the errno text when a verb
                failed): xrc (ibv_open_xrcd), srq (ibv_create_srq), ud (ibv_create_qp
                IBV_QPT_UD; iWARP has none), odp (IBV_ODP_SUPPORT and an on-demand
                ibv_reg_mr), memory windows (ibv_alloc_mw), atomics (atomic_cap only: an
                atomic needs a connected peer)
Everything created to ask is destroyed again. A node without RDMA devices is a fact, not an
error: the list is empty and the exit status 0.

With --json, one object (schema rdma-interop/devices/1):
  {"schema":"rdma-interop/devices/1","node":"lab-a","devices":[{"name":"siw0",
   "kind":"iwarp","transport":"iwarp","node_type":"iWARP NIC","driver":"siw",
   "driver_source":"netlink","bus_driver":null,"node_guid":"5054:00ff:fe12:3456",
   "sys_image_guid":"5054:00ff:fe12:3456","fw_ver":"0.0.0","vendor_id":6450548,
   "vendor_part_id":1,"hw_ver":0,"limits":{"max_qp":102400,...},
   "ports":[{"port":1,"state":"ACTIVE","phys_state":"LINK_UP","active_mtu":1024,"lid":null,
     "link_layer":"Ethernet","roce_versions":[],"netdev":{"name":"eth0","ifindex":2,
     "source":"netlink"},"netdev_unknown":null,"addresses":["10.0.2.15/24",
     "fe80::5054:ff:fe12:3456/64"],"gids":[{"index":0,"gid":"...","type":"ib",
     "netdev_index":null}],"gid_error":null}],
   "capabilities":{"xrc":{"supported":false,"errno":95,"detail":"..."},"srq":{...},
     "ud":{...},"odp":{...},"memory_windows":{...},"atomics":{...}}}]}
"addresses" are the netdev's, IPv4 first, as 'ip -brief address' shows them; "netdev" is
null when unknown ("netdev_unknown" says why, "addresses" is empty). "driver_source" is
netlink, sysfs, or "unknown: <why>". A device that could not be opened is
{"name","error","errno"}.
With no device at all: {"schema":...,"node":"lab-a","devices":[],"note":"no RDMA device"}.
)";

constexpr const char* kDevicesFooter = R"(
EXAMPLES
  rdma-probe devices                         every device, one block each
  rdma-probe devices --device rxe0 --json    one device, as JSON
  rdma-probe devices --json | jq -r '.devices[] | select(.kind == "roce-v2")
      | .name + " " + .ports[0].addresses[0]'
)";

void add_personality_options(CLI::App* cmd, PersonalityChoice& choice) {
  cmd->add_option("-p,--personality", choice.name_or_path,
                  "The MPA personality to act as: a name (siw, cxgb4, rev1-only, never-rtr, "
                  "strict, or any name 'rdma-probe personalities' lists) or a path to a "
                  "personality JSON file (contains '/' or ends in .json)")
      ->type_name("NAME|PATH");
  // One directory per --personality-dir, so a URI after it is not taken for a second one.
  cmd->add_option("--personality-dir", choice.extra_dirs,
                  "Search DIR for personalities before the default directories; repeatable")
      ->type_name("DIR")
      ->allow_extra_args(false);
}

// The EXIT STATUS sections (exit_status.h: the same numbers in every tool).
std::string main_exit_status() {
  return exit_status_section(
      {{tools::kExitOk, "the command did what it was asked, and what it checked was right"},
       {tools::kExitFailed,
        "a connection, an exchange or a simulated run failed, or a probe or connect was cut "
        "short by SIGINT or SIGTERM (the partial result is printed first)"},
       {tools::kExitUsage, "nothing was run"},
       {tools::kExitUnreachable, "the address did not answer (TCP refused or timed out)"},
       {tools::kExitNotIwarp, "(probe) something answered, but it is not an iWARP peer"},
       {tools::kExitCannotRun, "(serve) the address could not be listened on"}});
}

std::string serve_exit_status() {
  return exit_status_section(
      {{tools::kExitOk,
        "stopped by SIGTERM or SIGINT (its normal end; the counters are printed first), or "
        "every connection of --once/--max-connections succeeded"},
       {tools::kExitFailed, "a connection of --once/--max-connections failed"},
       {tools::kExitUsage, "URI, personality (unknown name, bad file), option values"},
       {tools::kExitCannotRun,
        "the address could not be listened on: in use, not an address of this node, no "
        "permission (a port below 1024), or no RDMA device holds it (verbs)"}});
}

std::string connect_exit_status() {
  return exit_status_section(
      {{tools::kExitOk, "connected and the exchange verified every byte"},
       {tools::kExitFailed,
        "MPA setup failed, the peer never answered the Request in time, or the exchange "
        "failed (\"error\" says why); or SIGINT/SIGTERM stopped it (\"error\" kind "
        "interrupted, the report so far printed)"},
       {tools::kExitUsage, "URI, personality, option values"},
       {tools::kExitUnreachable,
        "the TCP connection was refused or got no answer within --timeout (a blackholed "
        "port); verbs: no RDMA device reaches the address, or nothing listens there"}});
}

std::string probe_exit_status() {
  return exit_status_section(
      {{tools::kExitOk, "probed: the report lists what the peer speaks"},
       {tools::kExitFailed,
        "an iWARP peer that rejected even a plain Request (e.g. its listener is over its "
        "backlog: try again), a peer that stopped answering during the probe (the report "
        "says so), or the probe was stopped by SIGINT or SIGTERM (the report so far is "
        "printed, the rest not_tested)"},
       {tools::kExitUsage, "URI, option values"},
       {tools::kExitUnreachable, "TCP connect refused, no route, or no answer in time"},
       {tools::kExitNotIwarp,
        "it answered with something else (an HTTP server says \"HTTP/1.1 400\"), or closed "
        "or stayed silent on MPA Requests of both revisions"}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "rdma-probe");
  tools::setup_tool_app(app, "rdma-probe", 34);
  app.footer(std::string(kMainFooter) + "\n" + main_exit_status());
  app.require_subcommand(1);

  ServeOptions serve;
  auto* serve_cmd = app.add_subcommand("serve", kServeDescription);
  serve_cmd->footer(std::string(kServeFooter) + "\n" + serve_exit_status());
  serve_cmd
      ->add_option("-l,--listen", serve.listen,
                   "Where to listen: tcp://ADDR:PORT (IPv4 address or name; port 0 picks a free "
                   "port, reported in the \"listening\" line), or verbs://ADDR:PORT, "
                   "verbs://DEVICE[:PORT] for rdma-core")
      ->type_name("URI");
  add_personality_options(serve_cmd, serve.personality);
  auto* max_opt = serve_cmd
                      ->add_option("--max-connections", serve.max_connections,
                                   "Exit after N connections (default: run until a signal)")
                      ->type_name("N")
                      ->check(integer_in(1, std::numeric_limits<std::int32_t>::max()));
  serve_cmd->add_flag("--once", serve.once, "Exit after one connection (--max-connections 1)")
      ->excludes(max_opt);
  serve_cmd->add_flag("--json", serve.json,
                      "Print one JSON object per event and line instead of the log (see above)");
  serve_cmd
      ->add_option("--exchange-timeout", serve.exchange_timeout_s,
                   "How long one connection's exchange (after MPA setup) may take before it is "
                   "cut off (default 10s; a bare number is seconds)")
      ->type_name("DURATION")
      ->transform(duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kSeconds));
  serve_cmd
      ->add_option("--idle-timeout", serve.idle_timeout_s,
                   "How long a connection may go without a word from its peer before it is cut "
                   "off (default 5s; a bare number is seconds): a silent peer holds one of the "
                   "connections served at once (--backlog of them, at most 64) for at most "
                   "this long")
      ->type_name("DURATION")
      ->transform(duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kSeconds));
  serve_cmd
      ->add_option("--backlog", serve.backlog,
                   "Connect requests that may wait for the acceptor's decision (default 16); a "
                   "request holds its slot until it is accepted or rejected")
      ->type_name("N")
      ->check(integer_in(1, 65535));
  serve_cmd
      ->add_option("--overflow", serve.overflow,
                   "Over the backlog: 'reject' answers at once with an MPA Reject whose private "
                   "data is \"rdma-interop:backlog-full\" (our initiators report backlog_full), "
                   "'drop' leaves the request unanswered until a slot frees (default reject)")
      ->type_name("drop|reject")
      ->check(CLI::IsMember({"drop", "reject"}).description(""));
  serve_cmd
      ->add_option("--half-open-limit", serve.half_open_limit,
                   "TCP connections without a complete MPA Request kept at once; the oldest is "
                   "closed to make room (default max(4*backlog, 64))")
      ->type_name("N")
      ->check(integer_in(1, 1 << 20));
  serve_cmd
      ->add_option("--decision-timeout", serve.decision_timeout_ms,
                   "How long a request may hold its slot undecided before the listener rejects "
                   "it (default 30s; a bare number is milliseconds)")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kMilliseconds));
  serve_cmd
      ->add_option("--overflow-timeout", serve.overflow_timeout_ms,
                   "With --overflow drop: how long a request waits unanswered for a free slot "
                   "before the listener closes it (counted overflow_dropped; default 5s; a bare "
                   "number is milliseconds). Keep it below the initiators' reply timeout minus "
                   "the time a request spends in the backlog, or they give up on requests the "
                   "listener still accepts")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kMilliseconds));
  serve_cmd
      ->add_option("--accept-delay", serve.accept_delay_ms,
                   "How long to wait before accepting each request: a deliberately slow "
                   "acceptor, to fill the backlog (default 0; a bare number is milliseconds)")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(0), std::chrono::hours(1), TimeUnit::kMilliseconds));
  serve_cmd->add_flag("--backlog-events", serve.backlog_events,
                      "Print a \"backlog\" line for every slot taken or freed");
  serve_cmd->add_flag("--list-personalities", serve.list_personalities,
                      "Print the available personalities (name and description) and exit");

  ConnectOptions connect;
  auto* connect_cmd = app.add_subcommand("connect", kConnectDescription);
  connect_cmd->footer(std::string(kConnectFooter) + "\n" + connect_exit_status());
  connect_cmd
      ->add_option("uri", connect.uri,
                   "The responder: tcp://ADDR:PORT, or verbs://ADDR:PORT for rdma-core, with "
                   "options ?ack_timeout=N&retry_count=N&rnr_retry=N&source=ADDR (source: the "
                   "local address, which picks the device)")
      ->required()
      ->type_name("URI");
  add_personality_options(connect_cmd, connect.personality);
  connect_cmd->get_option("--personality")->required();
  connect_cmd
      ->add_option("-t,--timeout", connect.timeout_s,
                   "How long the whole run may take: TCP connect, MPA setup, exchange, "
                   "disconnect (default 15s; a bare number is seconds)")
      ->type_name("DURATION")
      ->transform(duration_in(milliseconds(1), std::chrono::hours(1), TimeUnit::kSeconds));
  connect_cmd
      ->add_option("--first-fpdu-delay", connect.first_fpdu_delay_ms,
                   "How long to wait after the MPA Reply before the first FPDU (the RTR, or the "
                   "first message without peer-to-peer; a bare number is milliseconds); "
                   "overrides the personality's first_fpdu_delay_ms. Kernel siw as responder "
                   "ignores an FPDU that arrives while it hands the socket to its QP: 50ms "
                   "covers that window on real hosts")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(0), std::chrono::minutes(1), TimeUnit::kMilliseconds));
  connect_cmd
      ->add_option("--retries", connect.retries,
                   "Connect again up to N times when the listener may take it later: "
                   "backlog_full, TCP refused or reset, no answer in time (default 0); "
                   "--timeout bounds each attempt")
      ->type_name("N")
      ->check(integer_in(0, 1000));
  tools::add_retry_backoff_options(connect_cmd, connect.retry_backoff);
  connect_cmd->add_flag("--json", connect.json,
                        "Print one JSON report (schema rdma-interop/connect/1) instead of the "
                        "summary");

  ProbeOptions probe;
  auto* probe_cmd = app.add_subcommand("probe", kProbeDescription);
  probe_cmd->footer(std::string(kProbeFooter) + "\n" + probe_exit_status());
  probe_cmd
      ->add_option("uri", probe.uri,
                   "The peer: tcp://HOST:PORT (our userspace iWARP, every MPA row), or "
                   "verbs://ADDR:PORT through rdma-core (connection-level rows only)")
      ->required()
      ->type_name("URI");
  probe_cmd->add_flag("--json", probe.json,
                      "Print one JSON report (schema rdma-interop/probe/2) instead of the table");
  probe_cmd
      ->add_option("-t,--timeout", probe.timeout_s,
                   "How long each probe connection may take, setup and all (default 3s; a bare "
                   "number is seconds)")
      ->type_name("DURATION")
      ->transform(duration_in(milliseconds(50), std::chrono::minutes(10), TimeUnit::kSeconds));
  probe_cmd
      ->add_option("--rtr-wait", probe.rtr_wait_ms,
                   "How long the RTR probe withholds its RTR to see whether the peer sends "
                   "first (default 2s; a bare number is milliseconds); a peer that gives up "
                   "sooner is seen closing")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(10), std::chrono::minutes(10), TimeUnit::kMilliseconds));
  probe_cmd
      ->add_option("--first-fpdu-delay", probe.first_fpdu_delay_ms,
                   "How long between the MPA Reply and the first FPDU of each probe connection "
                   "(default 50ms, kernel siw as responder needs it; a bare number is "
                   "milliseconds)")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(0), std::chrono::minutes(1), TimeUnit::kMilliseconds));
  probe_cmd
      ->add_option("--max-connections", probe.max_connections,
                   "Connections the probe may make in all (default 48); probes past it are "
                   "reported not_tested")
      ->type_name("N")
      ->check(integer_in(1, 1000));
  // Given twice (a wrapper's default, then the operator's), the last one counts.
  for (const auto* name : {"--timeout", "--rtr-wait", "--first-fpdu-delay", "--max-connections"}) {
    probe_cmd->get_option(name)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  probe_cmd->add_flag("--evidence", probe.evidence,
                      "Under each capability, print each probe's offer and what came back");
  probe_cmd->add_flag("-q,--quiet", probe.quiet,
                      "No progress line on stderr (shown only when stderr is a terminal)");
  probe_cmd
      ->add_option("--personality-dir", probe.personality_dirs,
                   "Compare the peer also with the personalities in DIR (searched before the "
                   "default directories; repeatable)")
      ->type_name("DIR")
      ->allow_extra_args(false);

  ListOptions list;
  auto* list_cmd = app.add_subcommand("personalities", kListDescription);
  list_cmd->footer(std::string(kListFooter) + "\n" +
                   exit_status_section({{tools::kExitOk,
                                         "listed (files that fail to load are "
                                         "named on stderr)"},
                                        {tools::kExitUsage, ""}}));
  list_cmd
      ->add_option("--personality-dir", list.extra_dirs,
                   "Search DIR before the default directories; repeatable")
      ->type_name("DIR")
      ->allow_extra_args(false);
  list_cmd->add_flag("--json", list.json,
                     "Print a JSON array of the personalities (the file format, plus "
                     "source_path)");

  XrcOptions xrc;
  auto* xrc_cmd = app.add_subcommand("xrc", kXrcDescription);
  xrc_cmd->footer(
      std::string(kXrcFooter) + "\n" +
      exit_status_section(
          {{tools::kExitOk, "devices listed; or the simulated run kept every guarantee"},
           {tools::kExitFailed,
            "the simulated run broke a guarantee (the verdict says which, and when)"},
           {tools::kExitUsage, "unknown device, bad probe settings"}}));
  xrc_cmd->add_option("--device", xrc.devices, "Only this RDMA device; repeatable")
      ->type_name("NAME");
  xrc_cmd->add_flag("--json", xrc.json, "One JSON object on stdout");
  xrc_cmd
      ->add_option("--simulate", xrc.simulate_seed,
                   "Run the lifetime engine on a simulated node, seeded with SEED")
      ->type_name("SEED")
      ->check(tools::integer_in(0, INT64_MAX));
  xrc_cmd->add_flag("--events", xrc.events,
                    "(--simulate) Also print every engine decision with its reason");
  xrc_cmd->add_flag("--trace", xrc.trace, "(--simulate) Also print every fabric step");
  xrc_cmd
      ->add_option("--probe", xrc.probe_kind,
                   "(--simulate) Probe kind instead of the seed's: zero_length_read (not "
                   "rkey-checked, IB C9-88) or invalid_rkey_read (on its own probe QP, recycled "
                   "after each answer)")
      ->type_name("zero_length_read|invalid_rkey_read");
  xrc_cmd
      ->add_option("--probe-interval", xrc.interval_ms,
                   "(--simulate) Time between probes (the timeout is capped to it; a bare "
                   "number is milliseconds)")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(1), std::chrono::minutes(10), TimeUnit::kMilliseconds));
  xrc_cmd
      ->add_option("--probe-retries", xrc.retries,
                   "(--simulate) Failed probes forgiven before the sender is dead")
      ->type_name("N")
      ->check(integer_in(0, 1000));

  DevicesOptions devices;
  auto* devices_cmd = app.add_subcommand("devices", kDevicesDescription);
  devices_cmd->footer(
      std::string(kDevicesFooter) + "\n" +
      exit_status_section(
          {{tools::kExitOk, "listed (also when the node has no RDMA device)"},
           {tools::kExitFailed,
            "a device is present but could not be opened or queried (its entry says why)"},
           {tools::kExitUsage,
            "a --device this node does not have (the message lists those present)"}}));
  devices_cmd
      ->add_option("--device", devices.devices,
                   "Only this RDMA device (as ibv_devices names it); repeatable. A name this "
                   "node does not have is an error (exit status 2)")
      ->type_name("NAME");
  devices_cmd->add_flag("--json", devices.json,
                        "Print one JSON object (schema rdma-interop/devices/1) instead of the "
                        "blocks");

  if (auto status = tools::answer_documentation_request(app, argc, argv)) return *status;

  // `rdma-probe [OPTIONS] URI` is `rdma-probe probe [OPTIONS] URI`: a first argument that is
  // a URI or an option other than the top level's own makes the probe command explicit.
  std::vector<char*> args(argv, argv + argc);
  static char probe_word[] = "probe";
  if (argc > 1) {
    std::string_view first = argv[1];
    const bool top_level_flag = first == "-h" || first == "--help" || first == "--version";
    const bool command = first == "serve" || first == "connect" || first == "personalities" ||
                         first == "probe" || first == "devices" || first == "xrc";
    if (!command && !top_level_flag &&
        (first.starts_with("-") || first.find("://") != std::string_view::npos)) {
      args.insert(args.begin() + 1, probe_word);
    } else if (!command && !top_level_flag) {
      // CLI11 would call it "A subcommand is required"; name it instead.
      std::fprintf(stderr,
                   "rdma-probe: error: '%s' is neither a command (serve, connect, personalities, "
                   "probe, devices, xrc) nor a URI (tcp://HOST:PORT)\nRun with --help for more "
                   "information.\n",
                   argv[1]);
      return kExitUsage;
    }
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a pointer to --help
    return kExitUsage;
  }

  try {
    if (*serve_cmd) return run_serve(serve);
    if (*connect_cmd) return run_connect(connect);
    if (*list_cmd) return run_list_personalities(list);
    if (*probe_cmd) return run_probe(probe);
    if (*devices_cmd) return run_devices(devices);
    if (*xrc_cmd) return run_xrc(xrc);
  } catch (const std::exception& e) {
    // Nothing here is expected to throw; if it does, say so instead of aborting.
    std::fprintf(stderr, "rdma-probe: internal error: %s\n", e.what());
    return kExitFailed;
  }
  return kExitUsage;
}
