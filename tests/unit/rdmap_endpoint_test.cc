// RdmapEndpoint: two queue pairs wired back to back in memory. Every ULPDU one side hands
// out (header octets then payload) is fed to the other, as the FPDU codec would after
// framing. Scenarios follow RFC 5040 (RDMAP), RFC 5041 (DDP) and Linux siw's error choices.
#include "core/rdmap/rdmap_endpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/util/byte_order.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/read_request.h"
#include "wire_test_util.h"

namespace rdma_interop::rdmap {
namespace {

using wire::DdpHeader;
using wire::RdmapOpcode;
using wire::TerminateCause;
using wire::TermLayer;
using wire::testing::Bytes;
using wire::testing::pattern;

constexpr TerminateCause kDdpInvalidStag{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                         wire::kDdpTaggedCodeInvalidStag};
constexpr TerminateCause kDdpBounds{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                    wire::kDdpTaggedCodeBaseOrBounds};
constexpr TerminateCause kRdmapInvalidStag{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                           wire::kRdmapCodeInvalidStag};
constexpr TerminateCause kRdmapBounds{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                      wire::kRdmapCodeBaseOrBounds};
constexpr TerminateCause kRdmapRights{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                      wire::kRdmapCodeAccessRights};
constexpr TerminateCause kNoBuffer{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                   wire::kDdpUntaggedCodeNoBuffer};
constexpr TerminateCause kMsnRange{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                   wire::kDdpUntaggedCodeMsnRange};
constexpr TerminateCause kTooLong{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                  wire::kDdpUntaggedCodeMessageTooLong};
constexpr TerminateCause kIrdExceeded{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                      wire::kRdmapCodeCatastrophicStream};

cm::NegotiatedParams params(std::uint16_t ird = 4, std::uint16_t ord = 4) {
  cm::NegotiatedParams p;
  p.revision = wire::kMpaRevision2;
  p.crc = true;
  p.enhanced = true;
  p.ird = ird;
  p.ord = ord;
  p.peer_ird = ord;
  p.peer_ord = ird;
  return p;
}

Bytes to_bytes(const OutgoingUlpdu& u) {
  Bytes b(u.header_octets().begin(), u.header_octets().end());
  b.insert(b.end(), u.payload.begin(), u.payload.end());
  return b;
}

std::optional<Bytes> take(RdmapEndpoint& ep) {
  auto u = ep.next_outgoing();
  if (!u) return std::nullopt;
  return to_bytes(*u);
}

DdpHeader header_of(const Bytes& ulpdu) {
  auto s = wire::decode_ddp_segment(ulpdu);
  EXPECT_TRUE(s) << "outgoing ULPDU does not decode";
  return s ? s->header : DdpHeader{};
}

// One queue pair with its own protection domain and buffers.
struct Side {
  explicit Side(cm::NegotiatedParams p = params(), cm::RdmapSequence seq = {},
                EndpointLimits limits = {}, bool hold = false)
      : ep(p, seq, memory, limits, hold) {}

  // Registers a new zeroed buffer and returns {stag, address}.
  std::pair<std::uint32_t, std::uint64_t> buffer(std::size_t length, std::uint32_t access,
                                                 std::uint8_t fill = 0) {
    buffers.push_back(std::make_unique<std::vector<std::uint8_t>>(length, fill));
    auto& b = *buffers.back();
    return {memory.register_region(b.data(), b.size(), access),
            reinterpret_cast<std::uintptr_t>(b.data())};
  }
  std::pair<std::uint32_t, std::uint64_t> buffer(const Bytes& contents, std::uint32_t access) {
    auto r = buffer(contents.size(), access);
    std::memcpy(reinterpret_cast<void*>(r.second), contents.data(), contents.size());
    return r;
  }
  // What a peer names a buffer registered here by: its tagged offset (memory_registry.h:
  // offsets count from each region's start), never its address.
  std::uint64_t to(std::pair<std::uint32_t, std::uint64_t> buf) const {
    auto offset = memory.tagged_offset(buf.first, buf.second);
    EXPECT_TRUE(offset.has_value());
    return offset.value_or(~0ull);
  }
  static Bytes read(std::uint64_t addr, std::size_t length) {
    auto* p = reinterpret_cast<const std::uint8_t*>(addr);
    return Bytes(p, p + length);
  }
  void post_recv(std::uint64_t wr_id, std::size_t length) {
    auto [stag, addr] = buffer(length, kLocalWrite);
    recv_addr[wr_id] = addr;
    ASSERT_FALSE(ep.post_recv(
        RecvWr{.wr_id = wr_id, .sge = {addr, static_cast<std::uint32_t>(length), stag}}));
  }
  std::vector<WorkCompletion> completions() {
    std::vector<WorkCompletion> out;
    while (auto wc = ep.poll_completion()) out.push_back(*wc);
    return out;
  }

  MemoryRegistry memory;
  RdmapEndpoint ep;
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> buffers;
  std::map<std::uint64_t, std::uint64_t> recv_addr;
};

SendWr send_wr(std::uint64_t wr_id, std::pair<std::uint32_t, std::uint64_t> local,
               std::uint32_t length, WrOpcode op = WrOpcode::kSend) {
  return SendWr{.wr_id = wr_id, .opcode = op, .sge = {local.second, length, local.first}};
}
SendWr write_wr(std::uint64_t wr_id, std::pair<std::uint32_t, std::uint64_t> local,
                std::uint32_t length, std::uint32_t rkey, std::uint64_t raddr) {
  return SendWr{.wr_id = wr_id,
                .opcode = WrOpcode::kRdmaWrite,
                .sge = {local.second, length, local.first},
                .remote_stag = rkey,
                .remote_addr = raddr};
}
SendWr read_wr(std::uint64_t wr_id, std::pair<std::uint32_t, std::uint64_t> local,
               std::uint32_t length, std::uint32_t rkey, std::uint64_t raddr) {
  return SendWr{.wr_id = wr_id,
                .opcode = WrOpcode::kRdmaRead,
                .sge = {local.second, length, local.first},
                .remote_stag = rkey,
                .remote_addr = raddr};
}

// Moves up to `limit` ULPDUs from one side to the other; returns how many.
int pump(Side& from, Side& to, int limit = INT_MAX) {
  int n = 0;
  while (n < limit) {
    auto u = take(from.ep);
    if (!u) break;
    to.ep.on_ulpdu(*u);
    ++n;
  }
  return n;
}
void pump_all(Side& a, Side& b) {
  for (int guard = 0; guard < 10000 && (a.ep.has_outgoing() || b.ep.has_outgoing()); ++guard) {
    pump(a, b);
    pump(b, a);
  }
}

const WorkCompletion* find_wc(const std::vector<WorkCompletion>& wcs, std::uint64_t wr_id) {
  for (const auto& wc : wcs) {
    if (wc.wr_id == wr_id) return &wc;
  }
  return nullptr;
}

// Every wr_id completes exactly once.
void expect_each_once(const std::vector<WorkCompletion>& wcs,
                      std::initializer_list<std::uint64_t> ids) {
  std::multiset<std::uint64_t> seen;
  for (const auto& wc : wcs) seen.insert(wc.wr_id);
  for (auto id : ids) EXPECT_EQ(seen.count(id), 1u) << "wr_id " << id;
  EXPECT_EQ(seen.size(), ids.size());
}

// ---- Send / Receive ------------------------------------------------------------------

TEST(RdmapEndpointSend, SingleSegmentSendLandsInOldestReceive) {
  Side a, b;
  b.post_recv(100, 64);
  b.post_recv(101, 64);
  const Bytes msg = pattern(40, 7);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(msg, 0), 40)));
  pump_all(a, b);

  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].wr_id, 100u);
  EXPECT_EQ(bw[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(bw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(bw[0].byte_len, 40u);
  EXPECT_FALSE(bw[0].solicited);
  EXPECT_FALSE(bw[0].invalidated_stag);
  EXPECT_EQ(Side::read(b.recv_addr[100], 40), msg);

  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].wr_id, 1u);
  EXPECT_EQ(aw[0].opcode, WcOpcode::kSend);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(aw[0].byte_len, 40u);
  EXPECT_EQ(b.ep.counters().bytes_placed, 40u);
  EXPECT_EQ(a.ep.counters().ulpdus_sent, 1u);
  EXPECT_EQ(b.ep.counters().ulpdus_received, 1u);
}

