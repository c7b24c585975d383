#!/usr/bin/env bash
# The FP8 carrier on one lent GPU (about 6 minutes). Usage: scripts/gpu_fp8_carrier.sh OUTDIR
#   1. scripts/gpu_fp8_probe.py: torch._scaled_mm's 1x128 layout, its accumulation, GEMM speed
#   2. scripts/gpu_fp8_carrier.py: the carrier kernel == mxref, an in-run capture, timings
#   3. bench/train_step.py llama-125m seq 1024 x 16: bf16, mxfp4-fdw, mxfp4-fdw-fp8, graphed
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fp8_carrier.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader \
  | tee "$OUT/gpu.txt"
part probe 240 python scripts/gpu_fp8_probe.py "$OUT"
part carrier 300 python scripts/gpu_fp8_carrier.py "$OUT"
part tests 240 python -m pytest -q -x -p no:cacheprovider tests/test_fp8_carrier.py -k cuda
R=${FP8_RECIPES:-bf16,mxfp4-fdw,mxfp4-fdw-fp8}
part bench_graph 300 python bench/train_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes "$R" --steps 10 --warmup 2 --cuda-graph --out "$OUT/bench"
cat "$OUT"/bench/train_step_*.md 2>/dev/null
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1
TRAIN=(--model llama-30m --seq-len 512 --batch-size 32 --tokens 3276800 --seed 0
       --eval-every 100 --eval-tokens 262144 --validate-every 50 --no-progress --cuda-graph)
for r in mxfp4-fdw mxfp4-fdw-fp8; do
  part "train_$r" 150 python -m mxref.cli train "${TRAIN[@]}" --recipe "$r" --out "$OUT/runs/$r"
  [ -f "$OUT/runs/$r/checks.jsonl" ] && echo "$r checks: $(wc -l < "$OUT/runs/$r/checks.jsonl")" \
    "records, $(grep -c '"ok": false' "$OUT/runs/$r/checks.jsonl") failed; final val" \
    "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["final_val_loss"], s["median_tokens_per_s"])' "$OUT/runs/$r/summary.json")"
done
echo "failed parts: $fails (logs in $OUT)"
exit $fails
