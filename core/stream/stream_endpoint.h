// stream_endpoint.h - byte streams over RDMA sessions, for applications.
//
// An endpoint keeps one session (one connection, core/messaging/message_endpoint.h, with its
// credit channel) per peer endpoint, and runs a StreamSession (stream_session.h) on each:
// every stream between the two endpoints goes over it. Opening a stream to a peer already
// connected is one OPEN frame, not a connection setup. The receive buffers are the
// session's (a fixed number, by configuration), shared by all its streams.
//
// What the engine decides the endpoint carries out: its messages go to the channel (an
// RDMA Write posted just before the message that says where it placed data), refused ones
// wait in order in an outbox until the channel has room; its rings are registered with the
// session's connection (SessionRegions); its readiness news is written to one eventfd per
// stream (made when fd() is first asked for it), so a stream can be polled with
// poll/epoll/select like a socket.
//
// Threading: every call is thread-safe; each session has one lock (its engine, outbox and
// descriptors), taken before the message endpoint's locks. Messages, readiness and ends
// are processed by whichever thread received them (the message endpoint's handlers),
// never blocking on an application. A blocking call receives on its session's connection
// itself while it waits (MessageEndpoint::receive): the reply to a request, or the window
// a writer waits for, is read, processed and returned by the thread that waits for it,
// with no hand-off from the provider's event thread (two context switches a message, and
// the futex calls, measured: stream_bench). One waiter per session does that; the others
// wait on the session's condition variable, woken whenever the engine made output, and
// one of them takes over when it leaves. The receiving waiter is woken through an eventfd
// when another thread processed its session's news. Locks, outermost first: a session's mu, then
// sessions_mu_ (the map, the listening ports, the messages that came before their session;
// no session's mu is taken under it), then the message endpoint's.
//
//   StreamEndpoint ep(std::move(provider), {});
//   auto where = ep.serve(uri);                       // accepts sessions
//   ep.listen(5201);
//   auto s = ep.accept(5201, 5s);  ep.recv(*s, buf, {.timeout = 1s});
//   ... the other side: auto sid = ep.connect(uri); auto s = ep.open(*sid, 5201);
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/messaging/message_endpoint.h"
#include "core/stream/stream_session.h"
#include "core/transport/provider.h"
#include "core/util/expected.h"

namespace rdma_interop::stream {

using SessionId = messaging::PeerId;
using Millis = std::chrono::milliseconds;
inline constexpr Millis kForever{-1};

struct StreamEndpointConfig {
  SessionConfig session;
  // The session's channel (the receive memory every stream of a session shares):
  // receive_window receives of session.max_message octets each.
  std::uint32_t receive_window = 32;
  std::uint32_t max_sessions = 64;
  Millis setup_timeout{10000};
  // A blocking send of a large chunk that only the reader's window or sink keeps from going
  // by a Write from the caller's buffer (StreamSession::waits_for_reader) waits up to this
  // long from its start for the reader before it copies the rest into the send buffer (0: at
  // once; 0..1 h). A reader that reads answers in microseconds (the Write that left its
  // window or sink short asked for a WINDOW); one that does not costs each such send this
  // much more until the send buffer is full, as before.
  Millis reader_wait{1};
  // A blocking call's receiving waiter looks this long for its peer's answer before it sleeps
  // (transport::Connection::receive_here; rsockets' polling_time, 10 us). A sleep and its
  // wakeup cost more in this VM than a 64-octet round trip's own work: the round trip of two
  // threads echoing, alternated, 27.0-27.3 us without, 15.2-15.8 us with 20 us of it, and
  // less CPU (30.9 against 34.0 us both sides); stream_bench: 0.73x and 0.76x raw TCP's
  // (which sleeps), against 1.28x and 1.18x. Streams' throughput the same within the noise.
  // Costs CPU only while nothing comes, at most this much a wait. 0: sleeps at once; 0..1 s.
  std::chrono::microseconds poll_first{20};
};

// A stream: which session, and its id there.
struct StreamRef {
  SessionId session = 0;
  StreamId stream = 0;
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
  friend auto operator<=>(const StreamRef&, const StreamRef&) = default;
};

struct IoOptions {
  bool urgent = false;  // MSG_OOB
  bool peek = false;    // MSG_PEEK (recv)
  Millis timeout{0};    // 0: never wait (EAGAIN: kWouldBlock); kForever: wait as long as it takes
};

class StreamEndpoint {
 public:
  StreamEndpoint(std::unique_ptr<transport::Provider> provider, StreamEndpointConfig config);
  ~StreamEndpoint();  // close()
  StreamEndpoint(const StreamEndpoint&) = delete;
  StreamEndpoint& operator=(const StreamEndpoint&) = delete;

