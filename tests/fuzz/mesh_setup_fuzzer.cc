// mesh_setup_fuzzer - what an rdma-mesh node does with a caller's MPA private data
// (tools/rdma-mesh/mesh_caller.h): 16 octets of credit parameters, then the caller's name.
//
// Input: octet 0 says which of the node's four peers are connected already (bits 0..3); the
// rest is the private data as the peer sent it, any length and any bytes.
// Invariants: a caller is accepted exactly when its name is one of the peers that call this
// node ("a", "b": of a pair the lower name connects) and is not connected yet; every refusal
// has a reason that is valid UTF-8 without a control character (it goes into the MPA Reject
// and onto the operator's terminal); the JSON notice built from it, and from the raw name,
// parses back (issue 17: one '\xff' in a name made the JSON writer throw and aborted the
// node); the credit parameters decode or fail without reading past the input.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/credit/credit_params.h"
#include "core/util/json_text.h"
#include "core/util/printable_text.h"
#include "tests/fuzz/fuzz_common.h"
#include "tools/rdma-mesh/mesh_caller.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdma_interop;
  using fuzz::fuzz_check;
  if (size == 0) return 0;
  static const mesh::MeshConfig config = [] {
    mesh::MeshConfig c;
    c.name = "m";
    for (const char* n : {"a", "b", "x", "z"}) {
      mesh::PeerSpec p;
      p.name = n;
      c.peers.push_back(p);
    }
    return c;
  }();
  std::vector<bool> connected(config.peers.size());
  for (std::size_t i = 0; i < connected.size(); ++i) connected[i] = (data[0] >> i) & 1;
  const std::span<const std::uint8_t> pd(data + 1, size - 1);

  (void)credit::decode_credit_params(pd);
  const mesh::CallerVerdict v = mesh::classify_caller(config, pd, connected);
  fuzz_check(v.name == mesh::caller_name(pd), "the verdict's name is not the caller's");

  bool should_accept = false;
  for (std::size_t i = 0; i < 2; ++i) {
    if (v.name == config.peers[i].name && !connected[i]) should_accept = true;
  }
  fuzz_check(v.peer.has_value() == should_accept, "accepted a stranger, or refused a peer");
  if (v.peer) {
    fuzz_check(config.peers[*v.peer].name == v.name, "accepted as the wrong peer");
    fuzz_check(v.reject_reason.empty(), "an accepted caller has a reject reason");
    return 0;
  }
  fuzz_check(!v.reject_reason.empty(), "a refusal without a reason");
  fuzz_check(valid_utf8(v.reject_reason) == v.reject_reason,
             "the reject reason is not valid UTF-8");
  const std::string& r = v.reject_reason;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const auto c = static_cast<unsigned char>(r[i]);
    fuzz_check(c >= 0x20 && c != 0x7F, "a control character in the reject reason");
    fuzz_check(!(c == 0xC2 && i + 1 < r.size() && static_cast<unsigned char>(r[i + 1]) < 0xA0),
               "a C1 control character in the reject reason");
  }
  const std::string line = json_text(nlohmann::json{
      {"event", "notice"}, {"notice", "rejected: " + v.reject_reason}, {"name", v.name}});
  fuzz_check(!nlohmann::json::parse(line, nullptr, false).is_discarded(),
             "the notice is not valid JSON");
  return 0;
}
