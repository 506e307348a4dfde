#include "tools/rdma-probe/data_path_probes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cm/mpa_negotiation.h"
#include "tools/rdma-probe/mpa_probes.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;

constexpr auto kSlice = std::chrono::milliseconds(20);
constexpr int kRoundTrips = 16;
constexpr std::size_t kEchoSize = 64;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "min 41 us, median 55 us, max 90 us (16)"; data {"count","min_us","median_us","max_us"}.
std::string summarize(std::vector<double> micros, json& data) {
  std::sort(micros.begin(), micros.end());
  const double median = micros[micros.size() / 2];
  data = {{"count", micros.size()},
          {"min_us", std::round(micros.front() * 10) / 10},
          {"median_us", std::round(median * 10) / 10},
          {"max_us", std::round(micros.back() * 10) / 10}};
  return "median " + fixed(median, 0) + " us, min " + fixed(micros.front(), 0) + " us, max " +
         fixed(micros.back(), 0) + " us (" + std::to_string(micros.size()) + " round trips)";
}

// How a connection ended, for evidence. Over verbs no Terminate is visible (the kernel owns
// the stream), so the text does not claim there was none.
std::string ending(const transport::Connection& c) {
  const bool sees_terminates = c.info().params.revision != 0;  // 0: MPA not visible
  std::string text;
  if (auto t = c.terminate_received()) {
    return "Terminate " + wire::describe(t->cause);
  } else if (auto m = c.malformed_terminate_received()) {
    return "a " + wire::to_string(*m);
  } else if (c.state() == transport::ConnectionState::kConnected) {
    text = "still connected";
  } else {
    text = std::string(c.state() == transport::ConnectionState::kClosed ? "closed" : "failed") +
           (sees_terminates ? " without a Terminate" : "");
  }
  auto why = c.error_detail();
  if (!why.empty() && c.state() != transport::ConnectionState::kConnected) text += " (" + why + ")";
  return text;
}

}  // namespace

bool zero_length_read(transport::Connection& conn, std::chrono::milliseconds timeout) {
  if (conn.state() != transport::ConnectionState::kConnected) return false;
  rdmap::SendWr wr;
  wr.wr_id = 9900;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.sge = {0, 0, 0};
  if (conn.post_send(wr)) return false;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    for (const auto& wc : conn.poll_completions(4, kSlice)) {
      if (wc.wr_id == wr.wr_id) return wc.status == WcStatus::kSuccess;
    }
    if (conn.state() != transport::ConnectionState::kConnected) return false;
  }
  return false;
}

void probe_rtr_wait(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto c = new_capability("rtr_wait", "Waits for the RTR before sending");
  if (!f.peer_to_peer) {
    c.value = "no peer-to-peer mode";
    c.verdict = Verdict::kNotApplicable;
    rows.push_back(std::move(c));
    return;
  }
  auto policy = s.plain_policy(2);
  policy.peer_to_peer = cm::PeerToPeer::kOn;
  if (!f.rtr_accepted.empty()) policy.rtr_offer = f.rtr_accepted;
  policy.send_rtr = false;
  const auto window = s.settings().rtr_wait;
  std::string sent;  // what arrived before an RTR, if anything
  std::optional<double> gave_up_ms;
  std::string how;
  auto a = s.connect(policy, ProbeSession::plain_private_data(), "peer-to-peer, RTR withheld",
                     [&](transport::Connection& conn, ExchangeMemory&) {
                       const auto start = Clock::now();
                       while (Clock::now() - start < window) {
                         for (const auto& wc : conn.poll_completions(4, kSlice)) {
                           if (wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess) {
                             sent = "a Send of " + std::to_string(wc.byte_len) + " octets";
                           }
                         }
                         if (!sent.empty()) return;
                         if (conn.state() != transport::ConnectionState::kConnected) {
                           gave_up_ms = ms_since(start);
                           how = ending(conn);
                           return;
                         }
                       }
                     });
  if (!a) {
    c.value = "not tested";
    c.verdict = Verdict::kNotTested;
    c.why = s.why_not();
  } else if (!a->established()) {
    c.evidence.push_back(a->evidence());
    c.value = "not tested: the connection failed before the RTR (" + refusal_form(*a) + ")";
    c.verdict = Verdict::kNotTested;
  } else {
    auto e = a->evidence();
    if (!sent.empty()) {
      e.came_back += "; then " + sent + " before any RTR";
      c.value = "no: it sent " + sent + " before our RTR";
      c.verdict = Verdict::kFail;
      c.why = "RFC 6581 s3: in peer-to-peer mode the responder sends nothing until the RTR arrives";
    } else if (gave_up_ms) {
      e.came_back += "; silence, then " + how + " after " + fixed(*gave_up_ms, 0) + " ms";
      c.value =
          "yes: it sent nothing, and gave up after " + fixed(*gave_up_ms, 0) + " ms (" + how + ")";
      c.verdict = Verdict::kOk;
    } else {
      e.came_back += "; nothing in " + std::to_string(window.count()) + " ms";
      c.value = "yes: nothing in " + std::to_string(window.count()) + " ms without our RTR";
      c.verdict = Verdict::kOk;
    }
    c.evidence.push_back(std::move(e));
    c.data = {{"waits", sent.empty()},
              {"gave_up_after_ms", gave_up_ms ? json(std::round(*gave_up_ms)) : json(nullptr)}};
  }
  rows.push_back(std::move(c));
}

