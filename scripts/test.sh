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
  _nbc=$NUMBA_CACHE_DIR
  trap 'rm -rf "$_nbc"' EXIT
  export NUMBA_CACHE_DIR
fi
export MXREF_NUMBA_CACHE=${MXREF_NUMBA_CACHE:-1}
# Python's bytecode cache (and pytest's cache of assertion-rewritten modules) in __pycache__/
# (git-ignored): a fresh Python process that imports mxref compiles its sources once per
# checkout, not every time (~2 s of CPU per pytest process; the tests start hundreds of
# processes). Some environments set PYTHONDONTWRITEBYTECODE=1.
unset PYTHONDONTWRITEBYTECODE
if [ $# -gt 0 ]; then
  python3 -m mxref.cli warmup
  python3 -m pytest -q "$@"
  exit
fi
rc=0
# Two cores, kept busy: the installed-wheel check (scripts/wheel_check.sh, ~3 min, mostly one
# process at a time: pip, a venv, one numba verify) starts now, beside the warmup (one core) and
# the start of the pytest run, into its own log, printed at the end; it copies the tracked files
# before any test runs. Background jobs still running when the script exits are stopped.
wlog=$(mktemp "${TMPDIR:-/tmp}/mxref-wheel-log.XXXXXX")
bash scripts/wheel_check.sh >"$wlog" 2>&1 & wpid=$!
trap 'kill $(jobs -p) 2>/dev/null || true; rm -f "$wlog"; if [ -n "${_nbc:-}" ]; then rm -rf "$_nbc"; fi' EXIT
python3 -m mxref.cli warmup
# two pytest-xdist workers (the CI machine's two cores), stealing work so that one long test
# (the leaderboard e2e) does not leave a worker idle at the end; the tests that start several
# processes themselves (torchrun: -m serial) run after it, beside the conformance gate
# MXREF_CONFORMANCE_FOLLOWS=1: the kernel tests that feed golden files to the same kernel calls
# as conformance.sh's Triton run below leave their interpreter items to it (tests/conftest.py)
MXREF_CONFORMANCE_FOLLOWS=1 \
  python3 -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist worksteal -m "not exhaustive and not serial" || rc=1
# the serial tests (torchrun: two ranks, ~2 min) beside the conformance gate (two interpreter
# processes, ~7 min, whose shorter side leaves a core idle at its end); never beside xdist's workers
slog=$(mktemp "${TMPDIR:-/tmp}/mxref-serial-log.XXXXXX")
python3 -m pytest -q -m "serial and not exhaustive" >"$slog" 2>&1 & spid=$!
MXREF_GENERATE_CHECKED=1 bash scripts/conformance.sh || rc=1   # pytest just regenerated L0+L1
wait $spid || rc=1
echo "== serial tests (-m serial; ran beside the conformance gate)"
cat "$slog"; rm -f "$slog"
wait $wpid || rc=1
echo "== wheel_check (ran beside the warmup and the pytest run)"
cat "$wlog"
exit $rc
