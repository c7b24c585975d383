"""mxkernels/triton_common.py: the fast twin ``_shared_exponent_normal`` (the E8M0 byte the
fast kernels compute) against the spec ``_shared_exponent`` (clamped, as ``_mx_scale_byte``
makes it a byte), on every zero / finite amax at every E8M0 byte boundary and rule threshold
+-1 ulp in every binade, for every element format and scale rule. Runs in the Triton
interpreter (a test kernel bound to the interpreted copy of triton_common)."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from mxkernels.loader import load_kernels  # noqa: E402
from mxref import get_format  # noqa: E402
from mxref.formats import P_EVENTHR, P_MAXSIG  # noqa: E402
from mxref.profiles import SCALE_RULES  # noqa: E402

KERNEL_SRC = '''
import triton
import triton.language as tl
from mxkernels.triton_common import _shared_exponent, _shared_exponent_normal


@triton.jit
def twin_kernel(a_ptr, spec_ptr, fast_ptr, n, EL_EMAX: tl.constexpr, EL_MAXSIG: tl.constexpr,
                EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr, SCALE_RULE: tl.constexpr,
                BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    a = tl.load(a_ptr + o, mask=m, other=0)
    s = _shared_exponent(a, EL_EMAX, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, False, False)
    tl.store(spec_ptr + o, tl.minimum(tl.maximum(s, -127), 127) + 127, mask=m)
    tl.store(fast_ptr + o, _shared_exponent_normal(a, EL_EMAX, EL_MAXSIG, EL_EVENTHR, SCALE_RULE),
             mask=m)
'''


@pytest.fixture(scope="module")
def twin_kernel(tmp_path_factory):
    common = load_kernels(True)["triton_common"]
    path = tmp_path_factory.mktemp("twins") / "triton_twin_kernel.py"
    path.write_text(KERNEL_SRC)
    prev_env = os.environ.get("TRITON_INTERPRET")
    prev_mod = sys.modules.get("mxkernels.triton_common")
    os.environ["TRITON_INTERPRET"] = "1"
    sys.modules["mxkernels.triton_common"] = common
    try:
        spec = importlib.util.spec_from_file_location("triton_twin_kernel", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if prev_mod is None:
            sys.modules.pop("mxkernels.triton_common", None)
        else:
            sys.modules["mxkernels.triton_common"] = prev_mod
        if prev_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev_env
    return mod.twin_kernel


def _amaxes(p):
    sigs = {0, 1, 0x7FFFFF, 0x7FFFFE, 0x400000}
    for edge in (int(p[P_MAXSIG]) - (1 << 23), int(p[P_EVENTHR]) - (1 << 23)):
        sigs.update(edge + d for d in (-2, -1, 0, 1, 2) if 0 <= edge + d < (1 << 23))
    sig = np.array(sorted(sigs), dtype=np.int64)
    grid = ((np.arange(0, 255, dtype=np.int64)[:, None] << 23) | sig[None, :]).reshape(-1)
    return np.unique(grid).astype(np.int32)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"])
@pytest.mark.parametrize("rule", SCALE_RULES)
def test_shared_exponent_normal_is_shared_exponent(twin_kernel, fmt, rule):
    from mxkernels.triton_common import element_constexprs
    ce = element_constexprs(fmt)
    p = get_format(fmt).element.kernel_params()
    a = torch.from_numpy(_amaxes(p))
    n = a.numel()
    spec = torch.empty(n, dtype=torch.int32)
    fast = torch.empty(n, dtype=torch.int32)
    BLOCK = 1024
    twin_kernel[(triton.cdiv(n, BLOCK),)](a, spec, fast, n, EL_EMAX=ce["EL_EMAX"],
                                          EL_MAXSIG=ce["EL_MAXSIG"],
                                          EL_EVENTHR=ce["EL_EVENTHR"],
                                          EL_MAXF32=ce["EL_MAXF32"],
                                          SCALE_RULE=SCALE_RULES.index(rule), BLOCK=BLOCK)
    bad = spec != fast
    assert not bool(bad.any()), \
        f"{int(bad.sum())} differ, first amax bits 0x{int(a[bad][0]) & 0xFFFFFFFF:08x}: " \
        f"spec {int(spec[bad][0])} fast {int(fast[bad][0])}"
