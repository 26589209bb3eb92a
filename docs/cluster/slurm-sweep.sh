#!/usr/bin/env bash
# Run a capsim sweep as a Slurm job array: each array task computes one shard of the grid
# (capsim reads SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT), then one dependent job
# merges the parts after checking that every shard is present and from the same grid.
#
#   sbatch --array=0-15 docs/cluster/slurm-sweep.sh sweep.json results/rows.jsonl
#   sbatch --dependency=afterok:<array job id> --wrap \
#     "capsim merge results/rows.part-*-of-16.jsonl -o results/rows.jsonl"
#
#SBATCH --job-name=capsim-sweep
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
#SBATCH --output=capsim-sweep-%A_%a.log
set -euo pipefail
sweep_file="$1"
rows_file="$2"
mkdir -p "$(dirname "$rows_file")"
# An interrupted or preempted task rerun with the same arguments resumes its shard.
exec capsim sweep "$sweep_file" -o "$rows_file" --threads "${SLURM_CPUS_PER_TASK:-1}"
