// The verbs provider through the public API. Without an RDMA device (this is most build
// hosts) every call must fail fast with a ConnectError that says why, never crash or hang.
// With one, set RDMA_INTEROP_VERBS_ADDRESS to an address on it (10.0.2.15 in the kernel
// guest, on siw0 or rxe0) and the loopback scenarios below run through the real device;
// without it they skip with that reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/completion_queue.h"
#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::transport {
namespace {

using namespace std::chrono_literals;
using rdmap::WcOpcode;
using rdmap::WcStatus;
using Clock = std::chrono::steady_clock;

// Not assigned to any host (RFC 5737 TEST-NET-1): no RDMA device has it anywhere.
constexpr const char* kNowhere = "192.0.2.1";

std::unique_ptr<Provider> verbs_provider() {
  auto p = open_provider("verbs");
  EXPECT_TRUE(p.has_value()) << (p ? "" : p.error());
  return p ? std::move(*p) : nullptr;
}

ProviderUri uri(const std::string& text) {
  auto parsed = parse_provider_uri(text);
  EXPECT_TRUE(parsed.has_value()) << text << ": " << (parsed ? "" : parsed.error());
  return parsed ? *parsed : ProviderUri{};
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(VerbsProvider, OpensWithoutTouchingRdmaCm) {
  auto p = open_provider("verbs");
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ((*p)->scheme(), "verbs");
  auto sim = open_provider("sim");
  ASSERT_FALSE(sim.has_value());
  EXPECT_NE(sim.error().find("tcp and verbs"), std::string::npos) << sim.error();
}

TEST(VerbsProvider, ListenWhereNoRdmaDeviceIsSaysSo) {
  auto provider = verbs_provider();
  const auto start = Clock::now();
  auto listener =
      provider->listen(uri(std::string("verbs://") + kNowhere + ":7000"), cm::MpaPolicy{}, 4);
  ASSERT_FALSE(listener.has_value());
  EXPECT_EQ(listener.error().kind, ConnectError::Kind::kUnreachable) << to_string(listener.error());
  const auto& detail = listener.error().detail;
  EXPECT_TRUE(detail.find("rdma_cm is not available") != std::string::npos ||
              detail.find("no RDMA device has this address") != std::string::npos)
      << detail;
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(VerbsProvider, ConnectWhereNoRdmaDeviceIsFailsInTime) {
  auto provider = verbs_provider();
  ConnectOptions options;
  options.timeout = 2000ms;
  const auto start = Clock::now();
  auto c = provider->connect(uri(std::string("verbs://") + kNowhere + ":7000"), options);
  ASSERT_FALSE(c.has_value());
  // No rdma_cm: unreachable at once. With a device, the CM may resolve a gateway and then
  // wait for an answer nobody sends: unreachable or timeout, within the deadline.
  const auto kind = c.error().kind;
  EXPECT_TRUE(kind == ConnectError::Kind::kUnreachable || kind == ConnectError::Kind::kTimeout)
      << to_string(c.error());
  EXPECT_FALSE(c.error().detail.empty());
  EXPECT_LT(seconds_since(start), 4.0);
}

TEST(VerbsProvider, RefusesBadArgumentsBeforeTheDevice) {
  auto provider = verbs_provider();
  ConnectOptions options;
  auto no_port = provider->connect(uri("verbs://10.0.2.15"), options);
  ASSERT_FALSE(no_port.has_value());
  EXPECT_EQ(no_port.error().kind, ConnectError::Kind::kInvalidArgument);
  EXPECT_NE(no_port.error().detail.find("needs a port"), std::string::npos);

  ProviderUri bad_option{"verbs", "10.0.2.15", 7000, {{"retry_count", "8"}}};
  auto option = provider->connect(bad_option, options);
  ASSERT_FALSE(option.has_value());
  EXPECT_EQ(option.error().kind, ConnectError::Kind::kInvalidArgument);
  EXPECT_NE(option.error().detail.find("0 to 7"), std::string::npos);

  auto tcp = provider->connect(ProviderUri{"tcp", "127.0.0.1", 7000}, options);
  ASSERT_FALSE(tcp.has_value());
  EXPECT_EQ(tcp.error().kind, ConnectError::Kind::kInvalidArgument);

  auto backlog = provider->listen(uri("verbs://10.0.2.15:7000"), cm::MpaPolicy{}, 0);
  ASSERT_FALSE(backlog.has_value());
  EXPECT_EQ(backlog.error().kind, ConnectError::Kind::kInvalidArgument);

  cm::MpaPolicy bad_policy;
  bad_policy.revision = 3;
  auto policy = provider->listen(uri("verbs://10.0.2.15:7000"), bad_policy, 4);
  ASSERT_FALSE(policy.has_value());
  EXPECT_EQ(policy.error().kind, ConnectError::Kind::kInvalidArgument);

  // The listener has no drop queue: a drop request is refused, not served as reject.
  ListenOptions drop(4);
  drop.overflow = cm::BacklogOverflow::kDrop;
  auto dropping = provider->listen(uri("verbs://10.0.2.15:7000"), cm::MpaPolicy{}, drop);
  ASSERT_FALSE(dropping.has_value());
  EXPECT_EQ(dropping.error().kind, ConnectError::Kind::kInvalidArgument);
  EXPECT_NE(dropping.error().detail.find("no drop policy"), std::string::npos);

  // source= says where a connect starts: a listener has no use for it.
  auto sourced =
      provider->listen(uri("verbs://10.0.2.15:7000?source=10.0.2.15"), cm::MpaPolicy{}, 4);
  ASSERT_FALSE(sourced.has_value());
  EXPECT_EQ(sourced.error().kind, ConnectError::Kind::kInvalidArgument);
}

TEST(VerbsProvider, UnknownDeviceOrHostIsAnArgumentError) {
  auto provider = verbs_provider();
  auto listener = provider->listen(uri("verbs://nosuchdevice0.invalid"), cm::MpaPolicy{}, 4);
  ASSERT_FALSE(listener.has_value());
  EXPECT_EQ(listener.error().kind, ConnectError::Kind::kInvalidArgument);
  EXPECT_NE(listener.error().detail.find("not an IP address, an RDMA device"), std::string::npos)
      << listener.error().detail;
}

// ---- Through a real RDMA device (RDMA_INTEROP_VERBS_ADDRESS) --------------------------------

class VerbsLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* address = std::getenv("RDMA_INTEROP_VERBS_ADDRESS");
    if (address == nullptr || *address == '\0') {
      GTEST_SKIP() << "set RDMA_INTEROP_VERBS_ADDRESS to an address on an RDMA device "
                      "(e.g. 10.0.2.15 on siw0 or rxe0) to run this through the device";
    }
    address_ = address;
    server_ = verbs_provider();
    client_ = verbs_provider();
    auto listener = server_->listen(uri("verbs://" + address_ + ":0"), cm::MpaPolicy{}, 4);
    ASSERT_TRUE(listener.has_value()) << to_string(listener.error());
    listener_ = std::move(*listener);
    const auto local = listener_->local_address();
    port_ = static_cast<std::uint16_t>(std::stoi(local.substr(local.rfind(':') + 1)));
    ASSERT_NE(port_, 0) << local;
  }

  ProviderUri target(const std::string& query = "") const {
    return uri("verbs://" + address_ + ":" + std::to_string(port_) + query);
  }

  // Connects and accepts; the server side's caps post `server_recvs`.
  void connect_pair(QpCaps server_caps = {}, QpCaps client_caps = {},
                    const std::string& query = "") {
    auto accepted = std::async(std::launch::async, [&] {
      auto pending = listener_->next_request(5000ms);
      EXPECT_NE(pending, nullptr);
      if (!pending) return std::unique_ptr<Connection>();
      auto c = pending->accept(bytes("hello-from-server"), server_caps);
      EXPECT_TRUE(c.has_value()) << (c ? "" : to_string(c.error()));
      return c ? std::move(*c) : std::unique_ptr<Connection>();
    });
    ConnectOptions options;
    options.private_data = bytes("hello-from-client");
    options.caps = std::move(client_caps);
    options.timeout = 5000ms;
    auto c = client_->connect(target(query), options);
    ASSERT_TRUE(c.has_value()) << to_string(c.error());
    client_conn_ = std::move(*c);
    server_conn_ = accepted.get();
    ASSERT_NE(server_conn_, nullptr);
  }

  static std::vector<std::uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

  static std::optional<rdmap::WorkCompletion> wait(Connection& c, Millis timeout = 5000ms) {
    auto wcs = c.poll_completions(1, timeout);
    if (wcs.empty()) return std::nullopt;
    return wcs.front();
  }

  std::string address_;
  std::uint16_t port_ = 0;
  std::unique_ptr<Provider> server_;
  std::unique_ptr<Provider> client_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_conn_;
  std::unique_ptr<Connection> server_conn_;
};

TEST_F(VerbsLoopback, PrivateDataBothWaysAndAddresses) {
  connect_pair();
  const auto& c = client_conn_->info();
  const auto& s = server_conn_->info();
  // IB/RoCE pad private data to the CM message's size; the prefix is ours.
  const std::string from_server(c.params.peer_private_data.begin(),
                                c.params.peer_private_data.end());
  const std::string from_client(s.params.peer_private_data.begin(),
                                s.params.peer_private_data.end());
  EXPECT_EQ(from_server.rfind("hello-from-server", 0), 0u) << from_server;
  EXPECT_EQ(from_client.rfind("hello-from-client", 0), 0u) << from_client;
  EXPECT_EQ(c.peer_address, s.local_address);
  EXPECT_EQ(s.peer_address, c.local_address);
  EXPECT_GT(c.params.ord, 0);
  EXPECT_GT(s.params.ird, 0);
}

TEST_F(VerbsLoopback, SendWriteReadWithVerifiedBytes) {
  std::vector<std::uint8_t> inbox(4096, 0);
  QpCaps server_caps;
  server_caps.initial_recvs.push_back({77, inbox.data(), static_cast<std::uint32_t>(inbox.size())});
  connect_pair(server_caps);

  std::vector<std::uint8_t> message(1000);
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = static_cast<std::uint8_t>(i * 7);
  const auto send_stag = client_conn_->register_memory(message.data(), message.size(), 0);
  ASSERT_NE(send_stag, 0u);
  rdmap::SendWr send;
  send.wr_id = 1;
  send.sge = {reinterpret_cast<std::uint64_t>(message.data()), 1000, send_stag};
  ASSERT_FALSE(client_conn_->post_send(send).has_value());
  auto sent = wait(*client_conn_);
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->status, WcStatus::kSuccess);
  EXPECT_EQ(sent->opcode, WcOpcode::kSend);
  EXPECT_EQ(sent->byte_len, 1000u);
  auto received = wait(*server_conn_);
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(received->wr_id, 77u);
  EXPECT_EQ(received->opcode, WcOpcode::kRecv);
  EXPECT_EQ(received->byte_len, 1000u);
  EXPECT_EQ(std::memcmp(inbox.data(), message.data(), 1000), 0);

