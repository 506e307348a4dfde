#include "tools/rdma-probe/raw_mpa_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/runtime/socket_util.h"
#include "core/wire/iwarp_constants.h"

namespace rdma_interop::probe {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kKeptBytes = 64;

// Milliseconds left until `deadline`, for poll(); 0 once it has passed.
int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Waits for `events` on `fd`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

std::string_view kind_name(RawAnswer::Kind kind) {
  switch (kind) {
    case RawAnswer::Kind::kUnreachable:
      return "unreachable";
    case RawAnswer::Kind::kReply:
      return "reply";
    case RawAnswer::Kind::kNotMpa:
      return "not_mpa";
    case RawAnswer::Kind::kBadReply:
      return "bad_reply";
    case RawAnswer::Kind::kReset:
      return "reset";
    case RawAnswer::Kind::kClosed:
      return "closed";
    case RawAnswer::Kind::kSilent:
      return "silent";
  }
  return "silent";
}

std::string printable_prefix(std::span<const std::uint8_t> bytes, std::size_t max) {
  std::string out;
  for (auto b : bytes) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (b == '\r' || b == '\n') break;  // the first line says what the server is
    if (b >= 0x20 && b < 0x7f) {
      out.push_back(static_cast<char>(b));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    }
  }
  return out;
}

std::string guess_server(std::span<const std::uint8_t> first_bytes) {
  std::string text(first_bytes.begin(), first_bytes.end());
  std::string lower;
  for (char ch : text)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  // An HTTP/0.9-style answer (no status line) is just the error page.
  if (text.starts_with("HTTP/") || lower.starts_with("<!doctype html") ||
      lower.starts_with("<html")) {
    return "an HTTP server";
  }
  if (text.starts_with("SSH-")) return "an SSH server";
  if (first_bytes.size() >= 2 && first_bytes[0] == 0x15 && first_bytes[1] == 0x03) {
    return "a TLS server";  // a TLS alert record
  }
  if (text.starts_with("220")) return "an SMTP or FTP server";
  return {};
}

std::optional<RawAnswer> classify_answer(std::span<const std::uint8_t> in) {
  if (in.empty()) return std::nullopt;
  RawAnswer a;
  a.first_bytes.assign(in.begin(),
                       in.begin() + static_cast<std::ptrdiff_t>(std::min(in.size(), kKeptBytes)));
  auto done = [&](RawAnswer::Kind kind, std::string detail) {
    a.kind = kind;
    a.detail = std::move(detail);
    return a;
  };
  // Not MPA as soon as the octets so far stop matching the Reply key.
  const auto key_seen = static_cast<std::ptrdiff_t>(std::min(in.size(), wire::kMpaKeyLen));
  if (!std::equal(in.begin(), in.begin() + key_seen, wire::kMpaReplyKey.begin())) {
    const bool request_key =
        std::equal(in.begin(), in.begin() + key_seen, wire::kMpaRequestKey.begin());
    return done(RawAnswer::Kind::kNotMpa,
                request_key ? "answered with an MPA Request key where the Reply belongs"
                            : "answered \"" + printable_prefix(a.first_bytes) +
                                  "\", which is not an MPA Reply");
  }
  if (in.size() < wire::kMpaHeaderLen) return std::nullopt;
  const wire::MpaLimits lenient{.private_data_limit = wire::kMpaMaxPrivateDataRfc,
                                .reject_reserved_bits = false,
                                .accept_erdma = true};
  auto length = wire::mpa_frame_length(in.first(wire::kMpaHeaderLen), lenient);
  if (!length) {
    a.wire_error = length.error();
    return done(RawAnswer::Kind::kBadReply, "an MPA Reply that does not decode: " +
                                                std::string(wire::describe(length.error())));
  }
  if (in.size() < *length) return std::nullopt;
  auto frame = wire::decode_mpa_frame(in.first(*length), lenient);
  if (!frame) {
    a.wire_error = frame.error();
    return done(RawAnswer::Kind::kBadReply,
                "an MPA Reply that does not decode: " + std::string(wire::describe(frame.error())));
  }
  a.reply = *frame;
  return done(RawAnswer::Kind::kReply, wire::to_string(*frame));
}

