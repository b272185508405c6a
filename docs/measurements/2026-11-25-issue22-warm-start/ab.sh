#!/usr/bin/env bash
# Usage (from the repository root): bash ab.sh OUTDIR
# cuDNN autotuning on and off in fresh processes, alternating, with
# docs/measurements/2026-11-24-issue22-probes/probe.py: full 250-step samples of `fast` (3 warm-up
# steps, two samples, a kernel profile of 3 steps), then training iterations with their kernels by
# category. Samples and training use one Inductor cache folder each; the first process of each is cold.
set -uo pipefail
out=$1
probe=docs/measurements/2026-11-24-issue22-probes/probe.py
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$out/gpu-state.txt"
run() {  # NAME CACHE ARGS...
    local name=$1 cache=$2; shift 2
    local t0=$(date +%s.%N)
    PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$cache PYTHONUNBUFFERED=1 timeout 300 python3 $probe "$@" --label $name > "$out/$name.log" 2>&1
    echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" >> "$out/summary.txt"
}
off="--without cudnn_benchmark"
run s1-on s sample; run s2-off s sample $off; run s3-on s sample; run s4-off s sample $off; run s5-on s sample
run t1-on t train --kernel-mix --rounds 100; run t2-off t train --kernel-mix --rounds 100 $off
run t3-on t train --kernel-mix --rounds 100; run t4-off t train --kernel-mix --rounds 100 $off
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$out/gpu-state.txt"
python3 - "$out" <<'PY' | tee "$out/table.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for log in sorted(out.glob("*.log"), key=lambda p: p.stat().st_mtime):
    probe = [l for l in log.read_text().splitlines() if l.startswith("PROBE ")]
    if not probe:
        print(f"{log.stem:8} failed")
        continue
    d = json.loads(probe[0].split(" ", 1)[1])
    if d["phase"] == "sample":
        ms = d["kernel_ms_per_step"]
        print(f"{d['label']:8} warm-up {d['warmup_s']:6.2f} s  samples {d['full_s']} s  kernels/step "
              + " ".join(f"{k} {v}" for k, v in ms.items()))
    else:
        print(f"{d['label']:8} " + json.dumps({k: d[k] for k in d if k in ("warmup_s", "median_ms", "rel_iqr", "kernel_ms")}))
PY
tar -C "$out" -czf "$out/logs.tar.gz" $(cd "$out" && ls *.log) && rm "$out"/*.log
