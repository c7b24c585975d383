#!/usr/bin/env bash
# llama-30m training runs, eager against --cuda-graph, on one lent GPU (about 6 minutes).
# Usage: scripts/gpu_graph_train.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: scripts/gpu_graph_train.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log): mxref train needs the entry points" >&2
part tests 200 python -m pytest -q -p no:cacheprovider tests/test_training_graph.py
TRAIN=(--model llama-30m --seq-len 512 --batch-size 32 --tokens 3276800 --seed 0
       --eval-every 100 --eval-tokens 262144 --no-progress)
part bf16_eager 120 python -m mxref.cli train "${TRAIN[@]}" --recipe bf16 --out "$OUT/runs/bf16-eager"
part bf16_graph 120 python -m mxref.cli train "${TRAIN[@]}" --recipe bf16 --cuda-graph \
  --out "$OUT/runs/bf16-graph"
part sr_graph_eager 150 env MXK_CUDA_GRAPH_EAGER=1 python -m mxref.cli train "${TRAIN[@]}" \
  --recipe mxfp4-fdw-sr --cuda-graph --validate-every 50 --out "$OUT/runs/sr-graphmode-eager"
for r in "$OUT"/runs/*/; do
  [ -f "$r/summary.json" ] && python - "$r/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(sys.argv[1].split("/")[-2], s["status"], "steps", s["steps_done"], "val", s["final_val_loss"],
      "tok/s", round(s["median_tokens_per_s"] or 0), "graph steps", s.get("cuda_graph_steps"))
PY
done
echo "failed parts: $fails (logs in $OUT)"
exit $fails
