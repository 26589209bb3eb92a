#!/usr/bin/env bash
# Calibrate one GPU machine in one go: build capsim and capsim-calibrate, measure with
# --quick (under 5 minutes on one GPU), fit a profile, show it, and compare the default
# model with the measurements. Usage: calibrate/run-quick.sh OUT_DIR [SCENARIO]
set -euo pipefail
out=${1:?usage: calibrate/run-quick.sh OUT_DIR [SCENARIO]}
scenario=${2:-examples/llama3-8b-h100.json}
cd "$(dirname "$0")/.."
mkdir -p "$out"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu --target capsim capsim-calibrate
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/nvidia-smi.csv" || true
./build-gpu/cli/capsim calibrate shapes "$scenario" -o "$out/shapes.txt"
./build-gpu/calibrate/capsim-calibrate --quick --gemm-shapes "$out/shapes.txt" -o "$out/raw.jsonl" \
  2> >(tee "$out/calibrate.log" >&2)
./build-gpu/cli/capsim calibrate fit "$out/raw.jsonl" -o "$out/profile.json"
./build-gpu/cli/capsim calibrate show "$out/profile.json" --format table > "$out/profile.txt"
./build-gpu/cli/capsim train "$scenario" --format json > "$out/train-default.json"
./build-gpu/cli/capsim train "$scenario" --format json --calibration "$out/profile.json" > "$out/train-calibrated.json"
echo "done: $out"
