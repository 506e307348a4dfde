// stream_session_fuzzer - a stream session (core/stream) driven by a peer that lies and an
// application that calls anything in any order.
//
// Input: [side][window flag] then operations, one octet each (op % 10):
//   0 a peer message: length (u16), then its octets, as they come
//   1 a peer frame built from fields: type, flags, stream (u8), then a u16 that fills the
//     numeric fields, and for DATA that many octets (at most 255)
//   2 open(port % 3)      3 accept(port % 3)
//   4 send(stream, length u16: bit 0 urgent, bit 1 a Write from the buffer first when
//     borrow() allows, as StreamEndpoint::send_borrowed, with the Write posted at once)
//   5 recv(stream, length u16, urgent/peek bits)            6 shutdown_write(stream)
//   7 close(stream, abort bit)  8 the channel blocks / is ready again   9 the session ends
// Invariants: after every call broken_invariant() is empty; every message the session makes
// decodes whole into frames and fits max_message; a Write only goes with a PLACED frame; a
// borrowed Write is one PLACED frame of its own length, from the caller's buffer, at least
// zero_copy_threshold long or ending the reader's sink exactly.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/stream/stream_session.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace rdma_interop::stream;
using rdma_interop::fuzz::ByteReader;
using rdma_interop::fuzz::fuzz_check;

class Regions : public RegionSource {
 public:
  std::optional<Region> acquire(std::size_t size) override {
    if (!enabled) return std::nullopt;
    auto mem = std::make_unique<std::uint8_t[]>(size);
    Region r{{mem.get(), size}, ++stag_, 0};
    owned_[r.stag] = std::move(mem);
    return r;
  }
  void release(const Region& r) override {
    fuzz_check(owned_.erase(r.stag) == 1, "a region released twice or never acquired");
  }
  bool enabled = true;

 private:
  std::uint32_t stag_ = 0;
  std::map<std::uint32_t, std::unique_ptr<std::uint8_t[]>> owned_;
};

