// The message endpoint over the tcp provider on real loopback sockets: delivery in order,
// back-pressure (EAGAIN) at exactly the configured bounds, one stalled peer never blocking
// another, replies that cannot deadlock, a peer sending without credit terminated with DDP
// "no buffer" while the others carry on (its held messages released and counted), a peer
// that closes in order reported closed, peers without credit parameters refused, and the
// execution model: no thread of the endpoint's own, handlers on the thread that read the
// message and never inside the application's own call. A message sent with a tagged RDMA
// Write finds the write's octets placed when its handler runs (RFC 5040 s5.5); a write
// beyond the peer's region gets the peer's Terminate and fails only that connection.
#include "core/messaging/message_endpoint.h"

#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/credit/credit_params.h"
#include "core/rdmap/memory_registry.h"
#include "core/transport/provider.h"
#include "core/wire/iwarp_constants.h"
#include "eventually.h"

namespace rdma_interop::messaging {
namespace {

using namespace std::chrono_literals;
using transport::Millis;

constexpr Millis kWait{5000};

cm::MpaPolicy policy() {
  cm::MpaPolicy p;
  p.request_timeout = 2000ms;
  p.reply_timeout = 2000ms;
  p.rtr_timeout = 2000ms;
  return p;
}

std::vector<std::uint8_t> numbered(std::uint32_t n, std::size_t size = 8) {
  std::vector<std::uint8_t> v(size, 0);
  for (std::size_t i = 0; i < 4 && i < size; ++i) v[i] = static_cast<std::uint8_t>(n >> (8 * i));
  return v;
}

std::uint32_t number_of(std::span<const std::uint8_t> p) {
  std::uint32_t n = 0;
  for (std::size_t i = 0; i < 4 && i < p.size(); ++i) n |= std::uint32_t{p[i]} << (8 * i);
  return n;
}

using test_util::eventually;

// Messages a handler saw, per peer, with a way to wait for a count.
class Inbox {
 public:
  void add(PeerId peer, std::span<const std::uint8_t> payload) {
    std::lock_guard lock(mu_);
    got_.emplace_back(peer, number_of(payload));
    cv_.notify_all();
  }
  bool wait_for(std::size_t n, Millis timeout = kWait) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return got_.size() >= n; });
  }
  std::vector<std::pair<PeerId, std::uint32_t>> all() const {
    std::lock_guard lock(mu_);
    return got_;
  }
  std::size_t count(PeerId peer) const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& [p, v] : got_) n += p == peer;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<PeerId, std::uint32_t>> got_;
};

// A tcp listener on 127.0.0.1 whose requests `server` accepts.
class Server {
 public:
  explicit Server(MessageEndpoint& server) : server_(server) {
    provider_ = transport::open_provider("tcp").value();
    listener_ = provider_
                    ->listen(*transport::parse_provider_uri("tcp://127.0.0.1:0"), policy(),
                             transport::ListenOptions{})
                    .value();
  }
  transport::ProviderUri uri() const {
    return *transport::parse_provider_uri("tcp://" + listener_->local_address());
  }
  // Accepts the next request in the background.
  std::future<Expected<PeerId, transport::ConnectError>> accept_one(std::string name) {
    return std::async(std::launch::async, [this, name] {
      auto pending = listener_->next_request(kWait);
      if (!pending) {
        transport::ConnectError e;
        e.detail = "no request";
        return Expected<PeerId, transport::ConnectError>(unexpected(e));
      }
      return server_.accept(*pending, name);
    });
  }
  transport::Listener& listener() { return *listener_; }

 private:
  MessageEndpoint& server_;
  std::unique_ptr<transport::Provider> provider_;
  std::unique_ptr<transport::Listener> listener_;
};

struct Pair {
  PeerId client_side = 0;  // the server, as the client knows it
  PeerId server_side = 0;  // the client, as the server knows it
};

Pair connect(MessageEndpoint& client, MessageEndpoint& server, Server& listener,
             transport::Provider& provider) {
  auto accepted = listener.accept_one("client");
  transport::ConnectOptions options;
  options.policy = policy();
  options.timeout = kWait;
  auto c = client.connect(provider, listener.uri(), options, "server");
  auto s = accepted.get();
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().detail);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().detail);
  (void)server;
  return Pair{c ? *c : 0, s ? *s : 0};
}

EndpointConfig small_config() {
  EndpointConfig c;
  c.max_message = 256;
  c.receive_window = 4;
  c.control_receives = 2;
  c.send_queue_depth = 6;
  c.control_send_slots = 2;
  c.send_queue_limit = 3;
  c.reply_reserve = 1;
  return c;
}

class MessageEndpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<transport::Provider> provider_ = transport::open_provider("tcp").value();
};

TEST_F(MessageEndpointTest, DeliversEveryMessageInOrderWithCreditsConserved) {
  Inbox inbox;  // before the endpoint whose handler fills it: it must outlive the handler
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) { inbox.add(m.peer, m.payload); });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);

  constexpr std::uint32_t kCount = 2000;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    SendStatus st;
    while ((st = client.send(pair.client_side, numbered(i))) == SendStatus::kTryAgain) {
      ASSERT_TRUE(client.wait_ready(pair.client_side, kWait)) << "stuck at message " << i;
    }
    ASSERT_EQ(st, SendStatus::kOk);
  }
  ASSERT_TRUE(inbox.wait_for(kCount));
  const auto got = inbox.all();
  for (std::uint32_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i].second, i);

  const auto cs = *client.stats(pair.client_side);
  const auto ss = *server.stats(pair.server_side);
  EXPECT_EQ(cs.messages_sent, kCount);
  EXPECT_EQ(ss.messages_received, kCount);
  EXPECT_EQ(cs.credit.sent, kCount);
  // Every credit the client used was granted: initial window plus the server's grants.
  EXPECT_EQ(cs.credit.credits_granted_total, cs.credit.sent + cs.credit.credits);
  EXPECT_LE(cs.credit.credits, 4u);
  EXPECT_FALSE(cs.terminate_received.has_value());
  EXPECT_FALSE(ss.terminate_sent.has_value());
  EXPECT_EQ(client.endpoint_stats().cq.overruns, 0u);
  EXPECT_EQ(server.endpoint_stats().cq.overruns, 0u);
}

TEST_F(MessageEndpointTest, TryAgainExactlyWhenCreditsAndQueueAreUsedUp) {
  // The server holds everything: after window - reply_reserve messages on the wire and
  // send_queue_limit queued, the next send is refused and nothing is lost.
  std::mutex mu;
  std::vector<MessageId> held;
  Inbox inbox;
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) {
    EXPECT_EQ(server.hold(m.id), SendStatus::kOk);
    std::lock_guard lock(mu);
    held.push_back(m.id);
    inbox.add(m.peer, m.payload);
  });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);

  std::uint32_t accepted = 0;
  while (client.send(pair.client_side, numbered(accepted)) == SendStatus::kOk) ++accepted;
  EXPECT_EQ(accepted, (4u - 1u) + 3u);  // credits beyond the reply reserve + queue limit
  ASSERT_TRUE(inbox.wait_for(3));
  EXPECT_FALSE(client.wait_ready(pair.client_side, 200ms));
  const auto cs = *client.stats(pair.client_side);
  EXPECT_EQ(cs.queued, 3u);
  EXPECT_EQ(cs.refused, 1u);
  // The fourth message stopped at the reply reserve: a stall, counted once.
  EXPECT_EQ(cs.credit.stalls_no_credit, 1u);
  EXPECT_GE(cs.stalled_ms, 150.0) << "queued messages have waited since before the 200 ms wait";
  EXPECT_EQ(server.stats(pair.server_side)->held, 3u);

  // Releasing the held messages grants their buffers again; the queue drains.
  {
    std::lock_guard lock(mu);
    for (MessageId id : held) EXPECT_EQ(server.release(id), SendStatus::kOk);
    held.clear();
  }
  ASSERT_TRUE(client.wait_ready(pair.client_side, kWait));
  ASSERT_TRUE(inbox.wait_for(6));
  EXPECT_EQ(server.release(12345), SendStatus::kNotHeld);
}

TEST_F(MessageEndpointTest, AStalledPeerDoesNotBlockAnother) {
  Inbox inbox;
  MessageEndpoint stalled(small_config());
  stalled.on_message([&](const Message& m) { (void)stalled.hold(m.id); });
  MessageEndpoint healthy(small_config());
  healthy.on_message([&](const Message& m) { inbox.add(m.peer, m.payload); });
  MessageEndpoint client(small_config());
  Server stalled_listener(stalled);
  Server healthy_listener(healthy);
  const Pair to_stalled = connect(client, stalled, stalled_listener, *provider_);
  const Pair to_healthy = connect(client, healthy, healthy_listener, *provider_);

  std::uint32_t refused = 0;
  constexpr std::uint32_t kCount = 500;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    if (client.send(to_stalled.client_side, numbered(i)) == SendStatus::kTryAgain) ++refused;
    SendStatus st;
    while ((st = client.send(to_healthy.client_side, numbered(i))) == SendStatus::kTryAgain) {
      ASSERT_TRUE(client.wait_ready(to_healthy.client_side, kWait));
    }
    ASSERT_EQ(st, SendStatus::kOk);
  }
  ASSERT_TRUE(inbox.wait_for(kCount));
  EXPECT_EQ(refused, kCount - 6);  // 3 on the wire, 3 queued, the rest refused at once
  EXPECT_EQ(client.stats(to_stalled.client_side)->queued, 3u);
  EXPECT_EQ(client.stats(to_stalled.client_side)->state, PeerState::kConnected);
}

