#!/usr/bin/env bash
# Run on an H100 (about 3 minutes): time the quantizers (bench/gpu_kernels.py --only quantizers)
# and, where ncu is installed, profile one MXFP4 row-quantize launch (ocp, and rceil, whose
# measured time was 4x ocp's with the same SASS cost) to check the SASS report's claim that the
# ALU pipe binds (bench/results/sass_sm90.md).
#
#   scripts/gpu_sass_check.sh OUTDIR
#
# OUTDIR gets: quantizers.json/.md and .log (the benchmark), sass_sm90.json/.md (the static
# report, rebuilt with this machine's Triton), ncu_mxfp4_{ocp,rceil}.csv (SpeedOfLight,
# ComputeWorkloadAnalysis, MemoryWorkloadAnalysis), ncu_mxfp4_{ocp,rceil}_pipes.csv (pipe
# utilization, issue and occupancy metrics), summary.txt.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_sass_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export MXREF_COMMIT=${MXREF_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
python3 -m pip install -e . --no-deps --no-build-isolation -q > "$OUT/install.log" 2>&1 || true
: > "$OUT/summary.txt"

SECONDS=0
timeout 120 python3 bench/gpu_kernels.py --only quantizers --out "$OUT/quantizers.json" \
  > "$OUT/quantizers.log" 2>&1
echo "gpu_kernels --only quantizers: exit $? in ${SECONDS} s" >> "$OUT/summary.txt"

SECONDS=0
timeout 90 python3 bench/sass_report.py --only "fast mxfp4,dual" --out "$OUT/sass_sm90.json" \
  > "$OUT/sass_report.log" 2>&1
echo "sass_report (fast mxfp4, dual): exit $? in ${SECONDS} s" >> "$OUT/summary.txt"

if command -v ncu > /dev/null 2>&1; then
  cat > "$OUT/ncu_one_launch.py" <<'PY'
import sys
import torch
from mxkernels.triton_fast import quantize_fast
prof = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(8192, 8192, device="cuda", generator=g).to(torch.bfloat16)
quantize_fast(x, "mxfp4", prof, axis=-1, packed=True)      # compile + warm-up (skipped)
torch.cuda.synchronize()
quantize_fast(x, "mxfp4", prof, axis=-1, packed=True)      # the profiled launch
torch.cuda.synchronize()
PY
  for prof in ocp rceil; do
    SECONDS=0
    timeout 60 ncu --kernel-name mx_fast_kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --csv python3 "$OUT/ncu_one_launch.py" $prof > "$OUT/ncu_mxfp4_${prof}.csv" 2> "$OUT/ncu_mxfp4_${prof}.err"
    echo "ncu sections mxfp4 $prof: exit $? in ${SECONDS} s" >> "$OUT/summary.txt"
    SECONDS=0
    timeout 45 ncu --kernel-name mx_fast_kernel --launch-skip 1 --launch-count 1 --csv --metrics \
sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,\
sm__inst_issued.avg.pct_of_peak_sustained_active,\
smsp__inst_executed.sum,\
sm__warps_active.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__time_duration.sum,\
sm__cycles_elapsed.avg.per_second \
      python3 "$OUT/ncu_one_launch.py" $prof > "$OUT/ncu_mxfp4_${prof}_pipes.csv" 2> "$OUT/ncu_mxfp4_${prof}_pipes.err"
    echo "ncu pipes mxfp4 $prof: exit $? in ${SECONDS} s" >> "$OUT/summary.txt"
  done
else
  echo "ncu not found: no profile" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
