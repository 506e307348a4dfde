#include "core/util/printable_text.h"

#include <cstdint>

namespace rdma_interop {
namespace {

// The length of the valid UTF-8 sequence at `s[i]` (RFC 3629 s4: no overlongs, no
// surrogates, nothing above U+10FFFF), or 0 if it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// Valid characters that still change how a line reads: the bidirectional marks, embeddings,
// overrides and isolates (U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069) reorder what
// follows them, and U+2028/U+2029 break lines on some terminals (Trojan Source, CVE-2021-42574).
bool reorders_text(std::string_view s, std::size_t i, std::size_t n) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[i + k]); };
  if (n == 2) return byte(0) == 0xD8 && byte(1) == 0x9C;
  if (n != 3 || byte(0) != 0xE2) return false;
  if (byte(1) == 0x80) {
    return byte(2) == 0x8E || byte(2) == 0x8F || (byte(2) >= 0xA8 && byte(2) <= 0xAE);
  }
  return byte(1) == 0x81 && byte(2) >= 0xA6 && byte(2) <= 0xA9;
}

void append_hex(std::string& out, std::uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

}  // namespace

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<std::uint8_t>(bytes[i]);
    const std::size_t n = utf8_length(bytes, i);
    if (n == 1) {
      if (b == '\\') {
        out += "\\\\";
      } else if (b == '\n') {
        out += "\\n";
      } else if (b == '\r') {
        out += "\\r";
      } else if (b == '\t') {
        out += "\\t";
      } else if (b < 0x20 || b == 0x7F) {
        append_hex(out, b);
      } else {
        out += static_cast<char>(b);
      }
      ++i;
    } else if (n == 2 && b == 0xC2 && static_cast<std::uint8_t>(bytes[i + 1]) < 0xA0) {
      // U+0080..U+009F: the C1 controls (CSI among them) are escaped as their two bytes.
      append_hex(out, b);
      append_hex(out, static_cast<std::uint8_t>(bytes[i + 1]));
      i += 2;
    } else if (n == 0) {
      append_hex(out, b);
      ++i;
    } else if (reorders_text(bytes, i, n)) {
      for (std::size_t k = 0; k < n; ++k) append_hex(out, static_cast<std::uint8_t>(bytes[i + k]));
      i += n;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_length(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace rdma_interop
