// The tcp provider over real loopback sockets: MPA setup in every mode, data transfer with
// verified bytes, setup failures seen from both sides, bad input, and no leaked descriptors.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"

namespace rdma_interop::transport {
namespace {

using namespace std::chrono_literals;
using cm::MpaPolicy;
using cm::PeerToPeer;
using cm::RtrType;
using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WorkCompletion;

constexpr Millis kWait{5000};

int count_open_fds() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream itself
}

std::vector<std::uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::uint8_t>(x);
  }
  return v;
}

std::uint64_t addr_of(const std::vector<std::uint8_t>& v) {
  return reinterpret_cast<std::uint64_t>(v.data());
}

// A usable policy: revision 2, CRC, peer-to-peer when asked with Write and Read RTRs.
MpaPolicy responder_policy() {
  MpaPolicy p;
  p.rtr_offer = {.send = true, .write = true, .read = true};
  p.request_timeout = 2000ms;
  p.reply_timeout = 2000ms;
  p.rtr_timeout = 2000ms;
  return p;
}

MpaPolicy initiator_policy() {
  MpaPolicy p = responder_policy();
  p.peer_to_peer = PeerToPeer::kOff;
  return p;
}

MpaPolicy p2p_initiator(RtrType rtr) {
  MpaPolicy p = responder_policy();
  p.peer_to_peer = PeerToPeer::kOn;
  p.rtr_offer = {};
  p.rtr_offer.send = rtr == RtrType::kSend;
  p.rtr_offer.write = rtr == RtrType::kWrite;
  p.rtr_offer.read = rtr == RtrType::kRead;
  return p;
}

std::optional<WorkCompletion> wait_completion(Connection& c, Millis timeout = kWait) {
  auto wcs = c.poll_completions(1, timeout);
  if (wcs.empty()) return std::nullopt;
  return wcs.front();
}

