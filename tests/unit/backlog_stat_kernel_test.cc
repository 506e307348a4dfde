// backlog-stat's reading of `rdma -j resource show cm_id` (iproute2 5.x/6.x output), and the
// port/pid filters.
#include <gtest/gtest.h>

#include "tools/backlog-stat/kernel_cm_ids.h"
#include "tools/backlog-stat/listener_row.h"

namespace rdma_interop::backlog_stat {
namespace {

// What `rping -s -a 0.0.0.0 -p 7174` on siw0 looks like: the wildcard id and its per-device
// child in LISTEN, plus a connected id that must not be listed.
constexpr const char* kSiwListing = R"([{"ifindex":0,"ifname":"siw0","port":1,"state":"LISTEN","ps":"TCP","pid":311,"comm":"rping","cm-idn":1,"src-addr":"0.0.0.0:7174"},)"
    R"({"ifindex":1,"ifname":"rxe0","port":1,"lqpn":17,"qp-type":"RC","state":"CONNECT","ps":"TCP","pid":400,"comm":"ib_send_bw","cm-idn":2,"src-addr":"10.0.2.15:18515","dst-addr":"10.0.2.2:40000"},)"
    R"({"state":"LISTEN","ps":"TCP","pid":0,"comm":"[nvmet_rdma]","cm-idn":3,"src-addr":"[::]:4420"}])";

TEST(BacklogStatKernel, ListensAreKeptWithTheirAddressDeviceAndOwner) {
  const auto parsed = parse_cm_ids(kSiwListing);
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_EQ(parsed->size(), 2u);
  const auto& rping = (*parsed)[0];
  EXPECT_EQ(rping.device, "siw0");
  EXPECT_EQ(rping.port, 1u);
  EXPECT_EQ(rping.local_address, "0.0.0.0:7174");
  EXPECT_EQ(rping.ps, "TCP");
  EXPECT_EQ(rping.pid, 311);
  EXPECT_EQ(rping.process, "rping");
  EXPECT_EQ((*parsed)[1].device, "");  // not bound to a device yet
  EXPECT_EQ(port_of((*parsed)[1].local_address), 4420);
}

TEST(BacklogStatKernel, OlderSeparatePortAndOneDocumentPerLine) {
  const auto parsed = parse_cm_ids(
      "[{\"ifname\":\"siw0\",\"state\":\"LISTEN\",\"ps\":\"TCP\",\"pid\":5,\"src-addr\":\"0.0.0.0\",\"src-port\":7174}]\n"
      "[{\"ifname\":\"rxe0\",\"state\":\"LISTEN\",\"ps\":\"TCP\",\"pid\":6,\"src-addr\":\"0.0.0.0:9\"}]\n");
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].local_address, "0.0.0.0:7174");
  EXPECT_EQ((*parsed)[1].device, "rxe0");
}

TEST(BacklogStatKernel, EmptyAndGarbage) {
  EXPECT_TRUE(parse_cm_ids("[]")->empty());
  EXPECT_TRUE(parse_cm_ids("")->empty());
  EXPECT_FALSE(parse_cm_ids("error: netlink says no"));
}

TEST(BacklogStatKernel, NoInfinibandClassMeansNoRdma) {
  const auto scan = scan_kernel_listeners("/nonexistent/class/infiniband");
  EXPECT_EQ(scan.status, KernelScan::Status::kNoRdma);
  EXPECT_EQ(status_name(scan.status), "no_rdma");
  EXPECT_NE(scan.detail.find("no RDMA"), std::string::npos);
}

TEST(BacklogStatKernel, FiltersByPortAndPid) {
  auto all = *parse_cm_ids(kSiwListing);
  EXPECT_EQ(filtered(all, {7174, std::nullopt}).size(), 1u);
  EXPECT_EQ(filtered(all, {std::nullopt, 0}).size(), 1u);
  EXPECT_EQ(filtered(all, {7174, 0}).size(), 0u);
  EXPECT_EQ(port_of("[::1]:80"), 80);
  EXPECT_EQ(port_of("nocolon"), std::nullopt);
  EXPECT_EQ(port_of("1.2.3.4:99999"), std::nullopt);
}

}  // namespace
}  // namespace rdma_interop::backlog_stat
