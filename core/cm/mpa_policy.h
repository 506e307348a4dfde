// mpa_policy.h - what one side of an MPA connection offers, accepts and insists on.
//
// A policy is the part of a peer's personality that MPA connection setup reads (RFC 5044
// s7.1, RFC 6581 s3). Known stacks are policies too: Linux siw (revision 2, Write and Read
// RTR, refuses markers), cxgb4 (peer-to-peer, Read RTR, falls back to revision 1), a
// revision-1-only peer, a peer that never sends its RTR.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
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

// RFC 6581 peer-to-peer mode, per role: an initiator asks for it only in kOn; a responder
// accepts it when asked in kOn and kWhenAsked, and declines (clears the flag) in kOff.
enum class PeerToPeer : std::uint8_t { kOff, kWhenAsked, kOn };

// What a responder that speaks only revision 1 does with a revision-2 Request.
enum class OnNewerRevision : std::uint8_t {
  kReplyOwnRevision,  // RFC 5044 s7.1: answer with its own (lower) revision
  kReset,             // old firmware: abort the TCP connection
};

struct MpaPolicy {
  std::uint8_t revision = wire::kMpaRevision2;  // highest revision spoken: 1 or 2
  CrcMode crc = CrcMode::kWant;
  bool markers_wanted = false;     // sets M: asks the peer to send markers to us
  bool markers_supported = false;  // can send markers when asked; if not, fails the connection
  // Revision 2 only: peer-to-peer mode with an RTR. An initiator offers `rtr_offer`; a
  // responder accepts the types in `rtr_offer` and picks the first of `rtr_preference` that
  // both have (types missing from the preference list come after it, Read, Write, Send).
  PeerToPeer peer_to_peer = PeerToPeer::kWhenAsked;
  RtrSet rtr_offer{.send = true, .write = true, .read = true};  // our stack does all three
  std::vector<RtrType> rtr_preference;
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

// Checks the fields for contradictions (revision 3, IRD above 14 bits, peer-to-peer without
// revision 2 or without any RTR type...). Empty when the policy is usable.
std::vector<std::string> validate(const MpaPolicy& policy);

}  // namespace rdma_interop::cm
