// mpa_session.h - one TCP connection going through MPA setup, driven on the event loop.
//
// The session feeds the socket's octets, the time and peer closes into cm::MpaHandshake,
// writes what it produces, and honours its close requests (abortive = RST). It ends in
// exactly one SetupResult: an established TcpConnectionState (the socket and the handshake's
// handover move into it), a ConnectError, or, for an initiator, "retry in revision 1".
// A session runs on one thread at a time. An initiator's runs on the thread that calls
// run() and never touches the event loop until its connection is established. A responder's
// runs on the event thread from start() until the application decides on its Request; then
// the deciding thread take_over()s and drives it to its end (the Reply, the wait for the
// RTR, the establishment), so accept() costs no thread crossing. `mu_` makes that hand-over
// safe: every entry holds it, and an event the loop delivers after the hand-over is ignored.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/runtime/event_loop.h"
#include "core/runtime/rendezvous.h"
#include "core/transport/provider.h"

namespace rdma_interop::transport::tcp {

class TcpConnectionState;

struct SetupResult {
  std::shared_ptr<TcpConnectionState> connection;  // established
  std::optional<ConnectError> error;           // failed
  bool retry_revision1 = false;                // initiator: reconnect in revision 1
};

// The TCP connection a session sets up.
struct SetupSocket {
  runtime::Fd fd;
  sockaddr_in peer{};  // connect()ed or accept4()ed: no getpeername per connection
  // Known without a getsockname: a listener's own address when it is bound to one. Empty
  // (an initiator, a wildcard listener): asked of the socket once, at establishment.
  std::string local_address;
};

class MpaSession : public runtime::IoHandler, public std::enable_shared_from_this<MpaSession> {
 public:
  struct Hooks {
    // Responder: a valid Request arrived; the application decides with accept()/reject().
    std::function<void(const std::shared_ptr<MpaSession>&)> on_request;
    // Exactly once, when the session ends (after its socket moved on or was closed).
    std::function<void(const std::shared_ptr<MpaSession>&, const SetupResult&)> on_finished;
  };

  // `caps` is known up front for an initiator, and comes with accept() for a responder.
  MpaSession(runtime::EventLoop& loop, SetupSocket socket, cm::MpaHandshake handshake,
             std::optional<QpCaps> caps, bool fell_back_to_revision1, Hooks hooks);
  ~MpaSession() override;

  // Watches the socket; the event thread drives the session from then on.
  void start();
  // Instead of start(): the calling thread drives the session, waiting in poll(2) on the
  // socket and keeping the handshake's deadlines itself, until the session ends (its result)
  // or `until` passes (nullopt; the socket is reset). An established connection goes to the
  // event loop then, one epoll_ctl ADD: setup costs no thread crossing.
  std::optional<SetupResult> run(runtime::Clock::time_point until);
  // Any thread, for a started responder nobody else will act on any more (its listener
  // forgot it): stops the event loop driving it, so that the calling thread can accept()
  // or reject() and then run(). False when the session already ended: its outcome waits in
  // outcome().
  bool take_over();
  void accept(std::vector<std::uint8_t> private_data, QpCaps caps);
  // `why`, when given, replaces the handshake's "the application rejected..." as the
  // detail of the outcome (a listener rejecting on its own: overflow, decision timeout).
  void reject(std::vector<std::uint8_t> private_data, std::string why = {});
  // Ends the session at once with an RST, without calling on_finished (the owner is
  // closing); a waiting application gets `why` as a setup failure.
  void abort(const std::string& why);

  // Any thread, once on_request has run: the peer's Request.
  const wire::MpaFrame& request() const { return *request_; }
  const std::string& peer_address() const { return peer_address_; }
  runtime::Clock::time_point started() const { return started_; }
  // Any thread: the application waits here for accept()'s outcome.
  runtime::Rendezvous<SetupResult>& outcome() { return outcome_; }

  void on_io(std::uint32_t events) override;

 private:
  void handle_io(std::uint32_t events);  // on_io's work, for whichever thread drives
  void drive_handshake();
  void handle(cm::CmEvent event);
  void establish();
  void fail(cm::CmEvent event);
  // Ends setup at once: the socket is closed with a reset and the result is this error.
  void reset(cm::CmFailure failure, std::string why);
  void finish(SetupResult result);
  void write_output();
  void rearm_timer();
  void stop_io();

  runtime::EventLoop& loop_;
  runtime::Fd fd_;
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;
  // Held by every entry, recursively: the event thread re-enters through on_finished (a
  // listener whose expiry timer closes the very session whose end it is handling).
  std::recursive_mutex mu_;
  bool on_caller_ = false;  // run() or take_over(): no loop timers, the caller waits
  std::uint32_t interest_ = 0;
  cm::MpaHandshake hs_;
  std::optional<QpCaps> caps_;
  bool fell_back_;
  Hooks hooks_;
  std::string peer_address_;
  std::string local_address_;  // empty until establishment if not known up front
  runtime::Clock::time_point started_ = runtime::Clock::now();
  std::optional<wire::MpaFrame> request_;
  bool request_due_ = false;  // a Request arrived and on_request has not been called yet
  std::vector<std::uint8_t> unsent_;  // handshake octets the socket did not take yet
  std::size_t octets_in_ = 0;         // bounded: setup frames are small
  std::optional<runtime::EventLoop::TimerId> timer_;
  bool finished_ = false;
  std::string reject_reason_;
  runtime::Rendezvous<SetupResult> outcome_;
};

}  // namespace rdma_interop::transport::tcp
