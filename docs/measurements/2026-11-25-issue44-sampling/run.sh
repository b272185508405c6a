#!/usr/bin/env bash
# Usage (repository root): [PROCESSES=N] bash docs/measurements/2026-11-25-issue44-sampling/run.sh OUTDIR COMBO...
# Each combo's full sample in N (default 2) fresh processes, one after another, after a record of the card's state.
set -uo pipefail
out=$1; shift
mkdir -p "$out"
nvidia-smi -q > "$out/gpu-state.txt" 2>&1
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())" >> "$out/gpu-state.txt"
here=$(dirname "$0")
for combo in "$@"; do
  for process in $(seq "${PROCESSES:-2}"); do
    PYTHONPATH=$PWD python3 "$here/sample.py" paper "$combo" 2>>"$out/stderr.log" | tee -a "$out/samples.jsonl"
  done
done
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,clocks_event_reasons.active --format=csv >> "$out/gpu-state-after.txt"
