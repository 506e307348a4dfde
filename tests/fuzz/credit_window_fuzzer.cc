// credit_window_fuzzer - the credit header a peer puts in front of every Send, and the credit
// window that applies it (core/credit).
//
// Input: [window][initial][control][queue depth] then operations, one octet each:
//   op % 6 == 0: a message from the peer: the next octet is its length, then its octets
//   1: we post a data receive      2: we post a control receive
//   3: we send a message           4: we send a standalone update
//   5: a send completion (the next octet's low bit: data or control)
// Invariants: after every call broken_invariant() is empty; a refused call changes no
// figure; a header that decodes re-encodes to the same four octets.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/credit/credit_header.h"
#include "core/credit/credit_window.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::credit;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;

template <typename Result>
void check_call(const CreditWindow& w, const CreditCounters& before, const Result& r) {
  fuzz_check(w.broken_invariant().empty(), "a credit window invariant broke");
  if (!r.has_value()) {
    auto after = w.counters();
    // Refusals count their own stalls; everything else stays.
    after.stalls_no_credit = before.stalls_no_credit;
    after.stalls_no_slot = before.stalls_no_slot;
    after.update_stalls = before.update_stalls;
    fuzz_check(after == before, "a refused call changed the window");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in({data, size});
  CreditConfig config;
  config.receive_window = 1 + in.u8() % 32;
  config.initial_receives = in.u8() % (config.receive_window + 1);
  config.peer_receive_window = config.receive_window;
  config.peer_initial_receives = config.initial_receives;
  config.control_receives = config.peer_control_receives = 1 + in.u8() % 4;
  config.send_queue_depth = 2 + in.u8() % 32;
  config.control_send_slots = 1;
  CreditWindow w(config);

  while (!in.empty()) {
    const auto before = w.counters();
    switch (in.u8() % 6) {
      case 0: {
        const auto message = in.take(in.u8());
        if (auto h = decode_credit_header(message)) {
          const auto again = encode_credit_header(*h);
          fuzz_check(std::equal(again.begin(), again.end(), message.begin()),
                     "a decoded credit header does not re-encode to its octets");
        }
        check_call(w, before, w.on_receive(message));
        break;
      }
      case 1: check_call(w, before, w.on_receive_posted()); break;
      case 2: check_call(w, before, w.on_control_receive_posted()); break;
      case 3: check_call(w, before, w.send_message()); break;
      case 4: check_call(w, before, w.send_credit_update()); break;
      default:
        check_call(w, before,
                   w.on_send_completed(in.u8() & 1 ? SendKind::kControl : SendKind::kData));
        break;
    }
  }
  return 0;
}
