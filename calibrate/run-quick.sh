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
./build-gpu/calibrate/capsim-calibrate --quick --for "$scenario" -o "$out/raw.jsonl" \
  2> >(tee "$out/calibrate.log" >&2)
./build-gpu/cli/capsim calibrate fit "$out/raw.jsonl" -o "$out/profile.json"
./build-gpu/cli/capsim calibrate show "$out/profile.json" --format table > "$out/profile.txt"
./build-gpu/cli/capsim calibrate compare "$out/raw.jsonl" --gpu "${CAPSIM_GPU_PRESET:-h200-sxm-141gb}" --format table > "$out/default-vs-measured.txt"
./build-gpu/cli/capsim train "$scenario" --format json > "$out/train-default.json"
./build-gpu/cli/capsim train "$scenario" --format json --calibration "$out/profile.json" > "$out/train-calibrated.json"
echo "done: $out"
