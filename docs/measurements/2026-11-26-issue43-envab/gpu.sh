#!/bin/bash
# On the GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue43-envab/gpu.sh OUT [STAGE]
# An A/B across environments: the same tree and combo (opt1, TF32 tensor cores, paper preset), side B with one
# environment variable more (--compare-env), 2 processes a side. STAGE: forward, reversed or both (default).
#
# The variable: NVIDIA_TF32_OVERRIDE=0, read by cuDNN and cuBLAS themselves, turns TF32 off in every
# convolution and matmul whatever PyTorch asks (NVIDIA's documented global override), so opt1's cuDNN plans
# move from TF32 tensor-core kernels to plain fp32 ones: a changed kernel choice that no torch flag makes,
# and one that does not hang on a torch flag's life (TORCH_CUDNN_V8_API_DISABLED is not honoured by every
# release, and another cuDNN heuristics mode need not pick another kernel). Only the value 0 overrides.
#   forward:  A = this environment, B = with NVIDIA_TF32_OVERRIDE=0: B several times slower, verdict
#             "improvement" for A (the explanation rows come only where A is flagged, so none here).
#   reversed: A = this environment with NVIDIA_TF32_OVERRIDE=0 exported, B = with NVIDIA_TF32_OVERRIDE=1 (no
#             override): A is the slow side, a "regression" with exit status 1, and the "what moved" rows name
#             the fp32 kernels that appeared in A and the TF32 ones that vanished.
# Each side's interpreter, torch, CUDA and cuDNN are in the "A: ... | B: ..." line and the JSON's "sides".
set -u
OUT=$1
STAGE=${2:-both}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu.csv"
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())" > "$OUT/torch.txt"
ab() {  # NAME, then the environment of side A (VAR=VALUE or nothing) and side B's --compare-env value
  local name=$1 side_a=$2 side_b=$3 start
  start=$(date +%s)
  env $side_a python3 -m meddpm --device cuda --preset paper --combos opt1 --warmup ${WARMUP:-3} \
    --iters ${ITERS:-10} --processes 2 --compare-env "$side_b" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/$name.log"
  grep -v "process [0-9]*/" "$OUT/$name.log" | tail -30
}
case $STAGE in forward | both) ab forward "" NVIDIA_TF32_OVERRIDE=0 ;; esac
case $STAGE in reversed | both) ab reversed NVIDIA_TF32_OVERRIDE=0 NVIDIA_TF32_OVERRIDE=1 ;; esac
