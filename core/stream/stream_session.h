// stream_session.h - many byte streams over one connection, as a sans-I/O engine.
//
// A stream is what a SOCK_STREAM socket is: ordered octets both ways, half-close, urgent
// data, EAGAIN. A session carries any number of them over one credit channel
// (core/credit/peer_channel.h) between two endpoints, and answers the problems the OFA's 2007
// review of SDP listed (issue 24):
//   - Receive memory shared, not per socket. A stream posts no receive buffer of its own: the
//     channel's receive buffers (a fixed number per connection, by configuration) take every
//     stream's messages, and the session copies each out at once into the stream it is for,
//     so a buffer is posted again whatever the reader does. What a stream holds for its reader
//     is only what was sent and not read yet, bounded by its window, allocated when it comes.
//     An idle stream holds no buffer at all.
//   - Connections reused. Opening a stream costs one OPEN frame on the session; the opener
//     may send at once (up to kInitialWindow before the ACCEPT).
//   - Flow control per stream on top of the channel's credits: a reader that stops reading
//     closes its own stream's window (WINDOW frames carry how much it consumed), never the
//     channel, so it never blocks the other streams of the connection.
//   - No modes. Each chunk of a stream goes the way its size says: a small one copied in a
//     DATA frame; a large one placed by an RDMA Write straight into a ring the reader
//     advertised (SINK) and announced by a PLACED frame in the same message. The Write is
//     posted just before that message, so the reader finds the octets placed when the
//     message is delivered (RDMA ordering, RFC 5040 s5.5). One advertisement takes any
//     number of Writes, pipelined: the ring is reused as the reader consumes it. Byte order
//     is the stream's order whatever mix of the two carried it. A large send that finds
//     nothing waiting before it goes by a Write from the application's own buffer, posted
//     inline while the call runs (borrow()): its octets are never copied into the send ring.
//   - Urgent data in every case: an URGENT frame carries the octet and its mark outside the
//     stream's window and data path (TCP's MSG_OOB, SO_OOBINLINE off: the octet is not in
//     the in-band stream; a read stops at the mark, at_mark() says when it is reached).
//
// Inputs: the application's calls (open, accept, send, recv, shutdown_write, close), the
// messages the channel delivered (on_message), the channel's news (blocked, ready, end).
// Outputs, from take_outputs(), in order: messages for the channel (with an RDMA Write to
// post before one, when it places data), streams whose readiness changed, ports with a
// stream waiting for accept(), and a failure when the peer broke this protocol (the caller
// ends the connection with a Terminate: RDMAP remote operation error, RFC 5040 s7.4). A
// borrowed Write's message is not among them: borrow() hands it to the caller to post.
//
// Memory that RDMA touches (a stream's send ring, which Writes read from, and its sink ring,
// which the peer writes to) comes from the caller's RegionSource: registered with the
// connection, released when the stream ends. The one exception is a borrowed Write's source,
// the application's buffer, read only while the call that posts it runs (borrow()).
//
// Not thread-safe: one caller at a time (the stream endpoint holds a lock per session).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/credit/peer_channel.h"
#include "core/stream/stream_frame.h"
#include "core/util/expected.h"

