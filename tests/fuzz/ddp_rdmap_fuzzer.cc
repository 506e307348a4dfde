// ddp_rdmap_fuzzer - decode_ddp_segment (RFC 5041 s4, RFC 5040 s4) on an arbitrary ULPDU,
// then the RDMAP body its opcode carries: a Read Request (RFC 5040 s4.4) or a Terminate
// (RFC 5040 s4.8).
//
// Input: the ULPDU itself (what an FPDU carries; no length field, no CRC).
// Invariants: the decoded header re-encodes (encode_ddp_header) to the received octets
// except the reserved bits a receiver ignores (RFC 5041 s4.2, RFC 5040 s4.2), and decodes
// back to an equal header; the payload is the rest of the ULPDU; a decoded Read Request
// or Terminate body re-encodes to the same octets; decode_read_request accepts exactly
// 28 octets.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/wire/ddp_segment.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"
#include "core/wire/wire_error.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::wire;
using rdma_interop::fuzz::fuzz_check;

void check_read_request(std::span<const std::uint8_t> body) {
  const auto request = decode_read_request(body);
  fuzz_check(request.has_value() == (body.size() == kReadRequestBodyLen),
             "decode_read_request accepts other than exactly 28 octets");
  if (!request) return;
  const auto encoded = encode_read_request(*request);
  fuzz_check(std::equal(encoded.begin(), encoded.end(), body.begin()),
             "a decoded Read Request re-encodes to different octets");
  fuzz_check(*decode_read_request(encoded) == *request, "Read Request round trip differs");
}

void check_terminate(std::span<const std::uint8_t> body) {
  const auto message = decode_terminate_body(body);
  if (!message) return;
  (void)to_string(*message);
  const auto again = decode_terminate_body(encode_terminate_body(*message));
  fuzz_check(again.has_value() && *again == *message, "Terminate body round trip differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> ulpdu(data, size);
  check_read_request(ulpdu);

  const auto segment = decode_ddp_segment(ulpdu);
  if (!segment) {
    fuzz_check(!error_name(segment.error()).empty(), "error without a name");
    const auto term = terminate_for_ulpdu(segment.error(), ulpdu);
    (void)to_string(term);
    return 0;
  }
  const DdpHeader& h = segment->header;
  fuzz_check(h.length() <= ulpdu.size(), "header longer than the ULPDU");
  fuzz_check(segment->payload.data() == ulpdu.data() + h.length() &&
                 segment->payload.size() == ulpdu.size() - h.length(),
             "payload is not the rest of the ULPDU");
  fuzz_check(h.ddp_version == kDdpVersion && h.rdmap_version == kRdmapVersion,
             "decoded a wrong version");
  fuzz_check(!opcode_is_reserved(static_cast<std::uint8_t>(h.opcode)), "decoded a reserved opcode");
  fuzz_check(opcode_is_tagged(h.opcode) == h.tagged, "opcode on the wrong buffer model");
  fuzz_check(h.tagged || h.queue_number == opcode_queue_number(h.opcode),
             "untagged opcode on the wrong queue");
  (void)to_string(h);
  (void)opcode_name(h.opcode);

  // Re-encode: the same octets, reserved bits (ignored on receipt) aside.
  std::array<std::uint8_t, kDdpUntaggedHeaderLen> header{};
  const std::size_t n = encode_ddp_header(h, header);
  fuzz_check(n == h.length(), "encode_ddp_header wrote another length");
  fuzz_check((header[0] & kDdpReservedMask) == 0 && (header[1] & kRdmapReservedMask) == 0,
             "encode_ddp_header set reserved bits");
  std::array<std::uint8_t, kDdpUntaggedHeaderLen> received{};
  std::copy_n(ulpdu.begin(), n, received.begin());
  received[0] &= static_cast<std::uint8_t>(~kDdpReservedMask);
  received[1] &= static_cast<std::uint8_t>(~kRdmapReservedMask);
  fuzz_check(std::equal(header.begin(), header.begin() + n, received.begin()),
             "re-encoded DDP header differs from the received one");
  std::vector<std::uint8_t> rebuilt(header.begin(), header.begin() + n);
  rebuilt.insert(rebuilt.end(), segment->payload.begin(), segment->payload.end());
  const auto again = decode_ddp_segment(rebuilt);
  fuzz_check(again.has_value(), "a re-encoded segment does not decode");
  fuzz_check(again->header == h, "re-decoded DDP header differs");
  fuzz_check(std::equal(again->payload.begin(), again->payload.end(), segment->payload.begin(),
                        segment->payload.end()),
             "re-decoded payload differs");

  switch (h.opcode) {
    case RdmapOpcode::kRdmaReadRequest:
      fuzz_check(segment->payload.size() == kReadRequestBodyLen,
                 "accepted a Read Request with a body other than 28 octets");
      check_read_request(segment->payload);
      break;
    case RdmapOpcode::kTerminate:
      check_terminate(segment->payload);
      break;
    default:
      break;
  }
  return 0;
}
