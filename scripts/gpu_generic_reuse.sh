#!/usr/bin/env bash
# The generic path's shared work (ms-fp4, decomp-fixed) on one lent GPU, in two calls (each
# under the 10-minute limit):
#   scripts/gpu_generic_reuse.sh OUTDIR step [OLDDIR]
#       bench/train_step.py, llama-125m seq 1024 x 16, graphed, bf16 + ms-fp4 + decomp-fixed:
#       this tree, then (OLDDIR given) the same with OLDDIR's files laid over a copy of the
#       tree (OLDDIR holds the changed files at their old commit, by repo path: the device's
#       .git may lack the commit), one after the other on the same GPU; a profiled ms-fp4
#       step of this tree (top kernels, scripts/gpu_profile_step.py)
#   scripts/gpu_generic_reuse.sh OUTDIR checks
#       CUDA tests (scale_outer, shared == separate operands, triton == torch layers, the
#       tensor-core GEMMs' bound check) and in-run captures of ms-fp4 and decomp-fixed under
#       bf16 autocast (scripts/gpu_fused_check.py); bench/train_step.py at llama-820m (GEMMs
#       most of the step), graphed, bf16 + mxfp4-fdw + mxfp4-fdw-fp8 (the FP8 carrier)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_generic_reuse.sh OUTDIR step|checks [OLDDIR]}
WHAT=${2:?usage: scripts/gpu_generic_reuse.sh OUTDIR step|checks [OLDDIR]}
OLD=${3:-}
[ -n "$OLD" ] && OLD=$(cd "$OLD" && pwd)
source "$(dirname "$0")/gpu_parts.sh"
part env 60 bash -c 'nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv; \
python -c "import torch, triton; print(torch.__version__, triton.__version__)"'
R=${RECIPES:-bf16,ms-fp4,decomp-fixed}
STEP=(--model llama-125m --seq-len 1024 --batch-size 16 --recipes "$R" --steps 6 --warmup 2
      --cuda-graph)
if [ "$WHAT" = step ]; then
  part bench_new 240 python bench/train_step.py "${STEP[@]}" --out "$OUT/new"
  if [ -n "$OLD" ]; then
    rm -rf /tmp/old_tree && mkdir -p /tmp/old_tree
    tar cf - --exclude=./.git --exclude=./golden --exclude=./.devcarry . | tar xf - -C /tmp/old_tree
    (cd "$OLD" && find . -type f) | while read -r f; do cp "$OLD/$f" "/tmp/old_tree/$f"; done
    part bench_old 240 env PYTHONPATH=/tmp/old_tree python /tmp/old_tree/bench/train_step.py \
      "${STEP[@]}" --out "$OUT/old"
  fi
  for d in new old; do
    for f in "$OUT"/$d/train_step_*.md; do [ -f "$f" ] && cp "$f" "$OUT/${d}_$(basename "$f")"; done
  done
  part profile 150 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
    --batch-size 16 --recipes ${PROFILE:-bf16,ms-fp4} --top 30
else
  part pytest_cuda 300 python -m pytest -q -p no:cacheprovider tests/test_triton_corrections.py \
    -k "cuda or tensor_core"
  part captures 200 env ONLY_RECIPES=ms-fp4,decomp-fixed python scripts/gpu_fused_check.py "$OUT"
  # the FP8 carrier where GEMMs are most of the step (issue 30 item 5)
  part carrier 220 python bench/train_step.py --model llama-820m --seq-len 1024 --batch-size 16 \
    --recipes bf16,mxfp4-fdw,mxfp4-fdw-fp8 --steps 6 --warmup 2 --cuda-graph --out "$OUT/carrier"
  for f in "$OUT"/carrier/train_step_*.md; do [ -f "$f" ] && cp "$f" "$OUT/carrier_$(basename "$f")"; done
fi
cat "$OUT"/*_train_step_*.md 2>/dev/null
echo "failed parts: $fails" | tee -a "$OUT/parts.log"
# at most 8 files come back from a device call: everything in one archive, beside it the
# parts log and the tables
tar czf /tmp/results.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 \
  ! -name parts.log ! -name '*_train_step_*.md' -exec rm -rf {} + && mv /tmp/results.tgz "$OUT/"
exit $fails
