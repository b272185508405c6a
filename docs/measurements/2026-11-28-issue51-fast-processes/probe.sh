#!/bin/bash
# On a GPU machine, from the repository root, after ../2026-11-28-issue51-h200-fresh/gpu.sh's bytecode-in call:
#   bash docs/measurements/2026-11-28-issue51-fast-processes/probe.sh OUT
# Restores the compile cache as gpu.sh does, then runs process_probe.py (ROUNDS, default 150) in fresh processes one
# after another until LIMIT seconds (default 480) have passed; processes.jsonl gets each one's line, summary.txt
# the side-by-side table (summary.py; processes counted from 1); the process logs are packed into
# process-logs.tar.gz.
set -u
OUT=$1
here=docs/measurements/2026-11-28-issue51-fast-processes
export MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv,noheader > "$OUT/gpu-state.csv"
echo "machine up $(cut -d' ' -f1 /proc/uptime) s" >> "$OUT/gpu-state.csv"
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
mkdir -p "$MEDDPM_COMPILE_CACHE" && tar -xJf ".gpu-cache/compile-$arch.tar.xz" -C "$MEDDPM_COMPILE_CACHE"
start=$SECONDS
n=0
while [ $((SECONDS - start)) -lt "${LIMIT:-480}" ]; do
  n=$((n + 1))
  t=$SECONDS
  timeout 90 python3 $here/process_probe.py "${ROUNDS:-150}" > "$OUT/process-$n.log" 2>&1
  echo "process $n: rc $? in $((SECONDS - t)) s: $(grep -o '"median_ms": [0-9.]*' "$OUT/process-$n.log")"
  grep '^PROBE ' "$OUT/process-$n.log" | cut -c7- >> "$OUT/processes.jsonl"
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader >> "$OUT/gpu-state.csv"
python3 $here/summary.py "$OUT/processes.jsonl" | tee "$OUT/summary.txt"
# The device returns a few files only: the process logs travel packed.
tar -czf "$OUT/process-logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls process-*.log) && rm "$OUT"/process-*.log