template <class Pred>
bool eventually(Pred pred, Millis timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

using ConnectResult = Expected<std::unique_ptr<Connection>, ConnectError>;

class TcpProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = open_provider("tcp");
    ASSERT_TRUE(p.has_value()) << p.error();
    provider_ = std::move(*p);
  }

  void start_listener(const MpaPolicy& policy, int backlog = 8) {
    auto uri = parse_provider_uri("tcp://127.0.0.1:0");
    ASSERT_TRUE(uri.has_value());
    auto l = provider_->listen(*uri, policy, backlog);
    ASSERT_TRUE(l.has_value()) << to_string(l.error());
    listener_ = std::move(*l);
    auto where = parse_provider_uri("tcp://" + listener_->local_address());
    ASSERT_TRUE(where.has_value()) << where.error();
    where_ = *where;
  }

  std::future<ConnectResult> connect_async(ConnectOptions options) {
    return std::async(std::launch::async, [this, options = std::move(options)] {
      return provider_->connect(where_, options);
    });
  }

  ConnectOptions options(const MpaPolicy& policy, std::string_view pd = "initiator") {
    ConnectOptions o;
    o.policy = policy;
    o.private_data = bytes(pd);
    o.timeout = kWait;
    return o;
  }

  // Connects and accepts; both sides must come up.
  void connect_pair(const MpaPolicy& initiator, const MpaPolicy& responder,
                    const QpCaps& caps = {}) {
    start_listener(responder);
    ConnectOptions o = options(initiator);
    o.caps = caps;
    auto pending_connect = connect_async(o);
    auto request = listener_->next_request(kWait);
    ASSERT_NE(request, nullptr);
    EXPECT_EQ(request->request().private_data, bytes("initiator"));
    auto accepted = request->accept(bytes("responder"), caps);
    ASSERT_TRUE(accepted.has_value()) << to_string(accepted.error());
    responder_ = std::move(*accepted);
    auto connected = pending_connect.get();
    ASSERT_TRUE(connected.has_value()) << to_string(connected.error());
    initiator_ = std::move(*connected);
    EXPECT_EQ(initiator_->state(), ConnectionState::kConnected);
    EXPECT_EQ(responder_->state(), ConnectionState::kConnected);
  }

  // One Send from `from` into a fresh receive on `to`, bytes verified.
  void send_and_verify(Connection& from, Connection& to, std::size_t length, std::uint8_t seed) {
    std::vector<std::uint8_t> sink(length + 16, 0);
    const auto sink_key = to.register_memory(sink.data(), sink.size(), rdmap::kLocalWrite);
    ASSERT_FALSE(to.post_recv({.wr_id = 7, .sge = {addr_of(sink), static_cast<std::uint32_t>(
                                                                      sink.size()),
                                                   sink_key}}));
    auto source = pattern(length, seed);
    const auto source_key = from.register_memory(source.data(), source.size(), 0);
    ASSERT_FALSE(from.post_send({.wr_id = 8,
                                 .opcode = rdmap::WrOpcode::kSend,
                                 .sge = {addr_of(source), static_cast<std::uint32_t>(length),
                                         source_key}}));
    auto sent = wait_completion(from);
    ASSERT_TRUE(sent);
    EXPECT_EQ(sent->wr_id, 8u);
    EXPECT_EQ(sent->status, WcStatus::kSuccess);
    auto received = wait_completion(to);
    ASSERT_TRUE(received);
    EXPECT_EQ(received->wr_id, 7u);
    EXPECT_EQ(received->opcode, WcOpcode::kRecv);
    EXPECT_EQ(received->status, WcStatus::kSuccess);
    EXPECT_EQ(received->byte_len, length);
    EXPECT_TRUE(std::equal(source.begin(), source.end(), sink.begin()));
  }

  void write_and_read_64k() {
    constexpr std::size_t kLen = 64 * 1024;
    // Write: initiator's A -> responder's B.
    std::vector<std::uint8_t> b(kLen, 0);
    const auto b_key = responder_->register_memory(b.data(), b.size(),
                                                   rdmap::kLocalWrite | rdmap::kRemoteWrite |
                                                       rdmap::kRemoteRead);
    auto a = pattern(kLen, 3);
    const auto a_key = initiator_->register_memory(a.data(), a.size(), rdmap::kLocalWrite);
    ASSERT_FALSE(initiator_->post_send({.wr_id = 1,
                                        .opcode = rdmap::WrOpcode::kRdmaWrite,
                                        .sge = {addr_of(a), kLen, a_key},
                                        .remote_stag = b_key,
                                        .remote_addr = addr_of(b)}));
    auto w = wait_completion(*initiator_);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->status, WcStatus::kSuccess) << rdmap::wc_status_name(w->status);
    EXPECT_EQ(w->opcode, WcOpcode::kRdmaWrite);
    // The Write completes when it is sent; a Read behind it returns after it was placed.
    std::vector<std::uint8_t> e(kLen, 0);
    const auto e_key = initiator_->register_memory(e.data(), e.size(), rdmap::kLocalWrite);
    ASSERT_FALSE(initiator_->post_send({.wr_id = 2,
                                        .opcode = rdmap::WrOpcode::kRdmaRead,
                                        .sge = {addr_of(e), kLen, e_key},
                                        .remote_stag = b_key,
                                        .remote_addr = addr_of(b)}));
    auto r = wait_completion(*initiator_);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, WcStatus::kSuccess) << rdmap::wc_status_name(r->status);
    EXPECT_EQ(r->opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(r->byte_len, kLen);
    EXPECT_EQ(b, a);
    EXPECT_EQ(e, a);
  }

  std::unique_ptr<Provider> provider_;
  std::unique_ptr<Listener> listener_;
  ProviderUri where_;
  std::unique_ptr<Connection> initiator_;
  std::unique_ptr<Connection> responder_;
};

// ---- Provider URIs ---------------------------------------------------------------------

TEST(ProviderUri, ParsesEachScheme) {
  auto tcp = parse_provider_uri("tcp://198.18.0.2:7174");
  ASSERT_TRUE(tcp.has_value());
  EXPECT_EQ(*tcp, (ProviderUri{"tcp", "198.18.0.2", 7174}));
  EXPECT_EQ(tcp->to_string(), "tcp://198.18.0.2:7174");
  auto verbs = parse_provider_uri("verbs://siw0");
  ASSERT_TRUE(verbs.has_value());
  EXPECT_EQ(verbs->host, "siw0");
  auto sim = parse_provider_uri("sim://seed=7");
  ASSERT_TRUE(sim.has_value());
  EXPECT_EQ(sim->to_string(), "sim://seed=7");
}

