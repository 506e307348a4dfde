// file_loader.h - where personality files are found, and reading one safely.
//
// The one part of reading personalities that knows the file system: the search path (an
// environment variable, the install prefix, the source tree), operator-given paths read
// defensively, names resolved as `rdma-probe personalities` lists them. The format itself
// is json_codec.h's.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/cm/personality.h"
#include "core/util/expected.h"

namespace rdma_interop::personality {

// Personality files are operator input (--personality takes any path), so they are read
// defensively: only a regular file of at most this many octets (a real one is well under
// 2 KiB) is read. Anything else is an error naming the file and what it is.
inline constexpr std::size_t kMaxPersonalityFileOctets = 64 * 1024;

// Reads and parses one file; the name defaults to the file stem. source_path is set.
// Refuses, each with its own sentence: a missing file, a directory, anything that is not a
// regular file (a FIFO, a device such as /dev/zero, a socket; the file is opened with
// O_NONBLOCK, so a FIFO without a writer cannot hold the caller), and a file larger than
// kMaxPersonalityFileOctets.
Expected<cm::Personality, std::string> load_personality_file(const std::filesystem::path& path);

// Where personalities are looked up, in order:
//   1. $RDMA_INTEROP_PERSONALITY_DIR (several directories separated by ':'),
//   2. <prefix>/share/rdma-interop/personalities next to the running executable
//      (bin/../share/...), then the configured install prefix's,
//   3. the source tree's tools/personalities (builds run from the tree).
// Directories that do not exist are left out.
std::vector<std::filesystem::path> default_personality_dirs();

// `first` (a tool's --personality-dir, in the order given), then default_personality_dirs().
std::vector<std::filesystem::path> personality_search_dirs(
    const std::vector<std::string>& first);

// `name_or_path` containing a '/' or ending in ".json" is a file; anything else is a name:
// NAME.json in `search_dirs` (first match wins), else the file whose "name" is NAME (the
// name `rdma-probe personalities` lists, which may differ from the file's). Not found: the
// error suggests the nearest known name ("did you mean"), lists the known names and the
// directories searched.
Expected<cm::Personality, std::string> find_personality(
    std::string_view name_or_path, const std::vector<std::filesystem::path>& search_dirs);

// Every *.json in `dirs`, sorted by name; a name found in an earlier directory hides later
// ones. Files that fail to load are left out and their errors appended to `problems`.
std::vector<cm::Personality> list_personalities(const std::vector<std::filesystem::path>& dirs,
                                                std::vector<std::string>* problems = nullptr);

}  // namespace rdma_interop::personality
