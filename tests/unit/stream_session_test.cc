// Two stream sessions wired back to back: the messages one makes are delivered to the other
// in order, and an RDMA Write that goes with a message is carried out (a copy into the
// region the peer registered, checked against its bounds) just before the message.
#include "core/stream/stream_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace rdma_interop::stream {
namespace {

class FakeRegions : public RegionSource {
 public:
  std::optional<Region> acquire(std::size_t size) override {
    if (!enabled) return std::nullopt;
    auto mem = std::make_unique<std::uint8_t[]>(size);
    Region r{{mem.get(), size}, next_stag_++, 0x10000ULL * next_stag_};
    owned_[r.stag] = Owned{std::move(mem), r};
    return r;
  }
  void release(const Region& r) override { owned_.erase(r.stag); }
  const Region* find(std::uint32_t stag) const {
    auto it = owned_.find(stag);
    return it == owned_.end() ? nullptr : &it->second.region;
  }
  std::size_t live() const { return owned_.size(); }
  bool enabled = true;

 private:
  struct Owned {
    std::unique_ptr<std::uint8_t[]> memory;
    Region region;
  };
  std::uint32_t next_stag_ = 1;
  std::map<std::uint32_t, Owned> owned_;
};

struct Pair {
  Pair() = default;
  explicit Pair(const SessionConfig& c) : config(c) {}
  SessionConfig config;
  FakeRegions regions_a;
  FakeRegions regions_b;
  StreamSession a{config, Side::kConnector, regions_a};
  StreamSession b{config, Side::kAcceptor, regions_b};
  std::vector<std::string> failures_a, failures_b;
  std::vector<std::uint16_t> incoming_b;
  std::uint64_t messages = 0;

  // Delivers every message both ways until neither has any left.
  void run() {
    for (int rounds = 0; rounds < 100000; ++rounds) {
      const bool more = deliver(a, regions_a, b, regions_b, failures_a) |
                        deliver(b, regions_b, a, regions_a, failures_b);
      ASSERT_EQ(a.broken_invariant(), "");
      ASSERT_EQ(b.broken_invariant(), "");
      if (!more) return;
    }
    FAIL() << "the sessions never went quiet";
  }

  bool deliver(StreamSession& from, const FakeRegions& from_regions, StreamSession& to,
               FakeRegions& to_regions, std::vector<std::string>& failures) {
    std::vector<SessionOutput> out;
    from.take_outputs(out);
    bool any = false;
    for (const SessionOutput& o : out) {
      if (o.type == SessionOutput::Type::kFailed) failures.push_back(o.detail);
      if (o.type == SessionOutput::Type::kIncoming && &to == &a) incoming_b.push_back(o.port);
      if (o.type != SessionOutput::Type::kMessage) continue;
      any = true;
      ++messages;
      EXPECT_LE(o.message.size(), config.max_message);
      if (o.placement) {
        const Placement& p = *o.placement;
        // A Write reads memory its sender registered and still holds.
        const Region* source = from_regions.find(p.local_stag);
        EXPECT_NE(source, nullptr) << "a Write from memory its sender has not registered";
        if (source == nullptr) continue;
        const auto from_addr = reinterpret_cast<std::uintptr_t>(source->memory.data());
        EXPECT_GE(p.local_addr, from_addr);
        EXPECT_LE(p.local_addr - from_addr + p.length, source->memory.size());
        const Region* r = to_regions.find(p.remote_stag);
        EXPECT_NE(r, nullptr) << "a Write into a region the peer does not have";
        if (r == nullptr) continue;
        EXPECT_GE(p.remote_offset, r->tagged_offset);
        EXPECT_LE(p.remote_offset - r->tagged_offset + p.length, r->memory.size());
        std::memcpy(r->memory.data() + (p.remote_offset - r->tagged_offset),
                    reinterpret_cast<const void*>(p.local_addr), p.length);
      }
      to.on_message(o.message);
    }
    return any || from.has_outputs() || to.has_outputs();
  }

  // A borrowed Write carried out at once (a copy from `source` into the peer's region, checked
  // against its bounds), its message delivered, and the sender told.
  void post_borrowed(StreamSession& from, const StreamSession::Borrowed& bw,
                     std::span<const std::uint8_t> source) {
    StreamSession& to = &from == &a ? b : a;
    const FakeRegions& to_regions = &from == &a ? regions_b : regions_a;
    const Placement& pl = bw.placement;
    EXPECT_TRUE(pl.borrowed);
    EXPECT_EQ(pl.local_addr, reinterpret_cast<std::uintptr_t>(source.data()));
    EXPECT_LE(pl.length, source.size());
    const Region* r_to = to_regions.find(pl.remote_stag);
    EXPECT_NE(r_to, nullptr);
    if (r_to != nullptr) {
      EXPECT_LE(pl.remote_offset - r_to->tagged_offset + pl.length, r_to->memory.size());
      std::memcpy(r_to->memory.data() + (pl.remote_offset - r_to->tagged_offset),
                  source.data(), pl.length);
    }
    ++messages;
    to.on_message(bw.message);
    from.borrowed_sent(bw);
  }

