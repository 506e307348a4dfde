#include "core/transport/tcp/tcp_provider.h"

#include <sys/socket.h>

#include <cerrno>

#include "core/transport/tcp/connection_core.h"
#include "core/transport/tcp/event_loop.h"
#include "core/transport/tcp/tcp_connector.h"
#include "core/transport/tcp/tcp_listener.h"

namespace rdma_interop::transport::tcp {
namespace {

ConnectError invalid(std::string detail) {
  ConnectError e;
  e.kind = ConnectError::Kind::kInvalidArgument;
  e.detail = std::move(detail);
  return e;
}

std::optional<ConnectError> check_policy(const cm::MpaPolicy& policy) {
  const auto problems = cm::validate(policy);
  if (problems.empty()) return std::nullopt;
  std::string detail = "unusable MPA policy:";
  for (const auto& p : problems) detail += " " + p + ";";
  detail.pop_back();
  return invalid(std::move(detail));
}

std::optional<ConnectError> check_uri(const ProviderUri& where) {
  if (where.scheme != "tcp") {
    return invalid("the tcp provider cannot use '" + where.to_string() + "'");
  }
  return std::nullopt;
}

class TcpProvider final : public Provider {
 public:
  std::string_view scheme() const override { return "tcp"; }

  Expected<std::unique_ptr<Listener>, ConnectError> listen(const ProviderUri& where,
                                                           const cm::MpaPolicy& policy,
                                                           int backlog) override {
    if (auto e = check_uri(where)) return unexpected(std::move(*e));
    if (auto e = check_policy(policy)) return unexpected(std::move(*e));
    if (backlog < 1) return unexpected(invalid("backlog must be at least 1"));
    const auto address = resolve_ipv4(where.host, where.port);
    if (!address) return unexpected(invalid(address.error()));
    auto socket = make_tcp_socket();
    if (!socket) return unexpected(invalid("cannot create a socket: " + errno_text(socket.error())));
    Fd fd = std::move(*socket);
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0) {
      const int err = errno;
      ConnectError e = invalid("cannot listen on " + where.to_string() + ": " + errno_text(err));
      if (err == EADDRINUSE) e.kind = ConnectError::Kind::kAddressInUse;
      return unexpected(std::move(e));
    }
    if (::listen(fd.get(), backlog) != 0) {
      const int err = errno;
      ConnectError e = invalid("cannot listen on " + where.to_string() + ": " + errno_text(err));
      if (err == EADDRINUSE) e.kind = ConnectError::Kind::kAddressInUse;
      return unexpected(std::move(e));
    }
    auto core = std::make_shared<ListenerCore>(*loop_, std::move(fd), policy, backlog);
    loop_->run([&] { core->start(); });
    return std::unique_ptr<Listener>(std::make_unique<TcpListener>(loop_, std::move(core)));
  }

  Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) override {
    if (auto e = check_uri(where)) return unexpected(std::move(*e));
    if (auto e = check_policy(options.policy)) return unexpected(std::move(*e));
    if (where.port == 0) return unexpected(invalid("cannot connect to port 0"));
    const auto address = resolve_ipv4(where.host, where.port);
    if (!address) {
      ConnectError e;
      e.kind = ConnectError::Kind::kUnreachable;
      e.detail = address.error();
      return unexpected(std::move(e));
    }
    auto result = std::make_shared<Rendezvous<SetupResult>>();
    loop_->post([loop = loop_.get(), peer = *address, options, result] {
      std::make_shared<Connector>(*loop, peer, options, result)->start();
    });
    // The connector's own deadline (options.timeout) guarantees an answer.
    SetupResult r = result->take();
    if (r.connection) {
      return std::unique_ptr<Connection>(
          std::make_unique<TcpConnection>(loop_, std::move(r.connection)));
    }
    return unexpected(r.error.value_or(ConnectError{}));
  }

 private:
  std::shared_ptr<EventLoop> loop_ = std::make_shared<EventLoop>();
};

}  // namespace

std::unique_ptr<Provider> make_tcp_provider() { return std::make_unique<TcpProvider>(); }

}  // namespace rdma_interop::transport::tcp
