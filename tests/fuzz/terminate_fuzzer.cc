// terminate_fuzzer - the RDMAP Terminate message (RFC 5040 s4.8).
//
// Input: [error][etype][code][body...]
//   The whole input is first decoded as a Terminate body. Then the first octet picks a
//   WireError and the rest is taken as the offending ULPDU for terminate_for_ulpdu, and the
//   first three octets as a cause for terminate_for_cause.
// Invariants: a decoded body re-encodes byte-identical (encode_terminate_body); every
// Terminate we build from arbitrary offending bytes encodes to a body that decodes back to
// the same message, and as a whole ULPDU (encode_terminate) is a valid Terminate segment.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/wire/ddp_segment.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/terminate.h"
#include "core/wire/wire_error.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::wire;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;

// With D set and M clear the DDP Segment Length field is on the wire but means nothing
// (RFC 5040 s4.8); the codec ignores it on receipt and sends zero (terminate.h), so a
// re-encoded body differs from the input in exactly those two octets.

// A Terminate we generate must survive our own decoder, alone and inside a DDP segment.
void check_generated(const TerminateMessage& m, std::uint32_t msn) {
  (void)to_string(m);
  const auto body = encode_terminate_body(m);
  const auto decoded = decode_terminate_body(body);
  fuzz_check(decoded.has_value(), "a generated Terminate body does not decode");
  fuzz_check(*decoded == m, "a generated Terminate body decodes to another message");

  const auto ulpdu = encode_terminate(m, msn);
  const auto segment = decode_ddp_segment(ulpdu);
  fuzz_check(segment.has_value(), "a generated Terminate ULPDU does not decode");
  fuzz_check(segment->header == terminate_header(msn), "Terminate ULPDU has another header");
  fuzz_check(std::equal(segment->payload.begin(), segment->payload.end(), body.begin(),
                        body.end()),
             "Terminate ULPDU carries another body");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);

  const auto message = decode_terminate_body(input);
  if (message) {
    (void)to_string(*message);
    fuzz_check(static_cast<std::uint8_t>(message->cause.layer) <=
                   static_cast<std::uint8_t>(TermLayer::kLlp),
               "decoded an unknown layer");
    const auto encoded = encode_terminate_body(*message);
    std::vector<std::uint8_t> received(input.begin(), input.end());
    if (!message->ddp_segment_length && !message->ddp_header.empty()) {
      received[kTerminateControlLen] = received[kTerminateControlLen + 1] = 0;
    }
    fuzz_check(encoded == received, "a decoded Terminate body re-encodes to different octets");
  } else {
    fuzz_check(!error_name(message.error()).empty(), "error without a name");
  }

  ByteReader in(input);
  const std::uint8_t selector = in.u8();
  const std::uint8_t etype = in.u8();
  const std::uint8_t code = in.u8();
  const auto error = static_cast<WireError>(selector % kWireErrorCount);
  const std::uint32_t msn = std::uint32_t{etype} << 8 | code;
  (void)describe(terminate_for(error));

  check_generated(terminate_for_ulpdu(error, input.subspan(std::min<std::size_t>(1, size))),
                  msn);
  const TerminateCause cause{static_cast<TermLayer>(selector % 3),
                             static_cast<std::uint8_t>(etype & 0x0f), code};
  (void)describe(cause);
  check_generated(terminate_for_cause(cause, in.rest()), msn);
  return 0;
}
