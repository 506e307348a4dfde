#include "core/cm/mpa_handshake.h"

#include <algorithm>

#include "core/cm/listen_backlog.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"

namespace rdma_interop::cm {
namespace {

constexpr wire::TerminateCause kInvalidStagCause{
    wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, wire::kRdmapCodeInvalidStag};

// What we accept from the peer: a PD_Length above our limit drops the connection, as siw
// does above RDMA_MAX_PRIVATE_DATA (256). Only an erdma policy reads erdma's revision 129.
wire::MpaLimits limits_of(const MpaPolicy& p) {
  return wire::MpaLimits{.private_data_limit = p.private_data_limit,
                         .reject_reserved_bits = p.reject_reserved_bits,
                         .accept_erdma = p.revision == wire::kMpaRevisionErdma};
}

CloseKind close_of(Hangup h) {
  return h == Hangup::kClose ? CloseKind::kGraceful : CloseKind::kAbortive;
}
CloseKind close_of(OnMalformed m) {
  return m == OnMalformed::kClose ? CloseKind::kGraceful : CloseKind::kAbortive;
}

// The zero-length operation an initiator sends as its RTR (RFC 6581 s3): a Send, an RDMA
// Write or an RDMA Read, with no payload; a Write names STag 0, a Read the policy's sink and
// source STags (read_rtr_sink_stag, read_rtr_source_stag).
std::vector<std::uint8_t> rtr_ulpdu(RtrType rtr, const MpaPolicy& policy) {
  std::vector<std::uint8_t> out(wire::kDdpUntaggedHeaderLen + wire::kReadRequestBodyLen);
  std::size_t n = 0;
  switch (rtr) {
    case RtrType::kSend:
      n = wire::encode_ddp_header(wire::send_header(1, 0, true), out);
      break;
    case RtrType::kWrite:
      n = wire::encode_ddp_header(wire::rdma_write_header(0, 0, true), out);
      break;
    case RtrType::kRead: {
      n = wire::encode_ddp_header(wire::read_request_header(1), out);
      const auto body = wire::encode_read_request(wire::ReadRequest{
          .sink_stag = policy.read_rtr_sink_stag, .source_stag = policy.read_rtr_source_stag});
      std::copy(body.begin(), body.end(), out.begin() + static_cast<std::ptrdiff_t>(n));
      n += body.size();
      break;
    }
  }
  out.resize(n);
  return out;
}

// FPDU framing after a Reply whose settlement failed, so the failing side can still send its
// Terminate (RFC 6581 s3 codes): CRC if either asked, markers as each receiver asked (the
// failures that carry a Terminate are never about markers).
NegotiatedParams framing_of(const wire::MpaFrame& request, const wire::MpaFrame& reply,
                            bool initiator) {
  NegotiatedParams p;
  p.revision = reply.revision;
  p.crc = request.crc || reply.crc;
  p.markers_to_peer = initiator ? reply.markers : request.markers;
  p.markers_from_peer = initiator ? request.markers : reply.markers;
  return p;
}

}  // namespace

MpaHandshake::MpaHandshake(const MpaPolicy& policy, bool initiator, TimePoint now)
    : policy_(policy),
      initiator_(initiator),
      state_(initiator ? State::kAwaitReply : State::kAwaitRequest),
      deadline_(now + (initiator ? policy.reply_timeout : policy.request_timeout)) {}

MpaHandshake MpaHandshake::initiator(const MpaPolicy& policy,
                                     std::vector<std::uint8_t> private_data, TimePoint now) {
  MpaHandshake hs(policy, true, now);
  hs.private_data_ = std::move(private_data);
  hs.send_frame(make_request(policy, hs.private_data_));
  return hs;
}

MpaHandshake MpaHandshake::responder(const MpaPolicy& policy, TimePoint now) {
  return MpaHandshake(policy, false, now);
}

void MpaHandshake::send_frame(const wire::MpaFrame& frame) {
  auto bytes = wire::encode_mpa_frame(frame);
  if (!bytes) {
    // Our own frame cannot be represented: a local error (personalities are checked when
    // they load, but an application can still hand accept(), reject() or connect() too
    // much private data), never the peer's malformed frame.
    const bool reply = frame.kind == wire::MpaFrameKind::kReply;
    std::string detail =
        std::string("our own MPA ") + (reply ? "Reply" : "Request") + " cannot be sent: ";
    if (bytes.error() == wire::WireError::kMpaPrivateDataTooLong) {
      // RFC 5044 s7.1: PD_Length at most 512; RFC 6581 s3: the IRD/ORD words count in it.
      detail += std::to_string(frame.private_data.size()) + " octets of private data" +
                (frame.enhanced ? " and the 4 octets of RFC 6581 IRD/ORD words" : "") +
                " exceed the 512 octets RFC 5044 s7.1 allows";
    } else {
      detail += std::string(wire::describe(bytes.error()));
    }
    // A responder still owes the initiator an answer, and a bare Reject (no private data,
    // no IRD/ORD words) always fits: the initiator hears a refusal, not a reset.
    if (reply) {
      wire::MpaFrame refusal;
      refusal.kind = wire::MpaFrameKind::kReply;
      refusal.revision = frame.revision;
      refusal.crc = frame.crc;
      refusal.markers = frame.markers;
      refusal.reject = true;
      if (auto bare = wire::encode_mpa_frame(refusal)) {
        out_.insert(out_.end(), bare->begin(), bare->end());
        sent_frame_ = refusal;
      }
    }
    fail(CmFailure::kLocalFrameInvalid, std::move(detail), CloseKind::kGraceful);
    return;
  }
  out_.insert(out_.end(), bytes->begin(), bytes->end());
  sent_frame_ = frame;
}

void MpaHandshake::start_fpdu_phase(const NegotiatedParams& params) {
  params_ = params;
  tx_.emplace(wire::FpduOptions{.crc = params.crc, .markers = params.markers_to_peer});
  rx_.emplace(wire::FpduOptions{.crc = params.crc, .markers = params.markers_from_peer});
}

void MpaHandshake::send_ulpdu(std::span<const std::uint8_t> ulpdu) {
  wire::FpduFrame frame;
  if (tx_->encode(ulpdu, frame)) frame.append_to(out_);
}

void MpaHandshake::send_terminate(const wire::TerminateCause& cause) {
  wire::TerminateMessage m;
  m.cause = cause;
  send_ulpdu(wire::encode_terminate(m, sequence_.next_term_msn_tx++));
}

void MpaHandshake::fail(CmFailure failure, std::string detail, CloseKind close) {
  if (state_ == State::kFailed || state_ == State::kEstablished) return;
  state_ = State::kFailed;
  close_ = close;
  CmEvent ev;
  ev.type = CmEventType::kFailed;
  ev.failure = failure;
  ev.detail = std::move(detail);
  ev.peer_frame = received_frame_;
  events_.push_back(std::move(ev));
}

void MpaHandshake::establish() {
  state_ = State::kEstablished;
  CmEvent ev;
  ev.type = CmEventType::kEstablished;
  ev.peer_frame = received_frame_;
  events_.push_back(std::move(ev));
}

void MpaHandshake::on_bytes(std::span<const std::uint8_t> bytes, TimePoint now) {
  in_.insert(in_.end(), bytes.begin(), bytes.end());
  if (state_ == State::kAwaitRequest || state_ == State::kAwaitReply) {
    if (in_.size() < wire::kMpaHeaderLen) return;
    const auto length = wire::mpa_frame_length(in_, limits_of(policy_));
    if (!length) {
      if (length.error() == wire::WireError::kMpaUnknownRevision && !initiator_) {
        on_unknown_revision(in_[17]);
        return;
      }
      fail(CmFailure::kMalformedFrame, std::string(wire::describe(length.error())),
           close_of(policy_.on_malformed_frame));
      events_.back().wire_error = length.error();
      return;
    }
    if (in_.size() < *length) return;
    auto frame = wire::decode_mpa_frame(std::span(in_).first(*length), limits_of(policy_));
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(*length));
    if (!frame) {
      fail(CmFailure::kMalformedFrame, std::string(wire::describe(frame.error())),
           close_of(policy_.on_malformed_frame));
      events_.back().wire_error = frame.error();
      return;
    }
    on_frame(*frame, now);
  }
  if (state_ == State::kAwaitRtr || state_ == State::kAwaitReadRtrResponse) on_fpdu_bytes(now);
}

