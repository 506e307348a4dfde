// help_wrap.h - option help text wrapped to a column, for CLI11 (which does not wrap).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rdma_interop::tools {

// Breaks `text` at spaces into lines of at most `width` characters (a longer word stands
// alone on its line), joined with '\n'.
std::string wrap_help(std::string_view text, std::size_t width);

}  // namespace rdma_interop::tools
