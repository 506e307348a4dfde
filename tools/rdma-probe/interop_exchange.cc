#include "tools/rdma-probe/negotiated_json.h"
#include "tools/rdma-probe/interop_exchange.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>

#include "core/cm/personality.h"
#include "tools/rdma-probe/test_pattern.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WorkCompletion;
using rdmap::WrOpcode;

// Waits are cut into slices so a cancel request (SIGTERM) is seen within one slice.
constexpr auto kPollSlice = std::chrono::milliseconds(50);
constexpr std::uint32_t kRemoteAccess =
    rdmap::kLocalWrite | rdmap::kRemoteWrite | rdmap::kRemoteRead;

std::string_view op_name(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
      return "Send";
    case WrOpcode::kRdmaWrite:
      return "RDMA Write";
    case WrOpcode::kRdmaRead:
      return "RDMA Read";
    default:
      return "work request";
  }
}

// The virtual address of a local buffer, as work requests name it (Sge::addr).
std::uint64_t address_of(const std::vector<std::uint8_t>& buffer) {
  return reinterpret_cast<std::uint64_t>(buffer.data());
}

// One run of the exchange on one connection: its buffers, registrations and completions.
class Session {
 public:
  Session(transport::Connection& connection, ExchangeMemory& memory, const ExchangeOptions& options,
          ExchangeResult& result)
      : c_(connection), mem_(memory), opt_(options), r_(result), last_heard_(Clock::now()) {}

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The regions stop granting the peer access when the exchange ends (the memory itself
  // lives on in ExchangeMemory until the connection is gone).
  ~Session() {
    for (auto stag : stags_) c_.deregister_memory(stag);
  }

  // A 64 KiB region; `remote` grants the peer read and write.
  std::vector<std::uint8_t>& region(bool remote, std::uint32_t& stag) {
    auto& buf = mem_.new_region();
    stag = c_.register_memory(buf.data(), buf.size(), remote ? kRemoteAccess : rdmap::kLocalWrite);
    stags_.push_back(stag);
    return buf;
  }

  // What to advertise for `buffer` (registered as `stag`): the tagged offset the provider
  // names its first octet by, never simply its address (provider.h: on the tcp provider
  // that would show the peer our memory layout). nullopt, with `step` failed, if none.
  std::optional<std::uint64_t> advertised_offset(std::string_view step, std::uint32_t stag,
                                                 const std::vector<std::uint8_t>& buffer) {
    auto to = c_.tagged_offset(stag, buffer.data());
    if (!to) fail(step, "the provider knows no tagged offset for STag " + std::to_string(stag));
    return to;
  }

  // The ring's receives are already posted (QpCaps::initial_recvs); this registers the ring
  // again for reposting them, and the send buffer.
  bool register_buffers() {
    auto& ring = mem_.ring();
    auto& send = mem_.send_buffer();
    recv_stag_ = c_.register_memory(ring.data(), ring.size(), rdmap::kLocalWrite);
    send_stag_ = c_.register_memory(send.data(), send.size(), 0);
    stags_.push_back(recv_stag_);
    stags_.push_back(send_stag_);
    return ok("register_buffers");
  }

  bool send_message(std::string_view step, const json& message, bool record = true) {
    auto text = message.dump();
    if (text.size() > kMessageSize) return fail(step, "message larger than 4 KiB");
    std::memcpy(mem_.send_buffer().data(), text.data(), text.size());
    rdmap::SendWr wr;
    wr.opcode = WrOpcode::kSend;
    wr.sge = {address_of(mem_.send_buffer()), static_cast<std::uint32_t>(text.size()), send_stag_};
    return post_and_wait(step, wr, record);
  }

  // Waits for the next message; nullopt (with the step failed) on timeout, error, bad JSON.
  std::optional<json> receive_message(std::string_view step) {
    auto wc = wait_for([](const WorkCompletion& w) { return w.opcode == WcOpcode::kRecv; }, step);
    if (!wc) return std::nullopt;
    if (wc->status != WcStatus::kSuccess) {
      fail(step, "receive completed with " + std::string(rdmap::wc_status_name(wc->status)) +
                     terminate_text(wc->terminate));
      return std::nullopt;
    }
    std::size_t slot = static_cast<std::size_t>(wc->wr_id - ExchangeMemory::kFirstRecvWrId);
    if (slot >= kPostedReceives || wc->byte_len > kMessageSize) {
      fail(step, "receive completion names an unknown buffer");
      return std::nullopt;
    }
    std::string text(reinterpret_cast<const char*>(mem_.slot(slot)), wc->byte_len);
    if (!post_receive(slot)) return std::nullopt;
    json message = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (message.is_discarded() || !message.is_object() || !message.contains("op") ||
        !message["op"].is_string()) {
      fail(step, "the peer's message is not a JSON object with an \"op\": " + text.substr(0, 120));
      return std::nullopt;
    }
    return message;
  }

  // RDMA Write or Read of a whole 64 KiB region to or from the peer's (stag, addr).
  bool rdma(std::string_view step, WrOpcode op, std::vector<std::uint8_t>& local,
            std::uint32_t local_stag, std::uint32_t remote_stag, std::uint64_t remote_addr) {
    rdmap::SendWr wr;
    wr.opcode = op;
    wr.sge = {address_of(local), static_cast<std::uint32_t>(local.size()), local_stag};
    wr.remote_stag = remote_stag;
    wr.remote_addr = remote_addr;
    return post_and_wait(step, wr);
  }

  bool verify(std::string_view step, const std::vector<std::uint8_t>& buffer, std::uint64_t seed) {
    if (auto at = find_pattern_mismatch(buffer, seed)) {
      return fail(step, "byte " + std::to_string(*at) + " of " + std::to_string(buffer.size()) +
                            " differs from pattern(seed " + std::to_string(seed) + ")");
    }
    return ok(step);
  }

  // Waits until the connection leaves kConnected (the peer closed or failed it).
  bool await_close(std::string_view step, bool record_ok = true) {
    while (c_.state() == transport::ConnectionState::kConnected) {
      if (stopped(step)) return false;
      auto wcs = c_.poll_completions(8, slice());
      for (auto& w : wcs) stash_.push_back(w);
    }
    return record_ok ? ok(step) : true;
  }

  bool ok(std::string_view step) {
    r_.steps.push_back({std::string(step), true, {}});
    return true;
  }

  bool fail(std::string_view step, std::string detail) {
    if (r_.detail.empty()) r_.detail = std::string(step) + ": " + detail;
    r_.steps.push_back({std::string(step), false, std::move(detail)});
    return false;
  }

  // Records why the connection broke (cm failure name, Terminate) after a failed step.
  // Ends the exchange: records the verdict and, on failure, why the connection went.
  ExchangeResult finish(bool ok) {
    r_.ok = ok;
    if (!ok) note_connection_state();
    return r_;
  }

  void note_connection_state() {
    if (auto t = c_.terminate_received()) {
      r_.failure = "terminate_received";
      r_.terminate = t->cause;
    } else if (auto t = c_.terminate_sent()) {
      r_.terminate = t->cause;
    }
    if (!r_.failure) {
      switch (c_.state()) {
        case transport::ConnectionState::kClosed:
          r_.failure = "connection_closed";
          break;
        case transport::ConnectionState::kError:
          r_.failure = "connection_reset";
          break;
        case transport::ConnectionState::kConnected:
          break;
      }
    }
  }

 private:
  bool post_receive(std::size_t slot) {
    rdmap::RecvWr wr;
    wr.wr_id = ExchangeMemory::kFirstRecvWrId + slot;
    wr.sge = {reinterpret_cast<std::uint64_t>(mem_.slot(slot)),
              static_cast<std::uint32_t>(kMessageSize), recv_stag_};
    if (auto e = c_.post_recv(wr)) {
      return fail("repost_receive", "post_recv failed: " + std::string(rdmap::post_error_name(*e)));
    }
    return true;
  }

  bool post_and_wait(std::string_view step, rdmap::SendWr wr, bool record = true) {
    wr.wr_id = next_wr_id_++;
    wr.signaled = true;
    if (auto e = c_.post_send(wr)) {
      return fail(step, std::string(op_name(wr.opcode)) +
                            " could not be posted: " + std::string(rdmap::post_error_name(*e)));
    }
    auto id = wr.wr_id;
    auto wc = wait_for([id](const WorkCompletion& w) { return w.wr_id == id; }, step);
    if (!wc) return false;
    if (wc->status != WcStatus::kSuccess) {
      return fail(step, std::string(op_name(wr.opcode)) + " completed with " +
                            std::string(rdmap::wc_status_name(wc->status)) +
                            terminate_text(wc->terminate));
    }
    return record ? ok(step) : true;
  }

  static std::string terminate_text(const std::optional<wire::TerminateCause>& t) {
    return t ? " (" + wire::describe(*t) + ")" : std::string();
  }

  // The end of the current wait: the exchange's deadline, or sooner the moment the peer has
  // been silent for idle_timeout.
  Clock::time_point wait_end() const {
    if (opt_.idle_timeout.count() <= 0) return opt_.deadline;
    return std::min(opt_.deadline, last_heard_ + opt_.idle_timeout);
  }

  std::chrono::milliseconds slice() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait_end() - Clock::now());
    return std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(kPollSlice));
  }

  bool stopped(std::string_view step) {
    if (opt_.cancel && opt_.cancel->load()) {
      fail(step, "cancelled (signal)");
      return true;
    }
    if (Clock::now() >= opt_.deadline) {
      r_.timed_out = true;
      fail(step, "timed out");
      return true;
    }
    if (Clock::now() >= wait_end()) {
      r_.timed_out = true;
      fail(step, "the peer was silent for " + std::to_string(opt_.idle_timeout.count()) +
                     " ms (idle timeout)");
      return true;
    }
    return false;
  }

  std::optional<WorkCompletion> wait_for(const std::function<bool(const WorkCompletion&)>& want,
                                         std::string_view step) {
    for (;;) {
      auto it = std::find_if(stash_.begin(), stash_.end(), want);
      if (it != stash_.end()) {
        auto wc = *it;
        stash_.erase(it);
        return wc;
      }
      if (stopped(step)) return std::nullopt;
      auto wcs = c_.poll_completions(16, slice());
      if (wcs.empty() && c_.state() != transport::ConnectionState::kConnected) {
        // Completions of a broken connection arrive flushed; none left means none coming.
        auto more = c_.poll_completions(16, std::chrono::milliseconds(0));
        if (more.empty()) {
          auto why = c_.error_detail();
          fail(step,
               "the connection " +
                   std::string(c_.state() == transport::ConnectionState::kClosed ? "was closed"
                                                                                 : "failed") +
                   (why.empty() ? std::string() : ": " + why));
          return std::nullopt;
        }
        wcs = std::move(more);
      }
      if (!wcs.empty()) last_heard_ = Clock::now();
      for (auto& w : wcs) stash_.push_back(w);
    }
  }

  transport::Connection& c_;
  ExchangeMemory& mem_;
  const ExchangeOptions& opt_;
  ExchangeResult& r_;
  std::uint32_t recv_stag_ = 0;
  std::uint32_t send_stag_ = 0;
  std::vector<std::uint32_t> stags_;
  std::deque<WorkCompletion> stash_;
  std::uint64_t next_wr_id_ = 1000;
  Clock::time_point last_heard_;  // the last completion: the peer's (or our own) progress
};