  // Accepts sessions at `where` (port 0: any). The URI it listens on, with the real port.
  Expected<transport::ProviderUri, std::string> serve(const transport::ProviderUri& where);
  // A session to the endpoint serving at `where`.
  Expected<SessionId, std::string> connect(const transport::ProviderUri& where);
  std::string_view scheme() const;

  // Streams opened to `port` (on any session, now or later) wait for accept(). Counted: two
  // listeners on one port (two addresses of the node) each call it, and each stop_listening().
  void listen(std::uint16_t port);
  // Undoes one listen(port). When none is left, opens to `port` are refused from then on
  // (over every session, as a closed TCP listener refuses connects), the streams waiting for
  // accept() on it are reset, an accept() waiting on it returns kInvalid, and its accept
  // descriptor is closed.
  void stop_listening(std::uint16_t port);
  // `first`: octets sent with the OPEN, in its message (StreamSession::open).
  Expected<StreamRef, StreamErrc> open(SessionId session, std::uint16_t port,
                                       std::span<const std::uint8_t> first = {});
  Expected<StreamRef, StreamErrc> accept(std::uint16_t port, Millis timeout);
  // The octets taken (at least one) or an error; kWouldBlock: the stream took none until the
  // timeout (its send buffer full). `data` is the caller's again when it returns: a large chunk
  // goes by Writes from it, posted before the return, and a blocking send may wait for the
  // reader's window for that (reader_wait) before it copies what is left. Meanwhile another
  // thread's send to the same stream may go between its octets, as with TCP's large sends.
  Expected<std::size_t, StreamErrc> send(StreamRef s, std::span<const std::uint8_t> data,
                                         const IoOptions& options = {});
  Expected<std::size_t, StreamErrc> recv(StreamRef s, std::span<std::uint8_t> out,
                                         const IoOptions& options = {});
  bool at_mark(StreamRef s);
  Expected<std::size_t, StreamErrc> shutdown_write(StreamRef s);
  void close(StreamRef s, bool abort = false);
  Readiness readiness(StreamRef s);
  // Readable (POLLIN) when recv() would not wait: data, end of stream, an urgent octet or an
  // error; writable (POLLOUT) when send() would take an octet (or fail at once). Only for
  // polling: nothing is to be read from or written to it. Owned by the endpoint; valid until
  // close(s). -1 for no such stream (or no descriptor left). Made on the first call, as the
  // stream is then: a stream nobody polls costs no descriptor and no syscall per message.
  // One of a socketpair (the endpoint keeps the other): a polled stream costs two.
  int fd(StreamRef s);
  // Readable when accept(port) would not wait. Made on the first call, as fd(): a port
  // nobody polls costs no descriptor and no syscall per stream accepted. -1: not listening.
  int accept_fd(std::uint16_t port);

  // The sessions not ended. One that ended (its connection closed or failed) is left out at
  // once, so a new connect() makes a new one; its place among max_sessions is freed by the
  // next connect() or, serving, within the accept loop's 200 ms, and it is forgotten once
  // the application closed its last stream (until then they answer kSessionFailed).
  std::vector<SessionId> sessions() const;
  // The session is to open no more streams (its ids ran out: open() said kExhausted): once
  // its last stream is gone it ends as one whose connection closed does, and the reaper
  // (a thread the first retire() makes) closes its connection, freeing its place among
  // max_sessions at both ends.
  void retire(SessionId session);
  std::optional<SessionCounters> counters(SessionId session) const;
  // The octets one stream costs in memory now: the engine's (StreamSession::stream_bytes:
  // its state and what it holds) and its descriptor's entry here. nullopt: no such stream.
  std::optional<std::size_t> stream_bytes(StreamRef s) const;
  std::optional<messaging::PeerStats> session_stats(SessionId session) const;

  // Ends every session and stops serving. Idempotent.
  void close();

