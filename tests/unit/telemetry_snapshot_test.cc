// The snapshot file format: every field round-trips (listeners and credit-managed
// connections); damaged files are told apart; files without connections still read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/telemetry/counters_json.h"
#include "core/telemetry/listener_snapshot.h"
#include "telemetry_test_util.h"

namespace rdma_interop::telemetry {
namespace {

ProcessSnapshot sample() {
  ProcessSnapshot s;
  s.pid = 4242;
  s.process = "rdma-probe";
  s.sequence = 17;
  s.monotonic_ns = 123456789;
  s.wall_ms = 1718000000000;
  auto l = testing::listener("127.0.0.1:7174", 3);
  l.counters.high_water = 9;
  l.counters.half_open_evicted = 1ull << 40;  // 64-bit counters stay exact
  s.listeners.push_back(l);
  auto d = testing::listener("[::1]:7175");
  d.overflow = cm::BacklogOverflow::kDrop;
  s.listeners.push_back(d);
  auto unknown = testing::listener("0.0.0.0:7176");
  unknown.overflow.reset();
  s.listeners.push_back(unknown);
  s.connections.push_back(testing::connection("node2"));
  auto failed = testing::connection("node3", 0);
  failed.state = "failed";
  failed.peer_address = "[fd00::3]:7300";
  failed.credit.received = 1ull << 40;  // 64-bit counters stay exact
  s.connections.push_back(failed);
  return s;
}

TEST(TelemetrySnapshot, RoundTripsEveryField) {
  const auto s = sample();
  const auto parsed = parse_snapshot(to_json_text(s));
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(*parsed, s);
}

TEST(TelemetrySnapshot, CountersUseTheStructsFieldNames) {
  cm::BacklogCounters c;
  c.overflow_rejected = 5;
  c.half_open_expired = 7;
  const auto j = counters_to_json(c);
  EXPECT_EQ(j.at("overflow_rejected"), 5);
  EXPECT_EQ(j.at("half_open_expired"), 7);
  EXPECT_EQ(j.size(), 18u);  // every field of BacklogCounters
}

TEST(TelemetrySnapshot, CreditCountersUseTheStructsFieldNames) {
  const auto j = credit_counters_to_json(testing::connection("n").credit);
  EXPECT_EQ(j.at("credits"), 5);
  EXPECT_EQ(j.at("stalls_no_credit"), 7);
  EXPECT_EQ(j.at("stalls_no_slot"), 8);
  EXPECT_EQ(j.at("updates_received"), 41);
  EXPECT_EQ(j.size(), 18u);  // every field of CreditCounters
  const auto back = credit_counters_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(*back, testing::connection("n").credit);
}

TEST(TelemetrySnapshot, ConnectionsAreWrittenAsDocumented) {
  const auto j = nlohmann::json::parse(to_json_text(sample()));
  ASSERT_TRUE(j.at("connections").is_array());
  const auto& c = j.at("connections").at(0);
  EXPECT_EQ(c.at("local_address"), "198.18.0.1:40122");
  EXPECT_EQ(c.at("peer_address"), "198.18.0.2:7300");
  EXPECT_EQ(c.at("scheme"), "tcp");
  EXPECT_EQ(c.at("peer"), "node2");
  EXPECT_EQ(c.at("state"), "connected");
  EXPECT_EQ(c.at("queued"), 3);
  EXPECT_EQ(c.at("queue_limit"), 64);
  EXPECT_EQ(c.at("held"), 1);
  EXPECT_EQ(c.at("refused"), 12);
  EXPECT_EQ(c.at("credit").at("credits"), 5);
}

TEST(TelemetrySnapshot, FileWithoutConnectionsReadsAsNone) {
  auto j = nlohmann::json::parse(to_json_text(sample()));
  j.erase("connections");
  const auto parsed = parse_snapshot(j.dump());
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_TRUE(parsed->connections.empty());
  EXPECT_EQ(parsed->listeners.size(), 3u);
}

TEST(TelemetrySnapshot, DamagedConnectionsAreErrorsWithAReason) {
  const auto good = nlohmann::json::parse(to_json_text(sample()));
  const auto error_of = [](const nlohmann::json& j) {
    const auto e = parse_snapshot(j.dump());
    EXPECT_FALSE(e);
    return e ? std::string() : e.error();
  };
  auto not_array = good;
  not_array["connections"] = nlohmann::json::object();
  EXPECT_NE(error_of(not_array).find("connections"), std::string::npos);

  auto no_peer = good;
  no_peer["connections"][0].erase("peer");
  EXPECT_NE(error_of(no_peer).find("\"peer\""), std::string::npos) << error_of(no_peer);

  auto no_credit = good;
  no_credit["connections"][1].erase("credit");
  EXPECT_NE(error_of(no_credit).find("credit"), std::string::npos);

  auto missing_counter = good;
  missing_counter["connections"][0]["credit"].erase("stalls_no_slot");
  EXPECT_NE(error_of(missing_counter).find("credit.stalls_no_slot"), std::string::npos)
      << error_of(missing_counter);

  auto too_big = good;
  too_big["connections"][0]["credit"]["credits"] = 1ull << 33;  // a 32-bit field
  EXPECT_NE(error_of(too_big).find("credit.credits"), std::string::npos);

  auto queued_too_big = good;
  queued_too_big["connections"][0]["queued"] = 1ull << 32;
  EXPECT_NE(error_of(queued_too_big).find("queued"), std::string::npos);

  auto negative = good;
  negative["connections"][0]["refused"] = -1;
  EXPECT_NE(error_of(negative).find("refused"), std::string::npos);

  auto number_state = good;
  number_state["connections"][0]["state"] = 1;
  EXPECT_NE(error_of(number_state).find("state"), std::string::npos);
}

TEST(TelemetrySnapshot, UnknownKeysAreAccepted) {
  auto j = nlohmann::json::parse(to_json_text(sample()));
  j["added_later"] = true;
  j["listeners"][0]["counters"]["credits"] = 4;
  j["connections"][0]["rtt_us"] = 12;
  j["connections"][0]["credit"]["later_counter"] = 1;
  EXPECT_TRUE(parse_snapshot(j.dump()));
}

TEST(TelemetrySnapshot, DamagedFilesAreErrorsWithAReason) {
  const std::string good = to_json_text(sample());
  EXPECT_FALSE(parse_snapshot(good.substr(0, good.size() / 2)));  // torn write
  EXPECT_FALSE(parse_snapshot(""));
  EXPECT_FALSE(parse_snapshot("[]"));

  auto wrong_schema = nlohmann::json::parse(good);
  wrong_schema["schema"] = "someone-else/1";
  EXPECT_FALSE(parse_snapshot(wrong_schema.dump()));

  auto missing_counter = nlohmann::json::parse(good);
  missing_counter["listeners"][0]["counters"].erase("pending");
  const auto e = parse_snapshot(missing_counter.dump());
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("pending"), std::string::npos) << e.error();

