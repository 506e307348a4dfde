#include "core/messaging/peer_link.h"

#include <unistd.h>

#include <chrono>
#include <iterator>

#include "core/rdmap/memory_registry.h"

namespace rdma_interop::messaging {
namespace {

using credit::ChannelAction;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kSendFlag = 0x80000000u;
constexpr std::uint64_t kIndexMask = 0x7FFFFFFFu;

}  // namespace

std::uint64_t make_wr_id(PeerId peer, bool send, std::uint32_t index) {
  return (std::uint64_t{peer} << 32) | (send ? kSendFlag : 0) | index;
}

PeerId wr_peer(std::uint64_t wr_id) {
  return static_cast<PeerId>(wr_id >> 32);
}

bool wr_is_send(std::uint64_t wr_id) {
  return (wr_id & kSendFlag) != 0;
}

std::uint32_t wr_index(std::uint64_t wr_id) {
  return static_cast<std::uint32_t>(wr_id & kIndexMask);
}

MessageId make_message_id(PeerId peer, std::uint32_t index) {
  return make_wr_id(peer, false, index);
}

PeerLink::PeerLink(PeerId id_, std::string name_, std::string scheme_,
                   const credit::ChannelConfig& config)
    : id(id_), name(std::move(name_)), scheme(std::move(scheme_)), channel(config) {}

std::vector<transport::InitialRecv> PeerLink::initial_receives() const {
  std::vector<transport::InitialRecv> out;
  for (std::uint32_t i = 0; i < channel.receive_buffers(); ++i) {
    out.push_back(transport::InitialRecv{make_wr_id(id, false, i), channel.receive_buffer(i),
                                         channel.buffer_size()});
  }
  return out;
}

void PeerLink::register_buffers() {
  rx_stag_ = conn->register_memory(channel.receive_memory().data(), channel.receive_memory().size(),
                                   rdmap::kLocalWrite);
  tx_stag_ = conn->register_memory(channel.send_memory().data(), channel.send_memory().size(),
                                   rdmap::kLocalWrite);
}

void PeerLink::take_actions() {
  // The channel's vector swapped in whole when nothing waits before it (the common case):
  // no action is moved, and the vectors keep their capacity, so a message allocates nothing.
  if (outbox_.empty()) {
    channel.take_actions(outbox_);
    return;
  }
  channel.take_actions(scratch_);
  outbox_.insert(outbox_.end(), std::make_move_iterator(scratch_.begin()),
                 std::make_move_iterator(scratch_.end()));
}

void PeerLink::carry_out(std::unique_lock<std::mutex>& lock, HandlerSink& sink) {
  take_actions();
  if (posting_ || outbox_.empty()) return;
  posting_ = true;
  // The poster's own (posting_): taken whole from the outbox, which keeps filling meanwhile.
  std::vector<ChannelAction>& batch = batch_;
  Refusals& refused = refused_;
  std::vector<std::uint32_t>& unhandled = unhandled_;
  while (!outbox_.empty()) {
    batch.clear();
    batch.swap(outbox_);
    lock.unlock();
    bool write_refused = false;
    auto is_post = [](const ChannelAction& a) {
      return a.type == ChannelAction::Type::kPostSend || a.type == ChannelAction::Type::kPostWrite;
    };
    for (std::size_t i = 0; i < batch.size();) {
      const ChannelAction& a = batch[i];
      if (write_refused && a.type == ChannelAction::Type::kPostSend) {
        // The message after a refused write says its data is placed: it must not go.
        refused.emplace_back(a, "the RDMA Write before it was refused");
        write_refused = false;
        ++i;
        continue;
      }
      write_refused = false;
      if (!is_post(a)) {
        carry_out_one(a, sink, refused, unhandled);
        ++i;
        continue;
      }
      // Posts in a row go to the provider together: a Write and the message that announces
      // it, or the messages a burst made, leave in one sendmsg on tcp (Connection::post_sends).
      std::size_t end = i;
      while (end < batch.size() && is_post(batch[end])) ++end;
      const std::size_t before = refused.size();
      i += post_run(std::span(batch).subspan(i, end - i), refused);
      if (refused.size() > before) {
        write_refused = batch[i].type == ChannelAction::Type::kPostWrite;
        ++i;
      }
    }
    lock.lock();
    for (auto& [a, why] : refused) channel.on_post_refused(a, why);
    for (std::uint32_t index : unhandled) channel.delivered(index, Clock::now());
    refused.clear();
    unhandled.clear();
    take_actions();
  }
  batch.clear();  // nothing of a carried-out action is kept (its detail, its payload's span)
  posting_ = false;
  cv.notify_all();  // take_connection() may be waiting
}

bool PeerLink::posts_at_once(std::uint32_t length) const {
  return !posting_ && outbox_.empty() && conn && conn->max_inline_data() >= length;
}

rdmap::SendWr PeerLink::send_wr(const ChannelAction& a) const {
  if (a.type == ChannelAction::Type::kPostWrite) {
    // Named like a send (its slot's wr_id): a completion confirms it and what came before.
    rdmap::SendWr wr{make_wr_id(id, true, a.index), rdmap::WrOpcode::kRdmaWrite,
                     rdmap::Sge{a.write.local_addr, a.write.length, a.write.local_stag}};
    wr.remote_stag = a.write.remote_stag;
    wr.remote_addr = a.write.remote_offset;
    wr.signaled = a.signaled;
    wr.inline_data = a.write.borrowed;
    return wr;
  }
  rdmap::SendWr wr{make_wr_id(id, true, a.index), rdmap::WrOpcode::kSend,
                   rdmap::Sge{reinterpret_cast<std::uint64_t>(channel.send_buffer(a.index)),
                              a.length, tx_stag_}};
  wr.signaled = a.signaled;
  return wr;
}

std::size_t PeerLink::post_run(std::span<const ChannelAction> run, Refusals& refused) {
  if (!conn) {
    refused.emplace_back(run.front(), rdmap::post_error_name(rdmap::PostError::kNotConnected));
    return 0;
  }
  wrs_.clear();
  for (const ChannelAction& a : run) wrs_.push_back(send_wr(a));
  const auto r = conn->post_sends(wrs_);
  if (r.posted < run.size()) {
    refused.emplace_back(run[r.posted], r.error ? rdmap::post_error_name(*r.error)
                                                : std::string_view("not posted"));
  }
  return r.posted;
}

// One action, without `mu` (this thread is the poster, so `conn` stays). What needs the
// channel again is noted for the caller: a post the provider refused, a message nobody takes.
void PeerLink::carry_out_one(const ChannelAction& a, HandlerSink& sink, Refusals& refused,
                             std::vector<std::uint32_t>& unhandled) {
  switch (a.type) {
    case ChannelAction::Type::kPostSend:
    case ChannelAction::Type::kPostWrite:
      return;  // carry_out posts them, in runs (post_run)
    case ChannelAction::Type::kPostRecv: {
      const rdmap::RecvWr wr{
          make_wr_id(id, false, a.index),
          rdmap::Sge{reinterpret_cast<std::uint64_t>(channel.receive_buffer(a.index)),
                     channel.buffer_size(), rx_stag_}};
      const auto err = conn ? conn->post_recv(wr) : rdmap::PostError::kNotConnected;
      if (err) refused.emplace_back(a, rdmap::post_error_name(*err));
      return;
    }
    case ChannelAction::Type::kDeliver:
      if (sink.takes_messages()) {
        sink.queue(
            Delivery{shared_from_this(), Message{id, make_message_id(id, a.index), a.payload}});
      } else {
        unhandled.push_back(a.index);
      }
      return;
    case ChannelAction::Type::kTerminate:
      if (conn) conn->terminate(a.cause);
      return;
    case ChannelAction::Type::kReady:
      sink.queue(Ready{id});
      cv.notify_all();
      return;
    case ChannelAction::Type::kFailed:
    case ChannelAction::Type::kClosed: {
      std::string detail = a.detail;
      if (a.type == ChannelAction::Type::kFailed && conn) {
        // The provider's own words for what happened to the connection, if it has any.
        const std::string conn_detail = conn->error_detail();
        if (!conn_detail.empty() && detail.find(conn_detail) == std::string::npos) {
          detail += ": " + conn_detail;
        }
      }
      sink.queue(Ended{id, a.type == ChannelAction::Type::kFailed, std::move(detail)});
      cv.notify_all();
      return;
    }
  }
}

std::unique_ptr<transport::Connection> PeerLink::take_connection(
    std::unique_lock<std::mutex>& lock) {
  for (const int fd : receiver_wakes) {
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);  // an eventfd: the receiver leaves its wait
  }
  cv.wait(lock, [&] { return !posting_ && receivers == 0; });
  return std::move(conn);
}

}  // namespace rdma_interop::messaging
