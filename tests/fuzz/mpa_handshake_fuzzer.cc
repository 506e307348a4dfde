// mpa_handshake_fuzzer - MpaHandshake (both roles) fed arbitrary peer octets.
//
// Input: [role/policy octet][decision octet][chunk-size seed] then the peer's byte stream.
// Decision bits 4-6 add a live stack's departures from RFC 6581 (mpa_policy.h): 1 irdma,
// 2 iw_cxgb4, 3 qed, 4 siw, 5 erdma's revision 129, 6 STag-0 Read RTR refused and vendor
// reserved bits sent; policies cm::validate() refuses are skipped.
// The engine must never crash, must finish (established or failed) or keep waiting with a
// deadline, and a failed engine must report exactly one failure. Valid Requests/Replies come
// from the seed corpus of mpa_frame_fuzzer and from libFuzzer's mutations of them.
#include <chrono>
#include <cstdint>
#include <span>

#include "core/cm/mpa_handshake.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;
using rdma_interop::fuzz::SplitMix64;

cm::MpaPolicy policy_from(std::uint8_t b) {
  cm::MpaPolicy p;
  p.revision = (b & 1) ? 1 : 2;
  p.crc = static_cast<cm::CrcMode>((b >> 1) % 3);
  p.markers_wanted = (b & 0x08) != 0;
  p.markers_supported = (b & 0x10) != 0;
  p.peer_to_peer =
      (p.revision == 2) ? static_cast<cm::PeerToPeer>((b >> 5) % 3) : cm::PeerToPeer::kOff;
  p.strict_ird_ord = (b & 0x80) != 0;
  p.fallback_to_revision1 = (b & 0x04) != 0;
  p.private_data_limit = (b & 0x40) ? 256 : 512;
  return p;
}

// The departures a personality can carry (tools/personalities/README.md cites each).
void add_stack(cm::MpaPolicy& p, int which) {
  using cm::RtrType;
  switch (which) {
    case 1:  // irdma
      if (p.revision == 2) p.peer_to_peer = cm::PeerToPeer::kRequired;
      p.rtr_offer = {.write = true, .read = true};
      p.rtr_preference = {RtrType::kRead, RtrType::kWrite};
      p.rtr_from_reply = cm::RtrFromReply::kPreference;
      p.refuse_with = cm::Refusal::kReset;
      p.on_newer_revision = cm::OnNewerRevision::kReset;
      p.ird_ord_sentinel = true;
      p.read_rtr_sink_stag = 0xabcd;
      p.read_rtr_source_stag = 0x1234;
      break;
    case 2:  // iw_cxgb4
      p.rtr_offer = {.read = true};
      p.rtr_accepted = cm::RtrSet{.write = true, .read = true};
      p.rtr_reply = cm::RtrReply::kOwn;
      p.no_common_rtr = cm::NoCommonRtr::kDecline;
      p.rtr_in_revision1 = true;
      p.on_newer_revision = cm::OnNewerRevision::kReset;
      p.read_rtr_sink_stag = p.read_rtr_source_stag = 1;
      break;
    case 3:  // qed
      p.rtr_reply = cm::RtrReply::kAllCommon;
      p.no_common_rtr = cm::NoCommonRtr::kOfferAll;
      p.rtr_check = cm::RtrCheck::kAny;
      p.rtr_from_reply = cm::RtrFromReply::kPreference;
      break;
    case 4:  // siw
      p.rtr_offer = {.write = true, .read = true};
      p.no_common_rtr = cm::NoCommonRtr::kPropose;
      p.rtr_check = cm::RtrCheck::kAny;
      p.echo_reserved_bits = true;
      p.on_newer_revision = cm::OnNewerRevision::kClose;
      p.on_malformed_frame = cm::OnMalformed::kClose;
      break;
    case 5:  // erdma
      p.revision = wire::kMpaRevisionErdma;
      p.peer_to_peer = cm::PeerToPeer::kOff;
      p.on_newer_revision = cm::OnNewerRevision::kClose;
      p.echo_reserved_bits = true;
      break;
    case 6:
      p.refuse_zero_stag_read_rtr = true;
      p.extension_bits = wire::kMpaFlagFpduSizeMask;
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in({data, size});
  const std::uint8_t config = in.u8();
  const std::uint8_t decision = in.u8();
  SplitMix64 rng(in.u16());
  cm::MpaPolicy policy = policy_from(config);
  add_stack(policy, (decision >> 4) & 0x07);
  if (!cm::validate(policy).empty()) return 0;
  const bool initiator = (decision & 1) != 0;
  const auto t0 = cm::Clock::now();
  cm::MpaHandshake hs = initiator ? cm::MpaHandshake::initiator(policy, {'f', 'z'}, t0)
                                  : cm::MpaHandshake::responder(policy, t0);
  (void)hs.take_output();

  int failures = 0;
  auto drain = [&] {
    while (auto ev = hs.poll_event()) {
      if (ev->type == cm::CmEventType::kConnectRequest) {
        fuzz_check(!initiator, "an initiator reported a connect request");
        if (decision & 2) {
          hs.reject({'n', 'o'}, t0);
        } else {
          hs.accept({'o', 'k'}, t0);
        }
      }
      if (ev->type == cm::CmEventType::kFailed || ev->type == cm::CmEventType::kRetryRevision1) {
        ++failures;
      }
    }
    (void)hs.take_output();
  };

  auto stream = in.rest();
  while (!stream.empty()) {
    const std::size_t n = rng.in_range(1, stream.size() < 64 ? stream.size() : 64);
    hs.on_bytes(stream.first(n), t0);
    stream = stream.subspan(n);
    drain();
  }
  if (decision & 4) hs.on_peer_closed((decision & 8) != 0, t0);
  drain();
  if (!hs.finished()) {
    fuzz_check(hs.next_deadline().has_value() || !initiator,
               "an unfinished initiator has no deadline");
    hs.on_timer(t0 + std::chrono::hours(1));
    drain();
  }
  fuzz_check(failures <= 1, "more than one failure reported");
  if (hs.established()) (void)hs.take_handover();
  return 0;
}
