// The run directory: atomic writes, and a reader that treats the directory as untrusted: it
// never follows a link, opens nothing but small regular files of trusted owners, never hangs
// on a FIFO, and deletes only its own snapshots of dead publishers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

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

// Whether `check` (run in a child) exits 0 within `seconds`. A reader that would hang (a
// FIFO) or read without end (/dev/zero) fails the test instead of stalling or exhausting the
// machine: the child is killed at the deadline, and its address space is capped to 1 GiB in
// GCC builds without ASan (ASan, and clang's sanitizer tiers, reserve far more than that;
// __has_feature is how clang would say which, and GCC 12 does not define it).
bool finishes_quickly(const std::function<bool()>& check, int seconds = 5) {
  const pid_t child = ::fork();
  if (child == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__has_feature)
    const rlimit cap{rlim_t{1} << 30, rlim_t{1} << 30};
    ::setrlimit(RLIMIT_AS, &cap);
#endif
    // Whatever happens in the child ends in _exit: an exception must not return it to
    // gtest, which would go on running the other tests in two processes.
    bool ok = false;
    try {
      ok = check();
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool mentions(const std::vector<std::string>& sentences, const std::string& name) {
  return std::any_of(sentences.begin(), sentences.end(),
                     [&](const std::string& s) { return s.find(name) != std::string::npos; });
}

// A publisher's own file name: "<pid>-<8 hex digits>.json" (publisher.cc).
std::string published_name(pid_t pid, const char* token = "0000beef") {
  return std::to_string(pid) + "-" + token + ".json";
}

TEST(TelemetryRunDir, CreatedWritableByItsOwnerOnlyWithParents) {
  TempRunDir tmp;
  const auto dir = tmp.path() / "a" / "rdma-interop";
  const mode_t old_umask = ::umask(077);  // a umask never makes it unreadable to others
  const auto created = ensure_run_dir(dir);
  ::umask(old_umask);
  ASSERT_EQ(created, std::nullopt);
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat(dir.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
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
  put(tmp.path(), published_name(self), to_json_text(of_pid(self, "127.0.0.1:1")));
  put(tmp.path(), published_name(dead), to_json_text(of_pid(dead, "127.0.0.1:2")));
  put(tmp.path(), ".tmp-" + std::to_string(dead) + "-abcdef", "half a fi");
  put(tmp.path(), ".tmp-" + std::to_string(self) + "-abcdef", "being written");
  put(tmp.path(), "README", "not a snapshot: left alone");

  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan) << scan.error().detail;
  ASSERT_EQ(scan->files.size(), 1u);
  EXPECT_EQ(scan->files[0].snapshot.pid, self);
  EXPECT_EQ(scan->files[0].snapshot.listeners[0].local_address, "127.0.0.1:1");
  EXPECT_EQ(scan->removed, 2u);
  EXPECT_FALSE(fs::exists(tmp.path() / published_name(dead)));
  EXPECT_FALSE(fs::exists(tmp.path() / (".tmp-" + std::to_string(dead) + "-abcdef")));
  EXPECT_TRUE(fs::exists(tmp.path() / (".tmp-" + std::to_string(self) + "-abcdef")));
  EXPECT_TRUE(fs::exists(tmp.path() / "README"));
}

// A torn or foreign file may be someone's work: it is reported, never deleted.
TEST(TelemetryRunDir, ScanLeavesMalformedFilesInPlace) {
  TempRunDir tmp;
  put(tmp.path(), "1-0000aaaa.json", R"({"schema":"rdma-interop/telemetry/1","pid":1,"proc)");
  put(tmp.path(), "2-0000aaaa.json", "");
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_EQ(scan->removed, 0u);
  EXPECT_EQ(scan->ignored.size(), 2u);
  EXPECT_EQ(entries(tmp.path()), 2u);
}

TEST(TelemetryRunDir, ForeignJsonFilesSurviveAScan) {
  TempRunDir tmp;  // as if --run-dir pointed at a project directory
  put(tmp.path(), "package.json", R"({"name": "web", "version": "1.0.0"})");
  put(tmp.path(), "tsconfig.json", R"({"compilerOptions": {}})");
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_EQ(scan->removed, 0u);
  EXPECT_TRUE(fs::exists(tmp.path() / "package.json"));
  EXPECT_TRUE(fs::exists(tmp.path() / "tsconfig.json"));
  EXPECT_TRUE(mentions(scan->ignored, "package.json"));
}

// Only a file the publisher would have written, for the pid in its name, is cleaned: a dead
// process's snapshot under any other name is left (and not shown).
TEST(TelemetryRunDir, DeadSnapshotsUnderOtherNamesAreLeftInPlace) {
  TempRunDir tmp;
  const pid_t dead = dead_pid();
  const pid_t other = dead_pid();
  const std::string text = to_json_text(of_pid(dead, "127.0.0.1:2"));
  put(tmp.path(), std::to_string(dead) + "-notatoken.json", text);
  put(tmp.path(), "copy-of-" + std::to_string(dead) + ".json", text);
  put(tmp.path(), published_name(other), text);  // the name's pid is not the file's
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_EQ(scan->removed, 0u);
  EXPECT_EQ(entries(tmp.path()), 3u);
  EXPECT_EQ(scan->ignored.size(), 3u);
}

TEST(TelemetryRunDir, AStaleSnapshotOfADeadPidWeWroteIsCleaned) {
  TempRunDir tmp;
  const pid_t dead = dead_pid();
  put(tmp.path(), published_name(dead), to_json_text(of_pid(dead, "127.0.0.1:2")));
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_EQ(scan->removed, 1u);
  EXPECT_EQ(entries(tmp.path()), 0u);
}

// Temporary files are cleaned only when they are a writer's own: its name pattern and a
// regular file; a link or a directory under that name is left alone.
TEST(TelemetryRunDir, OnlyTheWritersOwnTemporaryFilesAreCleaned) {
  TempRunDir tmp;
  const auto victim = tmp.path() / "victim";
  fs::create_directory(victim);
  put(victim, "keep", "x");
  const std::string dead = std::to_string(dead_pid());
  put(tmp.path(), ".tmp-" + dead + "-abc", "not mkostemp's six characters");
  fs::create_directory_symlink(victim, tmp.path() / (".tmp-" + dead + "-Ab3dEf"));
  fs::create_directory(tmp.path() / (".tmp-" + dead + "-xyzXYZ"));
  put(tmp.path(), ".tmp-" + dead + "-q1w2e3", "half a fi");
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_EQ(scan->removed, 1u);
  EXPECT_FALSE(fs::exists(tmp.path() / (".tmp-" + dead + "-q1w2e3")));
  EXPECT_TRUE(fs::exists(tmp.path() / (".tmp-" + dead + "-abc")));
  EXPECT_TRUE(fs::is_symlink(tmp.path() / (".tmp-" + dead + "-Ab3dEf")));
  EXPECT_TRUE(fs::is_directory(tmp.path() / (".tmp-" + dead + "-xyzXYZ")));
  EXPECT_TRUE(fs::exists(victim / "keep"));
}

TEST(TelemetryRunDir, ASymlinkedRunDirIsRefusedAndNothingBehindItDeleted) {
  TempRunDir tmp;
  const auto real = tmp.path() / "real";
  fs::create_directory(real);
  const pid_t dead = dead_pid();
  put(real, published_name(dead), to_json_text(of_pid(dead, "127.0.0.1:2")));
  put(real, "package.json", "{}");
  fs::create_directory_symlink(real, tmp.path() / "link");
  const auto scan = scan_run_dir(tmp.path() / "link");
  ASSERT_FALSE(scan);
  EXPECT_EQ(scan.error().kind, ScanError::Kind::kRefused);
  EXPECT_NE(scan.error().detail.find("symbolic link"), std::string::npos) << scan.error().detail;
  // Written the way shells complete it: a trailing "/" would make open() follow the link.
  for (const auto* tail : {"/", "//", "/.", "/./"}) {
    const auto slashed = scan_run_dir((tmp.path() / "link").string() + tail);
    ASSERT_FALSE(slashed) << tail;
    EXPECT_EQ(slashed.error().kind, ScanError::Kind::kRefused) << tail;
  }
  EXPECT_EQ(entries(real), 2u);
  EXPECT_TRUE(scan_run_dir(real.string() + "/"));  // the directory itself, slash or not

  put(tmp.path(), "plain-file", "x");
  const auto file = scan_run_dir(tmp.path() / "plain-file");
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().kind, ScanError::Kind::kRefused);
  EXPECT_NE(file.error().detail.find("not a directory"), std::string::npos) << file.error().detail;
}

TEST(TelemetryRunDir, ASymlinkToDevZeroIsSkippedNotRead) {
  TempRunDir tmp;
  const auto name = "123-" + std::string("0000abcd") + ".json";
  fs::create_symlink("/dev/zero", tmp.path() / name);
  fs::create_symlink("/etc/passwd", tmp.path() / "124-0000abcd.json");
  EXPECT_TRUE(finishes_quickly([&] {
    const auto scan = scan_run_dir(tmp.path());
    return scan && scan->files.empty() && scan->ignored.size() == 2 &&
           mentions(scan->ignored, name) && scan->removed == 0;
  }));
  EXPECT_TRUE(fs::is_symlink(tmp.path() / name));
}

TEST(TelemetryRunDir, AFifoNamedLikeASnapshotDoesNotHangTheReader) {
  TempRunDir tmp;
  const auto fifo = tmp.path() / "125-0000abcd.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_TRUE(finishes_quickly([&] {
    const auto scan = scan_run_dir(tmp.path());
    return scan && scan->files.empty() && mentions(scan->ignored, "125-0000abcd.json");
  }));
  EXPECT_TRUE(fs::exists(fifo));
}

