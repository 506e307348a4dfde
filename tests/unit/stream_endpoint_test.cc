// Stream endpoints over the tcp provider on real loopback sockets: one session carries many
// streams, data crosses the copy/Write boundary in order, a stalled reader holds up only its
// own stream, and a stream's descriptor polls like a socket's.
#include "core/stream/stream_endpoint.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>

#include <future>
#include <random>
#include <thread>
#include <vector>

#include "core/runtime/socket_wait.h"
#include "core/transport/provider_registry.h"
#include "core/transport/provider_uri.h"
#include "core/wire/iwarp_constants.h"
#include "eventually.h"

namespace rdma_interop::stream {
namespace {

using namespace std::chrono_literals;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& c : v) c = static_cast<std::uint8_t>(rng());
  return v;
}

std::unique_ptr<transport::Provider> tcp() {
  return transport::find_provider("tcp")->open();
}

struct Lab {
  StreamEndpoint server{tcp(), {}};
  StreamEndpoint client;
  SessionId session = 0;
  std::string served;  // the server's URI
  explicit Lab(const StreamEndpointConfig& client_config = {}) : client(tcp(), client_config) {
    auto where = server.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
    EXPECT_TRUE(where.has_value()) << (where ? "" : where.error());
    served = where->to_string();
    server.listen(80);
    server.listen(81);
    auto s = client.connect(*where);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error());
    session = *s;
  }
  // Up to 5 s for the server's session to have `n` streams (the OPENs have arrived).
  void wait_for_server_streams(std::uint32_t n) {
    const auto until = std::chrono::steady_clock::now() + 5s;
    auto has = [&] {
      const auto ids = server.sessions();
      if (ids.empty()) return false;
      const auto c = server.counters(ids.front());
      return c && c->streams >= n;
    };
    while (std::chrono::steady_clock::now() < until && !has()) {
      std::this_thread::sleep_for(5ms);
    }
  }
  std::pair<StreamRef, StreamRef> stream(std::uint16_t port = 80) {
    auto c = client.open(session, port);
    EXPECT_TRUE(c.has_value());
    auto s = server.accept(port, 5s);
    EXPECT_TRUE(s.has_value());
    return {*c, *s};
  }
};

void send_all(StreamEndpoint& ep, StreamRef s, const std::vector<std::uint8_t>& data,
              std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> size(1, 200 * 1024);
  std::size_t at = 0;
  // As a socket's: the buffer is the caller's again once send() returns (a Write from it,
  // StreamSession::borrow, was posted inline), so it is scribbled on at once.
  std::vector<std::uint8_t> buffer;
  while (at < data.size()) {
    const std::size_t n = std::min(size(rng), data.size() - at);
    buffer.assign(data.begin() + static_cast<std::ptrdiff_t>(at),
                  data.begin() + static_cast<std::ptrdiff_t>(at + n));
    auto r = ep.send(s, buffer, {.timeout = 10s});
    ASSERT_TRUE(r.has_value()) << errc_name(r.error());
    std::fill(buffer.begin(), buffer.end(), 0xEE);
    at += *r;
  }
}

std::vector<std::uint8_t> recv_all(StreamEndpoint& ep, StreamRef s, std::size_t want) {
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> buf(100 * 1024);
  while (got.size() < want) {
    auto r = ep.recv(s, buf, {.timeout = 10s});
    if (!r || *r == 0) break;
    got.insert(got.end(), buf.begin(), buf.begin() + *r);
  }
  return got;
}

TEST(StreamEndpoint, RandomSizesArriveInOrderOverCopyAndWrite) {
  Lab lab;
  auto [c, s] = lab.stream();
  const auto data = pattern(8 * 1024 * 1024, 1);
  std::thread tx([&] { send_all(lab.client, c, data, 2); });
  const auto got = recv_all(lab.server, s, data.size());
  tx.join();
  EXPECT_EQ(got, data);
  const auto counters = *lab.client.counters(lab.session);
  EXPECT_GT(counters.bytes_placed, 0u);
  EXPECT_GT(counters.bytes_borrowed, 0u) << "no Write straight from the sender's buffer";
  EXPECT_GT(counters.bytes_copied, 0u);
  EXPECT_GT(lab.client.session_stats(lab.session)->writes_sent, 0u);
}