TEST_F(MessageEndpointTest, RepliesAlwaysFindABufferEvenWhenBothSidesHoldRequests) {
  // Each side sends requests until refused and holds every request it gets; then each
  // answers all of them. Without the reply reserve both windows would be full of held
  // requests and no reply could go: a deadlock.
  struct Side {
    std::mutex mu;
    std::vector<MessageId> requests;
    Inbox replies;
    // Last member, so destroyed first: its destructor returns only once no handler can run
    // into the members above (with `ep` first, a handler could still push_back into a
    // destroyed `requests`: a use-after-free TSan reported).
    std::unique_ptr<MessageEndpoint> ep;
  };
  Side a, b;
  for (Side* s : {&a, &b}) {
    s->ep = std::make_unique<MessageEndpoint>(small_config());
    s->ep->on_message([s](const Message& m) {
      if (m.payload[7] == 'Q') {
        EXPECT_EQ(s->ep->hold(m.id), SendStatus::kOk);
        std::lock_guard lock(s->mu);
        s->requests.push_back(m.id);
      } else {
        s->replies.add(m.peer, m.payload);
      }
    });
  }
  Server listener(*b.ep);
  const Pair pair = connect(*a.ep, *b.ep, listener, *provider_);
  auto request = [](std::uint32_t n) {
    auto v = numbered(n);
    v[7] = 'Q';
    return v;
  };
  std::uint32_t a_sent = 0, b_sent = 0;
  while (a.ep->send(pair.client_side, request(a_sent)) == SendStatus::kOk) ++a_sent;
  while (b.ep->send(pair.server_side, request(b_sent)) == SendStatus::kOk) ++b_sent;
  // Only window - reserve requests reach each side; the rest wait in the queues.
  std::this_thread::sleep_for(200ms);
  for (Side* s : {&a, &b}) {
    std::vector<MessageId> ids;
    {
      std::lock_guard lock(s->mu);
      ids.swap(s->requests);
    }
    EXPECT_EQ(ids.size(), 3u);
    for (MessageId id : ids) EXPECT_EQ(s->ep->reply(id, numbered(99)), SendStatus::kOk);
  }
  ASSERT_TRUE(a.replies.wait_for(3));
  ASSERT_TRUE(b.replies.wait_for(3));
}

TEST_F(MessageEndpointTest, ReplyFromAnotherThreadAfterHold) {
  std::promise<MessageId> got;
  Inbox replies;
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) {
    EXPECT_EQ(server.hold(m.id), SendStatus::kOk);
    got.set_value(m.id);
  });
  MessageEndpoint client(small_config());
  client.on_message([&](const Message& m) { replies.add(m.peer, m.payload); });
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  ASSERT_EQ(client.send(pair.client_side, numbered(1)), SendStatus::kOk);
  auto fut = got.get_future();
  ASSERT_EQ(fut.wait_for(kWait), std::future_status::ready);
  const MessageId id = fut.get();
  EXPECT_EQ(server.stats(pair.server_side)->held, 1u);
  std::thread([&] { EXPECT_EQ(server.reply(id, numbered(42)), SendStatus::kOk); }).join();
  ASSERT_TRUE(replies.wait_for(1));
  EXPECT_EQ(replies.all()[0].second, 42u);
  EXPECT_EQ(server.reply(id, numbered(43)), SendStatus::kNotHeld);  // answered already
  EXPECT_EQ(server.stats(pair.server_side)->held, 0u);
}

