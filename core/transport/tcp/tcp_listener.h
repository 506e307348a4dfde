// tcp_listener.h - the responder side: accept TCP connections, run MPA setup on each, and
// queue valid Requests for the application (next_request -> accept/reject).
//
// At most `backlog` Requests wait for the application; more are reset and counted. Every
// connection that fails before its Request reached the application (timeouts, garbage,
// the peer giving up while queued) is counted in setup_failures and never returned.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/transport/provider.h"
#include "core/transport/tcp/event_loop.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

class ListenerCore : public IoHandler, public std::enable_shared_from_this<ListenerCore> {
 public:
  ListenerCore(EventLoop& loop, Fd listening, const cm::MpaPolicy& policy, int backlog);

  void start();  // event thread
  // Application side, any thread.
  std::shared_ptr<MpaSession> next_request(Millis timeout);
  Listener::Counters counters() const;
  std::vector<Listener::SetupFailure> take_setup_failures();
  void close();
  const std::string& local_address() const { return local_address_; }

  void on_io(std::uint32_t events) override;

 private:
  void on_request(const std::shared_ptr<MpaSession>& session);
  void on_finished(const std::shared_ptr<MpaSession>& session, const SetupResult& result);

  EventLoop& loop_;
  Fd listening_;
  EventLoop::Token token_ = 0;
  bool watching_ = false;
  const cm::MpaPolicy policy_;
  const std::size_t backlog_;
  const std::string local_address_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<MpaSession>> ready_;            // Requests for the application
  std::unordered_set<std::shared_ptr<MpaSession>> in_setup_;  // not yet handed out
  Listener::Counters counters_;
  std::deque<Listener::SetupFailure> failures_;  // guarded by mu_
  void record_failure(const std::shared_ptr<MpaSession>& session, ConnectError error);
  bool closed_ = false;
};

class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<EventLoop> loop, std::shared_ptr<ListenerCore> core)
      : loop_(std::move(loop)), core_(std::move(core)) {}
  ~TcpListener() override { core_->close(); }

  std::string local_address() const override { return core_->local_address(); }
  std::unique_ptr<PendingConnection> next_request(Millis timeout) override;
  Counters counters() const override { return core_->counters(); }
  std::vector<SetupFailure> take_setup_failures() override {
    return core_->take_setup_failures();
  }
  void close() override { core_->close(); }

 private:
  std::shared_ptr<EventLoop> loop_;
  std::shared_ptr<ListenerCore> core_;
};

// A Request handed to the application. Destroying it undecided rejects it.
class TcpPendingConnection final : public PendingConnection {
 public:
  TcpPendingConnection(std::shared_ptr<EventLoop> loop, std::shared_ptr<MpaSession> session)
      : loop_(std::move(loop)), session_(std::move(session)) {}
  ~TcpPendingConnection() override;

  const wire::MpaFrame& request() const override { return session_->request(); }
  std::string peer_address() const override { return session_->peer_address(); }
  Expected<std::unique_ptr<Connection>, ConnectError> accept(
      std::vector<std::uint8_t> private_data, const QpCaps& caps) override;
  void reject(std::vector<std::uint8_t> private_data) override;

 private:
  std::shared_ptr<EventLoop> loop_;
  std::shared_ptr<MpaSession> session_;
  std::mutex mu_;
  bool decided_ = false;
};

}  // namespace rdma_interop::transport::tcp