TEST(ProviderUri, SaysWhatIsWrong) {
  EXPECT_EQ(parse_provider_uri("tcp://198.18.0.2").error(),
            "tcp URI needs a port: tcp://198.18.0.2:PORT (got 'tcp://198.18.0.2')");
  EXPECT_NE(parse_provider_uri("tcp://1.2.3.4:70000").error().find("0 to 65535"),
            std::string::npos);
  EXPECT_NE(parse_provider_uri("ftp://x").error().find("unknown provider scheme"),
            std::string::npos);
  EXPECT_NE(parse_provider_uri("198.18.0.2:1").error().find("no scheme"), std::string::npos);
  EXPECT_FALSE(parse_provider_uri("tcp://:5").has_value());
}

TEST(Provider, OpenNamesTheKnownSchemes) {
  auto p = open_provider("sim");
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().find("tcp"), std::string::npos);
  EXPECT_NE(p.error().find("verbs"), std::string::npos);
  auto tcp = open_provider("tcp");
  ASSERT_TRUE(tcp.has_value());
  EXPECT_EQ((*tcp)->scheme(), "tcp");
}

// ---- FPDU codecs continuing a stream (the handover after MPA setup) --------------------

TEST(FpduStreamPosition, EncoderAndDecoderContinueAtAStreamPosition) {
  const wire::FpduOptions options{.crc = true, .markers = true};
  const auto first = pattern(300, 1);   // as if the RTR
  const auto second = pattern(1500, 2);
  wire::FpduEncoder whole(options);
  wire::FpduFrame frame;
  std::vector<std::uint8_t> stream;
  ASSERT_TRUE(whole.encode(first, frame));
  frame.append_to(stream);
  const std::uint64_t position = whole.stream_position();
  ASSERT_TRUE(whole.encode(second, frame));
  std::vector<std::uint8_t> expected;
  frame.append_to(expected);

  wire::FpduEncoder continued(options, position);
  ASSERT_TRUE(continued.encode(second, frame));
  std::vector<std::uint8_t> got;
  frame.append_to(got);
  EXPECT_EQ(got, expected);

  wire::FpduDecoder decoder(options, position);
  std::span<const std::uint8_t> in(got);
  std::vector<std::uint8_t> ulpdu;
  while (!in.empty()) {
    auto step = decoder.step(in);
    ASSERT_TRUE(step.has_value()) << wire::error_name(step.error());
    in = in.subspan(step->consumed);
    if (step->ulpdu) ulpdu.assign(step->ulpdu->begin(), step->ulpdu->end());
  }
  EXPECT_EQ(ulpdu, second);
  EXPECT_EQ(decoder.stream_position(), continued.stream_position());
}

// ---- Establishment ---------------------------------------------------------------------

TEST_F(TcpProviderTest, Revision2EstablishesWithTheSameParametersOnBothSides) {
  connect_pair(initiator_policy(), responder_policy());
  const auto& i = initiator_->info();
  const auto& r = responder_->info();
  EXPECT_EQ(i.params.revision, 2);
  EXPECT_TRUE(i.params.crc);
  EXPECT_TRUE(i.params.enhanced);
  EXPECT_FALSE(i.params.peer_to_peer);
  EXPECT_FALSE(i.params.rtr.has_value());
  EXPECT_EQ(i.params.revision, r.params.revision);
  EXPECT_EQ(i.params.crc, r.params.crc);
  EXPECT_EQ(i.params.ird, 16);
  EXPECT_EQ(i.params.ord, 16);
  EXPECT_EQ(i.params.peer_private_data, bytes("responder"));
  EXPECT_EQ(r.params.peer_private_data, bytes("initiator"));
  EXPECT_EQ(i.peer_address, r.local_address);
  EXPECT_EQ(r.peer_address, i.local_address);
  EXPECT_EQ(i.sent_frame, r.received_frame);
  EXPECT_EQ(r.sent_frame, i.received_frame);
  EXPECT_FALSE(i.fell_back_to_revision1);
  send_and_verify(*initiator_, *responder_, 100, 1);
  send_and_verify(*responder_, *initiator_, 100, 2);
}