TEST_F(MessageEndpointTest, APeerSendingWithoutCreditIsTerminatedAndOthersCarryOn) {
  Inbox inbox;
  std::atomic<PeerId> rogue_id{0};
  std::atomic<std::uint64_t> held{0};
  std::atomic<std::uint64_t> hold_refused{0};  // the rogue had already failed
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) {
    if (m.peer == rogue_id.load()) {
      // Never consumed: the rogue runs out of credit at once.
      const SendStatus st = server.hold(m.id);
      (st == SendStatus::kOk ? held : hold_refused).fetch_add(1);
      EXPECT_TRUE(st == SendStatus::kOk || st == SendStatus::kPeerFailed) << status_name(st);
    } else {
      inbox.add(m.peer, m.payload);
    }
  });
  EndpointConfig rogue_config = small_config();
  rogue_config.ignore_credits = true;
  MessageEndpoint rogue(rogue_config);
  MessageEndpoint good(small_config());
  Server listener(server);
  const Pair rogue_pair = connect(rogue, server, listener, *provider_);
  rogue_id = rogue_pair.server_side;
  const Pair good_pair = connect(good, server, listener, *provider_);

  for (std::uint32_t i = 0; i < 40; ++i) (void)rogue.send(rogue_pair.client_side, numbered(i));
  (void)eventually(
      [&] { return rogue.stats(rogue_pair.client_side)->state != PeerState::kConnected; });
  const auto rs = *rogue.stats(rogue_pair.client_side);
  ASSERT_EQ(rs.state, PeerState::kFailed);
  ASSERT_TRUE(rs.terminate_received.has_value()) << rs.detail;
  EXPECT_EQ(rs.terminate_received->cause.layer, wire::TermLayer::kDdp);
  EXPECT_EQ(rs.terminate_received->cause.etype, wire::kDdpEtypeUntaggedBuffer);
  EXPECT_EQ(rs.terminate_received->cause.code, wire::kDdpUntaggedCodeNoBuffer);
  // The server's provider sent that Terminate; its progress thread learns of it on its own
  // time, possibly after the rogue has already read it.
  EXPECT_TRUE(eventually(
      [&] { return server.stats(rogue_pair.server_side)->state == PeerState::kFailed; }));
  // What the server held of the rogue's is released and counted: nothing dangles.
  EXPECT_TRUE(eventually([&] { return held.load() + hold_refused.load() == 4; }))
      << "the rogue's four credited messages are delivered";
  const auto rogue_at_server = *server.stats(rogue_pair.server_side);
  EXPECT_EQ(rogue_at_server.held, 0u);
  EXPECT_EQ(rogue_at_server.held_released, held.load());
  EXPECT_EQ(rogue_at_server.messages_received, 4u) << "nothing beyond its credits is delivered";

  for (std::uint32_t i = 0; i < 300; ++i) {
    SendStatus st;
    while ((st = good.send(good_pair.client_side, numbered(i))) == SendStatus::kTryAgain) {
      ASSERT_TRUE(good.wait_ready(good_pair.client_side, kWait));
    }
    ASSERT_EQ(st, SendStatus::kOk);
  }
  ASSERT_TRUE(inbox.wait_for(300));
  const auto gs = *server.stats(good_pair.server_side);
  EXPECT_EQ(gs.state, PeerState::kConnected);
  EXPECT_FALSE(gs.terminate_sent.has_value());
  EXPECT_EQ(rogue.send(rogue_pair.client_side, numbered(1)), SendStatus::kPeerFailed);
}

TEST_F(MessageEndpointTest, PeersWithoutCreditParametersAreRefused) {
  // A plain connect (no credit parameters) to an endpoint's accept is rejected, saying why.
  MessageEndpoint server(small_config());
  Server listener(server);
  auto accepted = listener.accept_one("plain");
  transport::ConnectOptions options;
  options.policy = policy();
  options.timeout = kWait;
  auto plain = provider_->connect(listener.uri(), options);
  ASSERT_FALSE(plain.has_value());
  ASSERT_TRUE(plain.error().peer_frame.has_value());
  const auto& pd = plain.error().peer_frame->private_data;
  EXPECT_NE(std::string(pd.begin(), pd.end()).find("no credit parameters"), std::string::npos);
  auto s = accepted.get();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().detail.find("credit parameters"), std::string::npos);

  // The endpoint connecting to a listener whose application accepts without them.
  auto raw_listener = provider_
                          ->listen(*transport::parse_provider_uri("tcp://127.0.0.1:0"), policy(),
                                   transport::ListenOptions{})
                          .value();
  using Accepted = Expected<std::unique_ptr<transport::Connection>, transport::ConnectError>;
  auto raw_accept = std::async(std::launch::async, [&]() -> Accepted {
    auto pending = raw_listener->next_request(kWait);
    if (!pending) return unexpected(transport::ConnectError{});
    return pending->accept({}, transport::QpCaps{});
  });
  MessageEndpoint client(small_config());
  auto c = client.connect(*provider_,
                          *transport::parse_provider_uri("tcp://" + raw_listener->local_address()),
                          options, "raw");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().kind, transport::ConnectError::Kind::kSetup);
  EXPECT_NE(c.error().detail.find("credit parameters"), std::string::npos);
  (void)raw_accept.get();
  EXPECT_TRUE(client.peers().empty());
  EXPECT_EQ(client.endpoint_stats().budget.send_reserved +
                client.endpoint_stats().budget.receive_reserved,
            0u);
}

