// iwarp_capture_peer.cc - plays one short iWARP session over a real loopback TCP connection,
// so that a packet capture of it can be checked against Wireshark's iWARP dissectors
// (tests/capture/test_tshark_decodes.py).
//
//   iwarp_capture_peer [--crc | --no-crc] [--markers] [--revision 1|2] [--verbose] PORT
//
// One process holds both ends: a listener on 127.0.0.1:PORT, the initiator socket that
// connects to it and the responder socket it accepts. Both use TCP_NODELAY and every
// message goes out in one sendmsg(), and the two sides run in lockstep (each message is
// received and checked before the next is sent), so every MPA frame and every FPDU is a
// TCP segment of its own - which is what tshark's MPA dissector expects.
//
// The session, in wire order (i = initiator, r = responder):
//   i->r MPA Request        r->i MPA Reply
//   i->r Send               i->r RDMA Write          i->r RDMA Read Request
//   r->i RDMA Read Response i->r Send with Invalidate
//   i->r Send with Solicited Event                   r->i Terminate, then FIN both ways
//
// Each side decodes what it receives with the project's decoders (decode_mpa_frame,
// FpduDecoder, decode_ddp_segment, decode_read_request, decode_terminate_body) and checks
// it is exactly what the other side encoded. Exit status: 0 all matched (one summary line on
// stdout), 1 a mismatch or decode error, 2 a socket error, 3 PORT already in use (the test
// picks another), 64 bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/ddp_segment.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "core/wire/fpdu_options.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/mpa_frame.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"
#include "core/wire/wire_error.h"

namespace {

using rdma_interop::wire::DdpHeader;
using rdma_interop::wire::FpduDecoder;
using rdma_interop::wire::FpduEncoder;
using rdma_interop::wire::FpduFrame;
using rdma_interop::wire::FpduOptions;
using rdma_interop::wire::MpaEnhancedParams;
using rdma_interop::wire::MpaFrame;
using rdma_interop::wire::MpaFrameKind;
using rdma_interop::wire::RdmapOpcode;
using rdma_interop::wire::ReadRequest;
using rdma_interop::wire::TerminateCause;
using rdma_interop::wire::TerminateMessage;
using rdma_interop::wire::WireError;
namespace wire = rdma_interop::wire;

constexpr int kExitMismatch = 1;
constexpr int kExitSocket = 2;
constexpr int kExitPortInUse = 3;
constexpr int kExitUsage = 64;

// Distinctive values, so a capture shows which field is which. The test checks them too.
constexpr std::string_view kPrivateData = "rdma-interop capture";
constexpr std::uint16_t kIrdOrd = 16;
constexpr std::uint32_t kWriteStag = 0x1a2b3c01;
constexpr std::uint64_t kWriteTo = 0x1000;
constexpr std::size_t kWriteLength = 1500;  // spans markers (every 512 octets)
constexpr std::uint32_t kReadSinkStag = 0x1a2b3c02;
constexpr std::uint64_t kReadSinkTo = 0x2000;
constexpr std::uint32_t kReadSize = 700;
constexpr std::uint32_t kReadSourceStag = 0x5e6f7a03;
constexpr std::uint64_t kReadSourceTo = 0x3000;
constexpr std::uint32_t kInvalidateStag = 0x5e6f7a04;

struct Options {
  std::uint16_t port = 0;
  bool crc = true;
  bool markers = false;
  std::uint8_t revision = wire::kMpaRevision1;
  bool verbose = false;
};

[[noreturn]] void fail(int status, const std::string& what) {
  std::fprintf(stderr, "iwarp_capture_peer: %s\n", what.c_str());
  std::exit(status);
}

[[noreturn]] void fail_errno(const std::string& what) {
  fail(kExitSocket, what + ": " + std::strerror(errno));
}

[[noreturn]] void fail_wire(const std::string& what, WireError e) {
  fail(kExitMismatch, what + ": " + std::string(wire::error_name(e)) + " (" +
                          std::string(wire::describe(e)) + ")");
}

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  char two[4];
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    if (i != 0) out += (i % 16 == 0) ? '\n' : ' ';
    out += two;
  }
  return out;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

void set_int_option(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) fail_errno(what);
}

// A lockstep peer must never hang a test run: a receive that waits this long is a bug.
void set_receive_timeout(int fd) {
  timeval tv{};
  tv.tv_sec = 5;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) fail_errno("SO_RCVTIMEO");
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// One end of the connection: its socket, the bytes received and not yet decoded, and the
// FPDU codecs of its two directions once MPA negotiation has fixed their options.
struct Endpoint {
  const char* name;
  Fd fd;
  std::vector<std::uint8_t> pending;
  std::optional<FpduEncoder> encoder;
  std::optional<FpduDecoder> decoder;
  int fpdus_sent = 0;
  int fpdus_received = 0;
};

