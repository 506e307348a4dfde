#include "core/stream/stream_session.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <utility>

namespace rdma_interop::stream {

// A region used as a ring of octets. `head` and `tail` count octets put in and taken out
// since the start, so they never wrap; an octet's place is its count modulo the size.
struct StreamSession::Ring {
  Region region;
  // Plain memory, no Writes: a small ring, or the RegionSource had none.
  std::unique_ptr<std::uint8_t[]> own;
  bool registered = false;
  bool full = false;  // send_buffer octets (full_ring): never grown or replaced
  std::uint64_t head = 0;
  std::uint64_t tail = 0;

  std::size_t size() const { return region.memory.size(); }
  std::size_t used() const { return static_cast<std::size_t>(head - tail); }
  std::size_t free() const { return size() - used(); }
  std::uint8_t* at(std::uint64_t count) const { return region.memory.data() + count % size(); }
  // Octets from `count` to the ring's end, at most.
  std::size_t to_end(std::uint64_t count) const { return size() - count % size(); }
  void put(std::span<const std::uint8_t> data) {
    std::size_t done = 0;
    while (done < data.size()) {
      const std::size_t n = std::min(data.size() - done, to_end(head));
      std::memcpy(at(head), data.data() + done, n);
      head += n;
      done += n;
    }
  }
  void copy_out(std::uint64_t from, std::span<std::uint8_t> out) const {
    std::size_t done = 0;
    while (done < out.size()) {
      const std::size_t n = std::min(out.size() - done, to_end(from + done));
      std::memcpy(out.data() + done, at(from + done), n);
      done += n;
    }
  }
};

namespace {

// The smallest plain send ring (plain_ring): a few small sends' worth, so one that waits
// for the window does not regrow the ring on every send.
constexpr std::size_t kSmallestRing = 256;

// The most octets DATA frames join into one copied segment (on_data).
constexpr std::size_t kJoinedSegment = 64 * 1024;

}  // namespace

// Octets received for a stream and not read yet: copied ones, or a stretch of the sink.
struct StreamSession::Segment {
  std::vector<std::uint8_t> bytes;  // empty for a sink stretch
  std::uint32_t ring_length = 0;    // a sink stretch: its length
  std::size_t read = 0;             // octets of it read already
  std::size_t length() const { return bytes.empty() ? ring_length : bytes.size(); }
};

// A Write in flight: the stream octets [start, end) sit in the peer's sink until it reads
// past `end`; our send ring keeps them until then (the Write reads them from there), unless
// the Write was borrowed: posted inline from the application's buffer, it reads nothing of
// ours after its post.
struct StreamSession::WriteSpan {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  bool borrowed = false;
};

struct StreamSession::PeerSink {
  std::uint32_t stag = 0;
  std::uint64_t offset = 0;
  std::uint32_t size = 0;
  std::uint64_t written = 0;  // octets written into it, ever
  std::uint64_t freed = 0;    // of those, read by the peer (so the place is free again)
  std::uint64_t free() const { return size - (written - freed); }
  std::uint64_t to_end() const { return size - written % size; }
};

struct StreamSession::Stream {
  enum class Phase : std::uint8_t { kOpening, kWaitingAccept, kOpen };
  StreamId id = 0;
  std::uint16_t port = 0;
  bool ours = false;
  Phase phase = Phase::kOpen;
  bool detached = false;  // the application closed it
  std::optional<StreamErrc> error;
  bool reset_sent = false;
  bool reset_received = false;  // the peer writes no more into our sink (stream_frame.h)

  // Sending. Offsets count in-band octets (the urgent octet is not one).
  std::uint64_t app_end = 0;  // the next octet the application gives
  std::uint64_t sent = 0;     // the next octet to go
  std::uint64_t peer_consumed = 0;
  std::uint32_t peer_window = kInitialWindow;
  // Octets [tail, app_end): not sent, or in a Write from it in flight (and borrowed octets
  // sent after such a Write, which it counts but never held: borrowed_sent).
  std::optional<Ring> send_ring;
  std::deque<WriteSpan> writes;
  std::optional<PeerSink> peer_sink;
  bool asked_sink = false;
  bool shut_wr = false;
  bool fin_sent = false;
  bool in_send_order = false;

  // Receiving.
  std::deque<Segment> segments;
  std::uint64_t received = 0;
  std::uint64_t consumed = 0;
  std::uint64_t consumed_told = 0;
  // Ends of frames marked TELL not read past yet: the first, and the last (0: none).
  std::uint64_t tell_at = 0;
  std::uint64_t tell_last = 0;
  std::uint32_t window = kInitialWindow;  // what the peer was told it may have unread
  bool fin_received = false;
  std::optional<Ring> sink;
  std::optional<std::uint8_t> urgent_octet;
  std::optional<std::uint64_t> mark;