TEST(RdmapEndpointSend, MsnsContinueAfterTheRtr) {
  // The MPA handshake used MSN 1 for a Send RTR on QN 0 (RFC 6581); data starts at 2.
  cm::RdmapSequence a_seq;
  a_seq.next_send_msn_tx = 2;
  cm::RdmapSequence b_seq;
  b_seq.next_send_msn_rx = 2;
  Side a(params(), a_seq), b(params(), b_seq);
  b.post_recv(100, 16);
  b.post_recv(101, 16);
  auto local = a.buffer(pattern(16), 0);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, local, 16)));
  ASSERT_FALSE(a.ep.post_send(send_wr(2, local, 16)));
  auto first = take(a.ep);
  auto second = take(a.ep);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(header_of(*first).msn, 2u);
  EXPECT_EQ(header_of(*second).msn, 3u);
  EXPECT_EQ(header_of(*first).queue_number, wire::kQnSend);
  b.ep.on_ulpdu(*first);
  b.ep.on_ulpdu(*second);
  EXPECT_EQ(b.completions().size(), 2u);
  EXPECT_EQ(b.ep.state(), EndpointState::kRunning);
}

TEST(RdmapEndpointSend, LargeSendLeavesAsSegmentsAndIsPlacedAtEachMo) {
  EndpointLimits small{.max_ulpdu = 18 + 64};
  Side a(params(), {}, small), b(params(), {}, small);
  b.post_recv(100, 1000);
  const Bytes msg = pattern(1000, 3);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(msg, 0), 1000)));

  std::vector<Bytes> segments;
  while (auto u = take(a.ep)) segments.push_back(*u);
  ASSERT_EQ(segments.size(), 16u);  // ceil(1000 / 64)
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto h = header_of(segments[i]);
    EXPECT_FALSE(h.tagged);
    EXPECT_EQ(h.msn, 1u);
    EXPECT_EQ(h.message_offset, i * 64);
    EXPECT_EQ(h.last, i + 1 == segments.size());
    EXPECT_LE(segments[i].size(), small.max_ulpdu);
  }
  // The sender completes once the last segment is handed out.
  ASSERT_EQ(a.completions().size(), 1u);
  for (std::size_t i = 0; i + 1 < segments.size(); ++i) {
    b.ep.on_ulpdu(segments[i]);
    EXPECT_TRUE(b.completions().empty()) << "completed before L at segment " << i;
  }
  b.ep.on_ulpdu(segments.back());
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].byte_len, 1000u);
  EXPECT_EQ(Side::read(b.recv_addr[100], 1000), msg);
}

TEST(RdmapEndpointSend, ZeroLengthSendConsumesAReceive) {
  Side a, b;
  b.post_recv(100, 16);
  SendWr empty;
  empty.wr_id = 1;
  ASSERT_FALSE(a.ep.post_send(empty));
  pump_all(a, b);
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(bw[0].byte_len, 0u);
}

TEST(RdmapEndpointSend, SolicitedEventIsReported) {
  Side a, b;
  b.post_recv(100, 16);
  ASSERT_FALSE(
      a.ep.post_send(send_wr(1, a.buffer(pattern(8), 0), 8, WrOpcode::kSendWithSolicitedEvent)));
  auto u = take(a.ep);
  ASSERT_TRUE(u);
  EXPECT_EQ(header_of(*u).opcode, RdmapOpcode::kSendWithSolicitedEvent);
  b.ep.on_ulpdu(*u);
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_TRUE(bw[0].solicited);
}

TEST(RdmapEndpointTerminate, AMalformedTerminateEndsTheStreamAndIsKept) {
  Side b;
  b.post_recv(100, 16);
  // Kernel siw's layout: M and D in the low bits of Terminate Control's third octet.
  const auto body = wire::testing::hex("11 00 03 00 00 1e");
  std::vector<std::uint8_t> ulpdu(wire::kDdpUntaggedHeaderLen);
  wire::encode_ddp_header(wire::terminate_header(1), ulpdu);
  ulpdu.insert(ulpdu.end(), body.begin(), body.end());
  b.ep.on_ulpdu(ulpdu);
  EXPECT_EQ(b.ep.state(), EndpointState::kError);
  EXPECT_FALSE(b.ep.terminate_received().has_value());
  ASSERT_TRUE(b.ep.malformed_terminate_received().has_value());
  EXPECT_EQ(b.ep.malformed_terminate_received()->error, wire::WireError::kTerminateReservedBits);
  EXPECT_EQ(b.ep.malformed_terminate_received()->cause,
            (wire::TerminateCause{wire::TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, 0}));
  // Outstanding work is flushed, and no Terminate goes back (RFC 5040 s4.8).
  auto wcs = b.completions();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kFlushed);
  EXPECT_FALSE(b.ep.terminate_sent().has_value());
}

TEST(RdmapEndpointSend, UnsignaledSendCompletesSilently) {
  Side a, b;
  b.post_recv(100, 16);
  SendWr wr = send_wr(1, a.buffer(pattern(8), 0), 8);
  wr.signaled = false;
  ASSERT_FALSE(a.ep.post_send(wr));
  pump_all(a, b);
  EXPECT_TRUE(a.completions().empty());
  EXPECT_EQ(b.completions().size(), 1u);
}

