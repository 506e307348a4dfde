// rdma-probe's "negotiated" object: the keys and values its reports and the lab report read.
#include "tools/rdma-probe/negotiated_json.h"

#include <gtest/gtest.h>

#include "core/cm/mpa_policy.h"

namespace rdma_interop::probe {
namespace {

using cm::NegotiatedParams;
using cm::RtrType;

TEST(NegotiatedJson, HasTheRdmaProbeShape) {
  NegotiatedParams n;
  n.revision = 2;
  n.crc = true;
  n.enhanced = true;
  n.peer_to_peer = true;
  n.rtr = RtrType::kRead;
  n.ird = 16;
  n.ord = 16;
  n.peer_ird = 32;
  n.peer_ord = 32;
  EXPECT_EQ(to_json(n).dump(),
            R"({"revision":2,"crc":true,"markers_to_peer":false,"markers_from_peer":false,)"
            R"("enhanced":true,"peer_to_peer":true,"rtr":"read","ird":16,"ord":16,)"
            R"("peer_ird":32,"peer_ord":32})");
  n.rtr.reset();
  EXPECT_TRUE(to_json(n)["rtr"].is_null());
}

}  // namespace
}  // namespace rdma_interop::probe