TEST(TelemetryRunDir, AFileOverTheSizeCapIsSkipped) {
  TempRunDir tmp;
  // A valid snapshot of a live process, padded with JSON whitespace to 2 MiB.
  std::string text = to_json_text(of_pid(::getpid(), "127.0.0.1:1"));
  text.resize(2u << 20, ' ');
  put(tmp.path(), published_name(::getpid()), text);
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_TRUE(mentions(scan->ignored, published_name(::getpid())));
  EXPECT_EQ(entries(tmp.path()), 1u);

  text.resize(kMaxSnapshotBytes);  // at the cap exactly: read
  put(tmp.path(), published_name(::getpid()), text);
  const auto at_cap = scan_run_dir(tmp.path());
  ASSERT_TRUE(at_cap);
  EXPECT_EQ(at_cap->files.size(), 1u);
}

// Files of owners other than root, us and the directory's owner are not read: they could
// say anything about any process.
TEST(TelemetryRunDir, FilesOfUntrustedOwnersAreNotRead) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create another user's file";
  TempRunDir tmp;
  const auto file = tmp.path() / published_name(::getpid());
  put(tmp.path(), file.filename().string(), to_json_text(of_pid(::getpid(), "127.0.0.1:9")));
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_TRUE(mentions(scan->ignored, "65534"));

  // The directory's owner is trusted in their own directory.
  ASSERT_EQ(::chown(tmp.path().c_str(), 65534, 65534), 0);
  const auto theirs = scan_run_dir(tmp.path());
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->files.size(), 1u);
}

// A dead process's snapshot that someone else wrote is theirs to clean, even for root.
TEST(TelemetryRunDir, DeadSnapshotsOfOtherOwnersAreLeftInPlace) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create another user's file";
  TempRunDir tmp;
  ASSERT_EQ(::chown(tmp.path().c_str(), 65534, 65534), 0);  // trusted: the dir's owner
  const pid_t dead = dead_pid();
  const auto file = tmp.path() / published_name(dead);
  put(tmp.path(), file.filename().string(), to_json_text(of_pid(dead, "127.0.0.1:3")));
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  const auto scan = scan_run_dir(tmp.path());
  ASSERT_TRUE(scan);
  EXPECT_TRUE(scan->files.empty());
  EXPECT_EQ(scan->removed, 0u);
  EXPECT_TRUE(mentions(scan->ignored, file.filename().string()));
  EXPECT_TRUE(fs::exists(file));
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
