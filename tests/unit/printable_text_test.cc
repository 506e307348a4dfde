// printable() and valid_utf8(): what bytes from a peer or a file become on a terminal and in
// JSON. Issue 17: a process name of "\x1b[2J" cleared the operator's screen and "\n" forged
// a row of backlog-stat's table; a '\xff' in a peer name made the JSON writer throw.
#include "core/util/printable_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/util/json_text.h"

namespace rdma_interop {
namespace {

bool has_control(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 || b == 0x7F) return true;
    if (b == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0) return true;
  }
  return false;
}

TEST(PrintableText, PlainAndUnicodeTextIsKept) {
  EXPECT_EQ(printable("rdma-probe serve 198.18.0.2:7174"), "rdma-probe serve 198.18.0.2:7174");
  EXPECT_EQ(printable("n\xC5\x93ud-\xE2\x82\xAC-\xF0\x9F\x94\x8C"),
            "n\xC5\x93ud-\xE2\x82\xAC-\xF0\x9F\x94\x8C");
}

TEST(PrintableText, ControlsAndEscapesAreWrittenOut) {
  EXPECT_EQ(printable("a\nb"), "a\\nb");
  EXPECT_EQ(printable("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(printable(std::string("\0x\x7f", 3)), "\\x00x\\x7f");
  EXPECT_EQ(printable("\xC2\x9B"
                      "31m"),
            "\\xc2\\x9b31m");                            // C1 CSI
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");  // an escape cannot be forged
}

TEST(PrintableText, CharactersThatReorderOrBreakARowAreWrittenOut) {
  EXPECT_EQ(printable("pid \xE2\x80\xAE" "4321"), "pid \\xe2\\x80\\xae4321");  // RLO
  EXPECT_EQ(printable("\xE2\x81\xA6x"), "\\xe2\\x81\\xa6x");                // LRI
  EXPECT_EQ(printable("a\xE2\x80\xA8" "b"), "a\\xe2\\x80\\xa8b");           // LINE SEPARATOR
  EXPECT_EQ(printable("\xD8\x9C"), "\\xd8\\x9c");                          // ALM
  EXPECT_EQ(printable("\xE2\x80\x94"), "\xE2\x80\x94");                    // an em dash stays
}

TEST(PrintableText, InvalidUtf8IsWrittenAsHexBytes) {
  EXPECT_EQ(printable("\xff"), "\\xff");
  EXPECT_EQ(printable("\xC0\xAF"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("\xE2\x82"), "\\xe2\\x82");           // truncated
  EXPECT_EQ(valid_utf8("a\xff"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(valid_utf8("ok\n"), "ok\n");
}

TEST(PrintableText, AnyBytesGiveOneLineOfValidUtf8AndValidJson) {
  std::mt19937 rng(17);
  for (int round = 0; round < 5000; ++round) {
    std::string bytes(rng() % 40, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    const std::string p = printable(bytes);
    EXPECT_FALSE(has_control(p)) << round;
    EXPECT_EQ(valid_utf8(p), p) << round;
    EXPECT_EQ(valid_utf8(valid_utf8(bytes)), valid_utf8(bytes)) << round;
    // The JSON writer never throws and its text parses back.
    const std::string text = json_text(nlohmann::json{{"peer", bytes}});
    const auto back = nlohmann::json::parse(text, nullptr, false);
    EXPECT_FALSE(back.is_discarded()) << round;
  }
}

}  // namespace
}  // namespace rdma_interop