TEST_F(TcpProviderTest, Revision1InitiatorGetsARevision1Connection) {
  MpaPolicy rev1 = initiator_policy();
  rev1.revision = 1;
  connect_pair(rev1, responder_policy());
  EXPECT_EQ(initiator_->info().params.revision, 1);
  EXPECT_EQ(responder_->info().params.revision, 1);
  EXPECT_FALSE(initiator_->info().params.enhanced);
  EXPECT_FALSE(responder_->info().params.peer_to_peer);
  send_and_verify(*initiator_, *responder_, 64, 3);
  send_and_verify(*responder_, *initiator_, 64, 4);
}

class TcpPeerToPeerTest : public TcpProviderTest,
                          public ::testing::WithParamInterface<RtrType> {};

TEST_P(TcpPeerToPeerTest, EstablishesWithTheRtrAndCarriesData) {
  connect_pair(p2p_initiator(GetParam()), responder_policy());
  for (const auto* c : {initiator_.get(), responder_.get()}) {
    EXPECT_TRUE(c->info().params.peer_to_peer);
    ASSERT_TRUE(c->info().params.rtr.has_value());
    EXPECT_EQ(*c->info().params.rtr, GetParam());
    EXPECT_EQ(c->info().params.revision, 2);
  }
  // MSNs continue after a Send or Read RTR.
  send_and_verify(*initiator_, *responder_, 33, 5);
  send_and_verify(*responder_, *initiator_, 4000, 6);
  write_and_read_64k();
}

INSTANTIATE_TEST_SUITE_P(EachRtr, TcpPeerToPeerTest,
                         ::testing::Values(RtrType::kSend, RtrType::kWrite, RtrType::kRead),
                         [](const auto& info) { return std::string(cm::rtr_name(info.param)); });

// ---- Data transfer ---------------------------------------------------------------------

TEST_F(TcpProviderTest, SendReceiveBothWays) {
  connect_pair(initiator_policy(), responder_policy());
  send_and_verify(*initiator_, *responder_, 1, 10);
  send_and_verify(*initiator_, *responder_, 40000, 11);  // several DDP segments
  send_and_verify(*responder_, *initiator_, 16384, 12);
}

TEST_F(TcpProviderTest, RdmaWriteAndRead64KiBMultiSegment) {
  QpCaps caps;
  caps.max_ulpdu = 4096;  // 64 KiB is at least 16 segments each way
  connect_pair(initiator_policy(), responder_policy(), caps);
  write_and_read_64k();
}

TEST_F(TcpProviderTest, MarkersAndCrcWithAReadRtr) {
  MpaPolicy init = p2p_initiator(RtrType::kRead);
  init.markers_wanted = true;
  init.markers_supported = true;
  MpaPolicy resp = responder_policy();
  resp.markers_wanted = true;
  resp.markers_supported = true;
  connect_pair(init, resp);
  EXPECT_TRUE(initiator_->info().params.markers_to_peer);
  EXPECT_TRUE(initiator_->info().params.markers_from_peer);
  write_and_read_64k();
  send_and_verify(*responder_, *initiator_, 3000, 13);
}

TEST_F(TcpProviderTest, ReceivesPostedBeforeConnectCatchTheFirstSend) {
  std::vector<std::uint8_t> early(4096, 0);
  QpCaps caps;
  caps.initial_recvs.push_back({.wr_id = 99, .addr = early.data(), .length = 4096});
  connect_pair(initiator_policy(), responder_policy(), caps);
  auto message = pattern(1000, 14);
  const auto key = initiator_->register_memory(message.data(), message.size(), 0);
  ASSERT_FALSE(initiator_->post_send(
      {.wr_id = 1, .opcode = rdmap::WrOpcode::kSend, .sge = {addr_of(message), 1000, key}}));
  auto wc = wait_completion(*responder_);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 99u);
  EXPECT_EQ(wc->status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(message.begin(), message.end(), early.begin()));
}

