// provider.h - the verbs-like API every provider offers (tcp today; verbs and sim later).
//
// A test or tool opens a provider by URI scheme, then listens or connects with an MPA
// policy; a connection is a queue pair with its own completion queue. Providers translate
// between this API and their transport; the protocol logic lives in core/cm and core/rdmap.
//
// Threading: every call is thread-safe. Blocking calls (connect, next_request,
// poll_completions with a timeout) wait on the provider's own event thread and can be
// called from any thread (Python releases the GIL around them). Registered memory must stay
// valid until deregistered or the connection is destroyed: the provider reads and writes it
// from its event thread, as an RNIC would by DMA.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/cm_failure.h"
#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/rdmap_endpoint.h"
#include "core/rdmap/work_request.h"
#include "core/transport/provider_uri.h"
#include "core/util/expected.h"
#include "core/wire/mpa_frame.h"

namespace rdma_interop::transport {

using Millis = std::chrono::milliseconds;

// Why a connect, accept or listen did not succeed.
struct ConnectError {
  enum class Kind : std::uint8_t {
    kSetup,          // MPA setup failed: see failure (and terminate / peer frame)
    kUnreachable,    // TCP connect refused or timed out
    kAddressInUse,   // listen: the address is taken
    kInvalidArgument,
    kTimeout,        // the whole connect (TCP + MPA) exceeded its deadline
  };
  Kind kind = Kind::kSetup;
  std::optional<cm::CmFailure> failure;
  std::string detail;                              // one sentence, for humans
  std::optional<wire::MpaFrame> peer_frame;        // the peer's Reply (e.g. with Reject)
  std::optional<wire::TerminateCause> terminate;   // sent or received during setup
};
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
};

struct ConnectionInfo {
  cm::NegotiatedParams params;
  std::string local_address;   // "198.18.0.1:40122"
  std::string peer_address;
  wire::MpaFrame sent_frame;
  wire::MpaFrame received_frame;
  bool fell_back_to_revision1 = false;  // the initiator retried in revision 1
};

enum class ConnectionState : std::uint8_t { kConnected, kError, kClosed };

class Connection {
 public:
  virtual ~Connection() = default;
  virtual const ConnectionInfo& info() const = 0;

  // Registers memory for local and remote access; returns the STag (lkey == rkey).
  virtual std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access) = 0;
  virtual bool deregister_memory(std::uint32_t stag) = 0;

  virtual std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr) = 0;
  virtual std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr) = 0;
  // Waits up to `timeout` for at least one completion, then returns what is there (up to
  // `max`). Empty on timeout.
  virtual std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max,
                                                              Millis timeout) = 0;

  virtual ConnectionState state() const = 0;
  // Why the connection left kConnected (Terminate received or sent, reset, closed).
  virtual std::string error_detail() const = 0;
  virtual std::optional<wire::TerminateMessage> terminate_received() const = 0;
  virtual std::optional<wire::TerminateMessage> terminate_sent() const = 0;

  // Orderly close (TCP FIN after outstanding FPDUs are sent). Waits up to `timeout`.
  virtual void disconnect(Millis timeout) = 0;
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
  struct Counters {
    std::uint64_t tcp_accepted = 0;
    std::uint64_t requests = 0;
    std::uint64_t setup_failures = 0;
  };
  virtual Counters counters() const = 0;
  // A connection whose setup failed before its Request reached the application (request
  // timeout, malformed frame, reset, over the backlog): each reported once, so a server can
  // account for every connection, not only the ones it accepted.
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
  Millis timeout{15000};  // TCP connect + MPA setup (+ one revision-1 retry)
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view scheme() const = 0;
  virtual Expected<std::unique_ptr<Listener>, ConnectError> listen(const ProviderUri& where,
                                                                    const cm::MpaPolicy& policy,
                                                                    int backlog) = 0;
  virtual Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) = 0;
};

// Opens the provider for `scheme` ("tcp", "verbs"). Errors say which schemes exist.
Expected<std::unique_ptr<Provider>, std::string> open_provider(std::string_view scheme);

}  // namespace rdma_interop::transport