namespace rdma_interop::stream {

// What the opener may send before the ACCEPT tells it the reader's window.
inline constexpr std::uint32_t kInitialWindow = 64 * 1024;

// The window, send buffer and sink are ceilings, not allocations: an idle stream holds none
// of them (a sink is made when the first large chunk goes; octets that must wait wait in a
// send ring of plain memory their size, the registered one once they are large). They
// bound what one stream has in flight, so its throughput is at most window / round trip;
// and octets are copied out of the sink, and into the send ring when no Write takes them
// from the application's buffer (borrow()), so their size is the working set the copies run
// through. On loopback here (stream_bench, the sizes alternated in the same minutes, before
// borrowed Writes), 64 KiB sends carried 0.88x raw TCP with 512 KiB (0.84-0.92 in four
// runs), 0.76x with 1 MiB (0.64-0.84), 0.8x with 2 MiB and 0.48x with 4 MiB; 256 KiB, 0.85x.
// With borrowed Writes, 512 KiB, 1 MiB and 2 MiB were alike for 64 KiB sends (0.93-0.98x).
// A link with a larger bandwidth-delay product wants a larger window: configure it.
struct SessionConfig {
  std::uint32_t max_message = 4096;          // the channel's largest payload: frames fill it
  std::uint32_t stream_window = 512 * 1024;  // octets a stream holds for its reader, at most
  std::uint32_t send_buffer = 512 * 1024;    // octets a stream takes from its writer at most
  // A chunk of at least this many octets goes by RDMA Write once the reader's sink is known.
  std::uint32_t zero_copy_threshold = 16 * 1024;
  std::uint32_t sink_size = 512 * 1024;  // the ring a reader offers for Writes (<= window)
  std::uint32_t accept_backlog = 128;    // opened streams per port waiting for accept()
  // Streams this side may open over the session's life. Ids are never used twice (as
  // HTTP/2's, RFC 9113 s5.1.1: a late frame of a closed stream must not reach a new one),
  // and 32 bits of them, each side's parity, give 2^31 - 1: at the 150k opens per second
  // stream_bench measures, four hours. Then open() says kExhausted and the next streams
  // go over a new session (StreamNode::connect opens one); this one serves its own to
  // their end.
  std::uint32_t max_opens = 0x7fff'ffff;
};
// Empty when the numbers can work, else one sentence saying which cannot.
std::string config_problem(const SessionConfig& config);

// Which side of the connection this session is: it decides the parity of the stream ids it
// opens (stream_frame.h).
enum class Side : std::uint8_t { kConnector, kAcceptor };

// Memory registered with the connection: `stag` names it to RDMA, `tagged_offset` is the
// offset its first octet has in the Writes that target it.
struct Region {
  std::span<std::uint8_t> memory;
  std::uint32_t stag = 0;
  std::uint64_t tagged_offset = 0;
};
class RegionSource {
 public:
  virtual ~RegionSource() = default;
  // Memory of `size` octets, registered for local reads and remote writes; empty when there
  // is none (the stream then copies instead).
  virtual std::optional<Region> acquire(std::size_t size) = 0;
  virtual void release(const Region& region) = 0;
};

// An RDMA Write to post just before the message it goes with: the channel's own
// (credit::PeerChannel::send takes it as it is).
using Placement = credit::TaggedWrite;

// What a stream call answers when it moves no octet; errno-shaped for the socket layers.
enum class StreamErrc : std::uint8_t {
  kWouldBlock,     // EAGAIN: no room (send) or nothing to read yet (recv)
  kRefused,        // ECONNREFUSED: the peer has no listener on the port, or its backlog is full
  kReset,          // ECONNRESET: the peer aborted the stream
  kBrokenPipe,     // EPIPE: send after shutdown_write()
  kNoStream,       // EBADF: no such stream (closed, or never opened)
  kNoUrgent,       // EINVAL: recv(urgent) with no urgent octet
  kSessionFailed,  // ENOTCONN/EIO: the connection under the stream is gone
  kInvalid,        // EINVAL: a bad argument (a port nobody listens on for accept, ...)
  kExhausted,      // EADDRNOTAVAIL: the session opened all the streams it may (max_opens)
};
std::string_view errc_name(StreamErrc e);  // "would_block", ...

struct Readiness {
  bool readable = false;  // recv() would not say kWouldBlock (data, end of stream, error)
  bool writable = false;  // send() would not wait: takes an octet, or fails at once (EPIPE)
  bool urgent = false;    // an urgent octet waits (POLLPRI)
  bool peer_closed = false;  // the peer's end of stream was read up to (POLLRDHUP)
  bool error = false;     // reset, refused or the session gone (POLLERR)
  friend bool operator==(const Readiness&, const Readiness&) = default;
};

struct SessionOutput {
  enum class Type : std::uint8_t {
    kMessage,        // hand `message` to the channel; post `placement` just before it
    kStreamChanged,  // `stream`'s readiness may have changed
    kIncoming,       // a stream waits for accept() on `port`
    kFailed,         // the peer broke the protocol: end the connection (`detail`)
  };
  Type type = Type::kMessage;
  std::vector<std::uint8_t> message;
  std::optional<Placement> placement;
  StreamId stream = 0;
  std::uint16_t port = 0;
  std::string detail;
};

struct SessionCounters {
  std::uint32_t streams = 0;           // streams this session has now
  std::uint64_t opened = 0;            // by us
  std::uint64_t accepted = 0;          // by us, of the peer's
  std::uint64_t refused = 0;           // of the peer's, by us
  std::uint64_t resets_sent = 0;
  std::uint64_t resets_received = 0;
  std::uint64_t messages = 0;          // messages handed to the channel
  std::uint64_t bytes_copied = 0;      // in-band octets sent in DATA frames
  std::uint64_t bytes_placed = 0;      // in-band octets sent by RDMA Write
  std::uint64_t writes = 0;            // RDMA Writes
  std::uint64_t bytes_borrowed = 0;    // of bytes_placed, Written from the application's buffer
  std::uint64_t bytes_received = 0;    // in-band octets received, both ways
  std::uint64_t receive_held = 0;      // octets received and not read yet, every stream
  std::uint64_t sink_bytes = 0;        // sink rings allocated now
  std::uint64_t send_ring_bytes = 0;   // send rings allocated now
  friend bool operator==(const SessionCounters&, const SessionCounters&) = default;
};

class StreamSession {
 public:
  StreamSession(const SessionConfig& config, Side side, RegionSource& regions);
  ~StreamSession();
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // --- the application ---
  // Streams the peer opens to `port` wait for accept(); without listen() they are refused.
  void listen(std::uint16_t port);
  void stop_listening(std::uint16_t port);  // the ones waiting are reset
  // Opens a stream to the peer's `port`: one OPEN frame. Writable at once. `first`: octets
  // sent with it, in the same message when they fit (TCP Fast Open's data on the SYN, RFC
  // 7413; sendto(MSG_FASTOPEN)), so a stream that opens to say one thing costs one message;
  // more than send_buffer octets: kInvalid, and no stream is opened.
  Expected<StreamId, StreamErrc> open(std::uint16_t port,
                                      std::span<const std::uint8_t> first = {});
  // A stream the peer opened to `port`, or kWouldBlock.
  Expected<StreamId, StreamErrc> accept(std::uint16_t port);
  // How many streams the peer opened to `port` wait for accept() now.
  std::size_t waiting(std::uint16_t port) const;
  // Takes as many octets as the stream's send buffer has room for (at least one, or an
  // error). `urgent`: the last octet goes out of band (MSG_OOB), the others in band.
  Expected<std::size_t, StreamErrc> send(StreamId id, std::span<const std::uint8_t> data,
                                         bool urgent = false);
  // A large send that can go by one RDMA Write straight from `data`, posted inline by the
  // caller before the call returns (credit::TaggedWrite::borrowed): nothing of the session
  // or the stream waits to go before it, and the reader's window and sink take at least
  // zero_copy_threshold octets of it in one piece (at most `max_length`, the connection's
  // inline limit; shorter where it fills the sink to its end). The message to send with the
  // Write, or nothing. Changes nothing: only a Write that was posted is then told with
  // borrowed_sent(); else send() as usual (which copies). The two under one lock: nothing
  // may happen to the session between them.
  struct Borrowed {
    StreamId stream = 0;
    std::size_t length = 0;  // the first `length` octets of `data`
    std::vector<std::uint8_t> message;
    Placement placement;  // borrowed: from `data`, no STag
  };
  std::optional<Borrowed> borrow(StreamId id, std::span<const std::uint8_t> data,
                                 std::uint32_t max_length) const;
  void borrowed_sent(const Borrowed& b);
  // True when only the reader keeps a large chunk from being borrowed: the stream could
  // borrow, but its window or sink has less than zero_copy_threshold octets of room. A
  // WINDOW from the reader ends it (on_message); a caller that may wait can wait for one
  // rather than copy the chunk (StreamEndpoint::send).
  bool waits_for_reader(StreamId id) const;
  // Reads up to out.size() octets in order, stopping at the urgent mark; 0: the peer's end
  // of stream. `urgent`: the urgent octet instead (MSG_OOB). `peek`: leaves them (MSG_PEEK).
  Expected<std::size_t, StreamErrc> recv(StreamId id, std::span<std::uint8_t> out,
                                         bool urgent = false, bool peek = false);
  // True when the next octet read is the one the urgent octet was sent after (SIOCATMARK).
  bool at_mark(StreamId id) const;
  // No more octets from us: the peer reads its end of stream after what was sent (SHUT_WR).
  Expected<std::size_t, StreamErrc> shutdown_write(StreamId id);
  // The application lets go of the stream. Unread octets (or an abort) reset it, as TCP
  // does; else what was sent still goes, then the end of stream.
  void close(StreamId id, bool abort = false);
  Readiness readiness(StreamId id) const;
  // The error a failed stream reports (kReset, kRefused, kSessionFailed), if any.
  std::optional<StreamErrc> stream_error(StreamId id) const;