TEST_F(TcpProviderTest, OrderlyDisconnectIsSeenAsClosedByThePeer) {
  connect_pair(initiator_policy(), responder_policy());
  std::vector<std::uint8_t> sink(64);
  const auto key = responder_->register_memory(sink.data(), sink.size(), rdmap::kLocalWrite);
  ASSERT_FALSE(responder_->post_recv({.wr_id = 5, .sge = {addr_of(sink), 64, key}}));
  initiator_->disconnect(kWait);
  EXPECT_EQ(initiator_->state(), ConnectionState::kClosed);
  EXPECT_TRUE(eventually([&] { return responder_->state() == ConnectionState::kClosed; }));
  EXPECT_EQ(responder_->error_detail(), "the peer closed the connection");
  // The receive that never matched is flushed.
  auto wc = wait_completion(*responder_);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 5u);
  EXPECT_NE(wc->status, WcStatus::kSuccess);
  EXPECT_EQ(initiator_->post_send(rdmap::SendWr{}),
            rdmap::PostError::kNotConnected);
}

// ---- Errors ----------------------------------------------------------------------------

TEST_F(TcpProviderTest, WriteToABadStagTerminatesBothSides) {
  connect_pair(initiator_policy(), responder_policy());
  auto source = pattern(1024, 15);
  const auto key = initiator_->register_memory(source.data(), source.size(), 0);
  ASSERT_FALSE(initiator_->post_send({.wr_id = 21,
                                      .opcode = rdmap::WrOpcode::kRdmaWrite,
                                      .sge = {addr_of(source), 1024, key},
                                      .remote_stag = 0x12345600,
                                      .remote_addr = 0}));
  // An iWARP Write is not acknowledged: it completes once sent (as in siw), and the
  // responder's Terminate then takes the requester's connection to error.
  auto wc = wait_completion(*initiator_);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 21u);
  ASSERT_TRUE(eventually([&] { return initiator_->terminate_received().has_value(); }));
  ASSERT_TRUE(eventually([&] { return responder_->terminate_sent().has_value(); }));
  const auto sent = *responder_->terminate_sent();
  const auto received = *initiator_->terminate_received();
  EXPECT_EQ(sent, received);
  // RFC 5041 s7.2: DDP, tagged buffer error, invalid STag.
  EXPECT_EQ(received.cause, (wire::TerminateCause{wire::TermLayer::kDdp,
                                                  wire::kDdpEtypeTaggedBuffer,
                                                  wire::kDdpTaggedCodeInvalidStag}));
  EXPECT_EQ(initiator_->state(), ConnectionState::kError);
  EXPECT_EQ(responder_->state(), ConnectionState::kError);
  EXPECT_NE(initiator_->error_detail().find("the peer sent a Terminate"), std::string::npos);
  EXPECT_NE(responder_->error_detail().find("sent a Terminate"), std::string::npos);
  // Both sides close the stream after the Terminate.
  EXPECT_EQ(initiator_->post_send(rdmap::SendWr{}), rdmap::PostError::kNotConnected);
}

TEST_F(TcpProviderTest, RemoteAccessErrorCompletesAPendingReadWithRemoteAccessError) {
  connect_pair(initiator_policy(), responder_policy());
  std::vector<std::uint8_t> sink(4096);
  const auto key = initiator_->register_memory(sink.data(), sink.size(), rdmap::kLocalWrite);
  // A Read from an STag the responder never registered.
  ASSERT_FALSE(initiator_->post_send({.wr_id = 22,
                                      .opcode = rdmap::WrOpcode::kRdmaRead,
                                      .sge = {addr_of(sink), 4096, key},
                                      .remote_stag = 0x7700,
                                      .remote_addr = 0}));
  auto wc = wait_completion(*initiator_);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 22u);
  EXPECT_EQ(wc->status, WcStatus::kRemoteAccessError) << rdmap::wc_status_name(wc->status);
  ASSERT_TRUE(wc->terminate.has_value());
  ASSERT_TRUE(eventually([&] { return responder_->terminate_sent().has_value(); }));
  EXPECT_EQ(responder_->terminate_sent()->cause, *wc->terminate);
  ASSERT_TRUE(eventually([&] { return initiator_->terminate_received().has_value(); }));
  EXPECT_EQ(initiator_->terminate_received()->cause, *wc->terminate);
}

