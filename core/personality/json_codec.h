// json_codec.h - personality files: the JSON format, read and written; no files, no paths.
//
// A personality names an MpaPolicy plus the private data the peer sends, so the interop
// matrix can meet other stacks' documented behaviour (Linux siw, cxgb4, revision-1-only
// firmware, a peer that never sends its RTR) on one machine. The format:
//
//   {
//     "name": "siw",
//     "description": "Linux soft-iWARP defaults (drivers/infiniband/sw/siw)",
//     "source": {"file": "drivers/infiniband/sw/siw/siw_cm.c",   where it was read from
//                "version": "Linux v6.18.44"},
//     "mpa": {                                each key: mpa_policy.h says what it means
//       "revision": 2,                        1, 2 or 129 (erdma's own)
//       "crc": "optional",                    want | optional | refuse
//       "markers_wanted": false, "markers_supported": false,
//       "peer_to_peer": "when-asked",         off | when-asked | on | required
//       "rtr_offer": ["write", "read"],       send | write | read
//       "rtr_accepted": ["write", "read"],    responder; default: rtr_offer
//       "rtr_preference": ["write", "read"],
//       "rtr_reply": "chosen",                chosen | own | all-common
//       "no_common_rtr": "propose",           refuse | propose | offer-all | decline
//       "rtr_check": "any",                   agreed | any
//       "rtr_from_reply": "exact",            exact | preference
//       "rtr_in_revision1": false,
//       "read_rtr_sink_stag": 0, "read_rtr_source_stag": 1,    0 .. 0xffffffff
//       "refuse_zero_stag_read_rtr": false,
//       "ird": 16, "ord": 16,                 0 .. 0x3fff (RFC 6581 s3: 14 bits)
//       "strict_ird_ord": false,
//       "private_data_limit": 256,            0 .. 512 (RFC 5044 s7.1)
//       "reject_reserved_bits": false,
//       "fallback_to_revision1": false,
//       "on_newer_revision": "close",         reply | reset | close
//       "refuse_with": "reject",              reject | reset
//       "on_malformed_frame": "close",        reset | close
//       "echo_reserved_bits": true,
//       "extension_bits": 0,                  0, 4, 8 or 12 (vendor uses of Res)
//       "ird_ord_sentinel": false,
//       "send_rtr": true,
//       "request_timeout_ms": 5000, "reply_timeout_ms": 10000, "rtr_timeout_ms": 5000,
//       "first_fpdu_delay_ms": 0              initiator: wait after the Reply (kernel siw)
//     },
//     "private_data": "siw"                   UTF-8 text, at most private_data_limit octets,
//   }                                         and what our own frames can carry (below)
//
// Every key in "mpa" is optional (the default is MpaPolicy's), and so is "source"; a key whose
// value is null counts as absent (rdma-probe's responder_policy writes null for what it could
// not find out, and loads as a personality as it is). An unknown key, a value of the wrong
// type or out of range, and a policy cm::validate() objects to are errors; each error is one
// sentence naming the file (and the line where it can be found).
//
// What the wire needs is checked when the file loads, so a personality that could never
// send its frames is refused here rather than failing every connection later: an MPA frame
// carries at most 512 octets of private data (RFC 5044 s7.1), and in revision 2 the IRD and
// ORD words (4 octets, RFC 6581 s3) are among them, so "private_data" is at most 508 octets
// for a revision-2 personality and 512 for a revision-1 one.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>

#include "core/cm/mpa_policy.h"
#include "core/cm/personality.h"
#include "core/util/expected.h"

namespace rdma_interop::personality {

// Parses personality JSON. `origin` names the text in error messages (a path, "<test>").
// A missing "name" is an error unless `default_name` is given (the file stem).
Expected<cm::Personality, std::string> parse_personality(std::string_view json_text,
                                                         std::string_view origin,
                                                         std::string_view default_name = {});

// JSON out keeps the documented key order (ordered_json), so reports read like the docs.
// The file format above, complete (every mpa key written out); parse_personality() of it
// gives back an equal Personality apart from source_path.
nlohmann::ordered_json to_json(const cm::Personality& personality);
nlohmann::ordered_json to_json(const cm::MpaPolicy& policy);

}  // namespace rdma_interop::personality

namespace rdma_interop::cm {
// Values print themselves (test failures, logs): the JSON, on one line.
std::ostream& operator<<(std::ostream& os, const Personality& personality);
}  // namespace rdma_interop::cm