  // --- the channel ---
  // A message the peer's session sent, delivered in order.
  void on_message(std::span<const std::uint8_t> message);
  // The channel refused a message (its queue is full): the caller keeps it and those after
  // it, and the session makes no more until on_link_ready().
  void on_link_blocked();
  void on_link_ready();
  // The connection ended: every stream fails (kSessionFailed), as a reset TCP connection.
  void on_session_end(std::string detail);

  // --- state ---
  // Moves the outputs out, oldest first (`out` is cleared first).
  void take_outputs(std::vector<SessionOutput>& out);
  bool has_outputs() const { return !outputs_.empty(); }
  bool failed() const { return failed_; }
  const std::string& detail() const { return detail_; }
  SessionCounters counters() const;
  std::size_t stream_count() const { return streams_.size(); }
  // The octets one stream costs in memory now (its state and what it holds).
  std::size_t stream_bytes(StreamId id) const;
  // Empty when every stream's accounting holds, else which is broken.
  std::string broken_invariant() const;

 private:
  struct Stream;
  struct Ring;       // a region used as a ring of octets
  struct Segment;    // octets received for a stream and not read yet
  struct WriteSpan;  // a Write of ours in flight
  struct PeerSink;   // the peer's sink, as our Writes fill it

  Stream* find(StreamId id);
  const Stream* find(StreamId id) const;
  Stream& make_stream(StreamId id, std::uint16_t port, bool ours);
  void queue_control(const Frame& f);
  void changed(Stream& s);
  void pump();
  void flush_control();  // the queued control frames into the message being built
  bool pump_stream(Stream& s);
  void send_window(Stream& s, bool force);
  void reset_stream(Stream& s, ResetReason why, bool tell_peer);
  void send_reset(StreamId id, ResetReason why, bool answer);
  bool awaiting_reset(const Stream& s) const;
  void drop_failed(Stream& s);
  void erase_if_done(StreamId id);
  void release_rings(Stream& s);
  void add_send_ring(Stream& s, std::size_t first);
  void grow_send_ring(Stream& s, std::size_t more);
  void install_send_ring(Stream& s, Ring r);
  Ring full_ring();
  Ring plain_ring(std::size_t at_least) const;
  void fail(std::string detail);
  void finish_message();
  void add_frame(const Frame& f);
  // Frame handlers: false when the peer broke the protocol (the session has failed).
  bool on_frame(const Frame& f);
  bool on_open(const Frame& f);
  bool on_data(Stream& s, const Frame& f);
  bool on_placed(Stream& s, const Frame& f);
  bool peers_id(StreamId id) const;

  SessionConfig config_;
  Side side_;
  RegionSource& regions_;
  std::unordered_map<StreamId, std::unique_ptr<Stream>> streams_;  // looked up per frame
  std::map<std::uint16_t, std::deque<StreamId>> listening_;
  std::uint64_t next_id_ = 0;  // wider than an id: the one after the last may be 2^32
  StreamId highest_peer_id_ = 0;
  std::deque<Frame> control_;  // frames waiting for a message, before any data
  std::vector<std::uint8_t> building_;  // the message being filled
  std::optional<Placement> building_placement_;  // the Write that goes just before it
  std::deque<StreamId> send_order_;     // streams with octets to send, round robin
  std::vector<StreamId> copied_;        // pump(): streams whose send buffer it freed
  bool link_blocked_ = false;
  bool failed_ = false;
  std::string detail_;
  SessionCounters counters_;
  std::vector<SessionOutput> outputs_;
};

}  // namespace rdma_interop::stream
