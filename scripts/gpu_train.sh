#!/usr/bin/env bash
# GPU training check for one lent H100/H200 (about 8 minutes). Usage: scripts/gpu_train.sh OUTDIR
#
#   1. environment (nvidia-smi, versions)                                   ~10 s
#   2. bench/train_step.py: llama-125m, seq 1024 x 16, bf16 vs mxfp4-fdw,
#      mxfp4-fdw-h16, nvfp4-te, alternating steps, medians, quant share,
#      peak memory -> OUTDIR/bench/train_step_<gpu>.{json,md}               <= 240 s
#   3. a paired training run, llama-30m, seq 512 x 32, 3.3M tokens: bf16 and
#      mxfp4-fdw with in-run validation every 50 steps, then compare
#      -> OUTDIR/runs/{bf16,mxfp4-fdw}, OUTDIR/runs/compare.{json,md,png}   <= 2 x 110 s + 20 s
#
# Every part runs under its own timeout and the script goes on past a failure; the exit code
# is the number of failed parts. Triton compiles each kernel on first use (tens of seconds):
# the benchmark's warm-up steps absorb it and report it as warmup_s.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_train.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"

part env 60 bash -c 'nvidia-smi; python -c "import torch, triton, transformers; \
print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"; \
git rev-parse HEAD'

part bench 240 python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
  --recipes bf16,mxfp4-fdw,mxfp4-fdw-h16,nvfp4-te --steps 8 --warmup 2 --out "$OUT/bench"
cat "$OUT"/bench/train_step_*.md 2>/dev/null

TRAIN=(--model llama-30m --seq-len 512 --batch-size 32 --tokens 3276800 --seed 0
       --eval-every 50 --eval-tokens 262144 --ckpt-every 100 --no-progress)
part train_bf16 110 python -m mxref.cli train "${TRAIN[@]}" --recipe bf16 --out "$OUT/runs/bf16"
part train_mxfp4_fdw 110 python -m mxref.cli train "${TRAIN[@]}" --recipe mxfp4-fdw \
  --validate-every 50 --out "$OUT/runs/mxfp4-fdw"
# a run cut by its timeout has a checkpoint every 100 steps: compare what is there
part compare 60 python -m mxref.cli train compare "$OUT/runs/bf16" "$OUT/runs/mxfp4-fdw" \
  --out "$OUT/runs"
cat "$OUT/runs/compare.md" 2>/dev/null
for r in bf16 mxfp4-fdw; do
  [ -f "$OUT/runs/$r/summary.json" ] && python - "$OUT/runs/$r/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(s["recipe"], s["status"], "steps", s["steps_done"], "val", s["final_val_loss"],
      "tok/s", round(s["median_tokens_per_s"] or 0), "peak GiB", round(s["peak_mem_bytes"] / 2**30, 2))
EOF
done
[ -f "$OUT/runs/mxfp4-fdw/checks.jsonl" ] && echo "checks: $(wc -l < "$OUT/runs/mxfp4-fdw/checks.jsonl") records, \
$(grep -c '"ok": false' "$OUT/runs/mxfp4-fdw/checks.jsonl") failed"
echo "failed parts: $fails (logs in $OUT)"
exit $fails
