#!/usr/bin/env bash
# Usage (from the repository root, the wheels of .whl installed): bash suite.sh OUTDIR PASS...
# Runs `pytest perf_tests -m ARCH` once per PASS, all with one Inductor cache folder (empty at first), every
# output line stamped with the seconds since that pass started. A PASS is NAME or NAME:OPTIONS, the extra
# options joined by +, e.g. `fill:--combos=fast+--perf-energy=off warm1 warm2`. h200-1 ran the first version of this script: the passes `cold` and
# `warm`, each under `timeout 290`.
set -uo pipefail
out=$1
shift
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
arch=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o -i -m1 'h100\|h200' | tr A-Z a-z)
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind-energy-phase PYTHONUNBUFFERED=1
stamp='import sys, time
t0 = time.time()
for line in sys.stdin:
    print(f"{time.time() - t0:7.1f} {line}", end="", flush=True)'
for pass in "$@"; do
    name=${pass%%:*}
    extra=()
    [ "$name" != "$pass" ] && IFS=+ read -ra extra <<< "${pass#*:}"
    t0=$(date +%s.%N)
    timeout 280 python3 -m pytest perf_tests -m "$arch" -rA "${extra[@]}" --perf-results-dir "$out/results-$name" \
        -p no:cacheprovider 2>&1 | python3 -c "$stamp" > "$out/suite-$name.log"
    echo "suite $arch $pass rc=${PIPESTATUS[0]} wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
    tail -n 1 "$out/suite-$name.log"
    [ -f "$out/results-$name/results.json" ] && python3 docs/measurements/2026-11-25-issue22-energy-phase/energy_table.py "$out/results-$name/results.json"
    # The device returns a few files only: one archive per pass, written as soon as the pass ends.
    tar -C "$out" -czf "$out/$name.tar.gz" "suite-$name.log" $(cd "$out" && ls -d "results-$name" 2>/dev/null) \
        && rm -rf "$out/suite-$name.log" "$out/results-$name"
done
