#include "core/personality/file_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "core/personality/json_codec.h"

namespace rdma_interop::personality {
namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::vector<fs::path> json_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->path().extension() == ".json" && it->is_regular_file(ec2)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string dir_list(const std::vector<fs::path>& dirs) {
  if (dirs.empty()) return "no directories";
  std::string out;
  for (const auto& d : dirs) {
    if (!out.empty()) out += ", ";
    out += d.string();
  }
  return out;
}

// What a file that is not a regular file is, for the error.
std::string_view file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// The checks on the file's type and size, shared by stat() before the open and fstat()
// after it. Empty when the file may be read.
std::optional<std::string> unreadable(const fs::path& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return path.string() + ": is a directory, not a personality file";
  if (!S_ISREG(st.st_mode)) {
    return path.string() + ": not a regular file (" + std::string(file_kind(st.st_mode)) +
           "); a personality is a JSON file";
  }
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxPersonalityFileOctets) {
    return path.string() + ": larger than " + std::to_string(kMaxPersonalityFileOctets) +
           " octets (" + std::to_string(st.st_size) + "), the cap for a personality file";
  }
  return std::nullopt;
}

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Closes a descriptor on every return path.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() { ::close(fd_); }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Edit distance (insertions, deletions, substitutions, and a swap of two neighbours counted
// as one), for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The known name nearest to `wanted`: within a third of its length (at least 2 edits), or
// one that starts with it or is contained in it ("cxgb" -> "cxgb4"). Ties: the shorter name.
std::optional<std::string> nearest_name(std::string_view wanted,
                                        const std::set<std::string>& known) {
  std::optional<std::string> best;
  std::size_t best_distance = std::max<std::size_t>(2, wanted.size() / 3) + 1;
  for (const auto& name : known) {
    std::size_t dist = edit_distance(wanted, name);
    if (name.starts_with(wanted) || wanted.starts_with(name)) dist = std::min<std::size_t>(dist, 1);
    if (dist < best_distance || (dist == best_distance && best && name.size() < best->size())) {
      best = name;
      best_distance = dist;
    }
  }
  return best;
}

}  // namespace

Expected<cm::Personality, std::string> load_personality_file(const std::filesystem::path& path) {
  // A personality path is operator input and may name anything. stat() first, so a device
  // node is refused without being opened (opening some has effects of its own); then open
  // without blocking (a FIFO with no writer would otherwise hold us in open() for ever) and
  // check the descriptor again, since the path may have changed in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return unexpected(path.string() + ": no such personality file");
    return unexpected(path.string() + ": cannot be read: " + errno_text(err));
  }
  if (auto why = unreadable(path, st)) return unexpected(*why);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return unexpected(path.string() + ": cannot be opened: " + errno_text(errno));
  }
  FdGuard guard(fd);
  if (::fstat(guard.get(), &st) != 0) {
    return unexpected(path.string() + ": cannot be read: " + errno_text(errno));
  }
  if (auto why = unreadable(path, st)) return unexpected(*why);
  // Read one octet past the cap: a file that grew since fstat() is still caught.
  std::string text(kMaxPersonalityFileOctets + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(guard.get(), text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return unexpected(path.string() + ": read error: " + errno_text(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxPersonalityFileOctets) {
    return unexpected(path.string() + ": larger than " + std::to_string(kMaxPersonalityFileOctets) +
                      " octets, the cap for a personality file");
  }
  text.resize(got);
  auto parsed = parse_personality(text, path.string(), path.stem().string());
  if (!parsed) return parsed;
  parsed->source_path = path.string();
  return parsed;
}

std::vector<std::filesystem::path> default_personality_dirs() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("RDMA_INTEROP_PERSONALITY_DIR"); env && *env) {
    std::string_view rest(env);
    while (!rest.empty()) {
      auto colon = rest.find(':');
      auto part = rest.substr(0, colon);
      if (!part.empty()) candidates.emplace_back(part);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  // An installed tree found from the executable (a relocated prefix), then the prefix this
  // build was configured with.
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    candidates.push_back(exe.parent_path().parent_path() / "share/rdma-interop/personalities");
#ifdef RDMA_INTEROP_INSTALLED_PERSONALITY_DIR
  candidates.emplace_back(RDMA_INTEROP_INSTALLED_PERSONALITY_DIR);
#endif
#ifdef RDMA_INTEROP_SOURCE_PERSONALITY_DIR
  candidates.emplace_back(RDMA_INTEROP_SOURCE_PERSONALITY_DIR);
#endif
  std::vector<fs::path> dirs;
  for (auto& c : candidates) {
    if (!is_dir(c)) continue;
    auto canon = fs::weakly_canonical(c, ec);
    if (ec) canon = c;
    if (std::find(dirs.begin(), dirs.end(), canon) == dirs.end()) dirs.push_back(canon);
  }
  return dirs;
}

std::vector<std::filesystem::path> personality_search_dirs(const std::vector<std::string>& first) {
  std::vector<fs::path> dirs(first.begin(), first.end());
  for (auto& d : default_personality_dirs()) dirs.push_back(std::move(d));
  return dirs;
}

Expected<cm::Personality, std::string> find_personality(
    std::string_view name_or_path, const std::vector<std::filesystem::path>& search_dirs) {
  if (name_or_path.empty()) {
    return unexpected(std::string("personality name is empty"));
  }
  bool is_path = name_or_path.find('/') != std::string_view::npos ||
                 (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (is_path) return load_personality_file(fs::path(name_or_path));

  for (const auto& dir : search_dirs) {
    auto file = dir / (std::string(name_or_path) + ".json");
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) return load_personality_file(file);
  }
  // The name `rdma-probe personalities` lists is the one inside the file, which need not be
  // the file's stem (a probed peer saved as peer.json names itself "probed-..."): the first
  // file, in search order, that loads under this name.
  std::set<std::string> known;
  for (const auto& dir : search_dirs) {
    for (const auto& f : json_files_in(dir)) {
      known.insert(f.stem().string());
      auto p = load_personality_file(f);
      if (!p) continue;
      if (p->name == name_or_path) return p;
      known.insert(p->name);
    }
  }
  std::string names;
  for (const auto& n : known) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  std::string hint;
  if (auto near = nearest_name(name_or_path, known)) hint = "; did you mean \"" + *near + "\"?";
  return unexpected("unknown personality \"" + std::string(name_or_path) + "\"" + hint +
                    " (known: " + (names.empty() ? std::string("none") : names) +
                    "; searched: " + dir_list(search_dirs) + "; or give a path to a .json file)");
}

std::vector<cm::Personality> list_personalities(const std::vector<std::filesystem::path>& dirs,
                                                std::vector<std::string>* problems) {
  std::map<std::string, cm::Personality> by_name;
  for (const auto& dir : dirs) {
    for (const auto& file : json_files_in(dir)) {
      auto p = load_personality_file(file);
      if (!p) {
        if (problems) problems->push_back(p.error());
        continue;
      }
      by_name.try_emplace(p->name, std::move(*p));
    }
  }
  std::vector<cm::Personality> out;
  out.reserve(by_name.size());
  for (auto& [name, p] : by_name) out.push_back(std::move(p));
  return out;
}

}  // namespace rdma_interop::personality
