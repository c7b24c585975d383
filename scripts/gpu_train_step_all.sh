#!/usr/bin/env bash
# Every recipe's training step on one lent GPU, eager and (fast-path recipes) CUDA-graphed,
# with the fused kernels' GPU checks and a profile (about 7 minutes).
# Usage: scripts/gpu_train_step_all.sh OUTDIR  -> OUTDIR/train_step.tgz + the two tables
# STAGE=check (tests + fused check) or STAGE=bench (benchmarks + profile) runs half of it, so
# that each half fits one 10-minute device call; ALL / FAST / PROFILE_RECIPES pick recipes.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_train_step_all.sh OUTDIR}
R="$OUT/r"
mkdir -p "$R"
source "$(dirname "$0")/gpu_parts.sh"
OUTER=$OUT
OUT=$R
STAGE=${STAGE:-all}
part env 60 bash -c 'nvidia-smi; python -c "import torch, triton; \
print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"; git rev-parse HEAD'
if [ "$STAGE" != bench ]; then
part kernel_tests 300 python -m pytest -q -p no:cacheprovider tests/test_triton_train.py \
  tests/test_triton_train_nvfp4.py -k cuda
part fused_check 240 python scripts/gpu_fused_check.py "$R"
fi
ALL=${ALL:-bf16,mxfp4-fdw,mxfp4-fdw-h16,mxfp4-fdw-rht,mxfp4-fdw-sr,fp4-activations,nvfp4-te,quartet,ms-fp4,decomp-fixed}
FAST=${FAST:-bf16,mxfp4-fdw,mxfp4-fdw-h16,mxfp4-fdw-rht,mxfp4-fdw-sr,fp4-activations,nvfp4-te,quartet}
if [ "$STAGE" != check ]; then
part bench_eager 300 python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
  --recipes $ALL --steps 6 --warmup 2 --out "$R/bench"
part bench_graph 200 python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
  --recipes $FAST --steps 8 --warmup 2 --cuda-graph --out "$R/bench"
part profile 150 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes ${PROFILE_RECIPES:-bf16,mxfp4-fdw-sr,nvfp4-te,quartet} --top 10
fi
cp "$R"/bench/*.md "$OUTER"/ 2>/dev/null
tar -czf "$OUTER/train_step.tgz" -C "$R" .
echo "failed parts: $fails"
exit $fails