// Reads a field of a peer message; nullopt when missing or of the wrong type.
std::optional<std::uint64_t> u64_field(const json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}

// Fields a peer sent, read without trusting their types (json::value() would throw).
std::string text_field(const json& m, const char* key, std::string fallback = {}) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool true_field(const json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_boolean() && it->get<bool>();
}

struct RemoteRegion {
  std::uint32_t stag = 0;
  std::uint64_t addr = 0;
  std::uint64_t seed = 0;
};

// The region a peer advertised ({"stag","addr","len","seed"}), or a sentence saying why not.
std::optional<RemoteRegion> remote_region(const json& m, std::string& why) {
  auto stag = u64_field(m, "stag");
  auto addr = u64_field(m, "addr");
  auto len = u64_field(m, "len");
  auto seed = u64_field(m, "seed");
  if (!stag || !addr || !len || !seed || *stag > 0xffffffffULL) {
    why = "message lacks stag/addr/len/seed: " + m.dump().substr(0, 160);
    return std::nullopt;
  }
  if (*len != kRegionSize) {
    why = "advertised len " + std::to_string(*len) + ", expected " + std::to_string(kRegionSize);
    return std::nullopt;
  }
  return RemoteRegion{static_cast<std::uint32_t>(*stag), *addr, *seed};
}