void MpaHandshake::on_frame(const wire::MpaFrame& frame, TimePoint now) {
  received_frame_ = frame;
  if (initiator_) {
    on_reply(frame, now);
  } else {
    on_request(frame, now);
  }
}

void MpaHandshake::on_request(const wire::MpaFrame& request, TimePoint now) {
  if (request.kind != wire::MpaFrameKind::kRequest) {
    fail(CmFailure::kUnexpectedFrame, "received an MPA Reply where the Request belongs");
    return;
  }
  if (foreign_revision(policy_, request.revision) &&
      policy_.on_newer_revision != OnNewerRevision::kReplyOwnRevision) {
    const bool reset = policy_.on_newer_revision == OnNewerRevision::kReset;
    fail(CmFailure::kRevisionUnsupported,
         "revision " + std::to_string(request.revision) + " Request to a revision-" +
             std::to_string(policy_.revision) + " responder; connection " +
             (reset ? "reset" : "closed without a Reply"),
         reset ? CloseKind::kAbortive : CloseKind::kGraceful);
    return;
  }
  (void)now;
  state_ = State::kAwaitDecision;
  CmEvent ev;
  ev.type = CmEventType::kConnectRequest;
  ev.peer_frame = request;
  events_.push_back(std::move(ev));
}

void MpaHandshake::accept(std::vector<std::uint8_t> private_data, TimePoint now) {
  if (state_ != State::kAwaitDecision) return;
  ResponderAnswer answer = answer_request(policy_, *received_frame_, std::move(private_data));
  if (answer.hangup != Hangup::kNone) {
    fail(*answer.failure, answer.detail, close_of(answer.hangup));
    return;
  }
  send_frame(answer.reply);
  if (state_ == State::kFailed) return;
  if (answer.failure) {
    if (answer.terminate) {
      start_fpdu_phase(framing_of(*received_frame_, answer.reply, false));
      send_terminate(*answer.terminate);
    }
    fail(*answer.failure, answer.detail, CloseKind::kGraceful);
    if (answer.terminate) events_.back().terminate = answer.terminate;
    return;
  }
  start_fpdu_phase(*answer.params);
  if (params_.peer_to_peer) {
    state_ = State::kAwaitRtr;
    deadline_ = now + policy_.rtr_timeout;
    on_fpdu_bytes(now);  // anything the initiator sent early
  } else {
    establish();
  }
}

