// probe_report.h - what `rdma-probe URI` found out about a peer, and how it is printed.
//
// A report is a list of capabilities, one line each in the table: what the peer does
// (value), whether that is fine for interop (verdict), and the evidence behind it: every
// probe connection's offer and what came back. --json prints the same report as one
// object, schema "rdma-interop/probe/1":
//
//   {"schema":"rdma-interop/probe/1","uri":"tcp://198.18.0.2:7174",
//    "outcome":"probed"|"unreachable"|"not_iwarp"|"rejected",
//    "detail":"one sentence","connections":23,"elapsed_ms":812.4,
//    "capabilities":[{"id":"mpa_revisions","title":"MPA revisions answered",
//                     "value":"2 and 1","verdict":"ok","why":"...","data":{...},
//                     "evidence":[{"offered":"MPA Request rev 1 ...","came_back":"..."}]}],
//    "responder_policy":{"revision":2,"crc":"optional",...}}
//
// Verdicts: ok (what the RFCs ask for), note (allowed, but it limits what peers can do),
// warn (a known interop hazard), fail (against the RFCs), n/a (does not apply to this peer
// or provider), not_tested (could not be probed; "why" says why). "responder_policy" names,
// in personality-file terms (core/cm/personality.h), every setting a responder shows from
// outside; a key is null when it could not be found out.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace rdma_interop::probe {

inline constexpr std::string_view kProbeSchema = "rdma-interop/probe/1";

enum class Verdict : std::uint8_t { kOk, kNote, kWarn, kFail, kNotApplicable, kNotTested };
std::string_view verdict_name(Verdict v);  // "ok", "note", "warn", "fail", "n/a", "not_tested"

struct Evidence {
  std::string offered;    // what the probe sent: an MPA Request, an RDMA Write...
  std::string came_back;  // the Reply, the Terminate, the reset, the silence
};

struct Capability {
  std::string id;     // stable: "mpa_revisions"
  std::string title;  // "MPA revisions answered"
  std::string value;  // "2 and 1"
  Verdict verdict = Verdict::kNotTested;
  std::string why;    // the verdict's reason, when not plain ok
  nlohmann::ordered_json data = nlohmann::ordered_json::object();  // the value, for machines
  std::vector<Evidence> evidence;
};

// A capability row yet to be filled in.
Capability new_capability(std::string id, std::string title);

enum class ProbeOutcome : std::uint8_t {
  kProbed,       // an iWARP peer; the capabilities are filled in
  kUnreachable,  // no TCP connection (refused, no route, timed out)
  kNotIwarp,     // something answered, but not MPA
  kRejected,     // an iWARP peer that rejected even a plain Request
};
std::string_view outcome_name(ProbeOutcome o);  // "probed", "unreachable", "not_iwarp", "rejected"

struct ProbeReport {
  std::string uri;
  ProbeOutcome outcome = ProbeOutcome::kProbed;
  std::string detail;
  int connections = 0;
  double elapsed_ms = 0;
  std::vector<Capability> capabilities;
  nlohmann::ordered_json responder_policy = nlohmann::ordered_json::object();
};

nlohmann::ordered_json to_json(const ProbeReport& report);
// The aligned table: a heading line, then CAPABILITY, VALUE, VERDICT per capability, the
// reasons for verdicts other than ok below it; with `evidence`, each capability's probes.
void print_table(const ProbeReport& report, bool evidence, std::ostream& out);

}  // namespace rdma_interop::probe
