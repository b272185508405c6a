#!/bin/bash
# The last GPU call of 2026-11-27 on an H200: one selected case (its counts judged against baselines/h200.json),
# then the two planted regressions of docs/measurements/2026-11-27-issue50-explain/gpu.sh, 2 processes a side.
# Run from the repository root: bash docs/measurements/2026-11-27-issue51-cost/h200.sh OUT
set -u
OUT=$1
bash docs/measurements/2026-11-27-issue51-cost/gpu.sh $OUT one > /tmp/one.txt 2>&1
cat /tmp/one.txt | tail -12
git add -A >/dev/null && git -c user.name=device -c user.email=device@example.invalid commit -qm "the tree sent to the device"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile
mkdir -p $OUT/explain
PROCESSES=2 OUT=$OUT/explain PYTHON=python3 timeout 250 bash docs/measurements/2026-11-27-issue50-explain/gpu.sh
cat $OUT/explain/summary.txt
grep -h -A12 "^amp_bf16: time" $OUT/explain/*.log | cut -c1-200
tar -czf $OUT/explain.tar.gz -C $OUT explain && rm -rf $OUT/explain
