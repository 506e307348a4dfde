// mpa_frame_fuzzer - decode_mpa_frame (RFC 5044 s7.1, RFC 6581 s3) on arbitrary bytes.
//
// Input: [limits][pd_limit][frame...]
//   limits bit 0     lenient: keep reserved flag bits instead of rejecting them
//   limits bits 1-2  PD_Length limit: 0 RFC 512, 1 Linux 256, 2 pd_limit*4, 3 65535
//   limits bit 3     accept erdma's revision 129 and its 8-octet extension
// Invariants: a decoded frame encodes under the same limits, to exactly the input bytes, and
// decodes back to an equal frame; mpa_frame_length agrees with the frame's size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/wire/mpa_frame.h"
#include "core/wire/wire_error.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::wire;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;

MpaLimits limits_from(ByteReader& in) {
  const std::uint8_t sel = in.u8();
  const std::uint8_t raw_limit = in.u8();
  MpaLimits limits;
  limits.reject_reserved_bits = (sel & 0x01) == 0;
  limits.accept_erdma = (sel & 0x08) != 0;
  switch ((sel >> 1) & 0x03) {
    case 0:
      limits.private_data_limit = kMpaMaxPrivateDataRfc;
      break;
    case 1:
      limits.private_data_limit = kMpaMaxPrivateDataLinux;
      break;
    case 2:
      limits.private_data_limit = std::size_t{raw_limit} * 4;
      break;
    default:
      limits.private_data_limit = 0xffff;
      break;
  }
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in(std::span<const std::uint8_t>(data, size));
  const MpaLimits limits = limits_from(in);
  const auto bytes = in.rest();

  const auto length = mpa_frame_length(bytes, limits);
  const auto frame = decode_mpa_frame(bytes, limits);
  if (!frame) {
    // Every error has a name, a sentence and a Terminate answer.
    fuzz_check(!error_name(frame.error()).empty(), "error without a name");
    fuzz_check(!describe(frame.error()).empty(), "error without a description");
    (void)describe(terminate_for(frame.error()));
    return 0;
  }

  fuzz_check(length.has_value() && *length == bytes.size(),
             "mpa_frame_length disagrees with a successful decode");
  fuzz_check(mpa_pd_length(*frame) + mpa_header_length(*frame) == bytes.size(),
             "mpa_pd_length disagrees with the decoded frame");
  fuzz_check(frame->revision == kMpaRevision1 || frame->revision == kMpaRevision2 ||
                 (frame->revision == kMpaRevisionErdma && limits.accept_erdma),
             "decoded an unknown revision");
  fuzz_check(frame->erdma.has_value() == (frame->revision == kMpaRevisionErdma),
             "erdma's extension without revision 129, or revision 129 without it");
  fuzz_check(!frame->enhanced || frame->revision == kMpaRevision2,
             "decoded enhanced params on a revision-1 frame");
  fuzz_check(!(frame->reject && frame->kind == MpaFrameKind::kRequest),
             "decoded a Request with the R flag");
  fuzz_check(
      !limits.reject_reserved_bits || (frame->reserved_bits & kMpaFlagUnusedReservedMask) == 0,
      "strict limits kept reserved bits no vendor uses");
  (void)to_string(*frame);
  (void)describe_reserved_bits(frame->reserved_bits);

  const auto encoded = encode_mpa_frame(*frame, limits);
  fuzz_check(encoded.has_value(), "a decoded frame does not encode under the same limits");
  fuzz_check(encoded->size() == bytes.size() &&
                 std::equal(encoded->begin(), encoded->end(), bytes.begin()),
             "re-encoding a decoded frame changed its bytes");
  const auto again = decode_mpa_frame(*encoded, limits);
  fuzz_check(again.has_value(), "a re-encoded frame does not decode");
  fuzz_check(*again == *frame, "re-decoded frame differs from the first decode");
  return 0;
}
