# version.cmake - writes version_info.cc for tools/common/version.h: the project version and
# `git describe` of the source tree, run at build time (cmake -P), rewriting the file only
# when its text changes so that an unchanged tree recompiles nothing.
#
#   cmake -DSOURCE_DIR=... -DOUTPUT=.../version_info.cc -DPROJECT_VERSION=0.1.0 -P version.cmake
set(describe "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --tags --always --dirty
                  OUTPUT_VARIABLE describe RESULT_VARIABLE failed ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(failed)
    set(describe "")
  endif()
endif()
set(text "// Written by tools/common/version.cmake at build time: do not edit.
namespace rdma_interop::tools {
extern const char* const kProjectVersion;
extern const char* const kGitDescribe;
const char* const kProjectVersion = \"${PROJECT_VERSION}\";
const char* const kGitDescribe = \"${describe}\";
}  // namespace rdma_interop::tools
")
set(old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUTPUT} "${text}")
endif()
