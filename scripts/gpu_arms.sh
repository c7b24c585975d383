#!/usr/bin/env bash
# Single training arms of an issue-8 grid at `small` scale on a lent GPU, one after another,
# each under the time left. Usage:
#   scripts/gpu_arms.sh OUTDIR GRID BUDGET_S RECIPE:SEED... [-- extra `mxref train` args]
# runs `mxref train --recipe RECIPE --seed SEED` with the grid's model at the `small` size and
# that scale's budget, shape and eval cadence (experiments.SCALES: llama-30m or qwen3-moe-60m,
# 20M tokens, seq 512 x 64, eval every 100 on 262144 tokens), with in-run checks every 300
# (none for bf16), into bench/results/train/GRID_small/RECIPE-sSEED. Each arm that completes
# comes back at once as OUTDIR/RECIPE-sSEED.tgz (no checkpoints), so a later arm that runs out
# of time does not take the earlier ones with it; one cut short leaves its log.jsonl as
# OUTDIR/RECIPE-sSEED.partial.jsonl. An arm is not started with less than MIN_S (default 200)
# s left.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_arms.sh OUTDIR GRID BUDGET_S RECIPE:SEED... [-- args]}
GRID=${2:?grid}; BUDGET=${3:?budget seconds}; shift 3
ARMS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do ARMS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
source "$(dirname "$0")/gpu_parts.sh"
export MXREF_NUMBA_CACHE=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
SMALL=$(python3 -c 'import sys
from mxkernels.training.experiments import EXPERIMENTS, SCALES, model_for
sc = SCALES["small"]
print("--model %s --tokens %d --seq-len %d --batch-size %d --eval-every %d --eval-tokens %d" % (
      model_for(EXPERIMENTS[sys.argv[1]], sc["size"]), sc["tokens"], sc["seq_len"],
      sc["batch_size"], sc["eval_every"], sc["eval_tokens"]))' "$GRID") || exit 2
echo "small scale: $SMALL" | tee -a "$OUT/parts.log"
T0=$SECONDS
DIR=bench/results/train/${GRID}_small
for arm in "${ARMS[@]}"; do
  r=${arm%%:*}; s=${arm##*:}
  LEFT=$((BUDGET - (SECONDS - T0)))
  if [ "$LEFT" -lt "${MIN_S:-200}" ]; then
    echo "== $r-s$s not started: ${LEFT}s left" | tee -a "$OUT/parts.log"; fails=$((fails + 1))
    continue
  fi
  VAL="--validate-every 300"
  [ "$r" = bf16 ] && VAL=""   # the baseline has no MX layer to check
  # shellcheck disable=SC2086  # SMALL and VAL are lists of options
  part "$r-s$s" "$LEFT" python3 -m mxref.cli train $SMALL --recipe "$r" --seed "$s" \
    $VAL --out "$DIR/$r-s$s" --no-progress "$@"
  if grep -q '"status": "complete"' "$DIR/$r-s$s/summary.json" 2>/dev/null; then
    tar czf "$OUT/$r-s$s.tgz" --exclude=checkpoints "$DIR/$r-s$s"
  elif [ -f "$DIR/$r-s$s/log.jsonl" ]; then
    cp "$DIR/$r-s$s/log.jsonl" "$OUT/$r-s$s.partial.jsonl"   # how far it got, for the next budget
  fi
done
exit $fails
