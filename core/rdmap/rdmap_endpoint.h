// rdmap_endpoint.h - one iWARP queue pair's data path as a sans-I/O engine: RDMAP over DDP
// (RFC 5040, RFC 5041) after MPA setup.
//
// In: work requests from the application, verified ULPDUs from the FPDU decoder, the loss
// of the connection. Out: ULPDUs to frame and send (header octets plus a payload view
// straight into registered memory: no copy), work completions, and at most one Terminate.
//
//   while (auto u = ep.next_outgoing()) transport.send_fpdu(u->header(), u->payload);
//   ep.on_ulpdu(ulpdu, placed);         // each ULPDU the FpduDecoder hands out
//   while (auto wc = ep.poll_completion()) app(*wc);
//   if (ep.close_requested()) transport.close();
//
// Rules it enforces (each failure sends the Terminate the RFCs name, then the endpoint is in
// error and every outstanding request completes with an error status, never silently):
//   - Send: into the oldest posted receive; none posted = DDP untagged "no buffer" (0x02),
//     too long = DDP "message too long" (0x05), MSN out of order = MSN range (0x03).
//   - RDMA Write / Read Response: STag, bounds and rights via MemoryRegistry.
//   - RDMA Read: at most `ord` of ours outstanding (more wait in the send queue); at most
//     `ird` of the peer's accepted, more is a Terminate; source checked for remote read.
//   - Send with Invalidate: the named STag stops granting access; one the peer was never
//     given remote access to cannot be invalidated (RDMAP 0/2/0x09, MemoryRegistry).
//   - Tagged offsets are the registry's (0-based unless the region asks for addresses):
//     a Read Request names our sink by its offset in its region, never by its address.
//   - Messages larger than the MULPDU leave as several DDP segments (MO / TO advance, L on
//     the last), and arrive that way too.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/cm/mpa_handshake.h"
#include "core/cm/negotiated_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/work_request.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"

namespace rdma_interop::rdmap {

struct EndpointLimits {
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  // Largest ULPDU we send (DDP header + payload). The FPDU decoder's max_ulpdu bounds what
  // we accept.
  std::uint16_t max_ulpdu = 16384;
};

enum class PostError : std::uint8_t {
  kQueueFull,       // ENOMEM in verbs: max_send_wr / max_recv_wr reached
  kInvalidRequest,  // EINVAL: e.g. a Read with no local buffer key, an unknown opcode
  kNotConnected,    // the endpoint is in error or closed
};
std::string_view post_error_name(PostError e);

// One ULPDU to send: `header_octets()` (DDP/RDMAP header, plus a Read Request body) then
// `payload` (registered memory, not copied; for a Terminate, its body, which can exceed
// 64 octets when it echoes a Read Request). The header is the caller's copy; the payload
// stays valid until its work request's completion is polled (registered memory), or for
// the endpoint's lifetime (a Terminate's body), so several ULPDUs can be framed before one
// write. An inline request's payload is the poster's buffer, valid only until its post
// returns, or the copy own_inline_payloads made, which the ULPDU holds (payload_copy).
struct OutgoingUlpdu {
  std::array<std::uint8_t, 64> header{};
  std::size_t header_length = 0;
  std::span<const std::uint8_t> payload;
  // The copy `payload` points into when it is an inline request's (own_inline_payloads):
  // the ULPDU keeps it, as the request may be gone before the ULPDU is written.
  std::shared_ptr<const std::vector<std::uint8_t>> payload_copy;
  std::span<const std::uint8_t> header_octets() const { return {header.data(), header_length}; }
};

enum class EndpointState : std::uint8_t {
  kRunning,      // RTS
  kTerminating,  // a Terminate is queued; send it, then close
  kError,        // Terminate sent or received, or the connection was lost
};

struct EndpointCounters {
  std::uint64_t ulpdus_sent = 0;
  std::uint64_t ulpdus_received = 0;
  std::uint64_t bytes_placed = 0;
  std::uint64_t reads_outstanding = 0;   // ours, awaiting Read Response
  std::uint64_t peer_reads_queued = 0;   // the peer's, awaiting our Read Response
};

class RdmapEndpoint {
 public:
  RdmapEndpoint(const cm::NegotiatedParams& params, const cm::RdmapSequence& sequence,
                MemoryRegistry& memory, const EndpointLimits& limits,
                bool hold_tx_until_first_rx = false);

