#!/usr/bin/env bash
# CUDA-graph training on one lent GPU (about 7 minutes). Usage: scripts/gpu_graph.sh OUTDIR
#   1. tests: the fused kernel (cuda), graph replays == eager steps bit for bit, planted bug
#   2. bench/train_step.py: llama-125m seq 1024 x 16, fast-path recipes, eager then --cuda-graph
#   3. mxref train llama-30m mxfp4-fdw-sr, eager vs --cuda-graph (in-run checks every 50 steps)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_graph.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log): mxref train needs the entry points" >&2
R=bf16,mxfp4-fdw,mxfp4-fdw-h16,mxfp4-fdw-rht,mxfp4-fdw-sr
part tests 240 python -m pytest -q -x -p no:cacheprovider tests/test_training_graph.py \
  tests/test_triton_train.py -k "cuda or graph"
part bench_eager 200 python bench/train_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes $R --steps 8 --warmup 2 --out "$OUT/bench"
part bench_graph 200 python bench/train_step.py --model llama-125m --seq-len 1024 \
  --batch-size 16 --recipes $R --steps 8 --warmup 2 --cuda-graph --out "$OUT/bench"
cat "$OUT"/bench/train_step_*.md 2>/dev/null
TRAIN=(--model llama-30m --recipe mxfp4-fdw-sr --seq-len 512 --batch-size 32 --tokens 3276800
       --seed 0 --eval-every 100 --eval-tokens 262144 --validate-every 50 --no-progress)
part train_eager 150 python -m mxref.cli train "${TRAIN[@]}" --out "$OUT/runs/eager"
part train_graph 150 python -m mxref.cli train "${TRAIN[@]}" --cuda-graph --out "$OUT/runs/graph"
for r in eager graph; do
  [ -f "$OUT/runs/$r/summary.json" ] && python - "$OUT/runs/$r/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(s["status"], "steps", s["steps_done"], "val", s["final_val_loss"], "tok/s",
      round(s["median_tokens_per_s"] or 0), "graph steps", s.get("cuda_graph_steps"))
PY
  [ -f "$OUT/runs/$r/checks.jsonl" ] && echo "$r checks: $(wc -l < "$OUT/runs/$r/checks.jsonl") records, $(grep -c '"ok": false' "$OUT/runs/$r/checks.jsonl") failed"
done
echo "failed parts: $fails (logs in $OUT)"
exit $fails