  // The server's region: the client writes it, then reads it back.
  std::vector<std::uint8_t> region(65536, 0);
  const auto rkey = server_conn_->register_memory(
      region.data(), region.size(), rdmap::kLocalWrite | rdmap::kRemoteWrite | rdmap::kRemoteRead);
  ASSERT_NE(rkey, 0u);
  std::vector<std::uint8_t> local(65536);
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = static_cast<std::uint8_t>(i ^ (i >> 8));
  const auto lkey = client_conn_->register_memory(local.data(), local.size(), rdmap::kLocalWrite);
  rdmap::SendWr write;
  write.wr_id = 2;
  write.opcode = rdmap::WrOpcode::kRdmaWrite;
  write.sge = {reinterpret_cast<std::uint64_t>(local.data()), 65536, lkey};
  write.remote_stag = rkey;
  write.remote_addr = reinterpret_cast<std::uint64_t>(region.data());
  ASSERT_FALSE(client_conn_->post_send(write).has_value());
  auto written = wait(*client_conn_);
  ASSERT_TRUE(written.has_value());
  EXPECT_EQ(written->status, WcStatus::kSuccess) << client_conn_->error_detail();
  EXPECT_EQ(written->opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(region, local);

  std::vector<std::uint8_t> back(65536, 0);
  const auto back_key = client_conn_->register_memory(back.data(), back.size(), rdmap::kLocalWrite);
  rdmap::SendWr read = write;
  read.wr_id = 3;
  read.opcode = rdmap::WrOpcode::kRdmaRead;
  read.sge = {reinterpret_cast<std::uint64_t>(back.data()), 65536, back_key};
  ASSERT_FALSE(client_conn_->post_send(read).has_value());
  auto was_read = wait(*client_conn_);
  ASSERT_TRUE(was_read.has_value());
  EXPECT_EQ(was_read->status, WcStatus::kSuccess) << client_conn_->error_detail();
  EXPECT_EQ(was_read->wr_id, 3u);
  EXPECT_EQ(was_read->opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(was_read->byte_len, 65536u);
  EXPECT_EQ(back, local);
}

// post_sends chains its batch into one ibv_post_send: a Write and the Send that announces it
// both complete, in order, and the Send's receiver finds the Write placed.
TEST_F(VerbsLoopback, AChainedWriteAndItsSendCompleteInOrderAndThePlacementIsSeen) {
  std::vector<std::uint8_t> inbox(64, 0);
  QpCaps server_caps;
  server_caps.initial_recvs.push_back({7, inbox.data(), static_cast<std::uint32_t>(inbox.size())});
  connect_pair(server_caps);

  std::vector<std::uint8_t> region(65536, 0);
  const auto rkey = server_conn_->register_memory(region.data(), region.size(),
                                                  rdmap::kLocalWrite | rdmap::kRemoteWrite);
  ASSERT_NE(rkey, 0u);
  std::vector<std::uint8_t> local(65536);
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = static_cast<std::uint8_t>(i * 13);
  const auto lkey = client_conn_->register_memory(local.data(), local.size(), rdmap::kLocalWrite);
  std::vector<std::uint8_t> note(40, 0x4e);
  const auto note_key = client_conn_->register_memory(note.data(), note.size(), 0);
  const auto at = [](const std::vector<std::uint8_t>& v) {
    return reinterpret_cast<std::uint64_t>(v.data());
  };
  rdmap::SendWr write{.wr_id = 1,
                      .opcode = rdmap::WrOpcode::kRdmaWrite,
                      .sge = {at(local), 65536, lkey},
                      .remote_stag = rkey,
                      .remote_addr = at(region)};
  const std::vector<rdmap::SendWr> pair{
      write, {.wr_id = 2, .opcode = rdmap::WrOpcode::kSend, .sge = {at(note), 40, note_key}}};
  const auto r = client_conn_->post_sends(pair);
  EXPECT_EQ(r.posted, 2u);
  EXPECT_FALSE(r.error);
  for (std::uint64_t id : {1u, 2u}) {
    auto wc = wait(*client_conn_);
    ASSERT_TRUE(wc.has_value());
    EXPECT_EQ(wc->wr_id, id);
    EXPECT_EQ(wc->status, WcStatus::kSuccess) << client_conn_->error_detail();
  }
  auto received = wait(*server_conn_);
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(received->wr_id, 7u);
  EXPECT_EQ(received->byte_len, 40u);
  EXPECT_EQ(region, local) << "the Write is placed when the Send after it is delivered";
  EXPECT_EQ(client_conn_->state(), ConnectionState::kConnected);
}

// A chain longer than the send queue: the requests that fit are posted and complete, the
// rest are refused (kQueueFull), as ibv_post_send(3) says, on every device. (libsiw returns
// 0 for it with *bad_wr set: the provider goes by *bad_wr.)
TEST_F(VerbsLoopback, AChainLongerThanTheSendQueueIsPostedUpToItsRoomAndTheRestRefused) {
  QpCaps server_caps;
  std::vector<std::vector<std::uint8_t>> inboxes(64, std::vector<std::uint8_t>(16, 0));
  for (std::size_t i = 0; i < inboxes.size(); ++i) {
    server_caps.initial_recvs.push_back(
        {100 + i, inboxes[i].data(), static_cast<std::uint32_t>(inboxes[i].size())});
  }
  server_caps.max_recv_wr = 64;
  QpCaps client_caps;
  client_caps.max_send_wr = 8;
  connect_pair(server_caps, client_caps);
  std::vector<std::uint8_t> note(16, 0x4e);
  const auto key = client_conn_->register_memory(note.data(), note.size(), 0);
  std::vector<rdmap::SendWr> chain;
  for (std::uint64_t i = 0; i < 64; ++i) {
    chain.push_back({.wr_id = i,
                     .opcode = rdmap::WrOpcode::kSend,
                     .sge = {reinterpret_cast<std::uint64_t>(note.data()), 16, key}});
  }
  const auto r = client_conn_->post_sends(chain);
  // The queue the device granted: 8 or more (rxe0 gives 15), and an empty queue takes
  // exactly that on siw0 and rxe0.
  EXPECT_GE(client_conn_->info().send_queue_depth, 8u);
  EXPECT_EQ(r.posted, client_conn_->info().send_queue_depth);
  EXPECT_LT(r.posted, chain.size());
  EXPECT_EQ(r.error, rdmap::PostError::kQueueFull);
  // siw0 returns success for it (its deviation, which verbs-check's sq-overflow reports);
  // rxe0 an error. Either way the provider's answer is the same.
  RecordProperty("device_returned_success", r.returned_success ? "true" : "false");
  for (std::uint64_t i = 0; i < r.posted; ++i) {
    auto wc = wait(*client_conn_);
    ASSERT_TRUE(wc.has_value()) << "request " << i << " of " << r.posted << " never completed";
    EXPECT_EQ(wc->wr_id, i);
    EXPECT_EQ(wc->status, WcStatus::kSuccess) << client_conn_->error_detail();
  }
  EXPECT_FALSE(wait(*client_conn_, 300ms).has_value()) << "a refused request completed";
  for (std::uint64_t i = 0; i < r.posted; ++i) {
    auto got = wait(*server_conn_);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->wr_id, 100 + i);
  }
  EXPECT_EQ(client_conn_->state(), ConnectionState::kConnected);
}

TEST_F(VerbsLoopback, ReadWithABadRkeyIsARemoteAccessError) {
  connect_pair();
  std::vector<std::uint8_t> region(4096, 0);
  const auto rkey = server_conn_->register_memory(region.data(), region.size(),
                                                  rdmap::kLocalWrite | rdmap::kRemoteRead);
  std::vector<std::uint8_t> local(4096, 0);
  const auto lkey = client_conn_->register_memory(local.data(), local.size(), rdmap::kLocalWrite);
  rdmap::SendWr read;
  read.wr_id = 9;
  read.opcode = rdmap::WrOpcode::kRdmaRead;
  read.sge = {reinterpret_cast<std::uint64_t>(local.data()), 64, lkey};
  read.remote_stag = rkey ^ 0xffu;  // same index, wrong key
  read.remote_addr = reinterpret_cast<std::uint64_t>(region.data());
  ASSERT_FALSE(client_conn_->post_send(read).has_value());
  auto wc = wait(*client_conn_);
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->wr_id, 9u);
  EXPECT_EQ(wc->opcode, WcOpcode::kRdmaRead);
  // IB/RoCE NAK the Read and report the access error. Linux siw answers with a Terminate
  // and flushes the Read instead (verbs-check's bad-rkey-read reports that as a finding);
  // either way the connection is in error.
  EXPECT_TRUE(wc->status == WcStatus::kRemoteAccessError || wc->status == WcStatus::kFlushed)
      << rdmap::wc_status_name(wc->status);
  EXPECT_EQ(client_conn_->state(), ConnectionState::kError);
  EXPECT_NE(client_conn_->error_detail().find("wr_id 9"), std::string::npos)
      << client_conn_->error_detail();
}