// A peer that gave up Sends {"op":"verified","ok":false}: its reason becomes ours.
bool peer_gave_up(Session& s, std::string_view step, const json& m) {
  if (text_field(m, "op") == "verified" && !true_field(m, "ok")) {
    s.fail(step, "the peer reported a failure: " + text_field(m, "detail", "(no detail)"));
    return true;
  }
  return false;
}

bool expect_op(Session& s, std::string_view step, const json& m, std::string_view op) {
  if (peer_gave_up(s, step, m)) return false;
  if (text_field(m, "op") != op) {
    return s.fail(step, "expected op \"" + std::string(op) + "\", got " + m.dump().substr(0, 160));
  }
  return true;
}

void tell_peer_we_failed(Session& s, const ExchangeResult& r) {
  // Best effort: the connection may be gone already, and the failure is already recorded.
  json m{{"op", "verified"}, {"ok", false}, {"detail", r.detail}};
  s.send_message("report_failure", m);
}

// Waits for the peer's `op` message advertising a region, keeps the peer's view of the
// connection it carries, and on any problem records it and tells the peer.
std::optional<RemoteRegion> await_region(Session& s, ExchangeResult& r, std::string_view step,
                                         std::string_view op, bool answer_echoes = false) {
  auto m = s.receive_message(step);
  std::size_t echoes = 0;
  while (answer_echoes && m && text_field(*m, "op") == "echo") {
    if (!s.send_message("answer_echo", *m, /*record=*/false)) return std::nullopt;
    ++echoes;
    m = s.receive_message(step);
  }
  if (echoes > 0) s.ok("answered " + std::to_string(echoes) + " echoes");
  if (!m || !expect_op(s, step, *m, op)) return std::nullopt;
  if (auto it = m->find("negotiated"); it != m->end()) r.peer_view = *it;
  std::string why;
  auto region = remote_region(*m, why);
  if (!region) {
    s.fail(step, why);
    tell_peer_we_failed(s, r);
    return std::nullopt;
  }
  s.ok(step);
  return region;
}

