// The RDMA netlink reply parser (core/transport/verbs/rdma_nldev.h): a dump's messages and
// their attributes come out whole, and every length that claims more than the datagram holds
// is an EPROTO error rather than a read past the end.
#include "core/transport/verbs/rdma_nldev.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_netlink.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace rdma_interop::transport::verbs {
namespace {

constexpr std::uint32_t kSeq = 7;
constexpr std::uint16_t kPortGet = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_PORT_GET);

using Bytes = std::vector<std::uint8_t>;

void put_attribute(Bytes& out, std::uint16_t type, const void* data, std::size_t size) {
  nlattr a{};
  a.nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + size);
  a.nla_type = type;
  const std::size_t at = out.size();
  out.resize(at + NLA_ALIGN(NLA_HDRLEN + size), 0);
  std::memcpy(out.data() + at, &a, sizeof a);
  std::memcpy(out.data() + at + NLA_HDRLEN, data, size);
}

void put_u32(Bytes& out, std::uint16_t type, std::uint32_t v) {
  put_attribute(out, type, &v, sizeof v);
}

void put_string(Bytes& out, std::uint16_t type, const std::string& s) {
  put_attribute(out, type, s.c_str(), s.size() + 1);
}

// Appends one netlink message with `payload` to `datagram`.
void put_message(Bytes& datagram, std::uint16_t type, std::uint16_t flags, const Bytes& payload,
                 std::uint32_t seq = kSeq) {
  nlmsghdr h{};
  h.nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + payload.size());
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = seq;
  const std::size_t at = datagram.size();
  datagram.resize(at + NLMSG_ALIGN(h.nlmsg_len), 0);
  std::memcpy(datagram.data() + at, &h, sizeof h);
  // An empty payload may have no storage (data() == nullptr): memcpy must not see it.
  if (!payload.empty()) {
    std::memcpy(datagram.data() + at + NLMSG_HDRLEN, payload.data(), payload.size());
  }
}

Bytes port_payload(std::uint32_t port, const std::string& netdev) {
  Bytes p;
  put_u32(p, RDMA_NLDEV_ATTR_DEV_INDEX, 0);
  put_string(p, RDMA_NLDEV_ATTR_DEV_NAME, "siw0");
  put_u32(p, RDMA_NLDEV_ATTR_PORT_INDEX, port);
  put_u32(p, RDMA_NLDEV_ATTR_NDEV_INDEX, 2);
  put_string(p, RDMA_NLDEV_ATTR_NDEV_NAME, netdev);
  return p;
}

Bytes status_payload(int status) {
  Bytes p(sizeof(nlmsgerr), 0);
  std::memcpy(p.data(), &status, sizeof status);
  return p;
}

Expected<NldevBatch, NldevError> parse(const Bytes& datagram) {
  return parse_nldev_datagram(datagram, kSeq, kPortGet);
}

TEST(RdmaNldev, DumpRepliesAndTheirDoneComeOutWhole) {
  Bytes d;
  put_message(d, kPortGet, NLM_F_MULTI, port_payload(1, "eth0"));
  put_message(d, kPortGet, NLM_F_MULTI, port_payload(2, "veth-a"));
  put_message(d, NLMSG_DONE, NLM_F_MULTI, status_payload(0));
  auto batch = parse(d);
  ASSERT_TRUE(batch) << batch.error().detail;
  EXPECT_TRUE(batch->done);
  ASSERT_EQ(batch->messages.size(), 2u);
  EXPECT_EQ(batch->messages[0].u32(RDMA_NLDEV_ATTR_PORT_INDEX), 1u);
  EXPECT_EQ(batch->messages[0].string(RDMA_NLDEV_ATTR_NDEV_NAME), "eth0");
  EXPECT_EQ(batch->messages[1].string(RDMA_NLDEV_ATTR_NDEV_NAME), "veth-a");
  EXPECT_EQ(batch->messages[1].u32(RDMA_NLDEV_ATTR_NDEV_INDEX), 2u);
  EXPECT_FALSE(batch->messages[1].string(RDMA_NLDEV_ATTR_FW_VERSION).has_value());
}

TEST(RdmaNldev, ADumpSpreadOverDatagramsIsDoneOnlyAtItsEnd) {
  Bytes first;
  put_message(first, kPortGet, NLM_F_MULTI, port_payload(1, "eth0"));
  auto batch = parse(first);
  ASSERT_TRUE(batch);
  EXPECT_FALSE(batch->done);
  EXPECT_EQ(batch->messages.size(), 1u);
}

TEST(RdmaNldev, AReplyWithoutMultiIsTheWholeAnswer) {
  Bytes d;
  put_message(d, kPortGet, 0, port_payload(1, "eth0"));
  auto batch = parse(d);
  ASSERT_TRUE(batch);
  EXPECT_TRUE(batch->done);
  EXPECT_EQ(batch->messages.size(), 1u);
}

TEST(RdmaNldev, OtherSequenceNumbersAndTypesAreSkipped) {
  Bytes d;
  put_message(d, kPortGet, NLM_F_MULTI, port_payload(1, "stale"), kSeq + 1);
  put_message(d, RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET), NLM_F_MULTI,
              port_payload(1, "other"));
  put_message(d, kPortGet, NLM_F_MULTI, port_payload(1, "eth0"));
  auto batch = parse(d);
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->messages.size(), 1u);
  EXPECT_EQ(batch->messages[0].string(RDMA_NLDEV_ATTR_NDEV_NAME), "eth0");
}

