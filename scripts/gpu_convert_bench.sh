#!/usr/bin/env bash
# The FP8 <-> MXFP4 and re-blocking kernels, checked against mxref then timed (bench/gpu_kernels.py,
# 8192^2, against a device copy in the same process), at the working tree and at an older
# mxkernels/triton_convert.py (put back afterwards), one process each:
#   scripts/gpu_convert_bench.sh OUTDIR OLD [REPEATS]
# OLD: a file in the tree (say .devcarry/triton_convert.old.py, made here with `git show
# REV:mxkernels/triton_convert.py`) or a commit; a lent machine's copy of .git may not have a
# recent commit (session 28: "invalid object name"), so pass a file there.
set -uo pipefail
OUT=${1:?outdir}; OLD=${2:?old commit}; REP=${3:-3}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/var/tmp/mxref_numba} MXREF_NUMBA_CACHE=1
K=(--kernel "mxfp4 -> e4m3 (group 32, unpacked codes)" --kernel "e4m3 -> mxfp4 (group 128, unpacked codes)"
   --kernel "reblock mxfp4 rows -> columns (unpacked codes)")
python3 bench/gpu_kernels.py --only quantizers "${K[@]}" --repeats "$REP" --out "$OUT/convert_new.json" \
  >"$OUT/convert_new.log" 2>&1 || echo "new: failed (convert_new.log)"
cp mxkernels/triton_convert.py /tmp/triton_convert.new.py
if [ -f "$OLD" ]; then cp "$OLD" /tmp/triton_convert.old.py
elif ! git show "$OLD:mxkernels/triton_convert.py" > /tmp/triton_convert.old.py; then
  echo "no $OLD here: pass the old file instead"; exit 1; fi
cp /tmp/triton_convert.old.py mxkernels/triton_convert.py
python3 bench/gpu_kernels.py --only quantizers "${K[@]}" --repeats "$REP" --out "$OUT/convert_old.json" \
  >"$OUT/convert_old.log" 2>&1 || echo "old: failed (convert_old.log)"
cp /tmp/triton_convert.new.py mxkernels/triton_convert.py
grep -h '^| .*\(e4m3\|reblock\|roofline: device copy\)' "$OUT/convert_new.md" "$OUT/convert_old.md" | cut -c1-160
