// exit_status.h - what the exit status of every rdma-interop tool means: one table, the same
// number for the same thing in rdma-probe, rdma-storm, rdma-mesh, backlog-stat and verbs-check.
//
//   0  ok           it ran and what it looked at is as it should be; also a listing with
//                   nothing in it (like ss), and a server or --watch ended by SIGINT or
//                   SIGTERM (their normal end)
//   1  failed       it ran and found a failure (a connection, exchange or check failed, a
//                   guarantee broke); or a bounded run (a probe, a connect, a storm, a mesh
//                   node's --duration, the checks) was cut short by SIGINT or SIGTERM: what it
//                   had so far is printed first
//   2  usage        bad arguments: nothing was run
//   3  unreachable  nothing answered at the address: TCP refused, no route, or no answer to
//                   the SYN in time (verbs: no RDMA device reaches it, nothing listens)
//   4  not iWARP    something answered, but it is not an iWARP (MPA) peer
//   5  cannot run   this node cannot do it: the address is in use or not ours to listen on,
//                   no permission, no provider
//
// A signal never ends a tool with 128+N and nothing printed: each long-running command takes
// SIGINT and SIGTERM (signal_watch.h), stops, prints its partial result and exits with the
// status above. Each tool's --help lists the statuses it uses under the heading EXIT STATUS,
// written by exit_status_section() so that the words for a number cannot differ.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace rdma_interop::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;
inline constexpr int kExitNotIwarp = 4;
inline constexpr int kExitCannotRun = 5;

// "ok", "failed", "bad arguments", "unreachable", "not an iWARP peer", "cannot run".
std::string_view exit_status_name(int status);

struct ExitRow {
  int status;
  std::string_view when;  // this tool's cases, one sentence or more
};

// The EXIT STATUS section of a --help footer:
//
//   EXIT STATUS
//     0  ok: connected and the exchange verified every byte
//     3  unreachable: the TCP connection was refused or timed out (verbs: no RDMA device
//        reaches the address, or nothing listens there)
//     (the same numbers mean the same in every rdma-interop tool)
//
// rows in the order given, each wrapped at 96 columns.
std::string exit_status_section(std::initializer_list<ExitRow> rows);

}  // namespace rdma_interop::tools