// Octets the client copied into its send ring (not Written from the application's buffer).
std::uint64_t copied(const SessionCounters& c) {
  return c.bytes_copied + c.bytes_placed - c.bytes_borrowed;
}

// A blocking send of large chunks waits for a reader that reads, rather than copy what the
// reader's window does not take yet into the send buffer: once the reader's sink is known,
// every octet goes by Writes from the sender's buffer. The same with reader_wait 0 (copy at
// once, as before) shows the reader here lags enough for the wait to matter.
TEST(StreamEndpoint, ABlockingSenderOfLargeChunksWaitsForTheReaderRatherThanCopy) {
  for (const Millis wait : {Millis(0), Millis(10000)}) {
    SCOPED_TRACE("reader_wait " + std::to_string(wait.count()) + " ms");
    StreamEndpointConfig config;
    config.reader_wait = wait;
    Lab lab(config);
    auto [c, s] = lab.stream();
    constexpr std::size_t kChunk = 64 * 1024;
    // The first large chunk asks for the reader's sink; once it is read, the sink is known.
    const auto first = pattern(kChunk, 20);
    ASSERT_EQ(*lab.client.send(c, first, {.timeout = 5s}), kChunk);
    ASSERT_EQ(recv_all(lab.server, s, kChunk), first);
    const SessionCounters before = *lab.client.counters(lab.session);
    const auto data = pattern(8 * 1024 * 1024, 21);
    std::thread tx([&] {
      std::vector<std::uint8_t> buffer(kChunk);
      for (std::size_t at = 0; at < data.size();) {
        std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(at), kChunk, buffer.begin());
        auto r = lab.client.send(c, buffer, {.timeout = 10s});
        ASSERT_TRUE(r.has_value()) << errc_name(r.error());
        ASSERT_EQ(*r, kChunk) << "a blocking send that waited answered part of its chunk";
        std::fill(buffer.begin(), buffer.end(), 0xEE);
        at += *r;
      }
    });
    std::vector<std::uint8_t> got;
    std::vector<std::uint8_t> buf(kChunk);
    while (got.size() < data.size()) {  // a reader slower than the writer
      auto r = lab.server.recv(s, buf, {.timeout = 10s});
      if (!r || *r == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + *r);
      std::this_thread::sleep_for(200us);
    }
    tx.join();
    EXPECT_EQ(got, data);
    const std::uint64_t now_copied = copied(*lab.client.counters(lab.session)) - copied(before);
    std::printf("reader_wait %lld ms: %llu of %zu octets copied\n",
                static_cast<long long>(wait.count()), static_cast<unsigned long long>(now_copied),
                data.size());
    // Not exactly none: a Write the channel could not post at once (another thread posting,
    // kNotNow) is copied, and the sends after it follow it through the ring for a while.
    if (wait == Millis(0)) {
      EXPECT_GT(now_copied, data.size() / 4) << "the reader kept up: this shows nothing";
    } else {
      EXPECT_LT(now_copied, data.size() / 16);
    }
  }
}

