#!/usr/bin/env bash
# Issue 32's RL grid (mxkernels/rl) at `small` scale on one lent GPU (or several: runs are
# spread over the visible GPUs), in one call of at most ~8 minutes. Usage:
#   scripts/gpu_rl.sh OUTDIR [BUDGET_S=400] [SEEDS=0,1,2] [ARMS=default]
# SCALE (env, default small; tiny = the CPU smoke scale, for a dry run of this script).
# ARMS: comma-separated (default: bf16, mxfp4, scale-only, dead-only, grid-only, macro,
# outlier, aqn, all3, mxfp4@rollout). JOBS (env, default min(nproc - 1, 15)): parallel run processes.
# RESUME (env): the rl_runs.tgz an earlier call returned; its complete runs and the pretrained
# policies (pretrain-*.pt: every arm of a seed starts from the same weights, so keep them) are
# unpacked first and skipped, so a grid longer than one call finishes over several.
#
# Order: seed 0's arms first (all in parallel), then seed 1's, ...; a run cut by the budget
# leaves only its partial log (it reruns whole next time; a run is ~1-2 min).
# Back in OUTDIR (<= 8 files): rl_compare.{md,json} (paired tables vs bf16 with 95% t
# intervals over seeds, the claims table), rl_curves.png, rl_decomp.png, rl_runs.tgz (config,
# log.jsonl, summary.json of every run, partial logs, the pretrained policies), logs.tgz, gpu.txt.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_rl.sh OUTDIR [BUDGET_S] [SEEDS] [ARMS]}
BUDGET=${2:-400}; SEEDS=${3:-0,1,2}
ARMS=${4:-bf16,mxfp4,scale-only,dead-only,grid-only,macro,outlier,aqn,all3,mxfp4@rollout}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/_logs"; mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MXREF_NUMBA_CACHE=1
export OMP_NUM_THREADS=1
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python -c "import torch, transformers; print(torch.__version__, transformers.__version__, \
torch.cuda.device_count(), 'GPUs')" 2>&1 | tee -a "$OUT/gpu.txt"
DIR=${RLDIR:-bench/results/rl/${SCALE:-small}}
mkdir -p "$DIR"
if [ -n "${RESUME:-}" ] && [ -f "$RESUME" ]; then
  tar xzf "$RESUME" -C "$DIR" && echo "resumed from $RESUME: $(ls -d "$DIR"/*-s*/ 2>/dev/null | wc -l) runs" | tee -a "$LOGS/parts.log"
fi
# compile mxref's Numba kernels for the decomposition log once (cached for every run process)
( timeout 240 python - >"$LOGS/numba_warm.log" 2>&1 <<'PY'
import time, numpy as np
t = time.time()
from mxref.decompose import decompose
from mxref.corrections import decompose_macroblock, decompose_outlier_fallback
x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
decompose(x, "mxfp4", "ocp").stats(); decompose_macroblock(x, "mxfp4", "ocp").stats()
decompose_outlier_fallback(x, "mxfp4", "ocp", rule="block", tau=10.0, rho=8).stats()
print("numba warm", time.time() - t)
PY
) &
WARM=$!
NP=$(nproc); JOBS=${JOBS:-$(( NP > 16 ? 15 : (NP > 4 ? NP - 1 : 2) ))}
LEFT=$(( BUDGET - (SECONDS - T0) ))
echo "== grid: seeds $SEEDS arms $ARMS jobs $JOBS budget ${LEFT}s" | tee -a "$LOGS/parts.log"
timeout --signal=TERM --kill-after=15 "$LEFT" python -m mxkernels.rl grid --scale "${SCALE:-small}" \
  --seeds "$SEEDS" --arms "$ARMS" --jobs "$JOBS" --out "$DIR" >"$LOGS/grid.log" 2>&1
echo "== grid rc=$? after $((SECONDS - T0)) s" | tee -a "$LOGS/parts.log"
wait $WARM 2>/dev/null
# compare whatever is complete (the grid's own compare is lost when the budget cut it)
timeout 90 python -m mxkernels.rl compare "$DIR" >"$LOGS/compare.log" 2>&1
echo "== compare rc=$? after $((SECONDS - T0)) s" | tee -a "$LOGS/parts.log"
cat "$DIR/rl_compare.md" 2>/dev/null
for f in rl_compare.md rl_compare.json rl_curves.png rl_decomp.png; do
  [ -f "$DIR/$f" ] && cp "$DIR/$f" "$OUT/"
done
done_runs=$(cd "$DIR" && for s in */summary.json; do grep -q '"status": "complete"' "$s" 2>/dev/null && dirname "$s"; done)
echo "complete runs: $(echo $done_runs | wc -w)" | tee -a "$LOGS/parts.log"
cp -r "$DIR/logs" "$LOGS/run_logs" 2>/dev/null
(cd "$DIR" && tar czf "$OUT/rl_runs.tgz" --exclude='*.tmp' $(ls -d */ 2>/dev/null | grep -- '-s[0-9]*/$') pretrain-*.pt grid.json 2>/dev/null)
(cd "$LOGS" && tar czf "$OUT/logs.tgz" .) && rm -rf "$LOGS"
ls -la "$OUT"
