#include "core/stream/stream_frame.h"

#include <gtest/gtest.h>

#include <vector>

namespace rdma_interop::stream {
namespace {

std::vector<Frame> every_type() {
  static const std::vector<std::uint8_t> payload = {1, 2, 3, 4, 5};
  std::vector<Frame> out;
  Frame f;
  f.stream = 7;
  f.type = FrameType::kOpen;
  f.port = 5201;
  f.window = 65536;
  out.push_back(f);
  f = Frame{};
  f.stream = 7;
  f.type = FrameType::kAccept;
  f.window = 262144;
  out.push_back(f);
  f = Frame{};
  f.stream = 9;
  f.type = FrameType::kRefuse;
  f.reason = 1;
  out.push_back(f);
  f = Frame{};
  f.stream = 9;
  f.type = FrameType::kData;
  f.flags = kFlagFin | kFlagWantSink | kFlagTell;
  f.data = payload;
  out.push_back(f);
  f = Frame{};
  f.stream = 9;
  f.type = FrameType::kWindow;
  f.consumed = 0x1'0000'0001ULL;
  out.push_back(f);
  f = Frame{};
  f.stream = 11;
  f.type = FrameType::kSink;
  f.stag = 0xabcd;
  f.offset = 0x7fff'0000'1000ULL;
  f.size = 262144;
  out.push_back(f);
  f = Frame{};
  f.stream = 11;
  f.type = FrameType::kPlaced;
  f.flags = kFlagFin | kFlagTell;
  f.length = 100000;
  out.push_back(f);
  f = Frame{};
  f.stream = 11;
  f.type = FrameType::kUrgent;
  f.mark = 12345;
  f.octet = '!';
  out.push_back(f);
  f = Frame{};
  f.stream = 11;
  f.type = FrameType::kReset;
  f.reason = 1;
  out.push_back(f);
  return out;
}

TEST(StreamFrame, EveryTypeRoundTripsInOneMessage) {
  std::vector<std::uint8_t> message;
  const std::vector<Frame> frames = every_type();
  for (const Frame& f : frames) append_frame(message, f);
  FrameReader r(message);
  for (const Frame& want : frames) {
    auto got = r.next();
    ASSERT_TRUE(got.has_value()) << frame_type_name(want.type);
    EXPECT_EQ(*got, want) << frame_type_name(want.type);
  }
  EXPECT_TRUE(r.done());
}

TEST(StreamFrame, EveryTruncationIsAnErrorNotACrash) {
  for (const Frame& f : every_type()) {
    std::vector<std::uint8_t> message;
    append_frame(message, f);
    for (std::size_t n = 1; n < message.size(); ++n) {
      FrameReader r(std::span<const std::uint8_t>(message).first(n));
      auto got = r.next();
      if (f.type == FrameType::kData && n >= kFrameHeaderSize) {
        EXPECT_FALSE(got.has_value());  // the length says more octets than there are
      } else {
        ASSERT_FALSE(got.has_value());
        EXPECT_EQ(got.error(), FrameError::kTruncated);
      }
      EXPECT_TRUE(r.done());
    }
  }
}

TEST(StreamFrame, RejectsWhatTheFormatForbids) {
  std::vector<std::uint8_t> m;
  Frame f;
  f.type = FrameType::kWindow;
  f.stream = 3;
  append_frame(m, f);
  auto bad = m;
  bad[0] = 0x42;  // unknown type
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kUnknownType);
  bad = m;
  bad[1] = kFlagFin;  // WINDOW has no flags
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kReservedBits);
  bad[1] = kFlagTell;  // nor TELL (DATA and PLACED have it)
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kReservedBits);
  bad = m;
  bad[3] = 1;  // reserved octets
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kReservedBits);
  bad = m;
  bad[7] = 0;  // stream 0
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kZeroStream);
  bad = m;
  bad.push_back(0);
  bad[11] = 9;  // WINDOW's body is 8 octets
  EXPECT_EQ(FrameReader(bad).next().error(), FrameError::kBadLength);
}

}  // namespace
}  // namespace rdma_interop::stream
