#!/usr/bin/env bash
# Leaderboard records on a lent GPU. Usage: scripts/gpu_leaderboard.sh OUTDIR PART...
#   kernels  mxref leaderboard run gpu: verify (triton, L0+L1 of the timed ops, in parallel
#            worker processes) + every kernel timed in 3 separate processes x 3 do_bench
#            medians                                                               <= 575 s
#   profile  scripts/gpu_profile_mxlinear.py: one MXLinear step with the profiler  <= 120 s
#   train    mxref leaderboard run train: llama-30m bf16 vs the recipes in LB_RECIPES
#            (default mxfp4-fdw,nvfp4-te), LB_TOKENS (default 163840: 20 steps of 8192
#            tokens), in-run validation every 10; repeats are medians of 5-step blocks <= 420 s
#   step     bench/train_step.py: llama-125m seq 1024, bf16 vs STEP_RECIPES (default mxfp4-fdw,
#            fast path) and STEP_GENERIC (default mxfp4-fdw) on the generic path   <= 300 s
#   qdq      scripts/gpu_qdq_check.py: fake-quantization kernel bits + capture + timing <= 150 s
#   pstep    scripts/gpu_profile_step.py: one llama-125m step per recipe, profiled  <= 200 s
# Pass MXREF_COMMIT as the literal hash from your checkout (MXREF_COMMIT=<40 hex>): the device's
# .git can be stale, so $(git rev-parse HEAD) run ON the device stamps an old commit.
# MXREF_DIRTY=0 only when the tree sent is exactly that commit. Records also carry git.tree, the
# tree hash of the files on the device (taken when each `leaderboard run` starts), and
# `mxref leaderboard submit` checks it against the commit's tree in the store's repository: a
# wrong MXREF_COMMIT, or MXREF_DIRTY=0 over modified or untracked files, is rejected (the commit
# must be in your local repository). Keep OUT outside the checkout (or under an ignored path such
# as runs/): files an earlier part writes into the checkout would enter the next part's tree.
# Every part runs under its own timeout; the exit code is the number of failed parts.
# To reproduce records (each recorded command once, medians compared): scripts/gpu_reproduce.sh.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_leaderboard.sh OUTDIR PART...}
shift
source "$(dirname "$0")/gpu_parts.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for p in "$@"; do
  case $p in
    kernels) part kernels 575 python3 -m mxref.cli leaderboard run gpu --out "$OUT/lb" \
               --size 8192 --repeats 3 --processes 3 ;;
    profile) part profile 120 python3 scripts/gpu_profile_mxlinear.py ;;
    train)   part train 420 python3 -m mxref.cli leaderboard run train --out "$OUT/lb" \
               --device cuda --model llama-30m --recipes "${LB_RECIPES:-mxfp4-fdw,nvfp4-te}" \
               --tokens "${LB_TOKENS:-163840}" \
               --seq-len 512 --batch-size 16 --validate-every 10 --threads 0 ;;
    step)    part step 300 python3 bench/train_step.py --model llama-125m --seq-len 1024 \
               --batch-size 16 --recipes "${STEP_RECIPES:-bf16,mxfp4-fdw}" \
               --generic "${STEP_GENERIC:-mxfp4-fdw}" --steps 8 --warmup 2 --out "$OUT/step" ;;
    qdq)     part qdq 150 python3 scripts/gpu_qdq_check.py "$OUT/qdq" ;;
    pstep)   part pstep 200 python3 scripts/gpu_profile_step.py ;;
    *) echo "unknown part $p" >&2; fails=$((fails + 1)) ;;
  esac
done
# the device returns files only a few folders deep: the records travel as one archive
[ -d "$OUT/lb" ] && tar czf "$OUT/lb.tgz" -C "$OUT" --exclude=lb/runs lb && echo "records: $OUT/lb.tgz"
# (lb/runs, the training runs with their checkpoints, is too large to come back)
exit $fails
