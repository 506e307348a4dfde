// mpa_probes.h - the MPA connection setup probes of `rdma-probe URI` (tcp:// only).
//
// Each function asks one question with as few connections as it needs and appends its
// capability rows (probe_report.h); first_contact() runs first and decides whether there
// is an iWARP peer to ask at all. The offers: RFC 5044 s7.1 (revision, M, C, R, Res,
// private data), RFC 6581 s3 (IRD/ORD, peer-to-peer and the RTR types).
#pragma once

#include <string>
#include <vector>

#include "tools/rdma-probe/peer_facts.h"
#include "tools/rdma-probe/probe_report.h"
#include "tools/rdma-probe/probe_session.h"

namespace rdma_interop::probe {

// A plain revision-2 Request on a raw socket, then revision 1 if that is not answered:
// unreachable, not MPA at all, an iWARP peer that rejects even a plain Request, or probed.
// Adds the "iwarp", "mpa_revisions" and "revision2_to_revision1" rows; `detail` is the
// report's one-sentence summary.
ProbeOutcome first_contact(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows,
                           std::string& detail);

void probe_crc(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
void probe_markers(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// Peer-to-peer mode, each RTR type alone, the one picked from all, the preference order.
void probe_peer_to_peer(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
void probe_ird_ord(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// The largest PD_Length answered with a Reply: 512, 256, then a binary search between.
void probe_private_data(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// Res bits 0x03 (reserved) and 0x0c (siw's GSO bit, Chelsio's FPDU-size proposal).
void probe_reserved_bits(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// A revision-3 Request to a revision-2 peer: answered in 2 (RFC 5044 s7.1), reset or closed.
void probe_newer_revision(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// Whether a peer that answers revision 1 waits for an RTR there anyway (iw_cxgb4's
// peer2peer), and which; later revision-1 probes then send it. Runs right after first
// contact.
void probe_revision1_rtr(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows);
// A plain Request once more, after the MPA probes: a peer that answered it at first contact
// and no longer does has broken during the probe (the "still_answering" row fails, and the
// run exits 1), so its other rows are not its settings.
void recheck_plain_request(ProbeSession& s, const PeerFacts& f, std::vector<Capability>& rows);
// Every distinct refusal the probes above drew: MPA Reject, Terminate after the Reply,
// reset, close, silence.
void summarize_refusals(const PeerFacts& f, std::vector<Capability>& rows);

// A refusal seen on a probe, in the "how it rejects" vocabulary ("MPA Reject (R) with 0
// octets of private data"); empty when the attempt was not refused.
std::string refusal_form(const Attempt& a);
std::string refusal_form(const RawAnswer& a);

}  // namespace rdma_interop::probe
