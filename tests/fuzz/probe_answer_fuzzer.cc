// probe_answer_fuzzer - how rdma-probe classifies what an unknown address answered to its
// MPA Request (tools/rdma-probe/raw_mpa_client.h: classify_answer, guess_server,
// printable_prefix).
//
// Input: the octets the peer sent, any length. The first octet picks a split point, so the
// same answer is also classified as it would be seen part-way through its arrival.
// Invariants: nothing crashes or reads past the input; once an answer is classified, more
// octets never change the verdict (the probe stops reading at that point); a Reply
// re-encodes to the octets it came from; the printable prefix is printable ASCII only.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tests/fuzz/fuzz_common.h"
#include "tools/rdma-probe/raw_mpa_client.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdma_interop;
  using rdma_interop::fuzz::fuzz_check;
  if (size == 0) return 0;
  const std::span<const std::uint8_t> input(data + 1, size - 1);
  const std::size_t split = input.empty() ? 0 : data[0] % (input.size() + 1);

  auto whole = probe::classify_answer(input);
  auto part = probe::classify_answer(input.first(split));
  if (part) {
    fuzz_check(whole.has_value(), "more octets undid a classified answer");
    fuzz_check(whole->kind == part->kind, "more octets changed the verdict");
    fuzz_check(whole->reply == part->reply, "more octets changed the Reply");
  }
  if (whole) {
    fuzz_check(!whole->detail.empty(), "a classified answer has no detail");
    fuzz_check(whole->first_bytes.size() <= 64 && !whole->first_bytes.empty(),
               "first_bytes is empty or too long");
    if (whole->kind == probe::RawAnswer::Kind::kReply) {
      fuzz_check(whole->reply.has_value() && whole->reply->kind == wire::MpaFrameKind::kReply,
                 "a Reply verdict without a Reply frame");
      auto again = wire::encode_mpa_frame(*whole->reply, {.private_data_limit = 512,
                                                         .reject_reserved_bits = false});
      fuzz_check(again.has_value() && again->size() <= input.size() &&
                     std::equal(again->begin(), again->end(), input.begin()),
                 "a classified Reply does not re-encode to its octets");
    } else {
      fuzz_check(!whole->reply.has_value(), "a Reply frame on a non-Reply verdict");
    }
  }
  for (char ch : probe::printable_prefix(input)) {
    fuzz_check(ch >= 0x20 && ch < 0x7f, "printable_prefix let a control octet through");
  }
  (void)probe::guess_server(input);
  return 0;
}