TEST_F(TcpProviderTest, RejectWithPrivateDataReachesTheInitiator) {
  start_listener(responder_policy());
  auto pending_connect = connect_async(options(initiator_policy()));
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  request->reject(bytes("go away"));
  auto result = pending_connect.get();
  ASSERT_FALSE(result.has_value());
  const ConnectError& e = result.error();
  EXPECT_EQ(e.kind, ConnectError::Kind::kSetup);
  ASSERT_TRUE(e.failure.has_value());
  EXPECT_EQ(*e.failure, cm::CmFailure::kPeerRejected);
  ASSERT_TRUE(e.peer_frame.has_value());
  EXPECT_TRUE(e.peer_frame->reject);
  EXPECT_EQ(e.peer_frame->private_data, bytes("go away"));
  EXPECT_NE(to_string(e).find("peer_rejected"), std::string::npos);
}

TEST_F(TcpProviderTest, NoCommonRtrFailsBothSidesWithNoMatchingRtr) {
  MpaPolicy resp = responder_policy();
  resp.rtr_offer = {.send = false, .write = true, .read = false};
  start_listener(resp);
  auto pending_connect = connect_async(options(p2p_initiator(RtrType::kRead)));
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto accepted = request->accept({}, {});
  ASSERT_FALSE(accepted.has_value());
  ASSERT_TRUE(accepted.error().failure.has_value());
  EXPECT_EQ(*accepted.error().failure, cm::CmFailure::kNoMatchingRtr)
      << to_string(accepted.error());
  auto connected = pending_connect.get();
  ASSERT_FALSE(connected.has_value());
  ASSERT_TRUE(connected.error().failure.has_value());
  EXPECT_EQ(*connected.error().failure, cm::CmFailure::kNoMatchingRtr)
      << to_string(connected.error());
}

TEST_F(TcpProviderTest, Revision2InitiatorFallsBackWhenTheResponderResets) {
  MpaPolicy resp = responder_policy();
  resp.revision = 1;
  resp.peer_to_peer = PeerToPeer::kOff;
  resp.on_newer_revision = cm::OnNewerRevision::kReset;
  MpaPolicy init = initiator_policy();
  init.fallback_to_revision1 = true;
  connect_pair(init, resp);
  EXPECT_TRUE(initiator_->info().fell_back_to_revision1);
  EXPECT_EQ(initiator_->info().params.revision, 1);
  EXPECT_EQ(responder_->info().params.revision, 1);
  EXPECT_EQ(initiator_->info().sent_frame.revision, 1);
  // The reset revision-2 attempt never reached the application.
  EXPECT_TRUE(eventually([&] { return listener_->counters().half_open_aborted == 1; }));
  EXPECT_EQ(listener_->counters().half_open_opened, 2u);
  send_and_verify(*initiator_, *responder_, 500, 16);
}

TEST_F(TcpProviderTest, Revision2InitiatorWithoutFallbackFailsOnReset) {
  MpaPolicy resp = responder_policy();
  resp.revision = 1;
  resp.peer_to_peer = PeerToPeer::kOff;
  resp.on_newer_revision = cm::OnNewerRevision::kReset;
  start_listener(resp);
  auto result = provider_->connect(where_, options(initiator_policy()));
  ASSERT_FALSE(result.has_value());
  ASSERT_TRUE(result.error().failure.has_value());
  EXPECT_EQ(*result.error().failure, cm::CmFailure::kConnectionReset);
}

TEST_F(TcpProviderTest, GarbageFromARawSocketIsCountedAndTheListenerCarriesOn) {
  start_listener(responder_policy());
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(where_.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::write(fd, garbage.data(), garbage.size()),
              static_cast<ssize_t>(garbage.size()));
    char buffer[64];
    // The listener closes the connection on us.
    EXPECT_LE(::read(fd, buffer, sizeof buffer), 0);
    ::close(fd);
  }
  EXPECT_TRUE(eventually([&] { return listener_->counters().half_open_aborted == 1; }));
  EXPECT_EQ(listener_->counters().requests, 0u);
  EXPECT_EQ(listener_->next_request(100ms), nullptr);
  // Still serving.
  auto pending_connect = connect_async(options(initiator_policy()));
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto accepted = request->accept({}, {});
  ASSERT_TRUE(accepted.has_value()) << to_string(accepted.error());
  ASSERT_TRUE(pending_connect.get().has_value());
}