TEST(RdmapEndpointSend, SendWithInvalidateRevokesTheStagForLaterWrites) {
  Side a, b;
  auto target = b.buffer(64, kRemoteWrite | kLocalWrite);
  b.post_recv(100, 16);
  SendWr inv =
      send_wr(1, a.buffer(pattern(4), 0), 4, WrOpcode::kSendWithSolicitedEventAndInvalidate);
  inv.invalidate_stag = target.first;
  ASSERT_FALSE(a.ep.post_send(inv));
  auto u = take(a.ep);
  ASSERT_TRUE(u);
  EXPECT_EQ(header_of(*u).opcode, RdmapOpcode::kSendWithSolicitedEventAndInvalidate);
  EXPECT_EQ(header_of(*u).invalidate_stag, target.first);
  b.ep.on_ulpdu(*u);
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(bw[0].solicited);
  ASSERT_TRUE(bw[0].invalidated_stag);
  EXPECT_EQ(*bw[0].invalidated_stag, target.first);
  EXPECT_FALSE(b.memory.find(target.first)->valid);

  // A Write to the invalidated STag is an invalid STag (RFC 5041 s7.2).
  const Bytes data = pattern(8);
  ASSERT_FALSE(a.ep.post_send(write_wr(2, a.buffer(data, 0), 8, target.first, b.to(target))));
  pump_all(a, b);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kDdpInvalidStag);
  ASSERT_TRUE(a.ep.terminate_received());
  EXPECT_EQ(a.ep.terminate_received()->cause, kDdpInvalidStag);
  EXPECT_EQ(Side::read(target.second, 8), Bytes(8, 0));
}

TEST(RdmapEndpointSend, InvalidatingAnUnknownStagIsATerminate) {
  Side a, b;
  b.post_recv(100, 16);
  SendWr inv = send_wr(1, a.buffer(pattern(4), 0), 4, WrOpcode::kSendWithInvalidate);
  inv.invalidate_stag = 0x5500;
  ASSERT_FALSE(a.ep.post_send(inv));
  pump_all(a, b);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause,
            (TerminateCause{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                            wire::kRdmapCodeCannotInvalidate}));
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].status, WcStatus::kRemoteOperationError);
}

// ---- RDMA Write ------------------------------------------------------------------------

TEST(RdmapEndpointWrite, MultiSegmentWriteAdvancesTheTaggedOffset) {
  EndpointLimits small{.max_ulpdu = 14 + 100};
  Side a(params(), {}, small), b(params(), {}, small);
  auto target = b.buffer(1024, kRemoteWrite);
  const Bytes data = pattern(450, 9);
  ASSERT_FALSE(
      a.ep.post_send(write_wr(1, a.buffer(data, 0), 450, target.first, b.to(target) + 10)));
  std::vector<Bytes> segments;
  while (auto u = take(a.ep)) segments.push_back(*u);
  ASSERT_EQ(segments.size(), 5u);
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto h = header_of(segments[i]);
    EXPECT_TRUE(h.tagged);
    EXPECT_EQ(h.opcode, RdmapOpcode::kRdmaWrite);
    EXPECT_EQ(h.stag, target.first);
    EXPECT_EQ(h.tagged_offset, b.to(target) + 10 + i * 100);
    EXPECT_EQ(h.last, i == 4);
    b.ep.on_ulpdu(segments[i]);
  }
  EXPECT_EQ(Side::read(target.second + 10, 450), data);
  EXPECT_EQ(Side::read(target.second, 10), Bytes(10, 0));
  EXPECT_TRUE(b.completions().empty());  // a Write consumes nothing at the target
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.ep.counters().bytes_placed, 450u);
}

// Direct placement: a reader that has a Write's header asks where the rest goes, reads it
// there itself, and hands the ULPDU over with that range named.
TEST(RdmapEndpointWrite, PlacementTargetNamesTheRestOfAWritesPayloadAndOnlyThat) {
  Side a, b;
  auto target = b.buffer(4096, kRemoteWrite);
  const Bytes data = pattern(3000, 5);
  ASSERT_FALSE(
      a.ep.post_send(write_wr(1, a.buffer(data, 0), 3000, target.first, b.to(target) + 96)));
  const auto u = take(a.ep);
  ASSERT_TRUE(u);
  const std::span<const std::uint8_t> ulpdu(*u);
  const std::size_t received = 14 + 1000;  // the header and the payload's first 1000 octets
  const wire::UlpduInProgress arriving{ulpdu.first(received), received, ulpdu.size()};
  const std::span<std::uint8_t> place = b.ep.placement_target(arriving);
  ASSERT_EQ(place.size(), 2000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(place.data()), target.second + 96 + 1000);

  // The reader reads 2000 octets there; the ULPDU it hands over holds anything in that range.
  std::copy(ulpdu.begin() + received, ulpdu.end(), place.begin());
  Bytes handed = *u;
  std::fill(handed.begin() + received, handed.end(), 0xee);
  b.ep.on_ulpdu(handed, wire::PlacedRange{received, 2000});
  EXPECT_EQ(Side::read(target.second + 96, 3000), data);
  EXPECT_EQ(b.ep.state(), EndpointState::kRunning);
  EXPECT_EQ(b.ep.counters().bytes_placed, 3000u);

  // Nothing to name: a header not all here, a bad STag, past the region's end, a Send.
  EXPECT_TRUE(b.ep.placement_target({ulpdu.first(13), 13, ulpdu.size()}).empty());
  Bytes bad_stag = *u;
  bad_stag[2] ^= 0x40;
  EXPECT_TRUE(b.ep.placement_target({std::span<const std::uint8_t>(bad_stag).first(received),
                                     received, bad_stag.size()}).empty());
  EXPECT_TRUE(b.ep.placement_target({ulpdu.first(received), received, 14 + 4096}).empty());
  b.post_recv(100, 4096);
  ASSERT_FALSE(a.ep.post_send(send_wr(2, a.buffer(data, 0), 3000)));
  const auto send = take(a.ep);
  ASSERT_TRUE(send);
  EXPECT_TRUE(b.ep.placement_target({std::span<const std::uint8_t>(*send).first(1000), 1000,
                                     send->size()}).empty());
}

TEST(RdmapEndpointWrite, APlacedRangeOnAnythingButAWriteIsATerminate) {
  Side a, b;
  b.post_recv(100, 64);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(pattern(40), 0), 40)));
  const auto u = take(a.ep);
  ASSERT_TRUE(u);
  b.ep.on_ulpdu(*u, wire::PlacedRange{20, 10});
  EXPECT_NE(b.ep.state(), EndpointState::kRunning);
  ASSERT_TRUE(b.ep.terminate_sent().has_value());
  const auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_NE(bw[0].status, WcStatus::kSuccess)
      << "the receive is flushed, never completed with what the range held";
}

TEST(RdmapEndpointWrite, ZeroLengthWriteIsNeverChecked) {
  Side a, b;
  ASSERT_FALSE(a.ep.post_send(write_wr(1, {0, 0}, 0, 0, 0)));
  pump_all(a, b);
  EXPECT_EQ(b.ep.state(), EndpointState::kRunning);
  EXPECT_EQ(a.completions().size(), 1u);
}