void probe_round_trips(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  auto read = new_capability("rtt_read0", "Round trip, zero-length RDMA Read");
  auto send = new_capability("rtt_send64", "Round trip, 64-octet Send (echo)");
  std::vector<double> read_us;
  std::vector<double> echo_us;
  std::string read_problem;
  ExchangeResult echo_result;
  auto a = s.connect(
      s.plain_policy(f.revision), ProbeSession::plain_private_data(),
      "round trips: zero-length Reads, then 64-octet echo Sends",
      [&](transport::Connection& conn, ExchangeMemory& memory) {
        for (int i = 0; i < kRoundTrips && read_problem.empty(); ++i) {
          rdmap::SendWr wr;
          wr.wr_id = 9000 + static_cast<std::uint64_t>(i);
          wr.opcode = WrOpcode::kRdmaRead;
          wr.sge = {0, 0, 0};  // zero length: names no memory on either side
          const auto start = Clock::now();
          if (auto e = conn.post_send(wr)) {
            read_problem =
                "the Read could not be posted: " + std::string(rdmap::post_error_name(*e));
            break;
          }
          const auto deadline = start + s.settings().timeout;
          bool done = false;
          while (!done && Clock::now() < deadline) {
            for (const auto& wc : conn.poll_completions(4, kSlice)) {
              if (wc.wr_id != wr.wr_id) continue;
              done = true;
              if (wc.status != WcStatus::kSuccess) {
                read_problem = "the Read completed with " +
                               std::string(rdmap::wc_status_name(wc.status)) + "; " + ending(conn);
              } else {
                read_us.push_back(
                    std::chrono::duration<double, std::micro>(Clock::now() - start).count());
              }
            }
          }
          if (!done)
            read_problem =
                "no Read Response in " + std::to_string(s.settings().timeout.count()) + " ms";
        }
        if (conn.state() != transport::ConnectionState::kConnected) return;
        ExchangeOptions options;
        options.deadline =
            Clock::now() + std::min<std::chrono::milliseconds>(s.settings().timeout,
                                                               std::chrono::milliseconds(1500));
        options.cancel = s.settings().cancel;
        echo_us = echo_round_trips(conn, memory, options, kRoundTrips, kEchoSize, echo_result);
      });
  if (!a || !a->established()) {
    for (auto* c : {&read, &send}) {
      c->value = "not tested";
      c->verdict = Verdict::kNotTested;
      c->why = a ? "the connection failed: " + refusal_form(*a) : s.why_not();
      if (a) c->evidence.push_back(a->evidence());
    }
  } else {
    auto e = a->evidence();
    if (read_us.size() == static_cast<std::size_t>(kRoundTrips)) {
      read.value = summarize(read_us, read.data);
      read.verdict = Verdict::kOk;
    } else {
      read.value = "not measured: " + read_problem;
      read.verdict = Verdict::kWarn;
      read.why =
          "a zero-length Read needs no memory and no application: every peer should answer it";
    }
    read.evidence.push_back(
        {e.offered + "; " + std::to_string(kRoundTrips) + " zero-length RDMA Reads, one at a time",
         read.value});
    if (echo_us.size() == static_cast<std::size_t>(kRoundTrips)) {
      send.value = summarize(echo_us, send.data);
      send.verdict = Verdict::kOk;
    } else {
      send.value = "not measured: no echo (" +
                   (echo_result.detail.empty() ? "the Reads failed" : echo_result.detail) + ")";
      send.verdict = Verdict::kNotTested;
      send.why = "only a peer running rdma-probe serve answers the echo messages";
    }
    send.evidence.push_back(
        {"Sends of " + std::to_string(kEchoSize) + " octets {\"op\":\"echo\",...}", send.value});
  }
  rows.push_back(std::move(read));
  rows.push_back(std::move(send));
}

