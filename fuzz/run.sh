#!/usr/bin/env bash
# Build the fuzz targets (clang, libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) in
# the sanitized build (the asan preset, build-asan/, which also builds and runs the whole
# suite) and run each for TIME_S seconds, starting from its seeds in fuzz/corpus/<target>/.
# Inputs that reach new code are kept in build-asan/corpus/<target>/ (the seeds are not
# touched); a crash, leak or timeout leaves its input in build-asan/crashes/<target>/.
#
#   fuzz/run.sh TIME_S [target...]     (default: every target; e.g. fuzz/run.sh 60 raw profile)
#
# Exits 1 when any target found something. Reproduce one with
#   build-asan/fuzz/fuzz_<target> build-asan/crashes/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: fuzz/run.sh TIME_S [target...]" >&2
  exit 2
fi
time_s=$1
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(scenario hf_config gpu engine moe_kernels sweep plan validation report nccl_text nccl_json raw profile journal merge serving_steps)
fi

b=build-asan
cmake --preset asan >/dev/null
cmake --build "$b" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
found=()
for t in "${targets[@]}"; do
  mkdir -p "$b/corpus/$t" "$b/crashes/$t"
  echo "== fuzz_$t: ${time_s} s"
  if ! "$b"/fuzz/fuzz_"$t" -max_total_time="$time_s" -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$b/crashes/$t/" \
      "$b/corpus/$t" "fuzz/corpus/$t" 2>"$b/fuzz_$t.log"; then
    found+=("$t")
    tail -n 40 "$b/fuzz_$t.log"
  fi
  grep -E '^stat::number_of_executed_units|^Done|^#[0-9]+.*DONE' "$b/fuzz_$t.log" || true
done
if [ ${#found[@]} -gt 0 ]; then
  echo "found something in: ${found[*]} (inputs in $b/crashes/)" >&2
  exit 1
fi
echo "no findings"
