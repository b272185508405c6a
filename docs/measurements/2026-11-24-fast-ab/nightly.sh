# The nightly's training cases on one fresh card, timed: all six combos, 3 processes each, energy
# blocks in the first (as the nightly workflow runs them), no save. Usage: ARCH=h200 bash nightly.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu-state.txt
start=$(date +%s)
PYTHONUNBUFFERED=1 python3 -m pytest perf_tests/test_training.py -m "${ARCH:-h200}" -p no:cacheprovider -rfEs --perf-processes=3 \
  --perf-results-dir="$OUT/nightly" 2>&1 | tee "$OUT/nightly.log" | grep -E "process [0-9]|time (regression|unchanged|improvement)|passed|failed| s$"
echo "nightly training cases: wall $(( $(date +%s) - start )) s"
