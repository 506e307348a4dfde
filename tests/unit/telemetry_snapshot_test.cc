// The snapshot file format: every field round-trips; damaged files are told apart.
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

TEST(TelemetrySnapshot, UnknownKeysAreAccepted) {
  auto j = nlohmann::json::parse(to_json_text(sample()));
  j["added_later"] = true;
  j["listeners"][0]["counters"]["credits"] = 4;
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

TEST(TelemetrySnapshot, OverflowNames) {
  EXPECT_EQ(overflow_text(cm::BacklogOverflow::kDrop), "drop");
  EXPECT_EQ(overflow_text(cm::BacklogOverflow::kReject), "reject");
  EXPECT_EQ(parse_overflow("drop"), cm::BacklogOverflow::kDrop);
  EXPECT_EQ(parse_overflow("Reject"), std::nullopt);
}

}  // namespace
}  // namespace rdma_interop::telemetry