// A blocking recv looks for its answer before it sleeps (poll_first): round trips whose
// answer comes within that cost the waiting thread no sleep, where without it each costs one
// (a voluntary context switch, counted by the kernel for this thread alone). The echo answers
// a millisecond late, so the answer is never there before the wait starts. A wait without a
// timeout (kForever, what a blocking Python socket asks) looks as long.
TEST(StreamEndpoint, ABlockingReceiveLooksForItsAnswerBeforeItSleeps) {
  constexpr int kRounds = 100;
  struct Case {
    std::chrono::microseconds poll;
    Millis timeout;
  };
  for (const Case k : {Case{std::chrono::microseconds(0), Millis(5000)},
                       Case{std::chrono::microseconds(200'000), Millis(5000)},
                       Case{std::chrono::microseconds(200'000), kForever}}) {
    SCOPED_TRACE("poll_first " + std::to_string(k.poll.count()) + " us, timeout " +
                 std::to_string(k.timeout.count()) + " ms");
    StreamEndpointConfig config;
    config.poll_first = k.poll;
    Lab lab(config);
    auto [c, s] = lab.stream();
    std::thread echo([&, s = s] {
      std::uint8_t b[64];
      for (int i = 0; i < kRounds; ++i) {
        if (recv_all(lab.server, s, sizeof b).size() != sizeof b) return;
        std::this_thread::sleep_for(1ms);
        std::fill(std::begin(b), std::end(b), static_cast<std::uint8_t>(i));
        if (!lab.server.send(s, b, {.timeout = 5s})) return;
      }
    });
    const auto request = pattern(64, 30);
    std::vector<std::uint8_t> answer(64);
    rusage before{};
    ::getrusage(RUSAGE_THREAD, &before);
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_EQ(*lab.client.send(c, request, {.timeout = 5s}), request.size());
      std::size_t got = 0;
      while (got < answer.size()) {
        auto r = lab.client.recv(c, std::span(answer).subspan(got), {.timeout = k.timeout});
        ASSERT_TRUE(r.has_value() && *r > 0);
        got += *r;
      }
      ASSERT_EQ(answer[0], static_cast<std::uint8_t>(i));
    }
    rusage after{};
    ::getrusage(RUSAGE_THREAD, &after);
    echo.join();
    const double sleeps = static_cast<double>(after.ru_nvcsw - before.ru_nvcsw) / kRounds;
    std::printf("poll_first %lld us, timeout %lld ms: %.2f sleeps a round trip\n",
                static_cast<long long>(k.poll.count()), static_cast<long long>(k.timeout.count()),
                sleeps);
    if (k.poll.count() == 0) {
      EXPECT_GT(sleeps, 0.8) << "the round trips never slept: this shows nothing";
    } else {
      EXPECT_LT(sleeps, 0.2);
    }
  }
}

// An empty send asks the stream as any send does: after shutdown_write it is EPIPE's error,
// on a closed stream kNoStream, as TCP's send(2) of 0 octets answers.
TEST(StreamEndpoint, AnEmptySendStillAnswersTheStreamsError) {
  Lab lab;
  auto [c, s] = lab.stream();
  (void)s;
  EXPECT_EQ(*lab.client.send(c, {}, {.timeout = 1s}), 0u);
  ASSERT_TRUE(lab.client.shutdown_write(c));
  auto r = lab.client.send(c, {}, {.timeout = 1s});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), StreamErrc::kBrokenPipe);
  lab.client.close(c);
  r = lab.client.send(c, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), StreamErrc::kNoStream);
}

TEST(StreamEndpoint, WithoutIoUringReceivingThreadsPollAndLoseNothing) {
  // A kernel or container without io_uring: the receiving threads wait in poll(2) and read
  // after it (runtime/socket_wait.h), with the same order, wakes and close.
  runtime::SocketWait::set_enabled(false);
  {
    Lab lab;
    auto [c, s] = lab.stream();
    const auto data = pattern(2 * 1024 * 1024, 11);
    std::thread tx([&] { send_all(lab.client, c, data, 12); });
    EXPECT_EQ(recv_all(lab.server, s, data.size()), data);
    tx.join();
    std::thread blocked([&] {
      std::vector<std::uint8_t> buf(64);
      auto r = lab.server.recv(s, buf, {.timeout = kForever});
      EXPECT_FALSE(r.has_value()) << "the endpoint closed under it";
    });
    std::this_thread::sleep_for(20ms);
    lab.server.close();
    blocked.join();
  }
  runtime::SocketWait::set_enabled(true);
}

TEST(StreamEndpoint, ManyStreamsShareOneSession) {
  Lab lab;
  std::vector<std::pair<StreamRef, StreamRef>> pairs;
  for (int i = 0; i < 200; ++i) pairs.push_back(lab.stream());
  EXPECT_EQ(lab.client.sessions().size(), 1u);
  EXPECT_EQ(lab.server.sessions().size(), 1u);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string msg = "stream " + std::to_string(i);
    ASSERT_TRUE(lab.client.send(pairs[i].first, {reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size()}, {.timeout = 5s}));
  }
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    std::vector<std::uint8_t> buf(64);
    auto r = lab.server.recv(pairs[i].second, buf, {.timeout = 5s});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(std::string(buf.begin(), buf.begin() + *r), "stream " + std::to_string(i));
  }
}

