#include "core/rdmap/rdmap_endpoint.h"

#include <algorithm>
#include <cstring>

#include "core/util/byte_order.h"

namespace rdma_interop::rdmap {
namespace {

using wire::DdpHeader;
using wire::RdmapOpcode;
using wire::TermLayer;
using wire::TerminateCause;
using wire::TerminateMessage;

// RFC 5041 s7.2 untagged buffer errors.
constexpr TerminateCause kNoBuffer{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                   wire::kDdpUntaggedCodeNoBuffer};
constexpr TerminateCause kMsnRange{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                   wire::kDdpUntaggedCodeMsnRange};
constexpr TerminateCause kInvalidMo{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                    wire::kDdpUntaggedCodeInvalidMo};
constexpr TerminateCause kMessageTooLong{TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                         wire::kDdpUntaggedCodeMessageTooLong};
// RFC 5041 s7.2 tagged buffer errors, for a Read Response that does not match our Read.
constexpr TerminateCause kTaggedInvalidStag{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                            wire::kDdpTaggedCodeInvalidStag};
constexpr TerminateCause kTaggedBaseOrBounds{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                             wire::kDdpTaggedCodeBaseOrBounds};
// RFC 5041 s7.2 "local catastrophic": siw's answer when placing into a receive buffer fails
// (siw_proc_send) and when a Read Response arrives with no Read outstanding (siw_proc_rresp).
constexpr TerminateCause kDdpCatastrophic{TermLayer::kDdp, wire::kDdpEtypeLocalCatastrophic, 0};
// RFC 5040 s7.1: siw_qp_sq_proc_tx() ends the stream this way when a local buffer of a
// send work request fails its check.
constexpr TerminateCause kRdmapLocalCatastrophic{
    TermLayer::kRdmap, wire::kRdmapEtypeLocalCatastrophic, wire::kRdmapCodeUnspecified};
// RFC 5040 s7.1 remote operation errors.
constexpr TerminateCause kUnexpectedOpcode{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                           wire::kRdmapCodeUnexpectedOpcode};
// More Read Requests than the IRD we granted: siw_init_rresp() answers "irq exceeded" with
// RDMAP remote operation error, catastrophic error localized to the stream (0x07).
constexpr TerminateCause kIrdExceeded{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                      wire::kRdmapCodeCatastrophicStream};

bool is_send(RdmapOpcode op) {
  return op == RdmapOpcode::kSend || op == RdmapOpcode::kSendWithInvalidate ||
         op == RdmapOpcode::kSendWithSolicitedEvent ||
         op == RdmapOpcode::kSendWithSolicitedEventAndInvalidate;
}
bool has_invalidate(RdmapOpcode op) {
  return op == RdmapOpcode::kSendWithInvalidate ||
         op == RdmapOpcode::kSendWithSolicitedEventAndInvalidate;
}
bool has_solicited_event(RdmapOpcode op) {
  return op == RdmapOpcode::kSendWithSolicitedEvent ||
         op == RdmapOpcode::kSendWithSolicitedEventAndInvalidate;
}

bool wr_is_send(WrOpcode op) {
  return op == WrOpcode::kSend || op == WrOpcode::kSendWithInvalidate ||
         op == WrOpcode::kSendWithSolicitedEvent ||
         op == WrOpcode::kSendWithSolicitedEventAndInvalidate;
}
bool wr_has_invalidate(WrOpcode op) {
  return op == WrOpcode::kSendWithInvalidate ||
         op == WrOpcode::kSendWithSolicitedEventAndInvalidate;
}
bool wr_has_solicited_event(WrOpcode op) {
  return op == WrOpcode::kSendWithSolicitedEvent ||
         op == WrOpcode::kSendWithSolicitedEventAndInvalidate;
}

WcOpcode wc_opcode(WrOpcode op) {
  if (op == WrOpcode::kRdmaWrite) return WcOpcode::kRdmaWrite;
  if (op == WrOpcode::kRdmaRead) return WcOpcode::kRdmaRead;
  return WcOpcode::kSend;
}

// The status of our request that a peer's Terminate names: protection and tagged buffer
// errors are access errors, everything else an operation error.
WcStatus status_for_remote(const TerminateCause& c) {
  const bool access =
      (c.layer == TermLayer::kRdmap && c.etype == wire::kRdmapEtypeRemoteProtection) ||
      (c.layer == TermLayer::kDdp && c.etype == wire::kDdpEtypeTaggedBuffer);
  return access ? WcStatus::kRemoteAccessError : WcStatus::kRemoteOperationError;
}

// Built field by field: GCC warns about designated initializers that leave the optionals out.
WorkCompletion make_wc(std::uint64_t wr_id, WcOpcode opcode, WcStatus status,
                       std::uint32_t byte_len,
                       const std::optional<TerminateCause>& terminate = std::nullopt) {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.opcode = opcode;
  wc.status = status;
  wc.byte_len = byte_len;
  wc.terminate = terminate;
  return wc;
}

void copy_to(std::uint8_t* dst, std::span<const std::uint8_t> src) {
  if (!src.empty()) std::memcpy(dst, src.data(), src.size());
}

}  // namespace

std::string_view post_error_name(PostError e) {
  switch (e) {
    case PostError::kQueueFull: return "queue_full";
    case PostError::kInvalidRequest: return "invalid_request";
    case PostError::kNotConnected: return "not_connected";
  }
  return "unknown";
}

RdmapEndpoint::RdmapEndpoint(const cm::NegotiatedParams& params,
                             const cm::RdmapSequence& sequence, MemoryRegistry& memory,
                             const EndpointLimits& limits, bool hold_tx_until_first_rx)
    : params_(params),
      seq_(sequence),
      memory_(memory),
      limits_(limits),
      hold_tx_(hold_tx_until_first_rx) {}

// ---- Posting -------------------------------------------------------------------------

std::optional<PostError> RdmapEndpoint::post_send(const SendWr& wr) {
  if (state_ != EndpointState::kRunning) return PostError::kNotConnected;
  if (static_cast<std::uint8_t>(wr.opcode) > static_cast<std::uint8_t>(WrOpcode::kRdmaRead)) {
    return PostError::kInvalidRequest;
  }
  // A buffer with bytes needs a key; STag 0 names nothing (memory_registry.h). An inline
  // one is read as it is, with no key (as IBV_SEND_INLINE); a Read's sink cannot be.
  if (wr.inline_data && wr.opcode == WrOpcode::kRdmaRead) return PostError::kInvalidRequest;
  if (wr.sge.length > 0 && wr.sge.lkey == 0 && !wr.inline_data) {
    return PostError::kInvalidRequest;
  }
  // With ORD 0 a Read could never leave the send queue.
  if (wr.opcode == WrOpcode::kRdmaRead && params_.ord == 0) return PostError::kInvalidRequest;
  // Outstanding send requests: queued, being sent, or Reads awaiting their response.
  if (send_queue_.size() + orq_.size() >= limits_.max_send_wr) return PostError::kQueueFull;
  send_queue_.push_back(SendEntry{.wr = wr});
  return std::nullopt;
}

std::optional<PostError> RdmapEndpoint::post_recv(const RecvWr& wr) {
  if (state_ != EndpointState::kRunning) return PostError::kNotConnected;
  if (wr.sge.length > 0 && wr.sge.lkey == 0) return PostError::kInvalidRequest;
  if (recv_queue_.size() >= limits_.max_recv_wr) return PostError::kQueueFull;
  recv_queue_.push_back(RecvEntry{.wr = wr});
  return std::nullopt;
}

// ---- Receive path --------------------------------------------------------------------

std::span<std::uint8_t> RdmapEndpoint::placement_target(const wire::UlpduInProgress& u) const {
  if (state_ != EndpointState::kRunning || u.head.size() < wire::kDdpTaggedHeaderLen ||
      u.received < u.head.size() || u.length < u.received) {
    return {};
  }
  auto segment = wire::decode_ddp_segment(u.head);
  if (!segment || segment->header.opcode != RdmapOpcode::kRdmaWrite) return {};
  const DdpHeader& h = segment->header;
  const std::size_t payload = u.length - wire::kDdpTaggedHeaderLen;
  auto dst = memory_.check_remote(h.stag, h.tagged_offset, payload,
                                  RemoteAccess::kTaggedPlacement);
  if (!dst || *dst == nullptr) return {};
  const std::size_t done = u.received - wire::kDdpTaggedHeaderLen;
  return {*dst + done, payload - done};
}

void RdmapEndpoint::on_ulpdu(std::span<const std::uint8_t> ulpdu, wire::PlacedRange placed) {
  counters_.ulpdus_received++;
  received_any_ = true;
  auto segment = wire::decode_ddp_segment(ulpdu);
  if (state_ != EndpointState::kRunning) {
    // Already terminating: only note a Terminate that crossed ours.
    if (segment && segment->header.opcode == RdmapOpcode::kTerminate && !term_received_) {
      if (auto m = wire::decode_terminate_body(segment->payload)) term_received_ = *m;
    }
    return;
  }
  if (!segment) {
    // A malformed Terminate is never answered with a Terminate (RFC 5040 s4.8): the peer
    // is already closing. Anything else gets the Terminate its error names.
    if (ulpdu.size() >= 2 && (ulpdu[1] & wire::kRdmapOpcodeMask) ==
                                 static_cast<std::uint8_t>(RdmapOpcode::kTerminate)) {
      state_ = EndpointState::kError;
      malformed_term_received_ = wire::read_malformed_terminate({}, segment.error());
      flush_all({}, std::nullopt, false);
      return;
    }
    terminate(wire::terminate_for_ulpdu(segment.error(), ulpdu), {});
    return;
  }
  const DdpHeader& h = segment->header;
  if (!placed.empty() && (h.opcode != RdmapOpcode::kRdmaWrite ||
                          placed.offset < wire::kDdpTaggedHeaderLen ||
                          placed.offset + placed.length > ulpdu.size())) {
    // placement_target names only a Write's payload: the caller placed something else.
    terminate(wire::terminate_for_cause(kDdpCatastrophic, ulpdu), {});
    return;
  }
  switch (h.opcode) {
    case RdmapOpcode::kRdmaWrite:
      on_write_segment(h, segment->payload, ulpdu, placed);
      break;
    case RdmapOpcode::kRdmaReadRequest:
      on_read_request(h, segment->payload, ulpdu);
      break;
    case RdmapOpcode::kRdmaReadResponse:
      on_read_response_segment(h, segment->payload, ulpdu);
      break;
    case RdmapOpcode::kTerminate:
      on_terminate(segment->payload);
      break;
    default:
      on_send_segment(h, segment->payload, ulpdu);
      break;
  }
}

// RFC 5040 s5.3, RFC 5041 s5: a Send lands in the oldest posted receive at its MO. The
// checks run in siw's order (siw_proc_send, siw_send_check_ntoh): a buffer, the MSN, the
// MO, then the length.
void RdmapEndpoint::on_send_segment(const DdpHeader& h, std::span<const std::uint8_t> payload,
                                    std::span<const std::uint8_t> ulpdu) {
  if (recv_queue_.empty()) {
    terminate(wire::terminate_for_cause(kNoBuffer, ulpdu), {});
    return;
  }
  RecvEntry& r = recv_queue_.front();
  const Blame this_recv{.queue = Blame::Queue::kRecv, .index = 0};
  if (h.msn != seq_.next_send_msn_rx) {
    terminate(wire::terminate_for_cause(kMsnRange, ulpdu), {});
    return;
  }
  if (h.message_offset != r.received) {
    terminate(wire::terminate_for_cause(kInvalidMo, ulpdu), {});
    return;
  }
  if (!r.started) {
    auto buffer = memory_.check_local(r.wr.sge.lkey, r.wr.sge.addr, r.wr.sge.length, true);
    if (!buffer) {
      Blame b = this_recv;
      b.status = WcStatus::kLocalProtectionError;
      terminate(wire::terminate_for_cause(kDdpCatastrophic, ulpdu), b);
      return;
    }
    r.buffer = *buffer;
    r.started = true;
    r.opcode = h.opcode;
    r.invalidate_stag = h.invalidate_stag;
  } else if (h.opcode != r.opcode) {
    // One message, one opcode: a segment of another Send type cuts into it.
    terminate(wire::terminate_for_cause(kUnexpectedOpcode, ulpdu), {});
    return;
  }
  // RFC 5041 s7.2 code 0x05. (siw reports this case as 0x02 "no buffer"; the RFC code
  // says what went wrong.)
  if (payload.size() > r.wr.sge.length - r.received) {
    Blame b = this_recv;
    b.status = WcStatus::kLocalLengthError;
    terminate(wire::terminate_for_cause(kMessageTooLong, ulpdu), b);
    return;
  }
  copy_to(r.buffer + r.received, payload);
  r.received += static_cast<std::uint32_t>(payload.size());
  counters_.bytes_placed += payload.size();
  if (!h.last) return;

  seq_.next_send_msn_rx++;
  WorkCompletion wc = make_wc(r.wr.wr_id, WcOpcode::kRecv, WcStatus::kSuccess, r.received);
  wc.solicited = has_solicited_event(r.opcode);
  if (has_invalidate(r.opcode)) {
    // RFC 5040 s5.3: the named STag stops granting access once the Send is placed.
    auto invalidated = memory_.invalidate(r.invalidate_stag);
    if (!invalidated) {
      Blame b = this_recv;
      b.status = WcStatus::kRemoteOperationError;
      terminate(wire::terminate_for_cause(invalidated.error(), ulpdu), b);
      return;
    }
    wc.invalidated_stag = *invalidated;
  }
  recv_queue_.pop_front();
  complete(std::move(wc));
}

// RFC 5040 s5.1: each tagged segment names its own place; siw_proc_write checks the STag,
// rights and bounds of every one. Zero-length Writes (the RTR) are never checked.
void RdmapEndpoint::on_write_segment(const DdpHeader& h, std::span<const std::uint8_t> payload,
                                     std::span<const std::uint8_t> ulpdu,
                                     wire::PlacedRange placed) {
  auto dst = memory_.check_remote(h.stag, h.tagged_offset, payload.size(),
                                  RemoteAccess::kTaggedPlacement);
  if (!dst) {
    terminate(wire::terminate_for_cause(dst.error(), ulpdu), {});
    return;
  }
  if (placed.empty()) {
    copy_to(*dst, payload);
  } else {
    // What came before and after the range the reader placed (placement_target).
    const std::size_t from = placed.offset - wire::kDdpTaggedHeaderLen;
    const std::size_t to = from + placed.length;
    copy_to(*dst, payload.first(from));
    copy_to(*dst + to, payload.subspan(to));
  }
  counters_.bytes_placed += payload.size();
}

// RFC 5040 s5.2: queue the Read Response; the source is checked on arrival, so the
// Terminate carries the Read Request it is about.
void RdmapEndpoint::on_read_request(const DdpHeader& h, std::span<const std::uint8_t> payload,
                                    std::span<const std::uint8_t> ulpdu) {
  auto request = wire::decode_read_request(payload);
  if (!request) {
    terminate(wire::terminate_for_ulpdu(request.error(), ulpdu), {});
    return;
  }
  if (h.msn != seq_.next_read_msn_rx) {
    terminate(wire::terminate_for_cause(kMsnRange, ulpdu), {});
    return;
  }
  if (irq_.size() >= params_.ird) {
    terminate(wire::terminate_for_cause(kIrdExceeded, ulpdu), {});
    return;
  }
  auto source = memory_.check_remote(request->source_stag, request->source_tagged_offset,
                                     request->size, RemoteAccess::kReadSource);
  if (!source) {
    terminate(wire::terminate_for_cause(source.error(), ulpdu), {});
    return;
  }
  seq_.next_read_msn_rx++;
  irq_.push_back(PeerRead{.request = *request, .source = *source});
  counters_.peer_reads_queued = irq_.size();
}

// The Read Response must answer the oldest outstanding Read exactly: its sink STag, the
// next sink offset, and no more or fewer octets than asked (siw_rresp_check_ntoh).
void RdmapEndpoint::on_read_response_segment(const DdpHeader& h,
                                             std::span<const std::uint8_t> payload,
                                             std::span<const std::uint8_t> ulpdu) {
  if (orq_.empty()) {
    terminate(wire::terminate_for_cause(kDdpCatastrophic, ulpdu), {});
    return;
  }
  OutstandingRead& rd = orq_.front();
  Blame this_read{.queue = Blame::Queue::kOrq, .index = 0,
                  .status = WcStatus::kRemoteOperationError};
  const Sge& sink = rd.wr.sge;
  // A zero-length Read names no memory, so its single empty Response is not matched
  // against an STag either (the RFC 6581 Read RTR is one; siw sends it with STag 1).
  if (sink.length == 0 && payload.empty() && h.last) {
    if (rd.wr.signaled) {
      complete(make_wc(rd.wr.wr_id, WcOpcode::kRdmaRead, WcStatus::kSuccess, 0));
    }
    orq_.pop_front();
    counters_.reads_outstanding = orq_.size();
    return;
  }
  if (h.stag != sink.lkey) {
    terminate(wire::terminate_for_cause(kTaggedInvalidStag, ulpdu), this_read);
    return;
  }
  const std::uint64_t remaining = sink.length - rd.placed;
  if (h.tagged_offset != rd.sink_tagged_offset + rd.placed || payload.size() > remaining ||
      (h.last && payload.size() != remaining)) {
    terminate(wire::terminate_for_cause(kTaggedBaseOrBounds, ulpdu), this_read);
    return;
  }
  auto dst = memory_.check_local(sink.lkey, sink.addr + rd.placed, payload.size(), true);
  if (!dst) {
    this_read.status = WcStatus::kLocalProtectionError;
    terminate(wire::terminate_for_cause(dst.error(), ulpdu), this_read);
    return;
  }
  copy_to(*dst, payload);
  rd.placed += static_cast<std::uint32_t>(payload.size());
  counters_.bytes_placed += payload.size();
  if (!h.last) return;
  if (rd.wr.signaled) {
    complete(make_wc(rd.wr.wr_id, WcOpcode::kRdmaRead, WcStatus::kSuccess, rd.placed));
  }
  orq_.pop_front();
  counters_.reads_outstanding = orq_.size();
}

void RdmapEndpoint::on_terminate(std::span<const std::uint8_t> body) {
  state_ = EndpointState::kError;
  auto message = wire::decode_terminate_body(body);
  if (!message) {
    // Malformed: not answered, just closed.
    malformed_term_received_ = wire::read_malformed_terminate(body, message.error());
    flush_all({}, std::nullopt, false);
    return;
  }
  term_received_ = *message;
  flush_all(blame_for_received(*message), message->cause, false);
}

// Which of our requests a peer's Terminate is about, from the DDP header it echoes.
// Sends and Writes complete once handed out (as in siw), so only one still being
// segmented, or a Read awaiting its response, can be named.
RdmapEndpoint::Blame RdmapEndpoint::blame_for_received(const TerminateMessage& m) const {
  const auto& d = m.ddp_header;
  if (d.size() < 2) return {};
  const bool tagged = (d[0] & wire::kDdpFlagTagged) != 0;
  const auto op = static_cast<RdmapOpcode>(d[1] & wire::kRdmapOpcodeMask);
  const WcStatus status = status_for_remote(m.cause);
  const SendEntry* head = send_queue_.empty() ? nullptr : &send_queue_.front();
  if (!tagged && d.size() >= wire::kDdpUntaggedHeaderLen) {
    const std::uint32_t msn = load_be32(&d[10]);
    if (op == RdmapOpcode::kRdmaReadRequest) {
      for (std::size_t i = 0; i < orq_.size(); ++i) {
        if (orq_[i].msn == msn) return {.queue = Blame::Queue::kOrq, .index = i, .status = status};
      }
    } else if (is_send(op) && head != nullptr && head->started && wr_is_send(head->wr.opcode) &&
               head->msn == msn) {
      return {.queue = Blame::Queue::kSend, .index = 0, .status = status};
    }
  } else if (tagged && d.size() >= wire::kDdpTaggedHeaderLen && op == RdmapOpcode::kRdmaWrite) {
    const std::uint32_t stag = load_be32(&d[2]);
    if (head != nullptr && head->started && head->wr.opcode == WrOpcode::kRdmaWrite &&
        head->wr.remote_stag == stag) {
      return {.queue = Blame::Queue::kSend, .index = 0, .status = status};
    }
  }
  return {};
}

// ---- Transmit path -------------------------------------------------------------------

std::uint32_t RdmapEndpoint::max_payload(bool tagged) const {
  const std::size_t header = tagged ? wire::kDdpTaggedHeaderLen : wire::kDdpUntaggedHeaderLen;
  return limits_.max_ulpdu > header ? static_cast<std::uint32_t>(limits_.max_ulpdu - header) : 1;
}

// A message once started is finished before the other source gets a turn (a receiver such
// as siw cannot take two tagged messages cut into each other); between messages, queued
// Read Responses and our send queue take turns.
RdmapEndpoint::TxSource RdmapEndpoint::pick_source() const {
  if (tx_current_ != TxSource::kNone) return tx_current_;
  const bool sq_ready =
      !send_queue_.empty() &&
      (send_queue_.front().wr.opcode != WrOpcode::kRdmaRead || orq_.size() < params_.ord);
  const bool irq_ready = !irq_.empty();
  if (sq_ready && irq_ready) {
    return last_was_read_response_ ? TxSource::kSendQueue : TxSource::kReadResponses;
  }
  if (sq_ready) return TxSource::kSendQueue;
  if (irq_ready) return TxSource::kReadResponses;
  return TxSource::kNone;
}

bool RdmapEndpoint::has_outgoing() const {
  if (terminate_pending_) return true;
  if (state_ != EndpointState::kRunning) return false;
  if (hold_tx_ && !received_any_) return false;
  return pick_source() != TxSource::kNone;
}

std::optional<OutgoingUlpdu> RdmapEndpoint::next_outgoing() {
  if (terminate_pending_) {
    // RFC 5040 s4.8: the Terminate is the last message on the stream (QN 2).
    OutgoingUlpdu u;
    u.header_length = wire::encode_ddp_header(wire::terminate_header(seq_.next_term_msn_tx++),
                                              u.header);
    u.payload = terminate_body_;
    terminate_pending_ = false;
    state_ = EndpointState::kError;
    counters_.ulpdus_sent++;
    return u;
  }
  if (state_ != EndpointState::kRunning) return std::nullopt;
  // RFC 5044 s7.1: a responder without peer-to-peer sends nothing before the first FPDU.
  if (hold_tx_ && !received_any_) return std::nullopt;
  switch (pick_source()) {
    case TxSource::kSendQueue: return next_from_send_queue();
    case TxSource::kReadResponses: return next_read_response();
    case TxSource::kNone: break;
  }
  return std::nullopt;
}

void RdmapEndpoint::own_inline_payloads() {
  for (SendEntry& e : send_queue_) {
    if (!e.wr.inline_data || e.owned || e.wr.sge.length == 0) continue;
    // The whole payload, also what went: `local + sent` keeps pointing at the next octet.
    const auto* from = e.started ? e.local : reinterpret_cast<const std::uint8_t*>(e.wr.sge.addr);
    e.owned = std::make_shared<const std::vector<std::uint8_t>>(from, from + e.wr.sge.length);
    if (e.started) e.local = e.owned->data();
  }
}

std::optional<OutgoingUlpdu> RdmapEndpoint::next_from_send_queue() {
  SendEntry& e = send_queue_.front();
  const bool is_read = e.wr.opcode == WrOpcode::kRdmaRead;
  if (!e.started) {
    if (e.wr.inline_data) {
      // No key to check: the poster's buffer, or the copy made when its post returned.
      e.local = e.owned ? e.owned->data() : reinterpret_cast<const std::uint8_t*>(e.wr.sge.addr);
    } else {
      // A Read's sink is written by the Response, so it needs local write.
      auto local = memory_.check_local(e.wr.sge.lkey, e.wr.sge.addr, e.wr.sge.length, is_read);
      if (!local) {
        terminate(wire::terminate_for_cause(kRdmapLocalCatastrophic, {}),
                  Blame{.queue = Blame::Queue::kSend, .index = 0,
                        .status = WcStatus::kLocalProtectionError});
        return next_outgoing();
      }
      e.local = *local;
    }
    e.started = true;
    if (wr_is_send(e.wr.opcode)) e.msn = seq_.next_send_msn_tx++;
  }
  OutgoingUlpdu u;
  counters_.ulpdus_sent++;
  if (is_read) {
    const std::uint32_t msn = seq_.next_read_msn_tx++;
    u.header_length = wire::encode_ddp_header(wire::read_request_header(msn), u.header);
    // The peer names our sink by (STag, tagged offset) in its Read Response (RFC 5040
    // s5.2): the sink's offset within its region, not its address (memory_registry.h).
    // A zero-length Read names no memory (its lkey may be 0): offset 0.
    const std::uint64_t sink_to = memory_.tagged_offset(e.wr.sge.lkey, e.wr.sge.addr).value_or(0);
    const auto body =
        wire::encode_read_request(wire::ReadRequest{.sink_stag = e.wr.sge.lkey,
                                                    .sink_tagged_offset = sink_to,
                                                    .size = e.wr.sge.length,
                                                    .source_stag = e.wr.remote_stag,
                                                    .source_tagged_offset = e.wr.remote_addr});
    std::copy(body.begin(), body.end(), u.header.begin() + u.header_length);
    u.header_length += body.size();
    orq_.push_back(OutstandingRead{.wr = e.wr, .msn = msn, .sink_tagged_offset = sink_to});
    send_queue_.pop_front();
    counters_.reads_outstanding = orq_.size();
    tx_current_ = TxSource::kNone;
    last_was_read_response_ = false;
    return u;
  }
  const bool tagged = e.wr.opcode == WrOpcode::kRdmaWrite;
  const std::uint32_t chunk = std::min(e.wr.sge.length - e.sent, max_payload(tagged));
  const bool last = e.sent + chunk == e.wr.sge.length;
  // RFC 5041 s5: tagged segments advance the TO, untagged ones the MO; L on the last.
  const DdpHeader h =
      tagged ? wire::rdma_write_header(e.wr.remote_stag, e.wr.remote_addr + e.sent, last)
             : wire::send_header(e.msn, e.sent, last, wr_has_solicited_event(e.wr.opcode),
                                 wr_has_invalidate(e.wr.opcode)
                                     ? std::optional<std::uint32_t>(e.wr.invalidate_stag)
                                     : std::nullopt);
  u.header_length = wire::encode_ddp_header(h, u.header);
  if (chunk > 0) u.payload = std::span<const std::uint8_t>(e.local + e.sent, chunk);
  u.payload_copy = e.owned;
  e.sent += chunk;
  if (!last) {
    tx_current_ = TxSource::kSendQueue;
    return u;
  }
  // Complete once the last segment is handed out, as siw does (siw_qp_sq_process).
  if (e.wr.signaled) {
    complete(make_wc(e.wr.wr_id, wc_opcode(e.wr.opcode), WcStatus::kSuccess, e.wr.sge.length));
  }
  send_queue_.pop_front();
  tx_current_ = TxSource::kNone;
  last_was_read_response_ = false;
  return u;
}

std::optional<OutgoingUlpdu> RdmapEndpoint::next_read_response() {
  PeerRead& p = irq_.front();
  const std::uint32_t chunk = std::min(p.request.size - p.sent, max_payload(true));
  const bool last = p.sent + chunk == p.request.size;
  OutgoingUlpdu u;
  u.header_length = wire::encode_ddp_header(
      wire::read_response_header(p.request.sink_stag, p.request.sink_tagged_offset + p.sent,
                                 last),
      u.header);
  if (chunk > 0) u.payload = std::span<const std::uint8_t>(p.source + p.sent, chunk);
  p.sent += chunk;
  counters_.ulpdus_sent++;
  if (!last) {
    tx_current_ = TxSource::kReadResponses;
    return u;
  }
  irq_.pop_front();
  counters_.peer_reads_queued = irq_.size();
  tx_current_ = TxSource::kNone;
  last_was_read_response_ = true;
  return u;
}

std::optional<WorkCompletion> RdmapEndpoint::poll_completion() {
  if (completions_.empty()) return std::nullopt;
  WorkCompletion wc = std::move(completions_.front());
  completions_.pop_front();
  return wc;
}

// ---- Errors --------------------------------------------------------------------------

void RdmapEndpoint::on_stream_error(wire::WireError error) {
  if (state_ != EndpointState::kRunning) return;
  // The stream's framing failed, so no header of the offending segment can be trusted.
  terminate(wire::terminate_for_ulpdu(error, {}), {});
}

void RdmapEndpoint::on_connection_lost() {
  if (state_ == EndpointState::kRunning) flush_all({}, std::nullopt, true);
  terminate_pending_ = false;
  state_ = EndpointState::kError;
}

void RdmapEndpoint::terminate_for_ulp(const TerminateCause& cause) {
  // The ULP judged a message it already received, so there is no offending segment to echo.
  terminate(wire::terminate_for_cause(cause, {}), {});
}

bool RdmapEndpoint::close_requested() const { return state_ == EndpointState::kError; }

void RdmapEndpoint::terminate(const TerminateMessage& message, const Blame& blame) {
  if (state_ != EndpointState::kRunning) return;
  term_sent_ = message;
  terminate_body_ = wire::encode_terminate_body(message);
  terminate_pending_ = true;
  state_ = EndpointState::kTerminating;
  flush_all(blame, message.cause, false);
}

// Verbs semantics: once the queue pair is in error every outstanding request completes, in
// posting order per queue (Reads awaiting a response were posted before anything still in
// the send queue). The request the error is about gets its own status; after a lost
// connection, those already on the wire are fatal errors; the rest are flushed.
void RdmapEndpoint::flush_all(const Blame& blame, const std::optional<TerminateCause>& cause,
                              bool connection_lost) {
  auto status = [&](Blame::Queue q, std::size_t i, bool in_flight) {
    if (blame.queue == q && blame.index == i) return blame.status;
    return connection_lost && in_flight ? WcStatus::kFatalError : WcStatus::kFlushed;
  };
  for (std::size_t i = 0; i < orq_.size(); ++i) {
    const OutstandingRead& rd = orq_[i];
    complete(make_wc(rd.wr.wr_id, WcOpcode::kRdmaRead, status(Blame::Queue::kOrq, i, true),
                     rd.placed, cause));
  }
  for (std::size_t i = 0; i < send_queue_.size(); ++i) {
    const SendEntry& e = send_queue_[i];
    complete(make_wc(e.wr.wr_id, wc_opcode(e.wr.opcode),
                     status(Blame::Queue::kSend, i, e.started), e.sent, cause));
  }
  for (std::size_t i = 0; i < recv_queue_.size(); ++i) {
    const RecvEntry& r = recv_queue_[i];
    complete(make_wc(r.wr.wr_id, WcOpcode::kRecv, status(Blame::Queue::kRecv, i, r.started),
                     r.received, cause));
  }
  orq_.clear();
  send_queue_.clear();
  recv_queue_.clear();
  irq_.clear();
  tx_current_ = TxSource::kNone;
  counters_.reads_outstanding = 0;
  counters_.peer_reads_queued = 0;
}

}  // namespace rdma_interop::rdmap
