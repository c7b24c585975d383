#!/usr/bin/env bash
# Stacks on the leaderboard, on a lent GPU, in ONE device call (issue 31: the leaderboard ranks
# stacks, not only ours). Usage, from the repository root on the device:
#
#   MXREF_COMMIT=<40 hex of your local HEAD> bash scripts/device_leaderboard_stacks.sh "$OUT"
#
# What it runs (about 5-8 minutes on an H100; every part under its own timeout, total < 570 s):
#   env      nvidia-smi, torch / triton / torchao versions                               -> env.txt
#   stacks   mxref leaderboard run gpu --stacks-only --device cuda: for each backend in
#            STACKS (default: triton, the four torch.compile(torchao to_mx) scale modes, and
#            `torch`, our torch emulator, which has no timing entry and must come out
#            "not timed"), `mxref verify` of quantize_mx (L0; LB_LEVELS) of the profiles it
#            claims (triton: ocp, rceil), then its timing entry on bf16 SIZE x SIZE (default
#            8192, as the Triton bench) -> mxfp4 / mxfp8_e4m3, axis -1 and 0, checked bit for
#            bit against mxref first, timed with triton.testing.do_bench (3 medians)    <= 480 s
#   check    mxref leaderboard submit --dry-run on the run (the verified-only rule, here)
#            and the site built from the run (the ranking tables render)                <=  60 s
# Results under $OUT: env.txt, parts.log, stacks.log, check.log, stacks-lb.tgz (the records,
# their verify reports and the roster OUT/lb/stacks/<machine>.json; unpack it locally and run
# `mxref leaderboard submit lb --store bench/results/leaderboard`, then `leaderboard build`).
# MXREF_COMMIT / MXREF_DIRTY: as scripts/gpu_leaderboard.sh says (the device's .git can be stale).
set -uo pipefail
OUT=${1:?usage: scripts/device_leaderboard_stacks.sh OUTDIR}
source "$(dirname "$0")/gpu_parts.sh"
STACKS=${STACKS:-"triton torchao-compiled torchao-compiled-rceil torchao-compiled-ceil torchao-compiled-even torch"}
SIZE=${SIZE:-8192}
LB_LEVELS=${LB_LEVELS:-0}
LB=$(mktemp -d /tmp/stacks-lb.XXXXXX)/lb       # outside the checkout: never in the run's tree

{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader
  python3 - <<'EOF'
import importlib
for m in ("torch", "triton", "torchao"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001
        print(m, "unavailable:", type(e).__name__, e)
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available())
EOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

args=()
for b in $STACKS; do args+=(--backend "$b"); done
for lv in $LB_LEVELS; do args+=(--level "$lv"); done
part stacks 480 python3 -m mxref.cli leaderboard run gpu --out "$LB" --stacks-only \
  --device cuda --size "$SIZE" --repeats 3 "${args[@]}"
cp "$LB/run.log" "$OUT/stacks-run.log" 2>/dev/null
# the verified-only rule on the device too (dry run, dirty allowed; a commit the device's stale
# .git lacks is reported there, not here: the lead submits for real locally), then the page with
# the per-workload ranking built straight from the run's records and roster
part check 60 bash -c "python3 -m mxref.cli leaderboard submit '$LB' --dry-run --allow-dirty \
  --store '$LB.store'; python3 - '$LB' <<'EOF'
import sys
from pathlib import Path
from mxref.leaderboard.build import build_site, load_rosters
from mxref.leaderboard.submit import record_files
import json
lb = Path(sys.argv[1])
recs = [json.loads(p.read_text()) for p in record_files([lb])]
site = build_site(recs, Path(str(lb) + '.site'), rosters=load_rosters(lb))
html = site['html'].read_text()
print(len(recs), 'records;', html.count('class=\"lb rank\"'), 'ranking tables')
EOF"
for f in "$LB"/stacks/*.json; do
  [ -f "$f" ] && python3 - "$f" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for st in doc["stacks"]:
    print(f"{st['name']:<26} {st['status']}: {st.get('reason') or ''}")
    for r in st["rows"]:
        t = f"{r['median_ms'] * 1e3:9.1f} us" if r.get("median_ms") else " " * 12
        print(f"   {r['workload']:<42} {r['profile']:<14} {r['status']:<9} {t} "
              f"{r.get('reason') or ''}"[:200])
EOF
done | tee "$OUT/summary.txt"
[ -d "$LB" ] && tar czf "$OUT/stacks-lb.tgz" -C "$(dirname "$LB")" lb && \
  echo "records: $OUT/stacks-lb.tgz"
exit $fails