void probe_terminates(ProbeSession& s, PeerFacts& f, std::vector<Capability>& rows) {
  struct Case {
    const char* id;
    const char* title;
    WrOpcode op;
    bool out_of_bounds;
    wire::TerminateCause expected;
    const char* rfc;
  };
  const Case cases[] = {
      {"terminate_write_invalid_stag",
       "Terminate: RDMA Write, unknown STag",
       WrOpcode::kRdmaWrite,
       false,
       {wire::TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, wire::kDdpTaggedCodeInvalidStag},
       "RFC 5041 s7.2"},
      {"terminate_read_invalid_stag",
       "Terminate: RDMA Read, unknown STag",
       WrOpcode::kRdmaRead,
       false,
       {wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, wire::kRdmapCodeInvalidStag},
       "RFC 5040 s7.2"},
      {"terminate_write_out_of_bounds",
       "Terminate: RDMA Write, out of bounds",
       WrOpcode::kRdmaWrite,
       true,
       {wire::TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, wire::kDdpTaggedCodeBaseOrBounds},
       "RFC 5041 s7.2"},
      {"terminate_read_out_of_bounds",
       "Terminate: RDMA Read, out of bounds",
       WrOpcode::kRdmaRead,
       true,
       {wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, wire::kRdmapCodeBaseOrBounds},
       "RFC 5040 s7.2"},
  };
  bool peer_advertises = true;  // until a region fetch fails: then skip the other bounds case
  for (const auto& k : cases) {
    auto c = new_capability(k.id, k.title);
    if (k.out_of_bounds && !peer_advertises) {
      c.value = "not tested: the peer advertised no region";
      c.verdict = Verdict::kNotTested;
      c.why = "going out of bounds needs an STag the peer granted; rdma-probe serve advertises one";
      rows.push_back(std::move(c));
      continue;
    }
    std::string offered;
    std::string no_region;
    std::optional<wire::TerminateCause> got;
    std::optional<wire::MalformedTerminate> malformed;
    std::string how;
    std::string wc_text;
    auto a = s.connect(
        s.plain_policy(f.revision), ProbeSession::plain_private_data(), k.title,
        [&](transport::Connection& conn, ExchangeMemory& memory) {
          std::uint32_t stag = kUnadvertisedStag;
          std::uint64_t addr = 0;
          if (k.out_of_bounds) {
            ExchangeOptions options;
            options.deadline = Clock::now() + s.settings().timeout;
            options.cancel = s.settings().cancel;
            ExchangeResult r;
            auto region = fetch_responder_region(conn, memory, options, r);
            if (!region) {
              no_region = r.detail.empty() ? "no region" : r.detail;
              return;
            }
            stag = region->stag;
            addr = region->addr + region->len - 8;  // 16 octets: the last 8 are beyond the end
          }
          auto& local = memory.new_region();
          const std::uint32_t lkey = conn.register_memory(local.data(), 16, rdmap::kLocalWrite);
          rdmap::SendWr wr;
          wr.wr_id = 7000;
          wr.opcode = k.op;
          wr.sge = {reinterpret_cast<std::uint64_t>(local.data()), 16, lkey};
          wr.remote_stag = stag;
          wr.remote_addr = addr;
          char text[160];
          std::snprintf(
              text, sizeof text, "%s of 16 octets, remote STag 0x%08x at 0x%llx%s",
              k.op == WrOpcode::kRdmaWrite ? "RDMA Write" : "RDMA Read", stag,
              static_cast<unsigned long long>(addr),
              k.out_of_bounds ? " (8 octets past the end of the region it advertised)" : "");
          offered = text;
          if (auto e = conn.post_send(wr)) {
            how = "could not be posted: " + std::string(rdmap::post_error_name(*e));
            return;
          }
          const auto deadline = Clock::now() + s.settings().timeout;
          while (Clock::now() < deadline &&
                 conn.state() == transport::ConnectionState::kConnected) {
            for (const auto& wc : conn.poll_completions(4, kSlice)) {
              if (wc.wr_id == wr.wr_id) wc_text = std::string(rdmap::wc_status_name(wc.status));
            }
          }
          if (auto t = conn.terminate_received()) got = t->cause;
          malformed = conn.malformed_terminate_received();
          how = ending(conn);
        });
    if (!a || !a->established()) {
      c.value = "not tested";
      c.verdict = Verdict::kNotTested;
      c.why = a ? "the connection failed: " + refusal_form(*a) : s.why_not();
      if (a) c.evidence.push_back(a->evidence());
    } else if (!no_region.empty()) {
      peer_advertises = false;
      c.evidence.push_back({a->evidence().offered + "; the exchange's advertise", no_region});
      c.value = "not tested: the peer advertised no region";
      c.verdict = Verdict::kNotTested;
      c.why = "going out of bounds needs an STag the peer granted; rdma-probe serve advertises one";
    } else {
      c.evidence.push_back(
          {offered, how + (wc_text.empty() ? "" : "; our work request: " + wc_text)});
      if (got) {
        c.value = wire::describe(*got);
        c.verdict = *got == k.expected ? Verdict::kOk : Verdict::kWarn;
        if (!(*got == k.expected)) {
          c.why = std::string(k.rfc) + " names " + wire::describe(k.expected);
        }
        c.data = {{"layer", static_cast<int>(got->layer)},
                  {"etype", static_cast<int>(got->etype)},
                  {"code", static_cast<int>(got->code)}};
      } else if (malformed) {
        c.value = "malformed: " + wire::to_string(*malformed);
        c.verdict = Verdict::kWarn;
        c.why =
            "RFC 5040 s4.8 lays out Terminate Control as Layer, EType, Error Code, then the "
            "M, D, R flags in the high bits of the third octet";
        // What the peer meant: the little-endian reading when its flags say it used one.
        const auto meant =
            malformed->little_endian_cause ? malformed->little_endian_cause : malformed->cause;
        if (meant) {
          c.why += std::string("; what it meant") +
                   (malformed->little_endian_cause ? " (read as little-endian bitfields)" : "") +
                   (*meant == k.expected ? " is " : " is not ") + "what " + k.rfc + " names (" +
                   wire::describe(k.expected) + ")";
        }
        c.data = {{"malformed", true},
                  {"little_endian", malformed->little_endian_cause.has_value()}};
        if (meant) {
          c.data["layer"] = static_cast<int>(meant->layer);
          c.data["etype"] = static_cast<int>(meant->etype);
          c.data["code"] = static_cast<int>(meant->code);
        }
      } else if (a->established() && how == "still connected") {
        c.value = "none: the operation was accepted";
        c.verdict = Verdict::kFail;
        c.why = std::string(k.rfc) + ": the peer must Terminate with " + wire::describe(k.expected);
      } else {
        c.value = (s.is_tcp() ? "no Terminate: " : "no Terminate visible: ") + how;
        c.verdict = s.is_tcp() ? Verdict::kWarn : Verdict::kNote;
        c.why = s.is_tcp() ? std::string(k.rfc) + " has the peer send a Terminate before it closes"
                           : "over verbs the kernel owns the stream: user space sees the work "
                             "request's status, not the Terminate";
      }
    }
    rows.push_back(std::move(c));
  }
}

}  // namespace rdma_interop::probe