TEST(StreamEndpoint, AStalledReaderDoesNotBlockTheOtherStreams) {
  Lab lab;
  auto [stalled_c, stalled_s] = lab.stream(80);
  auto [live_c, live_s] = lab.stream(81);
  (void)stalled_s;
  const auto chunk = pattern(64 * 1024, 3);
  for (;;) {  // fill the stalled stream until it would block
    auto r = lab.client.send(stalled_c, chunk, {.timeout = 200ms});
    if (!r) {
      ASSERT_EQ(r.error(), StreamErrc::kWouldBlock);
      break;
    }
  }
  const auto data = pattern(4 * 1024 * 1024, 4);
  std::thread tx([&] { send_all(lab.client, live_c, data, 5); });
  EXPECT_EQ(recv_all(lab.server, live_s, data.size()), data);
  tx.join();
  EXPECT_FALSE(lab.client.readiness(stalled_c).writable);
}

TEST(StreamEndpoint, ReadersBlockedOnStreamsOfOneSessionAreEachWokenByTheirOwnData) {
  // One blocked reader per session receives on its connection itself, the others wait for
  // it (stream_endpoint.h), and a thread that processes messages may be processing another
  // session's (the server's sessions share one completion queue): whoever takes a message,
  // the reader it is for must wake, whatever order the data comes in, and a blocked reader
  // must not keep close() waiting.
  Lab lab;
  StreamEndpoint second{tcp(), {}};  // a second session to the same server
  const SessionId second_session =
      *second.connect(*transport::parse_provider_uri(lab.served));
  constexpr int kReaders = 6;
  std::vector<std::pair<StreamRef, StreamRef>> pairs;
  std::vector<StreamEndpoint*> writers;
  for (int i = 0; i < kReaders; ++i) {
    if (i % 2 == 0) {
      pairs.push_back(lab.stream());
      writers.push_back(&lab.client);
    } else {
      auto c = second.open(second_session, 80);
      ASSERT_TRUE(c.has_value());
      auto a = lab.server.accept(80, 5s);
      ASSERT_TRUE(a.has_value());
      pairs.emplace_back(*c, *a);
      writers.push_back(&second);
    }
  }
  ASSERT_EQ(lab.server.sessions().size(), 2u);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> got(kReaders);
    std::vector<std::thread> readers;
    for (int i = 0; i < kReaders; ++i) {
      readers.emplace_back([&, i] {
        std::vector<std::uint8_t> buf(64);
        auto r = lab.server.recv(pairs[i].second, buf, {.timeout = 10s});
        if (r) got[i].assign(buf.begin(), buf.begin() + *r);
        if (!r) got[i] = errc_name(r.error());
      });
    }
    std::this_thread::sleep_for(2ms);  // mostly: the readers are blocked before data comes
    for (int k = 0; k < kReaders; ++k) {
      const int i = (k * 5 + round) % kReaders;  // every stream, in another order each round
      const std::string msg = "r" + std::to_string(round) + "s" + std::to_string(i);
      ASSERT_TRUE(writers[i]->send(pairs[i].first,
                                  {reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size()},
                                  {.timeout = 5s}));
    }
    for (auto& t : readers) t.join();
    for (int i = 0; i < kReaders; ++i) {
      EXPECT_EQ(got[i], "r" + std::to_string(round) + "s" + std::to_string(i));
    }
  }
  std::thread blocked([&] {
    std::vector<std::uint8_t> buf(64);
    auto r = lab.server.recv(pairs[0].second, buf, {.timeout = kForever});
    EXPECT_FALSE(r.has_value()) << "the endpoint closed under it";
  });
  std::this_thread::sleep_for(20ms);
  const auto t0 = std::chrono::steady_clock::now();
  lab.server.close();
  blocked.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(StreamEndpoint, AnAcceptWaitingOnTheOnlySessionTakesEachOpenAsItComes) {
  // accept() receives on the one session's connection while it waits (stream_endpoint.cc),
  // beside a reader blocked on another stream of it: each open must reach it, whichever of
  // them reads the OPEN, and close() must end the wait.
  Lab lab;
  auto [c0, s0] = lab.stream();
  std::atomic<bool> reader_done{false};
  std::thread reader([&, s0 = s0] {
    std::vector<std::uint8_t> buf(64);
    for (;;) {
      auto r = lab.server.recv(s0, buf, {.timeout = 10s});
      if (!r || *r == 0) break;
    }
    reader_done = true;
  });
  constexpr int kOpens = 50;
  std::atomic<int> accepted{0};
  std::thread acceptor([&] {
    for (int i = 0; i < kOpens; ++i) {
      if (!lab.server.accept(80, 10s)) return;
      accepted.fetch_add(1);
    }
  });
  for (int i = 0; i < kOpens; ++i) {
    ASSERT_TRUE(lab.client.open(lab.session, 80).has_value());
    if (i % 5 == 0) {
      const std::uint8_t b = 'x';  // the reader's stream is busy too
      ASSERT_TRUE(lab.client.send(c0, {&b, 1}, {.timeout = 5s}));
    }
    std::this_thread::sleep_for(1ms);
  }
  acceptor.join();
  EXPECT_EQ(accepted.load(), kOpens);
  std::thread waiting([&] {
    EXPECT_EQ(lab.server.accept(80, kForever).error(), StreamErrc::kSessionFailed);
  });
  std::this_thread::sleep_for(20ms);
  lab.server.close();
  waiting.join();
  reader.join();
  EXPECT_TRUE(reader_done.load());
}