// Steps 1 and 2 of the initiator: advertise A, filled with pattern(seed_a); the responder
// Reads A, Writes pattern(seed_b) into it and answers with its region C; check A.
std::optional<RemoteRegion> advertise_and_await_responder(Session& s, ExchangeResult& r,
                                                          transport::Connection& connection) {
  std::uint32_t a_stag = 0;
  auto& a = s.region(/*remote=*/true, a_stag);
  auto seed_a = random_seed();
  fill_pattern(a, seed_a);
  auto a_to = s.advertised_offset("advertise", a_stag, a);
  if (!a_to) return std::nullopt;
  json advertise{{"op", "advertise"}, {"stag", a_stag},
                 {"addr", *a_to},     {"len", kRegionSize},
                 {"seed", seed_a},    {"negotiated", probe::to_json(connection.info().params)}};
  if (!s.send_message("advertise", advertise)) return std::nullopt;

  auto c = await_region(s, r, "await_responder_done", "responder_done");
  if (!c) return std::nullopt;
  r.bytes_verified += kRegionSize;  // the responder checked A (seed_a) before answering
  if (!s.verify("verify_responder_write", a, c->seed)) {
    tell_peer_we_failed(s, r);
    return std::nullopt;
  }
  r.bytes_verified += kRegionSize;
  return c;
}

}  // namespace

