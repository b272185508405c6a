#!/usr/bin/env bash
# Usage (repository root, the wheels of .whl carried): bash docs/measurements/2026-11-25-issue41-house/gpu.sh OUT STEP
#   STEP suite: the whole suite of this card's architecture with energy, as a nightly runs it in one process
#   STEP ab REV: an A/B of this tree against REV (opt1 and fast, 3 processes a side), the old tree's own worker
set -uo pipefail
out=$1; step=$2
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
arch=$(python3 -c "import torch; print('h200' if 'H200' in torch.cuda.get_device_name() else 'h100')")
nvidia-smi -q > "$out/gpu-state-$step.txt" 2>&1
git log --oneline -1 > "$out/tree-$step.txt"; git status --short | wc -l >> "$out/tree-$step.txt"
case $step in
  suite)
    /usr/bin/time -v python3 -m pytest perf_tests -m "$arch" -p no:cacheprovider -rfEs \
      --perf-results-dir "$out/suite-results" 2>"$out/suite-time.txt" | tee "$out/suite.log" ;;
  ab)
    python3 -m pytest perf_tests/test_training.py -k test_training_step -m "$arch" -p no:cacheprovider -rfEs \
      --combos=opt1,fast --compare-to="$3" --perf-processes=3 --perf-results-dir "$out/ab-results" | tee "$out/ab.log" ;;
esac
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,clocks_event_reasons.active --format=csv > "$out/gpu-after-$step.txt"
