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
#include <cstdint>
#include <cstring>
#include <string_view>

namespace rdma_interop::telemetry {
namespace fs = std::filesystem;

namespace {

std::string errno_sentence(int err) { return std::strerror(err); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// What a user who may not write the directory should do instead.
std::string permission_hint(int err) {
  if (err != EACCES && err != EPERM) return "";
  return " (only the directory's owner publishes there: set " + std::string(kRunDirEnv) +
         " to a directory of your own)";
}

// A descriptor closed on every way out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Decimal digits without sign or leading zero that fit pid_t, as the publisher prints them.
std::optional<pid_t> parse_pid(std::string_view digits) {
  pid_t pid = 0;
  if (digits.empty() || digits[0] < '1' || digits[0] > '9') return std::nullopt;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return pid;
}

bool all_of(std::string_view s, bool (*in_set)(char)) {
  return std::all_of(s.begin(), s.end(), in_set);
}
bool lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool alphanumeric(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// The pid in "<pid>-<token>", where the token is `token_size` characters of `in_set`.
std::optional<pid_t> pid_then_token(std::string_view stem, std::size_t token_size,
                                    bool (*in_set)(char)) {
  const auto dash = stem.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto token = stem.substr(dash + 1);
  if (token.size() != token_size || !all_of(token, in_set)) return std::nullopt;
  return parse_pid(stem.substr(0, dash));
}

// The pid in a name the publisher makes, "<pid>-<8 lowercase hex digits>.json"
// (publisher.cc, file_name_for), if `name` is one.
std::optional<pid_t> published_file_pid(std::string_view name) {
  constexpr std::string_view kSuffix = ".json";
  if (!ends_with(name, kSuffix)) return std::nullopt;
  name.remove_suffix(kSuffix.size());
  return pid_then_token(name, 8, lower_hex);
}

// The pid in a temporary name write_atomically makes, ".tmp-<pid>-XXXXXX" (mkostemp puts
// six letters or digits in place of the Xs), if `name` is one.
std::optional<pid_t> temp_file_pid(std::string_view name) {
  constexpr std::string_view kPrefix = ".tmp-";
  if (!starts_with(name, kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  return pid_then_token(name, 6, alphanumeric);
}

// Whose files are believed: root's, ours, and those of whoever owns the directory (they
// could have written anything there anyway).
bool trusted_owner(uid_t uid, uid_t dir_owner) {
  return uid == 0 || uid == ::geteuid() || uid == dir_owner;
}

// Why a file of this status is not read, or nullopt when it may be.
std::optional<std::string> why_not_read(const struct stat& st, uid_t dir_owner) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link: not followed";
  if (!S_ISREG(st.st_mode)) {
    return "not a regular file (a FIFO, device, socket or directory): not opened";
  }
  if (!trusted_owner(st.st_uid, dir_owner)) {
    return "owned by uid " + std::to_string(st.st_uid) +
           ", who is neither root, us nor the directory's owner: not read";
  }
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > kMaxSnapshotBytes) {
    return std::to_string(st.st_size) + " bytes, over the " +
           std::to_string(kMaxSnapshotBytes) + "-byte limit of a snapshot: not read";
  }
  return std::nullopt;
}

struct FileRead {
  bool vanished = false;  // removed since readdir (by its publisher): nothing to say
  std::string refused;    // why it was not read, if it was not
  std::string text;
  struct stat st {};
};

// Reads dir/name if why_not_read() allows it. Looks before opening (a device is never
// opened: opening some has side effects), then checks the opened file again, since the name
// may have been replaced in between; O_NONBLOCK keeps a FIFO swapped in from hanging open().
FileRead read_snapshot_file(int dir, const std::string& name, uid_t dir_owner) {
  FileRead r;
  if (::fstatat(dir, name.c_str(), &r.st, AT_SYMLINK_NOFOLLOW) != 0) {
    r.vanished = errno == ENOENT;
    r.refused = "cannot stat: " + errno_sentence(errno);
    return r;
  }
  if (auto why = why_not_read(r.st, dir_owner)) {
    r.refused = std::move(*why);
    return r;
  }
  const Fd fd(
      ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    r.vanished = errno == ENOENT;
    r.refused = errno == ELOOP ? "a symbolic link: not followed"
                               : "cannot open: " + errno_sentence(errno);
    return r;
  }
  if (::fstat(fd.get(), &r.st) != 0) {
    r.refused = "cannot stat: " + errno_sentence(errno);
    return r;
  }
  if (auto why = why_not_read(r.st, dir_owner)) {
    r.refused = std::move(*why);
    return r;
  }
  // One octet past the limit tells a file that grew since fstat from one that fits.
  char buffer[64 * 1024];
  while (r.text.size() <= kMaxSnapshotBytes) {
    const std::size_t want = std::min(sizeof buffer, kMaxSnapshotBytes + 1 - r.text.size());
    const ssize_t n = ::read(fd.get(), buffer, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.refused = "cannot read: " + errno_sentence(errno);
      return r;
    }
    if (n == 0) break;
    r.text.append(buffer, static_cast<std::size_t>(n));
  }
  if (r.text.size() > kMaxSnapshotBytes) {
    r.refused = "grew past the " + std::to_string(kMaxSnapshotBytes) +
                "-byte limit of a snapshot while read: not read";
    r.text.clear();
  }
  return r;
}

// Why a file of this status is not ours to delete, or nullopt when it is: owned by our
// effective uid (root deletes nobody else's files either) and no other name for it.
std::optional<std::string> not_our_file(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return std::string("not a regular file");
  if (st.st_uid != ::geteuid()) {
    return "owned by uid " + std::to_string(st.st_uid) + ", not by us (uid " +
           std::to_string(::geteuid()) + ")";
  }
  if (st.st_nlink != 1) return std::string("it has other hard links");
  return std::nullopt;
}

// Why the dead process `pid`'s snapshot file `name` is not ours to delete, or nullopt.
std::optional<std::string> not_our_snapshot(std::string_view name, std::int64_t pid,
                                            const struct stat& st) {
  const auto named = published_file_pid(name);
  if (!named) return std::string("its name is not a publisher's (<pid>-<8 hex digits>.json)");
  if (*named != pid) {
    return "its name says pid " + std::to_string(*named) + ", its content pid " +
           std::to_string(pid);
  }
  return not_our_file(st);
}

// Deletes dir/name if it is still the file `st` describes. True if we deleted it, false if
// it was gone; the error says why it is left.
Expected<bool, std::string> remove_if_unchanged(int dir, const std::string& name,
                                                const struct stat& st) {
  struct stat now {};
  if (::fstatat(dir, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return unexpected("cannot stat: " + errno_sentence(errno));
  }
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    return unexpected(std::string("replaced while it was read"));
  }
  if (::unlinkat(dir, name.c_str(), 0) != 0) {
    if (errno == ENOENT) return false;
    return unexpected("cannot delete: " + errno_sentence(errno));
  }
  return true;
}

// `dir` without trailing "/" and "/." components: "link/" or "link/." would have open()
// resolve the link itself as a directory, past O_NOFOLLOW.
std::string without_trailing_slashes(std::string path) {
  for (;;) {
    if (path.size() > 1 && path.back() == '/') {
      path.pop_back();
    } else if (path.size() > 2 && ends_with(path, "/.")) {
      path.resize(path.size() - 2);
    } else {
      return path;
    }
  }
}

// `path` is the directory as scan_run_dir opened it (without_trailing_slashes).
ScanError open_error(const std::string& path, int err) {
  ScanError e;
  if (err == ENOENT) {
    e.kind = ScanError::Kind::kMissing;
  } else if (err == EACCES || err == EPERM) {
    e.kind = ScanError::Kind::kNoPermission;
  } else if (err == ELOOP || err == ENOTDIR) {
    // O_NOFOLLOW says ELOOP for a link; lstat tells a link from any other non-directory.
    struct stat st {};
    e.kind = ScanError::Kind::kRefused;
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      e.detail = "refusing to read " + path +
                 ": it is a symbolic link, and a run directory is never followed through one "
                 "(give the directory it points to)";
    } else {
      e.detail = "cannot read " + path + ": not a directory";
    }
    return e;
  }
  e.detail = "cannot read " + path + ": " + errno_sentence(err);
  return e;
}

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
  if (::mkdir(dir.c_str(), 0755) != 0) {
    const int err = errno;
    if (err == EEXIST) return std::nullopt;  // another process won the race
    return "cannot create " + dir.string() + ": " + errno_sentence(err) + permission_hint(err);
  }
  // mkdir applies the umask, and readers of every user need r-x. Through a descriptor
  // opened without following links: chmod(path) would follow a link swapped in meanwhile.
  const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() >= 0) ::fchmod(fd.get(), 0755);
  return std::nullopt;
}

std::optional<std::string> write_atomically(const fs::path& dir, const std::string& name,
                                            const std::string& text) {
  std::string tmp = (dir / (".tmp-" + std::to_string(::getpid()) + "-XXXXXX")).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return "cannot create a file in " + dir.string() + ": " + errno_sentence(err) +
           permission_hint(err);
  }
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
  // One descriptor for the whole scan: every file is looked up relative to it, so the
  // directory cannot be swapped for another (or for a link) half-way.
  const std::string path = without_trailing_slashes(dir.string());
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return unexpected(open_error(path, errno));
  DIR* d = ::fdopendir(dir_fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(dir_fd);
    return unexpected(open_error(path, err));
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) names.emplace_back(entry->d_name);
  struct stat dir_st {};
  const bool dir_known = ::fstat(dir_fd, &dir_st) == 0;
  const uid_t dir_owner = dir_known ? dir_st.st_uid : 0;
  std::sort(names.begin(), names.end());

