// provider.h - the verbs-like API every provider offers (tcp and verbs; the simulator is not one).
//
// A test or tool opens a provider by URI scheme, then listens or connects with an MPA
// policy; a connection is a queue pair whose work requests complete into a completion queue
// of its own or one shared with other connections (QpCaps::cq). Providers translate between
// this API and their transport; the protocol logic lives in core/cm and core/rdmap.
//
// Threading (the one contract every provider keeps):
// - Every call is thread-safe and may come from any thread. A blocking call (connect,
//   accept, next_request, poll_completions with a timeout, disconnect) blocks only its
//   caller; Python releases the GIL around each and never holds it while a provider makes
//   progress.
// - Work runs to completion on the thread that asks for it. post_send transmits on the
//   caller's thread (tcp: encodes and sends; verbs: ibv_post_send). In the tcp provider,
//   poll_completions on a connection's own queue receives on the caller's thread (reads,
//   decodes, places) and then sleeps in the kernel on the socket; connect runs the TCP
//   connect and the whole MPA setup on the caller's thread, and accept (or reject) sends
//   the answer, waits for the RTR and establishes on the caller's thread, each handing the
//   established socket to the event loop. In the verbs provider, poll_completions
//   reaps the device CQ on the caller's thread (ibv_poll_cq) before it waits. The runtime's
//   event thread (core/runtime/event_loop.h) does only what no caller is waiting to do:
//   listeners and the responder's setup until the application decides on the Request,
//   timers, a transmit the socket could not take at once, connections nobody polls, shared
//   completion queues, and (verbs) the device's completion channel, whose events wake a
//   poll_completions that found nothing.
// - A completion queue with a handler (CompletionQueue::set_handler: a consumer that runs to
//   completion, as the message endpoint does) has it run by the thread that pushed the
//   completion, once that thread let go of the provider's locks: the event thread after a
//   read, a poller, or an application thread whose post_send, disconnect or terminate
//   completed work on the spot. Providers offer their event thread to a shared queue
//   (CompletionQueue::offer_executor) for what a consumer must not do on the thread it is on.
// - Registered memory must stay valid until deregistered or the connection is destroyed:
//   it is read and written by whichever thread makes progress, as an RNIC would by DMA.
//   Once destroy (the Connection's destructor) returns, no thread touches it.
// - Locks, outermost first: an MPA session's (tcp: a connection in setup), a listener's, a
//   connection's lock (it guards the protocol engines and the socket; tcp lets go of it
//   around a write syscall, one writer at a time: tcp_connection_state.h), then the event
//   loop's and the completion queue's (leaves: no call out while held). No waiter is woken
//   while a connection's lock is held: completions are announced once it is released. No
//   provider lock is held across a callback into the application. A consumer of a shared
//   queue that takes locks of its own takes them before these (the message endpoint:
//   message_endpoint.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cm/backlog_counters.h"
#include "core/cm/cm_failure.h"
#include "core/cm/listen_backlog.h"
#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/rdmap_endpoint.h"
#include "core/rdmap/work_request.h"
#include "core/runtime/socket_wait.h"
#include "core/transport/completion_queue.h"
#include "core/transport/provider_uri.h"
#include "core/util/expected.h"
#include "core/wire/mpa_frame.h"
#include "core/wire/terminate.h"

