// tcp_connector.h - the initiator's way to an established connection: a nonblocking TCP
// connect, then MPA setup, and one new TCP connection in revision 1 when the handshake
// asks for it (cxgb4's fallback). One deadline (ConnectOptions::timeout) covers each
// attempt. A failed attempt the listener may take later (backlog_full, TCP refused or
// reset, no Reply in time) is retried up to ConnectOptions::retries times after a backoff
// with full jitter; the error reports the attempts made. Event thread only.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <optional>
#include <random>

#include "core/runtime/event_loop.h"
#include "core/runtime/rendezvous.h"
#include "core/transport/provider.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

// Whether a failed attempt is worth another (see ConnectOptions). `tcp_errno` is the
// errno of a failed TCP connect (kUnreachable), 0 otherwise.
bool retryable(const ConnectError& error, int tcp_errno);

// The sleep before retry `retry` (1-based): uniform in [0, min(max, base * 2^(retry-1))].
Millis retry_delay(const ConnectOptions& options, std::uint32_t retry, std::mt19937_64& rng);

class Connector : public runtime::IoHandler, public std::enable_shared_from_this<Connector> {
 public:
  Connector(runtime::EventLoop& loop, const sockaddr_in& peer, ConnectOptions options,
            std::shared_ptr<runtime::Rendezvous<SetupResult>> result);
  void start();
  void on_io(std::uint32_t events) override;

 private:
  void begin_attempt();
  void attempt();
  void on_connected();
  void on_session_finished(const SetupResult& result);
  void end_attempt(SetupResult result);
  void fail(ConnectError::Kind kind, std::string detail, int tcp_errno = 0);
  void stop_watching();

  runtime::EventLoop& loop_;
  sockaddr_in peer_;
  ConnectOptions options_;
  std::shared_ptr<runtime::Rendezvous<SetupResult>> result_;
  std::mt19937_64 rng_;
  runtime::Fd fd_;
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;
  bool retried_ = false;  // this attempt's revision-1 reconnect
  bool done_ = false;
  bool attempt_over_ = false;
  std::uint32_t attempts_ = 0;
  int tcp_errno_ = 0;
  std::optional<runtime::EventLoop::TimerId> deadline_;
  std::shared_ptr<MpaSession> session_;
};

}  // namespace rdma_interop::transport::tcp
