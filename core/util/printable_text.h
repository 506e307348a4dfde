// printable_text.h - text from peers and files made safe to print on a terminal.
//
// A process name in a telemetry snapshot, a peer's name in MPA private data or a reject
// reason are bytes someone else chose. Printed raw, "\n" forges a table row and "\x1b[2J"
// clears the operator's screen. printable() keeps valid, printable UTF-8 as it is and writes
// everything else as a C escape, so one line in stays one line out and what was sent can
// still be read.
#pragma once

#include <string>
#include <string_view>

namespace rdma_interop {

// `bytes` with every C0 control (including "\n" and "\t"), DEL, C1 control (U+0080..U+009F),
// bidirectional control and line or paragraph separator (they reorder or break a row), and
// byte of invalid UTF-8 written as "\xNN" (the common ones as "\n", "\r", "\t"), and
// the backslash itself as "\\" so the escaping cannot be forged either. The result is valid
// UTF-8 with no control characters.
std::string printable(std::string_view bytes);

// `bytes` with each invalid UTF-8 sequence replaced by U+FFFD, controls kept: for formats
// that escape controls themselves (JSON, XML writers) but require valid UTF-8.
std::string valid_utf8(std::string_view bytes);

}  // namespace rdma_interop
