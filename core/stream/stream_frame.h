// stream_frame.h - the frames a stream session puts in its credit messages.
//
// A stream session (stream_session.h) carries many byte streams over one connection. Each
// credit message (core/credit/peer_channel.h) holds one or more frames, back to back. A
// frame is a 12-octet header and a body, all in network byte order:
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +---------------+---------------+-------------------------------+
//   |     Type      |     Flags     |        Reserved (zero)        |
//   +---------------+---------------+-------------------------------+
//   |                           Stream id                           |
//   +---------------------------------------------------------------+
//   |                     Body length (octets)                      |
//   +---------------------------------------------------------------+
//
//   type     body                                       what it says
//   OPEN     port u16, reserved u16, window u32         open a stream to `port`; the
//                                                       opener reads up to `window` octets
//   ACCEPT   window u32                                 the stream is accepted
//   REFUSE   reason u8                                  no listener / backlog full
//   DATA     the octets (flag FIN: the last ones)       in-band octets, copied
//            (flag TELL: see PLACED)
//   WINDOW   consumed u64                               the reader has consumed this many
//   SINK     stag u32, reserved u32, offset u64,        a ring the writer may RDMA Write
//            size u32                                   into, at `offset` in region `stag`
//   PLACED   length u32 (flag FIN)                      the next `length` in-band octets
//                                                       were written into the sink ring
//            (flag TELL: the writer's send buffer is full of octets only a WINDOW frees:
//            the reader sends one once it has read these, however little it read since
//            its last)
//   URGENT   mark u64, octet u8                         the urgent octet, sent out of band;
//                                                       it sits before in-band offset mark
//   RESET    reason u8 (flag ANSWER: answers a RESET)   the stream is aborted; the sender
//                                                       writes no more into the
//                                                       receiver's sink. A RESET without
//                                                       ANSWER is answered by one with it,
//                                                       unless the receiver sent its own:
//                                                       then both know their sinks are free
//
// This is version 1 of the framing, the one upgrade.h's kUpgradeVersion names; it has not
// been released before, so every peer that speaks it knows all of the above (ANSWER and
// TELL included). A change an older peer would refuse (a type, a flag: kReservedBits) is a new
// version, offered in the OFFER and falling back as a version mismatch does.
//
// Stream ids are chosen by the opener: odd by the side that connected the session, even by
// the side that accepted it, so the two never pick the same one (as HTTP/2 does, RFC 9113
// s5.1.1). Zero is never a stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::stream {

using StreamId = std::uint32_t;

inline constexpr std::size_t kFrameHeaderSize = 12;

enum class FrameType : std::uint8_t {
  kOpen = 1,
  kAccept = 2,
  kRefuse = 3,
  kData = 4,
  kWindow = 5,
  kSink = 6,
  kPlaced = 7,
  kUrgent = 8,
  kReset = 9,
};
std::string_view frame_type_name(FrameType t);  // "open", "data", ...

inline constexpr std::uint8_t kFlagFin = 0x01;       // DATA, PLACED: no octet follows these
inline constexpr std::uint8_t kFlagWantSink = 0x02;  // DATA: the writer has large data: a SINK?
inline constexpr std::uint8_t kFlagAnswer = 0x04;    // RESET: it answers one (never answered)
inline constexpr std::uint8_t kFlagTell = 0x08;      // DATA, PLACED: a WINDOW once read

enum class RefuseReason : std::uint8_t { kNoListener = 1, kBacklogFull = 2 };
enum class ResetReason : std::uint8_t {
  kAborted = 1,       // closed with unread data, or by the application's abort
  kUnknownStream = 2, // data for a stream this side no longer has
};

struct Frame {
  FrameType type = FrameType::kData;
  std::uint8_t flags = 0;
  StreamId stream = 0;
  std::uint16_t port = 0;      // OPEN
  std::uint32_t window = 0;    // OPEN, ACCEPT
  std::uint8_t reason = 0;     // REFUSE, RESET
  std::uint64_t consumed = 0;  // WINDOW
  std::uint32_t stag = 0;      // SINK
  std::uint64_t offset = 0;    // SINK
  std::uint32_t size = 0;      // SINK
  std::uint32_t length = 0;    // PLACED
  std::uint64_t mark = 0;      // URGENT
  std::uint8_t octet = 0;      // URGENT
  std::span<const std::uint8_t> data;  // DATA: points into the decoded message
  friend bool operator==(const Frame& a, const Frame& b);
};

enum class FrameError : std::uint8_t {
  kTruncated,      // the message ends inside a header or a body
  kUnknownType,    // a type this version does not know
  kBadLength,      // a body length other than the type's
  kReservedBits,   // reserved octets not zero, or flags the type does not have
  kZeroStream,     // stream id 0
};
std::string_view frame_error_name(FrameError e);  // "truncated", ...

// The encoded size of `f` (DATA: the header plus its data).
std::size_t encoded_size(const Frame& f);
// Appends `f` to `out`.
void append_frame(std::vector<std::uint8_t>& out, const Frame& f);

// Reads the frames of one message in order; DATA frames point into `message`.
class FrameReader {
 public:
  explicit FrameReader(std::span<const std::uint8_t> message) : rest_(message) {}
  bool done() const { return rest_.empty(); }
  // The next frame, or why the rest of the message is not one.
  Expected<Frame, FrameError> next();

 private:
  std::span<const std::uint8_t> rest_;
};

}  // namespace rdma_interop::stream
