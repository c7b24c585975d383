#!/usr/bin/env bash
# The conformance gate CI runs: the committed corpus regenerated and compared with its manifest and
# files (content, rows, classes; L0 and L1, about 2 min), then the corpus against the numba
# reference (L1 too unless that regeneration was already done: see NUMBA_LEVEL), the torch
# emulator (CPU) and the Triton kernels (interpreter: L0 and the whole of L1). Every run is
# attempted; the script fails if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export CI=${CI:-true}
rc=0
run() { echo "== conformance: $*" >&2; python3 -m pytest -q -p no:cacheprovider conformance "$@" || rc=1; }
# two sides run in parallel (CI has two cores; the interpreter runs use one each), each into its
# own log, printed in order once both are done; either failing fails the gate
pair() {
  local la lb; la=$(mktemp); lb=$(mktemp)
  ( eval "$1" ) >"$la" 2>&1 & local pa=$!
  ( eval "$2" ) >"$lb" 2>&1 & local pb=$!
  wait $pa || rc=1
  wait $pb || rc=1
  cat "$la" "$lb"; rm -f "$la" "$lb"
}
# scripts/test.sh sets MXREF_GENERATE_CHECKED=1: its pytest run has just done the same check
# (tests/test_golden.py::test_regeneration_matches_manifest_content, L0 and L1).
if [ -z "${MXREF_GENERATE_CHECKED:-}" ]; then
  echo "== conformance: mxref generate --level 0 --level 1 --check" >&2
  python3 -m mxref generate --level 0 --level 1 --check --out golden || rc=1
fi
# Numba at L1: when the pytest run has just regenerated L0 and L1 (MXREF_GENERATE_CHECKED=1),
# every L1 expectation was recomputed by the same mxref functions the numba backend calls and
# matched the committed content hashes, so the gate runs numba at L0 only (the verify path:
# files -> backend -> comparison); otherwise at L1 as well (about 150 s).
NUMBA_LEVEL=1
[ -n "${MXREF_GENERATE_CHECKED:-}" ] && NUMBA_LEVEL=0
# The interpreter's L1 is the long pole (725 s on the 2-core box, 2026-11-28, by op:
# quantize_rotated 227, gemm 174, quantize_mx 99, rotated_gemm 73, quantize_mx_tensor 40,
# quantize_nvfp4_sr 38, the other nine ops 75). One side runs its three heaviest GEMM / rotation
# ops (about 400 s); the other runs numba, torch L1 (31 s), triton L0 (160 s) and the rest of
# the interpreter's L1 (about 250 s). -k and its negation split the tests exactly.
# (pair() runs each side in a subshell that exits with its rc.)
HEAVY="test_quantize_rotated or test_gemm or test_rotated_gemm"
pair 'NUMBA_NUM_THREADS=1 run --mxref-backend=numba --mxref-level=$NUMBA_LEVEL
      run --mxref-backend=torch --mxref-level=1
      TRITON_INTERPRET=1 run --mxref-backend=triton --mxref-level=0
      TRITON_INTERPRET=1 run --mxref-backend=triton --mxref-level=1 -k "not ($HEAVY)"; exit $rc' \
     'TRITON_INTERPRET=1 run --mxref-backend=triton --mxref-level=1 -k "$HEAVY"; exit $rc'
exit $rc
