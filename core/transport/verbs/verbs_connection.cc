#include "core/transport/verbs/verbs_connection.h"

#include <sys/epoll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <span>

#include "core/transport/verbs/cm_address.h"
#include "core/transport/verbs/verbs_translate.h"

namespace rdma_interop::transport::verbs {
namespace {

constexpr int kPollBatch = 32;
constexpr int kCqEventsPerWakeup = 64;

// IB CM reject reasons rdma_cm passes up as the REJECTED event's status (IBA 12.6.7.2).
constexpr int kIbRejectInvalidServiceId = 8;  // nothing listens on that port
constexpr int kIbRejectConsumer = 28;         // the peer's application rejected

std::string_view op_name(rdmap::WcOpcode op) {
  switch (op) {
    case rdmap::WcOpcode::kSend:
      return "Send";
    case rdmap::WcOpcode::kRdmaWrite:
      return "RDMA Write";
    case rdmap::WcOpcode::kRdmaRead:
      return "RDMA Read";
    case rdmap::WcOpcode::kRecv:
      return "Receive";
  }
  return "request";
}

// ibv_post_send(3) returns an errno value; libsiw returns it negated (-ENOMEM), and some
// providers return -1 with errno set (`err`: errno as the call left it).
rdmap::PostError post_error_from(int rc, int err = 0) {
  if (rc == -1 && err != 0) rc = err;
  if (rc < 0) rc = -rc;
  switch (rc) {
    case ENOMEM:
      return rdmap::PostError::kQueueFull;
    case EINVAL:
      return rdmap::PostError::kInvalidRequest;
    default:
      return rdmap::PostError::kNotConnected;
  }
}

wire::MpaFrame synthesized_frame(wire::MpaFrameKind kind, std::vector<std::uint8_t> private_data,
                                 bool reject = false) {
  // rdma_cm shows private data only; revision 0 says "not visible" (see the header).
  wire::MpaFrame f;
  f.kind = kind;
  f.revision = 0;
  f.reject = reject;
  f.private_data = std::move(private_data);
  return f;
}

// A listener's overflow Reject (cm::kBacklogFullMarker). The IB CM's REJ carries a fixed
// 148 octets of private data (IBA 12.6.7), so over IB and RoCE the marker arrives followed
// by zeros; iWARP's MPA Reject carries exactly what was sent.
bool is_backlog_full_reject(const std::vector<std::uint8_t>& private_data) {
  auto end = private_data.end();
  while (end != private_data.begin() && *(end - 1) == 0) --end;
  return cm::is_backlog_full_marker(std::span(private_data.begin(), end));
}

}  // namespace

VerbsConnectionState::VerbsConnectionState(runtime::EventLoop& loop, CmChannel& channel,
                                           rdma_cm_id* id, std::unique_ptr<QueuePair> qp,
                                           std::shared_ptr<CompletionQueue> cq)
    : loop_(loop),
      channel_(channel),
      cq_(cq ? std::move(cq) : std::make_shared<CompletionQueue>()),
      id_(id),
      qp_(std::move(qp)) {
  // A shared queue's consumer may need the event thread for work it found elsewhere.
  cq_->offer_executor(loop_.executor());
}

VerbsConnectionState::~VerbsConnectionState() {
  // Normally teardown() ran on the event thread; this is the last resort for a state that
  // never got that far (its id is then no longer routed to it).
  for (auto& [stag, mr] : regions_) ibv_dereg_mr(mr);
  for (ibv_mr* mr : initial_regions_) ibv_dereg_mr(mr);
  qp_.reset();
  if (id_ != nullptr) rdma_destroy_id(id_);
}

// ---- Setup (event thread) -----------------------------------------------------------------

std::optional<std::string> VerbsConnectionState::start(const QpCaps& caps) {
  channel_.attach(id_, weak_from_this());
  const auto token = loop_.watch(qp_->channel()->fd, EPOLLIN, shared_from_this());
  if (!token) return "cannot watch the completion channel: " + errno_sentence(token.error());
  token_ = *token;
  watching_ = true;
  std::lock_guard lock(mu_);
  for (const InitialRecv& r : caps.initial_recvs) {
    // An int, not the enumerator: ibv_reg_mr is a macro that masks its access argument with
    // another enum's bits, which clang rejects for enumerators in C++20.
    const int local_write = IBV_ACCESS_LOCAL_WRITE;
    ibv_mr* mr = ibv_reg_mr(qp_->pd(), r.addr, r.length, local_write);
    if (mr == nullptr) {
      return "cannot register an initial receive buffer of " + std::to_string(r.length) +
             " octets: " + errno_sentence(errno) + " (RLIMIT_MEMLOCK?)";
    }
    initial_regions_.push_back(mr);
    const std::uint64_t seq = next_seq_++;
    ibv_sge sge{reinterpret_cast<std::uint64_t>(r.addr), r.length, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = seq | kRecvBit;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    rq_.push_back({seq, r.wr_id, rdmap::WcOpcode::kRecv, r.length});
    if (const int rc = ibv_post_recv(qp_->qp(), &wr, &bad); rc != 0) {
      rq_.pop_back();
      return "cannot post an initial receive: " + errno_sentence(rc);
    }
  }
  return std::nullopt;
}

void VerbsConnectionState::begin_setup(SetupParams params, runtime::TimePoint deadline,
                                       std::shared_ptr<SetupRendezvous> result) {
  setup_ = std::move(params);
  result_ = std::move(result);
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::kSetup;
  }
  setup_timer_ = loop_.add_timer(deadline, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self) return;
    self->setup_timer_.reset();
    self->fail_setup(connect_error(ConnectError::Kind::kTimeout,
                                   "the connection was not established in time (no "
                                   "RDMA_CM_EVENT_ESTABLISHED before the deadline)"));
  });
}