// IBV_SEND_INLINE: no key, and the poster's buffer is read until own_inline_payloads(),
// after which the rest comes from the endpoint's copy.
TEST(RdmapEndpointWrite, AnInlineWriteNeedsNoKeyAndIsCopiedWhenItsPosterLetsGo) {
  EndpointLimits small{.max_ulpdu = 14 + 100};
  Side a(params(), {}, small), b(params(), {}, small);
  auto target = b.buffer(1024, kRemoteWrite);
  const Bytes data = pattern(450, 9);
  Bytes poster = data;
  SendWr wr = write_wr(1, {0, reinterpret_cast<std::uintptr_t>(poster.data())}, 450,
                       target.first, b.to(target));
  wr.inline_data = true;
  ASSERT_FALSE(a.ep.post_send(wr));
  ASSERT_EQ(pump(a, b, 2), 2);  // two segments from the poster's buffer
  a.ep.own_inline_payloads();
  std::fill(poster.begin(), poster.end(), 0xEE);  // the poster's again
  pump_all(a, b);
  EXPECT_EQ(Side::read(target.second, 450), data);
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);

  // An inline Read would have the peer write into memory nobody registered.
  Bytes sink(16);
  SendWr read = read_wr(2, {0, reinterpret_cast<std::uintptr_t>(sink.data())}, 16,
                        target.first, b.to(target));
  read.inline_data = true;
  EXPECT_EQ(a.ep.post_send(read), PostError::kInvalidRequest);
}

// ---- RDMA Read -------------------------------------------------------------------------

TEST(RdmapEndpointRead, MultiSegmentReadResponseCompletesOnTheLast) {
  EndpointLimits small{.max_ulpdu = 14 + 128};
  Side a(params(), {}, small), b(params(), {}, small);
  const Bytes data = pattern(1000, 21);
  auto source = b.buffer(data, kRemoteRead);
  auto sink = a.buffer(1000, kLocalWrite);
  ASSERT_FALSE(a.ep.post_send(read_wr(1, sink, 1000, source.first, b.to(source))));

  auto request = take(a.ep);
  ASSERT_TRUE(request);
  const auto h = header_of(*request);
  EXPECT_EQ(h.opcode, RdmapOpcode::kRdmaReadRequest);
  EXPECT_EQ(h.queue_number, wire::kQnReadRequest);
  EXPECT_EQ(h.msn, 1u);
  auto body = wire::decode_read_request(std::span(*request).subspan(18));
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, (wire::ReadRequest{.sink_stag = sink.first,
                                      .sink_tagged_offset = a.to(sink),
                                      .size = 1000,
                                      .source_stag = source.first,
                                      .source_tagged_offset = b.to(source)}));
  EXPECT_EQ(a.ep.counters().reads_outstanding, 1u);
  EXPECT_TRUE(a.completions().empty());

  b.ep.on_ulpdu(*request);
  EXPECT_EQ(b.ep.counters().peer_reads_queued, 1u);
  std::vector<Bytes> responses;
  while (auto u = take(b.ep)) responses.push_back(*u);
  ASSERT_EQ(responses.size(), 8u);  // ceil(1000 / 128)
  for (std::size_t i = 0; i < responses.size(); ++i) {
    const auto r = header_of(responses[i]);
    EXPECT_EQ(r.opcode, RdmapOpcode::kRdmaReadResponse);
    EXPECT_EQ(r.stag, sink.first);
    EXPECT_EQ(r.tagged_offset, a.to(sink) + i * 128);
    EXPECT_EQ(r.last, i == 7);
    a.ep.on_ulpdu(responses[i]);
    if (i < 7) {
      EXPECT_TRUE(a.completions().empty());
    }
  }
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(aw[0].byte_len, 1000u);
  EXPECT_EQ(Side::read(sink.second, 1000), data);
  EXPECT_EQ(a.ep.counters().reads_outstanding, 0u);
  EXPECT_EQ(b.ep.counters().peer_reads_queued, 0u);
  EXPECT_TRUE(b.completions().empty());
}

TEST(RdmapEndpointRead, ZeroLengthReadIsNeverStagChecked) {
  Side a, b;
  ASSERT_FALSE(a.ep.post_send(read_wr(1, {0, 0}, 0, 0x1234500, 0)));
  pump_all(a, b);
  EXPECT_EQ(a.ep.state(), EndpointState::kRunning);
  EXPECT_EQ(b.ep.state(), EndpointState::kRunning);
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(aw[0].byte_len, 0u);
}

TEST(RdmapEndpointRead, ZeroLengthReadResponseIsNotMatchedAgainstAnStag) {
  Side a;
  ASSERT_FALSE(a.ep.post_send(read_wr(1, {0, 0}, 0, 1, 0)));
  ASSERT_TRUE(take(a.ep));
  Bytes response(14);
  wire::encode_ddp_header(wire::read_response_header(/*sink_stag=*/1, 0, true), response);
  a.ep.on_ulpdu(response);
  EXPECT_EQ(a.ep.state(), EndpointState::kRunning);
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 1u);
  EXPECT_EQ(aw[0].status, WcStatus::kSuccess);
}

TEST(RdmapEndpointRead, ReadRequestMsnsContinueAfterTheReadRtr) {
  cm::RdmapSequence a_seq;
  a_seq.next_read_msn_tx = 2;
  cm::RdmapSequence b_seq;
  b_seq.next_read_msn_rx = 2;
  Side a(params(), a_seq), b(params(), b_seq);
  auto source = b.buffer(pattern(8), kRemoteRead);
  ASSERT_FALSE(a.ep.post_send(read_wr(1, a.buffer(8, kLocalWrite), 8, source.first, b.to(source))));
  auto request = take(a.ep);
  ASSERT_TRUE(request);
  EXPECT_EQ(header_of(*request).msn, 2u);
  b.ep.on_ulpdu(*request);
  pump_all(a, b);
  EXPECT_EQ(a.completions().size(), 1u);
  EXPECT_EQ(b.ep.state(), EndpointState::kRunning);
}

TEST(RdmapEndpointRead, ReadsBeyondOrdWaitInTheSendQueueInOrder) {
  Side a(params(4, 2)), b(params(4, 4));
  auto source = b.buffer(pattern(64), kRemoteRead);
  b.post_recv(100, 16);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    ASSERT_FALSE(
        a.ep.post_send(read_wr(id, a.buffer(16, kLocalWrite), 16, source.first, b.to(source))));
  }
  ASSERT_FALSE(a.ep.post_send(send_wr(4, a.buffer(pattern(4), 0), 4)));

  EXPECT_EQ(pump(a, b), 2);  // ORD 2: the third Read, and the Send behind it, wait
  EXPECT_FALSE(a.ep.has_outgoing());
  EXPECT_EQ(a.ep.counters().reads_outstanding, 2u);
  EXPECT_EQ(pump(b, a, 1), 1);  // one Read Response frees a slot
  ASSERT_TRUE(a.ep.has_outgoing());
  auto next = take(a.ep);
  ASSERT_TRUE(next);
  EXPECT_EQ(header_of(*next).opcode, RdmapOpcode::kRdmaReadRequest);
  EXPECT_EQ(header_of(*next).msn, 3u);
  b.ep.on_ulpdu(*next);
  auto send = take(a.ep);  // only now the Send behind the third Read
  ASSERT_TRUE(send);
  EXPECT_EQ(header_of(*send).opcode, RdmapOpcode::kSend);
  b.ep.on_ulpdu(*send);
  pump_all(a, b);
  // As in siw, a Send completes when handed out, a Read when its response is placed.
  auto aw = a.completions();
  expect_each_once(aw, {1, 2, 3, 4});
  for (const auto& wc : aw) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(b.completions().size(), 1u);
}