  // What StreamEndpoint::send_borrowed does with a channel that posts inline: a large send
  // goes by Writes from the caller's buffer, carried out at once, with their messages; the
  // octets the Writes did not take are sent as usual. The buffer is scribbled on once the
  // call is over, so a Write that read it later would carry the scribbles.
  Expected<std::size_t, StreamErrc> send_borrowing(StreamSession& from, StreamId id,
                                                   std::span<const std::uint8_t> data) {
    std::vector<std::uint8_t> buffer(data.begin(), data.end());
    const FakeRegions& to_regions = &from == &a ? regions_b : regions_a;
    std::size_t borrowed = 0;
    while (auto w = from.borrow(id, std::span(buffer).subspan(borrowed), 0xffff'ffff)) {
      // At least the threshold, or up to the end of the reader's sink exactly.
      const Placement& pl = w->placement;
      const Region* sink = to_regions.find(pl.remote_stag);
      EXPECT_TRUE(w->length >= config.zero_copy_threshold ||
                  (sink != nullptr &&
                   pl.remote_offset + pl.length == sink->tagged_offset + sink->memory.size()))
          << "a short Write (" << w->length << ") that does not end the sink";
      post_borrowed(from, *w, std::span(buffer).subspan(borrowed));
      borrowed += w->length;
      ++borrowed_writes;
      if (w->length < config.zero_copy_threshold) ++short_borrowed_writes;
    }
    Expected<std::size_t, StreamErrc> r = borrowed;
    if (borrowed < data.size()) {
      auto rest = from.send(id, std::span(buffer).subspan(borrowed));
      if (rest) r = borrowed + *rest;
      else if (borrowed == 0) r = rest;
    }
    std::fill(buffer.begin(), buffer.end(), 0xEE);
    return r;
  }
  int borrowed_writes = 0;
  int short_borrowed_writes = 0;  // ones that ended the reader's sink
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& c : v) c = static_cast<std::uint8_t>(rng());
  return v;
}

// Opens a stream from a to b's `port` and accepts it.
std::pair<StreamId, StreamId> connect(Pair& p, std::uint16_t port = 80) {
  p.b.listen(port);
  auto ida = p.a.open(port);
  EXPECT_TRUE(ida.has_value());
  p.run();
  auto idb = p.b.accept(port);
  EXPECT_TRUE(idb.has_value());
  p.run();
  return {*ida, *idb};
}

// connect(), then `first` octets sent borrowing (a large first chunk asks for the reader's
// sink) and read, so the writer knows the sink.
std::pair<StreamId, StreamId> connect_with_sink(Pair& p, std::size_t first, std::uint32_t seed) {
  auto [ida, idb] = connect(p);
  std::vector<std::uint8_t> buf(first);
  EXPECT_TRUE(p.send_borrowing(p.a, ida, pattern(first, seed)));
  p.run();
  EXPECT_EQ(*p.b.recv(idb, buf), first);
  p.run();
  return {ida, idb};
}

// Sends all of `data` on `id`, reading on the other side as it goes.
std::vector<std::uint8_t> transfer(Pair& p, StreamSession& tx, StreamId txid, StreamSession& rx,
                                   StreamId rxid, const std::vector<std::uint8_t>& data,
                                   std::mt19937& rng, bool borrowing = false) {
  std::vector<std::uint8_t> got;
  std::size_t at = 0;
  std::uniform_int_distribution<std::size_t> send_size(1, 100 * 1024);
  std::uniform_int_distribution<std::size_t> read_size(1, 64 * 1024);
  std::vector<std::uint8_t> buf(64 * 1024);
  int idle_rounds = 0;  // rounds in which no octet moved either way: a stall, not a test
  while (got.size() < data.size()) {
    const std::size_t before = at + got.size();
    if (idle_rounds++ > 1000) {
      ADD_FAILURE() << "stalled: " << at << " octets sent, " << got.size() << " read";
      break;
    }
    if (at < data.size()) {
      const std::size_t n = std::min(send_size(rng), data.size() - at);
      const auto chunk = std::span(data).subspan(at, n);
      auto r = borrowing ? p.send_borrowing(tx, txid, chunk) : tx.send(txid, chunk);
      if (r) at += *r;
      else EXPECT_EQ(r.error(), StreamErrc::kWouldBlock);
    }
    p.run();
    // A borrowing writer's window fills only when its reader lags: it reads little then.
    const int most = borrowing ? static_cast<int>(rng() % 3) : std::numeric_limits<int>::max();
    for (int reads = 0; reads < most; ++reads) {
      auto r = rx.recv(rxid, std::span(buf).first(read_size(rng)));
      if (!r) {
        EXPECT_EQ(r.error(), StreamErrc::kWouldBlock);
        break;
      }
      got.insert(got.end(), buf.begin(), buf.begin() + *r);
      if (*r == 0) break;
      p.run();
    }
    if (at + got.size() != before) idle_rounds = 0;
  }
  return got;
}

TEST(StreamSession, RandomSizesCrossTheCopyAndWriteBoundaryInOrder) {
  Pair p;
  auto [ida, idb] = connect(p);
  std::mt19937 rng(24);
  const auto data = pattern(3 * 1024 * 1024, 1);
  EXPECT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng), data);
  const SessionCounters c = p.a.counters();
  EXPECT_GT(c.bytes_copied, 0u);
  EXPECT_GT(c.bytes_placed, 0u) << "no chunk went by RDMA Write";
  EXPECT_GT(c.writes, 10u) << "one sink took many pipelined Writes";
  EXPECT_EQ(p.b.counters().sink_bytes, p.config.sink_size) << "one sink, reused";
  // And back the other way on the same stream.
  const auto back = pattern(700 * 1024, 2);
  EXPECT_EQ(transfer(p, p.b, idb, p.a, ida, back, rng), back);
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

// Large sends that find nothing waiting go by a Write from the sender's own buffer; the
// others (octets behind ones waiting for the window, small ones) are copied as before, and
// the stream keeps its order across all three ways.
TEST(StreamSession, WritesFromTheSendersBufferMixWithTheOtherWaysInOrder) {
  Pair p;
  auto [ida, idb] = connect(p);
  std::mt19937 rng(25);
  const auto data = pattern(3 * 1024 * 1024, 3);
  EXPECT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng, true), data);
  const SessionCounters c = p.a.counters();
  EXPECT_GT(c.bytes_borrowed, 0u) << "no Write from the sender's buffer";
  EXPECT_LT(c.bytes_borrowed, c.bytes_placed) << "every Write borrowed: none from the ring";
  EXPECT_GT(c.bytes_copied, 0u);
  EXPECT_EQ(c.bytes_copied + c.bytes_placed, data.size());
  EXPECT_EQ(p.b.counters().sink_bytes, p.config.sink_size) << "one sink, reused";
  const auto back = pattern(700 * 1024, 4);
  EXPECT_EQ(transfer(p, p.b, idb, p.a, ida, back, rng, true), back);
  EXPECT_GT(p.b.counters().bytes_borrowed, 0u);
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
  // Nothing is borrowed once the reader's window is closed: a stream whose reader stopped
  // takes a send into its ring, and the next large one follows it there.
  SessionConfig small;
  small.stream_window = 128 * 1024;
  small.send_buffer = 128 * 1024;
  small.sink_size = 128 * 1024;
  Pair q(small);
  auto [qa, qb] = connect_with_sink(q, 20 * 1024, 5);
  std::vector<std::uint8_t> buf(64 * 1024);
  const auto first = q.a.counters().bytes_borrowed;
  ASSERT_TRUE(q.send_borrowing(q.a, qa, pattern(100 * 1024, 6)));
  EXPECT_EQ(q.a.counters().bytes_borrowed, first + 100 * 1024) << "the sink known: borrowed";
  q.run();
  // 8 KiB of window left (20 KiB read, not told yet): only the reader keeps the next large
  // send from being borrowed, which a caller that may wait can wait out.
  EXPECT_TRUE(q.a.waits_for_reader(qa));
  ASSERT_TRUE(q.send_borrowing(q.a, qa, pattern(40 * 1024, 7)));  // over the window: waits
  q.run();
  EXPECT_FALSE(q.a.waits_for_reader(qa)) << "octets in the ring go before any Write";
  const auto before = q.a.counters().bytes_borrowed;
  ASSERT_TRUE(q.send_borrowing(q.a, qa, pattern(30 * 1024, 8)));
  EXPECT_EQ(q.a.counters().bytes_borrowed, before) << "borrowed into a closed window";
  std::vector<std::uint8_t> got;
  for (int i = 0; i < 100 && got.size() < 190u * 1024; ++i) {
    q.run();
    auto r = q.b.recv(qb, buf);
    if (r) got.insert(got.end(), buf.begin(), buf.begin() + *r);
  }
  std::vector<std::uint8_t> want = pattern(100 * 1024, 6);
  for (auto [n, seed] : {std::pair{40, 7}, std::pair{30, 8}}) {
    const auto more = pattern(n * 1024, seed);
    want.insert(want.end(), more.begin(), more.end());
  }
  EXPECT_EQ(got, want);
}

