#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue43-nightly-energy/gpu.sh OUT NAME
# The nightly workflow's suite step (.github/workflows/nightly.yml) with energy on both sides and the processes
# spent where the noise is: today's tree against the last good run of the history that the 2026-11-26 nightly
# measurement left (its good run, commit a2498f1, measured on another machine start earlier that day).
# NAME names the logs (cold1, cold2: fresh machines, Inductor's cache empty; warm: a run after cold2 on its machine).
# PROCESSES (default 4): --perf-processes; LIMIT (default 585): seconds before `timeout` ends pytest.
set -u
OUT=$1
NAME=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu-$NAME.csv"
git log -1 --format='device clone HEAD %H' >> "$OUT/gpu-$NAME.csv"
export PYTHONPATH=/tmp/site:$PWD
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
[ -e /tmp/history.sqlite ] || cp docs/measurements/2026-11-26-issue43-nightly/history.sqlite /tmp/history.sqlite
cp /tmp/history.sqlite "$OUT/history-before-$NAME.sqlite"
start=$(date +%s)
MEDDPM_HISTORY=/tmp/history.sqlite timeout "${LIMIT:-585}" python3 -m pytest perf_tests -m "$arch" -rfEs \
  -p no:cacheprovider --perf-processes="${PROCESSES:-4}" --perf-until-detectable=0.01 \
  --perf-results-dir="$OUT/$NAME" --compare-to=last-good > "$OUT/$NAME.log" 2>&1
echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/$NAME.log"
grep "process [0-9]*/" "$OUT/$NAME.log" | cut -c1-200
grep -v "process [0-9]*/\|^  \(round\|warm-up\|energy\) " "$OUT/$NAME.log" | tail -42