void VerbsConnectionState::fail_setup(ConnectError error) {
  if (setup_timer_) {
    loop_.cancel_timer(*setup_timer_);
    setup_timer_.reset();
  }
  teardown();
  if (result_) {
    result_->set(SetupResult{nullptr, std::move(error)});
    result_.reset();
  }
}

ConnectError VerbsConnectionState::setup_error(const CmEvent& e) const {
  const bool iwarp = qp_ && qp_->limits().iwarp;
  ConnectError error;
  switch (e.type) {
    case RDMA_CM_EVENT_REJECTED: {
      // IB/RoCE: the status is the CM's reject reason. iWARP: the driver's errno, which
      // differs between drivers (siw: -ECONNRESET for an MPA Reject, and a refused TCP
      // connection fails rdma_connect itself; cxgb4: -ECONNREFUSED for both). A refusal
      // carries no private data; a Reject may.
      const bool no_listener = iwarp ? e.status == -ECONNREFUSED && e.private_data.empty()
                                     : e.status == kIbRejectInvalidServiceId;
      if (no_listener) {
        error.kind = ConnectError::Kind::kUnreachable;
        error.sys_errno = ECONNREFUSED;  // as a TCP connect to a closed port: retried
        error.detail =
            "the peer refused the connection: nothing listens there (" + describe(e) + ")";
        return error;
      }
      error.kind = ConnectError::Kind::kSetup;
      error.failure = setup_.role == Role::kActive ? cm::CmFailure::kPeerRejected
                                                   : cm::CmFailure::kConnectionReset;
      error.detail = "the peer rejected the connection (" + describe(e) +
                     (!iwarp && e.status != kIbRejectConsumer ? ", not by its application" : "") +
                     ")";
      if (setup_.role == Role::kActive && is_backlog_full_reject(e.private_data)) {
        error.failure = cm::CmFailure::kBacklogFull;
        error.detail = "the peer's listener was over its backlog (a Reject with the \"" +
                       std::string(cm::kBacklogFullMarker) + "\" marker; " + describe(e) + ")";
      }
      error.peer_frame = synthesized_frame(wire::MpaFrameKind::kReply, e.private_data, true);
      return error;
    }
    case RDMA_CM_EVENT_UNREACHABLE:
      error.kind = ConnectError::Kind::kUnreachable;
      error.detail = "the peer's CM did not answer (" + describe(e) + ")";
      return error;
    case RDMA_CM_EVENT_DISCONNECTED:
      error.kind = ConnectError::Kind::kSetup;
      error.failure = cm::CmFailure::kConnectionClosed;
      error.detail = "the peer disconnected during setup (" + describe(e) + ")";
      return error;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      error.kind = ConnectError::Kind::kUnreachable;
      error.detail = "the RDMA device was removed during setup";
      return error;
    default:
      error.kind = ConnectError::Kind::kSetup;
      error.detail = "connection setup failed: " + describe(e);
      return error;
  }
}

