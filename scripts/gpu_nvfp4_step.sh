#!/usr/bin/env bash
# The NVFP4 training launch on one lent GPU (about 6 minutes): its GPU checks (bit-exact
# against mxref, T under concurrent programs, captures, fast = generic path) and kernel timings,
# then nvfp4-te and quartet training steps CUDA-graphed against bf16 and mxfp4-fdw in the same
# process, and a profile of the nvfp4-te step's top kernels.
# Usage: scripts/gpu_nvfp4_step.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: scripts/gpu_nvfp4_step.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
part env 60 bash -c 'nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv; \
python -c "import torch, triton; print(torch.__version__, triton.__version__)"'
part fused_check 200 env NVFP4_ONLY=1 python scripts/gpu_fused_check.py "$OUT"
part step_graph 220 python bench/train_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes ${RECIPES:-bf16,mxfp4-fdw,nvfp4-te,quartet} --steps 8 --warmup 2 \
  --cuda-graph --out "$OUT/bench"
part profile 100 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes bf16,nvfp4-te --top 12
cp "$OUT"/bench/*.md "$OUT"/ 2>/dev/null
echo "failed parts: $fails"
exit $fails
