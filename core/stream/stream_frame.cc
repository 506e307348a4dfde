#include "core/stream/stream_frame.h"

#include <algorithm>

#include "core/util/byte_order.h"

namespace rdma_interop::stream {
namespace {

// The fixed body length of each type; DATA's is its data.
constexpr std::uint32_t body_length(FrameType t) {
  switch (t) {
    case FrameType::kOpen:
      return 8;
    case FrameType::kAccept:
      return 4;
    case FrameType::kRefuse:
    case FrameType::kReset:
      return 1;
    case FrameType::kData:
      return 0;
    case FrameType::kWindow:
      return 8;
    case FrameType::kSink:
      return 20;
    case FrameType::kPlaced:
      return 4;
    case FrameType::kUrgent:
      return 9;
  }
  return 0;
}

constexpr std::uint8_t allowed_flags(FrameType t) {
  if (t == FrameType::kData) return kFlagFin | kFlagWantSink | kFlagTell;
  if (t == FrameType::kPlaced) return kFlagFin | kFlagTell;
  if (t == FrameType::kReset) return kFlagAnswer;
  return 0;
}

bool known(std::uint8_t type) {
  return type >= static_cast<std::uint8_t>(FrameType::kOpen) &&
         type <= static_cast<std::uint8_t>(FrameType::kReset);
}

}  // namespace

bool operator==(const Frame& a, const Frame& b) {
  return a.type == b.type && a.flags == b.flags && a.stream == b.stream && a.port == b.port &&
         a.window == b.window && a.reason == b.reason && a.consumed == b.consumed &&
         a.stag == b.stag && a.offset == b.offset && a.size == b.size && a.length == b.length &&
         a.mark == b.mark && a.octet == b.octet &&
         std::ranges::equal(a.data, b.data);
}

std::string_view frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::kOpen:
      return "open";
    case FrameType::kAccept:
      return "accept";
    case FrameType::kRefuse:
      return "refuse";
    case FrameType::kData:
      return "data";
    case FrameType::kWindow:
      return "window";
    case FrameType::kSink:
      return "sink";
    case FrameType::kPlaced:
      return "placed";
    case FrameType::kUrgent:
      return "urgent";
    case FrameType::kReset:
      return "reset";
  }
  return "unknown";
}

std::string_view frame_error_name(FrameError e) {
  switch (e) {
    case FrameError::kTruncated:
      return "truncated";
    case FrameError::kUnknownType:
      return "unknown_type";
    case FrameError::kBadLength:
      return "bad_length";
    case FrameError::kReservedBits:
      return "reserved_bits";
    case FrameError::kZeroStream:
      return "zero_stream";
  }
  return "unknown";
}

std::size_t encoded_size(const Frame& f) {
  return kFrameHeaderSize + (f.type == FrameType::kData ? f.data.size() : body_length(f.type));
}

void append_frame(std::vector<std::uint8_t>& out, const Frame& f) {
  const std::size_t at = out.size();
  out.resize(at + encoded_size(f));
  std::uint8_t* p = out.data() + at;
  const std::uint32_t body = static_cast<std::uint32_t>(encoded_size(f) - kFrameHeaderSize);
  p[0] = static_cast<std::uint8_t>(f.type);
  p[1] = f.flags;
  store_be16(p + 2, 0);
  store_be32(p + 4, f.stream);
  store_be32(p + 8, body);
  std::uint8_t* b = p + kFrameHeaderSize;
  switch (f.type) {
    case FrameType::kOpen:
      store_be16(b, f.port);
      store_be16(b + 2, 0);
      store_be32(b + 4, f.window);
      break;
    case FrameType::kAccept:
      store_be32(b, f.window);
      break;
    case FrameType::kRefuse:
    case FrameType::kReset:
      b[0] = f.reason;
      break;
    case FrameType::kData:
      if (!f.data.empty()) std::copy(f.data.begin(), f.data.end(), b);
      break;
    case FrameType::kWindow:
      store_be64(b, f.consumed);
      break;
    case FrameType::kSink:
      store_be32(b, f.stag);
      store_be32(b + 4, 0);
      store_be64(b + 8, f.offset);
      store_be32(b + 16, f.size);
      break;
    case FrameType::kPlaced:
      store_be32(b, f.length);
      break;
    case FrameType::kUrgent:
      store_be64(b, f.mark);
      b[8] = f.octet;
      break;
  }
}

Expected<Frame, FrameError> FrameReader::next() {
  if (rest_.size() < kFrameHeaderSize) {
    rest_ = {};
    return unexpected(FrameError::kTruncated);
  }
  const std::uint8_t* p = rest_.data();
  const std::uint32_t body = load_be32(p + 8);
  if (body > rest_.size() - kFrameHeaderSize) {
    rest_ = {};
    return unexpected(FrameError::kTruncated);
  }
  const std::span<const std::uint8_t> b = rest_.subspan(kFrameHeaderSize, body);
  rest_ = rest_.subspan(kFrameHeaderSize + body);
  if (!known(p[0])) return unexpected(FrameError::kUnknownType);
  Frame f;
  f.type = static_cast<FrameType>(p[0]);
  f.flags = p[1];
  f.stream = load_be32(p + 4);
  if (load_be16(p + 2) != 0 || (f.flags & ~allowed_flags(f.type)) != 0) {
    return unexpected(FrameError::kReservedBits);
  }
  if (f.stream == 0) return unexpected(FrameError::kZeroStream);
  if (f.type != FrameType::kData && body != body_length(f.type)) {
    return unexpected(FrameError::kBadLength);
  }
  const std::uint8_t* d = b.data();
  switch (f.type) {
    case FrameType::kOpen:
      if (load_be16(d + 2) != 0) return unexpected(FrameError::kReservedBits);
      f.port = load_be16(d);
      f.window = load_be32(d + 4);
      break;
    case FrameType::kAccept:
      f.window = load_be32(d);
      break;
    case FrameType::kRefuse:
    case FrameType::kReset:
      f.reason = d[0];
      break;
    case FrameType::kData:
      f.data = b;
      break;
    case FrameType::kWindow:
      f.consumed = load_be64(d);
      break;
    case FrameType::kSink:
      if (load_be32(d + 4) != 0) return unexpected(FrameError::kReservedBits);
      f.stag = load_be32(d);
      f.offset = load_be64(d + 8);
      f.size = load_be32(d + 16);
      break;
    case FrameType::kPlaced:
      f.length = load_be32(d);
      break;
    case FrameType::kUrgent:
      f.mark = load_be64(d);
      f.octet = d[8];
      break;
  }
  return f;
}

}  // namespace rdma_interop::stream
