#!/usr/bin/env bash
# Run on a GPU machine (the device tool): verify the torch emulator and the Triton kernels on the
# GPU against the full L1 corpus, and the conformance suite for triton; reports go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mxref-gpu}
mkdir -p "$OUT"
export CI=true
python3 -m pip install -e . --no-deps --no-build-isolation -q > "$OUT/install.log" 2>&1 || echo "install failed (see install.log)"
python3 - <<'PY' > "$OUT/env.txt" 2>&1
import torch, triton, numba, numpy, pyarrow, click
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip)
print("triton", triton.__version__, "numba", numba.__version__, "numpy", numpy.__version__)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
import importlib.metadata as md
print("pytest11", [e.value for e in md.entry_points(group="pytest11") if "mxref" in e.value])
PY
for spec in "torch --device cuda" "triton"; do
  name=${spec%% *}
  SECONDS=0
  python3 -m mxref.cli verify -b $spec --level 0 --level 1 --max-errors 5 \
    --json-out "$OUT/gpu_${name}.verify.json" > "$OUT/gpu_${name}.verify.txt" 2>&1
  echo "$name verify exit $? in ${SECONDS} s" >> "$OUT/summary.txt"
done
python3 -m mxref.cli verify -b rocm > "$OUT/rocm.txt" 2>&1; echo "rocm exit $?" >> "$OUT/summary.txt"
python3 -m pytest -q -p no:cacheprovider conformance --mxref-backend=triton --mxref-level=1 \
  > "$OUT/conformance_triton.txt" 2>&1; echo "conformance triton exit $?" >> "$OUT/summary.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_torch_backend.py tests/test_triton_backend.py \
  > "$OUT/gpu_tests.txt" 2>&1; echo "gpu tests exit $?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
