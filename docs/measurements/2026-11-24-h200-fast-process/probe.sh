#!/usr/bin/env bash
# The probe's phases in fresh processes on one card (see probe.py), then fast data-parallel on one
# GPU through torchrun with the gradient all-reduce after backward (CUDA graphs kept) and with DDP.
# Usage: bash probe.sh OUTDIR
set -uo pipefail
out=$1
here=docs/measurements/2026-11-24-h200-fast-process
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >> "$out/gpu-state.txt"
run() {  # NAME CACHE ARGS...
    local name=$1 cache=$2; shift 2
    local t0=$(date +%s.%N)
    PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=$cache PYTHONUNBUFFERED=1 timeout 300 python3 $here/probe.py "$@" > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
}
run 1-cold /tmp/ind-a rounds --save-artifacts /tmp/artifacts.bin
run 2-warm /tmp/ind-a rounds
run 3-warm-no-cudnn-benchmark /tmp/ind-a nocudnn
run 4-mega-cache /tmp/ind-b mega --load-artifacts /tmp/artifacts.bin
for sync in ${DDP_SYNCS-after_backward ddp}; do
    t0=$(date +%s)
    PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=/tmp/ind-a PYTHONUNBUFFERED=1 timeout 240 python3 - > "$out/5-ddp1-$sync.log" 2>&1 <<EOF
import json, time
from meddpm.run.distributed import run_ddp
r = run_ddp("paper", "fast", 1, warmup=3, rounds=30, gradient_sync="$sync")
print("DDP1", json.dumps({"sync": r.gradient_sync, "slowest_ms_median": sorted(r.slowest_ms)[len(r.slowest_ms)//2],
      "no_sync_ms": r.rank_no_sync_ms[0][:5], "samples_ms": r.rank_samples_ms[0]}))
EOF
    echo "5-ddp1-$sync rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
done
grep -h "^PROBE\|^DDP1" "$out"/*.log | python3 -c "
import json, sys
for line in sys.stdin:
    tag, doc = line.split(' ', 1); d = json.loads(doc)
    if tag == 'DDP1':
        print('ddp1', d['sync'], 'median', round(d['slowest_ms_median'], 2), 'ms'); continue
    print(d['phase'], 'setup', d['setup_s'], 'warm', d['warmup_s'], 'process', d['process_s'], 'load', d['load_artifacts_s'],
          'median', round(d.get('median_ms', 0), 3), 'reliqr', round(d.get('rel_iqr', 0), 4),
          'se', {k: round(v*100, 3) for k, v in d.get('median_se_rel', {}).items()}, 'lag1', round(d.get('lag1_autocorrelation', 0), 3))
"