// Where less than the zero-copy threshold is left to the end of the reader's sink, a large
// send still goes from the caller's buffer: a short Write ends the sink and the next starts
// at its start. Nothing the reader does would make that end longer, so a sender that waited
// for the reader there would wait for nothing.
TEST(StreamSession, ALargeSendEndsTheReadersSinkWithAShortWriteAndGoesOnFromItsStart) {
  SessionConfig config;
  config.stream_window = 256 * 1024;
  config.sink_size = 128 * 1024;
  Pair p(config);
  auto [ida, idb] = connect_with_sink(p, 20 * 1024, 11);
  std::vector<std::uint8_t> buf(256 * 1024);
  const auto first = pattern(120 * 1024, 12);  // 8 KiB of the sink left after it
  ASSERT_EQ(*p.send_borrowing(p.a, ida, first), first.size());
  p.run();
  ASSERT_EQ(*p.b.recv(idb, buf), first.size());
  p.run();
  EXPECT_FALSE(p.a.waits_for_reader(ida)) << "waits for a reader that read all";
  const auto second = pattern(40 * 1024, 13);
  ASSERT_EQ(*p.send_borrowing(p.a, ida, second), second.size());
  EXPECT_EQ(p.short_borrowed_writes, 1);
  const SessionCounters c = p.a.counters();
  EXPECT_EQ(c.bytes_borrowed, first.size() + second.size()) << "copied at the sink's end";
  p.run();
  ASSERT_EQ(*p.b.recv(idb, buf), second.size());
  EXPECT_TRUE(std::equal(second.begin(), second.end(), buf.begin()));
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

// A sink smaller than a quarter of the window: the reader reads every Write and still owes no
// WINDOW by its own rule, while the writer's sink is full. The Write that left the sink short
// asks for one (TELL), so a writer waiting for the reader (waits_for_reader) is answered once
// the reader read it, not never.
TEST(StreamSession, AWriteThatLeavesTheReadersSinkShortAsksForAWindow) {
  SessionConfig config;
  config.stream_window = 512 * 1024;
  config.sink_size = 64 * 1024;
  Pair p(config);
  auto [ida, idb] = connect_with_sink(p, 20 * 1024, 14);
  std::vector<std::uint8_t> buf(128 * 1024);
  for (std::uint32_t seed = 15; seed < 19; ++seed) {
    const auto chunk = pattern(64 * 1024, seed);
    ASSERT_EQ(*p.send_borrowing(p.a, ida, chunk), chunk.size()) << "not borrowed whole";
    EXPECT_TRUE(p.a.waits_for_reader(ida)) << "the sink is full";
    p.run();
    ASSERT_EQ(*p.b.recv(idb, buf), chunk.size());
    EXPECT_TRUE(std::equal(chunk.begin(), chunk.end(), buf.begin()));
    p.run();
    EXPECT_FALSE(p.a.waits_for_reader(ida)) << "read whole, and the writer still waits";
  }
  EXPECT_EQ(p.a.counters().bytes_borrowed, 4u * 64 * 1024);
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

// A zero-copy threshold of 0 (every send a Write once the sink is known) still never plans an
// empty Write: a closed window borrows nothing, and the send waits in the ring as any does.
TEST(StreamSession, AClosedWindowIsNeverAnEmptyBorrowedWrite) {
  SessionConfig config;
  config.zero_copy_threshold = 0;
  ASSERT_EQ(config_problem(config), "");
  Pair p(config);
  auto [ida, idb] = connect_with_sink(p, 1000, 9);
  // Borrowed until the window is full (the reader told nothing: under a quarter read), the
  // last Write the few octets left.
  const auto chunk = pattern(8 * 1024, 10);
  std::size_t sent = 1000;
  while (auto b = p.a.borrow(ida, chunk, 0xffff'ffff)) {
    ASSERT_GT(b->length, 0u) << "an empty Write, " << sent << " sent";
    p.post_borrowed(p.a, *b, chunk);
    p.run();
    sent += b->length;
    ASSERT_LE(sent, config.stream_window) << "borrowed past the window";
  }
  EXPECT_EQ(sent, config.stream_window);
  EXPECT_GT(p.a.counters().bytes_borrowed, 0u);
  auto r = p.a.send(ida, chunk);  // into the ring, to wait for the window
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, chunk.size());
}

// The reader tells the writer how far it read once a quarter of its window was read; the
// writer's send buffer frees a Write only once the reader read past its end. When the last
// telling fell inside a Write and what followed is less than a quarter window, and the send
// buffer is full of those Writes, neither side would ever move again: the writer marks a
// frame sent with its send buffer full, and the reader tells it once it read past that.
TEST(StreamSession, AWriterWithItsSendBufferFullOfWritesAlreadyReadIsToldSo) {
  SessionConfig config;
  config.stream_window = 1024 * 1024;  // a telling each 256 KiB read
  config.send_buffer = 256 * 1024;
  config.sink_size = 256 * 1024;
  Pair p(config);
  auto [ida, idb] = connect(p);
  const auto data = pattern(512 * 1024, 40);
  std::vector<std::uint8_t> got(data.size());
  std::size_t sent = 0;
  std::size_t read = 0;
  const auto send = [&](std::size_t n) {
    auto r = p.a.send(ida, std::span(data).subspan(sent, n));
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(*r, n);
    sent += n;
    p.run();
  };
  const auto recv = [&](std::size_t n) {
    while (n > 0) {
      auto r = p.b.recv(idb, std::span(got).subspan(read, n));
      ASSERT_TRUE(r.has_value()) << errc_name(r.error()) << " with " << read << " read";
      read += *r;
      n -= *r;
      p.run();
    }
  };
  send(64 * 1024);   // copied (it asks for the sink), read, not told: under a quarter
  recv(64 * 1024);
  send(256 * 1024);  // Writes [64K, 256K) and [256K, 320K): the send buffer is full
  recv(200 * 1024);  // told at 264K, inside the second Write
  send(192 * 1024);  // [320K, 512K): full again, and the first unfreed Write is read
  recv(248 * 1024);  // all of it: 248 KiB since the telling, under a quarter window
  EXPECT_GT(p.a.counters().writes, 2u);
  EXPECT_EQ(got, data);
  EXPECT_TRUE(p.a.readiness(ida).writable) << "the writer still waits for a WINDOW";
  const std::vector<std::uint8_t> more(1000, 0x5a);
  EXPECT_TRUE(p.a.send(ida, more).has_value());
}

// A peer marking every small frame TELL while our channel is blocked gets one WINDOW when
// it opens, not one per read: what waits for the channel stays bounded.
TEST(StreamSession, TellMarksWhileTheChannelIsBlockedQueueOneWindow) {
  Pair p;
  auto [ida, idb] = connect(p);
  (void)ida;
  p.b.on_link_blocked();
  std::uint8_t octet = 0;
  for (int i = 0; i < 100; ++i) {
    Frame f;
    f.type = FrameType::kData;
    f.flags = kFlagTell;
    f.stream = idb;
    const std::uint8_t data[1] = {static_cast<std::uint8_t>(i)};
    f.data = data;
    std::vector<std::uint8_t> m;
    append_frame(m, f);
    p.b.on_message(m);
    auto n = p.b.recv(idb, {&octet, 1});
    ASSERT_TRUE(n.has_value());
    ASSERT_EQ(*n, 1u);
    EXPECT_EQ(octet, i);
  }
  p.b.on_link_ready();
  std::vector<SessionOutput> out;
  p.b.take_outputs(out);
  int windows = 0;
  std::uint64_t consumed = 0;
  for (const SessionOutput& o : out) {
    if (o.type != SessionOutput::Type::kMessage) continue;
    FrameReader r(o.message);
    while (!r.done()) {
      auto f = r.next();
      ASSERT_TRUE(f.has_value());
      if (f->type == FrameType::kWindow) {
        ++windows;
        consumed = f->consumed;
      }
    }
  }
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(consumed, 100u);
}

// The same hazard, found by chance: random sends and reads with send buffers from a quarter
// of the window to all of it.
TEST(StreamSession, RandomTransfersNeverStallWhateverTheSendBufferAndSink) {
  for (const std::uint32_t buffer : {256u * 1024, 300u * 1024, 512u * 1024, 1024u * 1024}) {
    for (const std::uint32_t sink : {64u * 1024, 256u * 1024, 1024u * 1024}) {
      SessionConfig config;
      config.stream_window = 1024 * 1024;
      config.send_buffer = buffer;
      config.sink_size = sink;
      Pair p(config);
      auto [ida, idb] = connect(p);
      std::mt19937 rng(buffer ^ sink);
      const auto data = pattern(3 * 1024 * 1024, buffer + sink);
      EXPECT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng), data)
          << "send buffer " << buffer << ", sink " << sink;
    }
  }
}

