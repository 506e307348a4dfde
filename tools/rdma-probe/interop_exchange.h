// interop_exchange.h - the data exchange both rdma-probe roles run on an established
// connection: Send, RDMA Write and RDMA Read, every byte verified.
//
// Messages are Sends whose payload is UTF-8 JSON (at most 4 KiB); each side keeps four
// 4 KiB receives posted, from before connect/accept (ExchangeMemory: the peer may Send the
// moment setup completes, before connect() or accept() has returned). Regions are 64 KiB; a
// peer names a byte by (STag, tagged offset), and "addr" below is the tagged offset of the
// region's first octet as the provider gives it (Connection::tagged_offset): 0 on the tcp
// provider, so no address of ours reaches the peer; the virtual address on verbs (the iova
// convention, which the device uses). The receiver just uses what it was sent.
//
//   1. initiator: registers A (remote read+write), fills A = pattern(seed_a), Sends
//      {"op":"advertise","stag","addr","len":65536,"seed":seed_a,"negotiated":{its view}}
//   2. responder: RDMA Read A->B, checks B == pattern(seed_a); fills B = pattern(seed_b),
//      RDMA Write B->A; registers C (remote read+write); Sends {"op":"responder_done",
//      "seed":seed_b,"stag":C,"addr","len":65536,"negotiated":{its view}}
//   3. initiator: checks A == pattern(seed_b); fills D = pattern(seed_c), RDMA Write D->C,
//      RDMA Read C->E, checks E == pattern(seed_c); Sends {"op":"initiator_done","seed":seed_c}
//   4. responder: checks C == pattern(seed_c); Sends {"op":"verified","ok":..,"detail":..}
//   5. initiator disconnects; the responder waits for the close.
//
// A side that finds a problem early Sends {"op":"verified","ok":false,"detail":...} in place
// of its next message, so the peer reports the reason instead of a timeout.
//
// Before "advertise" the initiator may Send {"op":"echo","seq":N,"pad":"..."} messages; the
// responder Sends each back unchanged, so a Send round trip can be timed (rdma-probe URI).
//
// bytes_verified counts the 64 KiB patterns this side knows were checked end to end, by
// either side: three (seed_a, seed_b, seed_c), 196608 bytes, when the exchange succeeds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/transport/provider.h"

namespace rdma_interop::probe {

inline constexpr std::size_t kRegionSize = 64 * 1024;
inline constexpr std::size_t kMessageSize = 4 * 1024;
inline constexpr std::size_t kPostedReceives = 4;

// Every byte the exchange hands to the provider: the four message receive buffers, the
// send buffer and the 64 KiB regions. Create it before connecting or accepting, pass caps()
// to the provider so the receives are posted with the queue pair, and keep it alive until
// the connection is destroyed: the provider reads and writes this memory from its own
// thread, also for work still queued when an exchange gives up. Receive slot i completes
// with wr_id kFirstRecvWrId + i.
class ExchangeMemory {
 public:
  static constexpr std::uint64_t kFirstRecvWrId = 1;
  ExchangeMemory() : ring_(kMessageSize * kPostedReceives, 0), send_(kMessageSize, 0) {}
  ExchangeMemory(const ExchangeMemory&) = delete;
  ExchangeMemory& operator=(const ExchangeMemory&) = delete;

  transport::QpCaps caps();
  std::uint8_t* slot(std::size_t i) { return ring_.data() + i * kMessageSize; }
  std::vector<std::uint8_t>& ring() { return ring_; }
  std::vector<std::uint8_t>& send_buffer() { return send_; }
  // A new zeroed 64 KiB region; its address stays put.
  std::vector<std::uint8_t>& new_region() { return regions_.emplace_back(kRegionSize, 0); }

 private:
  std::vector<std::uint8_t> ring_;
  std::vector<std::uint8_t> send_;
  std::deque<std::vector<std::uint8_t>> regions_;
};

struct ExchangeStep {
  std::string name;  // "advertise", "verify_read", ...
  bool ok = false;
  std::string detail;  // what went wrong (empty when ok)
};

struct ExchangeResult {
  bool ok = false;
  std::uint64_t bytes_verified = 0;
  std::vector<ExchangeStep> steps;
  std::string detail;                             // the first failure, for humans
  std::optional<std::string> failure;             // a cm failure name when the connection broke
                                                  // ("connection_closed", "terminate_received"...)
  std::optional<wire::TerminateCause> terminate;  // sent or received
  bool timed_out = false;
  std::optional<nlohmann::ordered_json> peer_view;  // the peer's "negotiated" object, as it sent it
};

struct ExchangeOptions {
  std::chrono::steady_clock::time_point deadline;  // every wait ends by then
  const std::atomic<bool>* cancel = nullptr;       // set from a signal watcher: stop soon
  // Each wait ends, failing the exchange, once no completion has arrived for this long
  // (zero: only the deadline). A responder bounds what a silent peer costs it this way.
  std::chrono::milliseconds idle_timeout{0};
  // Initiator only: the local policy did not send its RTR (a never-RTR personality). Its
  // application stays silent and waits for the responder's verdict instead of starting the
  // exchange, so the responder sees the missing RTR rather than an unexpected Send.
  bool silent_initiator = false;
};

// `memory` is the one whose caps() the connection was made with.
ExchangeResult run_initiator_exchange(transport::Connection& connection, ExchangeMemory& memory,
                                      const ExchangeOptions& options);
ExchangeResult run_responder_exchange(transport::Connection& connection, ExchangeMemory& memory,
                                      const ExchangeOptions& options);

// rdma-probe's probes (peer_probe.h) borrow the exchange on connections of their own.
//
// Round trips of `count` echo messages of `size` octets (at least the bare message, about
// 30), in microseconds, each from posting the Send to the echo's arrival. Stops at the
// first failure (r.detail says why; r.ok is false).
std::vector<double> echo_round_trips(transport::Connection& connection, ExchangeMemory& memory,
                                     const ExchangeOptions& options, int count, std::size_t size,
                                     ExchangeResult& r);

// A region the responder granted remote read and write, 64 KiB from (stag, addr).
struct PeerRegion {
  std::uint32_t stag = 0;
  std::uint64_t addr = 0;  // the tagged offset of its first octet, as advertised
  std::uint64_t len = 0;
};
// Runs steps 1 and 2 of the initiator's exchange and stops there, with the responder's
// region C: a known-good STag, so a probe can go out of its bounds on purpose.
std::optional<PeerRegion> fetch_responder_region(transport::Connection& connection,
                                                 ExchangeMemory& memory,
                                                 const ExchangeOptions& options,
                                                 ExchangeResult& r);

}  // namespace rdma_interop::probe
