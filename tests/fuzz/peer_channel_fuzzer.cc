// peer_channel_fuzzer - the per-peer channel of the message endpoint (core/credit/
// peer_channel.h) facing a peer that lies: whatever octets it sends as messages (credit
// headers that grant what was never posted, return what was never used, claim control with a
// payload), completions in any order and status, posts the provider refuses, and the
// application's calls in any order, tagged writes among its sends.
//
// Input: [window][control][queue depth][queue limit][reserve][flags] then operations, one
// octet each:
//   op % 12 == 0: a message from the peer into the oldest posted receive buffer: the next
//                 octet is its length, then its octets (none posted: the provider's own
//                 DDP "no buffer", not the channel's business: skipped)
//   1: send (next octet: payload length)     2: reply to a message with the application
//   3: hold one                              4: release one
//   5: the oldest posted send fails (next octet's low bit), or the oldest signaled one
//      completes, confirming the unsignaled ones before it
//   6: flush                                 7: the next post is refused
//   8: the peer closes in order, or the connection fails (next octet's low bit)
//   9: a posted receive completes in error  10: the application is done with one (delivered)
//  11: send with a tagged write (next octets: payload length, its high bit a borrowed
//      write; write length / 97)
// Invariants: broken_invariant() is empty after every call; a delivered payload lies inside
// the channel's receive memory; no more work requests outstanding than buffers; after an
// end, nothing more is posted; a write is unsignaled and followed at once by its message's
// send, and a refused write's message is refused too (as PeerLink does); a borrowed write
// is posted in the actions of its own send() or refused then (kNotNow) with nothing queued.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <vector>

#include "core/credit/peer_channel.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::credit;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;
using Type = ChannelAction::Type;

struct Harness {
  explicit Harness(const ChannelConfig& c) : ch(c) {
    for (std::uint32_t i = 0; i < ch.receive_buffers(); ++i) rq.push_back(i);
  }
  PeerChannel ch;
  std::deque<std::uint32_t> rq;  // posted receives, oldest first
  struct Posted {
    std::uint32_t index = 0;
    bool signaled = true;
  };
  std::deque<Posted> sq;  // posted sends, oldest first
  std::vector<std::uint32_t> with_app;
  std::vector<ChannelAction> actions;
  bool refuse_next = false;
  bool borrowed_due = false;  // a borrowed write's send() said kOk: post it now
  PeerChannel::TimePoint now{};

