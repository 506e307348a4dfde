#include "core/transport/verbs/rdma_nldev.h"

#include <linux/netlink.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/runtime/socket_util.h"

namespace rdma_interop::transport::verbs {
namespace {

NldevError error_of(int e, const std::string& what) {
  return NldevError{e, what + ": " + runtime::errno_text(e)};
}

NldevError malformed(const std::string& why) {
  return NldevError{EPROTO, "malformed RDMA netlink reply: " + why};
}

void put_attribute(std::vector<std::uint8_t>& out, std::uint16_t type, const void* data,
                   std::size_t size) {
  nlattr header{};
  header.nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + size);
  header.nla_type = type;
  const std::size_t at = out.size();
  out.resize(at + NLA_ALIGN(NLA_HDRLEN + size), 0);
  std::memcpy(out.data() + at, &header, sizeof header);
  if (size > 0) std::memcpy(out.data() + at + NLA_HDRLEN, data, size);
}

void put_u32(std::vector<std::uint8_t>& out, std::uint16_t type, std::uint32_t value) {
  put_attribute(out, type, &value, sizeof value);
}

void put_string(std::vector<std::uint8_t>& out, std::uint16_t type, const std::string& value) {
  put_attribute(out, type, value.c_str(), value.size() + 1);  // the kernel wants the NUL
}

// A NETLINK_RDMA socket, closed on scope exit.
struct Socket {
  int fd = -1;
  Socket() = default;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// Sends one nldev request (`op` with `attributes`) and collects the replies until the answer
// is complete. `what` names the request in errors.
Expected<std::vector<NldevMessage>, NldevError> ask(std::uint16_t op, std::uint16_t flags,
                                                    const std::vector<std::uint8_t>& attributes,
                                                    const std::string& what) {
  Socket s;
  s.fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  if (s.fd < 0) return unexpected(error_of(errno, what + ": socket(AF_NETLINK, NETLINK_RDMA)"));
  // The kernel answers at once; the timeout only keeps a broken kernel from hanging us.
  timeval timeout{2, 0};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);

  const std::uint16_t type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op);
  const std::uint32_t seq = 1;  // the socket is ours alone
  std::vector<std::uint8_t> request(NLMSG_HDRLEN, 0);
  request.insert(request.end(), attributes.begin(), attributes.end());
  nlmsghdr header{};
  header.nlmsg_len = static_cast<std::uint32_t>(request.size());
  header.nlmsg_type = type;
  header.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
  header.nlmsg_seq = seq;
  std::memcpy(request.data(), &header, sizeof header);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(s.fd, request.data(), request.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return unexpected(error_of(errno, what + ": sendto"));
  }

  std::vector<NldevMessage> messages;
  std::vector<std::uint8_t> buffer(64 * 1024);
  for (;;) {
    // MSG_TRUNC: the datagram's real length, so a cut-off one is seen, not half-parsed.
    const ssize_t n = ::recv(s.fd, buffer.data(), buffer.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return unexpected(error_of(errno, what + ": recv"));
    }
    if (static_cast<std::size_t>(n) > buffer.size()) {
      return unexpected(error_of(EMSGSIZE, what + ": a reply larger than 64 KiB"));
    }
    auto batch = parse_nldev_datagram(
        std::span<const std::uint8_t>(buffer.data(), static_cast<std::size_t>(n)), seq, type);
    if (!batch) {
      NldevError e = batch.error();
      e.detail = what + ": " + e.detail;
      return unexpected(e);
    }
    for (auto& m : batch->messages) messages.push_back(std::move(m));
    if (batch->done) return messages;
  }
}

}  // namespace

std::optional<std::uint32_t> NldevMessage::u32(std::uint16_t type) const {
  auto it = attributes.find(type);
  if (it == attributes.end() || it->second.size() != sizeof(std::uint32_t)) return std::nullopt;
  std::uint32_t v = 0;
  std::memcpy(&v, it->second.data(), sizeof v);
  return v;
}