namespace rdma_interop::transport {

// Why a connect, accept or listen did not succeed.
struct ConnectError {
  enum class Kind : std::uint8_t {
    kSetup,         // MPA setup failed: see failure (and terminate / peer frame)
    kUnreachable,   // TCP connect refused or timed out
    kAddressInUse,  // listen: the address is taken
    kInvalidArgument,
    kTimeout,  // the whole connect (TCP + MPA) exceeded its deadline
  };
  Kind kind = Kind::kSetup;
  std::optional<cm::CmFailure> failure;
  std::string detail;                             // one sentence, for humans
  std::optional<wire::MpaFrame> peer_frame;       // the peer's Reply (e.g. with Reject)
  std::optional<wire::TerminateCause> terminate;  // sent or received during setup
  // connect: how many attempts were made (1 + the retries used, ConnectOptions::retries);
  // 0 for errors of listen() and accept().
  std::uint32_t attempts = 0;
  // kUnreachable: the errno behind it, where there is one (ECONNREFUSED: nothing listens
  // there, ETIMEDOUT: no answer to the SYN in time, both of which connect_retry.h retries),
  // else 0. listen(): the errno with which the system refused the address (EADDRINUSE,
  // EACCES, EADDRNOTAVAIL), 0 when the listen was refused for its arguments.
  int sys_errno = 0;
};
// The builders every provider's errors come from: a ConnectError of `kind` with its sentence
// (and the CM failure behind it, where there is one), and a failed MPA setup.
ConnectError connect_error(ConnectError::Kind kind, std::string detail,
                           std::optional<cm::CmFailure> failure = std::nullopt);
ConnectError setup_failure(cm::CmFailure failure, std::string detail);
// The invalid-argument error for a policy cm::validate() refuses (its problems, in one
// sentence), or nullopt for a usable one: what listen() and connect() check first.
std::optional<ConnectError> policy_error(const cm::MpaPolicy& policy);
std::string to_string(const ConnectError& e);
// Stable id of a kind, for JSON reports: "setup", "unreachable", "address_in_use",
// "invalid_argument", "timeout".
std::string_view kind_name(ConnectError::Kind kind);

// A receive posted before the connection carries data, as a verbs user posts receives to
// the QP before rdma_connect/rdma_accept: the peer may Send the moment setup completes,
// before connect() or accept() has even returned.
struct InitialRecv {
  std::uint64_t wr_id = 0;
  void* addr = nullptr;
  std::uint32_t length = 0;
};

struct QpCaps {
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  std::uint16_t max_ulpdu = 65000;
  // Registered for local write on the new connection and posted, in order, before its first
  // FPDU is processed. The buffers must stay valid like registered memory; their completions
  // carry these wr_ids.
  std::vector<InitialRecv> initial_recvs = {};
  // Where the connection's work requests complete. Null: the connection makes its own,
  // unbounded. Shared by several connections, it is their one queue, as queue pairs share an
  // ibv_cq: Connection::poll_completions on any of them returns completions of every
  // connection on it (the application tells them apart by wr_id, like ibv_poll_cq), and a
  // queue too small for what is outstanding overruns (completion_queue.h). The connection
  // holds a reference; it never clears the queue, also not when it is destroyed.
  std::shared_ptr<CompletionQueue> cq;
};

struct ConnectionInfo {
  std::string scheme;  // the provider's: "tcp", "verbs"
  cm::NegotiatedParams params;
  std::string local_address;  // "198.18.0.1:40122"
  std::string peer_address;
  wire::MpaFrame sent_frame;
  wire::MpaFrame received_frame;
  bool fell_back_to_revision1 = false;  // the initiator retried in revision 1
  // The send queue's depth the connection was given: QpCaps::max_send_wr, or more where a
  // device rounds it up (ibv_create_qp(3) writes back "greater than or equal to the values
  // requested"), or less where the device's max_qp_wr is lower. Past it, a post is refused
  // as kQueueFull. 0: the provider does not say. (The verbs completion queue is sized by
  // the asked depth: fill a rounded-up queue with signaled requests and it may overrun.)
  std::uint32_t send_queue_depth = 0;
};

enum class ConnectionState : std::uint8_t { kConnected, kError, kClosed };

struct ReceiveCounters {
  std::uint64_t reads = 0;   // reads of the stream that brought octets
  std::uint64_t octets = 0;  // octets read
  // Of them, octets read straight into the registered memory an RDMA Write named, with no
  // copy after the kernel's (RdmapEndpoint::placement_target).
  std::uint64_t octets_placed = 0;

  friend bool operator==(const ReceiveCounters&, const ReceiveCounters&) = default;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual const ConnectionInfo& info() const = 0;

