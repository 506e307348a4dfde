// TCP-shaped streams on real loopback sockets: an upgrade between two nodes, a second
// connect that reuses the session, a plain TCP server reached again without an offer, a plain
// TCP client whose octets all arrive, and a declining server that keeps the TCP connection.
#include "core/stream/stream_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "core/transport/provider_registry.h"
#include "core/transport/provider_uri.h"
#include "eventually.h"
#include "loopback_socket.h"

namespace rdma_interop::stream {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<StreamNode> node(NodeConfig config = {}) {
  auto n = StreamNode::create(std::move(config));
  EXPECT_TRUE(n.has_value()) << (n ? "" : n.error());
  return std::move(*n);
}

std::span<const std::uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string read_some(Socket& s) {
  std::vector<std::uint8_t> buf(4096);
  auto r = s.recv(buf, {.timeout = 5s});
  if (!r) return "errno " + std::to_string(r.error());
  return std::string(buf.begin(), buf.begin() + *r);
}

// A plain TCP echo server on 127.0.0.1 that waits for its client to speak: answers every
// read with the same octets, until the client closes. It counts its connections.
struct PlainEcho {
  int fd = -1;
  std::uint16_t port = 0;
  std::atomic<int> connections{0};
  std::thread thread;
  PlainEcho() {
    fd = test_util::listen_loopback(port, 8);
    thread = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) return;
        ++connections;
        std::thread([c] {
          char buf[4096];
          for (;;) {
            const ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0) break;
            (void)!::send(c, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
          }
          ::close(c);
        }).detach();
      }
    });
  }
  ~PlainEcho() {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    thread.join();
  }
};

TEST(StreamSocket, TwoNodesUpgradeAndTheSecondConnectReusesTheSession) {
  auto server = node();
  auto client = node();
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value()) << listener.error().detail;
  const std::uint16_t port = (*listener)->port();
  auto c1 = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(c1.has_value()) << c1.error().detail;
  EXPECT_TRUE((*c1)->upgraded());
  EXPECT_EQ((*c1)->how(), "upgrade");
  auto s1 = (*listener)->accept(5s);
  ASSERT_TRUE(s1.has_value()) << s1.error().detail;
  EXPECT_TRUE((*s1)->upgraded());
  EXPECT_EQ((*s1)->how(), "upgrade");
  ASSERT_TRUE((*c1)->send(bytes("ping"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**s1), "ping");
  ASSERT_TRUE((*s1)->send(bytes("pong"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**c1), "pong");

  auto c2 = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(c2.has_value());
  EXPECT_EQ((*c2)->how(), "reuse");
  auto s2 = (*listener)->accept(5s);
  ASSERT_TRUE(s2.has_value());
  ASSERT_TRUE((*c2)->send(bytes("second"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**s2), "second");
  const NodeCounters n = client->counters();
  EXPECT_EQ(n.upgraded, 1u);
  EXPECT_EQ(n.reused, 1u) << "the second stream opened on the first session";
  EXPECT_EQ(n.sessions, 1u);
  EXPECT_EQ(client->endpoint().sessions().size(), 1u);
  EXPECT_EQ((*listener)->counters().upgraded, 1u) << "one TCP connection was ever upgraded";
}

// A stream from `client` to `listener`'s port at `host`, opened the way `how` says, and its
// accepted end; both null (and the test failed) when a step did not work.
std::pair<std::unique_ptr<Socket>, std::unique_ptr<Socket>> connected(
    StreamNode& client, StreamListener& listener, const std::string& host,
    const std::string& how) {
  auto c = client.connect(host, listener.port(), 5s);
  if (!c) {
    ADD_FAILURE() << host << ": " << c.error().detail;
    return {};
  }
  EXPECT_EQ((*c)->how(), how) << host;
  auto s = listener.accept(5s);
  if (!s) {
    ADD_FAILURE() << "accept: " << s.error().detail;
    return {};
  }
  return {std::move(*c), std::move(*s)};
}

// A session that opened all the streams it may (SessionConfig::max_opens; 2^31 - 1 by
// default) is not reused: the next connect upgrades a new one, and the old one's streams
// go on; once they are closed it ends, and its connection is closed at both ends.
TEST(StreamSocket, ASessionOutOfStreamIdsIsReplacedAndItsStreamsGoOn) {
  NodeConfig config;
  config.endpoint.session.max_opens = 3;
  auto server = node();
  auto client = node(config);
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value()) << listener.error().detail;
  const std::uint16_t port = (*listener)->port();
  std::vector<std::unique_ptr<Socket>> clients, servers;
  for (const char* how : {"upgrade", "reuse", "reuse", "upgrade"}) {
    auto [c, s] = connected(*client, **listener, "127.0.0.1", how);
    ASSERT_TRUE(c && s);
    clients.push_back(std::move(c));
    servers.push_back(std::move(s));
  }
  EXPECT_EQ(client->endpoint().sessions().size(), 2u);
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const std::string word = "stream " + std::to_string(i);
    ASSERT_TRUE(clients[i]->send(bytes(word), {.timeout = 5s}));
    EXPECT_EQ(read_some(*servers[i]), word);
  }
  EXPECT_EQ(client->counters().reused, 2u);
  EXPECT_EQ(client->counters().upgraded, 2u);
  EXPECT_EQ(client->counters().sessions, 2u);
  // The first session's streams (the first three) end; then it does.
  for (std::size_t i = 0; i < 3; ++i) {
    clients[i].reset();
    servers[i].reset();
  }
  EXPECT_TRUE(test_util::eventually([&] { return client->endpoint().sessions().size() == 1; }));
  // With no call of the application's: the client's reaper closed the connection.
  EXPECT_TRUE(test_util::eventually([&] { return server->endpoint().sessions().size() == 1; }))
      << "the server still has the retired session";
  auto next = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(next.has_value()) << next.error().detail;
  EXPECT_EQ((*next)->how(), "reuse");
  ASSERT_TRUE(clients[3]->send(bytes("still"), {.timeout = 5s}));
  EXPECT_EQ(read_some(*servers[3]), "still");
}

