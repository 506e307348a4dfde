// tcp_connector.h - the initiator's way to an established connection: a nonblocking TCP
// connect, then MPA setup, and one new TCP connection in revision 1 when the handshake
// asks for it (cxgb4's fallback). One deadline covers all of it. Event thread only.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <optional>

#include "core/transport/provider.h"
#include "core/transport/tcp/event_loop.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

class Connector : public IoHandler, public std::enable_shared_from_this<Connector> {
 public:
  Connector(EventLoop& loop, const sockaddr_in& peer, ConnectOptions options,
            std::shared_ptr<Rendezvous<SetupResult>> result);
  void start();
  void on_io(std::uint32_t events) override;

 private:
  void attempt();
  void on_connected();
  void on_session_finished(const SetupResult& result);
  void deliver(SetupResult result);
  void fail(ConnectError::Kind kind, std::string detail);
  void stop_watching();

  EventLoop& loop_;
  sockaddr_in peer_;
  ConnectOptions options_;
  std::shared_ptr<Rendezvous<SetupResult>> result_;
  Fd fd_;
  EventLoop::Token token_ = 0;
  bool watching_ = false;
  bool retried_ = false;
  bool done_ = false;
  std::optional<EventLoop::TimerId> deadline_;
  std::shared_ptr<MpaSession> session_;
};

}  // namespace rdma_interop::transport::tcp
