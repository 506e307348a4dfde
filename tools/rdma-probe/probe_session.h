// probe_session.h - the bounded, paced connections one `rdma-probe URI` run makes.
//
// Every probe is one connection: a raw MPA Request on a plain socket (raw_mpa_client.h) or
// a real connection through the provider, made with an MpaPolicy that differs from the
// plain offer in the one thing being asked. The session counts them against a budget,
// keeps at least `pace` between connection starts and runs them one at a time, so a probe
// never floods a peer, and it stops early on a signal. Each probe returns its evidence:
// the offer, and what came back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cm/mpa_policy.h"
#include "core/cm/personality.h"
#include "core/transport/provider.h"
#include "tools/rdma-probe/interop_exchange.h"
#include "tools/rdma-probe/probe_report.h"
#include "tools/rdma-probe/raw_mpa_client.h"

namespace rdma_interop::probe {

struct ProbeSettings {
  transport::ProviderUri uri;
  std::chrono::milliseconds timeout{3000};  // each probe connection, setup and all
  // How long the RTR probe stays silent after the Reply to see whether the peer waits.
  std::chrono::milliseconds rtr_wait{2000};
  // After the Reply, before the first FPDU (kernel siw as responder needs it; mpa_policy.h).
  std::chrono::milliseconds first_fpdu_delay{50};
  int max_connections = 48;
  std::chrono::milliseconds pace{20};  // at least this between two connection starts
  // Called before each connection: its number (1-based) and what it asks.
  std::function<void(int, std::string_view)> progress;
  const std::atomic<bool>* cancel = nullptr;
  // The personalities the fingerprint compares the peer with (fingerprint.h).
  std::vector<cm::Personality> known;
};

// One provider connection's outcome. `offered` is the Request the provider sent (for a
// revision-1 retry, the first one).
struct Attempt {
  wire::MpaFrame offered;
  std::optional<transport::ConnectionInfo> info;  // set when established
  std::optional<transport::ConnectError> error;   // set when not
  double elapsed_ms = 0;
  bool established() const { return info.has_value(); }
  Evidence evidence() const;
  // The peer's Reply, from either outcome, when one arrived.
  std::optional<wire::MpaFrame> reply() const;
};

// What runs on an established probe connection before it is closed.
using WhileConnected = std::function<void(transport::Connection&, ExchangeMemory&)>;

class ProbeSession {
 public:
  ProbeSession(const ProbeSettings& settings, transport::Provider& provider)
      : s_(settings), provider_(provider) {}

  const ProbeSettings& settings() const { return s_; }
  bool is_tcp() const { return s_.uri.scheme == "tcp"; }
  int connections() const { return count_; }
  // False once the budget is spent or a signal asked to stop; the probe then reports
  // what it could not test instead of connecting.
  bool can_connect() const;
  std::string why_not() const;  // a sentence, when can_connect() is false

  // The plain offer every probe starts from: revision `revision`, CRC when asked, markers
  // supported but not asked for, no peer-to-peer, our IRD 0x3ffe and ORD 1 (so any
  // responder's IRD and ORD come back unlowered, and a strict one is satisfied; 0x3ffe, not
  // the 14-bit maximum 0x3fff, which irdma reads as "no IRD/ORD negotiation"). What the peer
  // turned out to need is added: peer-to-peer in revision 2 when it refuses a Request
  // without it (irdma), its RTR in revision 1 when it waits for one (iw_cxgb4).
  cm::MpaPolicy plain_policy(std::uint8_t revision = 2) const;
  void require_peer_to_peer(cm::RtrSet offer) { p2p_offer_ = offer; }
  void use_revision1_rtr(cm::RtrType type) { revision1_rtr_ = type; }
  static std::vector<std::uint8_t> plain_private_data();

  // A raw Request (tcp only). nullopt when the budget is spent.
  std::optional<RawAnswer> raw(const wire::MpaFrame& request, std::string_view what);
  // A provider connection; `then` runs while it is established, then it is closed.
  std::optional<Attempt> connect(const cm::MpaPolicy& policy, std::vector<std::uint8_t> pd,
                                 std::string_view what, const WhileConnected& then = {});

 private:
  bool start(std::string_view what);

  const ProbeSettings& s_;
  transport::Provider& provider_;
  std::optional<cm::RtrSet> p2p_offer_;
  std::optional<cm::RtrType> revision1_rtr_;
  int count_ = 0;
  std::chrono::steady_clock::time_point last_start_{};
};

// "MPA Reply rev 2 CRC ..." or "reset: ...", for evidence.
std::string describe(const RawAnswer& answer);
// "peer_rejected: the responder rejected ... (MPA Reply rev 2 R ...)".
std::string describe(const transport::ConnectError& error);

}  // namespace rdma_interop::probe
