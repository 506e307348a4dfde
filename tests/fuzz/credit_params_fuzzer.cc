// credit_params_fuzzer - the credit parameters a peer announces in its MPA private data
// (core/credit/credit_params.h).
//
// Input: the private data as the peer sent it, any length (no configuration octets).
// Invariants: decoding never crashes and reads nothing past the input; params that decode
// re-encode to the input's first 16 octets (the reply reserve included: any value decodes,
// the receiver clamps it); their ranges hold; and the CreditConfig built from them with any
// valid local queue split passes credit::validate(), so a peer's announcement can never hand
// the credit window a configuration it would have to clamp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/credit/credit_params.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdma_interop::credit;
  using rdma_interop::fuzz::fuzz_check;
  const std::span<const std::uint8_t> input(data, size);

  auto p = decode_credit_params(input);
  if (!p) {
    fuzz_check(!error_name(p.error()).empty() && error_name(p.error()) != "unknown",
               "a decoding error has no name");
    fuzz_check(size >= kCreditParamsSize || p.error() == ParamsError::kShort,
               "short private data decoded to another error");
    return 0;
  }
  fuzz_check(size >= kCreditParamsSize, "fewer than 16 octets decoded");

  auto again = encode_credit_params(*p);
  auto first = input.first(kCreditParamsSize);
  fuzz_check(std::equal(again.begin(), again.end(), first.begin()),
             "decoded credit params do not re-encode to their octets");

  fuzz_check(p->control_receives >= 1 && p->receive_window >= 1 &&
                 p->initial_receives <= p->receive_window && p->max_message >= kCreditHeaderSize,
             "decoded credit params are out of range");
  const CreditParams ours;
  fuzz_check(validate(config_for(ours, *p, 18, 2)).has_value(),
             "the peer's params give a config validate() refuses");
  fuzz_check(validate(config_for(*p, ours, 2, 1)).has_value(),
             "params as ours give a config validate() refuses");
  return 0;
}
