// rdma_nldev.h - what the kernel's RDMA netlink interface (nldev, the one iproute2's `rdma`
// asks) says about devices and ports: the facts verbs has no call for.
//
// Verbs cannot name an iWARP port's network interface (siw, cxgb4 and irdma GID entries carry
// no netdev; only RoCE's do), nor the kernel driver behind a device. nldev has both:
//   nldev_devices()       RDMA_NLDEV_CMD_GET (dump): each device's index, name and protocol
//                         ("iw", "roce", "ib"); then, per device, RDMA_NLDEV_CMD_GET_CHARDEV
//                         for "uverbs": the kernel driver id (enum rdma_driver_id) that
//                         rdma-core itself matches its providers by
//   nldev_ports(index)    RDMA_NLDEV_CMD_PORT_GET (dump of one device's ports): each port's
//                         netdev name and ifindex, as `rdma link` prints them
// Neither needs privilege. A kernel without RDMA netlink (or without the device) answers
// with an errno, returned as NldevError; nothing here throws.
//
// Threading: each call opens its own NETLINK_RDMA socket and closes it before returning;
// there is no shared state, so any thread may call anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

// Why a netlink request failed: the errno (the kernel's, or the socket call's) and a
// sentence naming the request.
struct NldevError {
  int error = 0;
  std::string detail;
};

struct NldevDevice {
  std::uint32_t index = 0;  // RDMA_NLDEV_ATTR_DEV_INDEX: the kernel's device index
  std::string name;         // "siw0"
  std::string protocol;     // RDMA_NLDEV_ATTR_DEV_PROTOCOL: "iw", "roce", "ib"; "" if absent
  // RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, absent when the uverbs chardev query failed (old kernel,
  // no ib_uverbs): driver_name() turns it into "siw", "rxe", "mlx5", ...
  std::optional<std::uint32_t> driver_id;
  std::string driver_error;  // why driver_id is absent
};

struct NldevPort {
  std::uint32_t device_index = 0;
  std::uint32_t port = 0;                     // RDMA_NLDEV_ATTR_PORT_INDEX, from 1
  std::optional<std::uint32_t> netdev_index;  // RDMA_NLDEV_ATTR_NDEV_INDEX
  std::string netdev;                         // RDMA_NLDEV_ATTR_NDEV_NAME; "" when none
};

// Every RDMA device the kernel has in this network namespace (RDMA_NLDEV_CMD_GET dump).
// The error is the dump's; a failed driver query is per device (NldevDevice::driver_error).
Expected<std::vector<NldevDevice>, NldevError> nldev_devices();

// The ports of the device with kernel index `device_index` (RDMA_NLDEV_CMD_PORT_GET dump; the
// kernel dumps one device's ports per request and answers EINVAL without a device index).
Expected<std::vector<NldevPort>, NldevError> nldev_ports(std::uint32_t device_index);

// The kernel driver of an enum rdma_driver_id value: "siw", "rxe", "mlx5", "cxgb4", "irdma",
// ...; "unknown" for RDMA_DRIVER_UNKNOWN (0), "driver id N" for a value this build does not
// know (a newer kernel's).
std::string driver_name(std::uint32_t driver_id);

// ---- The parser, public for its tests ------------------------------------------------------

// One reply message: its attributes by type (NLA_TYPE_MASK applied; a repeated type keeps
// the last). The getters check sizes: a u32 of 3 octets is absent, not read past its end.
struct NldevMessage {
  std::map<std::uint16_t, std::vector<std::uint8_t>> attributes;
  std::optional<std::uint32_t> u32(std::uint16_t type) const;
  // A u32 or a u64 payload (the header calls the driver id u64; kernels send a u32).
  std::optional<std::uint64_t> u64(std::uint16_t type) const;
  // The payload up to its first NUL (or all of it when there is none).
  std::optional<std::string> string(std::uint16_t type) const;
};

// What one datagram held: the replies of type `type` to request `seq`, and whether the
// answer is complete (NLMSG_DONE of a dump, an ACK, or a reply without NLM_F_MULTI).
struct NldevBatch {
  std::vector<NldevMessage> messages;
  bool done = false;
};

// Parses one received datagram. Every length is checked against what remains (a message or
// attribute claiming more than the datagram holds is an EPROTO error, never a read past the
// end); messages for another sequence number are skipped. NLMSG_ERROR with a non-zero error,
// and a dump's NLMSG_DONE carrying a negative status, are returned as that errno.
Expected<NldevBatch, NldevError> parse_nldev_datagram(std::span<const std::uint8_t> bytes,
                                                      std::uint32_t seq, std::uint16_t type);

}  // namespace rdma_interop::transport::verbs
