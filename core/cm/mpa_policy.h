// mpa_policy.h - what one side of an MPA connection offers, accepts and insists on.
//
// A policy is the part of a peer's personality that MPA connection setup reads (RFC 5044
// s7.1, RFC 6581 s3). Known stacks are policies too: Linux siw (revision 2, Write and Read
// RTR, refuses markers), cxgb4 (peer-to-peer, Read RTR, falls back to revision 1), irdma
// (peer-to-peer required, refusals by TCP reset), qedr (answers with every RTR type both
// offer), erdma (its own revision 129), a revision-1-only peer, a peer that never sends its
// RTR. Where a stack departs from the RFCs the policy says how, field by field, so the
// engine stays one engine: the departures are data (tools/personalities/README.md cites the
// kernel source of each).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::cm {

// RFC 6581 s3: the zero-length operation the initiator sends as its ready-to-receive.
enum class RtrType : std::uint8_t { kSend, kWrite, kRead };
std::string_view rtr_name(RtrType t);  // "send", "write", "read"

struct RtrSet {
  bool send = false;
  bool write = false;
  bool read = false;
  bool empty() const { return !send && !write && !read; }
  bool contains(RtrType t) const;
  friend bool operator==(const RtrSet&, const RtrSet&) = default;
};

enum class CrcMode : std::uint8_t {
  kWant,      // sets C: CRC is used (RFC 5044: either side asking means CRC)
  kOptional,  // does not ask, goes along when the peer asks
  kRefuse,    // does not ask, and fails the connection if the peer asks
};

// RFC 6581 peer-to-peer mode, per role: an initiator asks for it in kOn and kRequired; a
// responder accepts it when asked in kOn, kWhenAsked and kRequired, and declines (clears the
// flag) in kOff. kRequired (irdma: IETF_PEER_TO_PEER always set, and
// irdma_negotiate_mpa_v2_ird_ord() returns -EOPNOTSUPP without it) also refuses a revision-2
// Request without the flag (responder) and a revision-2 Reply without it (initiator), in the
// form `refuse_with` says. Revision 1 carries no flag and is not refused.
enum class PeerToPeer : std::uint8_t { kOff, kWhenAsked, kOn, kRequired };

// What a responder does with a Request of a revision it does not speak: a newer one, or any
// other than 129 for erdma (and 129 for everyone else).
enum class OnNewerRevision : std::uint8_t {
  kReplyOwnRevision,  // RFC 5044 s7.1: answer with its own (lower) revision
  kReset,             // abort the TCP connection (old firmware, iw_cxgb4, irdma)
  kClose,             // close it without a Reply (siw above revision 2, erdma)
};

// How a side refuses what its policy cannot take (CRC or markers it refuses, peer-to-peer
// it requires, no RTR type in common, insufficient IRD when strict).
enum class Refusal : std::uint8_t {
  // The standard's answer: a responder sends an MPA Reject (RFC 5044 s7.1), or for no
  // common RTR type its Reply and a Terminate with MPA code 0x07 (RFC 6581 s3); an initiator
  // sends a Terminate with MPA code 0x06 or 0x07 after the Reply.
  kReject,
  // A TCP reset and nothing else: no Reply, no Terminate (irdma: irdma_handle_rcv_mpa() on
  // any negotiation error calls irdma_passive_open_err()/irdma_active_open_err() with reset).
  kReset,
};

// What a side does with a Request or Reply that does not decode (bad key, PD_Length over its
// limit, a revision it cannot parse): abort (reset) or close in order.
enum class OnMalformed : std::uint8_t { kReset, kClose };

// What the responder's Reply names in peer-to-peer mode once it has picked an RTR type.
enum class RtrReply : std::uint8_t {
  kChosen,     // RFC 6581 s3: exactly the type it picked
  kOwn,        // iw_cxgb4 send_mpa_reply(): its own p2p_type (the one type in rtr_offer),
               // whatever it picked from the Request and set itself up to receive
  kAllCommon,  // qed_iwarp_mpa_received(): every type both offer (several bits)
};

// What the responder does when the Request offers no RTR type it accepts.
enum class NoCommonRtr : std::uint8_t {
  kRefuse,    // RFC 6581 s3: MPA code 0x07 (refuse_with says how it looks on the wire)
  kPropose,   // siw_proc_mpareq(): names its first preference anyway (siw: Write)
  kOfferAll,  // qed: "if we're left with no match send our capabilities": all it accepts
  kDecline,   // iw_cxgb4: its p2p_type stays DISABLED, the Reply clears peer-to-peer
};

// What a responder takes as the RTR: exactly the agreed type, or any zero-length Send, Write
// or Read Request (siw_rtr_data_ready() does not look at the type).
enum class RtrCheck : std::uint8_t { kAgreed, kAny };

// How an initiator reads the RTR types in a Reply: RFC 6581 s3 exactly one, of those it
// offered; or the first of its own preference among several it offered (irdma: Read, then
// Write, irdma_negotiate_mpa_v2_ird_ord(); siw: Write first).
enum class RtrFromReply : std::uint8_t { kExact, kPreference };

