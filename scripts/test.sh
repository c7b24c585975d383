#!/usr/bin/env bash
# The test command: set-up, then the whole pytest suite (exhaustive 2^32 sweeps are opt-in), the
# conformance gate (scripts/conformance.sh), and the installed-wheel check (scripts/wheel_check.sh:
# the wheel in a fresh venv, from an empty directory, plus examples/kernel_repo with the plugin).
# With arguments, only pytest with those arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
if [ $# -gt 0 ]; then
  exec python3 -m pytest -q "$@"
fi
rc=0
# two pytest-xdist workers (the CI machine's two cores), stealing work so that one long test
# (the leaderboard e2e: ~6.5 min) does not leave a worker idle at the end; then,
# alone, the tests that start several processes themselves (torchrun: -m serial)
python3 -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist worksteal -m "not exhaustive and not serial" || rc=1
python3 -m pytest -q -m "serial and not exhaustive" || rc=1
MXREF_GENERATE_CHECKED=1 bash scripts/conformance.sh || rc=1   # pytest just regenerated L0+L1
bash scripts/wheel_check.sh || rc=1
exit $rc