TEST(StreamEndpoint, AnAcceptReceivingOnTheOnlySessionTakesAStreamOfASessionThatCameLater) {
  // accept() receives on the server's one session; a second client connects and opens:
  // its stream must end that receive, not wait for the first session's traffic or the
  // accept's deadline (30 s here).
  Lab lab;
  std::promise<Expected<StreamRef, StreamErrc>> got;
  std::thread acceptor([&] { got.set_value(lab.server.accept(80, 30s)); });
  std::this_thread::sleep_for(50ms);  // mostly: the accept is receiving by now
  StreamEndpoint second{tcp(), {}};
  const auto t0 = std::chrono::steady_clock::now();
  const auto session = second.connect(*transport::parse_provider_uri(lab.served));
  ASSERT_TRUE(session.has_value());
  const auto opened = second.open(*session, 80);
  ASSERT_TRUE(opened.has_value());
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready) << "the accept did not wake";
  const auto accepted = future.get();
  acceptor.join();
  ASSERT_TRUE(accepted.has_value());
  EXPECT_NE(accepted->session, lab.session) << "the second session's stream";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(StreamEndpoint, TheDescriptorPollsReadableWhenDataComes) {
  Lab lab;
  auto [c, s] = lab.stream();
  pollfd p{lab.server.fd(s), POLLIN, 0};
  ASSERT_GE(p.fd, 0);
  EXPECT_EQ(::poll(&p, 1, 50), 0) << "nothing sent yet";
  const std::uint8_t hi[2] = {'h', 'i'};
  ASSERT_TRUE(lab.client.send(c, hi, {.timeout = 1s}));
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  std::uint8_t buf[8];
  ASSERT_EQ(*lab.server.recv(s, buf), 2u);
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 50), 0) << "read empty: quiet again";
  // Urgent data wakes it too, and the end of stream.
  const std::uint8_t bang = '!';
  ASSERT_TRUE(lab.client.send(c, {&bang, 1}, {.urgent = true, .timeout = 1s}));
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  ASSERT_EQ(*lab.server.recv(s, buf, {.urgent = true}), 1u);
  EXPECT_EQ(buf[0], '!');
  ASSERT_TRUE(lab.client.shutdown_write(c));
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  EXPECT_EQ(*lab.server.recv(s, buf), 0u);
}

