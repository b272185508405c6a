#!/usr/bin/env bash
# Issue 22 A/B of this tree's meddpm against an earlier one, fresh processes alternating.
# Usage: bash ab.sh OUTDIR OLD_TAR STEP...  (OLD_TAR: `git archive REV meddpm` of the earlier commit)
# A step is NAME:CODE:CACHE:TIMEOUT:PROBE ARGS (CODE old or new; processes naming one CACHE share an
# Inductor cache folder, so the first is cold); the probe is ../2026-11-24-issue22-probes/probe.py.
set -uo pipefail
out=$1; old_tar=$2; shift 2
probe=docs/measurements/2026-11-24-issue22-probes/probe.py
mkdir -p "$out" /tmp/old && tar -xf "$old_tar" -C /tmp/old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
for stepdef in "$@"; do
    IFS=: read -r name code cache limit args <<< "$stepdef"
    [[ $code == old ]] && path=/tmp/old || path=.
    t0=$(date +%s)
    PYTHONPATH=$path:${PYTHONPATH:-} TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$cache PYTHONUNBUFFERED=1 \
        timeout "$limit" python3 $probe $args --label "$name" > "$out/$name.log" 2>&1
    echo "$name ($code) rc=$? $(( $(date +%s) - t0 )) s" >> "$out/summary.txt"
    grep -h "^PROBE" "$out/$name.log" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(' ', 1)[1])
    keys = ('warmup_s', 'median_ms', 'rel_iqr', 'full_s', 'losses')
    print('  ', {k: d[k] for k in keys if k in d})
    mix = d.get('kernel_ms') or d.get('kernel_ms_per_step')
    if mix:
        print('   kernels', round(sum(mix.values()), 3), mix)
" >> "$out/summary.txt"
done
cat "$out/summary.txt"
