# Included by ctest after the GoogleTest cases are discovered: the slowest cases carry the
# label "slow" (about a third of the suite's time between them), so `ctest -LE slow` is a
# quick pass while working; CI runs them in the release suite and leaves them out of the
# sanitized one.
set_tests_properties(Validation.ServingCasesAllSimulatedWithinRecordedBounds Plan.ServingReplicasCoverTheTraffic
                     PROPERTIES LABELS slow)