// POLLOUT as a socket's: writable while send() would take an octet, not once the stream's
// send buffer is full (the reader stopped), and writable again when the reader reads. An
// eventfd is always writable: a writer polling for POLLOUT spun.
TEST(StreamEndpoint, TheDescriptorPollsWritableOnlyWhileSendWouldTakeOctets) {
  Lab lab;
  auto [c, s] = lab.stream();
  pollfd p{lab.client.fd(c), POLLOUT, 0};
  ASSERT_GE(p.fd, 0);
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "an idle stream takes octets";
  EXPECT_EQ(p.revents & POLLIN, 0) << "and has none to read";
  const auto chunk = pattern(64 * 1024, 44);
  // Sent into until send waits and goes on waiting for 300 ms: what the reader's window takes
  // leaves the send buffer as the channel carries it (full a moment, then not: the first
  // version of this test failed once so in CI), so the buffer stays full only once the window
  // is full too, the reader not reading.
  std::size_t sent = 0;
  for (int quiet = 0, tries = 0; quiet < 3 && tries < 1000; ++tries) {
    auto r = lab.client.send(c, chunk);
    if (r) {
      sent += *r;
      quiet = 0;
      continue;
    }
    ASSERT_EQ(r.error(), StreamErrc::kWouldBlock);
    ++quiet;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_GT(sent, 0u);
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 100), 0) << "send would wait: not writable (" << sent << " sent)";
  std::vector<std::uint8_t> buf(256 * 1024);
  std::size_t got = 0;
  while (got < sent) {
    auto r = lab.server.recv(s, buf, {.timeout = 5s});
    ASSERT_TRUE(r.has_value());
    got += *r;
  }
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "all read: writable again";
  EXPECT_TRUE(lab.client.send(c, chunk).has_value());
  // After shutdown_write a send fails at once (EPIPE): writable, as TCP's POLLOUT then is.
  ASSERT_TRUE(lab.client.shutdown_write(c).has_value());
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  EXPECT_EQ(lab.client.send(c, chunk).error(), StreamErrc::kBrokenPipe);
  // POLLIN still means what it did: the server's answer.
  pollfd in{lab.client.fd(c), POLLIN, 0};
  EXPECT_EQ(::poll(&in, 1, 50), 0);
  const std::uint8_t ok[2] = {'o', 'k'};
  ASSERT_TRUE(lab.server.send(s, ok, {.timeout = 1s}));
  EXPECT_EQ(::poll(&in, 1, 5000), 1);
}

TEST(StreamEndpoint, TheAcceptDescriptorGoesQuietOnceTheLastWaitingStreamIsTaken) {
  Lab lab;
  pollfd p{lab.server.accept_fd(80), POLLIN, 0};
  ASSERT_GE(p.fd, 0);
  EXPECT_EQ(::poll(&p, 1, 50), 0) << "nobody opened yet";
  ASSERT_TRUE(lab.client.open(lab.session, 80).has_value());
  ASSERT_TRUE(lab.client.open(lab.session, 80).has_value());
  lab.wait_for_server_streams(2);  // both OPENs have arrived
  EXPECT_EQ(::poll(&p, 1, 0), 1);
  ASSERT_TRUE(lab.server.accept(80, 5s).has_value());
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "one more waits";
  ASSERT_TRUE(lab.server.accept(80, 5s).has_value());
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 50), 0) << "the last one was taken: poll would wake for nothing";
}

TEST(StreamEndpoint, AnAcceptDescriptorAskedForLateIsReadableForTheStreamsAlreadyWaiting) {
  Lab lab;  // the server listens on 80; nobody has asked for its accept descriptor
  ASSERT_TRUE(lab.client.open(lab.session, 80).has_value());
  lab.wait_for_server_streams(1);
  pollfd p{lab.server.accept_fd(80), POLLIN, 0};
  ASSERT_GE(p.fd, 0);
  EXPECT_EQ(lab.server.accept_fd(80), p.fd) << "one descriptor per port";
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "made after the stream came: readable at once";
  ASSERT_TRUE(lab.server.accept(80, 5s).has_value());
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 50), 0);
  ASSERT_TRUE(lab.client.open(lab.session, 80).has_value());
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "and set by the next one";
  EXPECT_EQ(lab.server.accept_fd(82), -1) << "not listening";
}

