#!/bin/sh
# A long run shows a progress line on a terminal (a pseudo-terminal from util-linux
# `script`) and nothing when stderr is a file; the report is the same either way.
# Usage: progress_tty.sh CAPSIM SCENARIO WORKDIR. Exit 77 (skipped) without `script`, or
# when this machine ran the command in under 2.6 s (too fast for progress to show).
set -u
capsim=$1
scenario=$2
work=$3
command -v script >/dev/null 2>&1 || { echo "no util-linux script: skipped"; exit 77; }
mkdir -p "$work"
rm -f "$work/piped.json" "$work/tty.json" "$work/piped.err" "$work/typescript"
# The discrete-event engine on a deep interleaved pipeline with many microbatches: about a
# million tasks, a few seconds.
args="train $scenario --engine des --set training.pp=32 --set training.dp=4 --set training.vpp=3 --set training.global_batch=12288 --format json"

"$capsim" $args -o "$work/piped.json" 2>"$work/piped.err" || { echo "piped run failed"; exit 1; }
if [ -s "$work/piped.err" ]; then
  echo "stderr to a file is not empty:"; cat "$work/piped.err"; exit 1
fi

start=$(date +%s%N)
script -qec "\"$capsim\" $args -o \"$work/tty.json\"" "$work/typescript" >/dev/null 2>&1 </dev/null ||
  { echo "run on a terminal failed"; cat "$work/typescript"; exit 1; }
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))  # ms
cmp -s "$work/piped.json" "$work/tty.json" || { echo "the report differs on a terminal"; exit 1; }
if grep -q "capsim: train --engine des [0-9]*/[0-9]* tasks, .*/s, .* elapsed" "$work/typescript"; then
  echo "progress line shown in a run of ${elapsed} ms"
  exit 0
fi
if [ "$elapsed" -lt 2600 ]; then
  echo "ran in ${elapsed} ms, too fast to show progress: skipped"
  exit 77
fi
echo "no progress line on the terminal in a run of ${elapsed} ms:"
cat "$work/typescript"
exit 1
