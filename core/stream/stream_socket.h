// stream_socket.h - sockets with TCP's setup that run over RDMA when both ends can.
//
// A StreamNode is what a process has of the stream layer: its stream endpoint (sessions and
// streams, stream_endpoint.h), its identity (the endpoint id of upgrade.h), which addresses
// turned out to be plain TCP servers (plain_peer_cache.h), and which session reaches which
// address. Its sockets are shaped like TCP's:
//   - listen(host, port) opens an ordinary TCP listening socket on that port. Each accepted
//     connection is judged by an UpgradeServer (upgrade.h): our client's OFFER is answered
//     with where our session listener is, and its stream then arrives over the session to
//     the same port number; any other client stays a plain TCP connection, every octet it
//     sent kept. accept() returns either kind, in the order they were decided.
//   - connect(host, port) reuses a session that already reaches that address (one OPEN
//     frame: no TCP handshake, no RDMA connection setup). Otherwise it opens a TCP
//     connection to that very port and offers to upgrade: an ANSWER brings a session (a new
//     one, or the one that already reaches that endpoint under another address) and the
//     stream opens over it; a decline keeps the TCP connection as the socket; a plain server
//     (no ANSWER) is remembered and reached again by plain TCP, without an offer.
// So a stream passes anything that passes TCP: the first connection to a port is always a
// TCP connection to it.
//
// A Socket answers like a socket: octets sent or read, or an errno value (EAGAIN, EPIPE,
// ECONNRESET, ECONNREFUSED, ...). fileno() is the TCP socket of a plain one, and the
// stream's descriptor of an upgraded one (readable when recv would not wait, writable when
// send would take an octet: StreamEndpoint::fd), so poll, epoll and select see either.
//
// Threading: a node and its listeners are thread-safe; a listener decides connections on a
// thread of its own. A Socket is used by one thread at a time, like a file descriptor
// shared without care.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/stream/plain_peer_cache.h"
#include "core/stream/stream_endpoint.h"
#include "core/stream/upgrade.h"
#include "core/util/expected.h"

namespace rdma_interop::stream {

struct NodeConfig {
  StreamEndpointConfig endpoint;
  std::string scheme = "tcp";  // the provider sessions run on
  bool offer = true;           // connect() offers to upgrade (false: plain TCP always)
  bool accept_upgrades = true; // listeners answer offers with an upgrade (false: decline)
  Millis answer_timeout{300};  // a server that has not answered by then is plain
  Millis offer_wait{300};      // a client that has not offered by then is plain
  std::size_t plain_cache_size = 1024;
  Millis plain_cache_ttl{60000};
};

// An errno value and the sentence that goes with it.
struct SocketError {
  int code = 0;  // errno: ECONNREFUSED, ETIMEDOUT, EAGAIN, ...
  std::string detail;
};
int errno_of(StreamErrc e);

class StreamNode;

class Socket {
 public:
  ~Socket();  // close()
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool upgraded() const { return stream_.has_value(); }
  Expected<std::size_t, int> send(std::span<const std::uint8_t> data, const IoOptions& o = {});
  Expected<std::size_t, int> recv(std::span<std::uint8_t> out, const IoOptions& o = {});
  bool at_mark();
  Expected<std::size_t, int> shutdown_write();
  void close(bool abort = false);
  int fileno();
  const std::string& peer() const { return peer_; }
  const std::string& local() const { return local_; }
  // What this socket is: "tcp" or "stream over tcp://...".
  std::string describe() const;
  // How it came to be. A connect: "upgrade" (a new session), "reuse" (a session that reached
  // the address already), "declined", "plain_peer" (no answer to the offer: reconnected plain),
  // "cache" (known plain: no offer) or "plain" (the node offers nothing). An accept: "upgrade",
  // "declined" or "plain_client".
  const std::string& how() const { return how_; }

 private:
  friend class StreamNode;
  friend class StreamListener;
  Socket(std::shared_ptr<StreamEndpoint> ep, StreamRef stream, std::string peer,
         std::string local, std::string session);
  Socket(int fd, std::vector<std::uint8_t> first, std::string peer, std::string local);

