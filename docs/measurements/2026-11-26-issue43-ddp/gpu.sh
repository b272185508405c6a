#!/bin/bash
# On a two-GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue43-ddp/gpu.sh OUT STAGE
# STAGE: save_a (ddp2 cases of baseline, opt2, opt12 saved), save_b (opt1, amp_bf16, fast saved, then the
# all-reduce-after-backward's phases at one and two GPUs), save_all (all six combos, no phases).
# REQUIRE=H100: stop at once (exit 3) where the GPUs are not H100s. NO_PHASES=1: save_b without the phases.
set -u
OUT=$1
STAGE=$2
HERE=docs/measurements/2026-11-26-issue43-ddp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
if [ -n "${REQUIRE:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$REQUIRE"; then
  echo "not $REQUIRE: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c)"
  exit 3
fi
nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu-$STAGE.csv"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version())" \
  > "$OUT/torch-$STAGE.txt"
arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
case $STAGE in
save_a) combos=baseline,opt2,opt12 ;;
save_b) combos=opt1,amp_bf16,fast ;;
save_all) combos=baseline,opt1,opt2,opt12,amp_bf16,fast ;;
esac
start=$(date +%s)
python3 -m pytest perf_tests/test_multigpu.py -m multigpu -p no:cacheprovider -rfEs --combos=$combos \
  ${SAVE:+--save-baseline} --perf-results-dir="$OUT/ddp-$STAGE" > "$OUT/ddp-$STAGE.log" 2>&1
echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/ddp-$STAGE.log"
cp "baselines/$arch.json" "$OUT/$arch-after-$STAGE.json"
if [ "$STAGE" = save_b ] && [ -z "${NO_PHASES:-}" ]; then
  for n in 1 2; do
    python3 -m torch.distributed.run --standalone --nproc_per_node=$n $HERE/sync_phases.py "$OUT/sync-phases-$n.json" \
      > "$OUT/sync-phases-$n.log" 2>&1
  done
  tail -3 "$OUT"/sync-phases-*.log
fi
grep -E "GPUs|^ *(baseline|opt|amp|fast)|passed|failed|skipped|rc " "$OUT/ddp-$STAGE.log" | tail -30
