#!/usr/bin/env bash
# The test command: set-up, then the whole pytest suite (exhaustive 2^32 sweeps are opt-in).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
python3 -m pytest -q "$@"
