#include "core/telemetry/run_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rdma_interop::telemetry {
namespace fs = std::filesystem;

namespace {

std::string errno_sentence(int err) { return std::strerror(err); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// The pid in "<pid>-..." or ".tmp-<pid>-...", if the name has one.
std::optional<pid_t> leading_pid(std::string_view name) {
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc() || pid <= 0 || end == name.data() + name.size() || *end != '-') {
    return std::nullopt;
  }
  return pid;
}

// Deleting someone else's file in the sticky run directory fails with EPERM or EACCES:
// that is theirs to clean, not an error of ours.
bool remove_file(const fs::path& p) { return ::unlink(p.c_str()) == 0 || errno == ENOENT; }

}  // namespace

fs::path run_dir_from_environment() {
  const char* env = std::getenv(kRunDirEnv);  // NOLINT(concurrency-mt-unsafe): read-only use
  if (env != nullptr && *env != '\0') return fs::path(env);
  return fs::path(kDefaultRunDir);
}

std::optional<std::string> ensure_run_dir(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return dir.string() + " exists and is not a directory";
    return std::nullopt;
  }
  if (dir.has_parent_path() && dir.parent_path() != dir) {
    if (auto e = ensure_run_dir(dir.parent_path())) return e;
  }
  if (::mkdir(dir.c_str(), 01777) != 0) {
    if (errno == EEXIST) return std::nullopt;  // another process won the race
    return "cannot create " + dir.string() + ": " + errno_sentence(errno);
  }
  // mkdir applies the umask; the sticky, world-writable mode is the point.
  ::chmod(dir.c_str(), 01777);
  return std::nullopt;
}

std::optional<std::string> write_atomically(const fs::path& dir, const std::string& name,
                                            const std::string& text) {
  std::string tmp = (dir / (".tmp-" + std::to_string(::getpid()) + "-XXXXXX")).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return "cannot create a file in " + dir.string() + ": " + errno_sentence(errno);
  ::fchmod(fd, 0644);  // readable by backlog-stat run by any user
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write " + tmp + ": " + errno_sentence(err);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const fs::path target = dir / name;
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return "cannot rename into " + target.string() + ": " + errno_sentence(err);
  }
  return std::nullopt;
}

Liveness liveness_of(pid_t pid) {
  if (pid <= 0) return Liveness::kDead;
  if (::kill(pid, 0) == 0 || errno != ESRCH) return Liveness::kAlive;
  return Liveness::kDead;
}

Expected<RunDirScan, ScanError> scan_run_dir(const fs::path& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    ScanError e;
    const int err = errno;
    e.kind = err == ENOENT   ? ScanError::Kind::kMissing
             : err == EACCES || err == EPERM ? ScanError::Kind::kNoPermission
                                             : ScanError::Kind::kOther;
    e.detail = "cannot read " + dir.string() + ": " + errno_sentence(err);
    return unexpected(std::move(e));
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) names.emplace_back(entry->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  RunDirScan scan;
  const auto discard = [&](const fs::path& p, const std::string& why) {
    if (remove_file(p)) {
      scan.removed++;
    } else {
      scan.ignored.push_back(p.string() + ": " + why + " (not ours to delete: " +
                             errno_sentence(errno) + ")");
    }
  };
  for (const auto& name : names) {
    const fs::path path = dir / name;
    if (starts_with(name, ".tmp-")) {
      // A writer died between creating its temporary file and the rename.
      const auto pid = leading_pid(std::string_view(name).substr(5));
      if (pid && liveness_of(*pid) == Liveness::kDead) discard(path, "left by a dead writer");
      continue;
    }
    if (starts_with(name, ".") || !ends_with(name, ".json")) continue;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (errno == ENOENT) continue;  // removed by its publisher since readdir
      scan.ignored.push_back(path.string() + ": cannot read: " + errno_sentence(errno));
      continue;
    }
    std::ostringstream text;
    text << in.rdbuf();
    auto snapshot = parse_snapshot(text.str());
    if (!snapshot) {
      discard(path, "malformed: " + snapshot.error());
      continue;
    }
    if (liveness_of(static_cast<pid_t>(snapshot->pid)) == Liveness::kDead) {
      discard(path, "its process " + std::to_string(snapshot->pid) + " is gone");
      continue;
    }
    scan.files.push_back({path, std::move(*snapshot)});
  }
  std::stable_sort(scan.files.begin(), scan.files.end(), [](const auto& a, const auto& b) {
    return a.snapshot.pid < b.snapshot.pid;
  });
  return scan;
}

}  // namespace rdma_interop::telemetry