// Ids are never used twice: a session that opened all it may says so, and goes on carrying
// its streams; the peer, which takes only ids above the last, is not failed by a wrapped one.
TEST(StreamSession, ASessionOutOfStreamIdsSaysSoAndKeepsItsStreams) {
  SessionConfig config;
  config.max_opens = 3;
  Pair p(config);
  std::vector<std::pair<StreamId, StreamId>> ends;
  for (int i = 0; i < 3; ++i) ends.push_back(connect(p));
  EXPECT_EQ(p.a.open(80).error(), StreamErrc::kExhausted);
  EXPECT_EQ(p.a.counters().opened, 3u);
  std::mt19937 rng(41);
  const auto data = pattern(200 * 1024, 42);
  for (auto [ida, idb] : ends) EXPECT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng), data);
  // The other side's count is its own.
  p.a.listen(90);
  auto theirs = p.b.open(90);
  ASSERT_TRUE(theirs.has_value());
  p.run();
  EXPECT_TRUE(p.a.accept(90).has_value());
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
  EXPECT_EQ(config_problem(SessionConfig{.max_opens = 0}), "max_opens must be 1..2^31-1");
}

TEST(StreamSession, WithoutRegisteredMemoryEverythingIsCopiedAndStillInOrder) {
  Pair p;
  p.regions_a.enabled = false;
  p.regions_b.enabled = false;
  auto [ida, idb] = connect(p);
  std::mt19937 rng(7);
  const auto data = pattern(1024 * 1024, 3);
  EXPECT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng), data);
  EXPECT_EQ(p.a.counters().bytes_placed, 0u);
}

