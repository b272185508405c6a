#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-28-issue51-workers/gpu.sh OUT STAGE...
# Adds four stages to ../2026-11-28-issue51-fresh/gpu.sh (bytecode-in, restore, suite, pr, nightly, keep, ...),
# whose every other stage runs as it is, in the order given:
#   workers  three fresh processes of `fast` alone (python -m meddpm, 10 timed rounds) with the compile cache as it
#            stands, each line stamped with its seconds (stamp.py), and the process's exit after its last line:
#            1. TORCHINDUCTOR_COMPILE_THREADS=1, what f87e76d set on a cache hit (no compile workers; reverted
#               since), under py-spy (50 Hz, idle frames kept);
#            2. TORCHINDUCTOR_COMPILE_THREADS=<cores>: Inductor's pool of compile workers, torch's own choice;
#            3. as 1, not under py-spy.
#            The logged runs (h200-pr-workers/) ran f87e76d itself, without the variable in 1 and 3, and py-spy
#            attached to `timeout` then, not to Python, and recorded nothing.
#            Run after a stage that installs the wheels (restore).
#   precompile  two fresh processes of `fast` as in workers (each line stamped), with Dynamo's experimental
#            caching precompile on (TORCH_CACHING_PRECOMPILE=1): whether the second, finding the first's Dynamo
#            cache, compiles in less than the 5-6 s a cache hit takes while Dynamo traces again
#   pr-stop  the pull-request check as the workflow now runs it: --combos=opt1,fast --compare-to=HEAD
#            --perf-processes=5 --perf-until-detectable=0.01 (LIMIT, default 420 s); its log, results and summary in
#            OUT/pr-stop.tar.gz with the card's state and the machine's uptime before and after it
#            (pr-stop-gpu-state.csv). Run after a stage that installs the wheels (restore).
#   keep-inductor  the compile cache without its bytecode (which .gpu-cache/pycache.txz.part-* carries) into
#            OUT/compile-<arch>.tar.xz, the file the restore stage unpacks: one call carries it beside the tree
set -u
OUT=$1
shift
here=$(dirname "$0")
arch() {  # the architecture key of this machine's GPU, as the suite names it
  PYTHONPATH=/tmp/site:$PWD python3 -c \
    "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))"
}
card() {  # the card's state and the machine's uptime, one line each
  nvidia-smi --query-gpu=name,uuid,clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader
  echo "machine up $(cut -d' ' -f1 /proc/uptime) s"
}
for stage in "$@"; do
  case $stage in
    workers)
      mkdir -p /tmp/logs
      run() {  # NAME, then variables to set
        local name=$1
        shift
        env "$@" PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile \
          python3 "$here/stamp.py" timeout "${READY_LIMIT:-120}" ${SPY:+/tmp/site/bin/py-spy record --nonblocking \
          --idle --rate 50 --format raw -o "$OUT/$name.pyspy.txt" --} python3 -m meddpm --combos fast --iters 10 \
          > "/tmp/logs/$name.log" 2>&1
        grep -E "warm-up fast 1/|round 1/|where the time went|exit " "/tmp/logs/$name.log" | cut -c1-200
      }
      SPY=1 run workers-chosen-spy TORCHINDUCTOR_COMPILE_THREADS=1
      SPY= run workers-pool TORCHINDUCTOR_COMPILE_THREADS="$(nproc)"
      SPY= run workers-chosen TORCHINDUCTOR_COMPILE_THREADS=1
      cp /tmp/logs/workers-*.log "$OUT/" ;;
    precompile)
      mkdir -p /tmp/logs
      for n in 1 2; do
        TORCH_CACHING_PRECOMPILE=1 PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile \
          python3 "$here/stamp.py" timeout "${READY_LIMIT:-120}" python3 -m meddpm --combos fast --iters 10 \
          > "/tmp/logs/precompile-$n.log" 2>&1
        grep -E "warm-up fast 1/|round 1/|compiled in|where the time went|exit |Error|rror:" "/tmp/logs/precompile-$n.log" \
          | cut -c1-200 | head -12
      done
      cp /tmp/logs/precompile-*.log "$OUT/" ;;
    pr-stop)
      mkdir -p /tmp/logs
      card > /tmp/logs/pr-stop-gpu-state.csv
      start=$SECONDS
      PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile timeout "${LIMIT:-420}" \
        python3 -m pytest perf_tests/test_training.py -m "$(arch)" -k test_training_step --combos=opt1,fast \
        --compare-to=HEAD --perf-processes=5 --perf-until-detectable=0.01 -rfEs -p no:cacheprovider \
        --perf-results-dir=/tmp/logs/pr-stop > /tmp/logs/pr-stop.log 2>&1
      echo "rc $? wall $((SECONDS - start)) s" >> /tmp/logs/pr-stop.log
      card >> /tmp/logs/pr-stop-gpu-state.csv
      tar -czf "$OUT/pr-stop.tar.gz" -C /tmp/logs pr-stop.log pr-stop pr-stop-gpu-state.csv
      grep -E "process [0-9]+/|passed|failed|where the time went|time (unchanged|regression)" /tmp/logs/pr-stop.log \
        | cut -c1-230 ;;
    keep-inductor)
      key=$(arch)
      tar -cf - -C /tmp/meddpm-compile --exclude=./pycache . | xz -T16 -6 > "$OUT/compile-$key.tar.xz"
      ls -la "$OUT/compile-$key.tar.xz" ;;
    *) bash "$here/../2026-11-28-issue51-fresh/gpu.sh" "$OUT" "$stage" ;;
  esac
done
exit 0
