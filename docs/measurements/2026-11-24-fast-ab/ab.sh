#!/usr/bin/env bash
# One A/B of the suite on this GPU: the working tree (optionally with a planted slowdown) against
# HEAD, in alternating processes. Usage: ARCH=h200 ab.sh NAME PASSES PROCESSES [COMBOS]
# (as docs/measurements/2026-11-23-ab/ab.sh, for the tree whose training step is meddpm/run/train.py)
set -uo pipefail
name=$1 passes=$2 processes=$3 combos=${4:-fast}
here=docs/measurements/2026-11-24-fast-ab
git checkout -q -- meddpm  # start from the committed code
[ "$passes" -gt 0 ] && python3 $here/plant.py "$passes"
start=$(date +%s)
PYTHONUNBUFFERED=1 python3 -m pytest perf_tests/test_training.py -k test_training_step -m "$ARCH" -p no:cacheprovider \
  -rfEs --combos="$combos" --compare-to=HEAD --perf-processes="$processes" \
  --perf-results-dir="$OUT/$name" 2>&1 | tee "$OUT/$name.log" | grep -E "process [0-9]|time (regression|unchanged|improvement)|passed|failed"
echo "$name: wall $(( $(date +%s) - start )) s"
git checkout -q -- meddpm
