#!/usr/bin/env bash
# One experiment grid of issue 8 at `small` scale on a lent GPU, in time slices. Usage:
#   scripts/gpu_experiment.sh OUTDIR NAME SEEDS BUDGET_S [extra `mxref train experiment` args]
# runs `mxref train experiment NAME --scale small --seeds SEEDS --validate-every 200` into
# bench/results/train/NAME_small for at most BUDGET_S seconds. Arms already complete there
# (committed from an earlier slice: log, checks, summary, config; no checkpoints) are skipped by
# the trainer, so a grid longer than one device call finishes over several. Back in OUTDIR:
# NAME.log and NAME_runs.tgz, the complete arms (and the grid's compare.*) without checkpoints.
# PROFILE=recipe,recipe first runs scripts/gpu_profile_step.py and gpu_sync_check.py on them
# (llama-30m, seq 512 x 64: the small scale's step).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_experiment.sh OUTDIR NAME SEEDS BUDGET_S [args]}
NAME=${2:?name}; SEEDS=${3:?seeds}; BUDGET=${4:?budget seconds}; shift 4
source "$(dirname "$0")/gpu_parts.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
T0=$SECONDS
if [ -n "${PROFILE:-}" ]; then
  part profile 240 python3 scripts/gpu_profile_step.py --model llama-30m --seq-len 512 \
    --batch-size 64 --recipes "$PROFILE" --top 18
  part sync 120 python3 scripts/gpu_sync_check.py --model llama-30m --seq-len 512 \
    --batch-size 64 --recipes "$PROFILE"
fi
DIR=bench/results/train/${NAME}_small
LEFT=$((BUDGET - (SECONDS - T0)))
part "$NAME" "$LEFT" python3 -m mxref.cli train experiment "$NAME" --scale small \
  --seeds "$SEEDS" --out "$DIR" --validate-every 200 --no-progress "$@"
done_runs=$(for s in "$DIR"/*/summary.json; do
  grep -q '"status": "complete"' "$s" 2>/dev/null && dirname "$s"; done)
echo "complete arms: $(echo $done_runs | wc -w)" | tee -a "$OUT/parts.log"
tar czf "$OUT/${NAME}_runs.tgz" --exclude=checkpoints $done_runs \
  $(ls "$DIR"/compare.* "$DIR"/experiment.json 2>/dev/null)
(cd "$OUT" && tar czf logs.tgz *.log gpu.txt)
exit $fails
