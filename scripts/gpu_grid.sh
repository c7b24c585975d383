#!/usr/bin/env bash
# An experiment grid at `medium` scale (llama-125m, 100M tokens per arm) on a lent multi-GPU
# machine, one arm per GPU. A grid outlasts one device call (10 minutes), so it runs detached:
#   scripts/gpu_grid.sh start OUTDIR NAME SEEDS ARMS BUDGET_S WAIT_S [extra experiment args]
#   scripts/gpu_grid.sh wait  OUTDIR NAME WAIT_S
# `start` launches `mxref train experiment NAME --scale medium --seeds SEEDS --arms ARMS --jobs
# <GPUs> --time-budget BUDGET_S --validate-every 1000` in its own session (setsid: it outlives
# the call while the machine stays held) into $GRID_ROOT/NAME_medium (default
# /var/tmp/mxref_grid, outside the working tree, which each call replaces; checkpoints are
# 1.5 GB each), with the Numba kernels compiled beside it; then, like `wait`, it watches for
# WAIT_S seconds and brings back what is there. Back in OUTDIR each time: NAME_medium.tgz (every
# run directory without its checkpoints, logs/, and when the grid is done experiment.json and
# compare.*), NAME_progress.txt, gpu.txt. The budget makes every run leave with a checkpoint before
# the machine is taken back; the same `start` on a warm machine resumes the stopped runs.
# Two grids on one machine: give each its GPUs and jobs, the first with WAIT_S 0, e.g.
#   CUDA_VISIBLE_DEVICES=3 GRID_JOBS=2 scripts/gpu_grid.sh start $OUT amd 1 A,B 1500 0 --threads 12
#   CUDA_VISIBLE_DEVICES=0,1,2 GRID_JOBS=3 scripts/gpu_grid.sh start $OUT decomp 0 C,D,E 1500 500 ...
# (a run's child process is put on the slot's GPU among the visible ones).
set -uo pipefail
MODE=${1:?usage: scripts/gpu_grid.sh start|wait OUTDIR NAME ...}
OUT=${2:?outdir}; NAME=${3:?name}; shift 3
source "$(dirname "$0")/gpu_parts.sh"
export MXREF_NUMBA_CACHE=1
# `mxref train` is an entry point (mxref.commands): the checkout must be installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log): mxref train needs the entry points" >&2
ROOT=${GRID_ROOT:-/var/tmp/mxref_grid}
SCALE=${GRID_SCALE:-medium}   # GRID_SCALE=tiny GRID_JOBS=2: a CPU rehearsal of the mechanics
DIR=$ROOT/${NAME}_$SCALE
mkdir -p "$DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader \
  | tee "$OUT/gpu.txt" || echo "no GPU" >"$OUT/gpu.txt"
if [ "$MODE" = start ]; then
  SEEDS=${1:?seeds}; ARMS=${2:?arms}; BUDGET=${3:?budget seconds}; WAIT=${4:?wait seconds}
  shift 4
  NG=${GRID_JOBS:-$(nvidia-smi -L | wc -l)}
  echo "start: $NAME seeds $SEEDS arms $ARMS on $NG GPUs, budget ${BUDGET}s; in $DIR:" \
       "$(ls "$DIR" | tr '\n' ' ')" | tee -a "$DIR/grid.log"
  # the corpus the scale reads, counted once here (each run records its SHA-256 and size)
  python3 -c 'from mxkernels.training.data import load_corpus as L; import json
d = L("python").describe(); print("corpus python:", json.dumps(d))' 2>&1 | tee -a "$DIR/grid.log"
  setsid nohup python3 -m mxref.cli warmup >"$DIR/warmup.log" 2>&1 </dev/null &
  setsid nohup python3 -m mxref.cli train experiment "$NAME" --scale "$SCALE" --seeds "$SEEDS" \
    --arms "$ARMS" --jobs "$NG" --time-budget "$BUDGET" --out "$DIR" --validate-every 1000 \
    --no-progress "$@" >>"$DIR/grid.log" 2>&1 </dev/null &
  echo $! >"$DIR/grid.pid"
else
  WAIT=${1:?wait seconds}
fi
PID=$(cat "$DIR/grid.pid")
T0=$SECONDS
progress() {
  for r in "$DIR"/*/; do
    [ -f "$r/config.json" ] || continue
    n=$(wc -l <"$r/log.jsonl" 2>/dev/null || echo 0)
    st=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' \
         "$r/summary.json" 2>/dev/null || echo running)
    echo "$(basename "$r") steps=$n $st $(tail -c 300 "$r/log.jsonl" 2>/dev/null \
         | tail -1 | grep -o '"loss": [0-9.]*\|"step_time_s": [0-9.]*' | tr '\n' ' ')"
  done
}
while kill -0 "$PID" 2>/dev/null && [ $((SECONDS - T0)) -lt "$WAIT" ]; do sleep 10; done
if kill -0 "$PID" 2>/dev/null; then echo "grid still running after ${WAIT}s"; else
  echo "grid finished"; fi
progress | tee "$OUT/${NAME}_progress.txt"
tail -40 "$DIR/grid.log"
tar czf "$OUT/${NAME}_$SCALE.tgz" --exclude=checkpoints --exclude=grid.pid -C "$ROOT" "${NAME}_$SCALE"
exit 0
