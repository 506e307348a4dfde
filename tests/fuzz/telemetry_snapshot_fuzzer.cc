// telemetry_snapshot_fuzzer - the snapshot files backlog-stat reads from the run directory
// (core/telemetry/listener_snapshot.h: parse_snapshot, listeners and connections alike),
// which anyone who can write that directory writes, and backlog-stat's rendering of what
// parses (tools/backlog-stat/report.h: the tables and the --json documents).
//
// Input: a file's content, any length (no configuration octets).
// Invariants: parsing never crashes, throws or reads past the input; a parsed snapshot's
// numbers are in their documented ranges (pid 1..2^31-1, times 0..2^63-1), so nothing wraps;
// it re-encodes (to_json_text) to text that parses back equal; backlog-stat's tables of it
// are one line per row plus the header (no row can be forged), valid UTF-8 with no control
// character (C0, DEL, C1); its --json documents are valid JSON that parses back.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/telemetry/listener_snapshot.h"
#include "core/telemetry/run_dir.h"
#include "core/util/json_text.h"
#include "tests/fuzz/fuzz_common.h"
#include "tools/backlog-stat/connection_row.h"
#include "tools/backlog-stat/listener_row.h"
#include "tools/backlog-stat/report.h"

namespace {

using rdma_interop::fuzz::fuzz_check;

// Checked here byte by byte rather than with the escaping code under test: valid UTF-8
// (RFC 3629 s4) with no C0 control, DEL or C1 control (U+0080..U+009F, 0xC2 0x80..0x9F).
bool terminal_safe(std::string_view line) {
  const auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(line[i]); };
  for (std::size_t i = 0; i < line.size();) {
    const std::uint8_t lead = b(i);
    if (lead < 0x20 || lead == 0x7F) return false;
    if (lead < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = lead >= 0xC2 && lead <= 0xDF   ? 2
                          : lead >= 0xE0 && lead <= 0xEF ? 3
                          : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                         : 0;
    if (n == 0 || i + n > line.size()) return false;
    std::uint32_t cp = lead & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kSmallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp <= 0x9F) return false;  // C1
    i += n;
  }
  return true;
}

// Every line of a table is safe, and there are exactly `rows` of them (each ends in '\n').
void check_table(const std::string& text, std::size_t rows) {
  std::size_t lines = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    fuzz_check(end != std::string::npos, "a table does not end in a newline");
    fuzz_check(terminal_safe(std::string_view(text).substr(start, end - start)),
               "a table line holds a control character or invalid UTF-8");
    ++lines;
    start = end + 1;
  }
  fuzz_check(lines == rows, "a table has more lines than rows: a row was forged");
}

void check_json(const nlohmann::ordered_json& doc) {
  const auto text = rdma_interop::json_text(doc);
  fuzz_check(!nlohmann::json::parse(text, nullptr, false).is_discarded(),
             "a --json document is not valid JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdma_interop;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto parsed = telemetry::parse_snapshot(text);
  if (!parsed) {
    fuzz_check(!parsed.error().empty(), "a parse error has no sentence");
    return 0;
  }
  const auto& s = *parsed;
  fuzz_check(s.pid >= 1 && s.pid <= telemetry::kMaxPid, "a pid out of pid_t's range parsed");
  fuzz_check(s.monotonic_ns >= 0 && s.wall_ms >= 0, "a negative time parsed");

  const auto again = telemetry::parse_snapshot(telemetry::to_json_text(s));
  fuzz_check(again.has_value() && *again == s, "a parsed snapshot does not round-trip");

  telemetry::RunDirScan scan;
  scan.files.push_back({"/run/rdma-interop/1-00000000.json", s});

  backlog_stat::Report report;
  report.run_dir = "/run/rdma-interop";
  report.listeners = backlog_stat::rows_of(scan, {});
  fuzz_check(report.listeners.size() == s.listeners.size(), "a listener row went missing");
  // The header and one line per listener, or the one "no listener" sentence.
  check_table(backlog_stat::to_text(report),
              report.listeners.empty() ? 1 : report.listeners.size() + 1);
  check_json(backlog_stat::to_json(report));

  backlog_stat::ConnectionReport connections;
  connections.run_dir = report.run_dir;
  connections.connections = backlog_stat::connection_rows_of(scan, {});
  fuzz_check(connections.connections.size() == s.connections.size(),
             "a connection row went missing");
  check_table(backlog_stat::to_text(connections),
              connections.connections.empty() ? 1 : connections.connections.size() + 1);
  check_json(backlog_stat::to_json(connections));
  return 0;
}
