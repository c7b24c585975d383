#!/usr/bin/env bash
# mxref verify --backend triton over L0+L1, one process per op group in parallel (Triton compiles
# each format x profile x dtype variant once; on a 16-core GPU host this cuts the wall time
# several-fold). Usage: bash scripts/gpu_verify_parallel.sh OUTDIR [TIMEOUT_S]
# VERIFY_GROUPS (space-separated) overrides the groups; a group is OPS[:FORMATS], both
# comma lists, e.g. "quantize_mx:mxfp4 gemm:mxfp4,mxint8 rotated_gemm" (a GEMM file is selected
# when either operand's format is listed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_verify_parallel.sh OUTDIR [TIMEOUT_S]}
T=${2:-420}
mkdir -p "$OUT/parts"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
if [ -n "${VERIFY_GROUPS:-}" ]; then
  read -r -a GROUPS_ <<<"$VERIFY_GROUPS"
else
  GROUPS_=(quantize_mx quantize_mx_tensor,quantize_nvfp4,convert,dequantize,pack rotate
           quantize_rotated gemm rotated_gemm quantize_mx_sr mxfp4_to_fp8,fp8_to_mxfp4,reblock)
fi
pids=()
for g in "${GROUPS_[@]}"; do
  ops=${g%%:*}
  fmts=()
  [ "$ops" != "$g" ] && fmts=(--format "${g#*:}")
  name=${ops%%,*}
  [ "$ops" != "$g" ] && name="${name}_${g#*:}" && name=${name//,/_}
  timeout "$T" python3 -m mxref.cli verify --backend triton --level 0 --level 1 --ops "$ops" "${fmts[@]}" \
    --max-errors 30 --json-out "$OUT/parts/verify_$name.json" >"$OUT/parts/verify_$name.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; r=$?
  [ $r -ne 0 ] && rc=1
  echo "${GROUPS_[$i]}: exit $r"
done
# one JSON and one log (the device tool returns few files): per group its exit status, summary
# and the first mismatch records
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
doc = {}
for log in sorted((out / "parts").glob("verify_*.log")):
    name = log.stem[len("verify_"):]
    js = log.with_suffix(".json")
    if js.exists():
        d = json.loads(js.read_text())
        doc[name] = {"exit_code": d.get("exit_code"), "summary": d.get("summary"),
                     "backend": d.get("backend"), "mismatches": d.get("mismatches", [])[:30],
                     "errors": d.get("errors", [])[:30], "notes": d.get("notes", [])[:30]}
    else:
        doc[name] = {"exit_code": None, "summary": "no report (timed out or crashed)",
                     "log_tail": log.read_text()[-3000:]}
(out / "verify_all.json").write_text(json.dumps(doc, indent=1))
with open(out / "verify_all.log", "w") as f:
    for log in sorted((out / "parts").glob("verify_*.log")):
        f.write(f"===== {log.name}\n" + log.read_text()[-20000:] + "\n")
PY
grep -h "^Summary\|^check " "$OUT"/parts/verify_*.log
exit $rc