TEST_F(VerbsLoopback, RejectCarriesThePeersPrivateData) {
  auto rejected = std::async(std::launch::async, [&] {
    auto pending = listener_->next_request(5000ms);
    ASSERT_NE(pending, nullptr);
    const std::string pd(pending->request().private_data.begin(),
                         pending->request().private_data.end());
    EXPECT_EQ(pd.rfind("knock", 0), 0u) << pd;
    pending->reject(bytes("go away"));
  });
  ConnectOptions options;
  options.private_data = bytes("knock");
  options.timeout = 5000ms;
  auto c = client_->connect(target(), options);
  rejected.get();
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().kind, ConnectError::Kind::kSetup) << to_string(c.error());
  EXPECT_EQ(c.error().failure, cm::CmFailure::kPeerRejected);
  ASSERT_TRUE(c.error().peer_frame.has_value());
  const std::string pd(c.error().peer_frame->private_data.begin(),
                       c.error().peer_frame->private_data.end());
  EXPECT_EQ(pd.rfind("go away", 0), 0u) << pd;
}

TEST_F(VerbsLoopback, OverflowRejectCarriesTheBacklogFullMarker) {
  // A listener with one slot, held by a request nobody takes: the next one is over it.
  auto small = server_->listen(uri("verbs://" + address_ + ":0"), cm::MpaPolicy{}, 1);
  ASSERT_TRUE(small.has_value()) << to_string(small.error());
  auto& listener = **small;
  const auto local = listener.local_address();
  const auto where = uri("verbs://" + address_ + ":" + local.substr(local.rfind(':') + 1));
  ConnectOptions options;
  options.timeout = 5000ms;
  auto first = std::async(std::launch::async, [&] { return client_->connect(where, options); });
  const auto until = Clock::now() + 5s;
  while (listener.counters().pending < 1 && Clock::now() < until) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(listener.counters().pending, 1u);

  auto second = client_->connect(where, options);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().kind, ConnectError::Kind::kSetup) << to_string(second.error());
  EXPECT_EQ(second.error().failure, cm::CmFailure::kBacklogFull) << to_string(second.error());
  const auto counters = listener.counters();
  EXPECT_EQ(counters.overflow_rejected, 1u);
  EXPECT_EQ(counters.requests, 2u);
  const auto failures = listener.take_setup_failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].error.failure, cm::CmFailure::kBacklogFull);

  // The application's own Reject stays peer_rejected.
  auto pending = listener.next_request(5000ms);
  ASSERT_NE(pending, nullptr);
  pending->reject({});
  auto refused = first.get();
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().failure, cm::CmFailure::kPeerRejected) << to_string(refused.error());
}