TEST(StreamEndpoint, OpeningToAClosedPortIsRefused) {
  Lab lab;
  auto c = lab.client.open(lab.session, 9);
  ASSERT_TRUE(c.has_value());
  std::uint8_t buf[4];
  auto r = lab.client.recv(*c, buf, {.timeout = 5s});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), StreamErrc::kRefused);
}

// A port that stops listening refuses what comes after, over the session already up (a
// closed TCP listener refuses connects), and resets what waited for accept().
TEST(StreamEndpoint, APortThatStopsListeningRefusesLaterOpensAndResetsTheWaiting) {
  Lab lab;
  auto waiting = lab.client.open(lab.session, 80, pattern(10, 42));
  ASSERT_TRUE(waiting.has_value());
  lab.wait_for_server_streams(1);
  ASSERT_GE(lab.server.accept_fd(80), 0);
  lab.server.stop_listening(80);
  EXPECT_EQ(lab.server.accept_fd(80), -1) << "its accept descriptor is gone";
  std::uint8_t buf[16];
  auto r = lab.client.recv(*waiting, buf, {.timeout = 5s});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), StreamErrc::kReset) << "the stream that waited for accept()";
  auto later = lab.client.open(lab.session, 80, pattern(10, 43));
  ASSERT_TRUE(later.has_value());
  r = lab.client.recv(*later, buf, {.timeout = 5s});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), StreamErrc::kRefused);
  EXPECT_FALSE(lab.server.accept(80, 0ms).has_value());
  auto other = lab.client.open(lab.session, 81);
  ASSERT_TRUE(other.has_value()) << "port 81 still listens";
  EXPECT_TRUE(lab.server.accept(81, 5000ms).has_value());
}

// Each listen() is undone by one stop_listening(): two listeners on one port (two addresses
// of a node) do not end each other. The last one's stop wakes an accept() waiting there.
TEST(StreamEndpoint, APortListenedOnTwiceStopsWithItsLastListenerAndWakesItsAccept) {
  Lab lab;
  lab.server.listen(80);  // Lab listened once already
  lab.server.stop_listening(80);
  auto c = lab.client.open(lab.session, 80);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(lab.server.accept(80, 5000ms).has_value()) << "one listener is left";
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    lab.server.stop_listening(80);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto a = lab.server.accept(80, kForever);
  stopper.join();
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error(), StreamErrc::kInvalid);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A session whose connection ended gives its place back: a server of max_sessions 2 takes a
// third and a fourth client after the first two went away, and a client whose server
// restarted makes a new session on its next connect instead of failing on the old one.
TEST(StreamEndpoint, AnEndedSessionFreesItsPlaceAndIsNotReused) {
  StreamEndpointConfig two;
  two.max_sessions = 2;
  StreamEndpoint server{tcp(), two};
  auto where = server.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
  ASSERT_TRUE(where.has_value()) << where.error();
  server.listen(80);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    {
      StreamEndpoint client{tcp(), {}};
      auto sid = client.connect(*where);
      ASSERT_TRUE(sid.has_value()) << sid.error();
      auto c = client.open(*sid, 80, pattern(10, 40));
      ASSERT_TRUE(c.has_value());
      auto a = server.accept(80, 5000ms);
      ASSERT_TRUE(a.has_value()) << errc_name(a.error());
      std::vector<std::uint8_t> buf(10);
      EXPECT_EQ(*server.recv(*a, buf, {.timeout = 5000ms}), 10u);
      server.close(*a);
      client.close(*c);
    }  // the client endpoint closes, and its session with it
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!server.sessions().empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(server.sessions().empty()) << "the ended session is still counted";
  }

  // The client's side: its server goes away and comes back on the same port.
  StreamEndpoint client{tcp(), {}};
  auto first = client.connect(*where);
  ASSERT_TRUE(first.has_value()) << first.error();
  server.close();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!client.sessions().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(client.sessions().empty()) << "a session whose server closed is offered for reuse";
  StreamEndpoint again{tcp(), {}};
  ASSERT_TRUE(again.serve(*where).has_value()) << "the port is free again";
  again.listen(80);
  auto second = client.connect(*where);
  ASSERT_TRUE(second.has_value()) << second.error();
  EXPECT_NE(*second, *first);
  auto c = client.open(*second, 80, pattern(5, 41));
  ASSERT_TRUE(c.has_value()) << errc_name(c.error());
  auto a = again.accept(80, 5000ms);
  ASSERT_TRUE(a.has_value()) << errc_name(a.error());
}