void VerbsConnectionState::on_cm_event(const CmEvent& e) {
  Phase phase;
  {
    std::lock_guard lock(mu_);
    phase = phase_;
  }
  if (phase == Phase::kSetup) {
    on_setup_event(e);
    return;
  }
  if (phase != Phase::kEstablished) return;
  std::lock_guard lock(mu_);
  switch (e.type) {
    case RDMA_CM_EVENT_DISCONNECTED:
      disconnected_event_ = true;
      if (!final_state_) peer_closed_ = true;
      // Deliberately no ibv_modify_qp(ERR) here: see the header.
      record_final_state(
          ConnectionState::kClosed,
          "the peer disconnected (RDMA_CM_EVENT_DISCONNECTED); the queue pair was left as "
          "the transport has it",
          false);
      cv_.notify_all();
      break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      record_final_state(ConnectionState::kError, "the RDMA device was removed", true);
      break;
    default:
      break;  // TIMEWAIT_EXIT, ADDR_CHANGE, a repeated ESTABLISHED: nothing to do
  }
}

void VerbsConnectionState::on_setup_event(const CmEvent& e) {
  switch (e.type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      on_established(e);
      return;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      fail_setup(setup_error(e));
      return;
    default:
      return;
  }
}

void VerbsConnectionState::on_established(const CmEvent& e) {
  if (setup_timer_) {
    loop_.cancel_timer(*setup_timer_);
    setup_timer_.reset();
  }
  const bool active = setup_.role == Role::kActive;
  cm::NegotiatedParams p;
  p.revision = 0;  // MPA (iWARP) is the kernel's; IB and RoCE have none
  p.ird = setup_.ird;
  p.ord = setup_.ord;
  if (qp_->limits().iwarp) {
    // iw_cm reports the IRD/ORD the driver settled on (cma.c: initiator_depth = ird,
    // responder_resources = ord of the iw_cm event), after its RFC 6581 negotiation.
    if (e.initiator_depth != 0 || e.responder_resources != 0) {
      p.ird = e.initiator_depth;
      p.ord = e.responder_resources;
    }
  } else if (active) {
    // IB CM: the REP's depths in our perspective; the kernel programs our QP with them:
    // initiator_depth is the peer's responder resources (its IRD, our ORD), responder
    // resources the peer's initiator depth (its ORD, our IRD).
    p.ord = e.initiator_depth;
    p.ird = e.responder_resources;
    p.peer_ird = e.initiator_depth;
    p.peer_ord = e.responder_resources;
  }
  if (!active) {
    p.peer_ird = setup_.peer_ird;
    p.peer_ord = setup_.peer_ord;
  }
  // Active on iWARP: the peer's MPA Reply IRD/ORD are not reported; peer_ird/peer_ord stay 0.
  // CRC, markers and the RTR (NegotiatedParams' other fields) are never visible: left false.

  p.peer_private_data = active ? e.private_data : setup_.received_private_data;

  info_.scheme = "verbs";
  info_.params = p;
  info_.local_address = format_sockaddr(rdma_get_local_addr(id_));
  info_.peer_address = format_sockaddr(rdma_get_peer_addr(id_));
  info_.send_queue_depth = qp_->send_depth();
  if (active) {
    info_.sent_frame = synthesized_frame(wire::MpaFrameKind::kRequest, setup_.sent_private_data);
    info_.received_frame = synthesized_frame(wire::MpaFrameKind::kReply, e.private_data);
  } else {
    info_.received_frame =
        synthesized_frame(wire::MpaFrameKind::kRequest, setup_.received_private_data);
    info_.sent_frame = synthesized_frame(wire::MpaFrameKind::kReply, setup_.sent_private_data);
  }
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::kEstablished;
  }
  if (result_) {
    result_->set(SetupResult{shared_from_this(), std::nullopt});
    result_.reset();
  }
}