TEST(RdmaNldev, TheKernelsErrorIsItsErrno) {
  Bytes d;
  put_message(d, NLMSG_ERROR, 0, status_payload(-EOPNOTSUPP));
  auto batch = parse(d);
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.error().error, EOPNOTSUPP);
  EXPECT_NE(batch.error().detail.find("EOPNOTSUPP"), std::string::npos) << batch.error().detail;

  Bytes ack;
  put_message(ack, NLMSG_ERROR, 0, status_payload(0));
  auto acked = parse(ack);
  ASSERT_TRUE(acked);
  EXPECT_TRUE(acked->done);

  Bytes failed_dump;
  put_message(failed_dump, NLMSG_DONE, NLM_F_MULTI, status_payload(-EINVAL));
  auto dump = parse(failed_dump);
  ASSERT_FALSE(dump);
  EXPECT_EQ(dump.error().error, EINVAL);
}

TEST(RdmaNldev, AnAttributeLongerThanItsMessageIsRefused) {
  Bytes p = port_payload(1, "eth0");
  nlattr a{};
  a.nla_len = 200;  // the message has fewer octets left
  a.nla_type = RDMA_NLDEV_ATTR_NDEV_NAME;
  p.resize(p.size() + sizeof a);
  std::memcpy(p.data() + p.size() - sizeof a, &a, sizeof a);
  Bytes d;
  put_message(d, kPortGet, 0, p);
  auto batch = parse(d);
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.error().error, EPROTO);
}

TEST(RdmaNldev, AnAttributeShorterThanItsHeaderIsRefused) {
  // nla_len 0 would never advance: a parser that trusted it would loop for ever.
  Bytes p(8, 0);
  Bytes d;
  put_message(d, kPortGet, 0, p);
  auto batch = parse(d);
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.error().error, EPROTO);
}

TEST(RdmaNldev, AMessageLongerThanTheDatagramIsRefused) {
  Bytes d;
  put_message(d, kPortGet, 0, port_payload(1, "eth0"));
  d.resize(d.size() - 8);  // cut off
  auto batch = parse(d);
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.error().error, EPROTO);

  Bytes tiny;
  put_message(tiny, kPortGet, 0, {});
  nlmsghdr h{};
  std::memcpy(&h, tiny.data(), sizeof h);
  h.nlmsg_len = 4;  // shorter than its own header
  std::memcpy(tiny.data(), &h, sizeof h);
  EXPECT_FALSE(parse(tiny));

  Bytes trailing;
  put_message(trailing, kPortGet, 0, port_payload(1, "eth0"));
  trailing.resize(trailing.size() + 6, 0);
  EXPECT_FALSE(parse(trailing));
}

TEST(RdmaNldev, GettersCheckTheSize) {
  NldevMessage m;
  m.attributes[1] = {1, 2, 3};                 // not a u32
  m.attributes[2] = {42, 0, 0, 0};             // u32 42
  m.attributes[3] = {1, 0, 0, 0, 1, 0, 0, 0};  // u64 2^32 + 1
  m.attributes[4] = {'e', 't', 'h'};           // a string without its NUL
  EXPECT_FALSE(m.u32(1).has_value());
  EXPECT_FALSE(m.u64(1).has_value());
  EXPECT_EQ(m.u32(2), 42u);
  EXPECT_EQ(m.u64(2), 42u);  // a driver id sent as u32
  EXPECT_EQ(m.u64(3), (std::uint64_t{1} << 32) + 1);
  EXPECT_EQ(m.string(4), "eth");
  EXPECT_FALSE(m.u32(5).has_value());
}

TEST(RdmaNldev, RandomDatagramsNeverReadPastTheirEnd) {
  // Run under the sanitizer tier, this is the check that matters; here it must not crash.
  std::mt19937 rng(20240611);
  Bytes good;
  put_message(good, kPortGet, NLM_F_MULTI, port_payload(1, "eth0"));
  put_message(good, NLMSG_DONE, NLM_F_MULTI, status_payload(0));
  for (int i = 0; i < 20000; ++i) {
    Bytes d = good;
    const int flips = 1 + static_cast<int>(rng() % 6);
    for (int f = 0; f < flips; ++f) d[rng() % d.size()] = static_cast<std::uint8_t>(rng());
    d.resize(rng() % (d.size() + 1));
    auto batch = parse(d);
    if (batch) {
      for (const auto& m : batch->messages) {
        for (const auto& [type, value] : m.attributes) EXPECT_LE(value.size(), d.size());
      }
    }
  }
}

TEST(RdmaNldev, DriverIdsHaveTheirKernelNames) {
  EXPECT_EQ(driver_name(RDMA_DRIVER_SIW), "siw");
  EXPECT_EQ(driver_name(RDMA_DRIVER_RXE), "rxe");
  EXPECT_EQ(driver_name(RDMA_DRIVER_MLX5), "mlx5");
  EXPECT_EQ(driver_name(RDMA_DRIVER_IRDMA), "irdma");
  EXPECT_EQ(driver_name(RDMA_DRIVER_UNKNOWN), "unknown");
  EXPECT_EQ(driver_name(999), "driver id 999");
}

}  // namespace
}  // namespace rdma_interop::transport::verbs
