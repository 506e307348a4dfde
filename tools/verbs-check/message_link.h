// message_link.h - the small protocol both verbs-check processes speak over one connection
// of the verbs provider: text control messages and 4 KiB data messages as Sends, plus
// helpers that post one work request and wait for its completion.
//
// Each side keeps kSlots receives of kSlotSize octets posted (the first ones before the
// connection exists, through QpCaps::initial_recvs), reposting a slot as soon as its message
// is copied out. Every wait ends at the link's deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/transport/provider.h"

namespace rdma_interop::verbs_check {

using Clock = std::chrono::steady_clock;

// The receive ring; create it before connect/accept and keep it alive with the connection.
class ReceiveRing {
 public:
  static constexpr std::size_t kSlots = 4;
  static constexpr std::size_t kSlotSize = 4096;
  static constexpr std::uint64_t kFirstWrId = 1;
  static constexpr std::uint32_t kSendDepth = 64;  // the connection's max_send_wr (caps())
  ReceiveRing() : bytes_(kSlots * kSlotSize, 0) {}
  transport::QpCaps caps();
  std::uint8_t* slot(std::size_t i) { return bytes_.data() + i * kSlotSize; }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

class MessageLink {
 public:
  MessageLink(transport::Connection& connection, ReceiveRing& ring, Clock::time_point deadline);
  ~MessageLink();
  MessageLink(const MessageLink&) = delete;
  MessageLink& operator=(const MessageLink&) = delete;

  // Registers the ring (for reposting) and the send buffer. False: `why` says.
  bool open(std::string& why);

  // Sends `payload` (at most kSlotSize octets) and waits for its successful completion.
  bool send(const std::vector<std::uint8_t>& payload, std::string& why);
  bool send_text(const std::string& text, std::string& why);
  // The next message, reposting its slot. nullopt on timeout, error or closed connection.
  std::optional<std::vector<std::uint8_t>> receive(std::string& why);
  std::optional<std::string> receive_text(std::string& why);

  // Posts `wr` (signaled, with a fresh wr_id) and returns its completion, whatever its
  // status. nullopt: not posted or no completion by the deadline (`why` says).
  std::optional<rdmap::WorkCompletion> post_and_wait(rdmap::SendWr wr, std::string& why);
  // Posts `wrs` as one batch (signaled, fresh wr_ids; `batch` is what post_sends said) and
  // returns the completions of the ones posted, in their order, whatever their status.
  // nullopt: one of them did not complete by the deadline (`why` says).
  std::optional<std::vector<rdmap::WorkCompletion>> post_batch_and_wait(
      std::vector<rdmap::SendWr> wrs, transport::Connection::PostBatch& batch, std::string& why);
  // How many completions of requests (not receives) come within `wait`: after every posted
  // request's completion was taken, a refused request's would be one.
  std::size_t strays(std::chrono::milliseconds wait);

  transport::Connection& connection() { return c_; }
  Clock::time_point deadline() const { return deadline_; }
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }

 private:
  std::optional<rdmap::WorkCompletion> wait_for(
      const std::function<bool(const rdmap::WorkCompletion&)>& want, std::string& why);

  transport::Connection& c_;
  ReceiveRing& ring_;
  Clock::time_point deadline_;
  std::vector<std::uint8_t> send_buffer_;
  std::uint32_t ring_stag_ = 0;
  std::uint32_t send_stag_ = 0;
  std::deque<rdmap::WorkCompletion> stash_;
  std::uint64_t next_wr_id_ = 1000;
};

}  // namespace rdma_interop::verbs_check
