// raw_mpa_client.h - one MPA Request sent on a plain TCP socket, and whatever comes back.
//
// rdma-probe's first contact with an unknown address, and its probes that need a Request no
// well-behaved initiator would send (reserved bits set, private data at the edge of a
// limit). The provider would fail those connections with a setup error; here the answer is
// classified and kept byte for byte: an MPA Reply, bytes that are not MPA at all (an HTTP
// server's "HTTP/1.1 400"), a reset, a close, or silence. The connection is then closed with
// a FIN, never a reset, and no FPDU is sent on it: kernel siw waiting for an RTR takes a FIN
// in its stride, but a reset there reaches iw_cm in a state it BUG()s on (iwcm.c:969).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/wire/mpa_frame.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::probe {

struct RawAnswer {
  enum class Kind : std::uint8_t {
    kUnreachable,  // TCP connect refused, unroutable or timed out
    kReply,        // a complete MPA Reply: `reply`
    kNotMpa,       // octets arrived that do not begin an MPA Reply: `first_bytes`
    kBadReply,     // an MPA Reply key followed by a frame that does not decode: `wire_error`
    kReset,        // TCP reset before a complete answer
    kClosed,       // orderly close before a complete answer
    kSilent,       // nothing (or part of a frame) within the timeout
  };
  Kind kind = Kind::kSilent;
  std::optional<wire::MpaFrame> reply;
  std::optional<wire::WireError> wire_error;
  std::vector<std::uint8_t> first_bytes;  // up to 64 octets of what arrived
  std::string detail;                     // one sentence, for evidence
  double elapsed_ms = 0;                  // from the start of the TCP connect to the answer
};

std::string_view kind_name(RawAnswer::Kind kind);  // "reply", "not_mpa", "reset", ...

// The answer the octets received so far amount to (sans I/O, fuzzed): kReply, kNotMpa or
// kBadReply, with first_bytes and detail set; nullopt while more octets are needed. Octets
// past the end of the Reply are ignored. elapsed_ms is left zero.
std::optional<RawAnswer> classify_answer(std::span<const std::uint8_t> in);

// Connects to host:port (IPv4 address or name), sends `request` (encoded MPA frame octets)
// and waits up to `timeout` in all for the answer. The Reply is decoded leniently (reserved
// bits kept, private data up to 512 octets, erdma's revision 129 read with its extension) so
// that what the peer did can be reported.
// After a Reply the connection stays open `linger` before the FIN (octets arriving meanwhile
// are read and dropped): kernel siw sends its Reply before it hands the socket to its queue
// pair, and a close inside that window crashes iw_cm (BUG at iwcm.c:969) - the same window
// MpaPolicy::first_fpdu_delay covers for the first FPDU.
RawAnswer send_raw_request(const std::string& host, std::uint16_t port,
                           std::span<const std::uint8_t> request, std::chrono::milliseconds timeout,
                           std::chrono::milliseconds linger = std::chrono::milliseconds(0));

// The printable prefix of `bytes` for a report: "HTTP/1.0 400 Bad request syntax", with
// other octets as \xNN, at most `max` characters.
std::string printable_prefix(std::span<const std::uint8_t> bytes, std::size_t max = 60);

// What kind of server sends these first octets, when it is a well-known one: "an HTTP
// server", "an SSH server", "a TLS server", "an SMTP or FTP server"; empty otherwise.
std::string guess_server(std::span<const std::uint8_t> first_bytes);

}  // namespace rdma_interop::probe
