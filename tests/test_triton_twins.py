"""mxkernels/triton_common.py: the fast twin ``_shared_exponent_normal`` (the E8M0 byte the
fast kernels compute) against the spec ``_shared_exponent`` (clamped, as ``_mx_scale_byte``
makes it a byte), on every zero / finite amax at every E8M0 byte boundary and rule threshold
+-1 ulp in every binade, for every element format and scale rule. Runs in the Triton
interpreter (a test kernel bound to the interpreted copy of triton_common).

Also the element encoder every Triton kernel calls, ``_encode`` / ``_finish``, against the
Numba spec ``encode_f32`` on the edges of the element knobs ``int8_min`` and ``signed_zero``."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from mxkernels.loader import load_kernels  # noqa: E402
from mxref import get_format, get_profile  # noqa: E402
from mxref.formats import P_EVENTHR, P_MAXSIG  # noqa: E402
from mxref.profiles import SCALE_RULES  # noqa: E402

KERNEL_SRC = '''
import triton
import triton.language as tl
from mxkernels.triton_common import _encode, _shared_exponent, _shared_exponent_normal


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


@triton.jit
def encode_kernel(b_ptr, out_ptr, n, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr,
                  EL_EMIN: tl.constexpr, EL_BIAS: tl.constexpr, EL_MAXCODE: tl.constexpr,
                  EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
                  ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr,
                  FLUSH: tl.constexpr, INT8_FULL: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    b = tl.load(b_ptr + o, mask=m, other=0)
    tl.store(out_ptr + o, _encode(b, 0, EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS, EL_MAXCODE,
                                  EL_SIGNBIT, EL_NAN, EL_INF, ROUNDING, OVERFLOW, SIGNED_ZERO,
                                  FLUSH, INT8_FULL), mask=m)
'''


@pytest.fixture(scope="module")
def twin_module(tmp_path_factory):
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
    return mod


@pytest.fixture(scope="module")
def twin_kernel(twin_module):
    return twin_module.twin_kernel


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


def _knob_edges():
    """fp32 inputs at the int8_min and signed_zero edges (scale 2^0): +-k/64 and midpoints
    +-(k + 1/2)/64 for k in 125..129 (+-1 ulp), -2.0, -2.1, +-0.0, tiny values that round
    to zero, +-Inf, NaN."""
    ks = np.arange(125, 130, dtype=np.float64)
    rel = np.concatenate([ks, ks + 0.5]) / 64
    rel = np.concatenate([rel, -rel, [-2.0, -2.1, 0.0, -0.0, 2.0 ** -12, -(2.0 ** -12)]])
    b = rel.astype(np.float32).view(np.uint32).astype(np.int64)
    b = np.concatenate([b - 1, b, b + 1, [0x80000000, 0, 0x7F800000, 0xFF800000, 0x7FC00000]])
    return np.unique(b.astype(np.uint32))


KNOB_PROFILES = ["ocp", "microxcaling", "gfloat", "te_nvfp4"]


@pytest.mark.parametrize("fmt", ["mxint8", "mxfp4", "mxfp8_e4m3"])
@pytest.mark.parametrize("name", KNOB_PROFILES)
def test_encode_follows_int8_min_and_signed_zero(twin_module, fmt, name):
    """Triton ``_encode`` (INT8_FULL, SIGNED_ZERO) is Numba's ``encode_f32`` on every edge
    input: -0.0 / underflow signs under preserve, input_neg_zero_to_pos and never_negative,
    MXINT8 0x80 under int8_min='full' only."""
    from mxkernels.triton_common import element_constexprs, profile_constexprs
    from mxref import _kernels as K
    prof = get_profile(name).replace(name="k", formats=None, nvfp4_order="exact",
                                     nan_in_block="poison", inf_in_block="poison")
    ce = {**element_constexprs(fmt), **profile_constexprs(prof)}
    keys = ("EL_IS_INT", "EL_MBITS", "EL_EMIN", "EL_BIAS", "EL_MAXCODE", "EL_SIGNBIT", "EL_NAN",
            "EL_INF", "ROUNDING", "OVERFLOW", "SIGNED_ZERO", "FLUSH", "INT8_FULL")
    bits = _knob_edges()
    n = bits.size
    out = torch.empty(n, dtype=torch.int32)
    twin_module.encode_kernel[(1,)](torch.from_numpy(bits.view(np.int32)), out, n,
                                    BLOCK=triton.next_power_of_2(n), **{k: ce[k] for k in keys})
    want = np.empty(n, np.uint8)
    K.encode_elements(bits, 0, get_format(fmt).element.kernel_params(), prof.kernel_params(),
                      want)
    got = out.numpy().astype(np.uint8)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} differ, first x bits 0x{int(bits[bad[0]]):08x}: " \
                          f"triton 0x{int(got[bad[0]]):02x} numba 0x{int(want[bad[0]]):02x}"
