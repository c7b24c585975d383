#!/usr/bin/env bash
# FSDP2 (mxref train --fsdp) on a lent 2- or 4-GPU H100 machine against one GPU (issue 30 item 3).
#   scripts/gpu_fsdp.sh OUTDIR [RECIPE...]          (default: bf16 mxfp4-fdw)
# N = the number of visible GPUs (2 or 4; NGPU=... overrides). Per recipe, llama-30m, seq 512 x
# 32 sequences, 100 steps (1.64M tokens), seed 0:
#   R-single, R-rerun   the same command at once on GPU 0 and GPU 1 (one-GPU run-to-run noise)
#   R-accumN            --grad-accum N on the last GPU: the micro-batches of the N ranks on one GPU
#   R-fsdp              torchrun --nproc_per_node N ... --fsdp: the same global batch, sharded
#   R-ddp               (DDP=1 only) torchrun ... without --fsdp, for the speed column
# quantized recipes check one layer against mxref every 25 steps (under FSDP each check also
# compares the gathered sharded weight with the operand the layer quantized). RESUME=1 adds
# bf16-fsdpresume: --stop-after 50, then resume (must match R-fsdp within the rerun noise).
# Writes OUTDIR/cmp/fsdp_compare.{json,md} and OUTDIR/fsdp_runs.tgz. Budget: <= 8 min wall
# (about 80 s per recipe and launch on an H100 pair; the timeouts below add up to 460 s for the
# default two recipes). Exit code: the number of failed parts (the compare counts one when a
# recipe does not match).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fsdp.sh OUTDIR [RECIPE...]}
shift
if [ $# -gt 0 ]; then RECIPES=("$@"); else RECIPES=(bf16 mxfp4-fdw); fi
source "$(dirname "$0")/gpu_parts.sh"
# `mxref train` is an entry point (mxref.commands): the checkout must be installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log): mxref train needs the entry points" >&2
N=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "$N" -lt 2 ]; then echo "needs >= 2 GPUs, found $N"; exit 1; fi
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
nvidia-smi topo -m >> "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
# a CPU dry run of the script itself (gloo): NGPU=2 DEVICE=cpu MODEL=llama-tiny SEQ=32 BATCH=4 STEPS=4
STEPS=${STEPS:-100} SEQ=${SEQ:-512} BATCH=${BATCH:-32}
TRAIN=(--model "${MODEL:-llama-30m}" --seq-len "$SEQ" --batch-size "$BATCH" --tokens $((STEPS * SEQ * BATCH))
       --seed 0 --eval-tokens 65536 --device "${DEVICE:-cuda}" --no-progress)
R="$OUT/runs"
LAST=$((N - 1))
run1() {  # GPU NAME ARGS...: one-GPU run in the background, logs to $OUT/NAME.log
  local g=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$g python3 -m mxref.cli train "${TRAIN[@]}" "$@" --out "$R/$name" \
    > "$OUT/$name.log" 2>&1 &
}
for r in "${RECIPES[@]}"; do
  v=(--validate-every 25); [ "$r" = bf16 ] && v=()
  part "$r-single+rerun+accum$N" 150 bash -c "
    $(declare -p TRAIN R OUT); $(declare -f run1)
    run1 0 $r-single ${v[*]} --recipe $r; a=\$!
    run1 1 $r-rerun ${v[*]} --recipe $r; b=\$!
    run1 $LAST $r-accum$N ${v[*]} --recipe $r --grad-accum $N; c=\$!
    wait \$a; ra=\$?; wait \$b; rb=\$?; wait \$c; rc=\$?
    tail -n 2 $OUT/$r-single.log $OUT/$r-rerun.log $OUT/$r-accum$N.log; exit \$((ra + rb + rc))"
  part "$r-fsdp" 120 python3 -m torch.distributed.run --standalone --nproc_per_node "$N" \
    -m mxref.cli train "${TRAIN[@]}" "${v[@]}" --recipe "$r" --fsdp --ckpt-every 50 --out "$R/$r-fsdp"
  if [ "${DDP:-0}" = 1 ]; then
    part "$r-ddp" 120 python3 -m torch.distributed.run --standalone --nproc_per_node "$N" \
      -m mxref.cli train "${TRAIN[@]}" "${v[@]}" --recipe "$r" --out "$R/$r-ddp"
  fi
done
if [ "${RESUME:-0}" = 1 ]; then
  part bf16-fsdpresume 150 bash -c "
    python3 -m torch.distributed.run --standalone --nproc_per_node $N -m mxref.cli train ${TRAIN[*]} --recipe bf16 --fsdp --ckpt-every 50 --stop-after 50 --out $R/bf16-fsdpresume &&
    python3 -m torch.distributed.run --standalone --nproc_per_node $N -m mxref.cli train ${TRAIN[*]} --recipe bf16 --fsdp --ckpt-every 50 --out $R/bf16-fsdpresume"
