#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-27-issue51-alarm/gpu.sh OUT STAGE...
# A nightly that bisects its own alarm, as .github/workflows/nightly.yml runs it, on a scratch repository
# (night_history.py: c00 .. c04, fast 3.5 % slower from c03), `fast` only, so that each stage fits a device call.
#   restore  unpack the carried compile cache (.gpu-cache/compile-<arch>.tar.xz)
#   good     the night at c00, against the stored baselines, into the history: the last good run
#   night    the night at c04 (main): the workflow's A/B against the last good run (3 processes a side at most,
#            NIGHT_PROCESSES to change it, until 1 % is detectable); exit status 1 where a case is slower
#   alarm    the workflow's next step: python -m meddpm.bench.alarm on the night's results, within BUDGET seconds
#            (ALARM_ARGS: more of its options, e.g. --processes 2)
#   bisect   a bisection on its own, as a user runs it: meddpm-bench --bisect c00..main --combos fast, 3+3
#            processes a step, no budget (its ends measured by an A/B run of its own)
# Logs and results under /tmp/night-out (kept between calls on a warm machine), copied to OUT as night-logs.tar.gz.
set -u
OUT=$1
shift
HERE=$PWD/docs/measurements/2026-11-27-issue51-alarm
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:/tmp/night PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile
export MEDDPM_HISTORY=/tmp/night-history.sqlite
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
logs=/tmp/night-out
mkdir -p "$logs"
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  >> "$logs/gpu-state.csv"
echo "machine up $(cut -d' ' -f1 /proc/uptime) s at the first stage of this call ($*)" >> "$logs/gpu-state.csv"
[ -d /tmp/night ] || python3 "$HERE/night_history.py" /tmp/night > "$logs/history.log"
night=(python3 -m pytest perf_tests -m "$arch" -k "test_training_step and fast" -rfEs -p no:cacheprovider)
timed() {  # NAME, then the command
  local name=$1 start=$SECONDS
  shift
  (cd /tmp/night && timeout "${LIMIT:-560}" "$@") > "$logs/$name.log" 2>&1
  echo "rc $? wall $((SECONDS - start)) s" >> "$logs/$name.log"
}
for stage in "$@"; do
  case $stage in
    restore) mkdir -p "$MEDDPM_COMPILE_CACHE" && tar -xJf ".gpu-cache/compile-$arch.tar.xz" -C "$MEDDPM_COMPILE_CACHE" ;;
    good) git -C /tmp/night checkout -q c00
          timed good "${night[@]}" --perf-results-dir="$logs/good"
          git -C /tmp/night checkout -q main ;;
    night) timed night "${night[@]}" --perf-processes="${NIGHT_PROCESSES:-3}" --perf-until-detectable=0.01 --compare-to=last-good \
             --perf-results-dir="$logs/night" ;;
    alarm) timed alarm python3 -m meddpm.bench.alarm "$logs/night" --bisect-budget "${BUDGET:-420}" ${ALARM_ARGS:-} ;;
    bisect) timed bisect python3 -m meddpm --bisect c00..main --combos fast --processes 3 --json "$logs/bisect.json" ;;
    *) echo "unknown stage $stage" ;;
  esac
  tar -czf "$OUT/night-logs.tar.gz" -C "$logs" .  # after every stage: a call cut short keeps what it had
done
for log in "$logs"/*.log; do
  echo "== $(basename "$log" .log): $(tail -n 1 "$log")"
  grep -vE "process [0-9]+/|^ +round " "$log" | grep -E "culprit|step [0-9]|slower|regression|passed|failed|where the time|budget|last good|moved" | cut -c1-240 | tail -n 14
done