TEST(StreamSession, UrgentOctetArrivesOutOfBandWithItsMarkOnEitherPath) {
  for (const std::size_t before : {std::size_t{10}, std::size_t{200 * 1024}}) {
    Pair p;
    auto [ida, idb] = connect(p);
    auto data = pattern(before, 5);
    data.push_back('!');
    ASSERT_EQ(*p.a.send(ida, data, /*urgent=*/true), data.size());
    const auto after = pattern(100, 6);
    ASSERT_EQ(*p.a.send(ida, after), after.size());
    p.run();
    EXPECT_TRUE(p.b.readiness(idb).urgent);
    std::uint8_t oob = 0;
    ASSERT_EQ(*p.b.recv(idb, {&oob, 1}, /*urgent=*/true), 1u);
    EXPECT_EQ(oob, '!');
    EXPECT_EQ(p.b.recv(idb, {&oob, 1}, true).error(), StreamErrc::kNoUrgent);
    // In-band reads stop at the mark; the urgent octet is not in the stream.
    std::vector<std::uint8_t> got;
    std::vector<std::uint8_t> buf(300 * 1024);
    while (!p.b.at_mark(idb)) {
      auto r = p.b.recv(idb, buf);
      ASSERT_TRUE(r.has_value());
      got.insert(got.end(), buf.begin(), buf.begin() + *r);
      p.run();
    }
    EXPECT_EQ(got.size(), before);
    auto r = p.b.recv(idb, buf);
    ASSERT_TRUE(r.has_value());
    got.insert(got.end(), buf.begin(), buf.begin() + *r);
    EXPECT_FALSE(p.b.at_mark(idb));
    data.pop_back();
    data.insert(data.end(), after.begin(), after.end());
    EXPECT_EQ(got, data) << "before=" << before;
  }
}

TEST(StreamSession, HalfCloseEndsOneDirectionOnly) {
  Pair p;
  auto [ida, idb] = connect(p);
  const auto hello = pattern(5000, 8);
  ASSERT_EQ(*p.a.send(ida, hello), hello.size());
  ASSERT_TRUE(p.a.shutdown_write(ida).has_value());
  EXPECT_EQ(p.a.send(ida, hello).error(), StreamErrc::kBrokenPipe);
  p.run();
  std::vector<std::uint8_t> buf(10000);
  ASSERT_EQ(*p.b.recv(idb, buf), hello.size());
  EXPECT_EQ(*p.b.recv(idb, buf), 0u) << "end of stream";
  EXPECT_TRUE(p.b.readiness(idb).peer_closed);
  // The other direction still works.
  ASSERT_EQ(*p.b.send(idb, hello), hello.size());
  p.run();
  ASSERT_EQ(*p.a.recv(ida, buf), hello.size());
  p.b.close(idb);
  p.run();
  EXPECT_EQ(*p.a.recv(ida, buf), 0u);
  p.a.close(ida);
  p.run();
  EXPECT_EQ(p.a.stream_count(), 0u);
  EXPECT_EQ(p.b.stream_count(), 0u);
}

// A stream whose last octets went by RDMA Write still goes once both ends closed, whichever
// closes first: the reader's last WINDOW (sent at its close, after the writer's end of
// stream too) tells the writer its Writes were read, so its send ring and state are freed.
TEST(StreamSession, AStreamThatEndedInWritesIsFreedWhicheverEndClosesFirst) {
  for (const bool writer_first : {true, false}) {
    SCOPED_TRACE(writer_first ? "the writer shuts down first" : "the reader closes first");
    Pair p;
    auto [ida, idb] = connect(p);
    std::vector<std::uint8_t> buf(1 << 20);
    auto read_all = [&](std::size_t n, bool to_end) {
      std::vector<std::uint8_t> got;
      for (int spins = 0; spins < 10000; ++spins) {
        auto r = p.b.recv(idb, buf);
        if (!r) {
          EXPECT_EQ(r.error(), StreamErrc::kWouldBlock);
          p.run();
          continue;
        }
        got.insert(got.end(), buf.begin(), buf.begin() + *r);
        p.run();
        if (to_end ? *r == 0 : got.size() >= n) break;
      }
      return got;
    };
    // 300 KiB first: the reader's sink is known from then on, so what follows is Written.
    const auto warm = pattern(300 * 1024, 31);
    ASSERT_EQ(*p.a.send(ida, warm), warm.size());
    p.run();
    ASSERT_EQ(read_all(warm.size(), false), warm);
    const auto writes_before = p.a.counters().writes;
    const auto data = pattern(100 * 1024, 32);
    ASSERT_EQ(*p.a.send(ida, data), data.size());
    p.run();
    ASSERT_GT(p.a.counters().writes, writes_before) << "the 100 KiB went by RDMA Write";
    if (writer_first) {
      ASSERT_TRUE(p.a.shutdown_write(ida).has_value());
      p.run();
      EXPECT_EQ(read_all(data.size(), true), data);
      p.a.close(ida);
      p.run();
      p.b.close(idb);
    } else {
      EXPECT_EQ(read_all(data.size(), false), data);
      p.b.close(idb);
      p.run();
      p.a.close(ida);
    }
    p.run();
    EXPECT_EQ(p.a.stream_count(), 0u) << "the writer's stream was kept";
    EXPECT_EQ(p.b.stream_count(), 0u);
    EXPECT_EQ(p.regions_a.live(), 0u) << "the writer's send ring was kept";
    EXPECT_EQ(p.a.counters().send_ring_bytes, 0u);
    EXPECT_EQ(p.regions_b.live(), 0u);
  }
}

// A writer of 1-octet sends to a reader that waits: what the reader's end holds stays about
// what was sent (each DATA frame joins the segment before it), not 41 times that.
TEST(StreamSession, OneOctetSendsToAWaitingReaderCostAboutWhatTheyCarry) {
  Pair p;
  auto [ida, idb] = connect(p);
  constexpr int kSends = 20000;
  const std::uint8_t one = 0x31;
  for (int i = 0; i < kSends; ++i) {
    ASSERT_EQ(*p.a.send(ida, std::span(&one, 1)), 1u);
    if (i % 512 == 0) p.run();
  }
  p.run();
  EXPECT_EQ(p.b.readiness(idb).readable, true);
  const std::size_t bytes = p.b.stream_bytes(idb);
  EXPECT_LT(bytes, 2 * kSends + 4096) << "octets held for " << kSends << " octets unread";
  std::vector<std::uint8_t> buf(kSends);
  std::size_t got = 0;
  while (got < buf.size()) {
    auto r = p.b.recv(idb, std::span(buf).subspan(got));
    ASSERT_TRUE(r.has_value());
    got += *r;
  }
  EXPECT_EQ(std::count(buf.begin(), buf.end(), one), kSends);
}

