# tool_docs.cmake - runs a tool to write its man page and bash completion (tool_docs.h):
#   cmake -DTOOL=path/to/tool -DMAN=out.1 -DCOMPLETION=out -P tool_docs.cmake
get_filename_component(man_dir ${MAN} DIRECTORY)
get_filename_component(completion_dir ${COMPLETION} DIRECTORY)
file(MAKE_DIRECTORY ${man_dir} ${completion_dir})
execute_process(COMMAND ${TOOL} --help-man OUTPUT_FILE ${MAN} RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${TOOL} --help-man failed: ${failed}")
endif()
execute_process(COMMAND ${TOOL} --completion bash OUTPUT_FILE ${COMPLETION}
                RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${TOOL} --completion bash failed: ${failed}")
endif()
