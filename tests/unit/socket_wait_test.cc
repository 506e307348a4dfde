// SocketWait on real sockets: octets, a wake from another thread, a timeout, the peer's
// close and our own SHUT_RD each end the wait as poll(2) and recv(2) would, nothing read is
// dropped when a wake races the octets, and a fork()ed child gets a ring of its own.
#include "core/runtime/socket_wait.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <string>
#include <thread>

namespace rdma_interop::runtime {
namespace {

using namespace std::chrono_literals;
using Kind = SocketWait::Result::Kind;
using Clock = std::chrono::steady_clock;

struct Pair {
  int ours = -1;
  int theirs = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    ours = fds[0];
    theirs = fds[1];
  }
  ~Pair() {
    if (ours >= 0) ::close(ours);
    if (theirs >= 0) ::close(theirs);
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::send(theirs, s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
};

struct Wake {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::uint64_t id = new_wake_id();
  ~Wake() { ::close(fd); }
  WakeFd ref() const { return {fd, id}; }
  void signal() const {
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(fd, &one, sizeof one), 8);
  }
  void clear() const {
    std::uint64_t v = 0;
    (void)!::read(fd, &v, sizeof v);
  }
};

SocketWait& wait() {
  SocketWait* w = SocketWait::for_this_thread();
  if (w == nullptr) {
    ADD_FAILURE() << "io_uring is unavailable on this kernel: these tests need it";
    std::abort();
  }
  return *w;
}

std::string text(std::span<const std::uint8_t> b, std::size_t n) {
  return {reinterpret_cast<const char*>(b.data()), n};
}

// The octets a receive brought, or what ended it instead.
std::string outcome(const SocketWait::Result& r, std::span<const std::uint8_t> buf) {
  switch (r.kind) {
    case Kind::kData:
      return text(buf, r.bytes);
    case Kind::kEof:
      return "<eof>";
    case Kind::kError:
      return "<error>";
    case Kind::kWoken:
      return "<woken>";
    case Kind::kTimeout:
      return "<timeout>";
    case Kind::kUnavailable:
      return "<unavailable>";
  }
  return "<?>";
}

// What a receive on `p` (up to 5 s) brings when `event` happens `delay` into its wait, on
// another thread.
template <class F>
std::string receive_while(const Pair& p, WakeFd wake, std::chrono::milliseconds delay,
                          F event) {
  std::jthread other([delay, event] {
    std::this_thread::sleep_for(delay);
    event();
  });
  std::array<std::uint8_t, 64> buf{};
  return outcome(wait().receive(p.ours, buf, wake, 5s), buf);
}

TEST(SocketWait, OctetsAlreadyThereAreReceivedAtOnce) {
  Pair p;
  Wake w;
  p.send("hello");
  std::array<std::uint8_t, 64> buf{};
  const std::string r = outcome(wait().receive(p.ours, buf, w.ref(), 5s), buf);
  EXPECT_EQ(r, "hello");
}

TEST(SocketWait, OctetsThatComeLaterEndTheWait) {
  Pair p;
  Wake w;
  const std::string r = receive_while(p, w.ref(), 30ms, [&] {
    p.send("later");
  });
  EXPECT_EQ(r, "later");
}

TEST(SocketWait, AWakeFromAnotherThreadEndsTheWaitAndTheNextOctetsAreStillReceived) {
  Pair p;
  Wake w;
  const auto t0 = Clock::now();
  const std::string r = receive_while(p, w.ref(), 30ms, [&] {
    w.signal();
  });
  EXPECT_EQ(r, "<woken>");
  EXPECT_LT(Clock::now() - t0, 4s);
  w.clear();
  // The RECV the wake ended was taken back: these octets are the next wait's, whole.
  std::array<std::uint8_t, 64> buf{};
  p.send("after the wake");
  const std::string r2 = outcome(wait().receive(p.ours, buf, w.ref(), 5s), buf);
  EXPECT_EQ(r2, "after the wake");
}

TEST(SocketWait, OctetsAndAWakeTogetherLoseNoOctets) {
  Pair p;
  Wake w;
  std::array<std::uint8_t, 64> buf{};
  for (int i = 0; i < 200; ++i) {
    const std::string msg = "m" + std::to_string(i);
    p.send(msg);
    w.signal();
    std::string got;
    // Either the octets come back at once, or the wake does and the octets come next.
    for (int tries = 0; tries < 3 && got.empty(); ++tries) {
      const auto r = wait().receive(p.ours, buf, w.ref(), 5s);
      if (r.kind == Kind::kData) got = text(buf, r.bytes);
      w.clear();
    }
    ASSERT_EQ(got, msg);
  }
}

TEST(SocketWait, NothingEndsTheWaitAtItsTimeout) {
  Pair p;
  Wake w;
  std::array<std::uint8_t, 64> buf{};
  const auto t0 = Clock::now();
  const auto r = wait().receive(p.ours, buf, w.ref(), 50ms);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(r.kind, Kind::kTimeout);
  EXPECT_GE(took, 45ms);
  EXPECT_LT(took, 3s);
}

TEST(SocketWait, AWaitAfterAnotherEndsOnlyByItsOwnCauses) {
  // The POLL the first wait armed stays for the second: nothing but the socket, the wake
  // or the timeout ends a wait.
  Pair p;
  Wake w;
  std::array<std::uint8_t, 64> buf{};
  p.send("first");
  ASSERT_EQ(wait().receive(p.ours, buf, w.ref(), 5s).kind, Kind::kData);
  const auto t0 = Clock::now();
  EXPECT_EQ(wait().receive(p.ours, buf, w.ref(), 50ms).kind, Kind::kTimeout);
  EXPECT_GE(Clock::now() - t0, 45ms);
  const std::string r = receive_while(p, w.ref(), 30ms, [&] {
    p.send("third");
  });
  EXPECT_EQ(r, "third");
}

TEST(SocketWait, AWaitOnAnotherWakeDescriptorIsNotEndedByTheOldOnesPollTakenBack) {
  Pair p;
  Wake a;
  Wake b;
  std::array<std::uint8_t, 64> buf{};
  p.send("on a");
  ASSERT_EQ(wait().receive(p.ours, buf, a.ref(), 5s).kind, Kind::kData);  // a's POLL stays
  const auto t0 = Clock::now();
  EXPECT_EQ(wait().receive(p.ours, buf, b.ref(), 50ms).kind, Kind::kTimeout);
  EXPECT_GE(Clock::now() - t0, 45ms);
  a.signal();  // a is no longer watched
  EXPECT_EQ(wait().receive(p.ours, buf, b.ref(), 30ms).kind, Kind::kTimeout);
  b.signal();
  EXPECT_EQ(wait().receive(p.ours, buf, b.ref(), 5s).kind, Kind::kWoken);
}

TEST(SocketWait, AWakeDescriptorOfUnknownIdentityIsWatchedAnewEachWait) {
  Pair p;
  Wake w;
  std::array<std::uint8_t, 64> buf{};
  p.send("x");
  ASSERT_EQ(wait().receive(p.ours, buf, WakeFd{w.fd, 0}, 5s).kind, Kind::kData);
  EXPECT_EQ(wait().receive(p.ours, buf, WakeFd{w.fd, 0}, 30ms).kind, Kind::kTimeout);
  w.signal();
  EXPECT_EQ(wait().receive(p.ours, buf, WakeFd{w.fd, 0}, 5s).kind, Kind::kWoken);
}

TEST(SocketWait, WithoutAWakeDescriptorOnlyTheSocketOrTheTimeoutEndIt) {
  Pair p;
  std::array<std::uint8_t, 64> buf{};
  EXPECT_EQ(wait().receive(p.ours, buf, WakeFd{}, 20ms).kind, Kind::kTimeout);
  p.send("x");
  EXPECT_EQ(wait().receive(p.ours, buf, WakeFd{}, 5s).kind, Kind::kData);
}

TEST(SocketWait, ThePeersCloseIsTheEnd) {
  Pair p;
  Wake w;
  const std::string r = receive_while(p, w.ref(), 20ms, [&] {
    ::close(p.theirs);
    p.theirs = -1;
  });
  EXPECT_EQ(r, "<eof>");
}

TEST(SocketWait, OurOwnShutRdEndsAWaitingReceive) {
  // How a connection closed under a receiving thread wakes it (tcp_connection_state.cc).
  Pair p;
  Wake w;
  const auto t0 = Clock::now();
  const std::string r = receive_while(p, w.ref(), 20ms, [&] {
    ::shutdown(p.ours, SHUT_RD);
  });
  EXPECT_EQ(r, "<eof>");
  EXPECT_LT(Clock::now() - t0, 4s);
}

TEST(SocketWait, AWakeDescriptorClosedBetweenWaitsAndItsNumberReusedWakesTheNewOne) {
  // The POLL left armed on the first descriptor is taken back (the new one has another
  // identity): the number's new file is the one watched.
  Pair p;
  std::array<std::uint8_t, 64> buf{};
  int number = -1;
  {
    Wake first;
    number = first.fd;
    p.send("a");
    ASSERT_EQ(wait().receive(p.ours, buf, first.ref(), 5s).kind, Kind::kData);
  }
  Wake second;
  ASSERT_EQ(second.fd, number) << "the lowest free number is reused";
  const std::string r = receive_while(p, second.ref(), 20ms, [&] {
    second.signal();
  });
  EXPECT_EQ(r, "<woken>");
}

TEST(SocketWait, AForkedChildWaitsWithARingOfItsOwn) {
  Pair p;
  Wake w;
  std::array<std::uint8_t, 64> buf{};
  p.send("parent");
  ASSERT_EQ(wait().receive(p.ours, buf, w.ref(), 5s).kind, Kind::kData);  // the parent's ring
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SocketWait* mine = SocketWait::for_this_thread();
    if (mine == nullptr) _exit(2);
    if (::send(p.theirs, "child", 5, 0) != 5) _exit(3);
    const auto r = mine->receive(p.ours, buf, w.ref(), 5s);
    _exit(r.kind == Kind::kData && text(buf, r.bytes) == "child" ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's ring still works after the child's exit.
  p.send("again");
  const std::string r = outcome(wait().receive(p.ours, buf, w.ref(), 5s), buf);
  EXPECT_EQ(r, "again");
}

TEST(SocketWait, DisabledThereIsNoneAndEnabledAgainThereIs) {
  SocketWait::set_enabled(false);
  EXPECT_EQ(SocketWait::for_this_thread(), nullptr);
  SocketWait::set_enabled(true);
  EXPECT_NE(SocketWait::for_this_thread(), nullptr);
}

}  // namespace
}  // namespace rdma_interop::runtime
