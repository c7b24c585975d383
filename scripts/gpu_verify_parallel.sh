#!/usr/bin/env bash
# mxref verify --backend triton over L0+L1, one process per op group in parallel (Triton compiles
# each format x profile x dtype variant once; on a 16-core GPU host this cuts the wall time
# several-fold). Usage: bash scripts/gpu_verify_parallel.sh OUTDIR [TIMEOUT_S]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_verify_parallel.sh OUTDIR [TIMEOUT_S]}
T=${2:-420}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
GROUPS_=(quantize_mx quantize_mx_tensor,quantize_nvfp4,convert,dequantize,pack rotate
         quantize_rotated gemm rotated_gemm quantize_mx_sr mxfp4_to_fp8,fp8_to_mxfp4,reblock)
pids=()
for g in "${GROUPS_[@]}"; do
  name=${g%%,*}
  timeout "$T" python3 -m mxref.cli verify --backend triton --level 0 --level 1 --ops "$g" \
    --max-errors 30 --json-out "$OUT/verify_$name.json" >"$OUT/verify_$name.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; r=$?
  [ $r -ne 0 ] && rc=1
  echo "${GROUPS_[$i]}: exit $r"
done
grep -h "^Summary\|^check " "$OUT"/verify_*.log
exit $rc