// When the session ends nothing more comes from the peer and no Write is in flight: the
// streams the application let go of (one closed with its Writes not yet acknowledged) and the
// ones it never took (waiting for accept) go at once, with their rings; the ones it holds
// fail, and go when closed. Before, the first two kinds stayed, and kept their session.
TEST(StreamSession, AnEndedSessionKeepsOnlyTheStreamsTheApplicationHolds) {
  Pair p;
  auto [ida, idb] = connect(p);
  std::vector<std::uint8_t> buf(1 << 20);
  const auto warm = pattern(300 * 1024, 45);
  ASSERT_EQ(*p.a.send(ida, warm), warm.size());
  p.run();
  std::size_t n = 0;
  while (n < warm.size()) {
    auto r = p.b.recv(idb, buf);
    ASSERT_TRUE(r.has_value());
    n += *r;
    p.run();
  }
  const auto writes = p.a.counters().writes;
  ASSERT_EQ(*p.a.send(ida, pattern(100 * 1024, 46)), 100u * 1024);
  p.run();
  ASSERT_GT(p.a.counters().writes, writes);
  p.a.close(ida);  // its Writes unread by b: kept until acknowledged
  p.run();
  auto waiting = p.a.open(80);  // b never accepts it
  ASSERT_TRUE(waiting.has_value());
  p.run();
  ASSERT_EQ(p.a.stream_count(), 2u);
  ASSERT_EQ(p.b.stream_count(), 2u);
  p.a.on_session_end("the connection is gone");
  p.b.on_session_end("the connection is gone");
  EXPECT_EQ(p.a.stream_count(), 1u) << "only the one a's application holds (waiting)";
  EXPECT_EQ(p.b.stream_count(), 1u) << "only the one b's application holds (idb)";
  EXPECT_EQ(p.a.recv(*waiting, buf).error(), StreamErrc::kSessionFailed);
  EXPECT_TRUE(p.b.readiness(idb).error);
  p.a.close(*waiting);
  p.b.close(idb);
  EXPECT_EQ(p.a.stream_count(), 0u);
  EXPECT_EQ(p.b.stream_count(), 0u);
  EXPECT_EQ(p.regions_a.live(), 0u) << "the send ring a Write had been reading";
  EXPECT_EQ(p.regions_b.live(), 0u) << "the sink";
}

// recv() into no room answers 0 at once, as TCP's does, data or not.
TEST(StreamSession, ARecvOfNoOctetsAnswersAtOnce) {
  Pair p;
  auto [ida, idb] = connect(p);
  EXPECT_EQ(*p.b.recv(idb, {}), 0u) << "nothing sent yet";
  ASSERT_EQ(*p.a.send(ida, pattern(10, 33)), 10u);
  p.run();
  EXPECT_EQ(*p.b.recv(idb, {}), 0u);
  std::vector<std::uint8_t> buf(10);
  EXPECT_EQ(*p.b.recv(idb, buf), 10u) << "the zero-length recv took nothing";
}

TEST(StreamSession, AStalledReaderBlocksOnlyItsOwnStream) {
  Pair p;
  auto [stalled_a, stalled_b] = connect(p);
  auto [live_a, live_b] = connect(p, 81);
  (void)stalled_b;
  const auto chunk = pattern(64 * 1024, 9);
  std::size_t pushed = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = p.a.send(stalled_a, chunk);
    p.run();
    if (!r) {
      EXPECT_EQ(r.error(), StreamErrc::kWouldBlock);
      break;
    }
    pushed += *r;
  }
  EXPECT_FALSE(p.a.readiness(stalled_a).writable);
  EXPECT_LE(p.b.counters().receive_held, p.config.stream_window) << "bounded by the window";
  EXPECT_GE(pushed, p.config.stream_window);
  std::mt19937 rng(10);
  const auto data = pattern(1024 * 1024, 11);
  EXPECT_EQ(transfer(p, p.a, live_a, p.b, live_b, data, rng), data);
  EXPECT_EQ(transfer(p, p.b, live_b, p.a, live_a, data, rng), data);
}

TEST(StreamSession, OpeningToAPortNobodyListensOnIsRefused) {
  Pair p;
  auto id = p.a.open(9);
  ASSERT_TRUE(id.has_value());
  p.run();
  EXPECT_TRUE(p.a.readiness(*id).error);
  EXPECT_EQ(p.a.stream_error(*id), StreamErrc::kRefused);
  EXPECT_EQ(p.b.counters().refused, 1u);
}

// The stream's SYN flood: opens nobody accepts are bounded per port (each may hold at most
// kInitialWindow octets), and one over the backlog is refused, not kept.
TEST(StreamSession, OpensOverTheAcceptBacklogAreRefused) {
  Pair p;
  p.config.accept_backlog = 3;
  StreamSession a(p.config, Side::kConnector, p.regions_a);
  StreamSession b(p.config, Side::kAcceptor, p.regions_b);
  b.listen(80);
  std::vector<StreamId> ids;
  std::vector<SessionOutput> out;
  auto carry = [&](StreamSession& from, StreamSession& to) {
    from.take_outputs(out);
    for (const auto& o : out) {
      if (o.type == SessionOutput::Type::kMessage) to.on_message(o.message);
    }
  };
  for (int i = 0; i < 4; ++i) {
    ids.push_back(*a.open(80));
    carry(a, b);
    carry(b, a);
  }
  EXPECT_EQ(b.stream_count(), 3u);
  EXPECT_EQ(b.counters().refused, 1u);
  EXPECT_EQ(a.stream_error(ids[3]), StreamErrc::kRefused);
  EXPECT_FALSE(a.stream_error(ids[0]).has_value());
  ASSERT_TRUE(b.accept(80).has_value());  // room again: the next open waits
  ids.push_back(*a.open(80));
  carry(a, b);
  carry(b, a);
  EXPECT_FALSE(a.stream_error(ids[4]).has_value());
  EXPECT_EQ(b.counters().refused, 1u);
}

TEST(StreamSession, ClosingWithUnreadDataResetsThePeer) {
  Pair p;
  auto [ida, idb] = connect(p);
  const auto data = pattern(100, 12);
  ASSERT_TRUE(p.a.send(ida, data).has_value());
  p.run();
  p.b.close(idb);  // 100 octets unread
  p.run();
  std::vector<std::uint8_t> buf(10);
  EXPECT_EQ(p.a.recv(ida, buf).error(), StreamErrc::kReset);
  EXPECT_EQ(p.a.send(ida, data).error(), StreamErrc::kReset);
  EXPECT_EQ(p.b.counters().resets_sent, 1u);
}

