#!/usr/bin/env bash
# Single training arms of an issue-8 grid at `small` scale on a lent GPU, one after another,
# each under the time left. Usage:
#   scripts/gpu_arms.sh OUTDIR GRID BUDGET_S RECIPE:SEED... [-- extra `mxref train` args]
# runs `mxref train --model llama-30m --recipe RECIPE --seed SEED` with the small scale's
# budget (20M tokens, seq 512 x 64, eval every 100 on 262144 tokens, in-run checks every 300)
# into bench/results/train/GRID_small/RECIPE-sSEED. Each arm that completes comes back at once
# as OUTDIR/RECIPE-sSEED.tgz (no checkpoints), so a later arm that runs out of time does not
# take the earlier ones with it. An arm is not started with less than MIN_S (default 200) s left.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_arms.sh OUTDIR GRID BUDGET_S RECIPE:SEED... [-- args]}
GRID=${2:?grid}; BUDGET=${3:?budget seconds}; shift 3
ARMS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do ARMS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
source "$(dirname "$0")/gpu_parts.sh"
export MXREF_NUMBA_CACHE=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
T0=$SECONDS
DIR=bench/results/train/${GRID}_small
for arm in "${ARMS[@]}"; do
  r=${arm%%:*}; s=${arm##*:}
  LEFT=$((BUDGET - (SECONDS - T0)))
  if [ "$LEFT" -lt "${MIN_S:-200}" ]; then
    echo "== $r-s$s not started: ${LEFT}s left" | tee -a "$OUT/parts.log"; fails=$((fails + 1))
    continue
  fi
  part "$r-s$s" "$LEFT" python3 -m mxref.cli train --model llama-30m --recipe "$r" \
    --tokens 20000000 --seq-len 512 --batch-size 64 --eval-every 100 --eval-tokens 262144 \
    --seed "$s" --validate-every 300 --out "$DIR/$r-s$s" --no-progress "$@"
  if grep -q '"status": "complete"' "$DIR/$r-s$s/summary.json" 2>/dev/null; then
    tar czf "$OUT/$r-s$s.tgz" --exclude=checkpoints "$DIR/$r-s$s"
  fi
done
exit $fails