  RunDirScan scan;
  const auto ignore = [&](const std::string& name, const std::string& why) {
    scan.ignored.push_back((dir / name).string() + ": " + why);
  };
  const auto delete_file = [&](const std::string& name, const struct stat& st,
                               const std::string& why) {
    auto removed = remove_if_unchanged(dir_fd, name, st);
    if (!removed) {
      ignore(name, why + ", left in place: " + removed.error());
    } else if (*removed) {
      scan.removed++;
    }
  };
  for (const auto& name : names) {
    if (starts_with(name, ".tmp-")) {
      // A writer died between creating its temporary file and the rename.
      const auto pid = temp_file_pid(name);
      if (!pid || liveness_of(*pid) == Liveness::kAlive) continue;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      const std::string why = "left by dead writer " + std::to_string(*pid);
      if (auto not_ours = not_our_file(st)) {
        ignore(name, why + ", not ours to delete: " + *not_ours);
      } else {
        delete_file(name, st, why);
      }
      continue;
    }
    if (starts_with(name, ".") || !ends_with(name, ".json")) continue;
    auto file = read_snapshot_file(dir_fd, name, dir_owner);
    if (file.vanished) continue;  // removed by its publisher since readdir
    if (!file.refused.empty()) {
      ignore(name, file.refused);
      continue;
    }
    auto snapshot = parse_snapshot(file.text);
    if (!snapshot) {
      ignore(name, "malformed, left in place: " + snapshot.error());
      continue;
    }
    // In pid_t's range: parse_snapshot checked.
    if (liveness_of(static_cast<pid_t>(snapshot->pid)) == Liveness::kDead) {
      const std::string why = "its process " + std::to_string(snapshot->pid) + " is gone";
      if (auto not_ours = not_our_snapshot(name, snapshot->pid, file.st)) {
        ignore(name, why + ", not ours to delete: " + *not_ours);
      } else {
        delete_file(name, file.st, why);
      }
      continue;
    }
    scan.files.push_back({dir / name, std::move(*snapshot)});
  }
  ::closedir(d);  // closes dir_fd
  std::stable_sort(scan.files.begin(), scan.files.end(), [](const auto& a, const auto& b) {
    return a.snapshot.pid < b.snapshot.pid;
  });
  return scan;
}

}  // namespace rdma_interop::telemetry