  std::uint64_t unread() const { return received - consumed; }
  // A frame marked TELL ends at `received`.
  void note_tell() {
    if (tell_at == 0) tell_at = received;
    tell_last = received;
  }
  // True once the reader read past a frame marked TELL; the last one, if not read past
  // yet, is then the next. (The ones between are covered by the WINDOW this one sends.)
  bool read_past_tell() {
    if (tell_at == 0 || consumed < tell_at) return false;
    tell_at = tell_last > consumed ? tell_last : 0;
    return true;
  }
  // The oldest Write in flight that reads the send ring, if any: the ring keeps its octets.
  const WriteSpan* ring_write() const {
    for (const WriteSpan& w : writes) {
      if (!w.borrowed) return &w;
    }
    return nullptr;
  }
  std::uint64_t window_space() const {
    const std::uint64_t limit = peer_consumed + peer_window;
    return limit > sent ? limit - sent : 0;
  }
  std::size_t send_space(std::uint32_t buffer) const {
    const std::uint64_t held = app_end - (send_ring ? send_ring->tail : app_end);
    return held >= buffer ? 0 : static_cast<std::size_t>(buffer - held);
  }
  // What the reader takes in one Write now: its window, and its sink's free place up to the
  // sink's end. peer_sink known.
  std::uint64_t reader_room() const {
    return std::min({window_space(), peer_sink->free(), peer_sink->to_end()});
  }
  // A Write of `len` leaves the reader's window or sink under `threshold`: only a WINDOW
  // opens them again, and the reader's own rule (a quarter of its window read) may never
  // send one (a sink under a quarter window, a Write across a telling), so the Write asks
  // for one (TELL) and a writer that waits for the reader (waits_for_reader) is answered.
  bool leaves_reader_short(std::uint64_t len, std::uint32_t threshold) const {
    return std::min(window_space(), peer_sink->free()) - len < threshold;
  }
};

std::string config_problem(const SessionConfig& c) {
  if (c.max_message < kFrameHeaderSize + 64) return "max_message must be at least 76";
  if (c.stream_window < kInitialWindow) return "stream_window must be at least 65536";
  if (c.send_buffer == 0) return "send_buffer must be above 0";
  if (c.sink_size == 0 || c.sink_size > c.stream_window) {
    return "sink_size must be 1..stream_window";
  }
  if (c.accept_backlog == 0) return "accept_backlog must be above 0";
  if (c.max_opens == 0 || c.max_opens > 0x7fff'ffff) return "max_opens must be 1..2^31-1";
  return {};
}

std::string_view errc_name(StreamErrc e) {
  switch (e) {
    case StreamErrc::kWouldBlock:
      return "would_block";
    case StreamErrc::kRefused:
      return "refused";
    case StreamErrc::kReset:
      return "reset";
    case StreamErrc::kBrokenPipe:
      return "broken_pipe";
    case StreamErrc::kNoStream:
      return "no_stream";
    case StreamErrc::kNoUrgent:
      return "no_urgent";
    case StreamErrc::kSessionFailed:
      return "session_failed";
    case StreamErrc::kInvalid:
      return "invalid";
    case StreamErrc::kExhausted:
      return "exhausted";
  }
  return "unknown";
}

StreamSession::StreamSession(const SessionConfig& config, Side side, RegionSource& regions)
    : config_(config),
      side_(side),
      regions_(regions),
      next_id_(side == Side::kConnector ? 1 : 2) {
  if (!config_problem(config_).empty()) config_ = SessionConfig{};
}

StreamSession::~StreamSession() {
  // The connection is gone with the session: nothing is in flight any more.
  for (auto& [id, s] : streams_) {
    s->writes.clear();
    s->fin_received = true;
    release_rings(*s);
  }
}

// ---- the application -------------------------------------------------------------------

void StreamSession::listen(std::uint16_t port) {
  listening_.try_emplace(port);
}

void StreamSession::stop_listening(std::uint16_t port) {
  auto it = listening_.find(port);
  if (it == listening_.end()) return;
  const std::deque<StreamId> waiting = std::move(it->second);
  listening_.erase(it);
  for (StreamId id : waiting) {
    if (Stream* s = find(id)) {
      reset_stream(*s, ResetReason::kAborted, true);
      erase_if_done(id);
    }
  }
  pump();
}

Expected<StreamId, StreamErrc> StreamSession::open(std::uint16_t port,
                                                   std::span<const std::uint8_t> first) {
  if (failed_) return unexpected(StreamErrc::kSessionFailed);
  if (first.size() > config_.send_buffer) return unexpected(StreamErrc::kInvalid);
  if (counters_.opened >= config_.max_opens) return unexpected(StreamErrc::kExhausted);
  const auto id = static_cast<StreamId>(next_id_);
  next_id_ += 2;
  Stream& s = make_stream(id, port, true);
  s.phase = Stream::Phase::kOpening;
  s.window = config_.stream_window;
  Frame f;
  f.type = FrameType::kOpen;
  f.stream = id;
  f.port = port;
  f.window = s.window;
  queue_control(f);
  ++counters_.opened;
  if (!first.empty()) {
    // send() puts the queued OPEN ahead of the octets in the message it builds. A new
    // stream's send buffer is empty and holds send_buffer octets: it takes them all.
    (void)send(id, first);
    return id;
  }
  pump();
  return id;
}

Expected<StreamId, StreamErrc> StreamSession::accept(std::uint16_t port) {
  if (failed_) return unexpected(StreamErrc::kSessionFailed);
  auto it = listening_.find(port);
  if (it == listening_.end()) return unexpected(StreamErrc::kInvalid);
  while (!it->second.empty()) {
    const StreamId id = it->second.front();
    it->second.pop_front();
    Stream* s = find(id);
    if (s == nullptr) continue;  // reset by the peer while it waited
    s->phase = Stream::Phase::kOpen;
    s->window = config_.stream_window;
    Frame f;
    f.type = FrameType::kAccept;
    f.stream = id;
    f.window = s->window;
    queue_control(f);
    ++counters_.accepted;
    pump();
    return id;
  }
  return unexpected(StreamErrc::kWouldBlock);
}

std::size_t StreamSession::waiting(std::uint16_t port) const {
  if (failed_) return 0;  // accept() says kSessionFailed: none can be taken
  auto it = listening_.find(port);
  if (it == listening_.end()) return 0;
  // Ids of streams the peer reset while they waited stay queued until accept() skips them.
  return static_cast<std::size_t>(std::count_if(
      it->second.begin(), it->second.end(), [this](StreamId id) { return find(id) != nullptr; }));
}

Expected<std::size_t, StreamErrc> StreamSession::send(StreamId id,
                                                      std::span<const std::uint8_t> data,
                                                      bool urgent) {
  Stream* s = find(id);
  if (s == nullptr || s->detached) return unexpected(StreamErrc::kNoStream);
  if (s->error) return unexpected(*s->error);
  if (s->phase == Stream::Phase::kWaitingAccept) return unexpected(StreamErrc::kInvalid);
  if (s->shut_wr) return unexpected(StreamErrc::kBrokenPipe);
  if (data.empty()) return std::size_t{0};
  if (!urgent && s->sent == s->app_end && !s->send_ring && !link_blocked_ &&
      data.size() < config_.zero_copy_threshold && data.size() <= s->window_space()) {
    // Small octets that can go now go straight into the message: a stream that only ever
    // sends small ones needs no send ring (a request/response stream, an idle one).
    flush_control();
    std::size_t done = 0;
    while (done < data.size()) {
      std::size_t room = config_.max_message - building_.size();
      if (room < kFrameHeaderSize + std::min<std::size_t>(data.size() - done, 512)) {
        finish_message();
        room = config_.max_message;
      }
      Frame f;
      f.type = FrameType::kData;
      f.stream = id;
      f.data = data.subspan(done, std::min(data.size() - done, room - kFrameHeaderSize));
      add_frame(f);
      done += f.data.size();
    }
    s->app_end += data.size();
    s->sent = s->app_end;
    counters_.bytes_copied += data.size();
    pump();
    changed(*s);
    return data.size();
  }
  if (!s->send_ring) add_send_ring(*s, data.size());
  const std::size_t space = s->send_space(config_.send_buffer);
  std::span<const std::uint8_t> in_band = urgent ? data.first(data.size() - 1) : data;
  if (space == 0 && !(urgent && in_band.empty())) return unexpected(StreamErrc::kWouldBlock);
  const bool partial = in_band.size() > space;
  if (partial) in_band = in_band.first(space);
  grow_send_ring(*s, in_band.size());
  s->send_ring->put(in_band);
  s->app_end += in_band.size();
  std::size_t taken = in_band.size();
  if (urgent && !partial) {
    // The urgent octet goes now, ahead of whatever in-band octets still wait for the
    // window: TCP, too, sends its urgent pointer even into a closed window (RFC 9293 s3.8.5).
    Frame f;
    f.type = FrameType::kUrgent;
    f.stream = id;
    f.mark = s->app_end;
    f.octet = data.back();
    queue_control(f);
    ++taken;
  }
  if (!s->in_send_order) {
    s->in_send_order = true;
    send_order_.push_back(id);
  }
  pump();
  changed(*s);
  return taken;
}

std::optional<StreamSession::Borrowed> StreamSession::borrow(StreamId id,
                                                             std::span<const std::uint8_t> data,
                                                             std::uint32_t max_length) const {
  // Nothing may go before it: the session's messages and control frames, the stream's
  // octets not sent yet (the Write is posted now, so it would overtake them). Readiness news
  // may wait: it is no message (a Write just borrowed left some).
  const bool message_waits = std::ranges::any_of(
      outputs_, [](const SessionOutput& o) { return o.type == SessionOutput::Type::kMessage; });
  if (failed_ || link_blocked_ || message_waits || !building_.empty() || !control_.empty()) {
    return std::nullopt;
  }
  const Stream* s = find(id);
  if (s == nullptr || s->detached || s->error || s->phase != Stream::Phase::kOpen ||
      s->shut_wr || !s->peer_sink || s->sent != s->app_end) {
    return std::nullopt;
  }
  const PeerSink& sink = *s->peer_sink;
  // In one piece of the sink; within the send buffer too, where a Write from the send ring
  // is still in flight (the ring's counts then run past these octets, which it never holds).
  const std::uint64_t len =
      std::min({std::uint64_t{data.size()}, s->reader_room(), std::uint64_t{max_length},
                std::uint64_t{s->send_space(config_.send_buffer)}});
  // Never an empty Write (a threshold of 0 is allowed): that is the window or sink full. A
  // short one only where it fills the sink to its end: the next starts whole at its start,
  // and the rest of a chunk never waits for a reader that will not make the end longer.
  if (len == 0 || (len < config_.zero_copy_threshold && len != sink.to_end())) {
    return std::nullopt;
  }
  Borrowed b;
  b.stream = id;
  b.length = static_cast<std::size_t>(len);
  b.placement.local_addr = reinterpret_cast<std::uint64_t>(data.data());
  b.placement.length = static_cast<std::uint32_t>(len);
  b.placement.remote_stag = sink.stag;
  b.placement.remote_offset = sink.offset + sink.written % sink.size;
  b.placement.borrowed = true;
  Frame f;
  f.type = FrameType::kPlaced;
  f.stream = id;
  f.length = static_cast<std::uint32_t>(len);
  // As for a Write from the send ring (pump_stream): a send buffer it fills, or a window or
  // sink it leaves short, asks for a WINDOW.
  if ((s->ring_write() && s->send_space(config_.send_buffer) == len) ||
      s->leaves_reader_short(len, config_.zero_copy_threshold)) {
    f.flags |= kFlagTell;
  }
  append_frame(b.message, f);
  return b;
}

bool StreamSession::waits_for_reader(StreamId id) const {
  if (failed_) return false;
  const Stream* s = find(id);
  if (s == nullptr || s->detached || s->error || s->phase != Stream::Phase::kOpen ||
      s->shut_wr || !s->peer_sink || s->sent != s->app_end) {
    return false;
  }
  const std::uint64_t room = s->reader_room();
  return room < config_.zero_copy_threshold && room != s->peer_sink->to_end();
}

void StreamSession::borrowed_sent(const Borrowed& b) {
  Stream* s = find(b.stream);
  if (s == nullptr) return;  // borrow() found it, under the same lock: not reached
  const std::uint64_t len = b.length;
  s->writes.push_back(WriteSpan{s->sent, s->sent + len, true});
  s->peer_sink->written += len;
  s->app_end += len;
  s->sent = s->app_end;
  if (s->send_ring) {
    // Its counts are stream offsets, and these octets were never in it: empty, unless a
    // Write still reads it (then they count against the send buffer until that is read).
    s->send_ring->head = s->app_end;
    if (!s->ring_write()) s->send_ring->tail = s->app_end;
  }
  ++counters_.messages;
  ++counters_.writes;
  counters_.bytes_placed += len;
  counters_.bytes_borrowed += len;
  changed(*s);
}

Expected<std::size_t, StreamErrc> StreamSession::recv(StreamId id, std::span<std::uint8_t> out,
                                                      bool urgent, bool peek) {
  Stream* s = find(id);
  if (s == nullptr || s->detached) return unexpected(StreamErrc::kNoStream);
  if (urgent) {
    if (!s->urgent_octet) return unexpected(s->error ? *s->error : StreamErrc::kNoUrgent);
    if (out.empty()) return std::size_t{0};
    out[0] = *s->urgent_octet;
    if (!peek) {
      s->urgent_octet.reset();
      changed(*s);
    }
    return std::size_t{1};
  }
  if (out.empty()) return std::size_t{0};  // as TCP's recv of 0 octets: at once
  if (s->segments.empty()) {
    if (s->error) return unexpected(*s->error);
    if (s->fin_received) return std::size_t{0};
    return unexpected(StreamErrc::kWouldBlock);
  }
  std::size_t want = out.size();
  const bool from_mark = s->mark && s->consumed == *s->mark;
  if (s->mark && s->consumed < *s->mark) {
    want = static_cast<std::size_t>(std::min<std::uint64_t>(want, *s->mark - s->consumed));
  }
  std::size_t done = 0;
  std::uint64_t sink_at = s->sink ? s->sink->tail : 0;
  for (std::size_t i = 0; i < s->segments.size() && done < want; ++i) {
    Segment& seg = s->segments[i];
    const std::size_t n = std::min(want - done, seg.length() - seg.read);
    if (seg.bytes.empty()) {
      s->sink->copy_out(sink_at + seg.read, out.subspan(done, n));
      sink_at += seg.ring_length;
    } else {
      std::memcpy(out.data() + done, seg.bytes.data() + seg.read, n);
    }
    done += n;
    if (!peek) seg.read += n;
  }
  if (peek) return done;
  while (!s->segments.empty() && s->segments.front().read == s->segments.front().length()) {
    if (s->segments.front().bytes.empty()) s->sink->tail += s->segments.front().ring_length;
    s->segments.pop_front();
  }
  // A sink stretch partly read keeps its place in the ring until it is read whole; the
  // peer frees it by the same rule (WINDOW tells it where the reader is).
  s->consumed += done;
  if (from_mark && done > 0) s->mark.reset();
  send_window(*s, s->read_past_tell());
  pump();
  changed(*s);
  return done;
}

bool StreamSession::at_mark(StreamId id) const {
  const Stream* s = find(id);
  return s != nullptr && s->mark && s->consumed == *s->mark;
}

Expected<std::size_t, StreamErrc> StreamSession::shutdown_write(StreamId id) {
  Stream* s = find(id);
  if (s == nullptr || s->detached) return unexpected(StreamErrc::kNoStream);
  if (s->error) return unexpected(*s->error);
  if (s->shut_wr) return std::size_t{0};
  s->shut_wr = true;
  if (!s->in_send_order) {
    s->in_send_order = true;
    send_order_.push_back(id);
  }
  pump();
  changed(*s);
  return std::size_t{0};
}

void StreamSession::close(StreamId id, bool abort) {
  Stream* s = find(id);
  if (s == nullptr || s->detached) return;
  if (s->error) {
    s->detached = true;
    drop_failed(*s);
    return;
  }
  if (abort || s->unread() > 0 || s->phase == Stream::Phase::kWaitingAccept) {
    // Closing with octets unread tells the peer they were lost (RFC 9293 s3.6.1's RST).
    reset_stream(*s, ResetReason::kAborted, true);
    erase_if_done(id);
    pump();
    return;
  }
  // All read: the last WINDOW, so the peer's Writes still waiting for one are released.
  // Only a stream with a sink was ever written to: one that only got DATA (a request, an
  // open with its first octets) owes the writer nothing, and its close costs no frame more.
  if (s->sink) send_window(*s, true);
  s->detached = true;
  s->shut_wr = true;
  if (!s->in_send_order) {
    s->in_send_order = true;
    send_order_.push_back(id);
  }
  pump();
  erase_if_done(id);
}

Readiness StreamSession::readiness(StreamId id) const {
  Readiness r;
  const Stream* s = find(id);
  if (s == nullptr) {
    r.error = true;
    return r;
  }
  r.error = s->error.has_value();
  r.urgent = s->urgent_octet.has_value();
  r.peer_closed = s->fin_received && s->segments.empty();
  r.readable = !s->segments.empty() || r.peer_closed || r.error;
  r.writable = r.error || s->shut_wr ||
               (s->phase != Stream::Phase::kWaitingAccept &&
                           (!s->send_ring || s->send_space(config_.send_buffer) > 0));
  return r;
}

std::optional<StreamErrc> StreamSession::stream_error(StreamId id) const {
  const Stream* s = find(id);
  return s ? s->error : std::optional<StreamErrc>(StreamErrc::kNoStream);
}

// ---- the channel -----------------------------------------------------------------------

void StreamSession::on_message(std::span<const std::uint8_t> message) {
  if (failed_) return;
  FrameReader reader(message);
  while (!reader.done()) {
    auto f = reader.next();
    if (!f) {
      fail("a malformed stream frame (" + std::string(frame_error_name(f.error())) + ")");
      return;
    }
    if (!on_frame(*f)) return;
  }
  pump();
}

void StreamSession::on_link_blocked() {
  link_blocked_ = true;
}

void StreamSession::on_link_ready() {
  link_blocked_ = false;
  pump();
}

void StreamSession::on_session_end(std::string detail) {
  if (failed_) return;
  failed_ = true;
  detail_ = std::move(detail);
  // Nothing comes from the peer any more, and no Write is in flight: a stream the application
  // let go of, or never took (waiting for accept), goes now; the others fail, and go when
  // the application closes them.
  std::vector<StreamId> gone;
  for (auto& [id, s] : streams_) {
    if (!s->error) s->error = StreamErrc::kSessionFailed;
    if (s->detached || s->phase == Stream::Phase::kWaitingAccept) {
      gone.push_back(id);
    } else {
      changed(*s);
    }
  }
  for (StreamId id : gone) drop_failed(*streams_.at(id));
  control_.clear();
  building_.clear();
}

void StreamSession::take_outputs(std::vector<SessionOutput>& out) {
  out.clear();
  std::swap(out, outputs_);
}

SessionCounters StreamSession::counters() const {
  SessionCounters c = counters_;
  c.streams = static_cast<std::uint32_t>(streams_.size());
  c.receive_held = 0;
  for (const auto& [id, s] : streams_) c.receive_held += s->unread();
  return c;
}

std::size_t StreamSession::stream_bytes(StreamId id) const {
  const Stream* s = find(id);
  if (s == nullptr) return 0;
  // And its hash map node (a link and the entry) and a bucket's pointer.
  std::size_t n = sizeof(Stream) + sizeof(decltype(streams_)::value_type) + 2 * sizeof(void*);
  for (const Segment& seg : s->segments) n += sizeof(Segment) + seg.bytes.capacity();
  if (s->send_ring) n += s->send_ring->size();
  if (s->sink) n += s->sink->size();
  return n;
}

std::string StreamSession::broken_invariant() const {
  for (const auto& [id, s] : streams_) {
    if (s->sent > s->app_end) return "a stream sent past what it was given";
    if (s->peer_consumed > s->sent) return "the peer consumed more than was sent";
    if (s->consumed > s->received) return "a stream read more than it received";
    std::uint64_t held = 0;
    for (const Segment& seg : s->segments) held += seg.length() - seg.read;
    if (held != s->unread()) return "a stream's segments disagree with its counts";
    if (s->send_ring && s->send_ring->used() > s->send_ring->size()) {
      return "a send ring holds more than its size";
    }
    if (s->sink && s->sink->used() > s->sink->size()) return "a sink holds more than its size";
    if (s->peer_sink && s->peer_sink->written - s->peer_sink->freed > s->peer_sink->size) {
      return "more written into the peer's sink than it has room for";
    }
  }
  return {};
}

// ---- inside ----------------------------------------------------------------------------

StreamSession::Stream* StreamSession::find(StreamId id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

const StreamSession::Stream* StreamSession::find(StreamId id) const {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

StreamSession::Stream& StreamSession::make_stream(StreamId id, std::uint16_t port, bool ours) {
  auto s = std::make_unique<Stream>();
  s->id = id;
  s->port = port;
  s->ours = ours;
  Stream& ref = *s;
  streams_[id] = std::move(s);
  return ref;
}

bool StreamSession::peers_id(StreamId id) const {
  // The connector opens odd ids, the acceptor even ones.
  const bool odd = (id & 1) != 0;
  return side_ == Side::kConnector ? !odd : odd;
}

void StreamSession::queue_control(const Frame& f) {
  control_.push_back(f);
}

void StreamSession::changed(Stream& s) {
  SessionOutput o;
  o.type = SessionOutput::Type::kStreamChanged;
  o.stream = s.id;
  outputs_.push_back(std::move(o));
}

void StreamSession::fail(std::string detail) {
  SessionOutput o;
  o.type = SessionOutput::Type::kFailed;
  o.detail = detail;
  on_session_end(std::move(detail));
  outputs_.push_back(std::move(o));
}

void StreamSession::finish_message() {
  if (building_.empty()) return;
  SessionOutput o;
  o.type = SessionOutput::Type::kMessage;
  o.message = std::move(building_);
  o.placement = std::exchange(building_placement_, std::nullopt);
  building_.clear();
  ++counters_.messages;
  outputs_.push_back(std::move(o));
}

void StreamSession::add_frame(const Frame& f) {
  if (building_.size() + encoded_size(f) > config_.max_message) finish_message();
  append_frame(building_, f);
}

void StreamSession::flush_control() {
  while (!control_.empty()) {
    add_frame(control_.front());
    control_.pop_front();
  }
}

void StreamSession::pump() {
  if (failed_ || link_blocked_) return;
  flush_control();
  // Round robin: one chunk per stream per turn, so one stream's large send does not hold
  // the others' small ones back.
  bool progress = true;
  while (progress && !send_order_.empty()) {
    progress = false;
    const std::size_t turns = send_order_.size();
    for (std::size_t i = 0; i < turns; ++i) {
      const StreamId id = send_order_.front();
      send_order_.pop_front();
      Stream* s = find(id);
      if (s == nullptr) continue;
      if (pump_stream(*s)) progress = true;
      const bool more = !s->error && (s->sent < s->app_end || (s->shut_wr && !s->fin_sent));
      if (more) {
        send_order_.push_back(id);
      } else {
        s->in_send_order = false;
        erase_if_done(id);
      }
    }
  }
  finish_message();
  for (const StreamId id : copied_) {
    if (Stream* s = find(id)) changed(*s);
  }
  copied_.clear();
}

// The ring a stream's octets wait in when they cannot go straight into a message: made on
// first use, so a stream that never sends costs none. Small chunks (a stream opened with an
// octet while the channel is full, the window of a slow reader) wait in a ring of plain
// memory just their size, copied from only; once the octets held reach the zero-copy
// threshold, they move to the ring of send_buffer octets, registered, that RDMA Writes read
// from. Allocating and registering that for every short-lived stream tripled the CPU time
// of an open (stream_bench, the channel full of them).
void StreamSession::add_send_ring(Stream& s, std::size_t first) {
  Ring r = first < config_.zero_copy_threshold ? plain_ring(first) : full_ring();
  // Its counts are stream offsets: octets sent before it (straight into messages) were
  // never in it.
  r.head = r.tail = s.app_end;
  install_send_ring(s, std::move(r));
}

// Makes room for `more` octets: a plain ring they do not fit at least doubles, and becomes
// the full ring once what it would hold is large. Nothing reads a plain ring but the copy
// into a message (Writes need the registered one), so its octets can move.
void StreamSession::grow_send_ring(Stream& s, std::size_t more) {
  Ring& old = *s.send_ring;
  if (old.full) return;
  const std::size_t need = old.used() + more;  // at most send_buffer (send_space)
  const bool large = need >= config_.zero_copy_threshold;
  if (!large && need <= old.size()) return;
  Ring r = large ? full_ring() : plain_ring(need);
  r.head = r.tail = old.tail;
  for (std::uint64_t at = old.tail; at < old.head;) {
    const std::size_t n = std::min<std::size_t>(old.head - at, old.to_end(at));
    r.put({old.at(at), n});
    at += n;
  }
  counters_.send_ring_bytes -= old.size();
  install_send_ring(s, std::move(r));
}

// The ring of send_buffer octets: registered, or plain when the RegionSource has none (then
// every chunk is copied). Never replaced.
StreamSession::Ring StreamSession::full_ring() {
  Ring r;
  if (auto region = regions_.acquire(config_.send_buffer)) {
    r.region = *region;
    r.registered = true;
  } else {
    r = plain_ring(config_.send_buffer);
  }
  r.full = true;
  return r;
}

StreamSession::Ring StreamSession::plain_ring(std::size_t at_least) const {
  const std::size_t size = std::min<std::size_t>(
      std::bit_ceil(std::max(at_least, kSmallestRing)), config_.send_buffer);
  Ring r;
  // Not zeroed: only what is put in is read.
  r.own = std::make_unique_for_overwrite<std::uint8_t[]>(size);
  r.region.memory = {r.own.get(), size};
  return r;
}

void StreamSession::install_send_ring(Stream& s, Ring r) {
  counters_.send_ring_bytes += r.size();
  s.send_ring = std::move(r);
}

// One chunk of a stream's octets (or its end of stream): true when one went.
bool StreamSession::pump_stream(Stream& s) {
  if (s.error) return false;
  const std::uint64_t pending = s.app_end - s.sent;
  const bool fin_now = s.shut_wr && !s.fin_sent;
  if (pending == 0) {
    if (!fin_now) return false;
    Frame f;
    f.type = FrameType::kData;
    f.flags = kFlagFin;
    f.stream = s.id;
    add_frame(f);
    s.fin_sent = true;
    return true;
  }
  const std::uint64_t space = s.window_space();
  if (space == 0) return false;  // the reader has not read: only this stream waits
  Ring& ring = *s.send_ring;
  const bool large = pending >= config_.zero_copy_threshold;
  if (large && s.peer_sink && ring.registered) {
    PeerSink& sink = *s.peer_sink;
    const std::uint64_t len = std::min({pending, space, std::uint64_t{ring.to_end(s.sent)},
                                        sink.free(), sink.to_end()});
    if (len > 0) {
      Placement p;
      p.local_addr = reinterpret_cast<std::uint64_t>(ring.at(s.sent));
      p.length = static_cast<std::uint32_t>(len);
      p.local_stag = ring.region.stag;
      p.remote_stag = sink.stag;
      p.remote_offset = sink.offset + sink.written % sink.size;
      // One Write per message: the PLACED frame and its Write travel together.
      if (building_placement_) finish_message();
      Frame f;
      f.type = FrameType::kPlaced;
      f.stream = s.id;
      f.length = static_cast<std::uint32_t>(len);
      // The application can give no more until a WINDOW frees the Writes: ask for one
      // once these are read. The reader's own rule (a quarter of its window read) never
      // comes when its last WINDOW fell inside a Write and less than a quarter window
      // follows it (a send buffer under the window, or a Write over three quarters of it).
      if (s.send_space(config_.send_buffer) == 0 ||
          s.leaves_reader_short(len, config_.zero_copy_threshold)) {
        f.flags |= kFlagTell;
      }
      if (s.shut_wr && s.sent + len == s.app_end) {
        f.flags |= kFlagFin;
        s.fin_sent = true;
      }
      add_frame(f);
      building_placement_ = p;
      finish_message();  // the Write's message goes now: what follows is not held for it
      s.writes.push_back(WriteSpan{s.sent, s.sent + len});
      sink.written += len;
      s.sent += len;
      counters_.bytes_placed += len;
      ++counters_.writes;
      return true;
    }
  }
  Frame f;
  f.type = FrameType::kData;
  f.stream = s.id;
  if (large && !s.peer_sink && !s.asked_sink && ring.registered) {
    f.flags |= kFlagWantSink;
    s.asked_sink = true;
  }
  std::size_t room = config_.max_message - building_.size();
  if (room < kFrameHeaderSize + std::min<std::uint64_t>(pending, 512)) {
    finish_message();
    room = config_.max_message;
  }
  const std::uint64_t len = std::min({pending, space, std::uint64_t{ring.to_end(s.sent)},
                                      std::uint64_t{room - kFrameHeaderSize}});
  f.data = {ring.at(s.sent), static_cast<std::size_t>(len)};
  if (s.shut_wr && s.sent + len == s.app_end) {
    f.flags |= kFlagFin;
    s.fin_sent = true;
  }
  // Copied octets free their place at once, unless a Write before them holds the ring:
  // then, as for a PLACED frame, a full send buffer asks for a WINDOW.
  if (s.ring_write() && s.send_space(config_.send_buffer) == 0) f.flags |= kFlagTell;
  add_frame(f);
  s.sent += len;
  if (!s.ring_write()) ring.tail = s.sent;  // copied into the message: the place is free
  counters_.bytes_copied += len;
  // Room in its send buffer: said once at the end of the pump, not once a chunk.
  if (copied_.empty() || copied_.back() != s.id) copied_.push_back(s.id);
  return true;
}

// Tells the peer how far the reader is, once a quarter of the window was read (or at once,
// `force`): often enough that a writer never waits on a reader that is reading. Also after
// the peer's end of stream: its RDMA Writes are done with only when we say they were read
// (its send ring and its state wait for that).
void StreamSession::send_window(Stream& s, bool force) {
  if (s.error) return;
  const std::uint64_t owed = s.consumed - s.consumed_told;
  if (owed == 0 || (!force && owed < s.window / 4)) return;
  s.consumed_told = s.consumed;
  // One WINDOW per stream waits at most: a later one says all an earlier one would. (While
  // the channel is blocked, a peer marking every small frame TELL would otherwise have us
  // keep one for each read.)
  for (auto it = control_.rbegin(); it != control_.rend(); ++it) {
    if (it->type == FrameType::kWindow && it->stream == s.id) {
      it->consumed = s.consumed;
      return;
    }
  }
  Frame f;
  f.type = FrameType::kWindow;
  f.stream = s.id;
  f.consumed = s.consumed;
  queue_control(f);
}

void StreamSession::reset_stream(Stream& s, ResetReason why, bool tell_peer) {
  if (tell_peer && !s.error) send_reset(s.id, why, false);
  if (!s.error) s.error = StreamErrc::kReset;
  s.segments.clear();
  s.received = s.consumed;
  s.app_end = s.sent;
  s.detached = tell_peer || s.detached;
  changed(s);
}

void StreamSession::send_reset(StreamId id, ResetReason why, bool answer) {
  Frame f;
  f.type = FrameType::kReset;
  f.flags = answer ? kFlagAnswer : std::uint8_t{0};
  f.stream = id;
  f.reason = static_cast<std::uint8_t>(why);
  queue_control(f);
  ++counters_.resets_sent;
  if (Stream* s = find(id)) s->reset_sent = true;
}

// A stream goes once the application let go of it and nothing of it is in flight: its end
// of stream sent (or a reset), and no Write reading its send ring. A peer's sink is never
// written after its end of stream or its RESET, so ours may go once one was received; a
// stream we reset waits for the peer's RESET (its answer) while its sink may be written.
void StreamSession::erase_if_done(StreamId id) {
  Stream* s = find(id);
  if (s == nullptr || !s->detached) return;
  const bool sent_all = s->error || (s->fin_sent && s->sent == s->app_end);
  if (!sent_all || !s->writes.empty()) return;
  if (!s->error && !s->fin_received) return;  // the peer may still send: keep its state
  if (awaiting_reset(*s)) return;
  release_rings(*s);
  std::erase(send_order_, id);
  streams_.erase(id);
}

bool StreamSession::awaiting_reset(const Stream& s) const {
  return !failed_ && s.reset_sent && !s.reset_received && !s.fin_received && s.sink.has_value();
}

// A failed stream the application let go of: nothing of it goes any more, so it goes now,
// unless we reset it and the peer may still write into its sink (its RESET frees it).
void StreamSession::drop_failed(Stream& s) {
  if (awaiting_reset(s)) return;
  const StreamId id = s.id;
  release_rings(s);
  std::erase(send_order_, id);
  streams_.erase(id);
}

void StreamSession::release_rings(Stream& s) {
  if (s.send_ring) {
    counters_.send_ring_bytes -= s.send_ring->size();
    // A Write may still read it until the peer says it was read, or the session ended.
    if (s.send_ring->registered && (!s.ring_write() || failed_)) {
      regions_.release(s.send_ring->region);
    }
    s.send_ring.reset();
  }
  if (s.sink) {
    counters_.sink_bytes -= s.sink->size();
    // After a reset the peer may still have Writes on their way into the sink until its
    // RESET comes (erase_if_done waits for it): a sink released before (the session
    // ending) is not given back (deregistered), so such a Write finds memory, not a
    // protection error that would end every stream of the connection; the region is the
    // source's to reclaim when the session ends.
    if (s.sink->registered && (s.fin_received || s.reset_received || !s.error || failed_)) {
      regions_.release(s.sink->region);
    }
    s.sink.reset();
  }
}

// ---- frames from the peer ----------------------------------------------------------------

bool StreamSession::on_frame(const Frame& f) {
  if (f.type == FrameType::kOpen) return on_open(f);
  Stream* s = find(f.stream);
  if (s == nullptr) {
    // A stream we no longer have (closed, reset or refused): what was on its way is
    // dropped. An id never opened is the peer's mistake.
    const bool was_ours = !peers_id(f.stream) && f.stream < next_id_;
    const bool was_theirs = peers_id(f.stream) && f.stream <= highest_peer_id_;
    if (was_ours || was_theirs) {
      // A RESET for a stream we let go of: the peer waits for ours to free its sink.
      if (f.type == FrameType::kReset && (f.flags & kFlagAnswer) == 0) {
        ++counters_.resets_received;
        send_reset(f.stream, ResetReason::kAborted, true);
      }
      return true;
    }
    fail("a " + std::string(frame_type_name(f.type)) + " frame for stream " +
         std::to_string(f.stream) + ", never opened");
    return false;
  }
  switch (f.type) {
    case FrameType::kOpen:
      return true;
    case FrameType::kAccept:
      if (!s->ours || s->phase != Stream::Phase::kOpening) {
        fail("ACCEPT for a stream not being opened");
        return false;
      }
      s->phase = Stream::Phase::kOpen;
      s->peer_window = f.window;
      changed(*s);
      return true;
    case FrameType::kRefuse:
      if (!s->ours || s->phase != Stream::Phase::kOpening) {
        fail("REFUSE for a stream not being opened");
        return false;
      }
      s->error = StreamErrc::kRefused;
      s->app_end = s->sent;
      s->segments.clear();
      s->received = s->consumed;
      changed(*s);
      erase_if_done(s->id);
      return true;
    case FrameType::kData:
      return on_data(*s, f);
    case FrameType::kWindow: {
      if (f.consumed < s->peer_consumed || f.consumed > s->sent) {
        fail("WINDOW beyond what was sent");
        return false;
      }
      s->peer_consumed = f.consumed;
      while (!s->writes.empty() && s->writes.front().end <= s->peer_consumed) {
        if (s->peer_sink) s->peer_sink->freed += s->writes.front().end - s->writes.front().start;
        s->writes.pop_front();
      }
      if (s->send_ring) {
        const WriteSpan* held = s->ring_write();
        s->send_ring->tail = held ? held->start : s->sent;
      }
      changed(*s);
      erase_if_done(s->id);
      return true;
    }
    case FrameType::kSink:
      if (s->peer_sink || f.size == 0) {
        fail("a second or empty SINK");
        return false;
      }
      s->peer_sink = PeerSink{f.stag, f.offset, f.size, 0, 0};
      return true;
    case FrameType::kPlaced:
      return on_placed(*s, f);
    case FrameType::kUrgent:
      s->urgent_octet = f.octet;
      s->mark = f.mark;
      changed(*s);
      return true;
    case FrameType::kReset: {
      ++counters_.resets_received;
      // The peer writes no more into our sink; one that has not heard of ours hears it
      // (an answer, never answered: stream_frame.h).
      const bool answer = (f.flags & kFlagAnswer) == 0 && !s->reset_sent;
      reset_stream(*s, ResetReason::kAborted, false);
      s->reset_received = true;
      if (answer) send_reset(s->id, ResetReason::kAborted, true);
      // The answer to ours: the peer had everything we sent before it, our Writes included,
      // so none reads our send ring any more. (A RESET of the peer's own says nothing of
      // our Writes: the ring is kept until the session ends if one may be in flight.)
      if ((f.flags & kFlagAnswer) != 0) s->writes.clear();
      if (s->detached) drop_failed(*s);
      return true;
    }
  }
  return true;
}

bool StreamSession::on_open(const Frame& f) {
  if (!peers_id(f.stream) || f.stream <= highest_peer_id_) {
    fail("OPEN with stream id " + std::to_string(f.stream) + ", not a new one of the peer's");
    return false;
  }
  highest_peer_id_ = f.stream;
  auto it = listening_.find(f.port);
  const bool room = it != listening_.end() && it->second.size() < config_.accept_backlog;
  if (!room) {
    Frame r;
    r.type = FrameType::kRefuse;
    r.stream = f.stream;
    r.reason = static_cast<std::uint8_t>(it == listening_.end() ? RefuseReason::kNoListener
                                                                : RefuseReason::kBacklogFull);
    queue_control(r);
    ++counters_.refused;
    return true;
  }
  Stream& s = make_stream(f.stream, f.port, false);
  s.phase = Stream::Phase::kWaitingAccept;
  s.peer_window = f.window;
  it->second.push_back(f.stream);
  SessionOutput o;
  o.type = SessionOutput::Type::kIncoming;
  o.port = f.port;
  o.stream = f.stream;
  outputs_.push_back(std::move(o));
  return true;
}

bool StreamSession::on_data(Stream& s, const Frame& f) {
  if (s.error) return true;  // reset by us: what was on its way is dropped
  if (s.fin_received) {
    fail("DATA after the end of stream");
    return false;
  }
  if (s.received + f.data.size() > s.consumed + s.window) {
    fail("DATA beyond the stream's window");
    return false;
  }
  if (s.detached && !f.data.empty()) {
    // The application closed the stream: nobody will read these (RFC 9293 s3.6.1).
    reset_stream(s, ResetReason::kAborted, true);
    erase_if_done(s.id);
    return true;
  }
  if (!f.data.empty()) {
    // Small DATA joins the copied segment before it: a segment costs ~40 octets of its own,
    // and a writer of 1-octet sends to a reader that waits made its window cost 41 times its
    // size. Up to kJoinedSegment, so a segment read in part is not kept long for the rest.
    if (!s.segments.empty() && !s.segments.back().bytes.empty() &&
        s.segments.back().bytes.size() + f.data.size() <= kJoinedSegment) {
      std::vector<std::uint8_t>& tail = s.segments.back().bytes;
      tail.insert(tail.end(), f.data.begin(), f.data.end());
    } else {
      Segment seg;
      seg.bytes.assign(f.data.begin(), f.data.end());
      s.segments.push_back(std::move(seg));
    }
    s.received += f.data.size();
    counters_.bytes_received += f.data.size();
    if ((f.flags & kFlagTell) != 0) s.note_tell();
  }
  if ((f.flags & kFlagFin) != 0) s.fin_received = true;
  if ((f.flags & kFlagWantSink) != 0 && !s.sink) {
    const std::size_t size = std::min(config_.sink_size, s.window);
    if (auto region = regions_.acquire(size)) {
      Ring r;
      r.region = *region;
      r.registered = true;
      s.sink = std::move(r);
      counters_.sink_bytes += size;
      Frame k;
      k.type = FrameType::kSink;
      k.stream = s.id;
      k.stag = region->stag;
      k.offset = region->tagged_offset;
      k.size = static_cast<std::uint32_t>(size);
      queue_control(k);
    }
  }
  changed(s);
  erase_if_done(s.id);
  return true;
}

bool StreamSession::on_placed(Stream& s, const Frame& f) {
  if (!s.sink) {
    fail("PLACED without a sink");
    return false;
  }
  if (s.fin_received || f.length > s.sink->free() ||
      s.received + f.length > s.consumed + s.window) {
    fail("PLACED beyond the sink or the window");
    return false;
  }
  if (s.error) {
    // Reset by us: the octets are dropped, but their place in the sink is taken until the
    // sink goes, so later accounting still holds.
    s.sink->head += f.length;
    s.sink->tail += f.length;
    return true;
  }
  Segment seg;
  seg.ring_length = f.length;
  s.sink->head += f.length;
  if (f.length > 0) s.segments.push_back(std::move(seg));
  s.received += f.length;
  counters_.bytes_received += f.length;
  if ((f.flags & kFlagTell) != 0 && f.length > 0) s.note_tell();
  if ((f.flags & kFlagFin) != 0) s.fin_received = true;
  changed(s);
  erase_if_done(s.id);
  return true;
}

}  // namespace rdma_interop::stream
