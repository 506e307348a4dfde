#include "tools/rdma-probe/probe_session.h"

#include <cstdio>
#include <thread>

#include "core/cm/mpa_negotiation.h"

namespace rdma_interop::probe {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

std::string describe(const RawAnswer& answer) {
  std::string text(kind_name(answer.kind));
  text += ": " + answer.detail;
  if (answer.kind == RawAnswer::Kind::kReply && answer.reply &&
      !answer.reply->private_data.empty()) {
    text += ", private data \"" + printable_prefix(answer.reply->private_data) + "\"";
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, " (%.1f ms)", answer.elapsed_ms);
  return text + ms;
}

std::string describe(const transport::ConnectError& e) {
  std::string text = e.failure ? std::string(cm::failure_name(*e.failure))
                               : std::string(transport::kind_name(e.kind));
  text += ": " + e.detail;
  if (e.peer_frame) {
    text += " (" + wire::to_string(*e.peer_frame);
    if (!e.peer_frame->private_data.empty()) {
      text += ", private data \"" + printable_prefix(e.peer_frame->private_data) + "\"";
    }
    text += ")";
  }
  if (e.terminate) text += "; Terminate " + wire::describe(*e.terminate);
  return text;
}

Evidence Attempt::evidence() const {
  Evidence e{wire::to_string(offered), {}};
  if (info) {
    e.came_back = wire::to_string(info->received_frame);
    if (!info->received_frame.private_data.empty()) {
      e.came_back +=
          ", private data \"" + printable_prefix(info->received_frame.private_data) + "\"";
    }
    e.came_back += "; established (" + cm::to_string(info->params) + ")";
    if (info->fell_back_to_revision1) e.came_back += " after a revision-1 retry";
  } else if (error) {
    e.came_back = describe(*error);
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, " (%.1f ms)", elapsed_ms);
  e.came_back += ms;
  return e;
}

std::optional<wire::MpaFrame> Attempt::reply() const {
  if (info) return info->received_frame;
  if (error && error->peer_frame && error->peer_frame->kind == wire::MpaFrameKind::kReply) {
    return error->peer_frame;
  }
  return std::nullopt;
}

bool ProbeSession::can_connect() const {
  return count_ < s_.max_connections && !(s_.cancel && s_.cancel->load());
}

std::string ProbeSession::why_not() const {
  if (s_.cancel && s_.cancel->load()) return "stopped by a signal before this probe";
  return "the connection budget (" + std::to_string(s_.max_connections) +
         ", --max-connections) was spent before this probe";
}

cm::MpaPolicy ProbeSession::plain_policy(std::uint8_t revision) const {
  cm::MpaPolicy p;
  p.revision = revision;
  p.crc = cm::CrcMode::kOptional;
  p.markers_wanted = false;
  p.markers_supported = true;
  p.peer_to_peer = cm::PeerToPeer::kWhenAsked;  // an initiator asks only in kOn
  p.rtr_offer = {.send = true, .write = true, .read = true};
  if (revision == wire::kMpaRevision2 && p2p_offer_) {
    p.peer_to_peer = cm::PeerToPeer::kOn;
    p.rtr_offer = *p2p_offer_;
  }
  if (revision == wire::kMpaRevision1 && revision1_rtr_) {
    p.rtr_in_revision1 = true;
    p.rtr_offer = cm::RtrSet{.send = *revision1_rtr_ == cm::RtrType::kSend,
                             .write = *revision1_rtr_ == cm::RtrType::kWrite,
                             .read = *revision1_rtr_ == cm::RtrType::kRead};
  }
  // erdma speaks nothing but 129 (cm::validate wants it to say so).
  if (revision == wire::kMpaRevisionErdma) p.on_newer_revision = cm::OnNewerRevision::kClose;
  p.ird = wire::kMpaIrdOrdMask - 1;
  p.ord = 1;
  p.strict_ird_ord = false;
  p.private_data_limit = wire::kMpaMaxPrivateDataRfc;
  p.reject_reserved_bits = false;
  p.fallback_to_revision1 = false;
  p.send_rtr = true;
  p.reply_timeout = s_.timeout;
  p.request_timeout = s_.timeout;
  p.rtr_timeout = s_.timeout;
  p.first_fpdu_delay = s_.first_fpdu_delay;
  return p;
}

std::vector<std::uint8_t> ProbeSession::plain_private_data() {
  // Line ends at the end: a line-based text server (HTTP, SMTP) sees a complete garbage
  // line and says so, instead of waiting for the rest of its line.
  static constexpr std::string_view kText = "rdma-probe\r\n\r\n";
  return {kText.begin(), kText.end()};
}

bool ProbeSession::start(std::string_view what) {
  if (!can_connect()) return false;
  if (count_ > 0) {
    auto next = last_start_ + s_.pace;
    if (Clock::now() < next) std::this_thread::sleep_until(next);
  }
  last_start_ = Clock::now();
  ++count_;
  if (s_.progress) s_.progress(count_, what);
  return true;
}

std::optional<RawAnswer> ProbeSession::raw(const wire::MpaFrame& request, std::string_view what) {
  auto bytes = wire::encode_mpa_frame(
      request, {.private_data_limit = wire::kMpaMaxPrivateDataRfc, .reject_reserved_bits = false});
  if (!bytes || !start(what)) return std::nullopt;
  return send_raw_request(s_.uri.host, s_.uri.port, *bytes, s_.timeout, s_.first_fpdu_delay);
}

std::optional<Attempt> ProbeSession::connect(const cm::MpaPolicy& policy,
                                             std::vector<std::uint8_t> pd, std::string_view what,
                                             const WhileConnected& then) {
  if (!start(what)) return std::nullopt;
  Attempt a;
  a.offered = cm::make_request(policy, pd);
  const auto begin = Clock::now();
  ExchangeMemory memory;  // outlives the connection: the provider uses it
  transport::ConnectOptions options;
  options.policy = policy;
  options.private_data = std::move(pd);
  options.caps = memory.caps();
  options.timeout = s_.timeout;
  auto connected = provider_.connect(s_.uri, options);
  a.elapsed_ms = ms_since(begin);
  if (!connected) {
    a.error = connected.error();
    return a;
  }
  auto& connection = **connected;
  a.info = connection.info();
  if (then) then(connection, memory);
  if (connection.state() == transport::ConnectionState::kConnected) {
    connection.disconnect(std::chrono::milliseconds(200));
  }
  return a;
}

}  // namespace rdma_interop::probe
