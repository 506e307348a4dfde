// run_dir.h - the directory where every process publishes its listeners' snapshots, one
// file per publisher, and the two operations on it: write a snapshot atomically, and scan
// it the way backlog-stat does (cleaning up its own files of dead processes).
//
// Layout (default /run/rdma-interop, or $RDMA_INTEROP_RUN_DIR):
//   <pid>-<token>.json       a published ProcessSnapshot (listener_snapshot.h), mode 0644;
//                            <token> is 8 lowercase hex digits (publisher.cc)
//   .tmp-<pid>-XXXXXX        a snapshot being written (mkostemp: 6 letters or digits);
//                            renamed over the .json, never read
// The directory is created 0755: only its owner (root, for the default) publishes there,
// every user may read it. A user who cannot write the default directory points
// RDMA_INTEROP_RUN_DIR at a directory of their own, for their processes and their
// backlog-stat alike; their publishers otherwise turn telemetry off with one warning.
//
// Whoever can write the directory can put anything in it, so the reader trusts nothing
// there (scan_run_dir below): it never follows a symbolic link, opens only regular files of
// at most kMaxSnapshotBytes owned by root, itself or the directory's owner, never blocks on
// a FIFO, and deletes nothing it cannot prove is its own stale file.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/telemetry/listener_snapshot.h"
#include "core/util/expected.h"

namespace rdma_interop::telemetry {

inline constexpr const char* kDefaultRunDir = "/run/rdma-interop";
inline constexpr const char* kRunDirEnv = "RDMA_INTEROP_RUN_DIR";

// $RDMA_INTEROP_RUN_DIR when set and not empty, else /run/rdma-interop.
std::filesystem::path run_dir_from_environment();

// The largest snapshot a reader reads (1 MiB, a thousand times a busy process's file);
// anything larger is skipped unread.
inline constexpr std::size_t kMaxSnapshotBytes = std::size_t{1} << 20;

// Creates `dir` (and its parents) if missing, mode 0755 whatever the umask for what it
// creates; an existing directory is left as it is (it may be /tmp). The error is one
// sentence with the reason (e.g. "permission denied", with the RDMA_INTEROP_RUN_DIR hint).
std::optional<std::string> ensure_run_dir(const std::filesystem::path& dir);

// Writes `text` to dir/name so that a reader sees either the previous file or the whole new
// one: a temporary file in the same directory, fsync-free (the data is not worth a disk
// flush), then rename(2) over the name. The file is mode 0644. The error is one sentence;
// for a directory we may not write it says to set RDMA_INTEROP_RUN_DIR.
std::optional<std::string> write_atomically(const std::filesystem::path& dir,
                                            const std::string& name, const std::string& text);

// Whether a process exists, as kill(pid, 0) tells: EPERM means it exists but belongs to
// someone else.
enum class Liveness { kAlive, kDead };
Liveness liveness_of(pid_t pid);

struct PublishedFile {
  std::filesystem::path path;
  ProcessSnapshot snapshot;
};

struct RunDirScan {
  std::vector<PublishedFile> files;  // live publishers, sorted by pid then file name
  std::size_t removed = 0;           // our own stale files deleted during the scan
  // One sentence per file skipped, naming it: a *.json file not read (unsafe, unreadable,
  // too large) or malformed, or a dead process's snapshot or temporary file that is not ours
  // to delete. All of them are left in place. The sentences quote file names and contents
  // as they are: escape them before printing.
  std::vector<std::string> ignored;
};

struct ScanError {
  enum class Kind {
    kMissing,       // no such directory
    kNoPermission,  // we may not read it
    kRefused,       // a symbolic link or not a directory: never followed
    kOther,
  };
  Kind kind = Kind::kOther;
  std::string detail;  // one sentence naming the directory
};

// Reads every snapshot in `dir`, which must be a directory itself, not a symbolic link to
// one (kRefused, also when written "link/"; links in the path above it are followed as
// usual).
//
// Each *.json file (names starting with '.' aside) is read only if it is a regular file (not
// a link, FIFO, device or directory), owned by root, by our effective uid or by the
// directory's owner, and at most kMaxSnapshotBytes long; it is opened relative to the
// directory, without following links and without blocking. Any other is listed in `ignored`
// unread. A file that does not parse is listed in `ignored` too. A file of a live process is
// returned in `files`.
//
// A snapshot of a dead process is never returned, and is deleted only when everything says
// it is our own stale file: its name is a publisher's (<pid>-<8 hex>.json), its "pid" is the
// name's, it is owned by our effective uid and has no other link; otherwise it is listed in
// `ignored` and left. A temporary file (.tmp-<pid>-XXXXXX) of a dead writer is deleted under
// the same ownership rules, unread; anything else is left alone.
//
// The error is kMissing, kNoPermission or kRefused with a sentence; files that cannot be
// read are not errors (they are in `ignored`).
Expected<RunDirScan, ScanError> scan_run_dir(const std::filesystem::path& dir);

}  // namespace rdma_interop::telemetry
