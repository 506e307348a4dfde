// run_dir.h - the directory where every process publishes its listeners' snapshots, one
// file per publisher, and the two operations on it: write a snapshot atomically, and scan
// it the way backlog-stat does (cleaning up after dead processes).
//
// Layout (default /run/rdma-interop, or $RDMA_INTEROP_RUN_DIR):
//   <pid>-<token>.json       a published ProcessSnapshot (listener_snapshot.h), mode 0644
//   .tmp-<pid>-XXXXXX        a snapshot being written; renamed over the .json, never read
// The directory is created sticky and world-writable (01777, like /tmp) so that every user's
// processes can publish into it while only the owner of a file can remove it.
#pragma once

#include <sys/types.h>

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

// Creates `dir` (and its parents) if missing; mode 01777 for what it creates. The error is
// one sentence with the reason (e.g. "permission denied").
std::optional<std::string> ensure_run_dir(const std::filesystem::path& dir);

// Writes `text` to dir/name so that a reader sees either the previous file or the whole new
// one: a temporary file in the same directory, fsync-free (the data is not worth a disk
// flush), then rename(2) over the name.
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
  std::size_t removed = 0;           // stale or malformed files deleted during the scan
  std::vector<std::string> ignored;  // one sentence per file skipped and left in place
};

struct ScanError {
  enum class Kind { kMissing, kNoPermission, kOther };
  Kind kind = Kind::kOther;
  std::string detail;  // one sentence naming the directory
};

// Reads every snapshot in `dir`. A file whose process is dead, or that does not parse, is
// ignored and deleted (left in place, and listed in `ignored`, if it is someone else's and
// the sticky directory will not let us delete it). A temporary file of a dead writer is
// deleted too.
Expected<RunDirScan, ScanError> scan_run_dir(const std::filesystem::path& dir);

}  // namespace rdma_interop::telemetry
