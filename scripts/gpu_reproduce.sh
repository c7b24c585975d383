#!/usr/bin/env bash
# Reproduce leaderboard records on a lent GPU.
# Usage: scripts/gpu_reproduce.sh OUTDIR [REPRODUCE-OPTION...] RECORD_OR_DIR...
#   e.g. scripts/gpu_reproduce.sh "$OUT" bench/results/leaderboard/records/gpu-kernels
#        scripts/gpu_reproduce.sh "$OUT" --only-needed \
#          bench/results/leaderboard/records/gpu-kernels/nvidia-h100-80gb-hbm3/dual-*.json
# Runs `mxref leaderboard reproduce --json` over the records: each distinct recorded command runs
# once (the 34 committed H100 kernel records are one `leaderboard run gpu`: 562 s on a freshly
# started H100, verify in parallel workers plus three timing processes; with --only-needed it
# times only the kernels named, after the full verify). Options before the
# records go to reproduce (--only-needed, --slack X). Writes, directly under OUTDIR:
#   gpu.txt          the GPU (nvidia-smi)
#   reproduce.json   the verdicts: rows (one per record), runs (one per command), summary, exit
#   reproduce.log    progress, each command's own output, and the table's error lines
#   rerun.tgz        the re-run's records and logs (run-<i>/; training checkpoints left out)
# Reproduce compares medians only: the re-run records' commit and tree are reported, never
# checked, so a stale or missing .git on the device decides nothing (MXREF_COMMIT, if given,
# only stamps the re-run records). Keep OUTDIR outside the checkout. LB_REPRO_TIMEOUT (default
# 570 s) bounds the whole reproduce; the exit code is reproduce's (0 all reproduced, 1 some not,
# 4 a command failed or wrote no matching record, 2 bad input) or 124 on the timeout.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_reproduce.sh OUTDIR [OPTION...] RECORD_OR_DIR...}
shift
[ $# -gt 0 ] || { echo "usage: scripts/gpu_reproduce.sh OUTDIR [OPTION...] RECORD_OR_DIR..." >&2; exit 2; }
source "$(dirname "$0")/gpu_parts.sh"       # cd to the checkout, PYTHONPATH=$PWD, OUT absolute
T=${LB_REPRO_TIMEOUT:-570}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
rm -rf "$OUT/rerun"
echo "== reproduce (timeout ${T}s): $*" | tee "$OUT/reproduce.log"
t0=$SECONDS
timeout --signal=TERM --kill-after=15 "$T" python3 -m mxref.cli leaderboard reproduce --json \
  --timeout "$T" --keep "$OUT/rerun" "$@" >"$OUT/reproduce.json" 2>>"$OUT/reproduce.log"
rc=$?
echo "== reproduce rc=$rc after $((SECONDS - t0)) s" | tee -a "$OUT/reproduce.log"
# the verdicts in one line each (the JSON is the record of it)
python3 - "$OUT/reproduce.json" <<'EOF' | tee -a "$OUT/reproduce.log"
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no verdicts: {e}")
for r in doc["rows"]:
    if r["status"] == "error":
        print(f"error           {r['entry']}: {r['reason']}")
    else:
        print(f"{r['status']:<15} {r['entry']}: {r['recorded_median']:.6g} -> "
              f"{r['new_median']:.6g} {r['unit']} ({r['difference']:+.2%}; tolerance "
              f"{r['tolerance']:.2%}; new spread {r['new_spread']:.2%}; widened range "
              f"{'in' if r['within_range'] else 'out'})")
print(doc["summary"])
EOF
# the device returns files only a few folders deep: the re-run's records travel as one archive
[ -d "$OUT/rerun" ] && tar czf "$OUT/rerun.tgz" -C "$OUT" --exclude='rerun/*/runs' rerun && rm -rf "$OUT/rerun"
exit $rc