// The same, when the spent session is found by the server's id from another name for it
// ("localhost"): that connect is made again, to a new session.
TEST(StreamSocket, ASpentSessionFoundByServerIdIsNotUsedForAnotherAddress) {
  NodeConfig config;
  config.endpoint.session.max_opens = 1;
  auto server = node();
  auto client = node(config);
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value()) << listener.error().detail;
  std::vector<std::unique_ptr<Socket>> ends;
  for (const char* host : {"127.0.0.1", "localhost"}) {
    auto [c, s] = connected(*client, **listener, host, "upgrade");
    ASSERT_TRUE(c && s);
    ASSERT_TRUE(c->send(bytes(host), {.timeout = 5s}));
    EXPECT_EQ(read_some(*s), host);
    ends.push_back(std::move(c));
    ends.push_back(std::move(s));
  }
  EXPECT_EQ(client->endpoint().sessions().size(), 2u);
  EXPECT_EQ(client->counters().sessions, 2u);
}

TEST(StreamSocket, APlainServerIsReachedAgainByPlainTcpAndRemembered) {
  PlainEcho echo;
  auto client = node();
  auto c = client->connect("127.0.0.1", echo.port, 5s);
  ASSERT_TRUE(c.has_value()) << c.error().detail;
  EXPECT_FALSE((*c)->upgraded());
  EXPECT_EQ((*c)->how(), "plain_peer");
  ASSERT_TRUE((*c)->send(bytes("hello"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**c), "hello") << "the reconnected socket is clean: no offer in it";
  auto again = client->connect("127.0.0.1", echo.port, 5s);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)->how(), "cache");
  ASSERT_TRUE((*again)->send(bytes("again"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**again), "again");
  const NodeCounters n = client->counters();
  EXPECT_EQ(n.plain_peers, 1u);
  EXPECT_EQ(n.plain_cached, 1u);
  EXPECT_EQ(echo.connections.load(), 3) << "one offer, then two plain connections";
}

TEST(StreamSocket, APlainClientKeepsEveryOctetItSent) {
  auto server = node();
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value());
  const int fd = test_util::connect_loopback((*listener)->port());
  const std::string request = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  auto s = (*listener)->accept(5s);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE((*s)->upgraded());
  EXPECT_EQ((*s)->how(), "plain_client");
  std::string got;
  while (got.size() < request.size()) got += read_some(**s);
  EXPECT_EQ(got, request);
  ASSERT_TRUE((*s)->send(bytes("HTTP/1.0 200 OK\r\n\r\n"), {.timeout = 5s}));
  char buf[64] = {};
  EXPECT_GT(::recv(fd, buf, sizeof buf, 0), 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.0 200", 0), 0u);
  ::close(fd);
  EXPECT_EQ((*listener)->counters().plain, 1u);
}

