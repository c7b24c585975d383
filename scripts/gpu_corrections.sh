#!/usr/bin/env bash
# decomp-fixed and ms-fp4 off the fp32 pipes, on one lent GPU, in two calls (each under the
# 10-minute limit):
#   scripts/gpu_corrections.sh OUTDIR checks   CUDA tests of triton_corrections and the TF32 /
#                                              split-bf16 GEMMs, kernel bit checks + timings
#                                              (scripts/gpu_corrections.py), in-run captures of
#                                              the recipes under bf16 autocast
#   scripts/gpu_corrections.sh OUTDIR step     llama-125m steps (eager: the generic path) of
#                                              bf16, ms-fp4, decomp-fixed in one process, and
#                                              their top kernels (scripts/gpu_profile_step.py)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_corrections.sh OUTDIR checks|step}
WHAT=${2:?usage: scripts/gpu_corrections.sh OUTDIR checks|step}
source "$(dirname "$0")/gpu_parts.sh"
part env 60 bash -c 'nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv; \
python -c "import torch, triton; print(torch.__version__, triton.__version__)"'
if [ "$WHAT" = checks ]; then
  part pytest_cuda 300 python -m pytest -q -p no:cacheprovider tests/test_triton_corrections.py \
    -k "cuda or tensor_core"
  part kernels 200 python scripts/gpu_corrections.py "$OUT/corrections.json"
  part captures 200 env ONLY_RECIPES=${RECIPES:-decomp-fixed,decomp-outlier,decomp-macro,ms-fp4} \
    python scripts/gpu_fused_check.py "$OUT"
else
  part step 420 python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
    --recipes ${RECIPES:-bf16,ms-fp4,decomp-fixed} --steps 4 --warmup 2 --out "$OUT/bench"
  cp "$OUT"/bench/*.md "$OUT"/ 2>/dev/null
  part profile 150 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
    --batch-size 16 --recipes ${PROFILE:-bf16,ms-fp4,decomp-fixed} --top 25
fi
echo "failed parts: $fails"
exit $fails
