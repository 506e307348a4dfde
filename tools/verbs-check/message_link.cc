#include "tools/verbs-check/message_link.h"

#include <algorithm>
#include <cstring>

namespace rdma_interop::verbs_check {
namespace {

constexpr auto kSlice = std::chrono::milliseconds(50);

}  // namespace

transport::QpCaps ReceiveRing::caps() {
  transport::QpCaps caps;
  caps.max_send_wr = kSendDepth;
  caps.max_recv_wr = 64;
  for (std::size_t i = 0; i < kSlots; ++i) {
    caps.initial_recvs.push_back({kFirstWrId + i, slot(i), static_cast<std::uint32_t>(kSlotSize)});
  }
  return caps;
}

MessageLink::MessageLink(transport::Connection& connection, ReceiveRing& ring,
                         Clock::time_point deadline)
    : c_(connection), ring_(ring), deadline_(deadline), send_buffer_(ReceiveRing::kSlotSize, 0) {}

MessageLink::~MessageLink() {
  if (ring_stag_ != 0) c_.deregister_memory(ring_stag_);
  if (send_stag_ != 0) c_.deregister_memory(send_stag_);
}

bool MessageLink::open(std::string& why) {
  ring_stag_ = c_.register_memory(ring_.bytes().data(), ring_.bytes().size(), rdmap::kLocalWrite);
  send_stag_ = c_.register_memory(send_buffer_.data(), send_buffer_.size(), 0);
  if (ring_stag_ == 0 || send_stag_ == 0) {
    why = "register_memory failed for the message buffers";
    return false;
  }
  return true;
}

bool MessageLink::send(const std::vector<std::uint8_t>& payload, std::string& why) {
  if (payload.size() > send_buffer_.size()) {
    why = "message larger than a receive slot";
    return false;
  }
  std::copy(payload.begin(), payload.end(), send_buffer_.begin());
  rdmap::SendWr wr;
  wr.opcode = rdmap::WrOpcode::kSend;
  wr.sge = {reinterpret_cast<std::uint64_t>(send_buffer_.data()),
            static_cast<std::uint32_t>(payload.size()), send_stag_};
  auto wc = post_and_wait(wr, why);
  if (!wc) return false;
  if (wc->status != rdmap::WcStatus::kSuccess) {
    why = "Send completed with " + std::string(rdmap::wc_status_name(wc->status));
    return false;
  }
  return true;
}

bool MessageLink::send_text(const std::string& text, std::string& why) {
  return send(std::vector<std::uint8_t>(text.begin(), text.end()), why);
}

std::optional<std::vector<std::uint8_t>> MessageLink::receive(std::string& why) {
  auto wc = wait_for(
      [](const rdmap::WorkCompletion& w) { return w.opcode == rdmap::WcOpcode::kRecv; }, why);
  if (!wc) return std::nullopt;
  if (wc->status != rdmap::WcStatus::kSuccess) {
    why = "a receive completed with " + std::string(rdmap::wc_status_name(wc->status));
    return std::nullopt;
  }
  const std::size_t slot = static_cast<std::size_t>(wc->wr_id - ReceiveRing::kFirstWrId);
  if (slot >= ReceiveRing::kSlots || wc->byte_len > ReceiveRing::kSlotSize) {
    why = "a receive completion names no slot of ours (wr_id " + std::to_string(wc->wr_id) + ")";
    return std::nullopt;
  }
  std::vector<std::uint8_t> message(ring_.slot(slot), ring_.slot(slot) + wc->byte_len);
  rdmap::RecvWr again;
  again.wr_id = wc->wr_id;
  again.sge = {reinterpret_cast<std::uint64_t>(ring_.slot(slot)),
               static_cast<std::uint32_t>(ReceiveRing::kSlotSize), ring_stag_};
  if (auto e = c_.post_recv(again)) {
    why = "reposting a receive failed: " + std::string(rdmap::post_error_name(*e));
    return std::nullopt;
  }
  return message;
}

std::optional<std::string> MessageLink::receive_text(std::string& why) {
  auto bytes = receive(why);
  if (!bytes) return std::nullopt;
  return std::string(bytes->begin(), bytes->end());
}

std::optional<rdmap::WorkCompletion> MessageLink::post_and_wait(rdmap::SendWr wr,
                                                                std::string& why) {
  transport::Connection::PostBatch batch;
  auto done = post_batch_and_wait({wr}, batch, why);
  if (batch.error) {
    why = "post_send refused the request: " + std::string(rdmap::post_error_name(*batch.error)) +
          (c_.error_detail().empty() ? std::string() : " (" + c_.error_detail() + ")");
    return std::nullopt;
  }
  if (!done || done->empty()) return std::nullopt;  // (one posted, or an error above)
  return done->front();
}

std::optional<std::vector<rdmap::WorkCompletion>> MessageLink::post_batch_and_wait(
    std::vector<rdmap::SendWr> wrs, transport::Connection::PostBatch& batch, std::string& why) {
  for (auto& wr : wrs) {
    wr.wr_id = next_wr_id_++;
    wr.signaled = true;
  }
  batch = c_.post_sends(wrs);
  std::vector<rdmap::WorkCompletion> done;
  for (std::size_t i = 0; i < batch.posted; ++i) {
    const std::uint64_t id = wrs[i].wr_id;
    auto wc = wait_for([id](const rdmap::WorkCompletion& w) { return w.wr_id == id; }, why);
    if (!wc) {
      why = "request " + std::to_string(i) + " of the " + std::to_string(batch.posted) +
            " posted: " + why;
      return std::nullopt;
    }
    done.push_back(*wc);
  }
  return done;
}

std::size_t MessageLink::strays(std::chrono::milliseconds wait) {
  const auto until = Clock::now() + wait;
  std::size_t count = 0;
  while (Clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    for (auto& w : c_.poll_completions(16, std::max(left, std::chrono::milliseconds(1)))) {
      if (w.opcode != rdmap::WcOpcode::kRecv) ++count;
      stash_.push_back(w);  // a receive is still the link's to take
    }
  }
  return count;
}

std::optional<rdmap::WorkCompletion> MessageLink::wait_for(
    const std::function<bool(const rdmap::WorkCompletion&)>& want, std::string& why) {
  for (;;) {
    if (auto it = std::find_if(stash_.begin(), stash_.end(), want); it != stash_.end()) {
      auto wc = *it;
      stash_.erase(it);
      return wc;
    }
    const auto now = Clock::now();
    if (now >= deadline_) {
      why = "no completion before the deadline" +
            (c_.error_detail().empty() ? std::string() : " (" + c_.error_detail() + ")");
      return std::nullopt;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now);
    auto wcs = c_.poll_completions(
        16, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(kSlice)));
    for (auto& w : wcs) stash_.push_back(w);
  }
}

}  // namespace rdma_interop::verbs_check