void drain(StreamSession& s, const SessionConfig& config, std::vector<StreamId>& incoming) {
  std::vector<SessionOutput> out;
  s.take_outputs(out);
  for (const SessionOutput& o : out) {
    if (o.type == SessionOutput::Type::kIncoming) incoming.push_back(o.stream);
    if (o.type != SessionOutput::Type::kMessage) continue;
    fuzz_check(o.message.size() <= config.max_message, "a message over max_message");
    FrameReader r(o.message);
    bool placed = false;
    while (!r.done()) {
      auto f = r.next();
      fuzz_check(f.has_value(), "the session made a frame it cannot read");
      placed = placed || f->type == FrameType::kPlaced;
    }
    fuzz_check(!o.placement || placed, "a Write without its PLACED frame");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in({data, size});
  const Side side = (in.u8() & 1) != 0 ? Side::kAcceptor : Side::kConnector;
  SessionConfig config;
  config.max_message = 1024;
  config.zero_copy_threshold = 512;
  config.stream_window = kInitialWindow;
  config.sink_size = 4096;
  config.send_buffer = 8192;
  config.accept_backlog = 4;
  Regions regions;
  regions.enabled = (in.u8() & 1) == 0;
  StreamSession s(config, side, regions);
  s.listen(0);
  s.listen(1);
  std::vector<StreamId> streams = {1, 2, 3};
  std::vector<std::uint8_t> buf(70000, 0x5a);
  auto pick = [&](std::uint8_t k) { return streams[k % streams.size()]; };
  // The last SINK the peer sent for each stream: the one a live session took (a second one
  // fails it), so a borrowed Write shorter than the threshold can be checked against its end.
  std::map<StreamId, Frame> sinks;
  auto feed = [&](std::span<const std::uint8_t> message) {
    FrameReader r(message);
    while (!r.done()) {
      auto f = r.next();
      if (!f) break;
      if (f->type == FrameType::kSink) sinks[f->stream] = *f;
    }
    s.on_message(message);
  };
  while (!in.empty()) {
    switch (in.u8() % 10) {
      case 0: {
        feed(in.take(in.u16()));
        break;
      }
      case 1: {
        Frame f;
        f.type = static_cast<FrameType>(1 + in.u8() % 9);
        f.flags = in.u8() & 3;
        f.stream = in.u8();
        const std::uint16_t v = in.u16();
        f.port = v % 3;
        f.window = v * 16u;
        f.reason = static_cast<std::uint8_t>(v);
        f.consumed = v;
        f.stag = v % 4;
        f.size = v;
        f.length = v;
        f.mark = v;
        f.octet = static_cast<std::uint8_t>(v);
        if (f.type == FrameType::kData) f.data = in.take(v % 256);
        if (f.type == FrameType::kData && (f.flags & 3) == 3) f.flags = kFlagFin;
        if (f.type != FrameType::kData && f.type != FrameType::kPlaced) f.flags = 0;
        if (f.type == FrameType::kPlaced) f.flags &= kFlagFin;
        if (f.stream == 0) f.stream = 1;
        std::vector<std::uint8_t> m;
        append_frame(m, f);
        feed(m);
        break;
      }
      case 2: {
        // An open, with first octets (up to past the send buffer: refused) or none.
        const std::uint8_t port = in.u8();
        const std::size_t first = (port & 0x80) != 0 ? in.u16() % 9000 : 0;
        if (auto id = s.open(port % 3, std::span(buf).first(first))) streams.push_back(*id);
        break;
      }
      case 3:
        if (auto id = s.accept(in.u8() % 3)) streams.push_back(*id);
        break;
      case 4: {
        const StreamId id = pick(in.u8());
        const std::size_t n = in.u16();
        const auto data = std::span(buf).first(n);
        if ((n & 3) == 2) {
          std::size_t taken = 0;  // Writes until borrow() says no, as send_borrowed
          (void)s.waits_for_reader(id);
          while (auto b = s.borrow(id, data.subspan(taken), 0xffff'ffff)) {
            fuzz_check(b->length > 0 && b->length <= n - taken,
                       "an empty borrowed Write, or one past the send");
            const auto sink = sinks.find(id);
            fuzz_check(b->length >= config.zero_copy_threshold ||
                           (sink != sinks.end() &&
                            b->placement.remote_offset + b->length ==
                                sink->second.offset + sink->second.size),
                       "a borrowed Write under the threshold that does not end the sink");
            fuzz_check(b->placement.borrowed && b->placement.length == b->length &&
                           b->placement.local_addr ==
                               reinterpret_cast<std::uintptr_t>(buf.data() + taken),
                       "a borrowed Write not from the caller's buffer");
            FrameReader r(b->message);
            auto f = r.next();
            fuzz_check(f && f->type == FrameType::kPlaced && f->length == b->length && r.done(),
                       "a borrowed Write's message is not its PLACED frame");
            s.borrowed_sent(*b);
            taken += b->length;
          }
          if (taken > 0) {
            (void)s.send(id, data.subspan(taken));
            break;
          }
        }
        (void)s.send(id, data, (n & 1) != 0);
        break;
      }
      case 5: {
        const StreamId id = pick(in.u8());
        const std::size_t n = in.u16();
        const std::uint8_t bits = in.u8();
        (void)s.recv(id, std::span(buf).first(n), (bits & 1) != 0, (bits & 2) != 0);
        (void)s.at_mark(id);
        break;
      }
      case 6:
        (void)s.shutdown_write(pick(in.u8()));
        break;
      case 7: {
        const StreamId id = pick(in.u8());
        s.close(id, (in.u8() & 1) != 0);
        break;
      }
      case 8:
        if ((in.u8() & 1) != 0) {
          s.on_link_blocked();
        } else {
          s.on_link_ready();
        }
        break;
      case 9:
        s.on_session_end("fuzzed end");
        break;
    }
    fuzz_check(s.broken_invariant().empty(), "a stream session invariant broke");
    for (StreamId id : streams) (void)s.readiness(id);
    drain(s, config, streams);
  }
  return 0;
}