fi
part compare 60 python3 - "$R" "$OUT/cmp" "$N" <<'EOF'
"""single vs accumN vs fsdp (and ddp, fsdpresume): the verdict of scripts/ddp_compare.py
(first 20 steps within 1e-2 relative, tail-mean loss within max(0.01, 2 x the largest rerun
difference)), held against the one-GPU run with the same micro-batches (accumN)."""
import json, statistics, sys
from pathlib import Path
sys.path.insert(0, "scripts")
from ddp_compare import load, pair   # noqa: E402

runs, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
kinds = ("single", "rerun", f"accum{n}", "fsdp", "ddp", "fsdpresume")
recipes = sorted({p.name.rsplit("-", 1)[0] for p in runs.iterdir() if p.is_dir()})
res, bad = {}, []
for r in recipes:
    got = {}
    for k in kinds:
        d = runs / f"{r}-{k}"
        try:
            got[k] = load(d) if d.is_dir() else None
        except SystemExit as e:
            bad.append(str(e))
            got[k] = None
    got = {k: v for k, v in got.items() if v is not None}
    res[r] = {"runs": {k: {x: y for x, y in v.items() if x != "losses"} for k, v in got.items()}}
    for a, b in (("single", "rerun"), ("single", f"accum{n}"), (f"accum{n}", "fsdp"),
                 ("single", "fsdp"), (f"accum{n}", "ddp"), ("fsdp", "fsdpresume")):
        if a in got and b in got:
            res[r][f"{a}_vs_{b}"] = pair(got[a], got[b], 20)
noise = max((abs(v["single_vs_rerun"]["tail_mean_diff"]) for v in res.values()
             if "single_vs_rerun" in v), default=0.0)
tol = max(0.01, 2 * noise)
for r, v in res.items():
    d = v.get(f"accum{n}_vs_fsdp")
    v["match"] = bool(d and d["max_rel_early"] <= 1e-2 and abs(d["tail_mean_diff"]) <= tol)
    if not v["match"]:
        bad.append(f"{r}: fsdp does not match accum{n}" if d else f"{r}: missing runs")
doc = {"world_size": n, "step_rtol": 1e-2, "rerun_tail_noise": noise, "tail_tolerance": tol,
       "recipes": res, "problems": bad}
out.mkdir(parents=True, exist_ok=True)
(out / "fsdp_compare.json").write_text(json.dumps(doc, indent=1) + "\n")
lines = [f"FSDP2 on {n} GPUs. Verdict: fsdp's first 20 steps within 1e-2 relative and its tail-mean "
         f"loss within {tol:.4f} nats (max(0.01, 2 x {noise:.4f})) of accum{n}.", "",
         "| recipe | pair | max rel. dL, first 20 | max rel. dL, all | tail-mean dL (nats) | "
         "identical steps | tokens/s (first -> second) | peak mem |", "|---|---|---|---|---|---|---|---|"]
for r, v in res.items():
    for key, d in v.items():
        if "_vs_" not in key:
            continue
        a, b = key.split("_vs_")
        ra, rb = v["runs"][a], v["runs"][b]
        tps = (f"{ra['tokens_per_s']:,.0f} -> {rb['tokens_per_s']:,.0f}"
               if ra["tokens_per_s"] and rb["tokens_per_s"] else "-")
        mem = []
        for k in (a, b):
            s = json.loads((runs / f"{r}-{k}" / "summary.json").read_text())
            mem.append(f"{s.get('peak_mem_bytes', 0) / 2**30:.2f}")
        lines.append(f"| {r} | {a} vs {b} | {d['max_rel_early']:.2e} | {d['max_rel_all']:.2e} | "
                     f"{d['tail_mean_diff']:+.4f} | {d['identical_steps']}/{d['steps']} | {tps} | "
                     f"{' -> '.join(mem)} GiB |")
    lines.append(f"| {r} | **match** | {'yes' if v['match'] else '**no**'} | | | | | |")
md = "\n".join(lines + [""] + [f"- problem: {b}" for b in bad]) + "\n"
(out / "fsdp_compare.md").write_text(md)
print(md)
sys.exit(1 if bad else 0)
EOF
cat "$OUT/cmp/fsdp_compare.md" 2>/dev/null
# the device returns few files: logs, checks and summaries travel as one archive
(cd "$OUT" && tar czf fsdp_runs.tgz --exclude='*.pt' --exclude='checkpoints' gpu.txt parts.log \
   *.log cmp $(ls -d runs/*/log.jsonl runs/*/summary.json runs/*/checks.jsonl runs/*/config.json \
   2>/dev/null)) && echo "archive: $OUT/fsdp_runs.tgz $(du -h "$OUT/fsdp_runs.tgz" | cut -f1)"
exit $fails
