// rdmap_endpoint_fuzzer - RdmapEndpoint fed arbitrary ULPDUs from a peer.
//
// The endpoint places peer-chosen octets into registered memory at peer-chosen offsets, so
// this is where a bounds mistake would be a memory error; ASan watches every placement.
// Input: [config octet] then ULPDUs, each as a 16-bit length and that many octets. The
// endpoint has two registered regions, posted receives, and outstanding Reads of its own;
// after each ULPDU its outgoing ULPDUs and completions are drained. With config bit 0x40,
// each ULPDU is first offered for direct placement (placement_target, as the tcp provider
// does once its head arrived): a place it names must lie in the remote-writable region and
// hold exactly the rest of the ULPDU; the harness puts the octets there, hands the ULPDU over
// with that range garbled (FpduStep::placed), and the Write must read back whole.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/rdmap/rdmap_endpoint.h"
#include "core/util/byte_order.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in({data, size});
  const std::uint8_t config = in.u8();

  std::vector<std::uint8_t> remote(4096), local(4096), recv(256 * 4);
  rdmap::MemoryRegistry memory;
  // STags are handed out in order, so a fuzzer finds them quickly: 1, 2, 3.
  const auto remote_stag =
      memory.register_region(remote.data(), remote.size(), rdmap::kRemoteWrite |
                                                               rdmap::kRemoteRead |
                                                               rdmap::kLocalWrite);
  const auto local_stag = memory.register_region(local.data(), local.size(), rdmap::kLocalWrite);
  const auto recv_stag = memory.register_region(recv.data(), recv.size(), rdmap::kLocalWrite);

  cm::NegotiatedParams params;
  params.revision = 2;
  params.ird = static_cast<std::uint16_t>(1 + (config & 3));
  params.ord = static_cast<std::uint16_t>(1 + ((config >> 2) & 3));
  rdmap::RdmapEndpoint ep(params, cm::RdmapSequence{}, memory,
                          rdmap::EndpointLimits{.max_send_wr = 16, .max_recv_wr = 16,
                                                .max_ulpdu = 512},
                          (config & 0x10) != 0);
  for (std::uint64_t i = 0; i < 4; ++i) {
    ep.post_recv({.wr_id = i, .sge = {reinterpret_cast<std::uint64_t>(&recv[256 * i]), 256,
                                      recv_stag}});
  }
  // Our own Reads and Writes, so Read Responses have something to match.
  for (std::uint32_t i = 0; i < 3; ++i) {
    ep.post_send({.wr_id = 100 + i, .opcode = rdmap::WrOpcode::kRdmaRead,
                  .sge = {reinterpret_cast<std::uint64_t>(&local[1024 * i]), 1024, local_stag},
                  .remote_stag = remote_stag, .remote_addr = 0x1000u * i});
  }
  ep.post_send({.wr_id = 200, .opcode = rdmap::WrOpcode::kRdmaWrite,
                .sge = {reinterpret_cast<std::uint64_t>(local.data()), 700, local_stag},
                .remote_stag = 9, .remote_addr = 0});

  auto drain = [&] {
    int guard = 0;
    while (ep.next_outgoing() && ++guard < 10000) {
    }
    fuzz_check(guard < 10000, "the endpoint produces output without end");
    while (ep.poll_completion()) {
    }
  };
  drain();
  // Tagged offsets count from 0 in each region (memory_registry.h), but a corpus file's are
  // arbitrary 64-bit values. With config bit 0x20 the harness rebases them (offset modulo
  // 8 KiB from the first tagged offset of the region the STag names) so that placement
  // inside and just past the regions is reached, not only the rejections.
  const bool rebase = (config & 0x20) != 0;
  auto first_offset = [&](std::uint32_t stag, const std::vector<std::uint8_t>& region) {
    return memory.tagged_offset(stag, reinterpret_cast<std::uint64_t>(region.data())).value_or(0);
  };
  std::vector<std::uint8_t> ulpdu;
  while (!in.empty()) {
    const std::size_t n = in.u16() % 2048;
    const auto raw = in.take(n);
    ulpdu.assign(raw.begin(), raw.end());
    if (rebase && ulpdu.size() >= 14 && (ulpdu[0] & 0x80) != 0) {
      const std::uint32_t stag = load_be32(&ulpdu[2]);
      const auto base =
          stag == local_stag ? first_offset(local_stag, local) : first_offset(remote_stag, remote);
      store_be64(&ulpdu[6], base + (load_be64(&ulpdu[6]) & 0x1fff));
    }
    if (rebase && ulpdu.size() >= 18 + 28 && (ulpdu[0] & 0x80) == 0 && (ulpdu[1] & 0x0f) == 1) {
      // A Read Request's source tagged offset (RFC 5040 s4.4), in our remote region.
      const auto base = first_offset(remote_stag, remote);
      store_be64(&ulpdu[18 + 20], base + (load_be64(&ulpdu[18 + 20]) & 0x1fff));
    }
    // The decoder holds `head` octets; with n % 3 == 0, `received` counts octets of it placed
    // before (a second read to the place), so the place asked for starts further on.
    const bool offer = (config & 0x40) != 0 && ulpdu.size() >= 14;
    const std::size_t head = offer ? std::min(ulpdu.size(), 14 + n % 64) : 0;
    const std::size_t received = n % 3 == 0 ? std::min(ulpdu.size(), head + n % 50) : head;
    const std::span<std::uint8_t> place =
        offer ? ep.placement_target({std::span<const std::uint8_t>(ulpdu).first(head), received,
                                     ulpdu.size()})
              : std::span<std::uint8_t>{};
    if (!place.empty()) {
      fuzz_check(place.size() == ulpdu.size() - received, "the place is not the ULPDU's rest");
      std::uint8_t* const payload = place.data() - (received - 14);
      fuzz_check(payload >= remote.data() &&
                     place.data() + place.size() <= remote.data() + remote.size(),
                 "the Write's place lies outside the remote-writable region");
      // The harness places what follows the head, as the reads after it would have.
      std::copy(ulpdu.begin() + static_cast<long>(head), ulpdu.end(), payload + (head - 14));
      const std::vector<std::uint8_t> sent = ulpdu;
      std::fill(ulpdu.begin() + static_cast<long>(head), ulpdu.end(), 0xee);
      ep.on_ulpdu(ulpdu, wire::PlacedRange{head, ulpdu.size() - head});
      if (ep.state() == rdmap::EndpointState::kRunning) {
        fuzz_check(std::equal(sent.begin() + 14, sent.end(), payload),
                   "a Write placed in part by the caller does not read back whole");
      }
    } else {
      ep.on_ulpdu(ulpdu);
    }
    drain();
  }
  ep.on_connection_lost();
  drain();
  fuzz_check(ep.state() == rdmap::EndpointState::kError, "still running after the loss");
  return 0;
}