TEST(RdmapEndpointRead, MoreReadRequestsThanIrdIsATerminate) {
  Side a(params(4, 3)), b(params(2, 4));
  auto source = b.buffer(pattern(64), kRemoteRead);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    ASSERT_FALSE(
        a.ep.post_send(read_wr(id, a.buffer(16, kLocalWrite), 16, source.first, b.to(source))));
  }
  std::vector<Bytes> requests;
  while (auto u = take(a.ep)) requests.push_back(*u);
  ASSERT_EQ(requests.size(), 3u);
  for (const auto& r : requests) b.ep.on_ulpdu(r);  // B answers none before the third

  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kIrdExceeded);
  // The Terminate echoes the Read Request it refuses (RFC 5040 s4.8: D and R).
  EXPECT_EQ(b.ep.terminate_sent()->ddp_header,
            Bytes(requests[2].begin(), requests[2].begin() + 18));
  EXPECT_TRUE(b.ep.terminate_sent()->rdmap_header_included);
  EXPECT_EQ(b.ep.state(), EndpointState::kTerminating);
  EXPECT_EQ(b.ep.counters().peer_reads_queued, 0u);

  // Only the Terminate goes out; the queued Read Responses are dropped.
  auto term = take(b.ep);
  ASSERT_TRUE(term);
  EXPECT_EQ(header_of(*term).opcode, RdmapOpcode::kTerminate);
  EXPECT_FALSE(take(b.ep));
  EXPECT_TRUE(b.ep.close_requested());
  a.ep.on_ulpdu(*term);
  EXPECT_TRUE(a.ep.close_requested());
  auto aw = a.completions();
  expect_each_once(aw, {1, 2, 3});
  EXPECT_EQ(find_wc(aw, 1)->status, WcStatus::kFlushed);
  EXPECT_EQ(find_wc(aw, 2)->status, WcStatus::kFlushed);
  EXPECT_EQ(find_wc(aw, 3)->status, WcStatus::kRemoteOperationError);
  ASSERT_TRUE(find_wc(aw, 3)->terminate);
  EXPECT_EQ(*find_wc(aw, 3)->terminate, kIrdExceeded);
}

TEST(RdmapEndpointRead, ReadResponsesAndOwnSendsTakeTurns) {
  Side a, b;
  auto source = b.buffer(pattern(64), kRemoteRead);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    ASSERT_FALSE(
        a.ep.post_send(read_wr(id, a.buffer(8, kLocalWrite), 8, source.first, b.to(source))));
    a.post_recv(100 + id, 16);
  }
  pump(a, b);  // three Read Requests queued at B
  auto local = b.buffer(pattern(8), 0);
  for (std::uint64_t id = 11; id <= 13; ++id) ASSERT_FALSE(b.ep.post_send(send_wr(id, local, 8)));
  std::vector<RdmapOpcode> order;
  while (auto u = take(b.ep)) {
    order.push_back(header_of(*u).opcode);
    a.ep.on_ulpdu(*u);
  }
  ASSERT_EQ(order.size(), 6u);
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    EXPECT_NE(order[i], order[i + 1]) << "no alternation at " << i;
  }
  EXPECT_EQ(a.completions().size(), 6u);
}

// ---- Remote access errors --------------------------------------------------------------

struct AccessCase {
  const char* name;
  bool read;  // RDMA Read (source check) or RDMA Write (placement)
  bool bad_stag;
  std::uint64_t offset;  // into the 64-octet target
  std::uint32_t access;  // of the target region
  TerminateCause expected;
};

class RdmapEndpointAccess : public ::testing::TestWithParam<AccessCase> {};

TEST_P(RdmapEndpointAccess, TerminateAndCompletionsOnBothSides) {
  const AccessCase& c = GetParam();
  Side a, b;
  auto target = b.buffer(64, c.access);
  const std::uint32_t rkey = c.bad_stag ? target.first + 0x100000 : target.first;
  a.post_recv(200, 16);
  b.post_recv(300, 16);
  auto local = a.buffer(pattern(16), kLocalWrite);
  SendWr wr = c.read ? read_wr(1, local, 16, rkey, b.to(target) + c.offset)
                     : write_wr(1, local, 16, rkey, b.to(target) + c.offset);
  ASSERT_FALSE(a.ep.post_send(wr));
  auto offending = take(a.ep);
  ASSERT_TRUE(offending);
  ASSERT_FALSE(a.ep.post_send(send_wr(2, local, 4)));  // still in A's send queue

  b.ep.on_ulpdu(*offending);
  ASSERT_TRUE(b.ep.terminate_sent()) << c.name;
  const auto& sent = *b.ep.terminate_sent();
  EXPECT_EQ(sent.cause, c.expected) << c.name;
  // The Terminate carries the offending headers (RFC 5040 s4.8).
  ASSERT_TRUE(sent.ddp_segment_length);
  EXPECT_EQ(*sent.ddp_segment_length, offending->size());
  const std::size_t hlen = c.read ? 18 : 14;
  EXPECT_EQ(sent.ddp_header, Bytes(offending->begin(), offending->begin() + hlen));
  EXPECT_EQ(sent.rdmap_header_included, c.read);
  EXPECT_EQ(Side::read(target.second, 64), Bytes(64, 0));

  auto bw = b.completions();
  expect_each_once(bw, {300});
  EXPECT_EQ(bw[0].status, WcStatus::kFlushed);

  auto term = take(b.ep);
  ASSERT_TRUE(term);
  const auto th = header_of(*term);
  EXPECT_EQ(th.opcode, RdmapOpcode::kTerminate);
  EXPECT_EQ(th.queue_number, wire::kQnTerminate);
  EXPECT_TRUE(th.last);
  a.ep.on_ulpdu(*term);
  ASSERT_TRUE(a.ep.terminate_received());
  EXPECT_EQ(*a.ep.terminate_received(), sent);
  EXPECT_EQ(a.ep.state(), EndpointState::kError);
  EXPECT_TRUE(a.ep.close_requested());
  EXPECT_FALSE(a.ep.terminate_sent());  // a Terminate is never answered

  auto aw = a.completions();
  // A Write already completed when handed out (as in siw); a Read is named by the
  // Terminate and fails with a remote access error.
  expect_each_once(aw, {1, 2, 200});
  EXPECT_EQ(find_wc(aw, 1)->status, c.read ? WcStatus::kRemoteAccessError : WcStatus::kSuccess);
  if (c.read) {
    EXPECT_EQ(*find_wc(aw, 1)->terminate, c.expected);
  }
  EXPECT_EQ(find_wc(aw, 2)->status, WcStatus::kFlushed);
  EXPECT_EQ(find_wc(aw, 200)->status, WcStatus::kFlushed);
  EXPECT_EQ(find_wc(aw, 200)->opcode, WcOpcode::kRecv);
  EXPECT_EQ(a.ep.post_send(send_wr(3, local, 4)), PostError::kNotConnected);
  EXPECT_EQ(b.ep.post_recv(RecvWr{.wr_id = 301, .sge = {}}), PostError::kNotConnected);
}

