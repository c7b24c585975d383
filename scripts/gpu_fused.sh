#!/usr/bin/env bash
# GPU check and timing of the fused fast path (rotation / SR recipes) on one lent GPU.
# Usage: scripts/gpu_fused.sh OUTDIR   (about 8 minutes; exit code = failed parts)
#   1. environment
#   2. tests/test_triton_train.py on cuda (and cpu): the fused kernel against mxref
#   3. scripts/gpu_fused_check.py: full edge tensors, captures of the three recipes, do_bench
#   4. bench/train_step.py: llama-125m seq 1024 x 16, every recipe vs bf16 in one process
#   5. scripts/gpu_profile_step.py: top kernels of the fused recipes
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fused.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
part env 60 bash -c 'nvidia-smi; python -c "import torch, triton; \
print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"; git rev-parse HEAD'
part kernel_tests 240 python -m pytest -q -x -p no:cacheprovider tests/test_triton_train.py -k cuda
part fused_check 200 python scripts/gpu_fused_check.py "$OUT"
part bench 300 python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
  --recipes "${RECIPES:-bf16,mxfp4-fdw,mxfp4-fdw-h16,mxfp4-fdw-rht,mxfp4-fdw-sr,nvfp4-te,quartet,ms-fp4,decomp-fixed,fp4-activations}" \
  --steps 6 --warmup 2 --out "$OUT/bench"
cat "$OUT"/bench/train_step_*.md 2>/dev/null
part profile 150 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes bf16,mxfp4-fdw,mxfp4-fdw-h16,mxfp4-fdw-sr --top 12
echo "failed parts: $fails (logs in $OUT)"
exit $fails
