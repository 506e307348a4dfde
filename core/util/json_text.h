// json_text.h - the one way the project turns JSON into text.
//
// Every string in our reports may hold bytes a peer or a file chose: a peer's name from MPA
// private data, a Terminate's detail, a process name from a snapshot. nlohmann's default
// dump() throws on invalid UTF-8, and a throw on a handler or setup thread ends the process
// (issue 17: one MPA Request with a '\xff' in its private data aborted an rdma-mesh node).
// Here invalid sequences become U+FFFD instead, so any bytes give valid JSON and nothing
// throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rdma_interop {

// `value` as JSON text: one line (indent < 0) or pretty-printed with `indent` spaces.
// Never throws for bad UTF-8.
template <class Json>
std::string json_text(const Json& value, int indent = -1) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace rdma_interop