// Sends the slices with one sendmsg() so they leave as one TCP segment (TCP_NODELAY).
void send_slices(Endpoint& from, const std::vector<std::span<const std::uint8_t>>& slices) {
  std::vector<iovec> iov;
  std::size_t total = 0;
  for (const auto& s : slices) {
    if (s.empty()) continue;
    iov.push_back(iovec{const_cast<std::uint8_t*>(s.data()), s.size()});
    total += s.size();
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ssize_t n = ::sendmsg(from.fd.get(), &msg, MSG_NOSIGNAL);
  if (n < 0) fail_errno(std::string(from.name) + ": sendmsg");
  // A blocking socket sends everything unless interrupted; a split would put this message
  // into two segments, which the capture test could not tell from an encoder bug.
  if (static_cast<std::size_t>(n) != total) {
    fail(kExitSocket, std::string(from.name) + ": short sendmsg (" + std::to_string(n) + " of " +
                          std::to_string(total) + ")");
  }
}

// Reads what is available into `pending`; false on orderly end of stream.
bool receive_more(Endpoint& at) {
  std::uint8_t buf[65536];
  ssize_t n;
  do {
    n = ::recv(at.fd.get(), buf, sizeof buf, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) fail_errno(std::string(at.name) + ": recv");
  at.pending.insert(at.pending.end(), buf, buf + n);
  return n > 0;
}

void send_mpa_frame(Endpoint& from, const MpaFrame& frame, const Options& opt) {
  auto bytes = wire::encode_mpa_frame(frame);
  if (!bytes) fail_wire(std::string(from.name) + ": encode_mpa_frame", bytes.error());
  if (opt.verbose) {
    std::fprintf(stderr, "%s sends %s (%zu octets):\n%s\n", from.name,
                 wire::to_string(frame).c_str(), bytes->size(), hex(*bytes).c_str());
  }
  send_slices(from, {std::span<const std::uint8_t>(*bytes)});
}

MpaFrame receive_mpa_frame(Endpoint& at) {
  while (at.pending.size() < wire::kMpaHeaderLen) {
    if (!receive_more(at)) fail(kExitMismatch, std::string(at.name) + ": EOF in MPA header");
  }
  auto length = wire::mpa_frame_length(std::span(at.pending).first(wire::kMpaHeaderLen));
  if (!length) fail_wire(std::string(at.name) + ": mpa_frame_length", length.error());
  while (at.pending.size() < *length) {
    if (!receive_more(at)) fail(kExitMismatch, std::string(at.name) + ": EOF in MPA frame");
  }
  auto frame = wire::decode_mpa_frame(std::span(at.pending).first(*length));
  if (!frame) fail_wire(std::string(at.name) + ": decode_mpa_frame", frame.error());
  at.pending.erase(at.pending.begin(), at.pending.begin() + static_cast<long>(*length));
  return *frame;
}

// One RDMAP message as its sender builds it: the DDP/RDMAP header and the payload.
struct Message {
  DdpHeader header;
  std::vector<std::uint8_t> payload;
};

void send_message(Endpoint& from, const Message& m, const Options& opt) {
  std::array<std::uint8_t, wire::kDdpUntaggedHeaderLen> header_bytes{};
  std::size_t header_length = wire::encode_ddp_header(m.header, header_bytes);
  if (header_length != m.header.length()) {
    fail(kExitMismatch, std::string(from.name) + ": encode_ddp_header wrote " +
                            std::to_string(header_length) + " octets for " +
                            wire::to_string(m.header));
  }
  const std::span<const std::uint8_t> parts[] = {
      std::span<const std::uint8_t>(header_bytes).first(header_length),
      std::span<const std::uint8_t>(m.payload)};
  FpduFrame frame;
  auto wire_length = from.encoder->encode(parts, frame);
  if (!wire_length)
    fail_wire(std::string(from.name) + ": FpduEncoder::encode", wire_length.error());
  if (*wire_length != frame.wire_length()) {
    fail(kExitMismatch, std::string(from.name) + ": encode() returned " +
                            std::to_string(*wire_length) + " but the frame holds " +
                            std::to_string(frame.wire_length()));
  }
  if (opt.verbose) {
    std::vector<std::uint8_t> bytes;
    frame.append_to(bytes);
    std::fprintf(stderr, "%s sends FPDU %s + %zu octets payload (%zu on the wire):\n%s\n",
                 from.name, wire::to_string(m.header).c_str(), m.payload.size(), bytes.size(),
                 hex(bytes).c_str());
  }
  send_slices(from, frame.slices());
  ++from.fpdus_sent;
}

// Feeds received bytes to the decoder until one whole ULPDU comes out; returns a copy.
std::vector<std::uint8_t> receive_ulpdu(Endpoint& at) {
  for (;;) {
    while (!at.pending.empty()) {
      auto step = at.decoder->step(at.pending);
      if (!step) {
        fail_wire(std::string(at.name) + ": FpduDecoder at stream octet " +
                      std::to_string(at.decoder->stream_position()),
                  step.error());
      }
      std::vector<std::uint8_t> ulpdu;
      if (step->ulpdu) ulpdu.assign(step->ulpdu->begin(), step->ulpdu->end());
      if (step->consumed == 0 && !step->ulpdu) {
        fail(kExitMismatch, std::string(at.name) + ": FpduDecoder made no progress");
      }
      at.pending.erase(at.pending.begin(), at.pending.begin() + static_cast<long>(step->consumed));
      if (step->ulpdu) {
        ++at.fpdus_received;
        return ulpdu;
      }
    }
    if (!receive_more(at)) fail(kExitMismatch, std::string(at.name) + ": EOF inside an FPDU");
  }
}

// Receives one message and checks header and payload against what the sender built.
std::vector<std::uint8_t> expect_message(Endpoint& at, const Message& sent) {
  auto ulpdu = receive_ulpdu(at);
  auto segment = wire::decode_ddp_segment(ulpdu);
  if (!segment) {
    fail_wire(std::string(at.name) + ": decode_ddp_segment of\n" + hex(ulpdu) + "\n",
              segment.error());
  }
  if (!(segment->header == sent.header)) {
    fail(kExitMismatch, std::string(at.name) + ": sent " + wire::to_string(sent.header) +
                            ", received " + wire::to_string(segment->header));
  }
  if (!std::equal(segment->payload.begin(), segment->payload.end(), sent.payload.begin(),
                  sent.payload.end())) {
    fail(kExitMismatch, std::string(at.name) + ": payload of " +
                            std::string(wire::opcode_name(sent.header.opcode)) + " differs: sent " +
                            std::to_string(sent.payload.size()) + " octets, received " +
                            std::to_string(segment->payload.size()));
  }
  return std::vector<std::uint8_t>(segment->payload.begin(), segment->payload.end());
}

std::vector<std::uint8_t> pattern(std::size_t length, std::uint8_t seed) {
  std::vector<std::uint8_t> out(length);
  for (std::size_t i = 0; i < length; ++i) out[i] = static_cast<std::uint8_t>(seed + i * 7);
  return out;
}

std::vector<std::uint8_t> text(std::string_view s) {
  return {s.begin(), s.end()};
}

MpaFrame mpa_frame(MpaFrameKind kind, const Options& opt) {
  MpaFrame f;
  f.kind = kind;
  f.markers = opt.markers;  // "I want to receive markers" (RFC 5044 s7.1)
  f.crc = opt.crc;
  f.revision = opt.revision;
  if (opt.revision == wire::kMpaRevision2) {
    // RFC 6581 enhanced establishment with IRD/ORD only: no peer-to-peer, so no RTR.
    MpaEnhancedParams p;
    p.ird = kIrdOrd;
    p.ord = kIrdOrd;
    f.enhanced = p;
  }
  f.private_data = text(kPrivateData);
  return f;
}

void check_frame(const char* who, const MpaFrame& got, const MpaFrame& sent) {
  if (!(got == sent)) {
    fail(kExitMismatch, std::string(who) + ": sent " + wire::to_string(sent) + ", received " +
                            wire::to_string(got));
  }
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "iwarp_capture_peer: %s\n"
               "usage: iwarp_capture_peer [--crc|--no-crc] [--markers] [--revision 1|2] "
               "[--verbose] PORT\n",
               why);
  std::exit(kExitUsage);
}

Options parse(int argc, char** argv) {
  Options opt;
  bool have_port = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--crc") {
      opt.crc = true;
    } else if (a == "--no-crc") {
      opt.crc = false;
    } else if (a == "--markers") {
      opt.markers = true;
    } else if (a == "--verbose") {
      opt.verbose = true;
    } else if (a == "--revision") {
      if (++i == argc) usage("--revision needs 1 or 2");
      std::string_view r = argv[i];
      if (r == "1") {
        opt.revision = wire::kMpaRevision1;
      } else if (r == "2") {
        opt.revision = wire::kMpaRevision2;
      } else {
        usage("--revision needs 1 or 2");
      }
    } else if (!a.empty() && a[0] != '-' && !have_port) {
      char* end = nullptr;
      unsigned long p = std::strtoul(argv[i], &end, 10);
      if (*end != '\0' || p > 65535) usage("PORT must be 0..65535");
      opt.port = static_cast<std::uint16_t>(p);
      have_port = true;
    } else {
      usage(("unexpected argument " + std::string(a)).c_str());
    }
  }
  if (!have_port) usage("PORT is required (0 picks a free one)");
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);

  // ---- TCP: listener, initiator connect, responder accept -------------------------------
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) fail_errno("socket");
  set_int_option(listener.get(), SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
  sockaddr_in addr = loopback(opt.port);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EADDRINUSE) fail(kExitPortInUse, "port " + std::to_string(opt.port) + " in use");
    fail_errno("bind");
  }
  if (::listen(listener.get(), 1) != 0) fail_errno("listen");
  socklen_t addr_len = sizeof addr;
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    fail_errno("getsockname");
  }
  const std::uint16_t port = ntohs(addr.sin_port);

  Endpoint ini{"initiator", Fd(::socket(AF_INET, SOCK_STREAM, 0)), {}, {}, {}};
  if (ini.fd.get() < 0) fail_errno("socket");
  // The handshake completes in the kernel against the listen backlog, so a blocking
  // connect() before accept() in the same thread is fine.
  if (::connect(ini.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    fail_errno("connect");
  }
  Endpoint res{"responder", Fd(::accept(listener.get(), nullptr, nullptr)), {}, {}, {}};
  if (res.fd.get() < 0) fail_errno("accept");
  for (Endpoint* e : {&ini, &res}) {
    set_int_option(e->fd.get(), IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
    set_receive_timeout(e->fd.get());
  }

  // ---- MPA Request / Reply (RFC 5044 s7.1) -------------------------------------------
  const MpaFrame request = mpa_frame(MpaFrameKind::kRequest, opt);
  send_mpa_frame(ini, request, opt);
  const MpaFrame got_request = receive_mpa_frame(res);
  check_frame("responder", got_request, request);

  const MpaFrame reply = mpa_frame(MpaFrameKind::kReply, opt);
  send_mpa_frame(res, reply, opt);
  const MpaFrame got_reply = receive_mpa_frame(ini);
  check_frame("initiator", got_reply, reply);

  // Each side works out the FPDU options from the two frames it has seen: CRC if either side
  // asked; markers in a direction if that direction's receiver asked (RFC 5044 s7.1).
  {
    const bool crc = got_request.crc || reply.crc;
    const bool crc_ini = request.crc || got_reply.crc;
    if (crc != crc_ini) fail(kExitMismatch, "initiator and responder disagree on CRC");
    FpduOptions to_responder;
    to_responder.crc = crc;
    to_responder.markers = reply.markers;
    FpduOptions to_initiator;
    to_initiator.crc = crc;
    to_initiator.markers = request.markers;
    ini.encoder.emplace(to_responder);
    res.decoder.emplace(to_responder);
    res.encoder.emplace(to_initiator);
    ini.decoder.emplace(to_initiator);
  }

  // ---- FPDUs -------------------------------------------------------------------------
  // Send (MSN 1 on queue 0), odd length so the FPDU needs pad.
  const Message send{wire::send_header(1, 0, true), text("hello, iWARP!")};
  send_message(ini, send, opt);
  expect_message(res, send);

  // RDMA Write, long enough to carry markers when they are on.
  const Message write{wire::rdma_write_header(kWriteStag, kWriteTo, true),
                      pattern(kWriteLength, 0x11)};
  send_message(ini, write, opt);
  expect_message(res, write);

  // RDMA Read Request (MSN 1 on queue 1) with its 28-octet body (RFC 5040 s4.4).
  ReadRequest rr;
  rr.sink_stag = kReadSinkStag;
  rr.sink_tagged_offset = kReadSinkTo;
  rr.size = kReadSize;
  rr.source_stag = kReadSourceStag;
  rr.source_tagged_offset = kReadSourceTo;
  const auto rr_body = wire::encode_read_request(rr);
  const Message read_request{wire::read_request_header(1),
                             std::vector<std::uint8_t>(rr_body.begin(), rr_body.end())};
  send_message(ini, read_request, opt);
  {
    auto body = expect_message(res, read_request);
    auto got = wire::decode_read_request(body);
    if (!got) fail_wire("responder: decode_read_request", got.error());
    if (!(*got == rr)) fail(kExitMismatch, "responder: Read Request body fields differ");
  }

  // The responder answers with the RDMA Read Response into the initiator's sink buffer.
  const Message read_response{wire::read_response_header(rr.sink_stag, rr.sink_tagged_offset, true),
                              pattern(rr.size, 0x5a)};
  send_message(res, read_response, opt);
  expect_message(ini, read_response);

  // Send with Invalidate (MSN 2) and Send with Solicited Event (MSN 3), both on queue 0.
  const Message send_inv{wire::send_header(2, 0, true, false, kInvalidateStag),
                         text("send with invalidate")};
  if (send_inv.header.opcode != RdmapOpcode::kSendWithInvalidate) {
    fail(kExitMismatch, "send_header(invalidate) gave " + wire::to_string(send_inv.header));
  }
  send_message(ini, send_inv, opt);
  expect_message(res, send_inv);

  const Message send_se{wire::send_header(3, 0, true, true), text("solicited")};
  if (send_se.header.opcode != RdmapOpcode::kSendWithSolicitedEvent) {
    fail(kExitMismatch, "send_header(solicited) gave " + wire::to_string(send_se.header));
  }
  send_message(ini, send_se, opt);
  expect_message(res, send_se);

  // Terminate (MSN 1 on queue 2): the responder ends the stream, quoting the RDMA Write's
  // headers as if its STag had been invalid (RFC 5040 s4.8).
  std::vector<std::uint8_t> write_ulpdu(write.header.length());
  wire::encode_ddp_header(write.header, write_ulpdu);
  write_ulpdu.insert(write_ulpdu.end(), write.payload.begin(), write.payload.end());
  const TerminateMessage term = wire::terminate_for_cause(
      TerminateCause{wire::TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                     wire::kRdmapCodeInvalidStag},
      write_ulpdu);
  const auto term_ulpdu = wire::encode_terminate(term, 1);
  const Message terminate{wire::terminate_header(1), wire::encode_terminate_body(term)};
  {
    // encode_terminate() must be the header plus encode_terminate_body().
    std::vector<std::uint8_t> joined(terminate.header.length());
    wire::encode_ddp_header(terminate.header, joined);
    joined.insert(joined.end(), terminate.payload.begin(), terminate.payload.end());
    if (joined != term_ulpdu) {
      fail(kExitMismatch, "encode_terminate differs from header + body:\n" + hex(term_ulpdu) +
                              "\nvs\n" + hex(joined));
    }
  }
  send_message(res, terminate, opt);
  {
    auto body = expect_message(ini, terminate);
    auto got = wire::decode_terminate_body(body);
    if (!got) fail_wire("initiator: decode_terminate_body", got.error());
    if (!(*got == term)) {
      fail(kExitMismatch, "initiator: Terminate differs: sent " + wire::to_string(term) +
                              ", received " + wire::to_string(*got));
    }
  }

  // ---- Close: the responder closes after its Terminate; the initiator sees a clean EOF --
  if (::shutdown(res.fd.get(), SHUT_WR) != 0) fail_errno("responder: shutdown");
  if (receive_more(ini) || !ini.pending.empty()) {
    fail(kExitMismatch, "initiator: bytes after the Terminate");
  }
  if (!ini.decoder->at_boundary() || !res.decoder->at_boundary()) {
    fail(kExitMismatch, "a decoder holds a partial FPDU at close");
  }
  if (::shutdown(ini.fd.get(), SHUT_WR) != 0) fail_errno("initiator: shutdown");
  if (receive_more(res) || !res.pending.empty()) {
    fail(kExitMismatch, "responder: bytes after the initiator's close");
  }

  if (ini.fpdus_sent != res.fpdus_received || res.fpdus_sent != ini.fpdus_received) {
    fail(kExitMismatch, "FPDU counts differ between sender and receiver");
  }
  std::printf(
      "iwarp_capture_peer: ok port=%u rev=%u crc=%s markers=%s initiator_sent=%d "
      "responder_sent=%d i2r=send,rdma_write,read_request,send_invalidate,send_se "
      "r2i=read_response,terminate\n",
      static_cast<unsigned>(port), static_cast<unsigned>(opt.revision),
      ini.encoder->options().crc ? "on" : "off", opt.markers ? "on" : "off", ini.fpdus_sent,
      res.fpdus_sent);
  return 0;
}
