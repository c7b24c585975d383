#!/usr/bin/env bash
# GPU checks of the issue-28 profiles on a lent NVIDIA GPU, one call (after
# scripts/device_golden.sh unpack). Usage: bash scripts/gpu_profiles_check.sh OUTDIR
#   1. the Triton kernels compiled for the GPU against the whole L0+L1 corpus, every op they
#      claim (scripts/gpu_run.sh env verify: one verify process per op group)
#   2. the torch emulator on CUDA against L0+L1 (quantize ops; every profile it claims)
#   3. the GPU tests of tests/test_layout_poison.py (the fast quantizer's padding on the GPU; the
#      cuBLAS test skips below sm_100) and the profile test files
# Exit code: the number of failed parts.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_profiles_check.sh OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CI=true
unset TRITON_INTERPRET
fail=0
# finer groups than gpu_verify_parallel.sh's default: with 22 profiles, compiling every format x
# profile variant of quantize_mx in one process outlasted 360 s on an H200 (16 groups fit 520 s)
export VERIFY_GROUPS=${VERIFY_GROUPS:-"quantize_mx:mxfp4 quantize_mx:mxfp6_e2m3,mxfp6_e3m2 \
quantize_mx:mxfp8_e4m3,mxfp8_e5m2,mxint8 quantize_mx_tensor:mxfp4 \
quantize_mx_tensor:mxfp6_e2m3,mxfp6_e3m2,mxfp8_e4m3,mxfp8_e5m2,mxint8 \
quantize_nvfp4,convert,dequantize,pack quantize_rotated:mxfp4,nvfp4 \
quantize_rotated:mxfp6_e2m3,mxfp6_e3m2,mxfp8_e4m3,mxfp8_e5m2,mxint8 gemm rotate rotated_gemm \
quantize_mx_sr mxfp4_to_fp8,fp8_to_mxfp4,reblock"}
VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-520} bash scripts/gpu_run.sh "$OUT/triton" env verify || fail=$((fail+1))
timeout 300 python3 -m mxref verify -b torch --device cuda --level 0 --level 1 \
  --ops quantize_mx,quantize_mx_tensor,quantize_nvfp4 --max-errors 10 --no-progress \
  --json-out "$OUT/torch_cuda.verify.json" >"$OUT/torch_cuda.verify.txt" 2>&1 || fail=$((fail+1))
echo "torch cuda verify: $(tail -1 "$OUT/torch_cuda.verify.txt")"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_layout_poison.py \
  >"$OUT/layout_poison.txt" 2>&1 || fail=$((fail+1))
echo "layout poison: $(tail -1 "$OUT/layout_poison.txt")"
exit $fail