// ---- Application side -----------------------------------------------------------------------

std::uint32_t VerbsConnectionState::register_memory(void* addr, std::size_t length,
                                                    std::uint32_t access) {
  std::lock_guard lock(mu_);
  if (released_ || phase_ != Phase::kEstablished) return 0;
  ibv_mr* mr = ibv_reg_mr(qp_->pd(), addr, length, ibv_access_from(access));
  if (mr == nullptr) return 0;
  const bool remote = (access & (rdmap::kRemoteRead | rdmap::kRemoteWrite)) != 0;
  const std::uint32_t stag = remote ? mr->rkey : mr->lkey;
  if (stag == 0 || regions_.count(stag) != 0) {
    // A key we could not tell apart from another region's: refuse rather than mix them up.
    ibv_dereg_mr(mr);
    return 0;
  }
  regions_.emplace(stag, mr);
  return stag;
}

bool VerbsConnectionState::deregister_memory(std::uint32_t stag) {
  std::lock_guard lock(mu_);
  const auto it = regions_.find(stag);
  if (it == regions_.end()) return false;
  const int rc = ibv_dereg_mr(it->second);
  regions_.erase(it);
  return rc == 0;
}

std::uint32_t VerbsConnectionState::lkey_for(std::uint32_t stag) const {
  const auto it = regions_.find(stag);
  return it == regions_.end() ? stag : it->second->lkey;
}

std::optional<rdmap::PostError> VerbsConnectionState::post_send(const rdmap::SendWr& wr) {
  return post_sends(std::span(&wr, 1)).error;
}

