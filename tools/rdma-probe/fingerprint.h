// fingerprint.h - which known stack a probed peer behaves like.
//
// `rdma-probe URI` observes a responder from outside: its traits, one value each, in the
// vocabulary below. For every known personality, expected_traits() says what the same probe
// would observe if that personality answered (a pure function of its MPA policy, written
// from mpa_policy.h's meaning of each key, not from running the engine), and fingerprint()
// compares the two: a score per personality, the traits that differ, and a verdict. No I/O,
// no clock: the probe and the tests call it alike.
//
// Traits (a JSON object; null or absent: not observed, or does not apply to this peer):
//   revision               1 | 2 | 129                 the revision its plain Reply carries
//   newer_revision         reply | reset | close      to a Request of a revision it does not
//                          | silent                   speak (2 to a revision-1 peer, 3 to a
//                                                     revision-2 one, 2 to erdma)
//   crc                    want | optional | refuse   C unasked, C when asked, or C refused
//   crc_refusal            rejected | reset | closed  how a Request with C is refused
//   markers_wanted         bool                       M in its Reply
//   markers_supported      bool                       a Request with M connects with markers
//   markers_refusal        (as crc_refusal)
//   peer_to_peer           off | accepted | required  (revision 2)
//   peer_to_peer_refusal   (as crc_refusal)           a revision-2 Request without P2P
//   rtr_send, rtr_write,   the Reply to a peer-to-peer offer of only that RTR type, and of
//   rtr_read, rtr_all      all three: the types it names ("write", "send,write,read" in that
//                          order), "none" (P2P kept, no type: MPA code 0x07 follows),
//                          "declined" (no P2P bit), or the refusal: rejected | reset | closed
//   rtr_revision1          read | write | none        the RTR it needs in revision 1 (cxgb4)
//   strict_ird_ord         bool                       an ORD of 0x3ffe above its IRD refused
//   strict_refusal         rejected | reset | terminate   how that ORD is refused
//   ird_ord_sentinel       bool                       IRD 0x3fff answered with 0x3fff/0x3fff
//   private_data_limit     0..512                     the largest PD_Length answered
//   oversize_refusal       rejected | reset | closed | silent   how 1 octet more is refused
//   reserved_rejected      bool                       a Request with Res bits 0x03
//   reserved_echoed        bool                       Res bits come back in its Reply
//   extension_rejected     bool                       a Request with the vendor bits 0x0c
// Settings, compared but not decisive (an application or the device chooses them):
//   ird, ord               its IRD and ORD, offered an ORD of 0x3ffe and an IRD of 0x3ffe
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/cm/personality.h"

namespace rdma_interop::probe {

using Traits = nlohmann::ordered_json;

// What rdma-probe observes of a responder with this policy (see the vocabulary above).
Traits expected_traits(const cm::MpaPolicy& policy);

// The settings among the traits: reported when they differ, never decisive.
bool is_setting(const std::string& trait);

struct TraitDifference {
  std::string trait;
  nlohmann::ordered_json peer;         // what was observed
  nlohmann::ordered_json personality;  // what the personality would show
};

struct PersonalityMatch {
  std::string name;
  std::string source;  // "file, version" when the personality names them
  int compared = 0;    // behaviour traits the peer showed
  int matched = 0;
  double score = 0;                              // matched / compared, 0 when nothing compared
  std::vector<TraitDifference> differs;          // behaviour traits
  std::vector<TraitDifference> settings_differ;  // ird, ord
};

struct Fingerprint {
  // "known": one personality matches every behaviour trait; "ambiguous": several do (they
  // differ only in what the probe cannot see); "unknown": none does.
  std::string verdict = "unknown";
  std::vector<std::string> behaves_like;  // every full match, in `known`'s order
  std::string closest;                    // the best score (first on ties)
  std::string summary;                    // one sentence
  std::vector<PersonalityMatch> matches;  // best first; ties keep `known`'s order
};

// Compares `observed` with each of `known`'s expected traits: every trait the peer showed
// counts (a trait the personality would not show at all is a difference, a trait the peer
// did not show decides nothing); settings never decide.
Fingerprint fingerprint(const Traits& observed, const std::vector<cm::Personality>& known);

nlohmann::ordered_json to_json(const Fingerprint& fp);
// The STACK section of the probe's table: the summary, then a line per personality.
void print_fingerprint(const Fingerprint& fp, std::ostream& out);

}  // namespace rdma_interop::probe