TEST_F(MessageEndpointTest, BadArgumentsGetClearAnswers) {
  MessageEndpoint server(small_config());
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  EXPECT_EQ(client.send(pair.client_side, std::vector<std::uint8_t>(257)), SendStatus::kTooLong);
  EXPECT_EQ(client.send(pair.client_side, std::vector<std::uint8_t>(256)), SendStatus::kOk);
  EXPECT_EQ(client.send(9999, numbered(1)), SendStatus::kUnknownPeer);
  EXPECT_EQ(client.reply(0, numbered(1)), SendStatus::kNotHeld);

  EndpointConfig bad = small_config();
  bad.reply_reserve = bad.receive_window;
  MessageEndpoint broken(bad);
  transport::ConnectOptions options;
  options.policy = policy();
  auto c = broken.connect(*provider_, listener.uri(), options, "x");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().kind, transport::ConnectError::Kind::kInvalidArgument);
  EXPECT_NE(c.error().detail.find("reply_reserve"), std::string::npos);
}

TEST_F(MessageEndpointTest, ClosedPeerGivesBackItsCompletionEntries) {
  MessageEndpoint server(small_config());
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  for (std::uint32_t i = 0; i < 20; ++i) (void)client.send(pair.client_side, numbered(i));
  EXPECT_GT(client.endpoint_stats().budget.receive_reserved, 0u);
  client.close_peer(pair.client_side, 2000ms);
  EXPECT_TRUE(client.peers().empty());
  const auto b = client.endpoint_stats().budget;
  EXPECT_EQ(b.send_reserved + b.receive_reserved, 0u);
  EXPECT_EQ(client.send(pair.client_side, numbered(1)), SendStatus::kUnknownPeer);
}

TEST_F(MessageEndpointTest, NoHandlerRunsOnceCloseHasReturned) {
  // A handler that is slow and counts its calls: close() from the test thread while messages
  // keep arriving must wait for the running handler, and none may start afterwards.
  std::atomic<int> running{0};
  std::atomic<int> calls{0};
  std::atomic<bool> closed{false};
  std::atomic<int> after_close{0};
  MessageEndpoint server(small_config());
  server.on_message([&](const Message&) {
    running.fetch_add(1);
    if (closed.load()) after_close.fetch_add(1);
    calls.fetch_add(1);
    std::this_thread::sleep_for(2ms);
    running.fetch_sub(1);
  });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  std::atomic<bool> stop_sending{false};
  std::thread sender([&] {
    std::uint32_t i = 0;
    while (!stop_sending.load()) {
      if (client.send(pair.client_side, numbered(i)) == SendStatus::kOk)
        ++i;
      else
        (void)client.wait_ready(pair.client_side, 10ms);
    }
  });
  ASSERT_TRUE(eventually([&] { return calls.load() >= 20; }));
  server.close();
  closed.store(true);
  EXPECT_EQ(running.load(), 0);  // the handler that ran during close() has returned
  std::this_thread::sleep_for(50ms);
  stop_sending.store(true);
  sender.join();
  EXPECT_EQ(after_close.load(), 0);
  EXPECT_TRUE(server.peers().empty());
  EXPECT_EQ(server.send(pair.server_side, numbered(1)), SendStatus::kUnknownPeer);
  server.close();  // idempotent
  transport::ConnectOptions options;
  options.policy = policy();
  auto again = server.connect(*provider_, listener.uri(), options, "after close");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().kind, transport::ConnectError::Kind::kInvalidArgument);
}

TEST_F(MessageEndpointTest, CloseFromAHandlerStopsEveryLaterHandler) {
  // close() from a handler cannot wait for the handler it is in: it stops the handlers after
  // the current one, and the destructor (another thread) closes the connections.
  std::atomic<int> calls{0};
  std::promise<void> closed_in_handler;
  MessageEndpoint server(small_config());
  server.on_message([&](const Message&) {
    if (calls.fetch_add(1) == 0) {
      server.close();
      closed_in_handler.set_value();
    }
  });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  for (std::uint32_t i = 0; i < 3; ++i)
    ASSERT_EQ(client.send(pair.client_side, numbered(i)), SendStatus::kOk);
  ASSERT_EQ(closed_in_handler.get_future().wait_for(kWait), std::future_status::ready);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(calls.load(), 1);
  server.close();  // from this thread: closes the peer
  EXPECT_TRUE(server.peers().empty());
}

