#!/bin/bash
# On a GPU machine, from the repository root (after gpu.sh installed .whl into /tmp/site):
# bash docs/measurements/2026-11-27-issue51-cost/worker_profile.sh OUT
# One measuring worker of opt1 and fast (as the pull-request check starts ten of them) under cProfile, its wall time
# beside: where a worker's seconds go outside the phases the campaign counts.
set -u
OUT=$1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MEDDPM_COMPILE_CACHE=${MEDDPM_COMPILE_CACHE:-/tmp/meddpm-compile}
settings=$(python3 -c "
from meddpm.measure.campaign.settings import BENCH, SUITE, campaign_settings, worker_arguments
print(worker_arguments(campaign_settings({}, SUITE, True, energy=False))[1])")
start=$SECONDS
python3 -X importtime -m cProfile -o /tmp/worker.prof -m meddpm.measure.processes.worker --workload "$PWD" \
  --preset paper --combos opt1,fast --device cuda:0 --settings "$settings" --out /tmp/worker.json \
  > /tmp/worker.out 2> /tmp/importtime.txt
echo "worker rc $? wall $((SECONDS - start)) s"
python3 - <<'PY'
import json, pstats
doc = json.load(open("/tmp/worker.json"))
for r in doc["results"]:
    print(r["combo"], {k: round(v, 1) for k, v in r["phase_s"].items()}, r.get("compile"))
pstats.Stats("/tmp/worker.prof").sort_stats("cumulative").print_stats(30)
PY
sort -t'|' -k2 -n -r /tmp/importtime.txt | head -15
