#!/usr/bin/env bash
# Issue 22: gap_probe.py in fresh processes on one card, one Inductor cache folder per machine.
# Usage: bash run.sh OUTDIR STEP...   where a STEP is NAME[:INDUCTOR_KEY=VALUE[,KEY=VALUE...]]
# e.g. bash run.sh OUT ctl-cold ck-cold:combo_kernels=True ctl ck:combo_kernels=True
# (the first process of each variant compiles cold; later ones find its entries).
set -uo pipefail
out=$1; shift
here=docs/measurements/2026-11-25-issue22-gaps
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv > "$out/gpu-state.txt"
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >> "$out/gpu-state.txt"
for step in "$@"; do
    name=${step%%:*}
    opts=()
    if [[ $step == *:* ]]; then
        IFS=, read -ra kv <<< "${step#*:}"
        for o in "${kv[@]}"; do opts+=(--inductor "$o"); done
    fi
    t0=$(date +%s.%N)
    PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=/tmp/ind-gaps PYTHONUNBUFFERED=1 timeout 300 \
        python3 $here/gap_probe.py --label "$name" "${opts[@]}" > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$out/gpu-state.txt"
grep -h "^PROBE" "$out"/*.log | python3 $here/table.py | tee -a "$out/summary.txt"