  auto negative = nlohmann::json::parse(good);
  negative["listeners"][0]["counters"]["backlog"] = -1;
  EXPECT_FALSE(parse_snapshot(negative.dump()));

  auto too_big = nlohmann::json::parse(good);
  too_big["listeners"][0]["counters"]["backlog"] = 1ull << 33;  // a 32-bit field
  EXPECT_FALSE(parse_snapshot(too_big.dump()));

  auto bad_policy = nlohmann::json::parse(good);
  bad_policy["listeners"][0]["overflow"] = "maybe";
  EXPECT_FALSE(parse_snapshot(bad_policy.dump()));

  auto no_pid = nlohmann::json::parse(good);
  no_pid["pid"] = 0;
  EXPECT_FALSE(parse_snapshot(no_pid.dump()));
}

// Every number must fit its field as it is: a value that would wrap is a malformed file, not
// another value (a pid of 2^32 + 1 would otherwise read as 1, alive forever).
TEST(TelemetrySnapshot, IntegersOutOfTheirRangeAreMalformed) {
  const auto good = nlohmann::json::parse(to_json_text(sample()));
  const auto with = [&](const char* key, const nlohmann::json& value) {
    auto j = good;
    j[key] = value;
    return parse_snapshot(j.dump());
  };
  const auto error_with = [&](const char* key, const nlohmann::json& value) {
    const auto parsed = with(key, value);
    return parsed ? std::string("parsed") : parsed.error();
  };
  EXPECT_NE(error_with("pid", 4294967297ull).find("pid"), std::string::npos);
  EXPECT_FALSE(with("pid", 2147483648ull));  // one past the largest pid_t
  EXPECT_FALSE(with("pid", -5));
  EXPECT_FALSE(with("pid", 1.5));
  EXPECT_FALSE(with("pid", 1e3));
  EXPECT_EQ(with("pid", 2147483647)->pid, 2147483647);
  EXPECT_EQ(with("pid", 1)->pid, 1);
  EXPECT_NE(error_with("sequence", -1).find("sequence"), std::string::npos);
  EXPECT_EQ(with("sequence", 18446744073709551615ull)->sequence, 18446744073709551615ull);
  EXPECT_NE(error_with("monotonic_ns", -1).find("monotonic_ns"), std::string::npos);
  EXPECT_FALSE(with("monotonic_ns", 9223372036854775808ull));  // would wrap negative
  EXPECT_EQ(with("monotonic_ns", 9223372036854775807ll)->monotonic_ns, 9223372036854775807ll);
  EXPECT_NE(error_with("wall_ms", -1).find("wall_ms"), std::string::npos);
  EXPECT_FALSE(with("wall_ms", 9223372036854775808ull));
  EXPECT_FALSE(with("wall_ms", "1718000000000"));

  auto connection = good;
  connection["connections"][0]["queued"] = -1;
  EXPECT_FALSE(parse_snapshot(connection.dump()));
  connection["connections"][0]["queued"] = 4294967296ull;  // a 32-bit field
  EXPECT_FALSE(parse_snapshot(connection.dump()));
  connection["connections"][0]["queued"] = 4294967295ull;
  EXPECT_TRUE(parse_snapshot(connection.dump()));
  connection["connections"][0]["refused"] = -3;
  EXPECT_FALSE(parse_snapshot(connection.dump()));
  connection["connections"][0]["refused"] = 2.0;
  EXPECT_FALSE(parse_snapshot(connection.dump()));
  connection["connections"][0]["refused"] = 18446744073709551615ull;
  connection["connections"][0]["credit"]["credits"] = -1;
  EXPECT_FALSE(parse_snapshot(connection.dump()));
}

// Strings are kept exactly as written (escaping is the printer's job), and control
// characters survive the round trip.
TEST(TelemetrySnapshot, ControlCharactersInStringsRoundTrip) {
  auto s = sample();
  constexpr char kName[] = "evil\x1b[2J\nforged\0row";
  s.process = std::string(kName, sizeof kName - 1);
  s.connections[0].peer = "\xc2\x9b" "31m";  // U+009B, the C1 CSI
  const auto parsed = parse_snapshot(to_json_text(s));
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(*parsed, s);
}

TEST(TelemetrySnapshot, OverflowNames) {
  EXPECT_EQ(overflow_text(cm::BacklogOverflow::kDrop), "drop");
  EXPECT_EQ(overflow_text(cm::BacklogOverflow::kReject), "reject");
  EXPECT_EQ(parse_overflow("drop"), cm::BacklogOverflow::kDrop);
  EXPECT_EQ(parse_overflow("Reject"), std::nullopt);
}

}  // namespace
}  // namespace rdma_interop::telemetry
