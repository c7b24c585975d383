#!/usr/bin/env bash
# The carrier's tile sweep, then the llama-125m step with the best tile (one lent GPU, ~4 min).
# Usage: scripts/gpu_fp8_step.sh OUTDIR   (bundles everything into OUTDIR/fp8_step.tgz)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fp8_step.sh OUTDIR}
W=$(mktemp -d)
source "$(dirname "$0")/gpu_parts.sh"
OUT_FINAL=$OUT; OUT=$W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader \
  | tee "$OUT/gpu.txt"
part tiles 240 python scripts/gpu_carrier_tiles.py "$OUT"
tail -25 "$OUT/tiles.log"
TILES_LINE=$(grep -o "MXK_CARRIER_TILES=.*" "$OUT/tiles.log" | tail -1)
[ -n "$TILES_LINE" ] && export MXK_CARRIER_TILES="${TILES_LINE#MXK_CARRIER_TILES=}"
echo "using MXK_CARRIER_TILES=${MXK_CARRIER_TILES:-default}"
R=${FP8_RECIPES:-bf16,mxfp4-fdw,mxfp4-fdw-fp8}
part bench_graph 300 python bench/train_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes "$R" --steps 10 --warmup 2 --cuda-graph --out "$OUT/bench"
cat "$OUT"/bench/train_step_*.md 2>/dev/null
tar czf "$OUT_FINAL/fp8_step.tgz" -C "$OUT" .
echo "failed parts: $fails"
exit $fails
