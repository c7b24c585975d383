#!/usr/bin/env bash
# DDP on a lent 2-GPU machine against the single-GPU run (issue 8, multi-GPU). Usage:
#   scripts/gpu_ddp.sh OUTDIR [RECIPE...]        (default: bf16 mxfp4-fdw nvfp4-te)
# Per recipe, llama-30m, seq 512 x 32 sequences, 150 steps (2.46M tokens), seed 0:
#   R-single and R-rerun  the same command at once on GPU 0 and GPU 1 (one-GPU run-to-run noise)
#   R-accum2              --grad-accum 2 on GPU 1 beside R-rerun: a rank's micro-batch on one GPU
#   R-ddp                 torchrun --nproc_per_node 2: the same global batch, 16 sequences a rank
# quantized recipes check one layer against mxref every 50 steps; then scripts/ddp_compare.py
# writes OUTDIR/cmp/ddp_compare.{json,md,png}. Exit code: the number of failed parts.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_ddp.sh OUTDIR [RECIPE...]}
shift
if [ $# -gt 0 ]; then RECIPES=("$@"); else RECIPES=(bf16 mxfp4-fdw nvfp4-te); fi
source "$(dirname "$0")/gpu_parts.sh"
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi topo -m >> "$OUT/gpu.txt" 2>&1
TRAIN=(--model llama-30m --seq-len 512 --batch-size 32 --tokens $((150 * 512 * 32)) --seed 0
       --eval-tokens 65536 --device cuda --no-progress)
R="$OUT/runs"
for r in "${RECIPES[@]}"; do
  v=(--validate-every 50); [ "$r" = bf16 ] && v=()
  part "$r-single+rerun" 300 bash -c "
    CUDA_VISIBLE_DEVICES=0 python3 -m mxref.cli train ${TRAIN[*]} ${v[*]} --recipe $r --out $R/$r-single > $OUT/$r-single.log 2>&1 & a=\$!
    CUDA_VISIBLE_DEVICES=1 python3 -m mxref.cli train ${TRAIN[*]} ${v[*]} --recipe $r --out $R/$r-rerun > $OUT/$r-rerun.log 2>&1 & b=\$!
    CUDA_VISIBLE_DEVICES=1 python3 -m mxref.cli train ${TRAIN[*]} ${v[*]} --recipe $r --grad-accum 2 --out $R/$r-accum2 > $OUT/$r-accum2.log 2>&1 & c=\$!
    wait \$a; ra=\$?; wait \$b; rb=\$?; wait \$c; rc=\$?
    tail -2 $OUT/$r-single.log $OUT/$r-rerun.log $OUT/$r-accum2.log; exit \$((ra + rb + rc))"
  part "$r-ddp" 300 python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
    -m mxref.cli train "${TRAIN[@]}" "${v[@]}" --recipe "$r" --out "$R/$r-ddp"
done
part compare 120 python3 scripts/ddp_compare.py "$R" --out "$OUT/cmp"
cat "$OUT/cmp/ddp_compare.md" 2>/dev/null
# the device returns at most 8 files: the per-step logs, checks and summaries travel as one archive
(cd "$OUT" && tar czf ddp_runs.tgz --exclude='*.pt' --exclude='ckpt*' --exclude='checkpoints' \
   gpu.txt parts.log *.log cmp $(cd "$OUT" && ls -d runs/*/log.jsonl runs/*/summary.json \
   runs/*/checks.jsonl 2>/dev/null)) && echo "archive: $OUT/ddp_runs.tgz $(du -h "$OUT/ddp_runs.tgz" | cut -f1)"
exit $fails
