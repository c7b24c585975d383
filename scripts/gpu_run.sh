#!/usr/bin/env bash
# The GPU session in one command (run on a machine with an NVIDIA or AMD GPU; the lent device
# machines have torch, triton, numba, pyarrow and click but no package registry).
#   bash scripts/gpu_run.sh OUTDIR [stage ...]
# stages (default: all): env tests verify bench
#   env     device facts (nvidia-smi, versions)
#   tests   the kernel test files on the GPU (tests/test_kernels_*.py, tests/test_triton_backend.py)
#   verify  mxref verify --backend triton over L0+L1, every op the kernels claim, one process
#           per op group in parallel (scripts/gpu_verify_parallel.sh; VERIFY_TIMEOUT, default 500 s)
#   bench   bench/gpu_kernels.py (checks each kernel against mxref, then times it)
# Everything is logged to OUTDIR; the script continues past a failing stage and exits non-zero
# if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_run.sh OUTDIR [stage ...]}
shift
STAGES=${*:-env tests verify bench}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MXREF_COMMIT=${MXREF_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
unset TRITON_INTERPRET
# entry points (pytest plugin, console script) without the registry: no deps, no isolation
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 \
  || echo "pip install -e . failed (see pip.log); continuing with PYTHONPATH" >&2
rc=0
stage() { echo "== $1 ($(date +%T))" >&2; }
for s in $STAGES; do
  case $s in
    env)
      stage env
      { nvidia-smi; python3 -c "import torch, triton, numba, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__); print(torch.cuda.get_device_name(0))"; } \
        >"$OUT/env.txt" 2>&1 || rc=1
      tail -3 "$OUT/env.txt" ;;
    tests)
      stage tests
      python3 -m pytest -q -x -p no:cacheprovider tests/test_triton_backend.py \
        $(ls tests/test_kernels_*.py 2>/dev/null) >"$OUT/tests.log" 2>&1 || rc=1
      tail -5 "$OUT/tests.log" ;;
    verify)
      stage verify
      bash scripts/gpu_verify_parallel.sh "$OUT" "${VERIFY_TIMEOUT:-500}" || rc=1 ;;
    bench)
      stage bench
      python3 bench/gpu_kernels.py --out "$OUT/gpu_kernels.json" ${BENCH_ARGS:-} \
        >"$OUT/bench.log" 2>&1 || rc=1
      tail -45 "$OUT/bench.log" ;;
    *) echo "unknown stage $s" >&2; rc=2 ;;
  esac
done
exit $rc