RawAnswer send_raw_request(const std::string& host, std::uint16_t port,
                           std::span<const std::uint8_t> request, std::chrono::milliseconds timeout,
                           std::chrono::milliseconds linger) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  RawAnswer a;
  auto finish = [&](RawAnswer::Kind kind, std::string detail) {
    a.kind = kind;
    a.detail = std::move(detail);
    a.elapsed_ms = ms_since(start);
    return a;
  };

  auto address = runtime::resolve_ipv4(host, port);
  if (!address) return finish(RawAnswer::Kind::kUnreachable, address.error());
  auto sock = runtime::make_tcp_socket();
  if (!sock) return finish(RawAnswer::Kind::kUnreachable, runtime::errno_text(sock.error()));
  runtime::Fd fd = std::move(*sock);
  const std::string where = runtime::format_address(*address);

  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0 &&
      errno != EINPROGRESS) {
    return finish(RawAnswer::Kind::kUnreachable,
                  "TCP connect to " + where + ": " + runtime::errno_text(errno));
  }
  if (!wait_for(fd.get(), POLLOUT, deadline)) {
    return finish(RawAnswer::Kind::kUnreachable, "TCP connect to " + where +
                                                     " did not complete in " +
                                                     std::to_string(timeout.count()) + " ms");
  }
  if (int err = runtime::socket_error(fd.get())) {
    return finish(RawAnswer::Kind::kUnreachable,
                  "TCP connect to " + where + ": " + runtime::errno_text(err));
  }
  runtime::tune_connection_socket(fd.get());

  // The Request is at most 532 octets: one write normally takes it all.
  std::size_t sent = 0;
  while (sent < request.size()) {
    iovec part{const_cast<std::uint8_t*>(request.data() + sent), request.size() - sent};
    auto w = runtime::write_some(fd.get(), std::span<const iovec>(&part, 1));
    if (w.error) {
      runtime::close_graceful(fd);
      return finish(w.error == ECONNRESET || w.error == EPIPE ? RawAnswer::Kind::kReset
                                                              : RawAnswer::Kind::kClosed,
                    "sending the Request: " + runtime::errno_text(w.error));
    }
    sent += w.bytes;
    if (w.would_block && !wait_for(fd.get(), POLLOUT, deadline)) {
      runtime::close_graceful(fd);
      return finish(RawAnswer::Kind::kSilent, "the peer did not take the Request's octets");
    }
  }

  std::vector<std::uint8_t> in;
  for (;;) {
    if (!wait_for(fd.get(), POLLIN, deadline)) {
      runtime::close_graceful(fd);
      return finish(RawAnswer::Kind::kSilent,
                    in.empty()
                        ? "no answer in " + std::to_string(timeout.count()) + " ms"
                        : std::to_string(in.size()) + " octets of an MPA Reply, then nothing for " +
                              std::to_string(timeout.count()) + " ms");
    }
    std::uint8_t buf[1024];
    auto r = runtime::read_some(fd.get(), buf);
    if (r.error) {
      runtime::close_graceful(fd);
      return finish(RawAnswer::Kind::kReset,
                    (in.empty() ? "reset before answering: " : "reset in the middle of a Reply: ") +
                        runtime::errno_text(r.error));
    }
    if (r.eof) {
      runtime::close_graceful(fd);
      return finish(RawAnswer::Kind::kClosed,
                    in.empty() ? "closed the connection without answering"
                               : "closed the connection in the middle of a Reply");
    }
    if (r.would_block) continue;
    in.insert(in.end(), buf, buf + r.bytes);
    auto classified = classify_answer(in);
    if (!classified) continue;
    if (classified->kind == RawAnswer::Kind::kReply) {
      const auto until = Clock::now() + linger;
      while (Clock::now() < until && wait_for(fd.get(), POLLIN, until)) {
        auto more = runtime::read_some(fd.get(), buf);
        if (more.error || more.eof) break;
      }
    }
    runtime::close_graceful(fd);
    auto kind = classified->kind;
    a = std::move(*classified);
    return finish(kind, a.detail);
  }
}

}  // namespace rdma_interop::probe
