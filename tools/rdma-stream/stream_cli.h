// stream_cli.h - what rdma-stream's three commands share: the HOST:PORT they name, the node
// they make (upgrading or plain TCP), and the exit status a socket error means.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/stream/stream_socket.h"
#include "core/util/expected.h"

namespace rdma_interop::stream_cli {

struct Address {
  std::string host;
  std::uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

// "HOST:PORT" (IPv4 address or name, a port 0-65535, 0 only when `any_port`), or one
// sentence saying what is wrong.
Expected<Address, std::string> parse_address(std::string_view text, bool any_port);

// What every command takes besides its own options.
struct Common {
  bool no_upgrade = false;  // plain TCP: never offer, decline every offer
  bool json = false;
  double timeout_s = 10;    // a connect's TCP setup and upgrade, at most
};

stream::NodeConfig node_config(const Common& common);
std::chrono::milliseconds timeout(const Common& common);

// The exit status (tools/common/exit_status.h) of a connect that failed with `error`:
// unreachable for a refused, unanswered or unroutable address, failed otherwise.
int connect_exit_status(int error);
// The exit status of a listen that failed with `error`: cannot run.
int listen_exit_status(int error);

// "upgraded" or "plain".
std::string_view how(const stream::Socket& socket);

// Sends all of `data` (a Socket may take part of it), waiting up to `timeout` each time it
// takes nothing. 0 or the errno that stopped it.
int send_all(stream::Socket& socket, const std::uint8_t* data, std::size_t size,
             std::chrono::milliseconds timeout);

}  // namespace rdma_interop::stream_cli
