// probe_report.h - what `rdma-probe URI` found out about a peer, and how it is printed.
//
// A report is a list of capabilities, one line each in the table: what the peer does
// (value), whether that is fine for interop (verdict), and the evidence behind it: every
// probe connection's offer and what came back. --json prints the same report as one
// object, schema "rdma-interop/probe/2" (/1 had a flat responder_policy and no fingerprint):
//
//   {"schema":"rdma-interop/probe/2","uri":"tcp://198.18.0.2:7174",
//    "outcome":"probed"|"unreachable"|"not_iwarp"|"rejected",
//    "detail":"one sentence","connections":23,"elapsed_ms":812.4,
//    "capabilities":[{"id":"mpa_revisions","title":"MPA revisions answered",
//                     "value":"2 and 1","verdict":"ok","why":"...","data":{...},
//                     "evidence":[{"offered":"MPA Request rev 1 ...","came_back":"..."}]}],
//    "responder_policy":{"name":"probed-198.18.0.2-7174","description":"...",
//                        "mpa":{"revision":2,"crc":"optional",...},"private_data":"siw"},
//    "traits":{"revision":2,"crc":"optional","rtr_send":"write",...},
//    "fingerprint":{"verdict":"known"|"ambiguous"|"unknown","behaves_like":["siw"],
//                   "closest":"siw","summary":"behaves like siw (21 of 21 traits match)",
//                   "matches":[{"name":"siw","source":"drivers/...","matched":21,
//                               "compared":21,"score":1.0,"differs":[],
//                               "settings_differ":[{"trait":"ird","peer":128,
//                                                   "personality":16}]}]}}
//
// Verdicts: ok (what the RFCs ask for), note (allowed, but it limits what peers can do),
// warn (a known interop hazard), fail (against the RFCs), n/a (does not apply to this peer
// or provider), not_tested (could not be probed; "why" says why). "responder_policy" is a
// personality file (core/personality/json_codec.h) naming every setting a responder shows from
// outside; a key is null when it could not be found out, and the file loads as it is
// (`rdma-probe serve --personality ./saved.json` replays the peer). "traits" and
// "fingerprint" say which known personality the peer behaves like (fingerprint.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace rdma_interop::probe {

inline constexpr std::string_view kProbeSchema = "rdma-interop/probe/2";

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
  std::string why;  // the verdict's reason, when not plain ok
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
  bool stopped_by_signal = false;  // SIGINT/SIGTERM cut it short: `outcome` is what it had
  int connections = 0;
  double elapsed_ms = 0;
  std::vector<Capability> capabilities;
  // A personality file (core/personality/json_codec.h) describing the peer as a responder: it loads
  // as it is (null: not found out), so a peer can be probed, saved and served again.
  nlohmann::ordered_json responder_policy = nullptr;
  // What the fingerprint compared (fingerprint.h's traits), and its verdict; null when the
  // peer was not probed.
  nlohmann::ordered_json traits = nullptr;
  nlohmann::ordered_json fingerprint = nullptr;
  std::string fingerprint_text;  // the STACK section of the table
};

nlohmann::ordered_json to_json(const ProbeReport& report);
// The aligned table: a heading line, then CAPABILITY, VALUE, VERDICT per capability, the
// reasons for verdicts other than ok below it; with `evidence`, each capability's probes.
void print_table(const ProbeReport& report, bool evidence, std::ostream& out);

}  // namespace rdma_interop::probe
