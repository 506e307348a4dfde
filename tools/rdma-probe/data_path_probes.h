// data_path_probes.h - the probes of `rdma-probe URI` that need an established connection.
//
//   - whether a peer-to-peer responder waits for the RTR before it sends (RFC 6581 s3);
//   - the round trip of a zero-length RDMA Read (any peer) and of a 64-octet Send (a peer
//     that answers the exchange's echo messages: rdma-probe serve);
//   - the Terminate (RFC 5040 s7, RFC 5041 s7) the peer sends for an RDMA Write and an RDMA
//     Read naming an STag it never advertised, and going past the end of one it did (the
//     region rdma-probe serve advertises in its exchange; other peers advertise none, and
//     those two rows say so).
// Each Terminate probe costs its connection: after a Terminate the stream is closed.
#pragma once

#include <vector>

#include "tools/rdma-probe/peer_facts.h"
#include "tools/rdma-probe/probe_report.h"
#include "tools/rdma-probe/probe_session.h"

namespace rdma_interop::probe {

void probe_rtr_wait(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// One zero-length RDMA Read (names no memory on either side) and its Response within
// `timeout`: whether the connection still carries operations.
bool zero_length_read(transport::Connection& conn, std::chrono::milliseconds timeout);

void probe_round_trips(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
void probe_terminates(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);

// The STag the invalid-STag probes name: index 0xfffffe, far beyond any table in use.
inline constexpr std::uint32_t kUnadvertisedStag = 0xfffffe00;

}  // namespace rdma_interop::probe
