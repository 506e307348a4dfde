#include "tools/rdma-probe/peer_probe.h"

#include <sstream>

#include "tools/rdma-probe/data_path_probes.h"
#include "tools/rdma-probe/fingerprint.h"
#include "tools/rdma-probe/mpa_probes.h"

namespace rdma_interop::probe {
namespace {

using Clock = std::chrono::steady_clock;

// The MPA rows a verbs:// probe cannot fill: the kernel makes the offer.
void mpa_rows_not_applicable(std::vector<Capability>& rows) {
  static const std::pair<const char*, const char*> kRows[] = {
      {"mpa_revisions", "MPA revisions answered"},
      {"peer_to_peer", "Peer-to-peer mode (RFC 6581)"},
      {"rtr_types", "RTR types accepted"},
      {"rtr_choice", "RTR picked when offered all"},
      {"ird_ord_check", "IRD/ORD check"},
      {"crc", "CRC32c"},
      {"markers", "Markers"},
      {"private_data", "Largest private data (PD_Length)"},
      {"reserved_bits", "Reserved Request bits (Res)"},
      {"extension_bits", "Vendor bits 0x0c (siw GSO, FPDU size)"},
      {"newer_revision", "A Request of a newer revision (3)"},
      {"rtr_revision1", "RTR in revision 1"},
      {"revision2_to_revision1", "Revision-2 Request to it"},
      {"rtr_wait", "Waits for the RTR before sending"},
      {"still_answering", "Still answers a plain Request"},
      {"rejects", "How it refuses"},
  };
  for (const auto& [id, title] : kRows) {
    auto c = new_capability(id, title);
    c.value = "n/a over verbs: the kernel negotiates MPA; probe tcp:// for this";
    c.verdict = Verdict::kNotApplicable;
    rows.push_back(std::move(c));
  }
}

// verbs:// first contact: one plain connection through rdma-core.
ProbeOutcome verbs_contact(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows,
                           std::string& detail) {
  auto c = new_capability("iwarp", "RDMA CM peer");
  auto a = s.connect(s.plain_policy(2), ProbeSession::plain_private_data(),
                     "first contact through rdma-core");
  if (!a) {
    detail = s.why_not();
    return ProbeOutcome::kUnreachable;
  }
  c.evidence.push_back(a->evidence());
  if (!a->established()) {
    const auto& e = *a->error;
    if (e.kind == transport::ConnectError::Kind::kUnreachable) {
      detail = "unreachable: " + e.detail;
      return ProbeOutcome::kUnreachable;
    }
    detail = "the connection failed: " + describe(e);
    c.value = "refused: " + refusal_form(*a);
    c.verdict = Verdict::kWarn;
    rows.push_back(std::move(c));
    return ProbeOutcome::kRejected;
  }
  const auto& p = a->info->params;
  c.value = "yes: " + cm::to_string(p);
  c.verdict = Verdict::kOk;
  rows.push_back(std::move(c));
  auto limits = new_capability("ird_ord", "IRD/ORD it grants");
  if (p.peer_ird == 0 && p.peer_ord == 0) {
    // iw_cm reports no IRD/ORD of the peer to the active side (verbs_connection.h): 0/0
    // is "not visible", not a grant of no Reads.
    limits.value = "not visible: rdma_cm reports none to the initiator (iWARP)";
    limits.verdict = Verdict::kNotApplicable;
    limits.data = {{"ird", nullptr}, {"ord", nullptr}};
  } else {
    limits.value = "IRD " + std::to_string(p.peer_ird) + ", ORD " + std::to_string(p.peer_ord) +
                   " (as rdma_cm reports them)";
    limits.verdict = Verdict::kOk;
    limits.data = {{"ird", p.peer_ird}, {"ord", p.peer_ord}};
  }
  limits.evidence.push_back(a->evidence());
  rows.push_back(std::move(limits));
  // rdma_cm does not show the MPA revision: p.revision is 0, "not visible"
  // (verbs_connection.h). The later probes keep the plain offer's revision; 0 is no
  // revision an MpaPolicy accepts, and each of them would fail before connecting.
  if (p.revision != 0) {
    f.revision = p.revision;
    f.answers_revision2 = p.revision == 2;
  }
  detail = "an RDMA CM peer reached through rdma-core";
  return ProbeOutcome::kProbed;
}

// The personality keys a responder shows from outside, in personality.h's order: what
// responder_policy's "mpa" holds (null: not found out).
constexpr const char* kResponderKeys[] = {"revision",
                                          "crc",
                                          "markers_wanted",
                                          "markers_supported",
                                          "peer_to_peer",
                                          "rtr_offer",
                                          "rtr_accepted",
                                          "rtr_preference",
                                          "rtr_reply",
                                          "no_common_rtr",
                                          "rtr_in_revision1",
                                          "ird",
                                          "ord",
                                          "strict_ird_ord",
                                          "private_data_limit",
                                          "reject_reserved_bits",
                                          "on_newer_revision",
                                          "refuse_with",
                                          "on_malformed_frame",
                                          "echo_reserved_bits",
                                          "ird_ord_sentinel"};

// A name personality.h accepts: letters, digits, '-', '_', '.'.
std::string name_part(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out += ok ? c : '-';
  }
  return out;
}

// responder_policy: a personality file of what was found, loadable as it is.
nlohmann::ordered_json personality_of(const ProbeReport& report, const ProbeSettings& settings,
                                      const PeerFacts& f) {
  using json = nlohmann::ordered_json;
  json mpa = json::object();
  for (const auto* key : kResponderKeys) {
    auto it = f.responder_policy.find(key);
    mpa[key] = it == f.responder_policy.end() ? json(nullptr) : *it;
  }
  // cm::validate: an RTR in revision 1 is the one type of rtr_offer (iw_cxgb4's p2p_type).
  if (f.revision1_rtr) {
    json offer = mpa["rtr_offer"];
    const std::string own(cm::rtr_name(*f.revision1_rtr));
    if (!offer.is_array() || offer.size() != 1 || offer[0] != own) {
      mpa["rtr_offer"] = json::array({own});
      if (mpa["rtr_accepted"].is_null() && offer.is_array()) mpa["rtr_accepted"] = offer;
    }
  }
  return json{
      {"name", "probed-" + name_part(settings.uri.host) + "-" + std::to_string(settings.uri.port)},
      {"description", "What rdma-probe found " + report.uri +
                          " does as an MPA responder (null: not found out, the "
                          "toolkit's default when this file is loaded)"},
      {"mpa", mpa},
      {"private_data", f.private_data.empty() ? json(nullptr) : json(f.private_data)}};
}

}  // namespace

