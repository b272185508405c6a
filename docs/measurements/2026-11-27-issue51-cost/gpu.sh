#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-27-issue51-cost/gpu.sh OUT STAGE...
# What the suite costs from a freshly started machine, with the compile cache empty or restored (docs/ci.md).
# Stages, run in the order given:
#   restore  unpack .gpu-cache/compile-<arch>.tar.xz (a cache an earlier machine kept) into the cache folder
#   full     the sampling cases of fast and amp_bf16 timed whole (--perf-full-sample), beside their estimates
#   suite    pytest perf_tests -m <arch>, one process
#   one      pytest perf_tests -m <arch> -k "test_training_step and amp_bf16"
#   pr       the pull-request check: --combos=opt1,fast --compare-to=HEAD --perf-processes=$PR_PROCESSES (5)
#   nightly  the nightly's A/B: --perf-processes=3 --perf-until-detectable=0.01 --compare-to=HEAD
#   profiled the suite under cProfile (OUT/suite.prof, and the 40 costliest calls by cumulative time in the log)
#   probe    what this torch's profiler events carry (input_dtypes, linked_correlation_id)
#   save     pytest perf_tests -m <arch> -k test_training_step --save-baseline --perf-processes=3 (FORCE=1: forced)
#   keep     pack the cache folder into OUT/compile-<arch>.txz.part-* (15 MiB parts, xz: a third of gzip's size)
# Every stage's log, results and summary go into OUT/logs.tar.gz; the table last has each stage's exit status,
# wall time, the suite's own time split and each process's compile line.
set -u
OUT=$1
shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
logs=/tmp/logs
mkdir -p "$logs"
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$logs/gpu-state.csv"
git log -1 --format='device clone HEAD %H' >> "$logs/gpu-state.csv"
echo "machine up $(cut -d' ' -f1 /proc/uptime) s at the first stage" >> "$logs/gpu-state.csv"

suite() {  # NAME, then pytest's arguments
  local name=$1 start
  shift
  start=$SECONDS
  timeout "${LIMIT:-560}" python3 -m pytest "$@" -rfEs -p no:cacheprovider --perf-results-dir="$logs/$name" \
    > "$logs/$name.log" 2>&1
  echo "rc $? wall $((SECONDS - start)) s" >> "$logs/$name.log"
}

for stage in "$@"; do
  case $stage in
    restore) mkdir -p "$MEDDPM_COMPILE_CACHE" && tar -xJf ".gpu-cache/compile-$arch.tar.xz" -C "$MEDDPM_COMPILE_CACHE" ;;
    suite) suite suite perf_tests -m "$arch" ;;
    one) suite one perf_tests -m "$arch" -k "test_training_step and amp_bf16" ;;
    pr) suite pr perf_tests/test_training.py -m "$arch" -k test_training_step --combos=opt1,fast --compare-to=HEAD \
          --perf-processes="${PR_PROCESSES:-5}" ;;
    nightly) suite nightly perf_tests -m "$arch" --perf-processes=3 --perf-until-detectable=0.01 --compare-to=HEAD ;;
    full) suite full perf_tests/test_sampling.py -m "$arch" -k "fast or amp_bf16" --perf-full-sample ;;
    profiled)
      start=$SECONDS
      timeout "${LIMIT:-560}" python3 -m cProfile -o "$OUT/suite.prof" -m pytest perf_tests -m "$arch" -rfEs \
        -p no:cacheprovider --perf-results-dir="$logs/profiled" > "$logs/profiled.log" 2>&1
      echo "rc $? wall $((SECONDS - start)) s" >> "$logs/profiled.log"
      python3 -c "import pstats,sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(60)" \
        "$OUT/suite.prof" > "$logs/profiled-top.txt" 2>&1 ;;
    probe)
      python3 -c "import torch; from torch.autograd.profiler_util import FunctionEvent as F; import inspect; \
p = inspect.signature(F.__init__).parameters; print(torch.__version__, 'input_dtypes' in p, \
'linked_correlation_id' in p)" > "$logs/probe.log" 2>&1 ;;
    save) suite save perf_tests -m "$arch" -k test_training_step --save-baseline ${FORCE:+--force-save-baseline} \
          --perf-processes=3
      cp baselines/"$arch".json "$OUT/" ;;
    keep) tar -cf - -C "$MEDDPM_COMPILE_CACHE" . | xz -T16 -6 | split -b 15M - "$OUT/compile-$arch.txz.part-" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv >> "$logs/gpu-state.csv"
tar -czf "$OUT/logs.tar.gz" -C "$logs" .
ls -la "$OUT"
cat "$logs/gpu-state.csv"
for log in "$logs"/*.log; do
  echo "== $(basename "$log" .log): $(tail -n 1 "$log")"
  grep -E "passed|failed|where the time went|compiled in|first iteration|^meddpm: sample|measuring too|: .*(converged|limit|budget|processes)" \
    "$log" | cut -c1-230 | tail -n 24
done