TEST_F(VerbsLoopback, SourceAddressIsWhereTheConnectStarts) {
  auto accepted = std::async(std::launch::async, [&] {
    auto pending = listener_->next_request(5000ms);
    EXPECT_NE(pending, nullptr);
    if (!pending) return std::unique_ptr<Connection>();
    auto c = pending->accept({}, {});
    return c ? std::move(*c) : std::unique_ptr<Connection>();
  });
  ConnectOptions options;
  options.timeout = 5000ms;
  auto c = client_->connect(target("?source=" + address_), options);
  ASSERT_TRUE(c.has_value()) << to_string(c.error());
  server_conn_ = accepted.get();
  ASSERT_NE(server_conn_, nullptr);
  const auto& from = (*c)->info().local_address;
  EXPECT_EQ(from.substr(0, from.rfind(':')), address_) << from;

  auto nowhere = client_->connect(target("?source=nosuchdevice0.invalid"), options);
  ASSERT_FALSE(nowhere.has_value());
  EXPECT_EQ(nowhere.error().kind, ConnectError::Kind::kInvalidArgument);
  (*c)->disconnect(1000ms);
}

TEST_F(VerbsLoopback, NothingListeningIsUnreachable) {
  listener_->close();
  ConnectOptions options;
  options.timeout = 5000ms;
  const auto start = Clock::now();
  auto c = client_->connect(target(), options);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().kind, ConnectError::Kind::kUnreachable) << to_string(c.error());
  EXPECT_LT(seconds_since(start), 5.5);
}

