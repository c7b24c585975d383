"""Profile ``microxcaling_torch``: microsoft/microxcaling's pure-PyTorch MX path
(``mx/mx_ops.py::_quantize_mx(..., custom_cuda=False)``) on float32 sources.

Evidence, never taken from mxref:

* the stack's own code, vendored verbatim in ``tests/peers_src/microxcaling_torch.py``
  (microxcaling@3b429a8 mx_ops.py / formats.py, @4adf988 elemwise_ops.py), run here on torch
  CPU float32 on every L1 block case of every format the profile defines (the corpus inputs,
  ``mxref.golden.cases.block_cases``): scale bytes and element values must match mxref;
* torch's own float32 ``log2`` on every binade around the rounding threshold of the shared
  exponent's ``floor(log2(amax))``;
* hand-worked blocks (below), read off the source, run through the four implementations
  (Numba, the Fraction oracle, torch_emu, the Triton kernels in the interpreter).

Source facts the hand-worked vectors use (microxcaling@3b429a8 / @4adf988):

* ``_shared_exponents``: ``floor(log2(amax + FP32_MIN_NORMAL * (amax == 0)))`` in float32;
  ``_quantize_mx`` subtracts the element emax, sets > 127 to NaN and clamps < -127 to -127,
  then ``A = A / 2**shared_exp`` (float32);
* ``_quantize_elemwise_core``: private exponent ``floor(log2(|A| + (A == 0)))`` clipped at
  the element emin, ``A / 2**pe * 2**(bits-2)``, ``_round_mantissa(round='nearest')`` =
  ``sign(A) * floor(|A| + 0.5)`` in float32, then clamp to +-max_norm;
* ``torch.sign(-0.0)`` is 0, so a -0.0 input (or an A that underflows to -0.0) gives +0,
  while a negative A that rounds to 0 gives sign -1 * 0 = -0.0.
"""
from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import pytest

import mxref
from mxref import get_format, get_profile
from mxref.errors import ProfileConflictError
from mxref.formats import FORMATS

import oracle as O

torch = pytest.importorskip("torch")

PROF = "microxcaling_torch"
# mxref format -> microxcaling elem_format, oracle element name
FMTS = {"mxfp8_e4m3": ("fp8_e4m3", "e4m3"), "mxfp8_e5m2": ("fp8_e5m2", "e5m2"),
        "mxfp6_e3m2": ("fp6_e3m2", "e3m2"), "mxfp6_e2m3": ("fp6_e2m3", "e2m3"),
        "mxfp4": ("fp4", "e2m1"), "mxint8": ("int8", "int8")}


