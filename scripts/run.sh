#!/usr/bin/env bash
# The main job on the bundled data: set-up; check the committed golden corpus (integrity and a
# content-hash regeneration of L0); verify the reference and the torch emulator against the whole
# of L1 and ask which profile torchao's default mode implements; then which rule each stack
# implements on a real activation tensor (every format x every profile vs the canonical ocp), and
# how its MXFP4 error splits into scale bias, deadzone and grid noise under each scale rule.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mxref golden check
mxref generate --level 0 --check
mxref verify -b numba --level 1
mxref verify -b torch --level 1
if python3 -c "import torchao" >/dev/null 2>&1; then
  mxref verify -b torchao --detect-profile --ops quantize_mx 2>/dev/null | grep -E "^(matches|nearest)"
fi
mxref formats
mxref compare "$@"
mxref decompose mxref/data/sample_activations_bf16.npy -f mxfp4 --source-dtype bfloat16