  // Registers memory for local and remote access; returns the STag (lkey == rkey).
  virtual std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access) = 0;
  virtual bool deregister_memory(std::uint32_t stag) = 0;
  // The tagged offset a peer names the octet at `addr` of region `stag` by: advertise it
  // with the STag for RDMA Write and Read (SendWr::remote_addr on the peer's side). Work
  // requests on this side keep naming local buffers by address (Sge::addr). The tcp
  // provider counts offsets from 0 in each region (memory_registry.h), so nothing a peer is
  // told reveals our address space, unless registered with rdmap::kTaggedOffsetIsAddress;
  // nullopt for an unknown STag or an address outside the region. This default is the verbs
  // convention (TO = virtual address), which the verbs provider keeps: the device uses it.
  virtual std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, const void* addr) const {
    (void)stag;
    return reinterpret_cast<std::uint64_t>(addr);
  }

  virtual std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr) = 0;
  // Posts `wrs` in order as one batch, as ibv_post_send takes a chain: the first `posted`
  // went, and `error` says why the next did not (the rest were not tried). A provider that
  // sends on the caller's thread sends the batch together: the tcp provider frames them all
  // before it writes, so an RDMA Write and the Send that announces it leave in one sendmsg
  // (one wake-up of the peer, not one per request). The batch is queued whole before any
  // of it is sent, so it must fit the send queue's free room (max_send_wr) at once: past
  // it, kQueueFull where posting one by one might have gone. By default, post_send each.
  struct PostBatch {
    std::size_t posted = 0;
    std::optional<rdmap::PostError> error;
    // The device's own call said success though it did not post them all (ibv_post_send
    // returned 0 with *bad_wr set: libsiw on a full send queue). `posted` and `error` say
    // what it did; this says it deviated (verbs-check's sq-overflow reports it).
    bool returned_success = false;
  };
  virtual PostBatch post_sends(std::span<const rdmap::SendWr> wrs) {
    PostBatch r;
    for (const rdmap::SendWr& wr : wrs) {
      r.error = post_send(wr);
      if (r.error) break;
      ++r.posted;
    }
    return r;
  }
  virtual std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr) = 0;
  // The most payload octets a request posted with inline_data may carry (IBV_SEND_INLINE):
  // on verbs the queue pair's max_inline_data, which we ask as 0; the tcp provider takes any
  // length, writing from the caller's buffer what the socket takes at once and copying a
  // request it did not take whole. 0: no inline requests.
  virtual std::uint32_t max_inline_data() const { return 0; }
  // Waits up to `timeout` for at least one completion on the connection's completion queue,
  // then returns what is there (up to `max`). Empty on timeout or CompletionQueue::wake().
  // With a shared queue (QpCaps::cq) these may be other connections' completions. Once the
  // connection is destroyed, its requests still outstanding complete nowhere (as when an
  // ibv_qp is destroyed): drain them first (disconnect or terminate, then poll).
  virtual std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout) = 0;
  // Receives on the caller's thread, for a consumer of a shared completion queue that waits
  // for what this connection brings (the message endpoint, message_endpoint.h): reads and
  // processes what the connection holds, so its completions are pushed (and the queue's
  // handler runs) on this thread; if that brought nothing, waits up to `timeout` until there
  // is more, then takes it, or until `wake` (an eventfd; its fd -1: none) is readable. The
  // caller reads `wake` itself. While a thread receives here, and shortly after, the
  // event thread does not (a claim, as poll_completions on an own queue takes:
  // tcp_connection_state.h), so a request/response costs the waiting thread no hand-off from
  // the event thread. `poll_first`: how long it looks without sleeping before it sleeps (as
  // an RDMA consumer polls its completion queue before it arms the event, and rsockets'
  // polling_time): what comes within it costs no sleep and wakeup. False, without waiting:
  // this provider receives only on its own thread (verbs, whose device places data anyway,
  // and the simulator), or the connection is closed.
  virtual bool receive_here(runtime::WakeFd wake, Millis timeout, Micros poll_first) {
    (void)wake;
    (void)timeout;
    (void)poll_first;
    return false;
  }

  virtual ConnectionState state() const = 0;
  // Why the connection left kConnected (Terminate received or sent, reset, closed).
  virtual std::string error_detail() const = 0;
  virtual std::optional<wire::TerminateMessage> terminate_received() const = 0;
  // A Terminate that arrived but did not decode (wire::MalformedTerminate: what could be
  // read of it). Providers that never see the peer's Terminate octets (verbs) return none.
  virtual std::optional<wire::MalformedTerminate> malformed_terminate_received() const {
    return std::nullopt;
  }
  virtual std::optional<wire::TerminateMessage> terminate_sent() const = 0;
  // What the receive side read, and how much of it went straight to its place (direct data
  // placement, RFC 5041 s1.1). Zero where the provider does not read the stream itself
  // (verbs: the device places every octet).
  virtual ReceiveCounters receive_counters() const { return {}; }

  // Orderly close (TCP FIN after outstanding FPDUs are sent). Waits up to `timeout`.
  virtual void disconnect(Millis timeout) = 0;
  // Ends the connection at once for an error the application layer found (e.g. a peer that
  // sent beyond its credits: DDP untagged buffer error "no buffer", RFC 5041 s7.2 code 0x02):
  // a Terminate carrying `cause` (naming no segment) goes out, every outstanding work
  // request completes flushed (WorkCompletion::terminate = `cause`), state() becomes kError,
  // terminate_sent() returns it and the peer's terminate_received() shows the cause; the
  // stream then closes as after any Terminate (RFC 5040 s5.3). Does not wait. No effect once
  // the connection left kConnected. The verbs provider cannot send a Terminate from user
  // space (the kernel owns the stream): it disconnects and moves the queue pair to error
  // instead, so the flushes carry no cause, terminate_sent() stays empty, the peer sees a
  // disconnect, and error_detail() says so.
  virtual void terminate(const wire::TerminateCause& cause) = 0;
};