void MpaHandshake::reject(std::vector<std::uint8_t> private_data, TimePoint now) {
  (void)now;
  if (state_ != State::kAwaitDecision) return;
  wire::MpaFrame reply;
  reply.kind = wire::MpaFrameKind::kReply;
  reply.revision = std::min(received_frame_->revision, policy_.revision);
  if (reply.revision == wire::kMpaRevisionErdma) reply.erdma = wire::ErdmaExtension{};
  reply.reject = true;
  reply.private_data = std::move(private_data);
  send_frame(reply);
  fail(CmFailure::kLocalRejected, "the application rejected the connection request",
       CloseKind::kGraceful);
}

void MpaHandshake::on_reply(const wire::MpaFrame& reply, TimePoint now) {
  InitiatorVerdict verdict = judge_reply(policy_, *sent_frame_, reply);
  if (verdict.failure) {
    const bool framing_started = !reply.reject && reply.kind == wire::MpaFrameKind::kReply;
    if (verdict.terminate && framing_started) {
      start_fpdu_phase(framing_of(*sent_frame_, reply, true));
      send_terminate(*verdict.terminate);
    }
    CmFailure failure = *verdict.failure;
    std::string detail = verdict.detail;
    // Our listeners say "over the backlog, try later" with a marker in the Reject, so the
    // application can tell it from the peer application's own Reject (listen_backlog.h).
    if (failure == CmFailure::kPeerRejected && is_backlog_full_marker(reply.private_data)) {
      failure = CmFailure::kBacklogFull;
      detail = "the peer's listener is over its backlog (Reject with \"" +
               std::string(kBacklogFullMarker) + "\")";
    }
    CloseKind close = failure == CmFailure::kPeerRejected || failure == CmFailure::kBacklogFull
                          ? CloseKind::kGraceful
                          : CloseKind::kAbortive;
    if (failure == CmFailure::kRevisionUnsupported || failure == CmFailure::kMalformedFrame) {
      close = close_of(policy_.on_malformed_frame);
    }
    if (verdict.hangup != Hangup::kNone) close = close_of(verdict.hangup);
    fail(failure, std::move(detail), close);
    if (verdict.terminate) events_.back().terminate = verdict.terminate;
    return;
  }
  start_fpdu_phase(*verdict.params);
  if (policy_.first_fpdu_delay.count() > 0) {
    // Octets the responder sends meanwhile (it should not: it waits for our first FPDU)
    // stay in in_ for the data path.
    state_ = State::kSettleAfterReply;
    deadline_ = now + policy_.first_fpdu_delay;
    return;
  }
  after_reply(now);
}