TEST(StreamSocket, ADecliningServerKeepsTheTcpConnection) {
  NodeConfig no_upgrades;
  no_upgrades.accept_upgrades = false;
  auto server = node(no_upgrades);
  auto client = node();
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value());
  auto c = client->connect("127.0.0.1", (*listener)->port(), 5s);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE((*c)->upgraded());
  EXPECT_EQ((*c)->how(), "declined");
  auto s = (*listener)->accept(5s);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*c)->send(bytes("over tcp"), {.timeout = 5s}));
  EXPECT_EQ(read_some(**s), "over tcp");
  EXPECT_EQ(client->counters().declined, 1u);
}

}  // namespace
}  // namespace rdma_interop::stream

namespace rdma_interop::stream {
namespace {

// An ANSWER is a server's word, not proof of who it is: one that names another server's id
// (any client of that server learns it) with its own session URI does not draw that
// server's later streams to itself. The client makes a session to the real server.
TEST(StreamSocket, AnAnswerNamingAnotherServersIdDoesNotDrawItsStreams) {
  auto real = node();
  auto real_listener = real->listen("127.0.0.1", 0);
  ASSERT_TRUE(real_listener.has_value()) << real_listener.error().detail;
  const std::uint16_t port = (*real_listener)->port();
  // The impostor: sessions served on an endpoint that listens on the real server's port
  // number, and a TCP port that answers any OFFER with the real server's id and that URI.
  StreamEndpoint impostor(transport::find_provider("tcp")->open(), {});
  auto impostor_uri = impostor.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
  ASSERT_TRUE(impostor_uri.has_value()) << impostor_uri.error();
  impostor.listen(port);
  std::uint16_t answerer_port = 0;
  const int lfd = test_util::listen_loopback(answerer_port);
  std::thread answerer([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    std::uint8_t buf[512];
    const ssize_t n = ::recv(c, buf, sizeof buf, 0);
    auto offer = decode_offer({buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))});
    if (offer) {
      Answer answer;
      answer.status = AnswerStatus::kUpgrade;
      answer.server_id = real->id();
      answer.nonce = offer->message.nonce;
      answer.uri = impostor_uri->to_string();
      const auto out = encode_answer(answer);
      (void)!::write(c, out.data(), out.size());
    }
    ::close(c);
  });
  auto client = node();
  auto visit = client->connect("127.0.0.1", answerer_port, 5s);
  answerer.join();
  ::close(lfd);
  ASSERT_TRUE(visit.has_value()) << visit.error().detail;
  EXPECT_EQ((*visit)->how(), "upgrade") << "the impostor's own stream is an upgrade";

  auto c = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(c.has_value()) << c.error().detail;
  EXPECT_EQ((*c)->how(), "upgrade") << "a session to the real server, not the impostor's reused";
  ASSERT_TRUE((*c)->send(bytes("secret"), {.timeout = 5s}));
  auto s = (*real_listener)->accept(5s);
  ASSERT_TRUE(s.has_value()) << s.error().detail;
  EXPECT_EQ(read_some(**s), "secret");
  EXPECT_FALSE(impostor.accept(port, 200ms).has_value()) << "the impostor got the stream";
}

// A closed listener refuses streams over sessions already up, as a closed TCP port refuses
// connects: the reused stream is refused and nothing waits at the server.
TEST(StreamSocket, AClosedListenerRefusesStreamsOverAReusedSession) {
  auto server = node();
  auto client = node();
  auto listener = server->listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.has_value()) << listener.error().detail;
  const std::uint16_t port = (*listener)->port();
  auto first = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(first.has_value()) << first.error().detail;
  ASSERT_TRUE((*listener)->accept(5s).has_value());
  (*listener)->close();
  auto second = client->connect("127.0.0.1", port, 5s);
  ASSERT_TRUE(second.has_value()) << second.error().detail;
  EXPECT_EQ((*second)->how(), "reuse");
  std::uint8_t buf[8];
  auto r = (*second)->recv(buf, {.timeout = 5s});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), ECONNREFUSED);
  for (SessionId id : server->endpoint().sessions()) {
    EXPECT_EQ(server->endpoint().counters(id)->streams, 1u) << "only the first stream is held";
  }
}

}  // namespace
}  // namespace rdma_interop::stream