// A connect request waiting for the application's decision (responder side).
class PendingConnection {
 public:
  virtual ~PendingConnection() = default;
  virtual const wire::MpaFrame& request() const = 0;
  virtual std::string peer_address() const = 0;
  // Sends the Reply. Fails (with the setup failure) if the policy cannot meet the Request
  // or, in peer-to-peer mode, the RTR does not arrive in time: accept returns only once the
  // connection is established.
  virtual Expected<std::unique_ptr<Connection>, ConnectError> accept(
      std::vector<std::uint8_t> private_data, const QpCaps& caps) = 0;
  virtual void reject(std::vector<std::uint8_t> private_data) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual std::string local_address() const = 0;  // with the real port when asked for 0
  // Waits up to `timeout` for the next valid MPA Request. Setup failures before the
  // Request (timeouts, garbage) are counted and logged, not returned.
  virtual std::unique_ptr<PendingConnection> next_request(Millis timeout) = 0;
  // The backlog's figures, a consistent snapshot (invariants in core/cm/backlog_counters.h).
  // half_open_opened counts TCP connections accepted; requests the valid MPA Requests.
  using Counters = cm::BacklogCounters;
  virtual Counters counters() const = 0;
  // backlog_added / backlog_removed: a backlog slot taken or freed (core/cm/listen_backlog.h
  // says when), with the peer it belongs to. Kept up to kMaxBacklogEvents between calls
  // (older ones are dropped); take_backlog_events() returns them oldest first and forgets
  // them. Providers without a backlog engine return none.
  struct BacklogEvent {
    cm::BacklogEventType type = cm::BacklogEventType::kAdded;
    cm::BacklogEventReason reason = cm::BacklogEventReason::kRequest;
    std::string peer_address;
    std::uint32_t pending = 0;  // slots held right after the event
  };
  static constexpr std::size_t kMaxBacklogEvents = cm::ListenBacklog::kMaxEvents;
  virtual std::vector<BacklogEvent> take_backlog_events() { return {}; }
  // A connection whose setup failed before its Request reached the application (request
  // timeout, malformed frame, reset, half-open evicted, overflow rejected or dropped): each
  // reported once, so a server can account for every connection, not only the ones it
  // accepted.
  struct SetupFailure {
    std::string peer_address;
    ConnectError error;
    double elapsed_ms = 0;  // from TCP accept to the failure
  };
  // Takes the failures since the last call, oldest first. At most kMaxSetupFailures are
  // kept between calls (older ones are dropped, still counted in setup_failures).
  static constexpr std::size_t kMaxSetupFailures = 1024;
  virtual std::vector<SetupFailure> take_setup_failures() = 0;
  virtual void close() = 0;
};

struct ConnectOptions {
  cm::MpaPolicy policy;
  std::vector<std::uint8_t> private_data;
  QpCaps caps;
  Millis timeout{15000};  // per attempt: TCP connect + MPA setup (+ one revision-1 retry)
  // Retry policy (core/transport/connect_retry.h, the same for every provider). A failed
  // attempt is retried (at most `retries` times) when the listener may take it later: a
  // Reject with the overflow marker (failure backlog_full), nothing listening yet or a
  // reset, a reset during setup, or no Reply in time (a listener with the drop policy leaves
  // a Request over its backlog unanswered). Any other failure (the peer application's own
  // Reject, a negotiation failure) ends the connect at once. Before retry n (1-based) the
  // initiator sleeps a uniformly random time in [0, min(retry_backoff_max, retry_backoff *
  // 2^(n-1))] ("full jitter"). The jitter comes from a generator seeded with `retry_seed`
  // (0: a fresh seed per connect), never from shared state.
  std::uint32_t retries = 0;
  Millis retry_backoff{100};
  Millis retry_backoff_max{5000};
  std::uint64_t retry_seed = 0;
};

// How a listener treats its backlog (core/cm/listen_backlog.h). An int converts to
// ListenOptions with that backlog, so listen(where, policy, 16) still reads as before.
struct ListenOptions {
  ListenOptions() = default;
  ListenOptions(int backlog_) : backlog(backlog_) {}  // NOLINT(google-explicit-constructor)

  int backlog = 16;  // Requests that may wait for the application's decision (>= 1)
  cm::BacklogOverflow overflow = cm::BacklogOverflow::kReject;
  // Connections without a complete MPA Request kept at once; 0: max(4 * backlog, 64).
  std::uint32_t half_open_limit = 0;
  // An undecided Request is rejected (and counted pending_expired) after this long.
  Millis decision_timeout{30000};
  // drop: how long a Request waits over the backlog before it is closed unanswered.
  Millis overflow_timeout{5000};
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view scheme() const = 0;
  // The half-open (request) timeout is the policy's request_timeout.
  virtual Expected<std::unique_ptr<Listener>, ConnectError> listen(
      const ProviderUri& where, const cm::MpaPolicy& policy, const ListenOptions& options) = 0;
  virtual Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) = 0;
};

// Opens the provider for `scheme` ("tcp", "verbs"). Errors say which schemes exist.
Expected<std::unique_ptr<Provider>, std::string> open_provider(std::string_view scheme);

}  // namespace rdma_interop::transport
