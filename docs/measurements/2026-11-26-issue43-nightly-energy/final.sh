#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue43-nightly-energy/final.sh OUT
# The final tree's A/B against the last good run, two eager combos only (no `fast`: a fresh machine's empty
# Inductor cache would take minutes), to see its energy verdicts in summary.md and the stopping rule at work.
set -u
OUT=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu-final.csv"
export PYTHONPATH=/tmp/site:$PWD
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
cp docs/measurements/2026-11-26-issue43-nightly/history.sqlite /tmp/history-final.sqlite
start=$(date +%s)
MEDDPM_HISTORY=/tmp/history-final.sqlite timeout 560 python3 -m pytest perf_tests/test_training.py -m "$arch" -rfEs \
  -p no:cacheprovider -k test_training_step --combos=opt1,amp_bf16 --perf-processes=4 --perf-until-detectable=0.01 \
  --perf-results-dir="$OUT/final" --compare-to=last-good > "$OUT/final.log" 2>&1
echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/final.log"
grep -v "^  \(round\|warm-up\|energy\) " "$OUT/final.log" | tail -30 | cut -c1-260
sed -n '/Energy verdicts/,/^A\/B sides/p' "$OUT/final/summary.md"
