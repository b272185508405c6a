# One device call: the carried wheels (history's packages, missing on the device image), the working tree
# committed on the device (its .git is older), then ab.sh's A/Bs as given: NAME PASSES PROCESSES, repeated.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit
git add -A meddpm perf_tests tests baselines conftest.py && git -c user.email=dev@x -c user.name=dev commit -qm "device sync"
git log --oneline -1
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind-c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu-state.txt
python3 docs/measurements/2026-11-23-ab/calibrate.py | tee $OUT/calibrate.txt
while [ $# -ge 3 ]; do ARCH=${ARCH:-h200} bash docs/measurements/2026-11-23-ab/ab.sh "$1" "$2" "$3" fast; shift 3; done
