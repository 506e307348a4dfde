// The publisher: a file at once on register and unregister, changes at the next poll, no
// rewrites while nothing changes, its file gone with it, and never a failure when the run
// directory is unusable; connection snapshots next to the listeners.
//
// Time is stepped, not slept through: most tests turn the own thread off and call poll() for
// each interval, with a clock of their own; one test checks that the own thread polls.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "core/telemetry/publisher.h"
#include "core/telemetry/run_dir.h"
#include "eventually.h"
#include "telemetry_test_util.h"

namespace rdma_interop::telemetry {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempRunDir;

// The file's timestamps in these tests: fixed, so a test can tell them from the system's.
constexpr Publisher::Timestamps kTestTime{.monotonic_ns = 42'000'000'000,
                                          .wall_ms = 1'718'000'000'000};

// No own thread: only registrations, unregistrations and the test's poll() calls write.
Publisher::Options options(const fs::path& dir) {
  Publisher::Options o;
  o.run_dir = dir;
  o.own_thread = false;
  o.clock = [] { return kTestTime; };
  return o;
}

ProcessSnapshot read(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  auto s = parse_snapshot(text.str());
  EXPECT_TRUE(s) << s.error();
  return s ? *s : ProcessSnapshot{};
}

using test_util::eventually;

TEST(TelemetryPublisher, NothingOnDiskBeforeTheFirstListener) {
  TempRunDir tmp;
  const auto dir = tmp.path() / "run";
  {
    Publisher p(options(dir));
    EXPECT_FALSE(fs::exists(dir));
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(TelemetryPublisher, PublishesAtOnceOnRegisterAndUnregister) {
  TempRunDir tmp;
  Publisher p(options(tmp.path() / "run"));  // nothing polls: the registrations write
  const auto a = p.register_listener([] { return testing::listener("127.0.0.1:1"); });
  ASSERT_TRUE(fs::exists(p.file()));
  auto s = read(p.file());
  EXPECT_EQ(s.pid, ::getpid());
  EXPECT_FALSE(s.process.empty());
  EXPECT_EQ(s.sequence, 1u);
  ASSERT_EQ(s.listeners.size(), 1u);

  const auto b = p.register_listener([] { return testing::listener("127.0.0.1:2"); });
  s = read(p.file());
  EXPECT_EQ(s.sequence, 2u);
  ASSERT_EQ(s.listeners.size(), 2u);
  EXPECT_EQ(s.listeners[1].local_address, "127.0.0.1:2");

  p.unregister_listener(a);
  s = read(p.file());
  ASSERT_EQ(s.listeners.size(), 1u);
  EXPECT_EQ(s.listeners[0].local_address, "127.0.0.1:2");
  p.unregister_listener(b);
  p.unregister_listener(b);  // twice: ignored
  EXPECT_TRUE(read(p.file()).listeners.empty());
  EXPECT_EQ(p.writes(), 4u);
}

TEST(TelemetryPublisher, ChangesArePublishedAtTheNextPollAndOnlyThen) {
  TempRunDir tmp;
  Publisher p(options(tmp.path()));
  std::uint32_t pending = 0;
  p.register_listener([&] { return testing::listener("127.0.0.1:1", pending); });
  for (int i = 0; i < 5; ++i) p.poll();  // five intervals, nothing changed
  EXPECT_EQ(p.writes(), 1u);
  pending = 5;
  EXPECT_EQ(read(p.file()).listeners.at(0).counters.pending, 0u);  // not before the poll
  p.poll();
  EXPECT_EQ(p.writes(), 2u);
  const auto s = read(p.file());
  EXPECT_EQ(s.listeners.at(0).counters.pending, 5u);
  EXPECT_EQ(s.monotonic_ns, kTestTime.monotonic_ns);  // the publisher's clock, not another
  EXPECT_EQ(s.wall_ms, kTestTime.wall_ms);
}

TEST(TelemetryPublisher, RateIsBoundedUnderConstantChange) {
  TempRunDir tmp;
  Publisher p(options(tmp.path()));
  std::uint32_t n = 0;
  p.register_listener([&] { return testing::listener("127.0.0.1:1", n++); });
  for (int i = 0; i < 5; ++i) p.poll();
  // Changed on every look: one write per poll (so per interval), plus the register's own.
  EXPECT_EQ(p.writes(), 6u);
}

TEST(TelemetryPublisher, OwnThreadPollsEveryInterval) {
  TempRunDir tmp;
  Publisher::Options o;  // the production defaults: own thread, the system's clocks
  o.run_dir = tmp.path();
  o.interval = 20ms;
  Publisher p(o);
  std::atomic<std::uint32_t> pending{0};
  p.register_listener([&] { return testing::listener("127.0.0.1:1", pending.load()); });
  pending = 5;  // published by the thread alone: the test never polls
  ASSERT_TRUE(eventually([&] { return read(p.file()).listeners.at(0).counters.pending == 5; }));
  EXPECT_EQ(p.writes(), 2u);
  const auto s = read(p.file());
  EXPECT_GT(s.monotonic_ns, 0);
  EXPECT_GT(s.wall_ms, 1'600'000'000'000);  // after 2020: a Unix time in ms
}

TEST(TelemetryPublisher, FileRemovedOnDestruction) {
  TempRunDir tmp;
  fs::path file;
  {
    Publisher p(options(tmp.path()));
    p.register_listener([] { return testing::listener("127.0.0.1:1"); });
    file = p.file();
    ASSERT_TRUE(fs::exists(file));
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), {}), 0);
}

TEST(TelemetryPublisher, TwoPublishersInOneProcessHaveTheirOwnFiles) {
  TempRunDir tmp;
  Publisher a(options(tmp.path()));
  Publisher b(options(tmp.path()));
  EXPECT_NE(a.file(), b.file());
  a.register_listener([] { return testing::listener("127.0.0.1:1"); });
  b.register_listener([] { return testing::listener("127.0.0.1:2"); });
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_EQ(scan->files.size(), 2u);
}

TEST(TelemetryPublisher, RegistrationUnregistersWhenDestroyed) {
  TempRunDir tmp;
  auto p = std::make_shared<Publisher>(options(tmp.path()));
  {
    PublisherRegistration r(p, [] { return testing::listener("127.0.0.1:1"); });
    EXPECT_EQ(read(p->file()).listeners.size(), 1u);
    PublisherRegistration moved = std::move(r);
    EXPECT_EQ(read(p->file()).listeners.size(), 1u);
  }
  EXPECT_TRUE(read(p->file()).listeners.empty());
}

TEST(TelemetryPublisher, ConnectionsArePublishedNextToListeners) {
  TempRunDir tmp;
  Publisher p(options(tmp.path()));  // nothing polls: the registrations write
  const auto l = p.register_listener([] { return testing::listener("127.0.0.1:7300"); });
  const auto a = p.register_connections([] {
    return std::vector<ConnectionSnapshot>{testing::connection("node2"),
                                           testing::connection("node3")};
  });
  const auto b = p.register_connections(
      [] { return std::vector<ConnectionSnapshot>{testing::connection("node4")}; });
  EXPECT_NE(a, l);
  EXPECT_NE(a, b);
  auto s = read(p.file());
  ASSERT_EQ(s.listeners.size(), 1u);
  ASSERT_EQ(s.connections.size(), 3u);
  // One endpoint's connections in its order, endpoints in registration order.
  EXPECT_EQ(s.connections[0], testing::connection("node2"));
  EXPECT_EQ(s.connections[1].peer, "node3");
  EXPECT_EQ(s.connections[2].peer, "node4");

  p.unregister(a);
  s = read(p.file());
  ASSERT_EQ(s.connections.size(), 1u);
  EXPECT_EQ(s.connections[0].peer, "node4");
  EXPECT_EQ(s.listeners.size(), 1u);
  p.unregister_listener(b);  // the same call for either kind
  p.unregister(b);           // twice: ignored
  s = read(p.file());
  EXPECT_TRUE(s.connections.empty());
  EXPECT_EQ(s.listeners.size(), 1u);
  EXPECT_EQ(p.writes(), 5u);
}

TEST(TelemetryPublisher, ConnectionChangesArePublishedAtTheNextPoll) {
  TempRunDir tmp;
  Publisher p(options(tmp.path()));
  std::uint32_t credits = 5;
  p.register_connections([&] {
    return std::vector<ConnectionSnapshot>{testing::connection("node2", credits)};
  });
  for (int i = 0; i < 5; ++i) p.poll();  // five intervals, nothing changed
  EXPECT_EQ(p.writes(), 1u);
  credits = 0;  // the peer stopped consuming
  p.poll();
  const auto s = read(p.file());
  ASSERT_EQ(s.connections.size(), 1u);
  EXPECT_EQ(s.connections[0].credit.credits, 0u);
  EXPECT_EQ(p.writes(), 2u);
}

TEST(TelemetryPublisher, ConnectionsRegistrationUnregistersWhenDestroyed) {
  TempRunDir tmp;
  auto p = std::make_shared<Publisher>(options(tmp.path()));
  PublisherRegistration listener(p, [] { return testing::listener("127.0.0.1:1"); });
  {
    PublisherRegistration r(p, Publisher::ConnectionsFn([] {
                              return std::vector<ConnectionSnapshot>{testing::connection("node2")};
                            }));
    EXPECT_EQ(read(p->file()).connections.size(), 1u);
    PublisherRegistration moved = std::move(r);
    EXPECT_EQ(read(p->file()).connections.size(), 1u);
  }
  const auto s = read(p->file());
  EXPECT_TRUE(s.connections.empty());
  EXPECT_EQ(s.listeners.size(), 1u);
  PublisherRegistration none(nullptr, Publisher::ConnectionsFn([] {
                               return std::vector<ConnectionSnapshot>{};
                             }));  // a null publisher: nothing registered, nothing to fail
}

TEST(TelemetryPublisher, UnusableRunDirTurnsTelemetryOffWithoutFailing) {
  TempRunDir tmp;
  std::ofstream(tmp.path() / "file") << "x";
  Publisher p(options(tmp.path() / "file" / "run"));  // under a regular file: ENOTDIR
  ::testing::internal::CaptureStderr();
  const auto a = p.register_listener([] { return testing::listener("127.0.0.1:1"); });
  p.register_listener([] { return testing::listener("127.0.0.1:2"); });
  p.unregister_listener(a);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.writes(), 0u);
  // Exactly one warning.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("telemetry off"), std::string::npos) << err;
}

}  // namespace
}  // namespace rdma_interop::telemetry
