"""Reference hygiene: no fastmath anywhere, no GPU imports, no float log2/exp2 in the kernels."""
import ast
import inspect
import subprocess
import sys
from pathlib import Path

import numba

import mxref
from mxref import _kernels
from mxref._kernels import f32, mx, nvfp4, semantics

ROOT = Path(mxref.__file__).parent
KERNEL_MODULES = (f32, semantics, mx, nvfp4)


def dispatchers():
    seen = {}
    for mod in (_kernels,) + KERNEL_MODULES:
        for v in vars(mod).values():
            if isinstance(v, numba.core.dispatcher.Dispatcher):
                seen[id(v)] = v
    return list(seen.values())


def test_every_kernel_module_is_listed():
    names = {p.stem for p in (ROOT / "_kernels").glob("*.py")} - {"__init__"}
    assert names == {m.__name__.rsplit(".", 1)[1] for m in KERNEL_MODULES}


def test_every_kernel_has_fastmath_off():
    ds = dispatchers()
    assert len(ds) > 10
    for d in ds:
        assert not d.targetoptions.get("fastmath"), d.py_func.__name__


def test_fastmath_check_can_fail():
    bad = numba.njit(fastmath=True)(lambda x: x)
    assert bad.targetoptions.get("fastmath")


def test_no_float_transcendentals_in_reference():
    banned = {"log2", "log", "exp2", "exp", "frexp", "ldexp", "floor", "ceil", "sqrt", "pow"}
    for path in [*ROOT.glob("*.py"), *(ROOT / "_kernels").glob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in banned:
                raise AssertionError(f"{path.name}:{node.lineno} uses {node.attr}")


def test_importing_mxref_pulls_no_gpu_stack():
    code = ("import sys, numpy as np, mxref; mxref.quantize(np.ones(32, np.float32), 'mxfp4');"
            "bad = [m for m in ('torch', 'triton', 'cupy', 'numba.cuda') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_kernels_source_has_no_float_arithmetic_types():
    for mod in KERNEL_MODULES:
        src = inspect.getsource(mod)
        assert "float32(" not in src and "float64(" not in src, mod.__name__
