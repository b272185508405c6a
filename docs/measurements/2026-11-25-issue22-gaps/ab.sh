#!/usr/bin/env bash
# Issue 22: this tree's `fast` (combo kernels, the iteration as one CUDA graph) against the tree before
# it (.old/meddpm, from `git archive <rev> meddpm`), each in fresh processes of gap_probe.py on one card,
# one Inductor cache folder per tree; then the GPU unit tests of the training step, a full sample of
# each tree (probe.py sample of 2026-11-24) and the bf16 parity test.
# Usage: bash ab.sh OUTDIR   (the tree before in .old/, carried)
set -uo pipefail
out=$1
here=docs/measurements/2026-11-25-issue22-gaps
probes=docs/measurements/2026-11-24-issue22-probes
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv > "$out/gpu-state.txt"
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >> "$out/gpu-state.txt"
step() {  # NAME TREE(. or .old) TIMEOUT SCRIPT ARGS...
    local name=$1 tree=$2 limit=$3; shift 3
    local t0=$(date +%s.%N)
    PYTHONPATH=$tree:/tmp/site TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$(basename $tree) PYTHONUNBUFFERED=1 timeout $limit \
        python3 "$@" > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/summary.txt"
}
step old-cold .old 200 $here/gap_probe.py --label old-cold
step new-cold . 200 $here/gap_probe.py --label new-cold
step new1 . 80 $here/gap_probe.py --label new1
step old1 .old 80 $here/gap_probe.py --label old1
step new2 . 80 $here/gap_probe.py --label new2
grep -h "^PROBE" "$out"/*.log | python3 $here/table.py | tee -a "$out/summary.txt"
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-. timeout 150 python3 -m pytest -q tests/test_train.py -p no:cacheprovider > "$out/unit.log" 2>&1
echo "unit rc=$? $(tail -n 1 "$out/unit.log")" | tee -a "$out/summary.txt"
step sample-new . 100 $probes/probe.py sample --label sample-new
step sample-old .old 100 $probes/probe.py sample --label sample-old
grep -h "^PROBE" "$out"/sample-*.log | python3 $probes/sample_table.py | tee -a "$out/summary.txt"
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-. timeout 100 python3 -m pytest -q perf_tests/test_parity.py -k fast_keeps -p no:cacheprovider > "$out/parity.log" 2>&1
echo "parity rc=$? $(tail -n 1 "$out/parity.log")" | tee -a "$out/summary.txt"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$out/gpu-state.txt"
