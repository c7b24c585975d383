#!/usr/bin/env bash
# Do two processes of the same graphed llama-125m run, on one machine, give the same bits?
# A same-seed rerun of the amd grid on another machine matched steps 0-2 and diverged from
# step 3, after the first CUDA-graph replay (bench/results/train/amd_medium_python/README.md).
# This runs each recipe twice, one process after the other, with the medium scale's shape
# (seq 1024 x 32, graphed, corpus python, seed 1) for STEPS steps, and compares every logged
# loss and gradient norm bit for bit:
#   scripts/gpu_repeat_check.sh OUTDIR [STEPS] [RECIPES]
# REPEAT_EAGER=1 steps eagerly instead; REPEAT_DETERMINISTIC=1 trains with --deterministic;
# REPEAT_ROOT: where the runs go (default /var/tmp).
# OUTDIR/repeat.json: per recipe, the first step whose loss or grad norm differs (null: none).
set -uo pipefail
OUT=${1:?outdir}; STEPS=${2:-10}; RECIPES=${3:-mxfp4-fdw,bf16}
ROOT=${REPEAT_ROOT:-/var/tmp/mxref_repeat}
GRAPH=--cuda-graph; [ "${REPEAT_EAGER:-0}" = 1 ] && GRAPH=""   # REPEAT_EAGER=1: no CUDA graphs
[ "${REPEAT_DETERMINISTIC:-0}" = 1 ] && GRAPH="$GRAPH --deterministic"
mkdir -p "$ROOT"
# `mxref train` comes from mxkernels' entry point: the device copy must be installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log): mxref train needs the entry points" >&2
for r in ${RECIPES//,/ }; do
  for k in 1 2; do
    rm -rf "${ROOT:?}/$r-$k"
    python3 -m mxref.cli train --model llama-125m --recipe "$r" --seed 1 \
      --tokens $((32 * 1024 * STEPS)) --seq-len 1024 --batch-size 32 $GRAPH \
      --corpus python --eval-every 0 --eval-tokens 32768 --ckpt-every 0 --validate-every 0 \
      --no-progress --out "$ROOT/$r-$k" >"$OUT/repeat_$r-$k.log" 2>&1 \
      || echo "$r run $k failed (see repeat_$r-$k.log)"
  done
done
python3 - "$ROOT" "$OUT/repeat.json" "$RECIPES" <<'EOF'
import json, sys
from pathlib import Path
root, out, recipes = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
res = {}
for r in recipes:
    runs = []
    for k in (1, 2):
        p = root / f"{r}-{k}" / "log.jsonl"
        runs.append([json.loads(x) for x in p.read_text().splitlines()] if p.exists() else [])
    a, b = runs
    diff = [i for i, (x, y) in enumerate(zip(a, b))
            if (x.get("loss"), x.get("grad_norm")) != (y.get("loss"), y.get("grad_norm"))]
    res[r] = {"steps": [len(a), len(b)], "first_diff_step": a[diff[0]]["step"] if diff else None,
              "losses": [[x.get("loss") for x in a], [y.get("loss") for y in b]]}
    print(r, "steps", res[r]["steps"], "first differing step", res[r]["first_diff_step"])
Path(out).write_text(json.dumps(res, indent=1))
EOF
