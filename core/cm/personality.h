// personality.h - a peer's MPA choices as a declarative JSON file, and where to find them.
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

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/util/expected.h"

namespace rdma_interop::cm {

struct Personality {
  std::string name;
  std::string description;
  MpaPolicy mpa;
  std::vector<std::uint8_t> private_data;
  // What the personality was read from: a source file (and function) and the version, e.g.
  // "drivers/infiniband/hw/irdma/cm.c" and "Linux v6.18.44 (stable, read from a mirror)".
  std::string source_file;
  std::string source_version;
  std::string source_path;  // the JSON file it came from; empty when parsed from text

  friend bool operator==(const Personality&, const Personality&) = default;
};

// Parses personality JSON. `origin` names the text in error messages (a path, "<test>").
// A missing "name" is an error unless `default_name` is given (the file stem).
Expected<Personality, std::string> parse_personality(std::string_view json_text,
                                                     std::string_view origin,
                                                     std::string_view default_name = {});

// Personality files are operator input (--personality takes any path), so they are read
// defensively: only a regular file of at most this many octets (a real one is well under
// 2 KiB) is read. Anything else is an error naming the file and what it is.
inline constexpr std::size_t kMaxPersonalityFileOctets = 64 * 1024;

// Reads and parses one file; the name defaults to the file stem. source_path is set.
// Refuses, each with its own sentence: a missing file, a directory, anything that is not a
// regular file (a FIFO, a device such as /dev/zero, a socket; the file is opened with
// O_NONBLOCK, so a FIFO without a writer cannot hold the caller), and a file larger than
// kMaxPersonalityFileOctets.
Expected<Personality, std::string> load_personality_file(const std::filesystem::path& path);

// Where personalities are looked up, in order:
//   1. $RDMA_INTEROP_PERSONALITY_DIR (several directories separated by ':'),
//   2. <prefix>/share/rdma-interop/personalities next to the running executable
//      (bin/../share/...), then the configured install prefix's,
//   3. the source tree's tools/personalities (builds run from the tree).
// Directories that do not exist are left out.
std::vector<std::filesystem::path> default_personality_dirs();

// `name_or_path` containing a '/' or ending in ".json" is a file; anything else is a name:
// NAME.json in `search_dirs` (first match wins), else the file whose "name" is NAME (the
// name `rdma-probe personalities` lists, which may differ from the file's). Not found: the
// error suggests the nearest known name ("did you mean"), lists the known names and the
// directories searched.
Expected<Personality, std::string> find_personality(
    std::string_view name_or_path, const std::vector<std::filesystem::path>& search_dirs);

// Every *.json in `dirs`, sorted by name; a name found in an earlier directory hides later
// ones. Files that fail to load are left out and their errors appended to `problems`.
std::vector<Personality> list_personalities(const std::vector<std::filesystem::path>& dirs,
                                            std::vector<std::string>* problems = nullptr);

// JSON out keeps the documented key order (ordered_json), so reports read like the docs.
// The file format above, complete (every mpa key written out); parse_personality() of it
// gives back an equal Personality apart from source_path.
nlohmann::ordered_json to_json(const Personality& personality);
nlohmann::ordered_json to_json(const MpaPolicy& policy);
// rdma-probe's "negotiated" object: {"revision":2,"crc":true,"markers_to_peer":false,
// "markers_from_peer":false,"enhanced":true,"peer_to_peer":true,"rtr":"read"|null,
// "ird":16,"ord":16,"peer_ird":32,"peer_ord":32}
nlohmann::ordered_json to_json(const NegotiatedParams& params);

// Values print themselves (test failures, logs): the JSON, on one line.
std::ostream& operator<<(std::ostream& os, const Personality& personality);

}  // namespace rdma_interop::cm