TEST(StreamSession, AResetStreamsSinkIsFreedOnceThePeersAnswerSaysItWritesNoMore) {
  // b reads a large transfer through its sink, then aborts with octets unread: its sink may
  // still be written until a's RESET (the answer) comes, and is freed then, on both sides
  // of a reset either end starts, with no RESET answered twice.
  for (const bool reader_resets : {true, false}) {
    SCOPED_TRACE(reader_resets ? "the reader resets" : "the writer resets");
    Pair p;
    auto [ida, idb] = connect(p);
    std::mt19937 rng(31);
    const auto data = pattern(1024 * 1024, 31);
    ASSERT_EQ(transfer(p, p.a, ida, p.b, idb, data, rng), data);
    ASSERT_GT(p.b.counters().sink_bytes, 0u) << "the transfer went through a sink";
    ASSERT_TRUE(p.a.send(ida, pattern(300 * 1024, 32)).has_value());
    p.run();  // unread octets: a close resets
    if (reader_resets) {
      p.b.close(idb);
      EXPECT_EQ(p.regions_b.live(), 1u) << "the sink waits for the answer";
      p.run();
      EXPECT_EQ(p.a.stream_error(ida), StreamErrc::kReset);
      p.a.close(ida);
    } else {
      p.a.close(ida, /*abort=*/true);
      p.run();
      EXPECT_EQ(p.b.stream_error(idb), StreamErrc::kReset);
      p.b.close(idb);
    }
    p.run();
    EXPECT_EQ(p.a.counters().resets_sent + p.b.counters().resets_sent, 2u) << "one and its answer";
    EXPECT_EQ(p.a.counters().resets_received + p.b.counters().resets_received, 2u);
    EXPECT_EQ(p.regions_b.live(), 0u) << "b's sink is given back";
    // a's send ring: freed when a's own RESET was answered (its Writes had all arrived);
    // after b's RESET one of a's Writes may still be on its way: kept to the session's end.
    if (!reader_resets) {
      EXPECT_EQ(p.regions_a.live(), 0u);
    }
    EXPECT_EQ(p.a.stream_count() + p.b.stream_count(), 0u);
  }
}

TEST(StreamSession, DataSentBeforeTheAcceptIsKept) {
  Pair p;
  p.b.listen(80);
  auto ida = p.a.open(80);
  const auto data = pattern(kInitialWindow, 13);
  ASSERT_EQ(*p.a.send(*ida, data), data.size());
  p.run();
  ASSERT_EQ(p.incoming_b.size(), 1u);
  auto idb = p.b.accept(80);
  ASSERT_TRUE(idb.has_value());
  p.run();
  std::vector<std::uint8_t> buf(2 * kInitialWindow);
  ASSERT_EQ(*p.b.recv(*idb, buf), data.size());
  EXPECT_TRUE(std::equal(data.begin(), data.end(), buf.begin()));
}

