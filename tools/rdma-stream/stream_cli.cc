#include "tools/rdma-stream/stream_cli.h"

#include <cerrno>
#include <span>

#include "tools/common/exit_status.h"
#include "tools/common/number_option.h"

namespace rdma_interop::stream_cli {

Expected<Address, std::string> parse_address(std::string_view text, bool any_port) {
  if (text.find("://") != std::string_view::npos) {
    return unexpected("'" + std::string(text) +
                      "' is a URI: rdma-stream takes HOST:PORT, as nc does (the upgrade "
                      "chooses the transport)");
  }
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return unexpected("'" + std::string(text) + "' is not HOST:PORT");
  }
  const auto port = tools::parse_integer(text.substr(colon + 1), any_port ? 0 : 1, 65535);
  if (!port) {
    return unexpected("'" + std::string(text) + "': the port is not a number from " +
                      (any_port ? "0" : "1") + " to 65535");
  }
  return Address{std::string(text.substr(0, colon)), static_cast<std::uint16_t>(*port)};
}

stream::NodeConfig node_config(const Common& common) {
  stream::NodeConfig c;
  c.offer = !common.no_upgrade;
  c.accept_upgrades = !common.no_upgrade;
  return c;
}

std::chrono::milliseconds timeout(const Common& common) {
  return std::chrono::milliseconds(static_cast<long long>(common.timeout_s * 1000));
}

int connect_exit_status(int error) {
  switch (error) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return tools::kExitUnreachable;
    default:
      return tools::kExitFailed;
  }
}

int listen_exit_status(int /*error*/) {
  // EADDRINUSE, EADDRNOTAVAIL, EACCES, a name that does not resolve: this node cannot
  // listen there.
  return tools::kExitCannotRun;
}

std::string_view how(const stream::Socket& socket) {
  return socket.upgraded() ? "upgraded" : "plain";
}

int send_all(stream::Socket& socket, const std::uint8_t* data, std::size_t size,
             std::chrono::milliseconds timeout) {
  while (size > 0) {
    auto n = socket.send(std::span<const std::uint8_t>(data, size), {.timeout = timeout});
    if (!n) return n.error();
    data += *n;
    size -= *n;
  }
  return 0;
}

}  // namespace rdma_interop::stream_cli
