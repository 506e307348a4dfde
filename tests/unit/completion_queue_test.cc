// The completion queue alone: order and batching, timeouts, notify() and wake() from another
// thread, to a poll() and to a waiter in poll(2) on wait_fd(), an overrun counted and sticky,
// high water, an unbounded queue, and the handler: run by notify() on the producer's thread,
// removed only once no other thread runs it, removable from inside itself; run_soon() through
// a provider's executor. The shared-queue and overrun scenarios over real connections are in
// tcp_provider_test.cc.
#include "core/transport/completion_queue.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <thread>
#include <vector>

namespace rdma_interop::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

rdmap::WorkCompletion wc(std::uint64_t wr_id) {
  rdmap::WorkCompletion c;
  c.wr_id = wr_id;
  c.opcode = rdmap::WcOpcode::kRecv;
  c.status = rdmap::WcStatus::kSuccess;
  c.byte_len = static_cast<std::uint32_t>(wr_id * 10);
  return c;
}

std::vector<std::uint64_t> ids(const std::vector<rdmap::WorkCompletion>& wcs) {
  std::vector<std::uint64_t> out;
  for (const auto& c : wcs) out.push_back(c.wr_id);
  return out;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

TEST(CompletionQueue, HandsOutOldestFirstAtMostMax) {
  CompletionQueue cq(8);
  for (std::uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(cq.push(wc(i)));
  auto first = cq.poll(2, 0ms);
  EXPECT_EQ(ids(first), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(first[1].byte_len, 20u);  // the entry itself, not only its id, came through
  EXPECT_EQ(ids(cq.poll(16, 0ms)), (std::vector<std::uint64_t>{3, 4, 5}));
  EXPECT_TRUE(cq.poll(16, 0ms).empty());
  const auto c = cq.counters();
  EXPECT_EQ(c.entries, 8u);
  EXPECT_EQ(c.depth, 0u);
  EXPECT_EQ(c.pushed, 5u);
  EXPECT_EQ(c.polled, 5u);
  EXPECT_EQ(c.overruns, 0u);
  EXPECT_FALSE(cq.overrun());
}

TEST(CompletionQueue, PollWithMaxZeroTakesNothing) {
  CompletionQueue cq;
  ASSERT_TRUE(cq.push(wc(1)));
  EXPECT_TRUE(cq.poll(0, 0ms).empty());
  EXPECT_EQ(cq.counters().depth, 1u);
}

TEST(CompletionQueue, EmptyPollWaitsForItsTimeout) {
  CompletionQueue cq;
  const auto start = Clock::now();
  EXPECT_TRUE(cq.poll(4, 100ms).empty());
  const double waited = ms_since(start);
  EXPECT_GE(waited, 95.0);
  EXPECT_LT(waited, 2000.0);
  // A zero timeout does not wait at all.
  const auto again = Clock::now();
  EXPECT_TRUE(cq.poll(4, 0ms).empty());
  EXPECT_LT(ms_since(again), 50.0);
}

TEST(CompletionQueue, PushFromAnotherThreadEndsAWaitingPoll) {
  CompletionQueue cq;
  auto waiter = std::async(std::launch::async, [&] { return cq.poll(4, 5000ms); });
  std::this_thread::sleep_for(50ms);
  const auto pushed_at = Clock::now();
  ASSERT_TRUE(cq.push(wc(7)));
  cq.notify();
  const auto got = waiter.get();
  EXPECT_EQ(ids(got), (std::vector<std::uint64_t>{7}));
  EXPECT_LT(ms_since(pushed_at), 1000.0);
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

TEST(CompletionQueue, AnArmedFdWaiterIsSignalledByNotifyAndWake) {
  CompletionQueue cq;
  const int fd = cq.wait_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(cq.wait_fd(), fd) << "one eventfd per queue";
  // Armed, the eventfd turns readable on notify() (from another thread), and the last
  // waiter to disarm resets it.
  const std::uint64_t generation = cq.wake_generation();
  ASSERT_TRUE(cq.arm_fd_wait(generation));
  EXPECT_FALSE(readable(fd, 0));
  std::thread producer([&] {
    ASSERT_TRUE(cq.push(wc(1)));
    cq.notify();
  });
  EXPECT_TRUE(readable(fd, 5000));
  producer.join();
  cq.disarm_fd_wait();
  EXPECT_FALSE(readable(fd, 0));
  // With a completion waiting, arming refuses: the consumer takes it instead of sleeping.
  EXPECT_FALSE(cq.arm_fd_wait(generation));
  EXPECT_EQ(ids(cq.poll(4, 0ms)), (std::vector<std::uint64_t>{1}));
  // A wake() since the generation was read refuses too; a wake() while armed signals.
  ASSERT_TRUE(cq.arm_fd_wait(generation));
  cq.wake();
  EXPECT_TRUE(readable(fd, 0));
  cq.disarm_fd_wait();
  EXPECT_FALSE(cq.arm_fd_wait(generation));
  ASSERT_TRUE(cq.arm_fd_wait(cq.wake_generation()));
  cq.disarm_fd_wait();
  // Not armed: notify() leaves the eventfd alone (no syscall for a consumer not there).
  ASSERT_TRUE(cq.push(wc(2)));
  cq.notify();
  EXPECT_FALSE(readable(fd, 0));
}

TEST(CompletionQueue, WakeFromAnotherThreadEndsEveryWaitingPollEmpty) {
  CompletionQueue cq;
  const auto start = Clock::now();
  auto a = std::async(std::launch::async, [&] { return cq.poll(4, 10000ms); });
  auto b = std::async(std::launch::async, [&] { return cq.poll(4, 10000ms); });
  // A wake reaches the polls already waiting; a thread slow to start would miss one, so
  // wake until both returned. Without wake() they would wait their 10 s.
  while (a.wait_for(50ms) != std::future_status::ready ||
         b.wait_for(0ms) != std::future_status::ready) {
    cq.wake();
    ASSERT_LT(ms_since(start), 5000.0) << "wake() did not end the waiting polls";
  }
  EXPECT_TRUE(a.get().empty());
  EXPECT_TRUE(b.get().empty());
  EXPECT_LT(ms_since(start), 5000.0);
  // A wake is an event, not a state: the next poll waits again.
  const auto later = Clock::now();
  EXPECT_TRUE(cq.poll(4, 100ms).empty());
  EXPECT_GE(ms_since(later), 95.0);
}

TEST(CompletionQueue, OverrunDropsTheEntryCountsItAndStaysSet) {
  CompletionQueue cq(2);
  EXPECT_TRUE(cq.push(wc(1)));
  EXPECT_TRUE(cq.push(wc(2)));
  EXPECT_FALSE(cq.overrun());
  EXPECT_FALSE(cq.push(wc(3)));  // full: lost
  EXPECT_FALSE(cq.push(wc(4)));
  EXPECT_TRUE(cq.overrun());
  auto c = cq.counters();
  EXPECT_EQ(c.overruns, 2u);
  EXPECT_EQ(c.pushed, 2u);
  EXPECT_EQ(c.depth, 2u);
  EXPECT_EQ(ids(cq.poll(16, 0ms)), (std::vector<std::uint64_t>{1, 2}));
  // Room again: later entries are queued, but the overrun is remembered.
  EXPECT_TRUE(cq.push(wc(5)));
  EXPECT_TRUE(cq.overrun());
  EXPECT_EQ(ids(cq.poll(16, 0ms)), (std::vector<std::uint64_t>{5}));
  c = cq.counters();
  EXPECT_EQ(c.overruns, 2u);
  EXPECT_EQ(c.pushed, 3u);
  EXPECT_EQ(c.polled, 3u);
}

TEST(CompletionQueue, HighWaterIsTheMostEverWaiting) {
  CompletionQueue cq(16);
  for (std::uint64_t i = 0; i < 5; ++i) cq.push(wc(i));
  cq.poll(4, 0ms);
  for (std::uint64_t i = 0; i < 3; ++i) cq.push(wc(i));
  auto c = cq.counters();
  EXPECT_EQ(c.depth, 4u);
  EXPECT_EQ(c.high_water, 5u);
  for (std::uint64_t i = 0; i < 3; ++i) cq.push(wc(i));
  EXPECT_EQ(cq.counters().high_water, 7u);
}

TEST(CompletionQueue, UnboundedNeverOverruns) {
  CompletionQueue cq;  // size 0
  EXPECT_EQ(cq.entries(), 0u);
  constexpr std::uint64_t kMany = 100000;
  for (std::uint64_t i = 0; i < kMany; ++i) ASSERT_TRUE(cq.push(wc(i)));
  EXPECT_FALSE(cq.overrun());
  const auto c = cq.counters();
  EXPECT_EQ(c.entries, 0u);
  EXPECT_EQ(c.depth, kMany);
  EXPECT_EQ(c.high_water, kMany);
  EXPECT_EQ(c.overruns, 0u);
  const auto all = cq.poll(kMany, 0ms);
  ASSERT_EQ(all.size(), kMany);
  EXPECT_EQ(all.front().wr_id, 0u);
  EXPECT_EQ(all.back().wr_id, kMany - 1);
}

TEST(CompletionQueue, ConcurrentProducersAndConsumersLoseAndDuplicateNothing) {
  CompletionQueue cq(64);
  constexpr std::uint64_t kPerProducer = 20000;
  std::atomic<std::uint64_t> overruns{0};
  auto produce = [&](std::uint64_t base) {
    for (std::uint64_t i = 0; i < kPerProducer; ++i) {
      // A full queue is retried here only to keep every entry: the test is about races.
      while (!cq.push(wc(base + i))) {
        ++overruns;
        std::this_thread::yield();
      }
      cq.notify();
    }
  };
  std::vector<char> seen(2 * kPerProducer, 0);
  std::atomic<std::uint64_t> taken{0};
  auto consume = [&] {
    std::vector<std::uint64_t> mine;
    while (taken.load() < 2 * kPerProducer) {
      for (const auto& c : cq.poll(16, 10ms)) {
        mine.push_back(c.wr_id);
        ++taken;
      }
    }
    return mine;
  };
  auto c1 = std::async(std::launch::async, consume);
  auto c2 = std::async(std::launch::async, consume);
  std::thread p1(produce, 0);
  std::thread p2(produce, kPerProducer);
  p1.join();
  p2.join();
  for (auto* f : {&c1, &c2}) {
    for (std::uint64_t id : f->get()) {
      ASSERT_LT(id, seen.size());
      ASSERT_EQ(seen[id], 0) << "wr_id " << id << " handed out twice";
      seen[id] = 1;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "wr_id " << i << " lost";
  const auto c = cq.counters();
  EXPECT_EQ(c.pushed, 2 * kPerProducer);
  EXPECT_EQ(c.polled, 2 * kPerProducer);
  EXPECT_EQ(c.overruns, overruns.load());
  EXPECT_LE(c.high_water, 64u);
}

TEST(CompletionQueue, TheHandlerRunsOnTheProducersThreadAfterThePush) {
  CompletionQueue cq(8);
  std::vector<std::uint64_t> got;
  std::thread::id ran_on;
  cq.set_handler([&] {
    ran_on = std::this_thread::get_id();
    std::vector<rdmap::WorkCompletion> wcs;
    cq.poll_now(wcs, 16);
    for (const auto& c : wcs) got.push_back(c.wr_id);
  });
  std::thread producer([&] {
    ASSERT_TRUE(cq.push(wc(1)));
    ASSERT_TRUE(cq.push(wc(2)));
    cq.notify();
    EXPECT_EQ(ran_on, std::this_thread::get_id());
  });
  producer.join();
  EXPECT_EQ(got, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(cq.counters().polled, 2u);
  // Removed: notify() wakes waiters and runs nothing.
  cq.set_handler(nullptr);
  ASSERT_TRUE(cq.push(wc(3)));
  cq.notify();
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(ids(cq.poll(4, 0ms)), (std::vector<std::uint64_t>{3}));
}

TEST(CompletionQueue, RemovingTheHandlerWaitsForAThreadInsideIt) {
  CompletionQueue cq;
  std::promise<void> entered;
  std::atomic<bool> left{false};
  cq.set_handler([&] {
    entered.set_value();
    std::this_thread::sleep_for(150ms);
    left.store(true);
  });
  std::thread producer([&] { cq.notify(); });
  entered.get_future().wait();
  const auto start = Clock::now();
  cq.set_handler(nullptr);
  EXPECT_TRUE(left.load()) << "set_handler returned while the handler still ran";
  EXPECT_GE(ms_since(start), 100.0);
  producer.join();
}

TEST(CompletionQueue, TheHandlerMayRemoveItselfWithoutWaitingForItself) {
  CompletionQueue cq;
  int calls = 0;
  cq.set_handler([&] {
    ++calls;
    cq.set_handler(nullptr);  // would wait forever for itself if it counted itself
  });
  cq.notify();
  cq.notify();
  EXPECT_EQ(calls, 1);
}

TEST(CompletionQueue, RunSoonNeedsAnExecutorAndKeepsTheFirstOffered) {
  CompletionQueue cq;
  int ran = 0;
  EXPECT_FALSE(cq.run_soon([&] { ++ran; })) << "no provider offered a thread";
  std::vector<std::function<void()>> first, second;
  cq.offer_executor([&](std::function<void()> task) {
    first.push_back(std::move(task));
    return true;
  });
  cq.offer_executor([&](std::function<void()> task) {
    second.push_back(std::move(task));
    return true;
  });
  EXPECT_TRUE(cq.run_soon([&] { ++ran; }));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(second.empty());
  first[0]();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace rdma_interop::transport