TEST_F(TcpProviderTest, RequestTimeoutIsCounted) {
  MpaPolicy resp = responder_policy();
  resp.request_timeout = 200ms;
  start_listener(resp);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(where_.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_TRUE(eventually([&] { return listener_->counters().half_open_expired == 1; }, 3000ms));
  EXPECT_EQ(listener_->counters().half_open_aborted, 0u);
  EXPECT_EQ(listener_->counters().half_open, 0u);
  ::close(fd);
}

TEST_F(TcpProviderTest, ConnectionRefusedIsUnreachable) {
  start_listener(responder_policy());
  const auto port = where_.port;
  listener_.reset();  // nobody listens on that port now
  auto result = provider_->connect(ProviderUri{"tcp", "127.0.0.1", port},
                                   options(initiator_policy()));
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().kind, ConnectError::Kind::kUnreachable) << to_string(result.error());
}

TEST_F(TcpProviderTest, SilentPeerGivesAReplyTimeout) {
  // A TCP listener that never speaks MPA.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  MpaPolicy init = initiator_policy();
  init.reply_timeout = 200ms;
  auto result = provider_->connect(ProviderUri{"tcp", "127.0.0.1", ntohs(a.sin_port)},
                                   options(init));
  ::close(fd);
  ASSERT_FALSE(result.has_value());
  ASSERT_TRUE(result.error().failure.has_value());
  EXPECT_EQ(*result.error().failure, cm::CmFailure::kReplyTimeout);
}

TEST_F(TcpProviderTest, AddressInUse) {
  start_listener(responder_policy());
  auto again = provider_->listen(where_, responder_policy(), 4);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().kind, ConnectError::Kind::kAddressInUse);
}

TEST_F(TcpProviderTest, InvalidPolicyIsRejectedUpFront) {
  start_listener(responder_policy());
  MpaPolicy bad = initiator_policy();
  bad.revision = 3;
  auto result = provider_->connect(where_, options(bad));
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().kind, ConnectError::Kind::kInvalidArgument);
}

// ---- Resources -------------------------------------------------------------------------

TEST(TcpProviderResources, NoDescriptorLeaksAfterEverythingIsDestroyed) {
  const int baseline = count_open_fds();
  {
    auto provider = open_provider("tcp").value();
    auto listener =
        provider->listen(*parse_provider_uri("tcp://127.0.0.1:0"), responder_policy(), 4).value();
    const auto where = *parse_provider_uri("tcp://" + listener->local_address());
    for (int i = 0; i < 3; ++i) {
      ConnectOptions o;
      o.policy = i == 1 ? p2p_initiator(RtrType::kRead) : initiator_policy();
      o.timeout = kWait;
      auto pending = std::async(std::launch::async, [&] { return provider->connect(where, o); });
      auto request = listener->next_request(kWait);
      ASSERT_NE(request, nullptr);
      if (i == 2) {
        request->reject({});
        EXPECT_FALSE(pending.get().has_value());
        continue;
      }
      auto accepted = request->accept({}, {});
      ASSERT_TRUE(accepted.has_value());
      auto connected = pending.get();
      ASSERT_TRUE(connected.has_value());
      if (i == 0) (*connected)->disconnect(kWait);
      // i == 1: both destroyed while connected.
    }
    // An undecided request and a connection in setup when everything goes away.
    ConnectOptions o;
    o.policy = initiator_policy();
    o.timeout = kWait;
    auto pending = std::async(std::launch::async, [&] { return provider->connect(where, o); });
    auto request = listener->next_request(kWait);
    ASSERT_NE(request, nullptr);
    request.reset();
    EXPECT_FALSE(pending.get().has_value());
    // The provider may go before its listener.
    provider.reset();
    EXPECT_GT(count_open_fds(), baseline);
  }
  EXPECT_EQ(count_open_fds(), baseline);
}

}  // namespace
}  // namespace rdma_interop::transport
