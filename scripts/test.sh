#!/usr/bin/env bash
# The test command: set-up, then the whole pytest suite (exhaustive 2^32 sweeps are opt-in), then
# the conformance gate (scripts/conformance.sh). With arguments, only pytest with those arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
if [ $# -gt 0 ]; then
  exec python3 -m pytest -q "$@"
fi
rc=0
python3 -m pytest -q || rc=1
bash scripts/conformance.sh || rc=1
exit $rc