void MpaHandshake::after_reply(TimePoint now) {
  if (!params_.peer_to_peer || !policy_.send_rtr) {
    establish();
    return;
  }
  send_ulpdu(rtr_ulpdu(*params_.rtr, policy_));
  switch (*params_.rtr) {
    case RtrType::kSend:
      sequence_.next_send_msn_tx = 2;
      establish();
      break;
    case RtrType::kWrite:
      establish();
      break;
    case RtrType::kRead:
      // The responder answers the zero-length Read with a zero-length Read Response; it
      // belongs to the handshake, not to the application's reads.
      sequence_.next_read_msn_tx = 2;
      state_ = State::kAwaitReadRtrResponse;
      deadline_ = now + policy_.rtr_timeout;
      on_fpdu_bytes(now);
      break;
  }
}

void MpaHandshake::on_fpdu_bytes(TimePoint now) {
  std::size_t used = 0;
  while (used < in_.size() &&
         (state_ == State::kAwaitRtr || state_ == State::kAwaitReadRtrResponse)) {
    auto step = rx_->step(std::span(in_).subspan(used));
    if (!step) {
      const wire::WireError e = step.error();
      send_terminate(wire::terminate_for(e));
      fail(CmFailure::kFpduError, std::string(wire::describe(e)), CloseKind::kGraceful);
      events_.back().wire_error = e;
      events_.back().terminate = wire::terminate_for(e);
      break;
    }
    used += step->consumed;
    if (step->ulpdu) on_ulpdu(*step->ulpdu, now);
  }
  in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(used));
}

