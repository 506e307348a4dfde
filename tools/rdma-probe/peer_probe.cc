#include "tools/rdma-probe/peer_probe.h"

#include "tools/rdma-probe/data_path_probes.h"
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
  auto a = s.connect(s.plain_policy(2), ProbeSession::plain_private_data(), "first contact through rdma-core");
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

}  // namespace

ProbeReport probe_peer(const ProbeSettings& settings, transport::Provider& provider) {
  const auto start = Clock::now();
  ProbeReport report;
  report.uri = settings.uri.to_string();
  ProbeSession s(settings, provider);
  PeerFacts f;
  auto& rows = report.capabilities;

  if (s.is_tcp()) {
    report.outcome = first_contact(s, f, rows, report.detail);
    if (report.outcome == ProbeOutcome::kProbed) {
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
      for (const auto* key : {"revision", "on_newer_revision", "private_data", "peer_to_peer",
                              "rtr_accepted", "rtr_preference", "ird", "ord", "strict_ird_ord",
                              "crc", "markers_wanted", "markers_supported", "private_data_limit",
                              "reject_reserved_bits"}) {
        f.responder_policy[key] = nullptr;
      }
    }
  }
  if (report.outcome == ProbeOutcome::kProbed) {
    probe_round_trips(s, f, rows);
    probe_terminates(s, f, rows);
    if (s.is_tcp()) summarize_refusals(f, rows);
    report.responder_policy = f.responder_policy;
  }
  report.connections = s.connections();
  report.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return report;
}

}  // namespace rdma_interop::probe
