// mpa_handshake.h - MPA connection setup as a sans-I/O state machine, for either role.
//
// RFC 5044 s7.1 (Request/Reply), RFC 6581 (revision 2: IRD/ORD, peer-to-peer RTR). The
// handshake owns the connection from the first octet until it is established or failed:
//
//   initiator: send Request -> Reply -> [first_fpdu_delay] -> [send RTR] -> established
//   responder: Request -> application accept()/reject() -> send Reply -> [RTR] -> established
//
// Drive it with the octets the peer sent, the time, and peer closes; take from it the octets
// to send, events, the next deadline, and whether to close. Nothing here touches a socket or
// a clock. In peer-to-peer mode the responder reports "established" only when the RTR has
// arrived. Once established, take_handover() gives the data path the FPDU stream state.
//
//   MpaHandshake hs = MpaHandshake::initiator(policy, private_data, now);
//   send(hs.take_output());
//   on data:     hs.on_bytes(data, now);   on timer:  hs.on_timer(now);
//   then:        send(hs.take_output()); while (auto ev = hs.poll_event()) ...;
//                if (hs.close_requested()) close(abortive?)
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cm/cm_failure.h"
#include "core/cm/mpa_negotiation.h"
#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "core/wire/mpa_frame.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::cm {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

enum class CmEventType : std::uint8_t {
  kConnectRequest,  // responder: a valid Request arrived; call accept() or reject()
  kEstablished,     // setup done; take_handover()
  kFailed,          // setup failed; see failure/detail
  kRetryRevision1,  // initiator: reconnect (new TCP connection) with revision 1
};

struct CmEvent {
  CmEventType type = CmEventType::kFailed;
  CmFailure failure = CmFailure::kConnectionClosed;  // kFailed only
  std::string detail;                                // human-readable specifics
  std::optional<wire::MpaFrame> peer_frame;          // the peer's Request or Reply
  std::optional<wire::TerminateCause> terminate;     // sent or received Terminate, if any
  std::optional<wire::WireError> wire_error;         // for malformed input
};

// Message sequence numbers the RTR used up, so the data path continues after them
// (RFC 5041 s5: MSNs start at 1 per untagged queue).
struct RdmapSequence {
  std::uint32_t next_send_msn_tx = 1;  // our next Send on QN 0
  std::uint32_t next_read_msn_tx = 1;  // our next Read Request on QN 1
  std::uint32_t next_send_msn_rx = 1;  // the peer's next Send we expect
  std::uint32_t next_read_msn_rx = 1;  // the peer's next Read Request we expect
  std::uint32_t next_term_msn_tx = 1;  // our Terminate on QN 2
};

struct Handover {
  NegotiatedParams params;
  wire::FpduOptions tx_options;
  wire::FpduOptions rx_options;
  std::uint64_t tx_stream_position = 0;  // FPDU octets already sent (the RTR), for markers
  std::uint64_t rx_stream_position = 0;
  RdmapSequence sequence;
  // Octets that arrived behind the handshake: the start of the peer's FPDU stream, still
  // to be decoded by the data path from rx_stream_position on.
  std::vector<std::uint8_t> leftover;
  // Responder without peer-to-peer, revision 1 style (RFC 5044 s7.1): it must not send an
  // FPDU before the first FPDU from the initiator has arrived.
  bool hold_tx_until_first_rx = false;
};

enum class CloseKind : std::uint8_t { kNone, kGraceful, kAbortive };

class MpaHandshake {
 public:
  static MpaHandshake initiator(const MpaPolicy& policy, std::vector<std::uint8_t> private_data,
                                TimePoint now);
  static MpaHandshake responder(const MpaPolicy& policy, TimePoint now);

  // The peer's octets, in order, any segmentation.
  void on_bytes(std::span<const std::uint8_t> bytes, TimePoint now);
  // Call at or after next_deadline().
  void on_timer(TimePoint now);
  // The TCP connection ended: reset (RST) or orderly close (FIN).
  void on_peer_closed(bool reset, TimePoint now);

  // Responder, after kConnectRequest. Accept answers with our policy's settlement of the
  // Request (which may still fail: no matching RTR, insufficient IRD, markers); reject
  // sends a Reply with the Reject flag and this private data.
  void accept(std::vector<std::uint8_t> private_data, TimePoint now);
  void reject(std::vector<std::uint8_t> private_data, TimePoint now);

  std::vector<std::uint8_t> take_output();
  std::optional<CmEvent> poll_event();
  std::optional<TimePoint> next_deadline() const;
  CloseKind close_requested() const { return close_; }
  bool is_initiator() const { return initiator_; }
  bool established() const { return state_ == State::kEstablished; }
  bool finished() const { return state_ == State::kEstablished || state_ == State::kFailed; }

  // Once, after kEstablished.
  Handover take_handover();

  // The frames exchanged so far (reports, rdma-probe evidence).
  const std::optional<wire::MpaFrame>& sent_frame() const { return sent_frame_; }
  const std::optional<wire::MpaFrame>& received_frame() const { return received_frame_; }

 private:
  enum class State : std::uint8_t {
    kAwaitRequest,          // responder
    kAwaitDecision,         // responder: application decides
    kAwaitReply,            // initiator
    kSettleAfterReply,      // initiator: the Reply is in; first_fpdu_delay before the first FPDU
    kAwaitRtr,              // responder, peer-to-peer
    kAwaitReadRtrResponse,  // initiator sent a Read RTR; its zero-length Response follows
    kEstablished,
    kFailed,
  };

  MpaHandshake(const MpaPolicy& policy, bool initiator, TimePoint now);
  void on_frame(const wire::MpaFrame& frame, TimePoint now);
  void on_request(const wire::MpaFrame& request, TimePoint now);
  // Responder: a Request whose Rev this side cannot even parse (on_newer_revision).
  void on_unknown_revision(std::uint8_t revision);
  void on_reply(const wire::MpaFrame& reply, TimePoint now);
  void after_reply(TimePoint now);
  void on_fpdu_bytes(TimePoint now);
  void on_ulpdu(std::span<const std::uint8_t> ulpdu, TimePoint now);
  // The peer closed inside first_fpdu_delay: fails with the Terminate it sent first, if any.
  void fail_on_pending_terminate(TimePoint now);
  void start_fpdu_phase(const NegotiatedParams& params);
  void send_frame(const wire::MpaFrame& frame);
  void send_ulpdu(std::span<const std::uint8_t> ulpdu);
  void send_terminate(const wire::TerminateCause& cause);
  void establish();
  void fail(CmFailure failure, std::string detail, CloseKind close = CloseKind::kAbortive);

  MpaPolicy policy_;
  bool initiator_;
  State state_;
  TimePoint deadline_;
  std::vector<std::uint8_t> private_data_;  // ours, for the Request
  std::vector<std::uint8_t> in_;            // octets of the frame being collected
  std::vector<std::uint8_t> out_;
  std::deque<CmEvent> events_;
  CloseKind close_ = CloseKind::kNone;
  std::optional<wire::MpaFrame> sent_frame_;
  std::optional<wire::MpaFrame> received_frame_;
  NegotiatedParams params_;
  std::optional<wire::FpduEncoder> tx_;
  std::optional<wire::FpduDecoder> rx_;
  RdmapSequence sequence_;
  bool handed_over_ = false;
};

}  // namespace rdma_interop::cm
