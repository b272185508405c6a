#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-28-issue51-nightly-pr/gpu.sh OUT STAGE...
# Adds one stage to ../2026-11-28-issue51-fresh/gpu.sh (bytecode-in, restore, suite, pr, nightly, ...), whose every
# other stage runs as it is, in the order given:
#   ready  one fresh process of `fast` alone (python -m meddpm, 10 timed rounds) with the compile cache as it
#          stands: the process's wall time from its start, and its own line of where the time went (start-up,
#          compiling, warm-up before its first timed round); run after a stage that installs the wheels (restore)
set -u
OUT=$1
shift
here=$(dirname "$0")
for stage in "$@"; do
  case $stage in
    ready)
      mkdir -p /tmp/logs
      start=$(date +%s.%N)
      PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile \
        timeout "${READY_LIMIT:-300}" python3 -m meddpm --combos fast --iters 10 > /tmp/logs/ready.log 2>&1
      rc=$?
      echo "rc $rc process wall $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" \
        "$start" "$(date +%s.%N)") s" >> /tmp/logs/ready.log
      cp /tmp/logs/ready.log "$OUT/"
      grep -E "compiled in|where the time went|read ahead|process wall" /tmp/logs/ready.log | cut -c1-230 ;;
    *) bash "$here/../2026-11-28-issue51-fresh/gpu.sh" "$OUT" "$stage" ;;
  esac
done
exit 0
