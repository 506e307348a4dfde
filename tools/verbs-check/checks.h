// checks.h - the RC checks verbs-check runs, each between a client (this process) and a
// server (a forked child) through rdma-interop's verbs provider on one rdma_cm address, or,
// in the two-node form, a server on another node (verbs-check --serve there, --peer here).
//
// The server listens, accepts, waits for the client's "hello" (the client speaks first: over
// iWARP, MPA's responder must), registers a 64 KiB region R filled with pattern(seed_r)
// (remote read and write) and Sends "region STAG ADDR LEN SEED_R SEED_S" followed by 4 KiB of
// pattern(seed_s); then it answers the client's requests ("expect-data SEED" + 4 KiB,
// "verify-region SEED") with "verdict ok" or "verdict <what differs>" until the client
// disconnects, or, from a client on another node, "die": the server then raises SIGKILL on
// itself, so its kernel tears down the queue pair and the connection as any dying process's
// does (the two-node form of the SIGKILL below). Each check then does one thing:
//
//   send-recv         both Sends verified byte by byte, one each way
//   write             RDMA Write of 64 KiB into R; the server verifies it
//   read              RDMA Read of R (64 KiB), verified
//   sq-overflow       one chain of 64-octet Writes four times the send queue the device
//                     granted (64 asked, more if it rounds up): what fits is posted and
//                     completes, the rest is refused (ibv_post_send(3): an errno return,
//                     *bad_wr at the first not posted) and never completes
//   bad-rkey-read     RDMA Read of 64 octets with R's rkey, key byte flipped:
//                     completes with remote_access_error (IB: the responder NAKs an R_Key
//                     violation; iWARP, RFC 5040 s7: a Terminate for the invalid STag)
//   zero-length-read  RDMA Read of 0 octets with that bad rkey: not rkey-checked (IB spec
//                     C9-88, "a zero-length RDMA Read ... R_Key is not validated"), so it
//                     succeeds, and the connection still serves a good 64-octet Read after
//   dead-peer-read    the server process is SIGKILLed after setup; a Read to R then ends in
//                     retry_exceeded after retry_count retries of the ACK timeout (the
//                     client's URI carries ?ack_timeout=N&retry_count=N). On iWARP there is
//                     no such counter (TCP is the LLP): the dead process's kernel closes the
//                     TCP connection, the QP goes to ERROR, and the Read must complete flushed
//                     ("expected" says which applies).
//   dead-peer-bad-rkey-read  the server is SIGKILLed; a 1-octet Read with a bad rkey (the
//                     invalid-rkey liveness probe, core/xrc/liveness_probe.h) then ends in
//                     retry_exceeded: nobody is left to NAK it, so "no answer", where a live
//                     peer answers remote_access_error (bad-rkey-read)
//   liveness-probe    core/xrc's LivenessProbe drives zero-length Reads on the connection:
//                     against the live server every probe is answered and a good Read works
//                     after them (the probes did not hurt the QP); then the server is
//                     SIGKILLed and the probe must call the sender dead within
//                     detection_bound (+1 s for the guest's scheduling); "got" is the verdict
//
// Two nodes: where a check kills the server, the client sends "die" instead and takes the
// server for dead when the CM reports the disconnect its kernel made (IB/RoCE: the DREQ of
// the destroyed cm_id; iWARP: the TCP close), the first sign of the death that reaches this
// node; the check then goes on exactly as on one node.
//
// Everything goes through the provider API. Nothing here uses raw verbs.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace rdma_interop::verbs_check {

struct CheckInfo {
  std::string_view name;
  std::string_view summary;   // one line, for --help and --list
  std::string_view expected;  // the WcStatus name (or "verified") the check expects
};
inline constexpr CheckInfo kChecks[] = {
    {"send-recv", "a 4 KiB Send each way, every byte verified", "verified"},
    {"write", "RDMA Write of 64 KiB into the server's region, verified by the server", "verified"},
    {"read", "RDMA Read of the server's 64 KiB region, verified", "verified"},
    {"sq-overflow",
     "a chain of Writes four times the send queue: what fits is posted and completes, the rest "
     "refused",
     "refused"},
    {"bad-rkey-read", "RDMA Read (64 octets) with a bad rkey completes with remote_access_error",
     "remote_access_error"},
    {"zero-length-read", "zero-length RDMA Read with a bad rkey is not rkey-checked (IB C9-88)",
     "success"},
    {"dead-peer-read", "RDMA Read to a SIGKILLed peer ends in retry_exceeded", "retry_exceeded"},
    {"dead-peer-bad-rkey-read",
     "RDMA Read (1 octet, bad rkey) to a SIGKILLed peer ends in retry_exceeded, not an access "
     "error",
     "retry_exceeded"},
    {"liveness-probe",
     "the XRC liveness probe (zero-length Reads) keeps a live peer alive, finds a killed one "
     "dead within its bound",
     "dead"},
};

// The checks that end the server's process (SIGKILL, or "die" over the link).
bool kills_server(std::string_view check);

struct Config {
  // This node's rdma_cm address, of an RDMA device ("10.0.2.15"): the servers listen on it
  // (one node, --serve); with `peer` the client connects from it (empty: the route decides).
  std::string address;
  // Two nodes, the client's side: the address of the node running verbs-check --serve.
  // Empty: one node, the client connects to `address`.
  std::string peer;
  std::uint16_t port = 7471;
  std::chrono::milliseconds timeout{15000};  // per check
  unsigned ack_timeout = 16;                 // dead-peer-read: 4.096 us * 2^16 = 268 ms
  unsigned retry_count = 2;
};

// Runs the server half in this (forked) process and returns its exit status (0: served
// until the client's "bye" or disconnect; 1: the link failed; 2: no client, or setup
// failed). Waits up to config.timeout for the client, then serves it for up to
// config.timeout. Reports on `report_fd`, one line each, whoever reads them:
//   "ready ADDRESS" or "error DETAIL"   once listening, or why not (then it exits 2)
//   "device NAME TRANSPORT"             the device ADDRESS belongs to ("rxe0 roce")
//   "client PEER"                       a client connected and was accepted
//   "failed DETAIL"                     why it ends early (no client in time, accept...)
//   "dying"                             the client asked it to die: SIGKILL follows
// The reader must keep the pipe open until the process is gone (or ignore SIGPIPE there).
int run_server(const Config& config, std::uint16_t port, int report_fd);

// Runs check `name` as the client against a server on `port` whose "ready" line was already
// read: the forked child `server_pid` (one node), or with server_pid 0 the --serve side on
// Config::peer, asked to die over the link where a check kills the server. Returns the
// check's JSON result (without the common fields run_isolated adds).
nlohmann::ordered_json run_client(const Config& config, std::string_view name, std::uint16_t port,
                                  int server_pid);

}  // namespace rdma_interop::verbs_check
