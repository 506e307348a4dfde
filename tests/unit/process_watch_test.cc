// ProcessWatch on real processes: a killed child and one that exits are reported, a live one
// is not; and the exits drive the XRC lifetime engine as a node daemon would.
#include "core/transport/verbs/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "core/xrc/xrc_lifetime.h"

namespace rdma_interop::transport::verbs {
namespace {

using std::chrono::milliseconds;

// A child that sleeps until killed, or exits by itself after `exit_after`.
pid_t child(milliseconds exit_after = milliseconds(60000)) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::usleep(static_cast<useconds_t>(exit_after.count() * 1000));
    ::_exit(0);
  }
  return pid;
}

void reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
}

TEST(ProcessWatch, KilledAndExitedChildrenAreReportedLiveOnesAreNot) {
  const pid_t killed = child();
  const pid_t exits = child(milliseconds(100));
  const pid_t lives = child();
  ProcessWatch w;
  ASSERT_FALSE(w.watch(killed));
  ASSERT_FALSE(w.watch(exits));
  ASSERT_FALSE(w.watch(lives));
  EXPECT_TRUE(w.wait(milliseconds(0)).empty());
  ::kill(killed, SIGKILL);
  std::vector<pid_t> seen;
  for (int i = 0; i < 50 && seen.size() < 2; ++i) {
    for (pid_t p : w.wait(milliseconds(100))) seen.push_back(p);
  }
  std::sort(seen.begin(), seen.end());
  std::vector<pid_t> want{killed, exits};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(w.watching(lives));
  EXPECT_FALSE(w.watching(killed));  // reported once, then forgotten
  ::kill(lives, SIGKILL);
  for (pid_t p : {killed, exits, lives}) reap(p);
}

TEST(ProcessWatch, AProcessAlreadyGoneCannotBeWatched) {
  const pid_t gone = child(milliseconds(0));
  reap(gone);
  ProcessWatch w;
  auto e = w.watch(gone);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("does not exist"), std::string::npos) << *e;
}

TEST(ProcessWatch, AnExitDropsTheProcesssXrcReferences) {
  auto engine = xrc::XrcLifetime::create(xrc::ProbeConfig{}).value();
  const pid_t holder = child();
  const auto now = xrc::TimePoint{} + milliseconds(1);
  const auto d =
      engine.open_domain("/tmp/xrcd-watch", static_cast<xrc::ProcessId>(holder), true, now);
  ASSERT_TRUE(d);
  ASSERT_FALSE(engine.create_target_qp(*d, 42, static_cast<xrc::ProcessId>(holder), "node2", now));
  engine.on_sender_disconnected(42, now);
  ProcessWatch w;
  ASSERT_FALSE(w.watch(holder));
  ::kill(holder, SIGKILL);
  std::vector<pid_t> exited;
  for (int i = 0; i < 50 && exited.empty(); ++i) exited = w.wait(milliseconds(100));
  ASSERT_EQ(exited, std::vector<pid_t>{holder});
  engine.on_process_exit(static_cast<xrc::ProcessId>(exited[0]), now);
  // Its sender gone and its last holder dead: the TQP and then the domain are destroyed.
  EXPECT_FALSE(engine.has_tqp(42));
  EXPECT_FALSE(engine.has_domain(*d));
  EXPECT_EQ(engine.counters().refs_dropped_by_exit, 2u);
  reap(holder);
}

}  // namespace
}  // namespace rdma_interop::transport::verbs
