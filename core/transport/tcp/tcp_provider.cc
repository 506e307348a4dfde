#include "core/transport/tcp/tcp_provider.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "core/runtime/event_loop.h"
#include "core/telemetry/publisher.h"
#include "core/transport/published_listener.h"
#include "core/transport/tcp/tcp_connection.h"
#include "core/transport/tcp/tcp_connection_state.h"
#include "core/transport/tcp/tcp_connector.h"
#include "core/transport/tcp/tcp_listener.h"

namespace rdma_interop::transport::tcp {
namespace {

using Kind = ConnectError::Kind;

// The listen(2) or bind(2) the system refused, with its errno (address_in_use for
// EADDRINUSE, invalid_argument for the rest: EACCES, EADDRNOTAVAIL...).
ConnectError listen_refused(const ProviderUri& where, int err) {
  ConnectError e = connect_error(Kind::kInvalidArgument, "cannot listen on " + where.to_string() +
                                                             ": " + runtime::errno_text(err));
  if (err == EADDRINUSE) e.kind = ConnectError::Kind::kAddressInUse;
  e.sys_errno = err;
  return e;
}

std::optional<ConnectError> check_uri(const ProviderUri& where) {
  if (where.scheme != "tcp") {
    return connect_error(Kind::kInvalidArgument,
                         "the tcp provider cannot use '" + where.to_string() + "'");
  }
  return std::nullopt;
}

class TcpProvider final : public Provider {
 public:
  std::string_view scheme() const override { return "tcp"; }

  Expected<std::unique_ptr<Listener>, ConnectError> listen(const ProviderUri& where,
                                                           const cm::MpaPolicy& policy,
                                                           const ListenOptions& options) override {
    const int backlog = options.backlog;
    if (auto e = check_uri(where)) return unexpected(std::move(*e));
    if (auto e = policy_error(policy)) return unexpected(std::move(*e));
    if (backlog < 1) {
      return unexpected(connect_error(Kind::kInvalidArgument, "backlog must be at least 1"));
    }
    if (options.decision_timeout.count() <= 0 || options.overflow_timeout.count() <= 0) {
      return unexpected(
          connect_error(Kind::kInvalidArgument, "decision and overflow timeouts must be positive"));
    }
    const auto address = runtime::resolve_ipv4(where.host, where.port);
    if (!address) {
      return unexpected(connect_error(Kind::kInvalidArgument, address.error()));
    }
    auto socket = runtime::make_tcp_socket();
    if (!socket) {
      return unexpected(
          connect_error(Kind::kInvalidArgument,
                        "cannot create a socket: " + runtime::errno_text(socket.error())));
    }
    runtime::Fd fd = std::move(*socket);
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // Set once here: an accepted socket is a copy of its listener and inherits TCP_NODELAY
    // (Linux's sk_clone_lock), so accepting costs no setsockopt.
    if (const int err = runtime::tune_connection_socket(fd.get()); err != 0) {
      return unexpected(connect_error(Kind::kInvalidArgument,
                                      "cannot set TCP_NODELAY: " + runtime::errno_text(err)));
    }
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0) {
      return unexpected(listen_refused(where, errno));
    }
    // The kernel's accept queue only buffers bursts until the event thread takes them into
    // the half-open queue; the MPA backlog itself is the engine's (tcp_listener.h).
    const std::uint32_t half_open_limit = options.half_open_limit != 0
                                              ? options.half_open_limit
                                              : cm::default_half_open_limit(backlog);
    const int kernel_backlog = static_cast<int>(
        std::min<std::uint32_t>(std::max<std::uint32_t>(backlog, half_open_limit), 4096));
    if (::listen(fd.get(), kernel_backlog) != 0) return unexpected(listen_refused(where, errno));
    auto state = std::make_shared<TcpListenerState>(*loop_, std::move(fd), policy, options);
    int err = 0;
    loop_->run([&] { err = state->start(); });  // on the loop: on_io may fire at once
    if (err != 0) {
      return unexpected(
          connect_error(Kind::kInvalidArgument,
                        "cannot watch the listening socket: " + runtime::errno_text(err)));
    }
    return publish_listener(std::make_unique<TcpListener>(loop_, std::move(state)), "tcp",
                            publisher_, options.overflow);
  }

  Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) override {
    if (auto e = check_uri(where)) return unexpected(std::move(*e));
    if (auto e = policy_error(options.policy)) return unexpected(std::move(*e));
    if (where.port == 0) {
      return unexpected(connect_error(Kind::kInvalidArgument, "cannot connect to port 0"));
    }
    const auto address = runtime::resolve_ipv4(where.host, where.port);
    if (!address) {
      ConnectError e;
      e.kind = ConnectError::Kind::kUnreachable;
      e.detail = address.error();
      return unexpected(std::move(e));
    }
    // On this thread, TCP connect to established: the event thread only gets the result.
    SetupResult r = connect_on_caller(*loop_, *address, options);
    if (r.connection) {
      return std::unique_ptr<Connection>(
          std::make_unique<TcpConnection>(loop_, std::move(r.connection)));
    }
    return unexpected(r.error.value_or(ConnectError{}));
  }

 private:
  std::shared_ptr<runtime::EventLoop> loop_ = std::make_shared<runtime::EventLoop>();
  // Shared with the listeners' registrations: a listener may outlive the provider. Touches
  // the file system only when the first listener registers.
  std::shared_ptr<telemetry::Publisher> publisher_ = std::make_shared<telemetry::Publisher>();
};

}  // namespace

std::unique_ptr<Provider> make_tcp_provider() {
  return std::make_unique<TcpProvider>();
}

}  // namespace rdma_interop::transport::tcp
