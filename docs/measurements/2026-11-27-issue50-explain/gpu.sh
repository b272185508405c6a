#!/usr/bin/env bash
# Two regressions planted in throwaway commits of a scratch clone, and the A/B that has to explain each
# (docs/explain.md): one changes the dtypes of one module type's output (GroupNorm32 forgets to cast back),
# one grows memory but barely time (every ResBlock keeps a float32 copy of its hidden state across iterations).
# Each A/B's log, JSON and first lines land in $OUT. Nothing of this checkout changes; the clone is removed.
#
#   OUT=/tmp/out PYTHON=.venv/bin/python bash docs/measurements/2026-11-27-issue50-explain/gpu.sh
#   PRESET=tiny DEVICE=cpu COMBOS=baseline PROCESSES=2 OUT=/tmp/out bash .../gpu.sh   # the logic, on a CPU
set -euo pipefail

PRESET=${PRESET:-paper}
DEVICE=${DEVICE:-cuda}
COMBOS=${COMBOS:-amp_bf16}
PROCESSES=${PROCESSES:-3}
PYTHON=${PYTHON:-python}
OUT=${OUT:?set OUT to the folder for the logs}
PYTHON=$(command -v "$PYTHON" || echo "$PYTHON")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

SOURCE=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
git clone -q "$SOURCE" "$SCRATCH/clone"
cd "$SCRATCH/clone"
git config user.email planted@example.invalid
git config user.name "planted regression"
BASE=$(git rev-parse HEAD)

# plant NAME FILE OLD NEW: replace OLD by NEW in FILE (refusing where OLD is not there once) and commit it.
plant() {
    "$PYTHON" - "$2" "$3" "$4" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the anchor {old!r} is not there once; update gpu.sh")
open(path, "w").write(text.replace(old, new))
PY
    git commit -qam "throwaway: $1"
}

# ab NAME: the A/B of the planted commit (the clone's working tree) against BASE, then back to BASE.
ab() {
    local status=0
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m meddpm --preset "$PRESET" --device "$DEVICE" --combos "$COMBOS" \
        --compare-to "$BASE" --processes "$PROCESSES" --json "$OUT/$1.json" >"$OUT/$1.log" 2>"$OUT/$1.err" || status=$?
    echo "$1: meddpm-bench exit status $status (1: a combo worse than $BASE)" | tee -a "$OUT/summary.txt"
    grep -E "^[a-z0-9_]+: (time|peak memory|counts moved)" "$OUT/$1.log" | tee -a "$OUT/summary.txt" || true
    git reset -q --hard "$BASE"
}

{
    echo "preset $PRESET, device $DEVICE, combos $COMBOS, $PROCESSES processes a side, base $BASE"
    git log -1 --format='%H %s' "$BASE"
} >"$OUT/summary.txt"

# 1. dtypes in one module type: GroupNorm32 returns float32 where it received bfloat16.
plant "GroupNorm32 forgets to cast back" meddpm/model/nn.py \
    "return super().forward(x.to(norm_dtype(x))).type(x.dtype)" \
    "return super().forward(x.to(norm_dtype(x)))"
ab dtype-groupnorm

# 2. memory, barely time: each ResBlock keeps a float32 copy of its hidden state until its next forward.
plant "ResBlock keeps a float32 copy" meddpm/model/unet.py \
    "        h = self.in_layers(x)
" \
    "        h = self.in_layers(x)
        self.kept = h.detach().float()
"
ab memory-resblock