TEST_F(MessageEndpointTest, CloseWaitsForAConnectInProgressOnAnotherThread) {
  // A listener whose application never answers: the connect sits in its MPA setup until its
  // timeout. close() meanwhile must wait for it, so the endpoint may be destroyed as soon as
  // close() returns (before, the endpoint's state could be freed under the connect).
  auto silent = provider_
                    ->listen(*transport::parse_provider_uri("tcp://127.0.0.1:0"), policy(),
                             transport::ListenOptions{})
                    .value();
  auto endpoint = std::make_unique<MessageEndpoint>(small_config());
  std::atomic<bool> connect_returned{false};
  std::thread connecting([&] {
    transport::ConnectOptions options;
    options.policy = policy();
    options.timeout = 600ms;
    auto c = endpoint->connect(*provider_,
                               *transport::parse_provider_uri("tcp://" + silent->local_address()),
                               options, "silent");
    EXPECT_FALSE(c.has_value());
    connect_returned.store(true);
  });
  std::this_thread::sleep_for(100ms);  // the connect is in its setup
  const auto start = std::chrono::steady_clock::now();
  endpoint->close();
  // The connect's own thread may not have stored its flag yet when close() returns (the
  // count drops inside connect()), so the wait is seen in close()'s duration: the rest of
  // the connect's 600 ms, not the moment it would take without the wait.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms)
      << "close() returned while a connect was in progress";
  endpoint.reset();
  connecting.join();
  EXPECT_TRUE(connect_returned.load());
}

// Threads of this process now (Linux: /proc/self/task).
std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST_F(MessageEndpointTest, AnEndpointRunsNoThreadOfItsOwn) {
  // Run to completion: the provider's thread that reads a message processes it; the endpoint
  // adds no progress thread (it had one, which every message and grant crossed).
  const std::size_t before = thread_count();
  {
    MessageEndpoint endpoint(small_config());
    EXPECT_EQ(thread_count(), before);
  }
  EXPECT_EQ(thread_count(), before);
}

TEST_F(MessageEndpointTest, HandlersRunOnTheReadingThreadAndNeverInsideTheApplicationsCall) {
  // The server answers every request in its handler; the client's handler records where it
  // runs. The client's own thread only ever sends: a handler found on it (a reply processed
  // when its send() returns) must not run inside that send().
  thread_local bool inside_send = false;
  std::mutex mu;
  std::set<std::thread::id> client_handler_threads;
  std::atomic<int> ran_inside_send{0};
  Inbox replies;
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) { (void)server.reply(m.id, m.payload); });
  MessageEndpoint client(small_config());
  client.on_message([&](const Message& m) {
    if (inside_send) ran_inside_send.fetch_add(1);
    {
      std::lock_guard lock(mu);
      client_handler_threads.insert(std::this_thread::get_id());
    }
    replies.add(m.peer, m.payload);
  });
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  constexpr std::uint32_t kCount = 500;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    SendStatus st;
    inside_send = true;
    while ((st = client.send(pair.client_side, numbered(i))) == SendStatus::kTryAgain) {
      inside_send = false;
      ASSERT_TRUE(client.wait_ready(pair.client_side, kWait));
      inside_send = true;
    }
    inside_send = false;
    ASSERT_EQ(st, SendStatus::kOk);
  }
  ASSERT_TRUE(replies.wait_for(kCount));
  EXPECT_EQ(ran_inside_send.load(), 0);
  std::lock_guard lock(mu);
  EXPECT_EQ(client_handler_threads.count(std::this_thread::get_id()), 0u);
  // One provider, one event thread: every reply was handled where it was read.
  EXPECT_EQ(client_handler_threads.size(), 1u);
}

TEST_F(MessageEndpointTest, AReceivingThreadTakesItsPeersRepliesItself) {
  // The client waits for each reply in receive(): the reply's handler runs on that thread,
  // not on the provider's (no hand-off). The event thread takes the socket back only after
  // it has been left alone for a while, so under a slow sanitizer a few may still go there.
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) { (void)server.reply(m.id, m.payload); });
  MessageEndpoint client(small_config());
  Inbox replies;
  std::atomic<int> here{0};
  const auto self = std::this_thread::get_id();
  client.on_message([&](const Message& m) {
    if (std::this_thread::get_id() == self) here.fetch_add(1);
    replies.add(m.peer, m.payload);
  });
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  constexpr std::uint32_t kCount = 200;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(client.send(pair.client_side, numbered(i)), SendStatus::kOk);
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (replies.count(pair.client_side) <= i) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      ASSERT_TRUE(client.receive(pair.client_side, {}, kWait));
    }
  }
  EXPECT_GE(here.load(), static_cast<int>(kCount) / 2) << "most replies handled by the receiver";
  std::vector<std::uint32_t> order;
  for (const auto& [peer, n] : replies.all()) order.push_back(n);
  for (std::uint32_t i = 0; i < kCount; ++i) ASSERT_EQ(order[i], i);
}