  std::optional<PostError> post_send(const SendWr& wr);
  std::optional<PostError> post_recv(const RecvWr& wr);

  // `placed`: octets of `ulpdu` the caller already read into the place placement_target
  // named (FpduStep::placed); the rest of the ULPDU is placed from the view, as any.
  void on_ulpdu(std::span<const std::uint8_t> ulpdu, wire::PlacedRange placed = {});
  // Direct placement: where the rest of a ULPDU still arriving goes, when it is an RDMA
  // Write whose whole DDP header is in `ulpdu.head` and whose STag, bounds and rights check
  // now: its next length - received octets of registered memory. Empty otherwise (a Read
  // Response's place depends on the Read it answers, a Send's on the receive queue: they
  // are placed when they are whole). The caller reads into it with nothing else changing
  // the registry meanwhile, and gives what it read to the decoder (FpduDecoder::place);
  // on_ulpdu checks the Write again when the ULPDU is whole, and a Write that fails it
  // then (a region deregistered between two reads) is answered with its Terminate, as
  // always. What a segment that fails its CRC placed stays where it is: a Write's octets
  // are the application's only once a message after it is delivered (RFC 5040 s5.5),
  // which a failed stream never does (siw places before it checks the CRC too). The CRC
  // is then computed over the memory the octets were read into: whatever else writes it
  // meanwhile (the application, another connection's Write to the same region) fails the
  // check and is blamed on the peer, as in siw.
  std::span<std::uint8_t> placement_target(const wire::UlpduInProgress& ulpdu) const;
  // The FPDU stream failed (CRC, markers...): answer with terminate_for(error).
  void on_stream_error(wire::WireError error);
  // TCP closed or reset: everything outstanding completes with an error status.
  void on_connection_lost();
  // The upper layer found an error the RDMAP rules cannot see (e.g. a peer that sent beyond
  // the credits of a ULP's flow control): queues a Terminate with `cause` that names no
  // segment (M, D and R clear), and every outstanding request completes flushed with
  // `cause`, as after any Terminate we send. No effect unless kRunning.
  void terminate_for_ulp(const wire::TerminateCause& cause);

  std::optional<OutgoingUlpdu> next_outgoing();
  bool has_outgoing() const;
  // Inline requests (SendWr::inline_data) still queued get their own copy of their payload:
  // the caller's buffer is the caller's again once its post returns. Call before that; the
  // ULPDUs handed out before must be written or copied by then too.
  void own_inline_payloads();

  std::optional<WorkCompletion> poll_completion();

  EndpointState state() const { return state_; }
  bool close_requested() const;  // a Terminate went out or came in: close the connection
  const std::optional<wire::TerminateMessage>& terminate_sent() const { return term_sent_; }
  const std::optional<wire::TerminateMessage>& terminate_received() const {
    return term_received_;
  }
  // A Terminate from the peer that did not decode (the stream ended all the same).
  const std::optional<wire::MalformedTerminate>& malformed_terminate_received() const {
    return malformed_term_received_;
  }
  const EndpointCounters& counters() const { return counters_; }