transport::QpCaps ExchangeMemory::caps() {
  transport::QpCaps caps;
  for (std::size_t i = 0; i < kPostedReceives; ++i) {
    caps.initial_recvs.push_back(
        {kFirstRecvWrId + i, slot(i), static_cast<std::uint32_t>(kMessageSize)});
  }
  return caps;
}

ExchangeResult run_initiator_exchange(transport::Connection& connection, ExchangeMemory& memory,
                                      const ExchangeOptions& options) {
  ExchangeResult r;
  Session s(connection, memory, options, r);
  if (!s.register_buffers()) return s.finish(false);
  if (options.silent_initiator) {
    // Never-RTR: stay silent until the responder gives up on the RTR and closes.
    if (s.await_close("await_responder_verdict", /*record_ok=*/false)) {
      auto why = connection.error_detail();
      s.fail("await_responder_verdict",
             "this initiator did not send its RTR; the responder gave up and closed the "
             "connection" +
                 (why.empty() ? std::string() : " (" + why + ")"));
    }
    return s.finish(false);
  }

  // 1 and 2.
  auto c = advertise_and_await_responder(s, r, connection);
  if (!c) return s.finish(false);

  // 3. Write pattern(seed_c) into C, Read it back, check it.
  std::uint32_t d_stag = 0;
  auto& d = s.region(/*remote=*/false, d_stag);
  auto seed_c = random_seed();
  fill_pattern(d, seed_c);
  if (!s.rdma("write_to_responder", WrOpcode::kRdmaWrite, d, d_stag, c->stag, c->addr)) {
    return s.finish(false);
  }
  std::uint32_t e_stag = 0;
  auto& e = s.region(/*remote=*/false, e_stag);
  if (!s.rdma("read_back", WrOpcode::kRdmaRead, e, e_stag, c->stag, c->addr)) {
    return s.finish(false);
  }
  if (!s.verify("verify_read_back", e, seed_c)) {
    tell_peer_we_failed(s, r);
    return s.finish(false);
  }
  if (!s.send_message("initiator_done", json{{"op", "initiator_done"}, {"seed", seed_c}})) {
    return s.finish(false);
  }

  // 4. The responder's verdict on C.
  auto verdict = s.receive_message("await_verified");
  if (!verdict) return s.finish(false);
  if (text_field(*verdict, "op") != "verified") {
    s.fail("await_verified", "expected op \"verified\", got " + verdict->dump().substr(0, 160));
    return s.finish(false);
  }
  if (!true_field(*verdict, "ok")) {
    s.fail("await_verified",
           "the responder reported a failure: " + text_field(*verdict, "detail", "(no detail)"));
    return s.finish(false);
  }
  s.ok("await_verified");
  r.bytes_verified += kRegionSize;  // seed_c, checked by both sides

  // 5. Orderly close.
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline - Clock::now());
  connection.disconnect(
      std::clamp(left, std::chrono::milliseconds(100), std::chrono::milliseconds(2000)));
  s.ok("disconnect");
  return s.finish(true);
}

