# Run `capsim validate FILE --format json -o base.json`, then the same validation against it
# with --baseline, and check that nothing moved (cmake -P; used by cli_tests.cmake).
#   CAPSIM  the capsim binary   FILE  a validation file   WORK  a scratch folder
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${CAPSIM}" validate "${FILE}" --format json -o "${WORK}/base.json" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "capsim validate (the baseline) failed: ${rc}")
endif()
execute_process(COMMAND "${CAPSIM}" validate "${FILE}" --baseline "${WORK}/base.json" --group-by source --format table
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "capsim validate --baseline failed: ${rc}\n${err}")
endif()
foreach(want "against base.json: 0 case metrics moved, 0 cases added, 0 removed, 0 changed status" "|error| median"
             "signed median")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing \"${want}\" in:\n${out}")
  endif()
endforeach()
execute_process(COMMAND "${CAPSIM}" validate "${FILE}" --baseline "${WORK}/base.json" --format json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(FIND "${out}" "\"moved\": []" at)
if(NOT rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "the JSON report's baseline.moved is not empty (exit ${rc})")
endif()
# A what-if's subset against the whole baseline compares like for like: the baseline's
# cases that --only selects, nothing "removed".
execute_process(COMMAND "${CAPSIM}" validate "${FILE}" --only "nemorl-v0.5-*" --baseline "${WORK}/base.json" --format table
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}" "against base.json (its cases --only selects): 0 case metrics moved, 0 cases added, 0 removed" at)
if(NOT rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "--only against a whole baseline (exit ${rc}):\n${out}\n${err}")
endif()
