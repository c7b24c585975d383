#!/usr/bin/env bash
# The main job on the bundled data: set-up, then which rule each stack implements on a real
# activation tensor (every format x every profile vs the canonical ocp profile).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mxref formats
mxref compare "$@"