void MpaHandshake::on_ulpdu(std::span<const std::uint8_t> ulpdu, TimePoint now) {
  (void)now;
  auto segment = wire::decode_ddp_segment(ulpdu);
  if (!segment) {
    const auto term = wire::terminate_for_ulpdu(segment.error(), ulpdu);
    send_ulpdu(wire::encode_terminate(term, sequence_.next_term_msn_tx++));
    fail(CmFailure::kFpduError, std::string(wire::describe(segment.error())), CloseKind::kGraceful);
    events_.back().wire_error = segment.error();
    events_.back().terminate = term.cause;
    return;
  }
  const wire::DdpHeader& h = segment->header;
  if (h.opcode == wire::RdmapOpcode::kTerminate) {
    auto term = wire::decode_terminate_body(segment->payload);
    // The RFC 6581 setup codes name the failure itself; other causes are reported as is.
    CmFailure failure = CmFailure::kTerminateReceived;
    if (term && term->cause.layer == wire::TermLayer::kLlp) {
      if (term->cause.code == wire::kMpaCodeNoMatchingRtr) failure = CmFailure::kNoMatchingRtr;
      if (term->cause.code == wire::kMpaCodeInsufficientIrd) {
        failure = CmFailure::kInsufficientIrd;
      }
    }
    fail(failure, "Terminate received: " + (term ? wire::to_string(*term) : "malformed"),
         CloseKind::kAbortive);
    if (term) events_.back().terminate = term->cause;
    return;
  }
  const bool zero_length = segment->payload.empty();
  if (state_ == State::kAwaitReadRtrResponse) {
    if (h.opcode == wire::RdmapOpcode::kRdmaReadResponse && h.last && zero_length) {
      establish();
      return;
    }
    send_terminate(kNoMatchingRtrCause);
    fail(CmFailure::kRtrMismatch,
         "expected the zero-length Read Response to the Read RTR, got " + wire::to_string(h));
    events_.back().terminate = kNoMatchingRtrCause;
    return;
  }
  // Responder awaiting the RTR (RFC 6581 s3): exactly the agreed zero-length operation, or
  // with rtr_check "any" whichever zero-length Send, Write or Read Request comes first.
  std::optional<RtrType> got;
  std::optional<wire::ReadRequest> read_rtr;
  if (h.opcode == wire::RdmapOpcode::kSend && h.last && zero_length &&
      h.msn == sequence_.next_send_msn_rx && h.message_offset == 0) {
    got = RtrType::kSend;
  } else if (h.opcode == wire::RdmapOpcode::kRdmaWrite && h.last && zero_length) {
    got = RtrType::kWrite;
  } else if (h.opcode == wire::RdmapOpcode::kRdmaReadRequest) {
    const auto rr = wire::decode_read_request(segment->payload);
    if (rr && rr->size == 0 && h.msn == sequence_.next_read_msn_rx) {
      got = RtrType::kRead;
      read_rtr = *rr;
    }
  }
  const bool matches = got && (policy_.rtr_check == RtrCheck::kAny || *got == *params_.rtr);
  if (!matches) {
    send_terminate(kNoMatchingRtrCause);
    fail(CmFailure::kRtrMismatch,
         "expected a zero-length " + std::string(rtr_name(*params_.rtr)) + " RTR, got " +
             wire::to_string(h),
         CloseKind::kGraceful);
    events_.back().terminate = kNoMatchingRtrCause;
    return;
  }
  params_.rtr = *got;
  switch (*got) {
    case RtrType::kSend:
      sequence_.next_send_msn_rx++;
      break;
    case RtrType::kWrite:
      break;
    case RtrType::kRead: {
      sequence_.next_read_msn_rx++;
      if (policy_.refuse_zero_stag_read_rtr && read_rtr->source_stag == 0) {
        send_terminate(kInvalidStagCause);
        fail(CmFailure::kRtrRefused,
             "a zero-length Read RTR naming source STag 0, refused (refuse_zero_stag_read_rtr)",
             CloseKind::kGraceful);
        events_.back().terminate = kInvalidStagCause;
        return;
      }
      std::array<std::uint8_t, wire::kDdpTaggedHeaderLen> response{};
      wire::encode_ddp_header(
          wire::read_response_header(read_rtr->sink_stag, read_rtr->sink_tagged_offset, true),
          response);
      send_ulpdu(response);
      break;
    }
  }
  establish();
}

void MpaHandshake::on_unknown_revision(std::uint8_t revision) {
  const std::string what = "a revision-" + std::to_string(revision) + " Request, a revision " +
                           "this revision-" + std::to_string(policy_.revision) +
                           " responder cannot read";
  switch (policy_.on_newer_revision) {
    case OnNewerRevision::kReset:
      fail(CmFailure::kRevisionUnsupported, what + "; connection reset", CloseKind::kAbortive);
      return;
    case OnNewerRevision::kClose:
      fail(CmFailure::kRevisionUnsupported, what + "; connection closed without a Reply",
           CloseKind::kGraceful);
      return;
    case OnNewerRevision::kReplyOwnRevision:
      break;
  }
  // RFC 5044 s7.1: answered in its own revision. The rest of the frame has a layout this
  // side does not know, so the connection cannot go on after the answer.
  wire::MpaFrame reply;
  reply.kind = wire::MpaFrameKind::kReply;
  reply.revision = policy_.revision;
  reply.crc = policy_.crc == CrcMode::kWant;
  reply.markers = policy_.markers_wanted;
  if (policy_.revision == wire::kMpaRevision2) {
    reply.enhanced = wire::MpaEnhancedParams{.ird = policy_.ird, .ord = policy_.ord};
  }
  send_frame(reply);
  fail(CmFailure::kRevisionUnsupported,
       what + "; answered in revision " + std::to_string(policy_.revision) +
           " (RFC 5044 s7.1), then closed: the rest of its frame cannot be read",
       CloseKind::kGraceful);
}

