#!/usr/bin/env bash
# Issue 22, twelfth session: what the eleventh session could not run with `fast` v12 (the iteration as one
# CUDA graph): the GPU unit tests, the bf16 parity test, and a full sample of this tree against v11's
# (.old/meddpm from `git archive 495ed00 meddpm`, carried), alternating fresh processes, one Inductor
# cache folder per tree.
# Usage (repository root, the wheels of .whl installed in /tmp/site): bash check.sh OUTDIR
set -uo pipefail
out=$1
probes=docs/measurements/2026-11-24-issue22-probes
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv > "$out/gpu-state.txt"
run() {  # NAME TREE(. or .old) TIMEOUT COMMAND...
    local name=$1 tree=$2 limit=$3; shift 3
    local t0=$(date +%s.%N)
    PYTHONPATH=$tree:/tmp/site TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$(basename $tree) PYTHONUNBUFFERED=1 timeout $limit \
        "$@" > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s $(tail -n 1 "$out/$name.log")" | tee -a "$out/summary.txt"
}
run unit . 200 python3 -m pytest -q tests -m gpu -p no:cacheprovider -rA
run parity . 120 python3 -m pytest -q perf_tests/test_parity.py -k fast_keeps -p no:cacheprovider -rA
run sample-new1 . 100 python3 $probes/probe.py sample --label sample-new1
run sample-old1 .old 100 python3 $probes/probe.py sample --label sample-old1
run sample-old2 .old 60 python3 $probes/probe.py sample --label sample-old2
run sample-new2 . 60 python3 $probes/probe.py sample --label sample-new2
grep -h "^PROBE" "$out"/sample-*.log | python3 $probes/sample_table.py | tee -a "$out/summary.txt"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$out/gpu-state.txt"
