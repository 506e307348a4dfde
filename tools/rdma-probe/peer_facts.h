// peer_facts.h - what one `rdma-probe URI` run has learned so far, shared by its probes.
//
// Later probes build on earlier answers: the revision the peer speaks decides every later
// Request's revision, the RTR types it accepts decide the preference probe, its IRD decides
// the strict IRD/ORD probe. The responder_policy is the report's personality-shaped summary
// (the "mpa" object of a personality file: it loads and replays as one); the traits are what
// the fingerprint compares with each known personality (fingerprint.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_policy.h"
#include "core/wire/mpa_frame.h"
#include "tools/rdma-probe/probe_report.h"

namespace rdma_interop::probe {

struct PeerFacts {
  std::uint8_t revision = 2;  // the highest revision the peer answers in (129: erdma)
  bool answers_revision2 = false;
  bool answers_revision1 = false;
  // A revision-2 Request without the peer-to-peer flag is refused (irdma); every later
  // revision-2 offer asks for it.
  bool peer_to_peer_required = false;
  // The RTR it waits for in revision 1 (iw_cxgb4 with peer2peer); later revision-1 offers
  // send it.
  std::optional<cm::RtrType> revision1_rtr;
  wire::MpaFrame plain_reply;  // its Reply to the plain Request of `revision`
  bool peer_to_peer = false;   // accepts peer-to-peer mode
  cm::RtrSet rtr_accepted;
  // Each distinct way the peer said no ("MPA Reject (R) with 0 octets of private data"),
  // with the first probe that drew it (the "rejects" row).
  struct Refusal {
    std::string form;
    Evidence evidence;
  };
  std::vector<Refusal> refusals;
  nlohmann::ordered_json responder_policy = nlohmann::ordered_json::object();
  std::string private_data;  // what its plain Reply carried
  nlohmann::ordered_json traits = nlohmann::ordered_json::object();
};

}  // namespace rdma_interop::probe