void MpaHandshake::on_timer(TimePoint now) {
  if (now < deadline_) return;
  switch (state_) {
    case State::kSettleAfterReply:
      after_reply(now);
      break;
    case State::kAwaitRequest:
      fail(CmFailure::kRequestTimeout,
           "no MPA Request within " + std::to_string(policy_.request_timeout.count()) + " ms");
      break;
    case State::kAwaitReply:
      fail(CmFailure::kReplyTimeout,
           "no MPA Reply within " + std::to_string(policy_.reply_timeout.count()) + " ms");
      break;
    case State::kAwaitReadRtrResponse:
      fail(CmFailure::kRtrTimeout, "no zero-length Read Response to our Read RTR within " +
                                       std::to_string(policy_.rtr_timeout.count()) + " ms");
      break;
    case State::kAwaitRtr:
      fail(CmFailure::kRtrTimeout, "no " + std::string(rtr_name(*params_.rtr)) + " RTR within " +
                                       std::to_string(policy_.rtr_timeout.count()) + " ms");
      break;
    default:
      break;
  }
}

void MpaHandshake::fail_on_pending_terminate(TimePoint now) {
  std::size_t used = 0;
  while (used < in_.size() && !finished()) {
    auto step = rx_->step(std::span(in_).subspan(used));
    if (!step || step->consumed == 0) return;  // not FPDUs after all: the close says it
    used += step->consumed;
    if (!step->ulpdu) continue;
    auto segment = wire::decode_ddp_segment(*step->ulpdu);
    if (segment && segment->header.opcode == wire::RdmapOpcode::kTerminate) {
      on_ulpdu(*step->ulpdu, now);
    }
  }
}

void MpaHandshake::on_peer_closed(bool reset, TimePoint now) {
  if (finished()) return;
  // cxgb4's answer to a peer that resets on a revision-2 Request: try again in revision 1.
  if (initiator_ && state_ == State::kAwaitReply && reset && policy_.fallback_to_revision1 &&
      sent_frame_ && sent_frame_->revision == wire::kMpaRevision2) {
    state_ = State::kFailed;
    CmEvent ev;
    ev.type = CmEventType::kRetryRevision1;
    ev.detail = "connection reset after a revision-2 Request; retrying in revision 1";
    events_.push_back(std::move(ev));
    return;
  }
  // A responder that refuses after its Reply (RFC 6581: no matching RTR, insufficient IRD)
  // sends a Terminate and closes. Inside first_fpdu_delay that Terminate still waits in in_:
  // it, not the close, says why.
  if (state_ == State::kSettleAfterReply) {
    fail_on_pending_terminate(now);
    if (finished()) return;
  }
  std::string detail = reset ? "the peer reset the TCP connection during MPA setup"
                             : "the peer closed the TCP connection during MPA setup";
  if (reset && initiator_ && state_ == State::kAwaitReply && sent_frame_ &&
      sent_frame_->revision == wire::kMpaRevision2) {
    detail +=
        "; a reset right after a revision-2 Request is how revision-1-only stacks answer "
        "(an initiator with fallback_to_revision1 retries in revision 1)";
  }
  fail(reset ? CmFailure::kConnectionReset : CmFailure::kConnectionClosed, std::move(detail),
       CloseKind::kGraceful);
}

std::vector<std::uint8_t> MpaHandshake::take_output() {
  std::vector<std::uint8_t> out;
  out.swap(out_);
  return out;
}

std::optional<CmEvent> MpaHandshake::poll_event() {
  if (events_.empty()) return std::nullopt;
  CmEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

std::optional<TimePoint> MpaHandshake::next_deadline() const {
  switch (state_) {
    case State::kAwaitRequest:
    case State::kAwaitReply:
    case State::kSettleAfterReply:
    case State::kAwaitRtr:
    case State::kAwaitReadRtrResponse:
      return deadline_;
    default:
      return std::nullopt;
  }
}

Handover MpaHandshake::take_handover() {
  Handover h;
  h.params = params_;
  h.tx_options = tx_ ? tx_->options() : wire::FpduOptions{};
  h.rx_options = wire::FpduOptions{.crc = params_.crc, .markers = params_.markers_from_peer};
  h.tx_stream_position = tx_ ? tx_->stream_position() : 0;
  h.rx_stream_position = rx_ ? rx_->stream_position() : 0;
  h.sequence = sequence_;
  h.leftover = std::move(in_);
  in_.clear();
  h.hold_tx_until_first_rx = !initiator_ && !params_.peer_to_peer;
  handed_over_ = true;
  return h;
}

}  // namespace rdma_interop::cm
