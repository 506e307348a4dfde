#include "core/transport/verbs/cm_channel.h"

#include <fcntl.h>
#include <sys/epoll.h>

#include <cerrno>

#include "core/transport/verbs/cm_address.h"

namespace rdma_interop::transport::verbs {
namespace {

constexpr int kEventsPerWakeup = 64;  // then let the completion channels run

}  // namespace

std::string describe(const CmEvent& event) {
  std::string s = rdma_event_str(event.type);
  if (event.status != 0) s += " (status " + std::to_string(event.status) + ")";
  return s;
}

Expected<std::shared_ptr<CmChannel>, std::string> CmChannel::open(runtime::EventLoop& loop) {
  errno = 0;
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) {
    const int err = errno;
    return unexpected("rdma_cm is not available: " + errno_sentence(err) +
                      " (no RDMA device, or the rdma_ucm module is not loaded and "
                      "/dev/infiniband/rdma_cm is missing)");
  }
  // rdma_get_cm_event then returns EAGAIN instead of blocking the event thread.
  const int flags = ::fcntl(channel->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    const int err = errno;
    rdma_destroy_event_channel(channel);
    return unexpected("cannot make the rdma_cm channel nonblocking: " + errno_sentence(err));
  }
  std::shared_ptr<CmChannel> self(new CmChannel(loop, channel));
  const auto token = loop.watch(channel->fd, EPOLLIN, self);
  if (!token)
    return unexpected("cannot watch the rdma_cm channel: " + errno_sentence(token.error()));
  self->token_ = *token;
  self->watching_ = true;
  return self;
}

CmChannel::CmChannel(runtime::EventLoop& loop, rdma_event_channel* channel)
    : loop_(loop), channel_(channel) {}

CmChannel::~CmChannel() {
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
}

Expected<rdma_cm_id*, std::string> CmChannel::create_id(std::weak_ptr<CmHandler> handler) {
  if (channel_ == nullptr) return unexpected(std::string("the rdma_cm channel is closed"));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
    return unexpected("rdma_create_id failed: " + errno_sentence(errno));
  }
  handlers_[id] = std::move(handler);
  return id;
}

void CmChannel::attach(rdma_cm_id* id, std::weak_ptr<CmHandler> handler) {
  handlers_[id] = std::move(handler);
}

void CmChannel::detach(rdma_cm_id* id) {
  handlers_.erase(id);
}

void CmChannel::destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return;
  detach(id);
  rdma_destroy_id(id);
}

void CmChannel::close() {
  if (watching_) {
    loop_.unwatch(token_);
    watching_ = false;
  }
  handlers_.clear();
  if (channel_ != nullptr) {
    rdma_destroy_event_channel(channel_);
    channel_ = nullptr;
  }
}

void CmChannel::on_io(std::uint32_t) {
  const auto keep = shared_from_this();  // a handler may close us
  for (int i = 0; i < kEventsPerWakeup && channel_ != nullptr; ++i) {
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(channel_, &raw) != 0) return;  // EAGAIN: drained
    CmEvent event;
    event.type = raw->event;
    event.status = raw->status;
    event.id = raw->id;
    event.listen_id = raw->listen_id;
    const rdma_conn_param& conn = raw->param.conn;
    if (conn.private_data != nullptr && conn.private_data_len > 0) {
      const auto* p = static_cast<const std::uint8_t*>(conn.private_data);
      event.private_data.assign(p, p + conn.private_data_len);
    }
    event.responder_resources = conn.responder_resources;
    event.initiator_depth = conn.initiator_depth;
    rdma_ack_cm_event(raw);

    rdma_cm_id* owner_id = event.type == RDMA_CM_EVENT_CONNECT_REQUEST ? event.listen_id : event.id;
    std::shared_ptr<CmHandler> handler;
    if (const auto it = handlers_.find(owner_id); it != handlers_.end())
      handler = it->second.lock();
    if (handler) {
      handler->on_cm_event(event);
    } else if (event.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      // The listener is gone: refuse the connection rather than leave the peer waiting.
      rdma_reject(event.id, nullptr, 0);
      rdma_destroy_id(event.id);
    }
  }
}

}  // namespace rdma_interop::transport::verbs