std::optional<std::uint64_t> NldevMessage::u64(std::uint16_t type) const {
  auto it = attributes.find(type);
  if (it == attributes.end()) return std::nullopt;
  if (it->second.size() == sizeof(std::uint32_t)) return u32(type);
  if (it->second.size() != sizeof(std::uint64_t)) return std::nullopt;
  std::uint64_t v = 0;
  std::memcpy(&v, it->second.data(), sizeof v);
  return v;
}

std::optional<std::string> NldevMessage::string(std::uint16_t type) const {
  auto it = attributes.find(type);
  if (it == attributes.end()) return std::nullopt;
  const auto& b = it->second;
  std::size_t n = 0;
  while (n < b.size() && b[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(b.data()), n);
}

Expected<NldevBatch, NldevError> parse_nldev_datagram(std::span<const std::uint8_t> bytes,
                                                      std::uint32_t seq, std::uint16_t type) {
  NldevBatch batch;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t left = bytes.size() - at;
    if (left < NLMSG_HDRLEN) return unexpected(malformed("octets after the last message"));
    nlmsghdr h{};
    std::memcpy(&h, bytes.data() + at, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > left) {
      return unexpected(malformed("a message length of " + std::to_string(h.nlmsg_len) + " with " +
                                  std::to_string(left) + " octets left"));
    }
    const auto payload = bytes.subspan(at + NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
    // The last message need not be padded: stepping past the end ends the loop.
    at += std::min<std::size_t>(NLMSG_ALIGN(h.nlmsg_len), left);
    if (h.nlmsg_seq != seq) continue;
    if (h.nlmsg_type == NLMSG_ERROR) {
      int error = 0;
      if (payload.size() < sizeof error) return unexpected(malformed("a short NLMSG_ERROR"));
      std::memcpy(&error, payload.data(), sizeof error);
      if (error == 0) {  // an ACK
        batch.done = true;
        continue;
      }
      // A negative errno; anything else is not one.
      return unexpected(
          error_of(error < 0 && error > -4096 ? -error : EPROTO, "the kernel answered"));
    }
    if (h.nlmsg_type == NLMSG_DONE) {
      int status = 0;
      if (payload.size() >= sizeof status) std::memcpy(&status, payload.data(), sizeof status);
      if (status < 0) {
        return unexpected(
            error_of(status > -4096 ? -status : EPROTO, "the kernel ended the dump with"));
      }
      batch.done = true;
      continue;
    }
    if (h.nlmsg_type != type) continue;
    NldevMessage m;
    std::size_t a = 0;
    while (a < payload.size()) {
      const std::size_t room = payload.size() - a;
      if (room < NLA_HDRLEN) return unexpected(malformed("octets after the last attribute"));
      nlattr attr{};
      std::memcpy(&attr, payload.data() + a, sizeof attr);
      if (attr.nla_len < NLA_HDRLEN || attr.nla_len > room) {
        return unexpected(malformed("an attribute length of " + std::to_string(attr.nla_len) +
                                    " with " + std::to_string(room) + " octets left"));
      }
      const auto value = payload.subspan(a + NLA_HDRLEN, attr.nla_len - NLA_HDRLEN);
      m.attributes[static_cast<std::uint16_t>(attr.nla_type & NLA_TYPE_MASK)] =
          std::vector<std::uint8_t>(value.begin(), value.end());
      a += std::min<std::size_t>(NLA_ALIGN(attr.nla_len), room);
    }
    batch.messages.push_back(std::move(m));
    if ((h.nlmsg_flags & NLM_F_MULTI) == 0) batch.done = true;
  }
  return batch;
}

Expected<std::vector<NldevDevice>, NldevError> nldev_devices() {
  auto replies = ask(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, {}, "RDMA_NLDEV_CMD_GET dump");
  if (!replies) return unexpected(replies.error());
  std::vector<NldevDevice> devices;
  for (const auto& m : *replies) {
    const auto index = m.u32(RDMA_NLDEV_ATTR_DEV_INDEX);
    const auto name = m.string(RDMA_NLDEV_ATTR_DEV_NAME);
    if (!index || !name) continue;
    NldevDevice d;
    d.index = *index;
    d.name = *name;
    d.protocol = m.string(RDMA_NLDEV_ATTR_DEV_PROTOCOL).value_or("");
    // The uverbs character device's own report carries the driver id (drivers/infiniband/
    // core/uverbs_main.c, ib_uverbs_get_nl_info); rdma-core's provider matching reads it too.
    std::vector<std::uint8_t> attributes;
    put_u32(attributes, RDMA_NLDEV_ATTR_DEV_INDEX, d.index);
    put_string(attributes, RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs");
    auto chardev =
        ask(RDMA_NLDEV_CMD_GET_CHARDEV, 0, attributes, "RDMA_NLDEV_CMD_GET_CHARDEV uverbs");
    if (!chardev) {
      d.driver_error = chardev.error().detail;
    } else {
      for (const auto& c : *chardev) {
        if (auto id = c.u64(RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID)) {
          d.driver_id = static_cast<std::uint32_t>(*id);
        }
      }
      if (!d.driver_id) d.driver_error = "the uverbs chardev reply has no driver id";
    }
    devices.push_back(std::move(d));
  }
  return devices;
}

Expected<std::vector<NldevPort>, NldevError> nldev_ports(std::uint32_t device_index) {
  std::vector<std::uint8_t> attributes;
  put_u32(attributes, RDMA_NLDEV_ATTR_DEV_INDEX, device_index);
  auto replies = ask(RDMA_NLDEV_CMD_PORT_GET, NLM_F_DUMP, attributes,
                     "RDMA_NLDEV_CMD_PORT_GET dump of device " + std::to_string(device_index));
  if (!replies) return unexpected(replies.error());
  std::vector<NldevPort> ports;
  for (const auto& m : *replies) {
    const auto port = m.u32(RDMA_NLDEV_ATTR_PORT_INDEX);
    if (!port) continue;
    NldevPort p;
    p.device_index = m.u32(RDMA_NLDEV_ATTR_DEV_INDEX).value_or(device_index);
    p.port = *port;
    p.netdev_index = m.u32(RDMA_NLDEV_ATTR_NDEV_INDEX);
    p.netdev = m.string(RDMA_NLDEV_ATTR_NDEV_NAME).value_or("");
    ports.push_back(std::move(p));
  }
  return ports;
}

std::string driver_name(std::uint32_t driver_id) {
  switch (driver_id) {
    case RDMA_DRIVER_UNKNOWN:
      return "unknown";
    case RDMA_DRIVER_MLX5:
      return "mlx5";
    case RDMA_DRIVER_MLX4:
      return "mlx4";
    case RDMA_DRIVER_CXGB3:
      return "cxgb3";
    case RDMA_DRIVER_CXGB4:
      return "cxgb4";
    case RDMA_DRIVER_MTHCA:
      return "mthca";
    case RDMA_DRIVER_BNXT_RE:
      return "bnxt_re";
    case RDMA_DRIVER_OCRDMA:
      return "ocrdma";
    case RDMA_DRIVER_NES:
      return "nes";
    case RDMA_DRIVER_IRDMA:
      return "irdma";  // also i40iw, its predecessor
    case RDMA_DRIVER_VMW_PVRDMA:
      return "vmw_pvrdma";
    case RDMA_DRIVER_QEDR:
      return "qedr";
    case RDMA_DRIVER_HNS:
      return "hns";
    case RDMA_DRIVER_USNIC:
      return "usnic";
    case RDMA_DRIVER_RXE:
      return "rxe";
    case RDMA_DRIVER_HFI1:
      return "hfi1";
    case RDMA_DRIVER_QIB:
      return "qib";
    case RDMA_DRIVER_EFA:
      return "efa";
    case RDMA_DRIVER_SIW:
      return "siw";
    case RDMA_DRIVER_ERDMA:
      return "erdma";
    case RDMA_DRIVER_ERDMA + 1:
      return "mana";  // RDMA_DRIVER_MANA, after this build's header
    default:
      return "driver id " + std::to_string(driver_id);
  }
}

}  // namespace rdma_interop::transport::verbs