  bool ended() const {
    return ch.state() == ChannelState::kFailed || ch.state() == ChannelState::kClosed;
  }
  // `ended_before`: the channel had ended before the call whose actions these are.
  void act(bool ended_before) {
    while (ch.has_actions()) {
      ch.take_actions(actions);
      const std::vector<ChannelAction> todo = actions;
      bool write_refused = false;
      for (std::size_t k = 0; k < todo.size(); ++k) {
        const ChannelAction& a = todo[k];
        if (write_refused && a.type == Type::kPostSend) {
          write_refused = false;
          ch.on_post_refused(a, "its write was refused");
          continue;
        }
        switch (a.type) {
          case Type::kPostWrite:
            fuzz_check(!ended_before, "a write after the channel ended");
            fuzz_check(!a.signaled, "a signaled write");
            if (a.write.borrowed) {
              fuzz_check(borrowed_due, "a borrowed write posted after its send() returned");
              borrowed_due = false;
            }
            fuzz_check(k + 1 < todo.size() && todo[k + 1].type == Type::kPostSend,
                       "a write not followed at once by its message");
            if (refuse_next) {
              refuse_next = false;
              write_refused = true;
              ch.on_post_refused(a, "refused by the fuzzer");
            } else {
              sq.push_back(Posted{a.index, a.signaled});
            }
            break;
          case Type::kPostSend:
          case Type::kPostRecv:
            fuzz_check(!ended_before, "a post after the channel ended");
            if (refuse_next) {
              refuse_next = false;
              ch.on_post_refused(a, "refused by the fuzzer");
            } else if (a.type == Type::kPostSend) {
              fuzz_check(a.length <= ch.buffer_size(), "a send longer than its buffer");
              sq.push_back(Posted{a.index, a.signaled});
            } else {
              rq.push_back(a.index);
            }
            break;
          case Type::kDeliver: {
            const auto memory = ch.receive_memory();
            fuzz_check(a.payload.data() >= memory.data() &&
                           a.payload.data() + a.payload.size() <= memory.data() + memory.size(),
                       "a delivered payload outside the receive buffers");
            with_app.push_back(a.index);
            break;
          }
          default:
            break;
        }
      }
    }
    fuzz_check(ch.broken_invariant().empty(), "a peer channel invariant broke");
    fuzz_check(ch.outstanding() <= ch.receive_buffers() + ch.send_buffers(),
               "more work requests outstanding than buffers");
  }
  std::uint32_t pick_app(std::uint8_t n) {
    const std::uint32_t idx = with_app[n % with_app.size()];
    return idx;
  }
  void forget_app(std::uint32_t idx) {
    with_app.erase(std::find(with_app.begin(), with_app.end(), idx));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in({data, size});
  ChannelConfig config;
  config.max_message = 64;
  config.receive_window = 1 + in.u8() % 16;
  config.control_receives = 1 + in.u8() % 3;
  config.send_queue_depth = config.receive_window + 1 + in.u8() % 4;
  config.control_send_slots = 1;
  config.send_queue_limit = in.u8() % 8;
  config.reply_reserve = in.u8() % config.receive_window;
  const std::uint8_t flags = in.u8();
  config.ignore_credits = (flags & 1) != 0;
  Harness h(config);
  CreditParams theirs = h.ch.announced();
  theirs.receive_window = static_cast<std::uint16_t>(1 + (flags >> 1) % 16);
  theirs.initial_receives = theirs.receive_window;
  theirs.reply_reserve = static_cast<std::uint16_t>(flags >> 5);
  (void)h.ch.established(theirs, h.now);
  h.act(false);

  std::uint8_t scratch[256] = {};
  while (!in.empty()) {
    const bool ended_before = h.ended();
    switch (in.u8() % 12) {
      case 0: {
        const auto message = in.take(in.u8());
        if (h.rq.empty()) break;
        const std::uint32_t into = h.rq.front();
        h.rq.pop_front();
        const auto n = std::min<std::size_t>(message.size(), h.ch.buffer_size());
        std::memcpy(h.ch.receive_buffer(into), message.data(), n);
        h.ch.on_receive_completed(into, static_cast<std::uint32_t>(message.size()),
                                  rdma_interop::rdmap::WcStatus::kSuccess, h.now);
        break;
      }
      case 1:
        (void)h.ch.send(std::span<const std::uint8_t>(scratch, in.u8() % 80), h.now);
        break;
      case 2:
        if (!h.with_app.empty()) {
          const std::uint32_t idx = h.pick_app(in.u8());
          if (h.ch.reply(idx, std::span<const std::uint8_t>(scratch, 8), h.now) ==
              SendStatus::kOk) {
            h.forget_app(idx);
          }
        }
        break;
      case 3:
        if (!h.with_app.empty()) (void)h.ch.hold(h.pick_app(in.u8()));
        break;
      case 4:
        if (!h.with_app.empty()) {
          const std::uint32_t idx = h.pick_app(in.u8());
          (void)h.ch.release(idx, h.now);
          h.forget_app(idx);
        }
        break;
      case 5:
        // As a provider does: the oldest send fails on its own (flushed); or the oldest
        // signaled one succeeds, and every unsignaled one before it with it, silently.
        if (!h.sq.empty() && (in.u8() & 1)) {
          const std::uint32_t idx = h.sq.front().index;
          h.sq.pop_front();
          h.ch.on_send_completed(idx, rdma_interop::rdmap::WcStatus::kFlushed, h.now);
        } else {
          while (!h.sq.empty()) {
            const Harness::Posted sent = h.sq.front();
            h.sq.pop_front();
            if (!sent.signaled) continue;
            h.ch.on_send_completed(sent.index, rdma_interop::rdmap::WcStatus::kSuccess, h.now);
            break;
          }
        }
        break;
      case 6:
        h.ch.flush(h.now);
        break;
      case 7:
        h.refuse_next = true;
        break;
      case 8:
        if (in.u8() & 1) {
          h.ch.fail("the fuzzer failed it");
        } else {
          h.ch.peer_closed("the fuzzer closed it");
        }
        break;
      case 9:
        if (!h.rq.empty()) {
          const std::uint32_t idx = h.rq.front();
          h.rq.pop_front();
          h.ch.on_receive_completed(idx, 0, rdma_interop::rdmap::WcStatus::kFlushed, h.now);
        }
        break;
      case 10:
        if (!h.with_app.empty()) {
          const std::uint32_t idx = h.pick_app(in.u8());
          h.ch.delivered(idx, h.now);
          h.forget_app(idx);
        }
        break;
      case 11: {
        const std::uint8_t length = in.u8();
        const bool borrowed = (length & 0x80) != 0;
        const TaggedWrite write{.local_addr = 0x1000,
                                .length = std::uint32_t{in.u8()} * 97,
                                .local_stag = borrowed ? 0u : 0x100u,
                                .remote_stag = 0x200,
                                .remote_offset = length,
                                .borrowed = borrowed};
        const ChannelCounters before = h.ch.counters(h.now);
        const SendStatus st =
            h.ch.send(std::span<const std::uint8_t>(scratch, length % 80), h.now, write);
        fuzz_check(st != SendStatus::kNotNow || borrowed, "kNotNow for a write not borrowed");
        if (borrowed) {
          const ChannelCounters after = h.ch.counters(h.now);
          fuzz_check(after.queued == before.queued, "a borrowed write queued");
          fuzz_check(st != SendStatus::kNotNow ||
                         (after.refused == before.refused && after.credit == before.credit),
                     "a borrowed write's refusal counted");
          if (st == SendStatus::kOk) {
            h.borrowed_due = true;
            h.act(ended_before);
            fuzz_check(!h.borrowed_due, "a borrowed write not posted at once");
          }
        }
        break;
      }
    }
    h.now += std::chrono::milliseconds(1);
    h.act(ended_before);
  }
  return 0;
}
