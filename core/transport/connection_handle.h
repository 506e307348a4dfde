// connection_handle.h - the Connection an application holds, over a provider's connection
// state (tcp::TcpConnectionState, verbs::VerbsConnectionState): every call forwards to the
// state, which the event thread may keep alive past the handle; destroying the handle
// releases the state (State::release(): disconnect if still connected, free its resources).
//
// A provider's handle derives from ConnectionHandle<State> and adds only what its state
// answers differently (Terminates, tagged offsets): the forwarding is written once here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/transport/provider.h"

namespace rdma_interop::transport {

template <class State>
class ConnectionHandle : public Connection {
 public:
  // `keepalive` is whatever must outlive the state's event thread (its loop, its context).
  ConnectionHandle(std::shared_ptr<void> keepalive, std::shared_ptr<State> state)
      : keepalive_(std::move(keepalive)), state_(std::move(state)) {}
  ~ConnectionHandle() override { state_->release(); }
  ConnectionHandle(const ConnectionHandle&) = delete;
  ConnectionHandle& operator=(const ConnectionHandle&) = delete;

  const ConnectionInfo& info() const override { return state_->info(); }
  std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access) override {
    return state_->register_memory(addr, length, access);
  }
  bool deregister_memory(std::uint32_t stag) override { return state_->deregister_memory(stag); }
  std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr) override {
    return state_->post_send(wr);
  }
  PostBatch post_sends(std::span<const rdmap::SendWr> wrs) override {
    if constexpr (requires { state_->post_sends(wrs); }) {
      return state_->post_sends(wrs);
    } else {
      return Connection::post_sends(wrs);
    }
  }
  std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr) override {
    return state_->post_recv(wr);
  }
  std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout) override {
    return state_->poll_completions(max, timeout);
  }
  bool receive_here(runtime::WakeFd wake, Millis timeout, Micros poll_first) override {
    if constexpr (requires { state_->receive_here(wake, timeout, poll_first); }) {
      return state_->receive_here(wake, timeout, poll_first);
    } else {
      return Connection::receive_here(wake, timeout, poll_first);
    }
  }
  ConnectionState state() const override { return state_->state(); }
  std::string error_detail() const override { return state_->error_detail(); }
  void disconnect(Millis timeout) override { state_->disconnect(timeout); }
  void terminate(const wire::TerminateCause& cause) override { state_->terminate(cause); }

 protected:
  State& connection_state() const { return *state_; }

 private:
  std::shared_ptr<void> keepalive_;  // declared first: released after the state
  std::shared_ptr<State> state_;
};

}  // namespace rdma_interop::transport