  std::shared_ptr<StreamEndpoint> ep_;
  std::optional<StreamRef> stream_;
  int fd_ = -1;
  std::vector<std::uint8_t> first_;  // octets read during the setup, delivered first
  std::size_t first_read_ = 0;
  std::string peer_;
  std::string local_;
  std::string session_;
  std::string how_;
  bool closed_ = false;
};

struct ListenerCounters {
  std::uint64_t upgraded = 0;  // clients that went over a session
  std::uint64_t declined = 0;
  std::uint64_t plain = 0;     // plain TCP clients
  std::uint64_t failed = 0;    // malformed or cut offers
};

class StreamListener {
 public:
  ~StreamListener();  // close()
  StreamListener(const StreamListener&) = delete;
  StreamListener& operator=(const StreamListener&) = delete;

  // The next connection, plain or upgraded; EAGAIN after `timeout`.
  Expected<std::unique_ptr<Socket>, SocketError> accept(Millis timeout);
  // Readable when accept() would not wait for a plain one (upgraded ones: see accept_fd of
  // the endpoint); poll both, or call accept() with a timeout.
  std::vector<int> filenos() const;
  std::uint16_t port() const { return port_; }
  const std::string& local() const { return local_; }
  ListenerCounters counters() const;
  void close();

 private:
  friend class StreamNode;
  struct State;
  StreamListener(std::shared_ptr<StreamEndpoint> ep, std::shared_ptr<State> state,
                 std::uint16_t port, std::string local);
  std::shared_ptr<StreamEndpoint> ep_;
  std::shared_ptr<State> state_;
  std::uint16_t port_ = 0;
  std::string local_;
};

struct NodeCounters {
  std::uint64_t upgraded = 0;      // connects that opened a stream after an offer
  std::uint64_t reused = 0;        // connects that opened a stream on a session they found
  std::uint64_t declined = 0;
  std::uint64_t plain_peers = 0;   // offers no server answered (then reconnected plain)
  std::uint64_t plain_cached = 0;  // connects that went plain without an offer (the cache)
  std::uint64_t sessions = 0;      // sessions set up by this node's connects
};

class StreamNode {
 public:
  static Expected<std::unique_ptr<StreamNode>, std::string> create(NodeConfig config);
  ~StreamNode();

  Expected<std::unique_ptr<StreamListener>, SocketError> listen(const std::string& host,
                                                                std::uint16_t port,
                                                                int backlog = 128);
  Expected<std::unique_ptr<Socket>, SocketError> connect(const std::string& host,
                                                         std::uint16_t port, Millis timeout);
  NodeCounters counters() const;
  const EndpointId& id() const { return id_; }
  StreamEndpoint& endpoint() { return *ep_; }

 private:
  StreamNode(NodeConfig config, std::shared_ptr<StreamEndpoint> ep);
  Expected<std::string, SocketError> serve_sessions(const std::string& host);
  Expected<std::unique_ptr<Socket>, SocketError> plain_connect(const std::string& host,
                                                               std::uint16_t port,
                                                               Millis timeout, const char* how);
  std::optional<SessionId> session_for(const std::string& address);
  // A session that opened all the streams it may is reached by no address or server id
  // any more, and the next connect upgrades a new one; it serves its streams and ends
  // after the last (StreamEndpoint::retire).
  void retire(SessionId session);

  NodeConfig config_;
  std::shared_ptr<StreamEndpoint> ep_;
  EndpointId id_{};
  mutable std::mutex mu_;
  std::mt19937_64 random_;
  PlainPeerCache plain_;
  std::map<std::string, SessionId> by_address_;  // "host:port" -> the session reaching it
  std::map<EndpointId, SessionId> by_endpoint_;
  std::map<SessionId, std::string> session_uri_;
  std::optional<std::string> serving_;  // the session listener's URI
  NodeCounters counters_;
};

}  // namespace rdma_interop::stream
