// The run directory: atomic writes, and a reader that cleans up after dead processes and
// damaged files without touching what it may not.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "core/telemetry/run_dir.h"
#include "telemetry_test_util.h"

namespace rdma_interop::telemetry {
namespace {

namespace fs = std::filesystem;
using testing::dead_pid;
using testing::TempRunDir;

ProcessSnapshot of_pid(pid_t pid, std::string address) {
  ProcessSnapshot s;
  s.pid = pid;
  s.process = "test";
  s.sequence = 1;
  s.listeners.push_back(testing::listener(std::move(address)));
  return s;
}

void put(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
}

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {}));
}

TEST(TelemetryRunDir, EnvironmentOverridesTheDefault) {
  ::unsetenv(kRunDirEnv);
  EXPECT_EQ(run_dir_from_environment(), fs::path("/run/rdma-interop"));
  ::setenv(kRunDirEnv, "/tmp/elsewhere", 1);
  EXPECT_EQ(run_dir_from_environment(), fs::path("/tmp/elsewhere"));
  ::setenv(kRunDirEnv, "", 1);  // empty is unset
  EXPECT_EQ(run_dir_from_environment(), fs::path("/run/rdma-interop"));
  ::unsetenv(kRunDirEnv);
}

TEST(TelemetryRunDir, CreatedStickyAndWorldWritableWithParents) {
  TempRunDir tmp;
  const auto dir = tmp.path() / "a" / "rdma-interop";
  ASSERT_EQ(ensure_run_dir(dir), std::nullopt);
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(ensure_run_dir(dir), std::nullopt);  // already there: fine
  put(tmp.path(), "file", "x");
  EXPECT_NE(ensure_run_dir(tmp.path() / "file"), std::nullopt);
}

TEST(TelemetryRunDir, WriteReplacesWholeFilesAndLeavesNoTemporary) {
  TempRunDir tmp;
  ASSERT_EQ(write_atomically(tmp.path(), "1-a.json", "first\n"), std::nullopt);
  ASSERT_EQ(write_atomically(tmp.path(), "1-a.json", "second\n"), std::nullopt);
  std::ifstream in(tmp.path() / "1-a.json");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "second");
  EXPECT_EQ(entries(tmp.path()), 1u);
  struct stat st {};
  ASSERT_EQ(::stat((tmp.path() / "1-a.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // readable by backlog-stat of any user
  EXPECT_NE(write_atomically(tmp.path() / "missing", "x.json", "x"), std::nullopt);
}

TEST(TelemetryRunDir, ScanReadsLiveProcessesAndCleansDeadOnes) {
  TempRunDir tmp;
  const pid_t dead = dead_pid();
  const pid_t self = ::getpid();
  put(tmp.path(), std::to_string(self) + "-live.json", to_json_text(of_pid(self, "127.0.0.1:1")));
  put(tmp.path(), std::to_string(dead) + "-dead.json", to_json_text(of_pid(dead, "127.0.0.1:2")));
  put(tmp.path(), ".tmp-" + std::to_string(dead) + "-abcdef", "half a fi");
  put(tmp.path(), ".tmp-" + std::to_string(self) + "-abcdef", "being written");
  put(tmp.path(), "README", "not a snapshot: left alone");

  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan) << scan.error().detail;
  ASSERT_EQ(scan->files.size(), 1u);
  EXPECT_EQ(scan->files[0].snapshot.pid, self);
  EXPECT_EQ(scan->files[0].snapshot.listeners[0].local_address, "127.0.0.1:1");
  EXPECT_EQ(scan->removed, 2u);
  EXPECT_FALSE(fs::exists(tmp.path() / (std::to_string(dead) + "-dead.json")));
  EXPECT_FALSE(fs::exists(tmp.path() / (".tmp-" + std::to_string(dead) + "-abcdef")));
  EXPECT_TRUE(fs::exists(tmp.path() / (".tmp-" + std::to_string(self) + "-abcdef")));
  EXPECT_TRUE(fs::exists(tmp.path() / "README"));
}

TEST(TelemetryRunDir, ScanDeletesMalformedFiles) {
  TempRunDir tmp;
  put(tmp.path(), "1-torn.json", R"({"schema":"rdma-interop/telemetry/1","pid":1,"proc)");
  put(tmp.path(), "2-empty.json", "");
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_EQ(scan->removed, 2u);
  EXPECT_EQ(entries(tmp.path()), 0u);
}

TEST(TelemetryRunDir, OtherUsersFilesAreIgnoredNotDeleted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create another user's file";
  TempRunDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 01777), 0);
  const pid_t dead = dead_pid();
  const auto file = tmp.path() / (std::to_string(dead) + "-other.json");
  put(tmp.path(), file.filename().string(), to_json_text(of_pid(dead, "127.0.0.1:3")));
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);  // nobody's file in a sticky dir
  const pid_t child = ::fork();
  if (child == 0) {
    // As another unprivileged user, as an operator would run backlog-stat.
    if (::setgid(65533) != 0 || ::setuid(65533) != 0) ::_exit(10);
    const auto scan = scan_run_dir(tmp.path());
    if (!scan) ::_exit(11);
    if (!scan->files.empty()) ::_exit(12);   // a dead process is never shown
    if (scan->removed != 0) ::_exit(13);
    if (scan->ignored.size() != 1) ::_exit(14);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(fs::exists(file));
}

TEST(TelemetryRunDir, MissingAndUnreadableDirectoriesAreToldApart) {
  TempRunDir tmp;
  const auto missing = scan_run_dir(tmp.path() / "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ScanError::Kind::kMissing);
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0700), 0);
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(tmp.path().c_str(), 0), 0);
    const auto denied = scan_run_dir(tmp.path());
    ::chmod(tmp.path().c_str(), 0700);
    ASSERT_FALSE(denied);
    EXPECT_EQ(denied.error().kind, ScanError::Kind::kNoPermission);
    return;
  }
  // Root reads any directory: look from an unprivileged user's side instead.
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65533) != 0 || ::setuid(65533) != 0) ::_exit(10);
    const auto denied = scan_run_dir(tmp.path());
    ::_exit(!denied && denied.error().kind == ScanError::Kind::kNoPermission ? 0 : 11);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TelemetryRunDir, LivenessFollowsKill) {
  EXPECT_EQ(liveness_of(::getpid()), Liveness::kAlive);
  EXPECT_EQ(liveness_of(1), Liveness::kAlive);  // EPERM for non-root still means alive
  EXPECT_EQ(liveness_of(dead_pid()), Liveness::kDead);
}

}  // namespace
}  // namespace rdma_interop::telemetry
