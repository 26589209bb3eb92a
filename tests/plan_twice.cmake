# Run `capsim plan FILE --format json` twice and check the two reports are byte-identical
# (cmake -P; used by cli_tests.cmake).
#   CAPSIM  the capsim binary   PLAN  the plan file   WORK  a scratch folder
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
foreach(run a b)
  execute_process(COMMAND "${CAPSIM}" plan "${PLAN}" --format json -o "${WORK}/${run}.json" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "capsim plan (run ${run}) failed: ${rc}")
  endif()
endforeach()
file(READ "${WORK}/a.json" a)
file(READ "${WORK}/b.json" b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "two runs of the same plan differ")
endif()