INSTANTIATE_TEST_SUITE_P(
    SiwChoices, RdmapEndpointAccess,
    ::testing::Values(
        AccessCase{"write_invalid_stag", false, true, 0, kRemoteWrite, kDdpInvalidStag},
        AccessCase{"write_bounds", false, false, 60, kRemoteWrite, kDdpBounds},
        AccessCase{"write_rights", false, false, 0, kRemoteRead, kRdmapRights},
        AccessCase{"read_invalid_stag", true, true, 0, kRemoteRead, kRdmapInvalidStag},
        AccessCase{"read_bounds", true, false, 60, kRemoteRead, kRdmapBounds},
        AccessCase{"read_rights", true, false, 0, kRemoteWrite, kRdmapRights}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RdmapEndpointErrors, WriteStillBeingSegmentedIsNamedByTheTerminate) {
  EndpointLimits small{.max_ulpdu = 14 + 16};
  Side a(params(), {}, small), b(params(), {}, small);
  auto local = a.buffer(pattern(64), 0);
  ASSERT_FALSE(a.ep.post_send(write_wr(1, local, 64, 0x77700, 0)));
  ASSERT_EQ(pump(a, b, 1), 1);  // first segment only
  pump(b, a);
  auto aw = a.completions();
  expect_each_once(aw, {1});
  EXPECT_EQ(aw[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(aw[0].byte_len, 16u);
  EXPECT_EQ(*aw[0].terminate, kDdpInvalidStag);
  EXPECT_FALSE(a.ep.has_outgoing());
}

TEST(RdmapEndpointErrors, SendWithNoPostedReceiveIsNoBuffer) {
  Side a, b;
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(pattern(8), 0), 8)));
  pump_all(a, b);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kNoBuffer);
  EXPECT_EQ(a.ep.terminate_received()->cause, kNoBuffer);
  EXPECT_TRUE(a.ep.close_requested());
  EXPECT_TRUE(b.ep.close_requested());
}

TEST(RdmapEndpointErrors, SendLongerThanTheReceiveIsMessageTooLong) {
  Side a, b;
  b.post_recv(100, 8);
  b.post_recv(101, 64);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(pattern(9), 0), 9)));
  pump_all(a, b);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kTooLong);
  auto bw = b.completions();
  expect_each_once(bw, {100, 101});
  EXPECT_EQ(find_wc(bw, 100)->status, WcStatus::kLocalLengthError);
  EXPECT_EQ(*find_wc(bw, 100)->terminate, kTooLong);
  EXPECT_EQ(find_wc(bw, 101)->status, WcStatus::kFlushed);
  EXPECT_EQ(a.ep.terminate_received()->cause, kTooLong);
}

TEST(RdmapEndpointErrors, SendWithWrongMsnIsMsnRange) {
  Side b;
  b.post_recv(100, 64);
  Bytes ulpdu(18);
  wire::encode_ddp_header(wire::send_header(/*msn=*/5, 0, true), ulpdu);
  b.ep.on_ulpdu(ulpdu);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kMsnRange);
  EXPECT_EQ(b.ep.terminate_sent()->ddp_header, ulpdu);
  EXPECT_EQ(b.completions()[0].status, WcStatus::kFlushed);
}

TEST(RdmapEndpointErrors, SecondSendReusingAnMsnIsMsnRange) {
  Side a, b;
  b.post_recv(100, 64);
  b.post_recv(101, 64);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(pattern(8), 0), 8)));
  auto u = take(a.ep);
  ASSERT_TRUE(u);
  b.ep.on_ulpdu(*u);
  b.ep.on_ulpdu(*u);  // replayed: MSN 1 again
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kMsnRange);
  auto bw = b.completions();
  expect_each_once(bw, {100, 101});
  EXPECT_EQ(find_wc(bw, 100)->status, WcStatus::kSuccess);
  EXPECT_EQ(find_wc(bw, 101)->status, WcStatus::kFlushed);
}

TEST(RdmapEndpointErrors, ReadRequestWithWrongMsnIsMsnRange) {
  Side b;
  auto source = b.buffer(pattern(8), kRemoteRead);
  Bytes ulpdu(18);
  wire::encode_ddp_header(wire::read_request_header(/*msn=*/2), ulpdu);
  const auto body = wire::encode_read_request({.sink_stag = 0x100,
                                               .sink_tagged_offset = 0,
                                               .size = 8,
                                               .source_stag = source.first,
                                               .source_tagged_offset = b.to(source)});
  ulpdu.insert(ulpdu.end(), body.begin(), body.end());
  b.ep.on_ulpdu(ulpdu);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause, kMsnRange);
}

TEST(RdmapEndpointErrors, ReadResponseWithNoReadOutstandingIsDdpCatastrophic) {
  Side b;
  Bytes ulpdu(14);
  wire::encode_ddp_header(wire::read_response_header(0x100, 0, true), ulpdu);
  ulpdu.push_back(1);
  b.ep.on_ulpdu(ulpdu);
  ASSERT_TRUE(b.ep.terminate_sent());
  EXPECT_EQ(b.ep.terminate_sent()->cause,
            (TerminateCause{TermLayer::kDdp, wire::kDdpEtypeLocalCatastrophic, 0}));
}

TEST(RdmapEndpointErrors, ReadResponseForTheWrongSinkIsATaggedBufferError) {
  Side a, b;
  auto source = b.buffer(pattern(16), kRemoteRead);
  auto sink = a.buffer(16, kLocalWrite);
  ASSERT_FALSE(a.ep.post_send(read_wr(1, sink, 16, source.first, b.to(source))));
  pump(a, b);
  Bytes forged(14);
  wire::encode_ddp_header(wire::read_response_header(sink.first, a.to(sink) + 4, true), forged);
  forged.resize(14 + 12, 0xee);
  a.ep.on_ulpdu(forged);
  ASSERT_TRUE(a.ep.terminate_sent());
  EXPECT_EQ(a.ep.terminate_sent()->cause, kDdpBounds);
  auto aw = a.completions();
  expect_each_once(aw, {1});
  EXPECT_EQ(aw[0].status, WcStatus::kRemoteOperationError);
  EXPECT_EQ(Side::read(sink.second, 16), Bytes(16, 0));
}