def _load_peer():
    path = pathlib.Path(__file__).parent / "peers_src" / "microxcaling_torch.py"
    spec = importlib.util.spec_from_file_location("microxcaling_torch_peer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PEER = _load_peer()


def f32(bits):
    return np.array([bits], np.uint32).view(np.float32)[0]


def peer_quantize(bits: np.ndarray, fmt: str):
    """microxcaling's torch path on rows of 32 fp32 bit patterns (one block per row):
    (scale bytes, element values as fp32 bits, dequantized fp32 bits)."""
    el = FMTS[fmt][0]
    A = torch.from_numpy(np.ascontiguousarray(bits, np.uint32).view(np.float32).copy())
    out = PEER._quantize_mx(A, 8, el, axes=[-1], block_size=32, round="nearest",
                            custom_cuda=False)
    # the scale and the elements exactly as _quantize_mx's non-CUDA branch computes them
    ebits, mbits, emax, max_norm, _ = PEER._get_format_params(el)
    se = PEER._shared_exponents(A, method="max", axes=[-1], ebits=0) - emax
    se[se > 127] = float("NaN")
    se[se < -127] = -127
    elems = PEER._quantize_elemwise_core(A / (2 ** se), mbits, ebits, max_norm, round="nearest",
                                         allow_denorm=True, saturate_normals=True)
    assert torch.equal((elems * (2 ** se)).view(torch.int32), out.view(torch.int32)) or \
        bool(torch.isnan(se).any())
    byte = torch.where(torch.isnan(se), torch.full_like(se, 255), se + 127).to(torch.int64)
    return (byte.reshape(-1).numpy(), elems.numpy().view(np.uint32),
            out.numpy().view(np.uint32))


def element_values(codes: np.ndarray, fmt: str) -> np.ndarray:
    """fp32 bits of the element values of ``codes`` (a float code's sign bit kept on zero)."""
    el = FORMATS[fmt].element
    vt = el.value_table() if callable(el.value_table) else el.value_table
    v = vt[codes.astype(np.int64)].astype(np.float32)
    if el.kind != "int":
        neg = (codes.astype(np.int64) >> (el.bits - 1)) & 1
        v = np.where(neg == 1, -np.abs(v), np.abs(v)).astype(np.float32)
    return v.view(np.uint32)


# ---- 1. the stack's own code on every L1 block case -----------------------------------------
@pytest.mark.parametrize("fmt", list(FMTS))
def test_l1_block_cases_match_microxcaling_torch(fmt):
    from mxref.golden.cases import block_cases
    cs = block_cases(FMTS[fmt][1], "float32", 1)
    src = np.stack([c.src for c in cs]).astype(np.uint32)
    byte, elems, deq = peer_quantize(src, fmt)
    q = mxref.quantize(src.view(np.float32), fmt, PROF)
    scales = q.scales[:, 0].astype(np.int64)
    bad_scale = np.nonzero(scales != byte)[0]
    assert bad_scale.size == 0, [(cs[i].cls, hex(int(scales[i])), hex(int(byte[i])))
                                 for i in bad_scale[:10]]
    ok = scales != 0xFF
    mine = element_values(q.codes, fmt)
    diff = (mine != elems) & ok[:, None]
    explained = np.zeros_like(diff)
    if FORMATS[fmt].element.kind == "int":
        # MXINT8 has no -0 code: the torch emulation's -0.0 (sign -1 * floor(...) = -0.0) is
        # code 0x00, +0
        explained = diff & (elems == 0x80000000) & (mine == 0)
    unexplained = np.argwhere(diff & ~explained)
    assert unexplained.size == 0, [
        (cs[r].cls, c, hex(int(src[r, c])), hex(int(mine[r, c])), hex(int(elems[r, c])))
        for r, c in unexplained[:10]]
    # dequantized: value(code) * 2^scale rounded once to fp32 == the stack's A * 2**shared_exp
    mdeq = q.dequantize().view(np.uint32)
    dd = (mdeq != deq) & ok[:, None] & ~explained
    assert not dd.any(), [(cs[r].cls, hex(int(src[r, c])), hex(int(mdeq[r, c])),
                           hex(int(deq[r, c]))) for r, c in np.argwhere(dd)[:10]]
    assert np.isnan(mdeq[~ok].view(np.float32)).all() and \
        np.isnan(deq[~ok].view(np.float32)).all()


# ---- 2. the shared exponent on every binade against torch's float32 log2 ----------------------
def _binade_probes():
    """Per fp32 binade [2^e, 2^(e+1)), e in [-149, 127]: 2^e and the values 2^(e+1) - k ulp
    for k around every possible round-up bound (1, 2, 5, 11, 22, 44, 88 ulps of a 24-bit
    significand, +-1) that the binade holds."""
    out = []
    for e in range(-149, 128):
        ulp_e = max(e - 23, -149)
        top = 1 << (e + 1 - ulp_e)                 # 2^(e+1) in ulps
        ks = {1, 2, 3, 4, 5, 6, 10, 11, 12, 21, 22, 23, 43, 44, 45, 87, 88, 89, 90}
        for n in sorted({top - k for k in ks if k <= top // 2} | {top // 2}):
            v = np.float32(math.ldexp(float(n), ulp_e))
            assert float(v) == math.ldexp(float(n), ulp_e)
            out.append(int(v.view(np.uint32)))
    return np.unique(np.array(out, np.uint32))


def test_f32_log2_floor_rule_matches_torch_log2():
    """mxref's integer rule for floor(fl32(log2(amax))) == torch.floor(torch.log2(amax)) on
    float32 (the stack's own call) for every binade's threshold neighbourhood."""
    from mxref._kernels.semantics import floor_via_f32_log2
    from mxkernels import torch_emu
    a = _binade_probes()
    assert (a & 0x7FFFFFFF).min() > 0 and a.max() < 0x7F800000
    want = torch.floor(torch.log2(torch.from_numpy(a.view(np.float32).copy()))).numpy()
    got = np.array([floor_via_f32_log2(int(b)) for b in a])
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(int(a[i])), int(got[i]), float(want[i])) for i in bad[:10]]
    # torch_emu's twin (its own derivation of the bounds)
    t = torch.from_numpy(a.astype(np.int64))
    ex = t >> 23
    man = t & 0x7FFFFF
    bl = torch.tensor([int(m).bit_length() for m in man.tolist()])
    sub = ex == 0
    big_e = torch.where(sub, bl - 150, ex - 127)
    sig24 = torch.where(sub, man << torch.clamp(24 - bl, 0, 24), man | (1 << 23))
    emu = torch_emu._floor_f32_log2(big_e, sig24).numpy()
    assert (emu == want).all()
    # rounds up somewhere: fp32 0x40FFFFFF (8 - 2^-21) reads as 2^3 (the example of the brief)
    assert float(torch.log2(torch.tensor(f32(0x40FFFFFF)))) == 3.0


def _amax_blocks(amax_bits):
    x = np.zeros((amax_bits.size, 32), np.uint32)
    x[:, 0] = amax_bits
    return x


@pytest.mark.parametrize("impl", ["numba", "oracle", "torch", "triton"])
def test_scale_on_every_binade_all_impls(impl, request):
    """MXINT8 (emax 0, so the byte is floor(log2 amax) + 127 itself, clamped at 0x00, NaN
    above 127) and MXFP4 blocks {amax, 0, ...} for every probe amax: the stack's byte."""
    a = _binade_probes()
    for fmt in ("mxint8", "mxfp4"):
        x = _amax_blocks(a)
        want, _, _ = peer_quantize(x, fmt)
        got = _scales(impl, x, fmt, request)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, [(fmt, hex(int(a[i])), hex(int(got[i])), hex(int(want[i])))
                               for i in bad[:10]]


# ---- 3. hand-worked blocks --------------------------------------------------------------------
NEG0 = -0.0
NAN = float("nan")
INF = float("inf")

# (format, leading block values as floats or fp32 bit patterns (ints), rest +0;
#  scale byte, leading codes) -- worked by hand from the source, see the comments
HAND = [
    # amax 0x40FFFFFF = 8 - 2^-21: log2 = 3 - 1.7e-7, within half an ulp of 3 (ulp 2.4e-7 in
    # [2, 4)) -> fl32 3.0 -> 3 - emax 2 = 1: 0x80 (ocp 0x7F). A = 4 - 2^-22: log2 = 2 - 8.6e-8
    # stays below 2 (half an ulp in [1, 2) is 6e-8) -> private exponent 1, A / 2 * 2 = A,
    # floor(A + 0.5) = 4 -> element 4.0 (0x6)
    ("mxfp4", [0x40FFFFFF], 0x80, [0x6]),
    # E4M3 emax 8: 3 - 8 = -5 (0x7A). A = 256 - 2^-15 (0x437FFFFF): log2 rounds up to 8,
    # A / 2^8 * 2^3 = 8 - 2^-20 -> floor(+0.5) = 8 -> 256 (0x78)
    ("mxfp8_e4m3", [0x40FFFFFF], 0x7A, [0x78]),
    # FLT_MAX = (2 - 2^-23) 2^127: log2 -> 128.0; E4M3: 120 (0xF7), A = 256 - 2^-16 -> 256
    # (0x78)
    ("mxfp8_e4m3", [0x7F7FFFFF], 0xF7, [0x78]),
    # MXINT8 (emax 0): 128 > 127 -> NaN scale
    ("mxint8", [0x7F7FFFFF], 0xFF, []),
    # all-zero blocks: amax read as 2^-126 -> -126 - emax; MXINT8 0x01, the FP formats clamp
    # to -127 (0x00)
    ("mxint8", [], 0x01, [0x00, 0x00]),
    ("mxfp4", [], 0x00, [0x0, 0x0]),
    ("mxfp6_e2m3", [], 0x00, [0x0]),
    ("mxfp6_e3m2", [], 0x00, [0x0]),
    ("mxfp8_e4m3", [], 0x00, [0x0]),
    ("mxfp8_e5m2", [], 0x00, [0x0]),
    # subnormal amax 0x007FFFFF = 2^-126 (1 - 2^-23): log2 rounds up to -126 -> MXINT8 0x01;
    # A = 1 - 2^-23: * 64 = 64 - 2^-17, + 0.5 -> floor 64 (0x40)
    ("mxint8", [0x007FFFFF], 0x01, [0x40]),
    # amax 4 -> 2 - 2 = 0 (0x7F); FP4 quantum at |A| < 1 is 0.5 (private exponent clipped
    # at 0, A * 2^1): 0x3E7FFFFF = 0.25 - 2^-26 -> 0.5 - 2^-25 + 0.5 = 1 - 2^-25, an fp32 tie,
    # RNE -> 1.0 -> floor 1 -> 0.5 (0x1); ocp / microxcaling C++ give 0
    ("mxfp4", [4.0, 0x3E7FFFFF], 0x7F, [0x6, 0x1]),
    # one ulp lower: 0.5 - 2^-24 + 0.5 = 1 - 2^-24 is exact -> floor 0
    ("mxfp4", [4.0, 0x3E7FFFFE], 0x7F, [0x6, 0x0]),
    # the tie 0.25 and one ulp above: 1.0 -> 0x1
    ("mxfp4", [4.0, 0.25, 0x3E800001], 0x7F, [0x6, 0x1, 0x1]),
    # normal ties, ties away: 5 -> 6 (0x7); 5 - ulp -> 4 (0x6); 5 + ulp -> 6; -2.5 -> -3 (0xD);
    # -0.75 -> -1 (0xA)
    ("mxfp4", [4.0, 5.0, 0x409FFFFF, 0x40A00001, -2.5, -0.75], 0x7F,
     [0x6, 0x7, 0x6, 0x7, 0xD, 0xA]),
    # signed zeros: -0.0 -> torch.sign(-0.0) = 0 -> +0 (0x0); -0.125 -> -1 * floor(0.25 + 0.5)
    # = -0.0 (0x8)
    ("mxfp4", [4.0, NEG0, -0.125], 0x7F, [0x6, 0x0, 0x8]),
    # amax 2^100 -> 98 (0xE1); -2^-60 / 2^98 = -2^-158 underflows to -0.0 in fp32 -> +0 (0x0);
    # -2^-40 / 2^98 = -2^-138 is a nonzero subnormal -> -0.0 (0x8)
    ("mxfp4", [2.0 ** 100, -2.0 ** -60, -2.0 ** -40], 0xE1, [0x6, 0x0, 0x8]),
    # MXINT8: amax 1 -> 0x7F; 0x3BFFFFFF = 2^-7 - 2^-31: * 64 = 0.5 - 2^-25 -> 1 (0x01);
    # negative -> -1 (0xFF); 0x3BFFFFFE -> 0
    ("mxint8", [1.0, 0x3BFFFFFF, -f32(0x3BFFFFFF), 0x3BFFFFFE], 0x7F, [0x40, 0x01, 0xFF, 0x00]),
    # NaN / Inf anywhere: amax NaN or log2(Inf) = Inf > 127 -> NaN scale
    ("mxfp4", [NAN, 1.0], 0xFF, []),
    ("mxfp4", [INF, 1.0], 0xFF, []),
    ("mxfp8_e4m3", [-INF, 1.0], 0xFF, []),
    ("mxint8", [NAN], 0xFF, []),
]


def _hand_bits(vals):
    x = np.zeros(32, np.uint32)
    for i, v in enumerate(vals):
        x[i] = v if isinstance(v, (int, np.integer)) else np.float32(v).view(np.uint32)
    return x


@pytest.fixture(scope="module")
def triton_quant():
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    return load_kernels(True)["triton_quant"]


def _run(impl, x, fmt, request):
    """(scale bytes, codes) of rows of 32 fp32 bit patterns under one implementation."""
    prof = get_profile(PROF)
    if impl == "numba":
        q = mxref.quantize(x.view(np.float32), fmt, prof)
        return q.scales[:, 0].astype(np.int64), q.codes.astype(np.int64)
    if impl == "numba_rows":            # a ragged row: quantize_mx's loop, not the flat one
        xr = np.concatenate([x, np.zeros((x.shape[0], 1), np.uint32)], 1)
        q = mxref.quantize(xr.view(np.float32), fmt, prof)
        return q.scales[:, 0].astype(np.int64), q.codes[:, :32].astype(np.int64)
    if impl == "oracle":
        s, c = zip(*[O.quantize_block([int(b) for b in row], FMTS[fmt][1], prof.knobs())
                     for row in x])
        return np.array(s), np.array(c)
    t = torch.from_numpy(x.view(np.float32).copy())
    if impl == "torch":
        from mxkernels import torch_emu
        s, c = torch_emu.quantize_mx(t, fmt=fmt, profile=prof)
    else:
        s, c = request.getfixturevalue("triton_quant").mx_quantize(t, fmt, prof)
    return s.reshape(x.shape[0], -1)[:, 0].numpy().astype(np.int64), \
        c.reshape(x.shape[0], -1).numpy().astype(np.int64)


def _scales(impl, x, fmt, request):
    if impl == "oracle":                 # the scale alone (Fraction elements are slow)
        knobs = get_profile(PROF).knobs()
        return np.array([O.block_scale([int(b) for b in row], FMTS[fmt][1], knobs) for row in x])
    return _run(impl, x, fmt, request)[0]


IMPLS = ["numba", "numba_rows", "oracle", "torch", "triton"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", HAND, ids=lambda c: f"{c[0]}-{c[2]:02x}-{len(c[1])}")
def test_hand_worked_blocks(impl, case, request):
    fmt, vals, scale, codes = case
    x = _hand_bits(vals)[None]
    s, c = _run(impl, x, fmt, request)
    assert int(s[0]) == scale, f"scale 0x{int(s[0]):02x}, hand-worked 0x{scale:02x}"
    assert c[0, :len(codes)].tolist() == codes, [hex(v) for v in c[0, :len(codes)]]


@pytest.mark.parametrize("case", HAND, ids=lambda c: f"{c[0]}-{c[2]:02x}-{len(c[1])}")
def test_hand_worked_blocks_against_the_stack(case):
    """The hand-worked bytes and element values are what microxcaling's own torch code gives."""
    fmt, vals, scale, codes = case
    x = _hand_bits(vals)[None]
    byte, elems, _ = peer_quantize(x, fmt)
    assert int(byte[0]) == scale
    if scale != 0xFF:
        want = element_values(np.array(codes, np.int64), fmt)
        got = elems[0, :len(codes)]
        if FORMATS[fmt].element.kind == "int":     # the emulation's -0.0 is MXINT8's 0x00
            got = np.where(got == 0x80000000, 0, got)
        assert got.tolist() == want.tolist(), [hex(v) for v in got]


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("fmt", list(FMTS))
def test_l1_block_cases_twins_agree_with_numba(impl, fmt, request):
    from mxref.golden.cases import block_cases
    src = np.stack([c.src for c in block_cases(FMTS[fmt][1], "float32", 1)]).astype(np.uint32)
    s0, c0 = _run("numba", src, fmt, request)
    s1, c1 = _run(impl, src, fmt, request)
    assert (s0 == s1).all()
    ok = s0 != 0xFF                      # a NaN scale's codes are don't-care
    bad = np.argwhere((c0 != c1) & ok[:, None])
    assert bad.size == 0, [(hex(int(src[r, i])), hex(int(c0[r, i])), hex(int(c1[r, i])))
                           for r, i in bad[:10]]


# ---- 4. source dtypes, knob validation ---------------------------------------------------------
def test_float32_sources_only():
    prof = get_profile(PROF)
    assert prof.source_dtypes == ("float32",)
    bf = np.zeros((1, 32), np.uint16)
    with pytest.raises(ProfileConflictError, match="bfloat16"):
        mxref.quantize(bf, "mxfp4", PROF, source_dtype="bfloat16")
    with pytest.raises(ProfileConflictError, match="float16"):
        mxref.quantize(np.zeros((1, 32), np.float16), "mxfp4", PROF)
    from mxkernels import torch_emu
    with pytest.raises(ProfileConflictError, match="bfloat16"):
        torch_emu.quantize_mx(torch.zeros(1, 32, dtype=torch.bfloat16), fmt="mxfp4",
                              profile=PROF)
    from mxref.golden.columns import applies
    from mxref.golden.suites.quantize import specs_quantize_mx, specs_quantize_mx_tensor
    assert applies("mxfp4", PROF, "float32") and not applies("mxfp4", PROF, "bfloat16")
    for specs in (specs_quantize_mx(1), specs_quantize_mx_tensor(1)):
        mine = [s for s in specs if s.profile == PROF]
        assert sorted(s.fmt for s in mine) == sorted(FMTS)
        assert {s.src_dtype for s in mine} == {"float32"}
        # every other profile keeps its three source dtypes
        assert {s.src_dtype for s in specs if s.profile == "microxcaling"} == \
            {"float32", "bfloat16", "float16"}


def test_knob_validation():
    p = get_profile(PROF)
    with pytest.raises(ProfileConflictError, match="scale_log2_f32"):
        p.replace(scale_rule="rceil")
    with pytest.raises(ProfileConflictError, match="element_round_f32"):
        p.replace(rounding="rne")
    with pytest.raises(ProfileConflictError, match="source_dtypes"):
        p.replace(source_dtypes=("float64",))
    with pytest.raises(ProfileConflictError):
        get_profile("ocp").replace(name="t", zero_block_amax="min_normal").check_format(
            get_format("nvfp4"))
    with pytest.raises(ProfileConflictError):
        p.check_format(get_format("nvfp4"))
    ocp = get_profile("ocp")
    assert (ocp.scale_log2_f32, ocp.element_round_f32, ocp.zero_block_amax,
            ocp.source_dtypes) == (False, False, "zero", None)


def test_fast_paths_refuse():
    from mxref._kernels.mx import flat_ok
    from mxref._kernels.semantics import encode_fast_ok, thresholds_exact
    from mxkernels import torch_fast
    for knob, val in (("scale_log2_f32", True), ("zero_block_amax", "min_normal"),
                      ("element_round_f32", True)):
        kw = {knob: val}
        if knob == "element_round_f32":
            kw["rounding"] = "ties_away"
        p = get_profile("ocp").replace(name="t", **kw)
        pp = p.kernel_params()
        assert not flat_ok(pp)
        assert not (thresholds_exact(pp) and encode_fast_ok(pp))
        assert not torch_fast.supports("mxfp4", p)
    try:
        from mxkernels.triton_fast import check_supported
        from mxkernels.triton_common import KernelUnsupported
    except ImportError:
        return
    with pytest.raises(KernelUnsupported):
        check_supported("mxfp4", PROF, "float32")


def test_conversion_ops_refuse():
    """fp8_to_mxfp4 computes on exact values, not in microxcaling's float32 order: refused
    (typed); the Triton conversion kernels refuse too."""
    from mxref.fp8fp4 import FP8Tensor, fp8_to_mxfp4
    f8 = FP8Tensor(codes=np.zeros((1, 32), np.uint8), scales=np.full((1, 1), 127, np.uint8),
                   group=32, axis=1, fp8="e4m3")
    with pytest.raises(ProfileConflictError, match="microxcaling"):
        fp8_to_mxfp4(f8, profile=PROF)
