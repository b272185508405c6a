#!/usr/bin/env bash
# Issue 22 compile probes (see compile_probe.py). Usage: bash run.sh OUTDIR STEP...
# A step is NAME:CACHE:TIMEOUT:MODES[:PROBE ARGS ...]; processes that name the same CACHE share one
# Inductor cache folder (/tmp/ind-CACHE), so the first is cold and later ones warm. MODES, comma-separated:
# spy (under py-spy), old (the meddpm package unpacked in /tmp/old, an earlier commit's, in place of this one).
set -uo pipefail
out=$1; shift
here=docs/measurements/2026-11-24-issue22-compile
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
nproc >> "$out/gpu-state.txt"
spy=""
if command -v py-spy >/dev/null && py-spy record -r 10 -f raw -o /tmp/spytest.txt -- python3 -c "import time; time.sleep(0.5)" >/dev/null 2>&1; then
    spy=py-spy
fi
echo "py-spy: ${spy:-unavailable}" | tee -a "$out/summary.txt"
for stepdef in "$@"; do
    IFS=: read -r name cache limit mode extra <<< "$stepdef"
    t0=$(date +%s.%N)
    code=.
    [[ $mode == *old* ]] && code=/tmp/old
    env=(PYTHONPATH=$code:${PYTHONPATH:-} TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$cache PYTHONUNBUFFERED=1)
    if [[ $mode == *spy* && -n $spy ]]; then
        env "${env[@]}" timeout $limit py-spy record --idle --threads -r 50 -f raw -o "$out/$name.spy.txt" -- \
            python3 $here/compile_probe.py --label $name $extra > "$out/$name.log" 2>&1
    else
        env "${env[@]}" timeout $limit python3 $here/compile_probe.py --label $name $extra > "$out/$name.log" 2>&1
    fi
    rc=$?
    echo "$name rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
    grep -h "^PROBE" "$out/$name.log" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(' ', 1)[1])
    print('  ', d['label'], d['inductor'], 'threads', d['compile_threads'], 'import', d['import_s'], 'setup', d['setup_s'],
          'first', d['warmup_s'], 'median', d['median_ms'], 'reliqr', d['rel_iqr'], 'process', d['process_s'],
          'loss0', round(d['losses'][0], 5), d['phases_s'], 'bench', d['counters'].get('inductor', {}).get('benchmarking.InductorBenchmarker.benchmark_gpu'))
" | tee -a "$out/summary.txt"
done
for f in "$out"/*.spy.txt; do
    [[ -e $f ]] || continue
    python3 $here/spy_table.py "$f" 50 > "${f%.spy.txt}.spy-table.txt" 2>&1
    gzip -9 "$f"
done
