#!/usr/bin/env bash
# Issue 22 kernel bandwidth tables. Usage: bash run.sh OUTDIR PHASE... (sample, train)
set -uo pipefail
out=$1; shift
here=docs/measurements/2026-11-24-issue22-kernels
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
for phase in "$@"; do
    t0=$(date +%s)
    PYTHONPATH=.:${PYTHONPATH:-} TORCHINDUCTOR_PROFILE=1 TORCHINDUCTOR_PROFILE_OUTPUT=$out/bw-$phase.txt TORCHINDUCTOR_CACHE_DIR=/tmp/ind-bw-$phase \
        timeout 280 python3 $here/bandwidth_probe.py $phase > "$out/bw-$phase.log" 2>&1
    echo "$phase rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
    [[ -s $out/bw-$phase.txt ]] && python3 $here/bandwidth_table.py "$out/bw-$phase.txt" 4.0 30 > "$out/bw-$phase.table.txt"
done
