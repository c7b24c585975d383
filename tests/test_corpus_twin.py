"""tests/conftest.py's corpus_twin deselection: under MXREF_CONFORMANCE_FOLLOWS=1 exactly the
interpreter items of the marked golden tests leave the run, and nothing else does."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_kernels_convert.py", "tests/test_kernels_sr.py",
         "tests/test_kernels_rotate.py", "tests/test_kernels_gemm.py"]
TWINS = ("test_kernels_convert.py::test_golden[", "test_kernels_sr.py::test_golden_quantize_mx_sr[",
         "test_kernels_rotate.py::test_golden_quantize_rotated[",
         "test_kernels_gemm.py::test_golden[")


def _collect(follows: bool) -> set:
    env = {k: v for k, v in os.environ.items() if k != "MXREF_CONFORMANCE_FOLLOWS"}
    if follows:
        env["MXREF_CONFORMANCE_FOLLOWS"] = "1"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *FILES], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    return {line for line in out.splitlines() if "::" in line}


def test_only_the_interpreter_items_of_the_twins_leave():
    every, kept = _collect(False), _collect(True)
    dropped = every - kept
    assert kept < every and dropped
    assert all(any(t in d for t in TWINS) and "cuda" not in d for d in dropped), \
        sorted(dropped)[:5]
    # every CPU item of a twin test goes; the rest of those files stays
    assert {d for d in every if any(t in d for t in TWINS) and "cuda" not in d} == dropped