Connection::PostBatch VerbsConnectionState::post_sends(std::span<const rdmap::SendWr> wrs) {
  std::lock_guard lock(mu_);
  Connection::PostBatch r;
  if (wrs.empty()) return r;
  if (released_ || app_closed_ || phase_ != Phase::kEstablished) {
    r.error = rdmap::PostError::kNotConnected;
    return r;
  }
  // The posting thread's, reused: a batch is a handful of requests, posted under mu_.
  thread_local std::vector<ibv_sge> sges;
  thread_local std::vector<ibv_send_wr> chain;
  sges.resize(wrs.size());
  chain.assign(wrs.size(), ibv_send_wr{});
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    const rdmap::SendWr& wr = wrs[i];
    ibv_send_wr& w = chain[i];
    const bool read = wr.opcode == rdmap::WrOpcode::kRdmaRead;
    sges[i] = ibv_sge{wr.sge.addr, wr.sge.length, lkey_for(wr.sge.lkey)};
    const std::uint64_t seq = next_seq_++;
    w.wr_id = seq;
    // A zero-length Send or Write names no buffer. A Read keeps its one element even at
    // length 0: some providers (siw) take a Read with exactly one.
    w.sg_list = &sges[i];
    w.num_sge = (wr.sge.length > 0 || read) ? 1 : 0;
    const IbvSendKind kind = ibv_send_kind(wr.opcode);
    w.opcode = static_cast<ibv_wr_opcode>(kind.opcode);
    w.send_flags = kind.flags | (wr.signaled ? static_cast<unsigned>(IBV_SEND_SIGNALED) : 0u) |
                   (wr.inline_data ? static_cast<unsigned>(IBV_SEND_INLINE) : 0u);
    if (wr.opcode == rdmap::WrOpcode::kRdmaWrite || read) {
      w.wr.rdma.remote_addr = wr.remote_addr;
      w.wr.rdma.rkey = wr.remote_stag;
    }
    if (kind.opcode == IBV_WR_SEND_WITH_INV) w.invalidate_rkey = wr.invalidate_stag;
    w.next = i + 1 < wrs.size() ? &chain[i + 1] : nullptr;
    sq_.push_back({seq, wr.wr_id, wc_opcode_of(wr.opcode), wr.sge.length});
  }
  // One call for the chain: a device rings its doorbell once for the batch. ibv_post_send's
  // contract on failure: the requests before *bad were posted, it and those after were not.
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_->qp(), chain.data(), &bad);
  const int err = errno;
  // As integers: `bad` may be null or anything a provider left there.
  const auto at = reinterpret_cast<std::uintptr_t>(bad);
  const auto first = reinterpret_cast<std::uintptr_t>(chain.data());
  const bool bad_in_chain = at >= first && at < first + chain.size() * sizeof(ibv_send_wr);
  if (rc == 0 && !bad_in_chain) {
    r.posted = wrs.size();
    return r;
  }
  // *bad wins over a 0: rdma-core's libsiw returns 0 with *bad_wr set when its send queue
  // fills in the middle of a chain (siw_post_send replaces its -ENOMEM with the result of
  // the doorbell it then rings). Taken at its word, the requests from *bad on were lost:
  // never executed, never completed (64 on an 8-deep queue: 8 completions, measured on
  // siw0; rxe0 returns ENOMEM as the man page says).
  r.posted = bad_in_chain ? (at - first) / sizeof(ibv_send_wr) : 0;
  sq_.erase(sq_.end() - static_cast<std::ptrdiff_t>(wrs.size() - r.posted), sq_.end());
  // A 0 return does not say why: libsiw's doorbell also replaces the -EINVAL of a request
  // it cannot encode. A full queue is the likely cause, not a known one.
  r.error = rc != 0 ? post_error_from(rc, err) : rdmap::PostError::kQueueFull;
  r.returned_success = rc == 0;
  return r;
}

std::optional<rdmap::PostError> VerbsConnectionState::post_recv(const rdmap::RecvWr& wr) {
  std::lock_guard lock(mu_);
  if (released_ || phase_ != Phase::kEstablished) return rdmap::PostError::kNotConnected;
  ibv_sge sge{wr.sge.addr, wr.sge.length, lkey_for(wr.sge.lkey)};
  ibv_recv_wr w{};
  const std::uint64_t seq = next_seq_++;
  w.wr_id = seq | kRecvBit;
  w.sg_list = &sge;
  w.num_sge = wr.sge.length > 0 ? 1 : 0;
  rq_.push_back({seq, wr.wr_id, rdmap::WcOpcode::kRecv, wr.sge.length});
  ibv_recv_wr* bad = nullptr;
  if (const int rc = ibv_post_recv(qp_->qp(), &w, &bad); rc != 0) {
    const int err = errno;
    rq_.pop_back();
    return post_error_from(rc, err);
  }
  return std::nullopt;
}

std::vector<rdmap::WorkCompletion> VerbsConnectionState::poll_completions(std::size_t max,
                                                                          Millis timeout) {
  // The caller reaps the CQ itself first, as a verbs application does: ibv_poll_cq reads
  // the queue in user memory (no syscall), so a completion already there is not left
  // waiting for the event thread to hear the channel and hand it across. Only a poll that
  // finds nothing waits for the event thread.
  drain_cq();
  return cq_->poll(max, timeout);
}

