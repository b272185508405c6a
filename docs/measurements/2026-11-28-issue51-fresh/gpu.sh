#!/bin/bash
# On a GPU machine, from the repository root: bash docs/measurements/2026-11-28-issue51-fresh/gpu.sh OUT STAGE...
# The compile cache restored whole on a fresh machine, in two device calls (with its bytecode it is more than one
# call carries): a first call unpacks the bytecode, the next the Inductor part and measures.
#   bytecode-out  pack the cache's Python bytecode (its pycache folder) into OUT/pycache.txz.part-* (15 MiB parts)
#   bytecode-in   unpack the carried .gpu-cache/pycache.txz.part-* into the cache folder
#   night-good, night, alarm, bisect   the stages good, night, alarm and bisect of
#                 ../2026-11-27-issue51-alarm/gpu.sh (LAST and PLANT_AT: the scratch night's length and its plant,
#                 night_history.py)
# Every other stage is ../2026-11-27-issue51-cost/gpu.sh's (restore, suite, one, pr, nightly, keep, ...).
set -u
OUT=$1
shift
export MEDDPM_COMPILE_CACHE=/tmp/meddpm-compile
echo "machine up $(cut -d' ' -f1 /proc/uptime) s at this call's start ($*)"
cost=()
night=()
bytecode_in=
bytecode_out=
for stage in "$@"; do
  case $stage in
    bytecode-in) bytecode_in=1 ;;  # first, whatever the order given
    bytecode-out) bytecode_out=1 ;;  # last
    night-good) night+=(good) ;;
    night|alarm|bisect) night+=("$stage") ;;
    *) cost+=("$stage") ;;
  esac
done
if [ -n "$bytecode_in" ]; then
  mkdir -p "$MEDDPM_COMPILE_CACHE" && cat .gpu-cache/pycache.txz.part-* | xz -d | tar -xf - -C "$MEDDPM_COMPILE_CACHE"
  du -sh "$MEDDPM_COMPILE_CACHE"/pycache
fi
[ ${#cost[@]} -gt 0 ] && bash docs/measurements/2026-11-27-issue51-cost/gpu.sh "$OUT" "${cost[@]}"
[ ${#night[@]} -gt 0 ] && bash docs/measurements/2026-11-27-issue51-alarm/gpu.sh "$OUT" "${night[@]}"
if [ -n "$bytecode_out" ]; then
  tar -cf - -C "$MEDDPM_COMPILE_CACHE" pycache | xz -T16 -6 | split -b 15M - "$OUT/pycache.txz.part-"
  du -sh "$MEDDPM_COMPILE_CACHE"/pycache
  ls -la "$OUT"
fi
exit 0