 private:
  struct Session;
  std::shared_ptr<Session> find(SessionId id) const;
  std::shared_ptr<Session> add_session(SessionId id, Side side);
  void process(Session& s);
  void on_message(const messaging::Message& m);
  void on_ready(SessionId id);
  void on_end(SessionId id, const std::string& detail);
  // A retired session with no stream left: ended. Under the session's lock, never under
  // sessions_mu_ (it takes that to wake the reaper).
  void end_if_drained(Session& s);
  void note_incoming(std::uint16_t port);
  // note_incoming(port) if any session has a stream waiting for accept() on it. Takes each
  // session's lock, then sessions_mu_: never called under either.
  void note_if_waiting(std::uint16_t port);
  void accept_loop();
  void reap_loop();  // the reaper: reap_ended() whenever a retired session ends
  // Closes the channel's peer of each ended session (once) and forgets the ended sessions
  // with no stream left. Not from a handler (close_peer waits for the provider's thread).
  // One at a time (reap_mu_): a caller returns once every ended session's place among
  // max_sessions is free, also when another thread had begun closing it.
  void reap_ended();
  // A large send goes by RDMA Writes from `data` itself, posted inline before this returns
  // (StreamSession::borrow): the octets of its start taken, 0 when none can go so (the
  // caller then waits or sends the rest as usual). `s.mu` held.
  std::size_t send_borrowed(Session& s, StreamId stream, std::span<const std::uint8_t> data);
  // What blocking() tells a call of its wait, and the call may ask of it: `hold`, to be
  // called again at that time (no later than `deadline`) even though the deadline would
  // have passed by then.
  struct Wait {
    std::chrono::steady_clock::time_point start;     // of the blocking call
    std::chrono::steady_clock::time_point deadline;  // max(): none
    std::optional<std::chrono::steady_clock::time_point> hold;
  };
  // Runs `call(session, wait)` on the session until it does not say kWouldBlock or `timeout`
  // passed (0: once).
  template <class Call>
  auto blocking(StreamRef ref, Millis timeout, Call call) -> Expected<std::size_t, StreamErrc>;
  // blocking()'s wait as the session's receiving waiter (`lock` on its mu, let go meanwhile).
  // False when the channel cannot receive here: wait on the session's cv instead.
  bool receive_for(Session& s, std::unique_lock<std::mutex>& lock, Millis timeout);

  StreamEndpointConfig config_;
  std::unique_ptr<transport::Provider> provider_;
  messaging::MessageEndpoint channel_;
  mutable std::mutex sessions_mu_;
  std::condition_variable incoming_cv_;
  std::map<SessionId, std::shared_ptr<Session>> sessions_;
  std::map<SessionId, std::vector<messaging::Message>> early_;  // before the session is known
  // A listening port's accept descriptor (-1 until accept_fd() asks) and whether it is
  // set: it is written and read only when that changes.
  struct AcceptEvent {
    std::uint32_t listeners = 0;  // listen() calls not yet undone by stop_listening()
    int fd = -1;
    bool on = false;
    void set(bool want);
  };
  std::map<std::uint16_t, AcceptEvent> listening_;  // under sessions_mu_
  std::map<std::uint16_t, std::uint64_t> incoming_gen_;         // port -> streams noted so far
  // An accept() receiving on the only session: that session's wake descriptor, written when
  // a stream is noted (on any session); `accept_woken_`: written since it last looked.
  int accept_wake_ = -1;
  const void* accept_session_ = nullptr;  // that session (a Session)
  bool accept_woken_ = false;
  std::unique_ptr<transport::Listener> listener_;
  std::thread accept_thread_;
  bool closing_ = false;
  // A retired session ended (its last stream went): the reaper closes its connection, or
  // the next open() or connect() if it comes first. (Where it ends, a handler may be
  // running: no place to wait for a close.) The reaper is made by the first retire(): an
  // endpoint that never runs out of stream ids has none.
  std::atomic<bool> drained_ = false;
  std::condition_variable reap_cv_;  // drained_ or closing_, under sessions_mu_
  // Held around reap_ended(): outermost, never taken under sessions_mu_ or a session's lock.
  std::mutex reap_mu_;
  std::thread reaper_;
};

}  // namespace rdma_interop::stream
