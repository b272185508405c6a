#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue43-nightly/gpu.sh OUT STAGE
# STAGE good: the suite's training cases at commit GOOD (default a2498f1, the newest commit the machine's clone
#   holds) in a worktree of its own, appended to OUT/history.sqlite: the night before, a clean commit's run.
# STAGE nightly: the nightly workflow's suite step as written (.github/workflows/nightly.yml), today's tree
#   against the last good run that history names (HISTORY=path of the database from the good stage).
set -u
OUT=$1
STAGE=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu-$STAGE.csv"
export PYTHONPATH=/tmp/site:$PWD
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
start=$(date +%s)
case $STAGE in
good)
  git worktree add -f /tmp/good "${GOOD:-a2498f1}" > /dev/null 2>&1
  (cd /tmp/good && PYTHONPATH=/tmp/site:/tmp/good python3 -m pytest perf_tests -m "$arch" -k test_training_step \
    -p no:cacheprovider -rfEs --perf-energy=off --perf-results-dir="$OUT/good" --history="$OUT/history.sqlite" \
    > "$OUT/good.log" 2>&1)
  echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/good.log"
  tail -15 "$OUT/good.log"
  ;;
nightly)
  cp "$HISTORY" "$OUT/history.sqlite"
  MEDDPM_HISTORY="$OUT/history.sqlite" python3 -m pytest perf_tests -m "$arch" -rfEs -p no:cacheprovider \
    --perf-processes=3 --perf-results-dir="$OUT/nightly" --compare-to=last-good > "$OUT/nightly.log" 2>&1
  echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/nightly.log"
  grep -v "process [0-9]*/" "$OUT/nightly.log" | tail -45
  ;;
esac