TEST_F(MessageEndpointTest, AReceiveEndsOnItsWakeDescriptorAndAClosingPeer) {
  MessageEndpoint server(small_config());
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  EXPECT_FALSE(client.receive(pair.client_side + 100, {}, kWait)) << "no such peer";
  // Nothing comes: a wake written before (or while) it waits ends the receive at once, and
  // is left for the caller to read.
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(wake, 0);
  const std::uint64_t wake_id = runtime::new_wake_id();
  std::uint64_t one = 1;
  ASSERT_EQ(::write(wake, &one, sizeof one), 8);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.receive(pair.client_side, {wake, wake_id}, Millis(60000)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, MessageEndpoint::kReceiveSlice);
  std::uint64_t v = 0;
  EXPECT_EQ(::read(wake, &v, sizeof v), 8) << "the wake is the caller's to read";
  // A peer closing its side ends a receive waiting on it; close_peer() waits for one in
  // progress and afterwards receive() says it cannot.
  std::thread receiver([&] {
    for (int i = 0; i < 100 && client.receive(pair.client_side, {wake, wake_id}, kWait); ++i) {
    }
  });
  server.close_peer(pair.server_side, kWait);
  client.close_peer(pair.client_side, kWait);
  receiver.join();
  EXPECT_FALSE(client.receive(pair.client_side, {wake, wake_id}, kWait));
  ::close(wake);
}

TEST_F(MessageEndpointTest, APeerThatClosesInOrderIsReportedClosedNotFailed) {
  std::promise<std::string> closed;
  std::atomic<int> failures{0};
  MessageEndpoint server(small_config());
  server.on_close([&](PeerId, const std::string& why) { closed.set_value(why); });
  server.on_failure([&](PeerId, const std::string&) { failures.fetch_add(1); });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  ASSERT_EQ(client.send(pair.client_side, numbered(1)), SendStatus::kOk);
  client.close_peer(pair.client_side, 2000ms);
  auto fut = closed.get_future();
  ASSERT_EQ(fut.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(fut.get().empty());
  const auto st = *server.stats(pair.server_side);
  EXPECT_EQ(st.state, PeerState::kClosed);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server.send(pair.server_side, numbered(2)), SendStatus::kUnknownPeer);
}

// The receiver advertises a region (its STag and tagged offset, as the stream layer's
// ring); the sender writes into it with its message.
struct Advertised {
  std::vector<std::uint8_t> region;
  std::uint32_t stag = 0;
  std::uint64_t offset = 0;
};

Advertised advertise(MessageEndpoint& receiver, PeerId peer, std::size_t size) {
  Advertised a;
  a.region.assign(size, 0);
  auto stag = receiver.register_memory(peer, a.region, rdmap::kRemoteWrite);
  EXPECT_TRUE(stag.has_value()) << (stag ? "" : stag.error());
  a.stag = stag ? *stag : 0;
  const auto to = receiver.tagged_offset(peer, a.stag, a.region.data());
  EXPECT_TRUE(to.has_value());
  a.offset = to.value_or(0);
  return a;
}

std::vector<std::uint8_t> pattern(std::size_t size) {
  std::vector<std::uint8_t> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::uint8_t>((i * 7 + i / 251) & 0xFF);
  return v;
}

