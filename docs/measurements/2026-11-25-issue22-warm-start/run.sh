#!/usr/bin/env bash
# Usage (from the repository root): bash run.sh OUTDIR NAME[:VAR=VALUE[,VAR=VALUE...]]...
# One process per argument, in order, each with those environment variables (see warm_probe.py).
# All share one Inductor cache folder (/tmp/ind-warm): the first compiles cold, the rest start warm.
set -uo pipefail
out=$1; shift
here=$(dirname "$0")
export PYTHONPATH=$PWD:${PYTHONPATH:-}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
for spec in "$@"; do
    IFS=: read -r name vars <<< "$spec"
    IFS=, read -r -a assignments <<< "$vars"
    t0=$(date +%s.%N)
    env "${assignments[@]}" TORCHINDUCTOR_CACHE_DIR=/tmp/ind-warm PYTHONUNBUFFERED=1 \
        timeout 400 python3 "$here/warm_probe.py" --label "$name" --rounds 100 > "$out/$name.log" 2>&1
    echo "$name ${vars:--} rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" >> "$out/summary.txt"
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$out/gpu-state.txt"
python3 - "$out" <<'PY' | tee "$out/table.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
env = dict(line.split(" ")[:2] for line in (out / "summary.txt").read_text().splitlines())
print(f"{'process':8} {'first s':>8} {'2nd s':>6} {'median ms':>9} {'rel IQR':>7} {'tracing s':>9} {'loss0':>9}  environment")
for log in sorted(out.glob("*.log"), key=lambda p: p.stat().st_mtime):
    lines = log.read_text().splitlines()
    probe = [l for l in lines if l.startswith("PROBE ")]
    if not probe:
        print(f"{log.stem:8} failed: {lines[-1] if lines else 'no output'}")
        continue
    d = json.loads(probe[0].split(" ", 1)[1])
    print(f"{d['label']:8} {d['warmup_s'][0]:8.2f} {d['warmup_s'][1]:6.2f} {d['median_ms']:9.3f} "
          f"{d['rel_iqr']:7.4f} {d['phases_s']['bytecode_tracing']:9.2f} {d['losses'][0]:9.6f}  {env.get(d['label'], '?')}")
PY
# The device returns a few files only: the logs travel as one archive.
tar -C "$out" -czf "$out/logs.tar.gz" $(cd "$out" && ls *.log) && rm "$out"/*.log
