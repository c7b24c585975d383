#!/usr/bin/env bash
# The main job on the bundled data: set-up; check the committed golden corpus (integrity and a
# content-hash regeneration of L0); then which rule each stack implements on a real activation
# tensor (every format x every profile vs the canonical ocp profile).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mxref golden check
mxref generate --level 0 --check
mxref formats
mxref compare "$@"