TEST(StreamEndpoint, APeerThatBreaksTheStreamProtocolGetsATerminate) {
  StreamEndpoint server{tcp(), {}};
  auto where = server.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
  ASSERT_TRUE(where.has_value());
  // A rogue that speaks the credit channel but not the stream frames.
  messaging::MessageEndpoint rogue({});
  auto provider = tcp();
  auto peer = rogue.connect(*provider, *where, {}, "server");
  ASSERT_TRUE(peer.has_value());
  const std::uint8_t garbage[5] = {0x42, 0, 0, 0, 1};
  ASSERT_EQ(rogue.send(*peer, garbage), messaging::SendStatus::kOk);
  std::optional<messaging::PeerStats> stats;
  ASSERT_TRUE(test_util::eventually([&] {
    stats = rogue.stats(*peer);
    return stats && stats->terminate_received;
  })) << "no Terminate came back";
  const wire::TerminateCause want{wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                  wire::kRdmapCodeUnspecified};
  EXPECT_EQ(stats->terminate_received->cause, want);
  EXPECT_EQ(stats->state, messaging::PeerState::kFailed);
  rogue.close();
}

// The descriptor is made when first asked for: data that came before is seen at once, and
// from then on it follows the stream as if it had always been there.
TEST(StreamEndpoint, ADescriptorAskedForLateIsReadableForWhatCameBefore) {
  Lab lab;
  auto [c, s] = lab.stream();
  const std::uint8_t hi[2] = {'h', 'i'};
  ASSERT_TRUE(lab.client.send(c, hi, {.timeout = 1s}));
  std::uint8_t buf[8];
  ASSERT_EQ(*lab.server.recv(s, buf, {.peek = true, .timeout = 5s}), 2u);
  pollfd p{lab.server.fd(s), POLLIN, 0};
  ASSERT_GE(p.fd, 0);
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "data came before the descriptor was made";
  EXPECT_EQ(lab.server.fd(s), p.fd) << "one descriptor per stream";
  ASSERT_EQ(*lab.server.recv(s, buf), 2u);
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 50), 0) << "read empty: quiet";
  ASSERT_TRUE(lab.client.send(c, hi, {.timeout = 1s}));
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "and it follows the stream from then on";
}

// The memory figure the stream benchmark reports: an idle stream holds no buffer (a few
// hundred octets of state), what arrives unread is held until read, and a closed stream
// costs nothing.
TEST(StreamEndpoint, AnIdleStreamCostsItsStateAndWhatItHoldsUnread) {
  Lab lab;
  auto [c, s] = lab.stream();
  const auto idle = lab.server.stream_bytes(s);
  ASSERT_TRUE(idle.has_value());
  EXPECT_GT(*idle, 0u);
  EXPECT_LT(*idle, 4096u) << "no buffer for an idle stream";
  const auto data = pattern(1000, 7);
  send_all(lab.client, c, data, 7);
  std::uint8_t one;
  ASSERT_EQ(*lab.server.recv(s, {&one, 1}, {.peek = true, .timeout = 5s}), 1u);
  EXPECT_GE(*lab.server.stream_bytes(s), *idle + 1000) << "what came is held until read";
  EXPECT_EQ(recv_all(lab.server, s, data.size()), data);
  lab.server.close(s);
  EXPECT_FALSE(lab.server.stream_bytes(s).has_value());
  EXPECT_FALSE(lab.client.stream_bytes({lab.session, 12345}).has_value());
}

}  // namespace
}  // namespace rdma_interop::stream
