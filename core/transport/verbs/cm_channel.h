// cm_channel.h - the provider's rdma_cm event channel on its event thread: every cm_id of a
// provider reports here, and each event goes to the object that owns its cm_id.
//
// Events are copied into a CmEvent value and acknowledged at once (rdma_ack_cm_event), so
// that rdma_destroy_id, which waits until every event of its id was acknowledged, never
// waits on us. A CONNECT_REQUEST is delivered to the listener's handler (by its listen id);
// the new cm_id in it is the listener's to adopt, reject or destroy.
//
// Event thread only, except open() and the accessors noted.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/runtime/event_loop.h"
#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

// One rdma_cm event, detached from librdmacm's buffer.
struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_RESOLVED;
  int status = 0;                   // 0, -errno, or (REJECTED on IB) the IB reject reason
  rdma_cm_id* id = nullptr;         // the id the event is about (the new one for a request)
  rdma_cm_id* listen_id = nullptr;  // CONNECT_REQUEST: the listener's id
  std::vector<std::uint8_t> private_data;
  // rdma_conn_param as the kernel filled it; see verbs_connection.cc for what they mean per
  // transport and event.
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
};

// "RDMA_CM_EVENT_REJECTED (status 28)".
std::string describe(const CmEvent& event);

class CmHandler {
 public:
  virtual ~CmHandler() = default;
  virtual void on_cm_event(const CmEvent& event) = 0;
};

class CmChannel : public runtime::IoHandler, public std::enable_shared_from_this<CmChannel> {
 public:
  // Event thread: creates the channel (nonblocking) and watches it. Fails with a sentence
  // when rdma_cm is not available (no /dev/infiniband/rdma_cm, rdma_ucm not loaded...).
  static Expected<std::shared_ptr<CmChannel>, std::string> open(runtime::EventLoop& loop);
  ~CmChannel() override;

  // A new cm_id (RC, port space TCP) on this channel whose events go to `handler`; the
  // error is a sentence.
  Expected<rdma_cm_id*, std::string> create_id(std::weak_ptr<CmHandler> handler);
  // Events of `id` go to `handler` from now on (an adopted request id, a handover).
  void attach(rdma_cm_id* id, std::weak_ptr<CmHandler> handler);
  // No more events of `id` are delivered; call before rdma_destroy_id.
  void detach(rdma_cm_id* id);
  // Detaches and destroys `id` (its QP must be gone).
  void destroy_id(rdma_cm_id* id);

  // Stops watching and destroys the channel; ids still on it are the kernel's to clean up.
  void close();

  void on_io(std::uint32_t events) override;

 private:
  CmChannel(runtime::EventLoop& loop, rdma_event_channel* channel);

  runtime::EventLoop& loop_;
  rdma_event_channel* channel_;
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;
  std::unordered_map<rdma_cm_id*, std::weak_ptr<CmHandler>> handlers_;
};

}  // namespace rdma_interop::transport::verbs
