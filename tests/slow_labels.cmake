# Included by ctest after the GoogleTest cases are discovered: the slowest cases carry the
# label "slow" (about a third of the suite's time between them), so `ctest -LE slow` is a
# quick pass while working and CI still runs everything.
set_tests_properties(Validation.ServingCasesAllSimulatedWithinRecordedBounds Plan.ServingReplicasCoverTheTraffic
                     PROPERTIES LABELS slow)
