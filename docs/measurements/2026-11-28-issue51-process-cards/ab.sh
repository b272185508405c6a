#!/bin/bash
# On a GPU machine, from the repository root, after ../2026-11-28-issue51-h200-fresh/gpu.sh's bytecode-in call:
#   bash docs/measurements/2026-11-28-issue51-process-cards/ab.sh OUT
# An A/B of amp_bf16 and fast, three processes a side, in the scratch repository of gpu.sh's restore stage (c01, a
# note, against c00): pytest perf_tests -m <arch> -k "test_training_step and (amp_bf16 or fast)" --compare-to=c00
# --perf-processes=3 (LIMIT, default 420 s), each line stamped with its seconds. Then each process's card
# (process_cards of results.json) and the summary's lines on processes apart from their side. The run's folder is
# packed into OUT/ab.tar.gz.
set -u
OUT=$1
repo=$PWD
bash docs/measurements/2026-11-28-issue51-h200-fresh/gpu.sh "$OUT" restore > "$OUT/restore.log" 2>&1
cp /tmp/carried/gpu-state.csv "$OUT/"
export MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/night
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
start=$SECONDS
(cd /tmp/night && timeout "${LIMIT:-420}" python3 "$repo/docs/measurements/2026-11-28-issue51-workers/stamp.py" \
  python3 -m pytest perf_tests -m "$arch" -k "test_training_step and (amp_bf16 or fast)" --compare-to=c00 \
  --perf-processes=3 -rfEs -p no:cacheprovider --perf-results-dir=/tmp/ab) > "$OUT/ab.log" 2>&1
echo "rc $? wall $((SECONDS - start)) s" >> "$OUT/ab.log"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader >> "$OUT/gpu-state.csv"
tar -czf "$OUT/ab.tar.gz" -C /tmp/ab .
python3 - <<'PY'
import json
import pandas as pd
cases = json.load(open("/tmp/ab/results.json"))["cases"]
rows = [{"combo": c["combo"], **card} for c in cases for card in c.get("process_cards", [])]
print(pd.DataFrame(rows).to_string(index=False))
PY
grep -A4 "Processes apart" /tmp/ab/summary.md || echo "no process apart from its side in summary.md"
grep -E "process [0-9]+/|passed|failed|apart|read .* ms, .* its side" "$OUT/ab.log" | cut -c1-300 | tail -20
