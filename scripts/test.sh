#!/usr/bin/env bash
# The test command: set-up, then the whole pytest suite (exhaustive 2^32 sweeps are opt-in), the
# conformance gate (scripts/conformance.sh), and the installed-wheel check (scripts/wheel_check.sh:
# the wheel in a fresh venv, from an empty directory, plus examples/kernel_repo with the plugin).
# With arguments, only pytest with those arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
# Numba's on-disk cache, in a directory of this run only (the code cannot change under it):
# the tests' fresh processes (CLI, isolation, pytest plugin, leaderboard) load mxref's compiled
# kernels instead of each compiling them again (about 40 s per process on two cores)
if [ -z "${NUMBA_CACHE_DIR:-}" ]; then
  NUMBA_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/mxref-numba.XXXXXX")
  trap 'rm -rf "$NUMBA_CACHE_DIR"' EXIT
  export NUMBA_CACHE_DIR
fi
export MXREF_NUMBA_CACHE=${MXREF_NUMBA_CACHE:-1}
python3 -m mxref.cli warmup
if [ $# -gt 0 ]; then
  python3 -m pytest -q "$@"
  exit
fi
rc=0
# two pytest-xdist workers (the CI machine's two cores), stealing work so that one long test
# (the leaderboard e2e: ~6.5 min) does not leave a worker idle at the end; then,
# alone, the tests that start several processes themselves (torchrun: -m serial)
# MXREF_CONFORMANCE_FOLLOWS=1: the kernel tests that feed golden files to the same kernel calls
# as conformance.sh's Triton run below leave their interpreter items to it (tests/conftest.py)
MXREF_CONFORMANCE_FOLLOWS=1 \
  python3 -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist worksteal -m "not exhaustive and not serial" || rc=1
python3 -m pytest -q -m "serial and not exhaustive" || rc=1
MXREF_GENERATE_CHECKED=1 bash scripts/conformance.sh || rc=1   # pytest just regenerated L0+L1
bash scripts/wheel_check.sh || rc=1
exit $rc