 private:
  // A posted send work request and how far its transmission got.
  struct SendEntry {
    SendWr wr;
    const std::uint8_t* local = nullptr;  // resolved (lkey checked) when it starts
    // An inline request's payload once it was copied; its ULPDUs share it (OutgoingUlpdu).
    std::shared_ptr<const std::vector<std::uint8_t>> owned = {};
    std::uint32_t sent = 0;               // payload octets handed out
    std::uint32_t msn = 0;                // Send MSN, assigned when it starts
    bool started = false;
  };
  // One of our RDMA Reads whose Read Request went out (the ORQ, RFC 5040 s5.2).
  struct OutstandingRead {
    SendWr wr;
    std::uint32_t msn = 0;  // of its Read Request, to match a Terminate about it
    std::uint32_t placed = 0;
    std::uint64_t sink_tagged_offset = 0;  // what the Read Request named, for the Response
  };
  // A Read Request from the peer awaiting our Read Response (the IRQ, RFC 5040 s5.2).
  struct PeerRead {
    wire::ReadRequest request;
    const std::uint8_t* source = nullptr;
    std::uint32_t sent = 0;
  };
  struct RecvEntry {
    RecvWr wr;
    std::uint8_t* buffer = nullptr;  // resolved when the first segment of a Send arrives
    std::uint32_t received = 0;      // the next expected MO
    bool started = false;
    wire::RdmapOpcode opcode = wire::RdmapOpcode::kSend;
    std::uint32_t invalidate_stag = 0;
  };
  // Which request an error is about: it completes with `status`, the rest are flushed.
  struct Blame {
    enum class Queue : std::uint8_t { kNone, kSend, kOrq, kRecv };
    Queue queue = Queue::kNone;
    std::size_t index = 0;
    WcStatus status = WcStatus::kFlushed;
  };
  enum class TxSource : std::uint8_t { kNone, kSendQueue, kReadResponses };

  // Receive path, one handler per RDMAP message type (RFC 5040 s5).
  void on_send_segment(const wire::DdpHeader& h, std::span<const std::uint8_t> payload,
                       std::span<const std::uint8_t> ulpdu);
  void on_write_segment(const wire::DdpHeader& h, std::span<const std::uint8_t> payload,
                        std::span<const std::uint8_t> ulpdu, wire::PlacedRange placed);
  void on_read_request(const wire::DdpHeader& h, std::span<const std::uint8_t> payload,
                       std::span<const std::uint8_t> ulpdu);
  void on_read_response_segment(const wire::DdpHeader& h, std::span<const std::uint8_t> payload,
                                std::span<const std::uint8_t> ulpdu);
  void on_terminate(std::span<const std::uint8_t> body);
  // Transmit path.
  TxSource pick_source() const;
  std::optional<OutgoingUlpdu> next_from_send_queue();
  std::optional<OutgoingUlpdu> next_read_response();
  std::uint32_t max_payload(bool tagged) const;
  // Error path: queue `message`, then complete every outstanding request.
  void terminate(const wire::TerminateMessage& message, const Blame& blame);
  void flush_all(const Blame& blame, const std::optional<wire::TerminateCause>& cause,
                 bool connection_lost);
  Blame blame_for_received(const wire::TerminateMessage& message) const;
  void complete(WorkCompletion wc) { completions_.push_back(std::move(wc)); }

  cm::NegotiatedParams params_;
  cm::RdmapSequence seq_;
  MemoryRegistry& memory_;
  EndpointLimits limits_;
  bool hold_tx_ = false;
  bool received_any_ = false;

  std::deque<SendEntry> send_queue_;
  std::deque<OutstandingRead> orq_;
  std::deque<PeerRead> irq_;
  std::deque<RecvEntry> recv_queue_;
  std::deque<WorkCompletion> completions_;
  TxSource tx_current_ = TxSource::kNone;  // the message in the middle of being segmented
  bool last_was_read_response_ = false;    // alternation between the IRQ and our SQ
  bool terminate_pending_ = false;
  std::vector<std::uint8_t> terminate_body_;  // the queued Terminate's body (its payload)

  EndpointState state_ = EndpointState::kRunning;
  std::optional<wire::TerminateMessage> term_sent_;
  std::optional<wire::TerminateMessage> term_received_;
  std::optional<wire::MalformedTerminate> malformed_term_received_;
  EndpointCounters counters_;
};

}  // namespace rdma_interop::rdmap