TEST(RdmapEndpointErrors, BadLocalKeyFailsTheRequestAndEndsTheStream) {
  Side a, b;
  ASSERT_FALSE(a.ep.post_send(send_wr(1, {0x99900, 0x1000}, 8)));
  ASSERT_FALSE(a.ep.post_send(send_wr(2, {0x99900, 0x1000}, 8)));
  auto term = take(a.ep);
  ASSERT_TRUE(term);
  EXPECT_EQ(header_of(*term).opcode, RdmapOpcode::kTerminate);
  const TerminateCause local_catastrophic{TermLayer::kRdmap, wire::kRdmapEtypeLocalCatastrophic,
                                          wire::kRdmapCodeUnspecified};
  EXPECT_EQ(a.ep.terminate_sent()->cause, local_catastrophic);
  auto aw = a.completions();
  expect_each_once(aw, {1, 2});
  EXPECT_EQ(find_wc(aw, 1)->status, WcStatus::kLocalProtectionError);
  EXPECT_EQ(find_wc(aw, 2)->status, WcStatus::kFlushed);
  b.ep.on_ulpdu(*term);
  EXPECT_EQ(b.ep.terminate_received()->cause, local_catastrophic);
}

// ---- Garbage ---------------------------------------------------------------------------

struct GarbageCase {
  const char* name;
  Bytes ulpdu;
  wire::WireError error;
};

class RdmapEndpointGarbage : public ::testing::TestWithParam<GarbageCase> {};

TEST_P(RdmapEndpointGarbage, DecodeErrorsGetTheirTerminate) {
  const GarbageCase& c = GetParam();
  Side b;
  b.post_recv(100, 64);
  b.ep.on_ulpdu(c.ulpdu);
  ASSERT_TRUE(b.ep.terminate_sent()) << c.name;
  EXPECT_EQ(*b.ep.terminate_sent(), wire::terminate_for_ulpdu(c.error, c.ulpdu)) << c.name;
  auto bw = b.completions();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].status, WcStatus::kFlushed);
  auto term = take(b.ep);
  ASSERT_TRUE(term);
  auto seg = wire::decode_ddp_segment(*term);
  ASSERT_TRUE(seg);
  auto decoded = wire::decode_terminate_body(seg->payload);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(*decoded, *b.ep.terminate_sent());
}

Bytes with_header(DdpHeader h, std::size_t payload = 0) {
  Bytes b(18);
  b.resize(wire::encode_ddp_header(h, b));
  b.resize(b.size() + payload, 0x5a);
  return b;
}

