#!/usr/bin/env bash
# Issue 22 probes in fresh processes on one card, sharing one Inductor cache folder (see probe.py):
# Dynamo's caching precompile (save, then load), the warm control, cuDNN trying every engine,
# sampling with and without CUDA graphs, and the first convolution's padded input channels. Usage: bash probe.sh OUTDIR [PHASES...]
# Phases 1-6 ran at commit 361a9f1 (sampling with CUDA graphs, since reverted); phases 7-10, 7b, 8b at
# 0451923, whose combo flag input_channels_padded was reverted after them (fc7559a): they need that commit.
set -uo pipefail
out=$1; shift
here=docs/measurements/2026-11-24-issue22-probes
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >> "$out/gpu-state.txt"
run() {  # NAME TIMEOUT ARGS...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s.%N)
    PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=/tmp/ind-p PYTHONUNBUFFERED=1 timeout $limit python3 $here/probe.py "$@" --label $name > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
}
for phase in "${@:-1 2 3 4 5 6}"; do
    case $phase in
        1) run 1-cold-precompile-save 240 train --precompile --save-precompile ;;
        2) run 2-warm-precompile-load 120 train --precompile ;;
        3) run 3-warm-control 120 train ;;
        4) run 4-warm-cudnn-every-engine 240 train --cudnn-limit 0 ;;
        5) run 5-sample-graphs 200 sample ;;
        6) run 6-sample-no-graphs 200 sample --no-graphs ;;
        7) run 7-train-padded 200 train --kernel-mix ;;
        8) run 8-train-unpadded 200 train --kernel-mix --without input_channels_padded ;;
        9) run 9-sample-padded 150 sample ;;
        10) run 10-sample-unpadded 150 sample --without input_channels_padded ;;
        7b) run 7b-train-padded 90 train ;;
        8b) run 8b-train-unpadded 90 train --without input_channels_padded ;;
    esac
done
grep -h "^PROBE" "$out"/*.log | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(' ', 1)[1])
    if d['phase'] == 'train':
        print(d['label'], 'setup', d['setup_s'], 'warm', d['warmup_s'], 'median', d['median_ms'], 'reliqr', d['rel_iqr'],
              'process', d['process_s'], 'loss0', round(d['losses'][0], 5), 'dyncache', d['counters'].get('dynamo_cache'),
              'kernels', round(sum(d.get('kernel_ms', {}).values()) / 2, 2), {k: round(v / 2, 2) for k, v in d.get('kernel_ms', {}).items()})
    else:
        print(d['label'], 'graphs', d['cuda_graphs'], 'warmup', d['warmup_s'], 'full', d['full_s'], 'process', d['process_s'],
              'kernel ms/step', round(sum(d['kernel_ms_per_step'].values()), 2), d['kernel_ms_per_step'])
"
