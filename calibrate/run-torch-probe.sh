#!/usr/bin/env bash
# Measure one GPU through PyTorch in one go, most wanted first, each group under its own
# time limit, nvidia-smi sampling the clock and power beside it; every file lands in OUT as
# soon as it is written, so a run cut short keeps what it measured.
# Usage: calibrate/run-torch-probe.sh OUT_DIR
set -u
out=${1:?usage: calibrate/run-torch-probe.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
probe="python3 calibrate/torch_probe.py"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > "$out/smi.csv" 2>/dev/null &
smi_pid=$!
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv
  timeout 105 $probe -o "$out/sustained.jsonl" --only clock,clock-fp8,train-clock,train-clock-fp8 --burn 15
  timeout 70 $probe -o "$out/host.jsonl" --only train-host --budget 55
  timeout 170 $probe -o "$out/probe.jsonl" --only decode-step,grouped --budget 140
  timeout 110 $probe -o "$out/kernels.jsonl" --only gemm,decode --budget 90
} > "$out/log.txt" 2>&1
kill $smi_pid 2>/dev/null
echo "done: $out"
