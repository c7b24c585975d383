#!/usr/bin/env bash
# The fused decomp launch on one lent GPU:
#   scripts/gpu_decomp.sh OUTDIR kernel   # bench/gpu_decomp.py (every way in, tile configs)
#                                         # and the CUDA tests of the decomp launch
#   scripts/gpu_decomp.sh OUTDIR step [OLDDIR]   # decomp-fixed graphed step, old and new,
#                                         # and a profile (scripts/gpu_generic_reuse.sh step)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_decomp.sh OUTDIR kernel|step [OLDDIR]}
WHAT=${2:?usage: scripts/gpu_decomp.sh OUTDIR kernel|step [OLDDIR]}
source "$(dirname "$0")/gpu_parts.sh"
if [ "$WHAT" = kernel ]; then
  part bench 300 python bench/gpu_decomp.py --out "$OUT/decomp.json" \
    --tiles "${TILES:-32x4,16x4,8x4}"
  part pytest_cuda 300 python -m pytest -q -p no:cacheprovider tests/test_triton_corrections.py \
    -k "${TESTS:-cuda and (decomp or threshold or transpose_contiguous)}"
  echo "failed parts: $fails" | tee -a "$OUT/parts.log"
  exit $fails
fi
RECIPES=${RECIPES:-bf16,decomp-fixed} PROFILE=${PROFILE:-bf16,decomp-fixed} \
  exec "$(dirname "$0")/gpu_generic_reuse.sh" "$OUT" step ${3:-}
