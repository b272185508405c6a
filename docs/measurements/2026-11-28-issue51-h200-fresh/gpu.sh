#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-28-issue51-h200-fresh/gpu.sh OUT STAGE...
# The nightly against the last good run in the history, side B's energy carried from that run where side A's agrees,
# on a scratch repository (../2026-11-27-issue51-alarm/night_history.py with LAST=1 and no plant: c00, then c01, a
# note), so that the last good run's commit can be checked out as git does in the workflow.
#   bytecode-in  unpack the carried .gpu-cache/pycache.txz.part-* into the cache folder (a call of its own)
#   restore      unpack .gpu-cache/compile-<arch>.tar.xz into the cache folder
#   good         the training cases of the six combos at c00, one process, against the stored baselines, into the
#                history (MEDDPM_HISTORY): the last good run (GOOD_LIMIT, default 200 s)
#   night        the nightly's command at c01: pytest perf_tests -m <arch> --compare-to=last-good --perf-processes=3
#                --perf-until-detectable=0.01 (NIGHT_LIMIT, default 420 s)
#   ready        one process of `fast` alone (python -m meddpm --combos fast --iters 10, not into the history), each
#                line stamped with its seconds (../2026-11-28-issue51-workers/stamp.py), under py-spy (100 Hz, idle
#                frames kept, not pausing the process) into OUT/ready.speedscope.json: where a process spends the
#                seconds before its first timed round (READY_LIMIT, default 90 s)
#   counts       a bisection's counts processes (../2026-11-28-issue51-carried/counts_process.py) of `fast` at c00, c04,
#                c05 and c08 of a night whose c05 plants five buffer passes a step (night_history.py, LAST=8 PLANT_AT=5
#                PLANT_PASSES=5, in /tmp/plant), each process's seconds and counts (COUNTS_LIMIT, default 150 s)
# STAMP=1 prefixes each line of the good and night stages' logs with its seconds (../2026-11-28-issue51-workers/stamp.py).
# Logs, results and summaries under /tmp/carried (kept between calls on a warm machine), packed into
# OUT/carried.tar.gz after every stage, with the card's state and the machine's uptime before each stage; each
# stage's log is also written into OUT as it runs (the logged call was cut short by the device's time during the
# night, whose log then never reached the archive; this line came after it).
set -u
OUT=$1
shift
export MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile MEDDPM_HISTORY=/tmp/carried-history.sqlite PYTHONUNBUFFERED=1
logs=/tmp/carried
repo=$PWD
mkdir -p "$logs"
card() {
  nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv,noheader >> "$logs/gpu-state.csv"
  echo "machine up $(cut -d' ' -f1 /proc/uptime) s before $1" >> "$logs/gpu-state.csv"
}
timed() {  # NAME LIMIT, then pytest's arguments; run in the scratch repository, its log also straight into OUT
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  (cd /tmp/night && timeout "$limit" ${STAMP:+python3 "$repo/docs/measurements/2026-11-28-issue51-workers/stamp.py"} \
    python3 -m pytest perf_tests -m "$arch" "$@" -rfEs -p no:cacheprovider \
    --perf-results-dir="$logs/$name") 2>&1 | tee "$OUT/$name.log" > "$logs/$name.log"
  echo "rc ${PIPESTATUS[0]} wall $((SECONDS - start)) s" | tee -a "$OUT/$name.log" >> "$logs/$name.log"
}
for stage in "$@"; do
  case $stage in
    bytecode-in)
      mkdir -p "$MEDDPM_COMPILE_CACHE" && cat .gpu-cache/pycache.txz.part-* | xz -d | tar -xf - -C "$MEDDPM_COMPILE_CACHE"
      du -sh "$MEDDPM_COMPILE_CACHE"/pycache
      card bytecode-in
      continue ;;
  esac
  if [ -z "${arch:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:/tmp/night
    arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
    [ -d /tmp/night ] || LAST=1 PLANT_AT=99 python3 docs/measurements/2026-11-27-issue51-alarm/night_history.py /tmp/night \
      > "$logs/history.log"
  fi
  card "$stage"
  case $stage in
    restore) mkdir -p "$MEDDPM_COMPILE_CACHE" && tar -xJf ".gpu-cache/compile-$arch.tar.xz" -C "$MEDDPM_COMPILE_CACHE" ;;
    good) git -C /tmp/night checkout -q c00
          timed good "${GOOD_LIMIT:-200}" -k test_training_step
          git -C /tmp/night checkout -q main ;;
    night) timed night "${NIGHT_LIMIT:-420}" --compare-to=last-good --perf-processes=3 --perf-until-detectable=0.01 ;;
    ready) (cd /tmp/night && env -u MEDDPM_HISTORY timeout "${READY_LIMIT:-90}" \
             python3 "$repo/docs/measurements/2026-11-28-issue51-workers/stamp.py" /tmp/site/bin/py-spy record \
             --nonblocking --idle --rate 100 --format speedscope -o "$OUT/ready.speedscope.json" -- \
             python3 -m meddpm --combos fast --iters 10) > "$logs/ready.log" 2>&1
           cp "$logs/ready.log" "$OUT/" ;;
    counts) [ -d /tmp/plant ] || LAST=8 PLANT_AT=5 PLANT_PASSES=5 python3 \
             docs/measurements/2026-11-27-issue51-alarm/night_history.py /tmp/plant > "$logs/plant-history.log"
            PYTHONPATH=/tmp/site:$repo timeout "${COUNTS_LIMIT:-150}" python3 \
              docs/measurements/2026-11-28-issue51-carried/counts_process.py /tmp/plant ${COUNTED:-c00 c04 c05 c08} \
              > "$logs/counts.log" 2>&1
            echo "rc $?" >> "$logs/counts.log"
            cp "$logs/counts.log" "$OUT/" ;;
    *) echo "unknown stage $stage" ;;
  esac
  tar -czf "$OUT/carried.tar.gz" -C "$logs" .  # after every stage: a call cut short keeps what it had
done
for log in "$logs"/*.log; do
  [ "$(basename "$log")" = history.log ] && continue
  echo "== $(basename "$log" .log): $(tail -n 1 "$log")"
  grep -E "process [0-9]+/|energy (unchanged|regression|improvement|not)|side B|passed|failed|where the time" "$log" \
    | cut -c1-260 | tail -n 24
done
exit 0
