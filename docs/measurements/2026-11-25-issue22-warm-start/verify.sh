#!/usr/bin/env bash
# Usage (from the repository root): bash verify.sh OUTDIR
# The kept change on a fresh machine: the suite for this card without energy, cold (its own empty
# Inductor cache) and again warm, then the bf16 parity test of `fast`.
set -uo pipefail
out=$1
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
arch=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o -i -m1 'h100\|h200' | tr A-Z a-z)
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind-verify PYTHONUNBUFFERED=1
for pass in cold warm; do
    t0=$(date +%s.%N)
    timeout 330 python3 -m pytest perf_tests -m "$arch" --perf-energy=off --perf-results-dir "$out/results-$pass" -p no:cacheprovider > "$out/suite-$pass.log" 2>&1
    echo "suite $arch $pass rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
done
timeout 200 python3 -m pytest perf_tests/test_parity.py -k fast_keeps -p no:cacheprovider > "$out/parity.log" 2>&1
echo "parity rc=$?" | tee -a "$out/summary.txt"
tail -n 1 "$out"/suite-*.log "$out/parity.log"
grep -h "warm-up fast\|fast " "$out/suite-warm.log" | head -8
# The device returns a few files only.
tar -C "$out" -czf "$out/logs.tar.gz" $(cd "$out" && ls -d *.log results-*) && rm -r "$out"/*.log "$out"/results-*