ConnectionState VerbsConnectionState::state() const {
  std::lock_guard lock(mu_);
  return final_state_.value_or(ConnectionState::kConnected);
}

std::string VerbsConnectionState::error_detail() const {
  std::lock_guard lock(mu_);
  return detail_;
}

void VerbsConnectionState::disconnect(Millis timeout) {
  {
    std::lock_guard lock(mu_);
    if (released_ || phase_ != Phase::kEstablished || app_closed_) return;
    app_closed_ = true;
    record_final_state(ConnectionState::kClosed, "disconnected by the application", false);
  }
  loop_.run([this] {
    // librdmacm: QP to error (IB/RoCE) or SQD (iWARP), then DREQ / TCP close. After the
    // peer's DISCONNECTED the kernel part fails harmlessly; the QP still leaves RTS.
    if (id_ != nullptr) rdma_disconnect(id_);
  });
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return disconnected_event_ || released_; });
}

void VerbsConnectionState::terminate(const wire::TerminateCause& cause) {
  {
    std::lock_guard lock(mu_);
    if (released_ || phase_ != Phase::kEstablished || app_closed_ || final_state_) return;
    app_closed_ = true;
    record_final_state(
        ConnectionState::kError,
        "the application ended the connection (" + wire::describe(cause) +
            "); the verbs provider cannot send a Terminate from user space, so it "
            "disconnected (rdma_disconnect) and moved the queue pair to error instead",
        false);
  }
  // Posted, not run: the caller does not wait. A release() after it runs after it.
  loop_.post([self = shared_from_this()] {
    if (self->id_ == nullptr || !self->qp_) return;  // torn down meanwhile
    // librdmacm moves the QP to error (IB/RoCE) or SQD (iWARP, where siw then closes TCP
    // in order). The explicit move to error flushes every outstanding request on both, at
    // once; a QP already in error takes it unchanged, and a failure leaves the flushes to
    // the disconnect.
    rdma_disconnect(self->id_);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(self->qp_->qp(), &attr, IBV_QP_STATE);
  });
}

void VerbsConnectionState::release() {
  loop_.run([this] {
    bool disconnect_first = false;
    {
      std::lock_guard lock(mu_);
      disconnect_first = phase_ == Phase::kEstablished && !disconnected_event_ && !app_closed_;
      released_ = true;
      record_final_state(ConnectionState::kClosed,
                         "the connection was destroyed by the application", false);
    }
    // An orderly close for the peer, as destroying a tcp connection sends a FIN.
    if (disconnect_first && id_ != nullptr) rdma_disconnect(id_);
    // From here on nothing is pushed to the completion queue (complete()); what a shared
    // queue already holds stays there for the application to poll.
    teardown();
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
}

// ---- Event thread ---------------------------------------------------------------------------

void VerbsConnectionState::on_io(std::uint32_t) {
  const auto keep = shared_from_this();
  if (!qp_) return;
  // Take every pending event (acknowledged at once, so ibv_destroy_cq never waits), ask for
  // the next one, then poll: a completion that arrived in between is polled now, and any
  // later one raises a new event.
  int events = 0;
  for (int i = 0; i < kCqEventsPerWakeup; ++i) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(qp_->channel(), &cq, &context) != 0) break;  // EAGAIN
    ++events;
  }
  if (events > 0) ibv_ack_cq_events(qp_->cq(), static_cast<unsigned>(events));
  ibv_req_notify_cq(qp_->cq(), 0);
  drain_cq();
}

void VerbsConnectionState::drain_cq() {
  std::lock_guard reap(reap_mu_);
  if (!qp_) return;
  std::array<ibv_wc, kPollBatch> wcs{};
  for (;;) {
    const int n = ibv_poll_cq(qp_->cq(), kPollBatch, wcs.data());
    if (n <= 0) return;
    {
      std::lock_guard lock(mu_);
      for (int i = 0; i < n; ++i) complete(wcs[static_cast<std::size_t>(i)]);
    }
    cq_->notify();  // after mu_: the woken poller may post at once
    if (n < kPollBatch) return;
  }
}