TEST_F(MessageEndpointTest, AMessageWithATaggedWriteFindsTheWritePlacedWhenItIsDelivered) {
  constexpr std::size_t kSize = 64 * 1024;
  const std::vector<std::uint8_t> expected = pattern(kSize);
  Advertised ring;  // before the server: its handler reads it
  std::promise<bool> placed_at_delivery;
  MessageEndpoint server(small_config());
  server.on_message([&](const Message& m) {
    if (number_of(m.payload) == 7) placed_at_delivery.set_value(ring.region == expected);
  });
  MessageEndpoint client(small_config());
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  ring = advertise(server, pair.server_side, kSize);

  std::vector<std::uint8_t> source = expected;
  auto lstag = client.register_memory(pair.client_side, source, rdmap::kLocalWrite);
  ASSERT_TRUE(lstag.has_value()) << lstag.error();
  const credit::TaggedWrite write{.local_addr = reinterpret_cast<std::uint64_t>(source.data()),
                                  .length = kSize,
                                  .local_stag = *lstag,
                                  .remote_stag = ring.stag,
                                  .remote_offset = ring.offset};
  ASSERT_EQ(client.send(pair.client_side, numbered(7), write), SendStatus::kOk);
  auto fut = placed_at_delivery.get_future();
  ASSERT_EQ(fut.wait_for(kWait), std::future_status::ready);
  EXPECT_TRUE(fut.get()) << "the message came before its write's octets";

  const auto cs = *client.stats(pair.client_side);
  EXPECT_EQ(cs.writes_sent, 1u);
  EXPECT_EQ(cs.bytes_written, kSize);
  EXPECT_EQ(cs.messages_sent, 1u);
  EXPECT_EQ(cs.state, PeerState::kConnected);
  // More writes into the same ring, then plain messages: the writes' slots come back.
  for (std::uint32_t i = 0; i < 50; ++i) {
    SendStatus st;
    while ((st = client.send(pair.client_side, numbered(100 + i), write)) ==
           SendStatus::kTryAgain) {
      ASSERT_TRUE(client.wait_ready(pair.client_side, kWait));
    }
    ASSERT_EQ(st, SendStatus::kOk);
  }
  EXPECT_TRUE(eventually([&] { return server.stats(pair.server_side)->messages_received == 51; }));
  EXPECT_EQ(client.stats(pair.client_side)->writes_sent, 51u);
  client.deregister_memory(pair.client_side, *lstag);
  server.deregister_memory(pair.server_side, ring.stag);
  EXPECT_FALSE(client.register_memory(9999, source, rdmap::kLocalWrite).has_value());
  EXPECT_EQ(client.tagged_offset(9999, *lstag, source.data()), std::nullopt);
}

TEST_F(MessageEndpointTest, AWriteBeyondThePeersRegionGetsItsTerminateAndFailsThatPeerOnly) {
  std::promise<std::string> failed;
  MessageEndpoint server(small_config());
  MessageEndpoint client(small_config());
  client.on_failure([&](PeerId, const std::string& why) { failed.set_value(why); });
  Server listener(server);
  const Pair pair = connect(client, server, listener, *provider_);
  const Advertised ring = advertise(server, pair.server_side, 4096);

  std::vector<std::uint8_t> source = pattern(8192);
  auto lstag = client.register_memory(pair.client_side, source, rdmap::kLocalWrite);
  ASSERT_TRUE(lstag.has_value()) << lstag.error();
  const credit::TaggedWrite write{.local_addr = reinterpret_cast<std::uint64_t>(source.data()),
                                  .length = 8192,
                                  .local_stag = *lstag,
                                  .remote_stag = ring.stag,
                                  .remote_offset = ring.offset};
  ASSERT_EQ(client.send(pair.client_side, numbered(1), write), SendStatus::kOk);
  auto fut = failed.get_future();
  ASSERT_EQ(fut.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(fut.get().empty());
  const auto cs = *client.stats(pair.client_side);
  EXPECT_EQ(cs.state, PeerState::kFailed);
  ASSERT_TRUE(cs.terminate_received.has_value()) << cs.detail;
  // RFC 5041 s7.2: a tagged placement outside the region is a DDP tagged buffer error,
  // base or bounds violation.
  EXPECT_EQ(cs.terminate_received->cause.layer, wire::TermLayer::kDdp);
  EXPECT_EQ(cs.terminate_received->cause.etype, wire::kDdpEtypeTaggedBuffer);
  EXPECT_EQ(cs.terminate_received->cause.code, wire::kDdpTaggedCodeBaseOrBounds);
  EXPECT_TRUE(
      eventually([&] { return server.stats(pair.server_side)->state == PeerState::kFailed; }));
  EXPECT_EQ(server.stats(pair.server_side)->messages_received, 0u)
      << "the message after the refused write is never delivered";
  EXPECT_EQ(client.send(pair.client_side, numbered(2), write), SendStatus::kPeerFailed);
  EXPECT_FALSE(client.register_memory(pair.client_side, source, rdmap::kLocalWrite).has_value())
      << "no registration on a failed peer";
  // A write already on the wire when its message was refused (the Terminate came between
  // the two posts) is unsignaled and completes nowhere, as any unsignaled send on a failed
  // connection: its entry comes back when the peer is dropped.
  client.close_peer(pair.client_side, 2000ms);
  const auto b = client.endpoint_stats().budget;
  EXPECT_EQ(b.send_reserved + b.receive_reserved, 0u);
}

}  // namespace
}  // namespace rdma_interop::messaging