struct MpaPolicy {
  // Highest revision spoken: 1 or 2; or 129, erdma's own, which speaks nothing else (no IRD/ORD
  // words, no peer-to-peer, its 8-octet extension outside PD_Length; mpa_frame.h).
  std::uint8_t revision = wire::kMpaRevision2;
  CrcMode crc = CrcMode::kWant;
  bool markers_wanted = false;     // sets M: asks the peer to send markers to us
  bool markers_supported = false;  // can send markers when asked; if not, fails the connection
  // Revision 2 only: peer-to-peer mode with an RTR. An initiator offers `rtr_offer`; a
  // responder accepts the types in `rtr_offer` and picks the first of `rtr_preference` that
  // both have (types missing from the preference list come after it, Read, Write, Send).
  PeerToPeer peer_to_peer = PeerToPeer::kWhenAsked;
  RtrSet rtr_offer{.send = true, .write = true, .read = true};  // our stack does all three
  std::vector<RtrType> rtr_preference;
  // Responder: the RTR types it takes, when not rtr_offer (iw_cxgb4 offers only its p2p_type
  // but takes a Write or a Read from the Request, Write first: process_mpa_request()).
  std::optional<RtrSet> rtr_accepted;
  RtrReply rtr_reply = RtrReply::kChosen;
  NoCommonRtr no_common_rtr = NoCommonRtr::kRefuse;
  RtrCheck rtr_check = RtrCheck::kAgreed;
  RtrFromReply rtr_from_reply = RtrFromReply::kExact;
  // Revision 1 has no RTR negotiation (RFC 5044). With this set, a side that ends up in
  // revision 1 uses its rtr_offer type anyway: the initiator sends it after the Reply, the
  // responder waits for it. iw_cxgb4 with peer2peer=1 (process_mpa_request() and
  // process_mpa_reply(): `revision == 1 && peer2peer` sets p2p_type), also after its
  // revision-1 retry. Needs exactly one type in rtr_offer.
  bool rtr_in_revision1 = false;
  // The STags of the zero-length Read RTR this initiator sends: the sink (its own) and the
  // source (the responder's). RFC 6581 leaves them open; siw sends sink 0, source 1
  // (siw_qp_mpa_rts()), iw_cxgb4 1 and 1 (build_rtr_msg()), irdma 0xabcd and 0x1234
  // (irdma_sc_send_rtt()).
  std::uint32_t read_rtr_sink_stag = 0;
  std::uint32_t read_rtr_source_stag = 0;
  // Responder: a zero-length Read RTR naming source STag 0 is refused with a Terminate
  // (RDMAP, remote protection, invalid STag) instead of answered. RFC 5040 does not check
  // the STag of a zero-length Read; siw's comment "some HW may treat STag 0 special" and
  // cxgb4's T4_ERR_STAG ("STAG invalid: either the STAG is offlimt, being 0, ...") say
  // hardware may.
  bool refuse_zero_stag_read_rtr = false;
  // RFC 6581 s3 inbound/outbound RDMA Read depths (14 bits). Relaxed: a side lowers its ORD
  // to the peer's IRD. Strict: an ORD above the peer's IRD fails with MPA code 0x06.
  std::uint16_t ird = 16;
  std::uint16_t ord = 16;
  bool strict_ird_ord = false;
  std::size_t private_data_limit = wire::kMpaMaxPrivateDataRfc;
  // RFC 5044 s7.1: Res is zero when sending and not checked on reception; a strict receiver
  // (the "strict" personality) rejects it. Kernel siw accepts, and echoes it (a finding).
  bool reject_reserved_bits = false;
  // Initiator: after a reset (or a revision-1 Reply) to a revision-2 Request, retry the
  // connection in revision 1 (cxgb4) instead of failing (siw).
  bool fallback_to_revision1 = false;
  OnNewerRevision on_newer_revision = OnNewerRevision::kReplyOwnRevision;
  Refusal refuse_with = Refusal::kReject;
  OnMalformed on_malformed_frame = OnMalformed::kReset;
  // Responder: the Reply carries the Request's reserved bits back (siw and erdma build the
  // Reply from the Request's header: siw_proc_mpareq(), erdma_proc_mpareq()).
  bool echo_reserved_bits = false;
  // Vendor extension bits this side sets in its own frames (kMpaFlagFpduSizeMask: 0x08 siw's
  // GSO_EXP with try_gso, 0x04/0x08/0x0c Chelsio's FPDU size proposal); 0 for every stack as
  // shipped in Linux 6.18.
  std::uint8_t extension_bits = 0;
  // An IRD or ORD of 0x3fff in the peer's words means "no IRD/ORD negotiation": no check, no
  // lowering, and this side's own later words carry 0x3fff/0x3fff (irdma: IETF_NO_IRD_ORD,
  // irdma_negotiate_mpa_v2_ird_ord() and irdma_build_mpa_v2()).
  bool ird_ord_sentinel = false;
  // Initiator in peer-to-peer mode: send the RTR. False models a peer that never does.
  bool send_rtr = true;
  // Linux siw: 5 s for the Request, 10 s for the Reply; the RTR shares the Request's.
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds reply_timeout{10000};
  std::chrono::milliseconds rtr_timeout{5000};
  // Initiator: after a valid Reply, wait this long before the first FPDU (the RTR; without
  // peer-to-peer, before reporting established, so the application's first message waits
  // too). 0 = none. Kernel siw sends its Reply and only then hands the socket to its QP
  // (siw_cm.c siw_accept()); an FPDU landing in between sits unread until the next segment
  // arrives, which an application waiting for an answer never sends. Tens of milliseconds
  // close that window on real hosts; a TCG guest on a busy host wants more.
  std::chrono::milliseconds first_fpdu_delay{0};

  friend bool operator==(const MpaPolicy&, const MpaPolicy&) = default;
};

// The RTR types a responder takes: rtr_accepted, or rtr_offer when that is not given.
RtrSet accepted_rtrs(const MpaPolicy& policy);

// Checks the fields for contradictions (revision 3, IRD above 14 bits, peer-to-peer without
// revision 2 or without any RTR type...). Empty when the policy is usable.
std::vector<std::string> validate(const MpaPolicy& policy);

}  // namespace rdma_interop::cm
