# capsim merge refuses parts that do not make one grid (cmake -P; used by cli_tests.cmake):
# parts of two grids, a row outside the grid, a row of another shard, a row twice.
#   CAPSIM  the capsim binary   A, B  two sweep files of the same size   WORK  a scratch folder
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
foreach(g A B)
  foreach(i 0 1)
    execute_process(COMMAND "${CAPSIM}" sweep "${${g}}" -o "${WORK}/${g}.jsonl" --shard ${i}/2 RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "sweep ${g} shard ${i}/2 failed (${rc}): ${err}")
    endif()
  endforeach()
endforeach()

# expect_merge(<expected stderr text> PARTS...): the merge exits 1, names the problem, writes nothing.
function(expect_merge text)
  file(REMOVE "${WORK}/merged.jsonl")
  execute_process(COMMAND "${CAPSIM}" merge ${ARGN} -o "${WORK}/merged.jsonl" RESULT_VARIABLE rc ERROR_VARIABLE err)
  string(FIND "${err}" "${text}" pos)
  if(NOT rc EQUAL 1 OR pos EQUAL -1 OR EXISTS "${WORK}/merged.jsonl")
    message(FATAL_ERROR "merge ${ARGN}: expected exit 1 with \"${text}\", got ${rc}:\n${err}")
  endif()
endfunction()

# A copy of part 0 of grid A (with its summary) whose rows are `rows`.
function(tampered name rows)
  file(WRITE "${WORK}/${name}.jsonl" "${rows}")
  file(COPY_FILE "${WORK}/A.part-0-of-2.jsonl.summary.json" "${WORK}/${name}.jsonl.summary.json")
endfunction()

# Parts of two grids: named, with the grid the first part set.
expect_merge("B.part-1-of-2.jsonl: comes from a different grid than" "${WORK}/A.part-0-of-2.jsonl" "${WORK}/B.part-1-of-2.jsonl")

file(READ "${WORK}/A.part-0-of-2.jsonl" a0)
file(READ "${WORK}/A.part-1-of-2.jsonl" a1)
string(REGEX MATCH "^[^\n]*\n" a1_first "${a1}")
string(REGEX MATCH "^[^\n]*\n" a0_first "${a0}")
# A row whose index is outside the grid.
string(REGEX REPLACE "\"index\":0," "\"index\":99," outside "${a0_first}")
tampered(outside "${a0}${outside}")
expect_merge("outside.jsonl:7: is not a row of this grid" "${WORK}/outside.jsonl" "${WORK}/A.part-1-of-2.jsonl")
# A row of shard 1 in the part of shard 0.
tampered(foreign "${a0}${a1_first}")
expect_merge("row belongs to shard 1, not to this part's shard 0" "${WORK}/foreign.jsonl" "${WORK}/A.part-1-of-2.jsonl")
# A row twice.
tampered(twice "${a0}${a0_first}")
expect_merge("twice.jsonl:7: row appears twice" "${WORK}/twice.jsonl" "${WORK}/A.part-1-of-2.jsonl")
# A row missing from a part its summary counts.
string(FIND "${a0}" "\n" eol)
math(EXPR eol "${eol} + 1")
string(SUBSTRING "${a0}" ${eol} -1 short)
tampered(short "${short}")
expect_merge("short.jsonl: holds other rows than its summary counts (6) (got 5 rows)" "${WORK}/short.jsonl" "${WORK}/A.part-1-of-2.jsonl")

# The parts of one grid still merge.
execute_process(COMMAND "${CAPSIM}" merge "${WORK}/A.part-0-of-2.jsonl" "${WORK}/A.part-1-of-2.jsonl" -o "${WORK}/merged.jsonl"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "merge of one grid's parts failed (${rc}): ${err}")
endif()
