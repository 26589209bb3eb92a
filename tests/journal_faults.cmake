# Sweep journals, -o files and stdout the CLI meets after a fault (cmake -P; used by cli_tests.cmake):
# journal writes that fail, a journal that is a device, two grids in one journal,
# temporary files left by a killed write, and a stdout that takes no more bytes.
#   CAPSIM  the capsim binary   SWEEP, SWEEP_B  two sweeps of the same size   WORK  a scratch folder
#   SCENARIO  a training scenario   PRLIMIT  prlimit(1), or empty to skip the full-disk check
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# expect(<exit> <stderr text> COMMAND...): run capsim (at most 60 s) and check both.
function(expect code text)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
  string(FIND "${err}" "${text}" pos)
  if(NOT "${rc}" STREQUAL "${code}" OR pos EQUAL -1)
    message(FATAL_ERROR "${ARGN}: expected exit ${code} with \"${text}\", got ${rc}:\n${err}")
  endif()
endfunction()

# A journal whose writes fail (a write beyond the file size limit, as on a full disk) is an
# input error naming it, not a crash and not rows silently left out of the journal.
if(PRLIMIT)
  expect(1 "full.jsonl.journal: cannot append to the journal: File too large"
         "${PRLIMIT}" --fsize=100 "${CAPSIM}" sweep "${SWEEP}" -o "${WORK}/full.jsonl" --threads 1)
  if(EXISTS "${WORK}/full.jsonl")
    message(FATAL_ERROR "a sweep whose journal writes failed wrote its rows file")
  endif()
endif()

# A journal that is a device (/dev/full reads as endless zeros) is refused, not read.
file(CREATE_LINK /dev/full "${WORK}/dev.jsonl.journal" SYMBOLIC)
expect(1 "dev.jsonl.journal: is not a regular file" "${CAPSIM}" sweep "${SWEEP}" -o "${WORK}/dev.jsonl")

# Two grids appended to one journal: the second header is named, no row of it is used.
execute_process(COMMAND "${CAPSIM}" sweep "${SWEEP}" -o "${WORK}/a.jsonl" RESULT_VARIABLE rc)
execute_process(COMMAND "${CAPSIM}" sweep "${SWEEP_B}" -o "${WORK}/b.jsonl" RESULT_VARIABLE rc_b)
if(NOT rc EQUAL 0 OR NOT rc_b EQUAL 0)
  message(FATAL_ERROR "the sweeps failed: ${rc} ${rc_b}")
endif()
file(READ "${WORK}/a.jsonl.summary.json" sa)
file(READ "${WORK}/b.jsonl.summary.json" sb)
string(JSON ha GET "${sa}" grid_hash)
string(JSON hb GET "${sb}" grid_hash)
file(STRINGS "${WORK}/a.jsonl" rows_a)
file(STRINGS "${WORK}/b.jsonl" rows_b)
list(GET rows_a 0 a0)
list(GET rows_b 1 b1)
file(WRITE "${WORK}/mixed.jsonl.journal" "{\"grid_hash\":\"${ha}\"}\n${a0}\n{\"grid_hash\":\"${hb}\"}\n${b1}\n")
expect(1 "mixed.jsonl.journal:3: a second header, of another grid: rows of two grids are mixed in the journal"
       "${CAPSIM}" sweep "${SWEEP}" -o "${WORK}/mixed.jsonl")
# The same without the second header: the row's inputs are not this grid's.
file(WRITE "${WORK}/mixed.jsonl.journal" "{\"grid_hash\":\"${ha}\"}\n${a0}\n${b1}\n")
expect(1 "mixed.jsonl.journal:3: is not a row of this grid: row 1 of this grid has the inputs"
       "${CAPSIM}" sweep "${SWEEP}" -o "${WORK}/mixed.jsonl")
if(EXISTS "${WORK}/mixed.jsonl")
  message(FATAL_ERROR "a sweep with a journal of two grids wrote its rows file")
endif()

# A temporary file left by a killed -o write is removed by the next write; one of a live
# process (PID 1) is not, nor a file of another name.
file(WRITE "${WORK}/.report.json.tmp2147483646" "partial")
file(WRITE "${WORK}/.report.json.tmp1" "a live writer's")
expect(0 "" "${CAPSIM}" train "${SCENARIO}" --format json -o "${WORK}/report.json")
if(EXISTS "${WORK}/.report.json.tmp2147483646" OR NOT EXISTS "${WORK}/.report.json.tmp1" OR NOT EXISTS "${WORK}/report.json")
  message(FATAL_ERROR "stale temporary files were not handled: the dead writer's must go, the live writer's stay")
endif()

# A report that cannot be written to stdout (/dev/full: no space left) is an error, not an
# answer lost in silence.
execute_process(COMMAND "${CAPSIM}" train "${SCENARIO}" --format json OUTPUT_FILE /dev/full RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "standard output: cannot write the report")
  message(FATAL_ERROR "a report lost on a full stdout: exit ${rc}: ${err}")
endif()
execute_process(COMMAND "${CAPSIM}" list models OUTPUT_FILE /dev/full RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "standard output: cannot write the report")
  message(FATAL_ERROR "a list lost on a full stdout: exit ${rc}: ${err}")
endif()