void VerbsConnectionState::complete(const ibv_wc& wc) {
  const bool recv = (wc.wr_id & kRecvBit) != 0;
  const std::uint64_t seq = wc.wr_id & ~kRecvBit;
  auto& queue = recv ? rq_ : sq_;
  // Older unsignaled requests completed successfully without an entry of their own.
  while (!queue.empty() && queue.front().seq < seq) queue.pop_front();
  Tracked t;
  const bool known = !queue.empty() && queue.front().seq == seq;
  if (known) {
    t = queue.front();
    queue.pop_front();
  } else {
    t.opcode = recv ? rdmap::WcOpcode::kRecv
                    : wc_opcode_from_ibv(wc.opcode).value_or(rdmap::WcOpcode::kSend);
  }
  rdmap::WorkCompletion out;
  out.wr_id = t.wr_id;
  out.opcode = t.opcode;
  out.status = wc_status_from_ibv(wc.status);
  if (out.status == rdmap::WcStatus::kSuccess) {
    out.byte_len = recv ? wc.byte_len : t.length;
    if ((wc.wc_flags & IBV_WC_WITH_INV) != 0) out.invalidated_stag = wc.invalidated_rkey;
  } else if (out.status == rdmap::WcStatus::kFlushed) {
    // Receives are flushed by an orderly close too (siw leaves RTS when the TCP stream
    // ends), so only a flushed send-queue request says the QP failed under the application:
    // on iWARP a Terminate from the peer (e.g. for a bad STag) ends that way.
    if (!recv) {
      record_final_state(ConnectionState::kError,
                         std::string(op_name(t.opcode)) + " (wr_id " + std::to_string(t.wr_id) +
                             ") was flushed: the queue pair left RTS while it was outstanding",
                         true);
    }
  } else {
    char vendor[16];
    std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
    record_final_state(ConnectionState::kError,
                       std::string(op_name(t.opcode)) + " (wr_id " + std::to_string(t.wr_id) +
                           ") completed with " + std::string(rdmap::wc_status_name(out.status)) +
                           " (" + std::string(ibv_wc_status_constant(wc.status)) +
                           ", vendor error " + vendor + "); the queue pair is in the error state",
                       true);
  }
  // A full queue drops the entry and counts the overrun (completion_queue.h).
  if (!released_) cq_->push(std::move(out));
}

void VerbsConnectionState::record_final_state(ConnectionState state, std::string detail,
                                              bool overrides_peer_close) {
  if (final_state_) {
    // A transport error after the peer's DISCONNECTED is news: the QP is now in error.
    const bool upgrade = overrides_peer_close && peer_closed_ && !app_closed_ &&
                         *final_state_ == ConnectionState::kClosed &&
                         state == ConnectionState::kError;
    if (!upgrade) return;
    detail = detail_ + "; then " + detail;
  }
  final_state_ = state;
  detail_ = std::move(detail);
  cv_.notify_all();
}

void VerbsConnectionState::teardown() {
  if (watching_) {
    loop_.unwatch(token_);
    watching_ = false;
  }
  if (id_ != nullptr) channel_.detach(id_);
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::kTornDown;
    for (auto& [stag, mr] : regions_) ibv_dereg_mr(mr);
    regions_.clear();
    for (ibv_mr* mr : initial_regions_) ibv_dereg_mr(mr);
    initial_regions_.clear();
    sq_.clear();
    rq_.clear();
    cv_.notify_all();
  }
  {
    std::lock_guard reap(reap_mu_);  // no caller is polling the CQ it destroys
    qp_.reset();
  }
  if (id_ != nullptr) {
    rdma_destroy_id(id_);
    id_ = nullptr;
  }
}

}  // namespace rdma_interop::transport::verbs
