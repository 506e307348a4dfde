// tcp_listener.h - the responder side: accept TCP connections, run MPA setup on each, and
// queue valid Requests for the application (next_request -> accept/reject).
//
// The listener's backlog is a cm::ListenBacklog (core/cm/listen_backlog.h) driven from the
// event thread: a TCP connection is half-open while its MpaSession waits for the Request; a
// complete Request takes a backlog slot (delivered to next_request) until the application
// accepts or rejects it, or the decision timeout expires it. Over the backlog, by the
// listener's policy: `reject` answers at once with the MPA Reject carrying
// cm::kBacklogFullMarker; `drop` leaves the Request unanswered in FIFO order until a slot
// frees or it expires, and meanwhile stops accepting new TCP connections, so newcomers wait
// in the kernel's accept queue as they would for a TCP server. The engine's counters and
// events are the listener's; every connection that ends before its Request reached the
// application is also reported once through take_setup_failures().
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cm/listen_backlog.h"
#include "core/runtime/event_loop.h"
#include "core/transport/provider.h"
#include "core/transport/tcp/mpa_session.h"

namespace rdma_interop::transport::tcp {

// The engine's configuration for a tcp listener: ListenOptions plus the policy's request
// timeout as the half-open expiry.
cm::BacklogConfig backlog_config(const cm::MpaPolicy& policy, const ListenOptions& options);

class TcpListenerState : public runtime::IoHandler,
                         public std::enable_shared_from_this<TcpListenerState> {
 public:
  TcpListenerState(runtime::EventLoop& loop, runtime::Fd listening, const cm::MpaPolicy& policy,
                   const ListenOptions& options);

  int start();  // 0, or the errno of watching the socket
  // Application side, any thread.
  struct Handout {
    std::shared_ptr<MpaSession> session;
    cm::BacklogConnId id = 0;
  };
  std::optional<Handout> next_request(Millis timeout);
  cm::BacklogCounters counters() const;
  std::vector<Listener::BacklogEvent> take_backlog_events();
  std::vector<Listener::SetupFailure> take_setup_failures();
  void close();
  const std::string& local_address() const { return local_address_; }

  // Any thread: the application decided on a handed-out Request. True: the listener lets
  // go of the session (the caller take_over()s it). False when the Request no longer holds
  // a slot (it expired, or its peer went away): the decision is void and the session has
  // its outcome, or will have it from the event thread.
  bool decide(cm::BacklogConnId id, bool accept);

  void on_io(std::uint32_t events) override;

 private:
  // A session the listener still owns (until it finishes or the listener closes it).
  struct Tracked {
    std::shared_ptr<MpaSession> session;
    bool handed_out = false;
  };
  // What to do to a session once mu_ is released (its hooks take mu_).
  struct Deferred {
    std::shared_ptr<MpaSession> session;
    cm::BacklogActionType action;
  };

  void on_request(const std::shared_ptr<MpaSession>& session);
  void on_finished(const std::shared_ptr<MpaSession>& session, const SetupResult& result);
  // mu_ held: turns the engine's output into ready_ entries, events and failures, and
  // returns the socket work and the deliveries for after the unlock.
  // A kClose says why (cm::BacklogCloseReason): the failure reported is the engine's count.
  std::vector<Deferred> settle_locked(const std::vector<cm::BacklogAction>& actions);
  void run_deferred(const std::vector<Deferred>& work);  // mu_ not held
  void after_engine();                                   // event thread, mu_ not held
  // mu_ not held, after after_engine(): one next_request() woken per delivery in `work`.
  void wake_acceptors(const std::vector<Deferred>& work);
  void record_failure(const std::shared_ptr<MpaSession>& session, ConnectError error);
  void on_timer();

  runtime::EventLoop& loop_;
  runtime::Fd listening_;
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;
  std::uint32_t interest_ = 0;
  bool out_of_descriptors_ = false;  // accept paused for a moment (EMFILE)
  const cm::MpaPolicy policy_;
  const std::string local_address_;
  // Not a wildcard: an accepted connection's local address is the listener's own.
  const bool bound_to_one_address_;
  std::optional<runtime::EventLoop::TimerId> timer_;
  cm::BacklogConnId next_id_ = 1;  // event thread

  mutable std::mutex mu_;
  std::condition_variable cv_;
  cm::ListenBacklog backlog_;                                // guarded by mu_
  std::unordered_map<cm::BacklogConnId, Tracked> sessions_;  // guarded by mu_
  std::unordered_map<const MpaSession*, cm::BacklogConnId> ids_;
  std::deque<Handout> ready_;  // delivered, not yet taken
  std::deque<Listener::BacklogEvent> events_;
  std::deque<Listener::SetupFailure> failures_;
  bool closed_ = false;
};

class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<runtime::EventLoop> loop, std::shared_ptr<TcpListenerState> state)
      : loop_(std::move(loop)), state_(std::move(state)) {}
  ~TcpListener() override { state_->close(); }

  std::string local_address() const override { return state_->local_address(); }
  std::unique_ptr<PendingConnection> next_request(Millis timeout) override;
  Counters counters() const override { return state_->counters(); }
  std::vector<BacklogEvent> take_backlog_events() override { return state_->take_backlog_events(); }
  std::vector<SetupFailure> take_setup_failures() override { return state_->take_setup_failures(); }
  void close() override { state_->close(); }

 private:
  std::shared_ptr<runtime::EventLoop> loop_;
  std::shared_ptr<TcpListenerState> state_;
};

// A Request handed to the application. Destroying it undecided rejects it. Its decision
// frees the backlog slot and runs on the deciding thread: accept() sends the Reply, waits
// for the RTR and establishes; reject() sends the Reject Reply and closes. After the
// decision timeout accept() fails (local_rejected, the detail says the decision came too
// late).
class TcpPendingConnection final : public PendingConnection {
 public:
  TcpPendingConnection(std::shared_ptr<runtime::EventLoop> loop,
                       std::weak_ptr<TcpListenerState> state, TcpListenerState::Handout handout)
      : loop_(std::move(loop)),
        state_(std::move(state)),
        session_(std::move(handout.session)),
        id_(handout.id) {}
  ~TcpPendingConnection() override;

  const wire::MpaFrame& request() const override { return session_->request(); }
  std::string peer_address() const override { return session_->peer_address(); }
  Expected<std::unique_ptr<Connection>, ConnectError> accept(std::vector<std::uint8_t> private_data,
                                                             const QpCaps& caps) override;
  void reject(std::vector<std::uint8_t> private_data) override;

 private:
  bool claim();  // the first decision wins; false for any later one
  // The listener's part of the decision, then the session to this thread: false when the
  // decision came too late and the session's outcome is already decided.
  bool decide(bool accept);

  std::shared_ptr<runtime::EventLoop> loop_;
  std::weak_ptr<TcpListenerState> state_;
  std::shared_ptr<MpaSession> session_;
  cm::BacklogConnId id_;
  std::mutex mu_;
  bool decided_ = false;
};

}  // namespace rdma_interop::transport::tcp