ExchangeResult run_responder_exchange(transport::Connection& connection, ExchangeMemory& memory,
                                      const ExchangeOptions& options) {
  ExchangeResult r;
  Session s(connection, memory, options, r);
  if (!s.register_buffers()) return s.finish(false);

  // 1. The initiator's region A.
  auto a = await_region(s, r, "await_advertise", "advertise", /*answer_echoes=*/true);
  if (!a) return s.finish(false);

  // 2. Read A into B and check it; Write pattern(seed_b) back into A.
  std::uint32_t b_stag = 0;
  auto& b = s.region(/*remote=*/false, b_stag);
  if (!s.rdma("read_initiator_region", WrOpcode::kRdmaRead, b, b_stag, a->stag, a->addr)) {
    return s.finish(false);
  }
  if (!s.verify("verify_read", b, a->seed)) {
    tell_peer_we_failed(s, r);
    return s.finish(false);
  }
  r.bytes_verified += kRegionSize;
  auto seed_b = random_seed();
  fill_pattern(b, seed_b);
  if (!s.rdma("write_initiator_region", WrOpcode::kRdmaWrite, b, b_stag, a->stag, a->addr)) {
    return s.finish(false);
  }
  std::uint32_t c_stag = 0;
  auto& c = s.region(/*remote=*/true, c_stag);
  auto c_to = s.advertised_offset("responder_done", c_stag, c);
  if (!c_to) return s.finish(false);
  json done{{"op", "responder_done"}, {"seed", seed_b},
            {"stag", c_stag},         {"addr", *c_to},
            {"len", kRegionSize},     {"negotiated", probe::to_json(connection.info().params)}};
  if (!s.send_message("responder_done", done)) return s.finish(false);

  // 3. The initiator checked A, wrote C and read it back.
  auto idone = s.receive_message("await_initiator_done");
  if (!idone) return s.finish(false);
  if (!expect_op(s, "await_initiator_done", *idone, "initiator_done")) return s.finish(false);
  auto seed_c = u64_field(*idone, "seed");
  if (!seed_c) {
    s.fail("await_initiator_done", "initiator_done lacks a seed");
    tell_peer_we_failed(s, r);
    return s.finish(false);
  }
  s.ok("await_initiator_done");
  r.bytes_verified += kRegionSize;  // seed_b: the initiator checked A before answering

  // 4. Check C and say so.
  bool c_ok = s.verify("verify_initiator_write", c, *seed_c);
  json verdict{{"op", "verified"}, {"ok", c_ok}, {"detail", c_ok ? "" : r.detail}};
  if (!s.send_message("verified", verdict) || !c_ok) return s.finish(false);
  r.bytes_verified += kRegionSize;

  // 5. The initiator disconnects.
  if (!s.await_close("await_close")) return s.finish(false);
  return s.finish(true);
}

std::vector<double> echo_round_trips(transport::Connection& connection, ExchangeMemory& memory,
                                     const ExchangeOptions& options, int count, std::size_t size,
                                     ExchangeResult& r) {
  std::vector<double> micros;
  Session s(connection, memory, options, r);
  if (!s.register_buffers()) return micros;
  for (int i = 0; i < count; ++i) {
    json m{{"op", "echo"}, {"seq", i}, {"pad", ""}};
    const std::size_t bare = m.dump().size();
    m["pad"] = std::string(size > bare ? size - bare : 0, 'e');
    const auto start = Clock::now();
    if (!s.send_message("echo", m, /*record=*/false)) break;
    auto back = s.receive_message("await_echo");
    if (!back) break;
    if (*back != m) {
      s.fail("await_echo", "the answer is not the echo: " + back->dump().substr(0, 120));
      break;
    }
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  r.ok = micros.size() == static_cast<std::size_t>(count);
  if (!r.ok) s.note_connection_state();
  return micros;
}

std::optional<PeerRegion> fetch_responder_region(transport::Connection& connection,
                                                 ExchangeMemory& memory,
                                                 const ExchangeOptions& options,
                                                 ExchangeResult& r) {
  Session s(connection, memory, options, r);
  if (!s.register_buffers()) return std::nullopt;
  auto c = advertise_and_await_responder(s, r, connection);
  if (!c) {
    s.note_connection_state();
    return std::nullopt;
  }
  r.ok = true;
  return PeerRegion{c->stag, c->addr, kRegionSize};
}

}  // namespace rdma_interop::probe