TEST_F(VerbsLoopback, PeerDisconnectIsReportedAndTheQpLeftAlone) {
  connect_pair();
  server_conn_->disconnect(2000ms);
  EXPECT_EQ(server_conn_->state(), ConnectionState::kClosed);
  const auto deadline = Clock::now() + 5s;
  while (client_conn_->state() == ConnectionState::kConnected && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(client_conn_->state(), ConnectionState::kClosed);
  EXPECT_NE(client_conn_->error_detail().find("DISCONNECTED"), std::string::npos)
      << client_conn_->error_detail();
}

TEST_F(VerbsLoopback, TwoConnectionsOnOneSharedQueueCompleteIntoIt) {
  auto shared = std::make_shared<CompletionQueue>(16);
  std::vector<std::uint8_t> in_a(256, 0), in_b(256, 0);
  QpCaps caps_a;
  caps_a.cq = shared;
  caps_a.initial_recvs.push_back({11, in_a.data(), static_cast<std::uint32_t>(in_a.size())});
  connect_pair(caps_a);
  auto client_a = std::move(client_conn_);
  auto server_a = std::move(server_conn_);
  QpCaps caps_b = caps_a;
  caps_b.initial_recvs = {{22, in_b.data(), static_cast<std::uint32_t>(in_b.size())}};
  connect_pair(caps_b);

  std::vector<std::uint8_t> to_a(200, 0xa5), to_b(100, 0x5b);
  auto send = [](Connection& c, std::vector<std::uint8_t>& message, std::uint64_t wr_id) {
    const auto stag = c.register_memory(message.data(), message.size(), 0);
    ASSERT_NE(stag, 0u);
    rdmap::SendWr wr;
    wr.wr_id = wr_id;
    wr.sge = {reinterpret_cast<std::uint64_t>(message.data()),
              static_cast<std::uint32_t>(message.size()), stag};
    ASSERT_FALSE(c.post_send(wr).has_value());
    auto sent = wait(c);
    ASSERT_TRUE(sent.has_value());
    EXPECT_EQ(sent->status, WcStatus::kSuccess);
  };
  send(*client_a, to_a, 1);
  send(*client_conn_, to_b, 2);
  // Both receives, of two connections, through the first one's handle.
  std::vector<rdmap::WorkCompletion> got;
  const auto deadline = Clock::now() + 5s;
  while (got.size() < 2 && Clock::now() < deadline) {
    for (auto& wc : server_a->poll_completions(2, 100ms)) got.push_back(wc);
  }
  ASSERT_EQ(got.size(), 2u);
  std::sort(got.begin(), got.end(), [](const auto& x, const auto& y) { return x.wr_id < y.wr_id; });
  EXPECT_EQ(got[0].wr_id, 11u);
  EXPECT_EQ(got[0].byte_len, 200u);
  EXPECT_EQ(got[1].wr_id, 22u);
  EXPECT_EQ(got[1].byte_len, 100u);
  for (const auto& wc : got) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(in_a.data(), to_a.data(), to_a.size()), 0);
  EXPECT_EQ(std::memcmp(in_b.data(), to_b.data(), to_b.size()), 0);
  EXPECT_TRUE(server_conn_->poll_completions(4, 100ms).empty());
  const auto c = shared->counters();
  EXPECT_EQ(c.pushed, 2u);
  EXPECT_EQ(c.polled, 2u);
  EXPECT_EQ(c.overruns, 0u);
}

