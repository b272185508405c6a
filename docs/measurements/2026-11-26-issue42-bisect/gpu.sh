#!/bin/bash
# On the GPU machine, from the repository root: bash docs/measurements/2026-11-26-issue42-bisect/gpu.sh OUT STAGE
# STAGE: probe (combo-table candidates, a tiny-preset process smoke), probe_model (model-code candidates),
# an eager combo (bisect c00..c16, 3 processes a side), fast (bisect c13..c15, 2 processes a side).
set -u
OUT=$1
STAGE=$2
HERE=docs/measurements/2026-11-26-issue42-bisect
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv \
  > "$OUT/gpu-$STAGE.csv"
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())" \
  > "$OUT/torch-$STAGE.txt"
case $STAGE in
probe)
  python3 $HERE/probe.py > "$OUT/probe.log" 2>&1
  python3 -m meddpm --device cuda --preset tiny --combos opt1,fast --processes 2 --iters 3 \
    --json "$OUT/smoke.json" > "$OUT/smoke.log" 2>&1
  tail -5 "$OUT/probe.log"; tail -8 "$OUT/smoke.log"
  ;;
probe_model)
  python3 $HERE/probe_model.py --combo ${COMBO:-opt1} 2>&1 | grep -v Warning | tee "$OUT/probe-model-${COMBO:-opt1}.log"
  ;;
suite)
  # The counts gate across machine starts: SAVE=1 stores the training cases (counts among them) from 3
  # processes; a later start runs the same cases against what was saved.
  arch=$(python3 -c "import torch; from meddpm.judge.arch import detect_arch; print(detect_arch(torch.device('cuda')))")
  tag=${TAG:-$arch}
  python3 -m pytest perf_tests -m "$arch" -k "test_training_step and (amp_bf16 or fast or opt1)" -p no:cacheprovider \
    --perf-processes=3 ${SAVE:+--save-baseline} ${FORCE:+--force-save-baseline} --perf-results-dir="$OUT/suite-$tag" > "$OUT/suite-$tag.log" 2>&1
  echo "rc $?" >> "$OUT/suite-$tag.log"
  cp "baselines/$arch.json" "$OUT/$arch-after-$tag.json"
  grep -E "counts|passed|failed|rc " "$OUT/suite-$tag.log" | tail -25
  ;;
opt1|amp_bf16|opt12|fast)
  [ -d /tmp/scratch ] || python3 $HERE/make_history.py /tmp/scratch ${EAGER:+--eager $EAGER} > "$OUT/history.log"
  range=c00..c16; processes=3
  [ "$STAGE" = fast ] && range=${FAST_RANGE:-c13..c15} && processes=${FAST_PROCESSES:-2}
  start=$(date +%s)
  (cd /tmp/scratch && PYTHONPATH=/tmp/site:/tmp/scratch python3 -m meddpm --preset paper --bisect $range \
    --combos "$STAGE" --processes $processes --json "$OUT/bisect-$STAGE.json" > "$OUT/bisect-$STAGE.log" 2>&1)
  echo "rc $? wall $(( $(date +%s) - start )) s" >> "$OUT/bisect-$STAGE.log"
  grep -v "process [0-9]*/" "$OUT/bisect-$STAGE.log" | tail -30
  ;;
esac