INSTANTIATE_TEST_SUITE_P(
    DecodeErrors, RdmapEndpointGarbage,
    ::testing::Values(
        GarbageCase{"truncated", Bytes{0x41, 0x43, 0x00}, wire::WireError::kDdpTruncated},
        GarbageCase{"ddp_version",
                    [] {
                      DdpHeader h = wire::send_header(1, 0, true);
                      h.ddp_version = 2;
                      return with_header(h, 4);
                    }(),
                    wire::WireError::kDdpUntaggedBadVersion},
        GarbageCase{"rdmap_version",
                    [] {
                      DdpHeader h = wire::rdma_write_header(0x100, 0, true);
                      h.rdmap_version = 0;
                      return with_header(h, 4);
                    }(),
                    wire::WireError::kRdmapBadVersion},
        GarbageCase{"reserved_opcode",
                    [] {
                      Bytes b = with_header(wire::send_header(1, 0, true), 4);
                      b[1] = static_cast<std::uint8_t>((b[1] & 0xf0) | 0x9);
                      return b;
                    }(),
                    wire::WireError::kRdmapBadOpcode},
        GarbageCase{"queue_number",
                    [] {
                      DdpHeader h = wire::send_header(1, 0, true);
                      h.queue_number = 7;
                      return with_header(h, 4);
                    }(),
                    wire::WireError::kDdpInvalidQueueNumber},
        GarbageCase{"read_request_length", with_header(wire::read_request_header(1), 20),
                    wire::WireError::kRdmapReadRequestBadLength}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RdmapEndpointErrors, MalformedTerminateIsNotAnswered) {
  Side a;
  a.post_recv(100, 16);
  ASSERT_FALSE(a.ep.post_send(send_wr(1, a.buffer(pattern(4), 0), 4)));
  // Terminate Control with layer 7: no such layer (RFC 5040 s4.8).
  Bytes bad = with_header(wire::terminate_header(1));
  for (std::uint8_t x : {0x70, 0x00, 0x00, 0x00}) bad.push_back(x);
  a.ep.on_ulpdu(bad);
  EXPECT_EQ(a.ep.state(), EndpointState::kError);
  EXPECT_TRUE(a.ep.close_requested());
  EXPECT_FALSE(a.ep.terminate_sent());
  EXPECT_FALSE(a.ep.has_outgoing());
  EXPECT_FALSE(take(a.ep));
  expect_each_once(a.completions(), {1, 100});

  // A Terminate whose DDP header is broken (not L) is not answered either.
  Side c;
  Bytes not_last = with_header(wire::terminate_header(1));
  not_last[0] &= static_cast<std::uint8_t>(~wire::kDdpFlagLast);
  c.ep.on_ulpdu(not_last);
  EXPECT_EQ(c.ep.state(), EndpointState::kError);
  EXPECT_FALSE(c.ep.terminate_sent());
}

TEST(RdmapEndpointErrors, StreamErrorSendsTheLlpTerminate) {
  Side a;
  a.ep.on_stream_error(wire::WireError::kFpduCrcMismatch);
  ASSERT_TRUE(a.ep.terminate_sent());
  EXPECT_EQ(a.ep.terminate_sent()->cause,
            (TerminateCause{TermLayer::kLlp, wire::kMpaEtype, wire::kMpaCodeCrcError}));
  EXPECT_FALSE(a.ep.close_requested());  // not before the Terminate went out
  EXPECT_TRUE(a.ep.has_outgoing());
  ASSERT_TRUE(take(a.ep));
  EXPECT_TRUE(a.ep.close_requested());
}

TEST(RdmapEndpointErrors, TerminateUsesQueueTwoAndTheNextTerminateMsn) {
  cm::RdmapSequence seq;
  seq.next_term_msn_tx = 5;
  Side a(params(), seq);
  a.ep.on_stream_error(wire::WireError::kFpduCrcMismatch);
  auto term = take(a.ep);
  ASSERT_TRUE(term);
  const auto h = header_of(*term);
  EXPECT_EQ(h.queue_number, wire::kQnTerminate);
  EXPECT_EQ(h.msn, 5u);
  EXPECT_EQ(h.message_offset, 0u);
  EXPECT_TRUE(h.last);
}

TEST(RdmapEndpointErrors, ConnectionLossCompletesEverything) {
  Side a, b;
  auto source = b.buffer(pattern(16), kRemoteRead);
  a.post_recv(100, 16);
  ASSERT_FALSE(
      a.ep.post_send(read_wr(1, a.buffer(16, kLocalWrite), 16, source.first, b.to(source))));
  ASSERT_FALSE(a.ep.post_send(send_wr(2, a.buffer(pattern(4), 0), 4)));
  ASSERT_EQ(pump(a, b, 1), 1);  // the Read is on the wire, the Send is not
  a.ep.on_connection_lost();
  EXPECT_EQ(a.ep.state(), EndpointState::kError);
  EXPECT_TRUE(a.ep.close_requested());
  auto aw = a.completions();
  expect_each_once(aw, {1, 2, 100});
  EXPECT_EQ(find_wc(aw, 1)->status, WcStatus::kFatalError);
  EXPECT_EQ(find_wc(aw, 2)->status, WcStatus::kFlushed);
  EXPECT_EQ(find_wc(aw, 100)->status, WcStatus::kFlushed);
  a.ep.on_connection_lost();
  EXPECT_TRUE(a.completions().empty());
}

// ---- Posting ---------------------------------------------------------------------------

TEST(RdmapEndpointPost, QueueLimitsAndInvalidRequests) {
  Side a(params(), {}, EndpointLimits{.max_send_wr = 2, .max_recv_wr = 1});
  auto local = a.buffer(pattern(4), kLocalWrite);
  EXPECT_FALSE(a.ep.post_send(send_wr(1, local, 4)));
  EXPECT_FALSE(a.ep.post_send(send_wr(2, local, 4)));
  EXPECT_EQ(a.ep.post_send(send_wr(3, local, 4)), PostError::kQueueFull);
  EXPECT_FALSE(a.ep.post_recv(RecvWr{.wr_id = 4, .sge = {local.second, 4, local.first}}));
  EXPECT_EQ(a.ep.post_recv(RecvWr{.wr_id = 5, .sge = {local.second, 4, local.first}}),
            PostError::kQueueFull);
  Side b;
  EXPECT_EQ(b.ep.post_send(read_wr(1, {0, 0x1000}, 8, 0x100, 0)), PostError::kInvalidRequest);
  SendWr bogus;
  bogus.opcode = static_cast<WrOpcode>(42);
  EXPECT_EQ(b.ep.post_send(bogus), PostError::kInvalidRequest);
  EXPECT_EQ(post_error_name(PostError::kQueueFull), "queue_full");
  EXPECT_EQ(wc_status_name(WcStatus::kRemoteAccessError), "remote_access_error");
}

// ---- hold_tx_until_first_rx ------------------------------------------------------------

TEST(RdmapEndpointHoldTx, NothingLeavesBeforeTheFirstUlpduArrives) {
  Side a;
  Side b(params(), {}, {}, /*hold=*/true);
  a.post_recv(100, 16);
  b.post_recv(200, 16);
  ASSERT_FALSE(b.ep.post_send(send_wr(1, b.buffer(pattern(4), 0), 4)));
  EXPECT_FALSE(b.ep.has_outgoing());
  EXPECT_FALSE(b.ep.next_outgoing());
  ASSERT_FALSE(a.ep.post_send(send_wr(2, a.buffer(pattern(4), 0), 4)));
  ASSERT_EQ(pump(a, b), 1);
  EXPECT_TRUE(b.ep.has_outgoing());
  ASSERT_EQ(pump(b, a), 1);
  EXPECT_EQ(a.completions().size(), 2u);
  EXPECT_EQ(b.completions().size(), 2u);
}

// ---- Review findings -------------------------------------------------------------------

// A Send with Invalidate may name only an STag the peer was given remote access to. The
// responder's receive buffers (local write) and its send buffer (no rights) are its own:
// naming one is refused like an unknown STag (RDMAP remote operation error, "STag cannot be
// Invalidated", RFC 5040 s7), and the buffer keeps working for the responder.
TEST(RdmapEndpointSend, InvalidatingALocalOnlyStagIsRefusedAndTheStagKeepsWorking) {
  for (const bool name_the_send_buffer : {false, true}) {
    SCOPED_TRACE(name_the_send_buffer ? "send buffer" : "receive buffer");
    Side a, b;
    auto ring = b.buffer(32, kLocalWrite);
    auto outbox = b.buffer(pattern(4), 0);
    ASSERT_FALSE(b.ep.post_recv(RecvWr{.wr_id = 100, .sge = {ring.second, 16, ring.first}}));
    ASSERT_FALSE(b.ep.post_recv(RecvWr{.wr_id = 101, .sge = {ring.second + 16, 16, ring.first}}));
    SendWr inv = send_wr(1, a.buffer(pattern(4), 0), 4, WrOpcode::kSendWithInvalidate);
    inv.invalidate_stag = name_the_send_buffer ? outbox.first : ring.first;
    ASSERT_FALSE(a.ep.post_send(inv));
    pump(a, b);

    ASSERT_TRUE(b.ep.terminate_sent());
    EXPECT_EQ(b.ep.terminate_sent()->cause,
              (TerminateCause{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                              wire::kRdmapCodeCannotInvalidate}));
    EXPECT_TRUE(b.memory.find(ring.first)->valid);
    EXPECT_TRUE(b.memory.find(outbox.first)->valid);
    auto bw = b.completions();
    ASSERT_FALSE(bw.empty());
    EXPECT_EQ(bw[0].wr_id, 100u);
    EXPECT_EQ(bw[0].status, WcStatus::kRemoteOperationError);
    EXPECT_FALSE(bw[0].invalidated_stag);
  }
}

// Tagged offsets name octets of a region counted from 0, not its address: a Write to TO 10
// lands 10 octets in, a Read from TO 10 reads them back, and the Read Request names our
// sink the same way, so no address of either side crosses the wire.
TEST(RdmapEndpointWrite, TaggedOffsetsCountFromTheStartOfTheRegion) {
  Side a, b;
  auto target = b.buffer(64, kRemoteWrite | kRemoteRead);
  const Bytes data = pattern(16, 5);
  ASSERT_FALSE(a.ep.post_send(write_wr(1, a.buffer(data, 0), 16, target.first, 10)));
  auto sink = a.buffer(16, kLocalWrite);
  ASSERT_FALSE(a.ep.post_send(read_wr(2, sink, 16, target.first, 10)));
  auto write = take(a.ep);
  auto request = take(a.ep);
  ASSERT_TRUE(write && request);
  EXPECT_EQ(header_of(*write).tagged_offset, 10u);
  auto body = wire::decode_read_request(std::span(*request).subspan(18));
  ASSERT_TRUE(body);
  EXPECT_EQ(body->sink_stag, sink.first);
  EXPECT_EQ(body->sink_tagged_offset, 0u);
  EXPECT_EQ(body->source_tagged_offset, 10u);

  b.ep.on_ulpdu(*write);
  b.ep.on_ulpdu(*request);
  pump_all(a, b);
  EXPECT_FALSE(b.ep.terminate_sent());
  EXPECT_FALSE(a.ep.terminate_sent());
  EXPECT_EQ(Side::read(target.second + 10, 16), data);
  EXPECT_EQ(Side::read(sink.second, 16), data);
  auto aw = a.completions();
  ASSERT_EQ(aw.size(), 2u);
  EXPECT_EQ(aw[1].status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace rdma_interop::rdmap