TEST_F(VerbsLoopback, TerminateDisconnectsFlushesAndSaysItCouldNotSendOne) {
  std::vector<std::uint8_t> inbox(256, 0);
  QpCaps client_caps;
  client_caps.initial_recvs.push_back({5, inbox.data(), static_cast<std::uint32_t>(inbox.size())});
  connect_pair({}, client_caps);
  // RFC 5041 s7.2: DDP untagged buffer error, "no buffer".
  const wire::TerminateCause no_buffer{wire::TermLayer::kDdp, wire::kDdpEtypeUntaggedBuffer,
                                       wire::kDdpUntaggedCodeNoBuffer};
  client_conn_->terminate(no_buffer);
  EXPECT_EQ(client_conn_->state(), ConnectionState::kError);
  const auto detail = client_conn_->error_detail();
  EXPECT_NE(detail.find("cannot send a Terminate"), std::string::npos) << detail;
  EXPECT_NE(detail.find(wire::describe(no_buffer)), std::string::npos) << detail;
  EXPECT_FALSE(client_conn_->terminate_sent().has_value());
  auto flushed = wait(*client_conn_);
  ASSERT_TRUE(flushed.has_value()) << "the posted receive was not flushed";
  EXPECT_EQ(flushed->wr_id, 5u);
  EXPECT_EQ(flushed->opcode, WcOpcode::kRecv);
  EXPECT_EQ(flushed->status, WcStatus::kFlushed) << rdmap::wc_status_name(flushed->status);
  EXPECT_EQ(client_conn_->post_send(rdmap::SendWr{}), rdmap::PostError::kNotConnected);
  // The peer sees a disconnect (no Terminate is visible through verbs).
  const auto deadline = Clock::now() + 5s;
  while (server_conn_->state() == ConnectionState::kConnected && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server_conn_->state(), ConnectionState::kClosed) << server_conn_->error_detail();
}

}  // namespace
}  // namespace rdma_interop::transport