ProbeReport probe_peer(const ProbeSettings& settings, transport::Provider& provider) {
  const auto start = Clock::now();
  ProbeReport report;
  report.uri = settings.uri.to_string();
  ProbeSession s(settings, provider);
  PeerFacts f;
  auto& rows = report.capabilities;

  if (s.is_tcp()) {
    f.responder_policy["refuse_with"] = nullptr;
    report.outcome = first_contact(s, f, rows, report.detail);
    if (report.outcome == ProbeOutcome::kProbed) {
      probe_revision1_rtr(s, f, rows);
      probe_newer_revision(s, f, rows);
      probe_peer_to_peer(s, f, rows);
      probe_rtr_wait(s, f, rows);
      probe_ird_ord(s, f, rows);
      probe_crc(s, f, rows);
      probe_markers(s, f, rows);
      probe_private_data(s, f, rows);
      probe_reserved_bits(s, f, rows);
      recheck_plain_request(s, f, rows);
    }
  } else {
    report.outcome = verbs_contact(s, f, rows, report.detail);
    if (report.outcome == ProbeOutcome::kProbed) {
      mpa_rows_not_applicable(rows);
      // Nothing of the responder's MPA policy is visible through rdma_cm.
      for (const auto* key : kResponderKeys) f.responder_policy[key] = nullptr;
    }
  }
  if (report.outcome == ProbeOutcome::kProbed) {
    probe_round_trips(s, f, rows);
    probe_terminates(s, f, rows);
    if (s.is_tcp()) summarize_refusals(f, rows);
    report.responder_policy = personality_of(report, settings, f);
    // Over verbs the kernel's MPA is invisible: nothing to compare.
    if (s.is_tcp()) {
      report.traits = f.traits;
      const Fingerprint fp = fingerprint(f.traits, settings.known);
      report.fingerprint = to_json(fp);
      std::ostringstream text;
      print_fingerprint(fp, text);
      report.fingerprint_text = text.str();
    }
  }
  report.connections = s.connections();
  report.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return report;
}

}  // namespace rdma_interop::probe
