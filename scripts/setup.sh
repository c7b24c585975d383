#!/usr/bin/env bash
# Idempotent set-up on a fresh machine, for the README's two commands (scripts/test.sh and
# scripts/run.sh): the CPU torch build first (so pip does not pull the multi-GB CUDA wheels to
# satisfy the extras' torch>=2.4), then mxref editable with every extra and the test tools.
# (A kernel repository needs only `pip install mxref`: numpy, numba, pyarrow, click.)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install --quiet "torch==2.13.0" || "$PY" -m pip install --quiet torch
fi
"$PY" -m pip install --quiet -e ".[all,test]"
# Chromium for the leaderboard page test (tests/test_leaderboard_site.py; required where CI=true).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "warning: could not install chromium; the leaderboard page test skips (fails with CI=true)" >&2
fi
