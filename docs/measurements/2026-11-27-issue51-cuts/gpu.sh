#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-27-issue51-cuts/gpu.sh OUT STAGE...
# Stages of ../2026-11-27-issue51-cost/gpu.sh (its logs under /tmp/logs), then, in this order:
#   pyspy     the suite once more under py-spy (sampling, not pausing the process: --nonblocking, 50 Hz), its stacks
#             collapsed into OUT/suite.pyspy.txt (py-spy's wheel among the carried .whl)
#   diagnose  diagnose.py: sampling, profiling and fast's compile part by part
set -u
OUT=$1
shift
here=docs/measurements/2026-11-27-issue51-cuts
# The other stages run first, in their order; diagnose last.
cost=()
diagnose=
pyspy=
for stage in "$@"; do
  case $stage in
    diagnose) diagnose=1 ;;
    pyspy) pyspy=1 ;;
    *) cost+=("$stage") ;;
  esac
done
[ ${#cost[@]} -gt 0 ] && bash docs/measurements/2026-11-27-issue51-cost/gpu.sh "$OUT" "${cost[@]}"
if [ -n "$pyspy" ]; then
  arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
  start=$SECONDS
  PYTHONPATH=/tmp/site:$PWD MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile timeout "${LIMIT:-300}" \
    /tmp/site/bin/py-spy record --nonblocking --rate 50 --format raw -o "$OUT/suite.pyspy.txt" -- \
    python3 -m pytest perf_tests -m "$arch" -rfEs -p no:cacheprovider --perf-results-dir=/tmp/logs/pyspy \
    > "$OUT/pyspy.log" 2>&1
  echo "rc $? wall $((SECONDS - start)) s" >> "$OUT/pyspy.log"
  grep -E "passed|failed|where the time went" "$OUT/pyspy.log" | cut -c1-230
fi
if [ -n "$diagnose" ]; then
  PYTHONPATH=$PWD MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile timeout "${DIAGNOSE_LIMIT:-300}" \
    python3 "$here/diagnose.py" "$OUT" > "$OUT/diagnose.log" 2>&1
  echo "rc $?" >> "$OUT/diagnose.log"
  tail -n 12 "$OUT/diagnose.log"
fi
