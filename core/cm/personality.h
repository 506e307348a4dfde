// personality.h - a peer's MPA choices: the policy it negotiates with and the private data
// it sends.
//
// A personality lets the interop matrix meet other stacks' documented behaviour (Linux siw,
// cxgb4, irdma, revision-1-only firmware, a peer that never sends its RTR) on one machine.
// Personalities are data: JSON files (tools/personalities/) read by core/personality/
// (json_codec.h is the format, file_loader.h where the files are found). This header holds
// the value and what the wire allows it, nothing that reads a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cm/mpa_policy.h"

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

// The octets of private data our own MPA Request or Reply can carry under `policy`: RFC
// 5044 s7.1 allows 512 (PD_Length); in revision 2 the IRD and ORD words lead the private
// data and count in PD_Length (RFC 6581 s3), so 4 of them are not the application's.
// erdma's revision-129 extension sits outside PD_Length, so it has the whole 512.
std::size_t private_data_room(const MpaPolicy& policy);

}  // namespace rdma_interop::cm
