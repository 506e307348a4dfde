// rdma-mesh's acceptor side (tools/rdma-mesh/mesh_caller.h): who is calling.
#include "tools/rdma-mesh/mesh_caller.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/credit/credit_params.h"

namespace rdma_interop::mesh {
namespace {

std::vector<std::uint8_t> request(const std::string& name, std::size_t padding = 0) {
  const std::string text = std::string(credit::kCreditParamsSize, '\x11') + name +
                           std::string(padding, '\0');
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

MeshConfig node_b() {
  MeshConfig c;
  c.name = "B";
  c.peers.push_back(PeerSpec{"A", {}});
  return c;
}

TEST(MeshCaller, NameComesAfterTheCreditParameters) {
  EXPECT_EQ(caller_name(request("node-7")), "node-7");
  EXPECT_EQ(caller_name(request("")), "");
  EXPECT_EQ(caller_name(std::vector<std::uint8_t>(4, 0)), "");
}

// The IB CM pads a REQ's private data with zeros to its fixed size (rdma_cm: 56 octets):
// over RoCE a mesh peer arrives as "A\0\0...", and must still be recognised.
TEST(MeshCaller, ZerosThatTheIbCmPaddedAreNotPartOfTheName) {
  const auto padded = request("A", 56 - credit::kCreditParamsSize - 1);
  ASSERT_EQ(padded.size(), 56u);
  EXPECT_EQ(caller_name(padded), "A");
  const auto v = classify_caller(node_b(), padded, {false});
  ASSERT_TRUE(v.peer.has_value()) << v.reject_reason;
  EXPECT_EQ(*v.peer, 0u);
}

TEST(MeshCaller, StrangersAndTheWrongDirectionAreRefused) {
  EXPECT_FALSE(classify_caller(node_b(), request("C"), {false}).peer);
  MeshConfig a;
  a.name = "A";
  a.peers.push_back(PeerSpec{"B", {}});
  EXPECT_FALSE(classify_caller(a, request("B"), {false}).peer);  // the lower name calls
  EXPECT_FALSE(classify_caller(node_b(), request("A"), {true}).peer);  // already connected
}

}  // namespace
}  // namespace rdma_interop::mesh