TEST(StreamSession, AnOpensFirstOctetsTravelInItsMessage) {
  Pair p;
  p.b.listen(80);
  const auto hello = pattern(100, 17);
  auto ida = p.a.open(80, hello);
  ASSERT_TRUE(ida.has_value());
  std::vector<SessionOutput> out;
  p.a.take_outputs(out);
  std::size_t messages = 0;
  for (const SessionOutput& o : out) {
    if (o.type != SessionOutput::Type::kMessage) continue;
    ++messages;
    p.b.on_message(o.message);
  }
  EXPECT_EQ(messages, 1u) << "the OPEN and its octets, one message";
  auto idb = p.b.accept(80);
  ASSERT_TRUE(idb.has_value());
  std::vector<std::uint8_t> buf(200);
  ASSERT_EQ(*p.b.recv(*idb, buf), hello.size());
  EXPECT_TRUE(std::equal(hello.begin(), hello.end(), buf.begin()));

  // First octets past the zero-copy threshold and the initial window wait in the send
  // buffer for the ACCEPT's window and a sink, in order; past the send buffer, no stream.
  const auto big = pattern(3 * kInitialWindow, 18);
  auto idc = p.a.open(80, big);
  ASSERT_TRUE(idc.has_value());
  p.run();
  auto idd = p.b.accept(80);
  ASSERT_TRUE(idd.has_value());
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> chunk(64 * 1024);
  for (int rounds = 0; got.size() < big.size(); ++rounds) {
    ASSERT_LT(rounds, 1000) << "the first octets stalled at " << got.size();
    p.run();
    auto n = p.b.recv(*idd, chunk);
    if (!n) {
      ASSERT_EQ(n.error(), StreamErrc::kWouldBlock);
      continue;
    }
    got.insert(got.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(*n));
  }
  EXPECT_EQ(got, big);
  const std::size_t streams = p.a.stream_count();
  EXPECT_EQ(p.a.open(80, std::vector<std::uint8_t>(p.config.send_buffer + 1)).error(),
            StreamErrc::kInvalid);
  EXPECT_EQ(p.a.stream_count(), streams);
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

// Opens with an octet each while the channel is full: each octet waits in a plain ring its
// size, not in a registered send buffer. One stream's ring grows as more comes, to the
// registered one once a chunk is large, its octets kept in order; then its Writes go.
TEST(StreamSession, SmallSendsWaitingForTheChannelTakeRingsTheirSize) {
  Pair p;
  p.b.listen(80);
  p.a.on_link_blocked();
  std::vector<StreamId> opened;
  for (int i = 0; i < 100; ++i) {
    const std::uint8_t octet = static_cast<std::uint8_t>(i);
    auto id = p.a.open(80, {&octet, 1});
    ASSERT_TRUE(id.has_value());
    opened.push_back(*id);
  }
  EXPECT_EQ(p.regions_a.live(), 0u) << "nothing registered for an octet";
  EXPECT_EQ(p.a.counters().send_ring_bytes, 100u * 256);
  const auto more = pattern(kInitialWindow / 2, 19);
  std::size_t given = 0;
  // One stream's ring, each send and the ring it leaves: 512 octets, then 4 KiB, then (past
  // the zero-copy threshold) the registered send buffer.
  const std::pair<std::size_t, std::size_t> steps[] = {
      {300, 512}, {3000, 4096}, {20000, p.config.send_buffer}};
  for (const auto& [n, ring] : steps) {
    auto sent = p.a.send(opened.back(), std::span(more).subspan(given, n));
    ASSERT_TRUE(sent.has_value());
    ASSERT_EQ(*sent, n);
    given += n;
    EXPECT_EQ(p.a.counters().send_ring_bytes, 99u * 256 + ring);
  }
  EXPECT_EQ(p.regions_a.live(), 1u) << "the large chunk's ring, registered";
  p.a.on_link_ready();
  p.run();
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> buf(64 * 1024);
  for (int i = 0; i < 100; ++i) {
    auto id = p.b.accept(80);
    ASSERT_TRUE(id.has_value());
    auto n = p.b.recv(*id, buf);
    ASSERT_TRUE(n.has_value());
    if (i < 99) {
      ASSERT_EQ(*n, 1u);
      EXPECT_EQ(buf[0], i);
      continue;
    }
    got.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
    std::mt19937 rng(20);
    const auto rest = pattern(300 * 1024, 21);
    auto back = transfer(p, p.a, opened.back(), p.b, *id, rest, rng);
    std::vector<std::uint8_t> want{99};
    want.insert(want.end(), more.begin(), more.begin() + static_cast<std::ptrdiff_t>(given));
    EXPECT_EQ(got, want);
    EXPECT_EQ(back, rest);
  }
  EXPECT_GT(p.a.counters().bytes_placed, 0u) << "the registered ring's Writes";
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

// A plain ring that wrapped (octets copied out from its middle, more put after its end)
// grows with its octets in order; the rings are given back when the stream ends.
TEST(StreamSession, APlainRingThatWrappedGrowsWithItsOctetsInOrder) {
  Pair p;
  auto [ida, idb] = connect(p);
  const auto data = pattern(500, 22);
  p.a.on_link_blocked();
  ASSERT_EQ(*p.a.send(ida, std::span(data).first(200)), 200u);  // a ring of 256
  p.a.on_link_ready();
  p.run();  // the 200 go: the ring is empty, its next octet at 200
  p.a.on_link_blocked();
  ASSERT_EQ(*p.a.send(ida, std::span(data).subspan(200, 200)), 200u);  // 200..255, 0..143
  ASSERT_EQ(p.a.counters().send_ring_bytes, 256u);
  ASSERT_EQ(*p.a.send(ida, std::span(data).subspan(400)), 100u);  // 300 held: 512
  EXPECT_EQ(p.a.counters().send_ring_bytes, 512u);
  p.a.on_link_ready();
  p.run();
  std::vector<std::uint8_t> got(600);
  auto n = p.b.recv(idb, got);
  ASSERT_TRUE(n.has_value());
  got.resize(*n);
  EXPECT_EQ(got, data);
  EXPECT_EQ(p.regions_a.live(), 0u);
  p.a.close(ida);
  p.b.close(idb);
  p.run();
  EXPECT_EQ(p.a.stream_count(), 0u);
  EXPECT_EQ(p.a.counters().send_ring_bytes, 0u);
  EXPECT_TRUE(p.failures_a.empty() && p.failures_b.empty());
}

TEST(StreamSession, ALyingPeerFailsTheSessionNotTheProcess) {
  auto lie = [](std::vector<std::uint8_t> message) {
    FakeRegions regions;
    StreamSession s(SessionConfig{}, Side::kAcceptor, regions);
    s.listen(80);
    s.on_message(message);
    std::vector<SessionOutput> out;
    s.take_outputs(out);
    for (const auto& o : out) {
      if (o.type == SessionOutput::Type::kFailed) return o.detail;
    }
    return std::string();
  };
  std::vector<std::uint8_t> m;
  Frame f;
  f.type = FrameType::kData;
  f.stream = 1;
  const auto big = pattern(100, 1);
  f.data = big;
  append_frame(m, f);
  EXPECT_NE(lie(m), "") << "data for a stream never opened";
  m.clear();
  Frame open;
  open.type = FrameType::kOpen;
  open.stream = 1;
  open.port = 80;
  open.window = kInitialWindow;
  append_frame(m, open);
  const auto too_much = pattern(kInitialWindow + 1, 2);
  f.data = too_much;
  append_frame(m, f);
  EXPECT_NE(lie(m).find("window"), std::string::npos);
  m.clear();
  open.stream = 2;  // the acceptor's parity
  append_frame(m, open);
  EXPECT_NE(lie(m), "");
  EXPECT_NE(lie({1, 2, 3}).find("malformed"), std::string::npos);
}

TEST(StreamSession, TenThousandIdleStreamsHoldNoBuffers) {
  Pair p;
  p.config.accept_backlog = 20000;
  StreamSession a(p.config, Side::kConnector, p.regions_a);
  StreamSession b(p.config, Side::kAcceptor, p.regions_b);
  b.listen(80);
  std::vector<StreamId> ids;
  std::vector<SessionOutput> out;
  for (int i = 0; i < 10000; ++i) {
    ids.push_back(*a.open(80));
    a.take_outputs(out);
    for (const auto& o : out) {
      if (o.type == SessionOutput::Type::kMessage) b.on_message(o.message);
    }
  }
  std::size_t most = 0;
  for (int i = 0; i < 10000; ++i) {
    auto id = b.accept(80);
    ASSERT_TRUE(id.has_value());
    most = std::max(most, b.stream_bytes(*id));
  }
  EXPECT_EQ(b.stream_count(), 10000u);
  EXPECT_LT(most, 1024u) << "an idle stream holds no receive buffer";
  EXPECT_EQ(b.counters().sink_bytes + b.counters().send_ring_bytes, 0u);
  // A small exchange on every stream, read whole: still no buffer held, no ring made.
  const std::uint8_t hello[16] = {'h', 'e', 'l', 'l', 'o'};
  for (StreamId id : ids) ASSERT_EQ(*a.send(id, hello), sizeof hello);
  a.take_outputs(out);
  for (const auto& o : out) {
    if (o.type == SessionOutput::Type::kMessage) b.on_message(o.message);
  }
  std::uint8_t buf[64];
  most = 0;
  for (StreamId id : ids) {
    ASSERT_EQ(*b.recv(id, buf), sizeof hello);
    most = std::max(most, b.stream_bytes(id));
  }
  EXPECT_LT(most, 1024u);
  EXPECT_EQ(a.counters().send_ring_bytes, 0u) << "small sends need no send ring";
  EXPECT_EQ(b.counters().receive_held, 0u);
  EXPECT_EQ(p.regions_b.live(), 0u);
  RecordProperty("idle_stream_bytes", static_cast<int>(most));
}

}  // namespace
}  // namespace rdma_interop::stream
