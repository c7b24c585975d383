#!/usr/bin/env bash
# The four-word SR stream on one lent GPU, in two calls (each under the 10-minute limit):
#   scripts/gpu_sr_words.sh OUTDIR checks   GPU tests of the stream, bit checks + kernel timings
#                                           (scripts/gpu_sr_words.py), in-run captures and
#                                           fast = generic of the SR recipes, the one-tensor
#                                           NVFP4 route (scripts/gpu_nvfp4_rows.py)
#   scripts/gpu_sr_words.sh OUTDIR step     llama-125m steps, CUDA-graphed, SR recipes with both
#                                           streams against bf16 and mxfp4-fdw in one process
#                                           (RECIPES=a,b,... instead; PROFILE=a,b: their top
#                                           kernels from scripts/gpu_profile_step.py)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_sr_words.sh OUTDIR checks|step}
WHAT=${2:?usage: scripts/gpu_sr_words.sh OUTDIR checks|step}
source "$(dirname "$0")/gpu_parts.sh"
part env 60 bash -c 'nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv; \
python -c "import torch, triton; print(torch.__version__, triton.__version__)"'
if [ "$WHAT" = checks ]; then
  part pytest_cuda 200 python -m pytest -q -p no:cacheprovider tests/test_triton_train.py \
    tests/test_triton_train_nvfp4.py tests/test_kernels_sr.py -k "(four_word or gpu_default_tiles) and cuda"
  part sr_words 200 python scripts/gpu_sr_words.py "$OUT/sr_words.json"
  part captures 150 env ONLY_RECIPES=mxfp4-fdw-sr,nvfp4-te,mxfp4-fdw-sr-w1 \
    python scripts/gpu_fused_check.py "$OUT"
  part nvfp4_rows 90 python scripts/gpu_nvfp4_rows.py "$OUT/nvfp4_rows.json"
else
  part step_graph 300 python bench/train_step.py --model llama-125m --seq-len 1024 \
    --batch-size 16 --recipes ${RECIPES:-bf16,mxfp4-fdw,mxfp4-fdw-sr,mxfp4-fdw-sr-w1,nvfp4-te,nvfp4-te-w1} \
    --steps 8 --warmup 2 --cuda-graph --out "$OUT/bench"
  cp "$OUT"/bench/*.md "$OUT"/ 2>/dev/null
  if [ -n "${PROFILE:-}" ]; then
    part profile 120 python scripts/gpu_profile_step.py --model llama-125m --seq-len 1024 \
      --batch-size 16 --recipes "$PROFILE" --top 12
  fi
fi
echo "failed parts: $fails"
exit $fails
