"""mxkernels/triton_sr.py: the Philox stream and stochastic-rounding MX quantization, bit-exact
against the CPU reference (mxref.quantize with sr_profile(...) and rbits/seed; random_bits).

Expected values come from mxref only (and, for Philox, one Random123 known answer). The kernels
run in the Triton interpreter (private copies from load_kernels(True)); with a CUDA device the
same checks also run compiled. Edges random data never hits: rbits 0 / 0xFFFFFFFF, f + r exactly
2^32 and one below, grid values (never rounded), saturation, NaN/Inf blocks, -0, fp32
subnormals, amax = 2^k - 1ulp, ragged and empty shapes, blocking along every axis, offsets
that wrap 2^32. A planted bug (`>` for `>=` in the SR compare) is shown to be caught.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import mxref  # noqa: E402
from mxref.backends.base import Backend  # noqa: E402
from mxkernels.loader import load_kernels  # noqa: E402
from test_kernels_fast import _exec_interpreted  # noqa: E402
from mxref.formats import FORMATS  # noqa: E402
from mxref.golden.suites.sr import _sr_fraction, sr_profile  # noqa: E402
from mxref.quantize import random_bits as ref_random_bits  # noqa: E402
from mxref.verify import verify  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")

MX_FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SRC = Path(__file__).resolve().parents[1] / "mxkernels" / "triton_sr.py"


@pytest.fixture(scope="module", params=DEVICES)
def env(request):
    """(kernel module, device): interpreted copies on cpu, compiled kernels on cuda."""
    dev = request.param
    ks = load_kernels(dev == "cpu")
    return ks["triton_sr"], dev


def _t(a: np.ndarray, dev):
    """numpy -> torch on dev (uint32/uint16 bit patterns as int32/int16)."""
    if a.dtype == np.uint32:
        a = a.view(np.int32)
    elif a.dtype == np.uint16:
        a = a.view(np.int16)
    return torch.from_numpy(np.array(a, copy=True)).to(dev)


def _np(t):
    return t.cpu().numpy()


def _u32(t):
    return _np(t).view(np.uint32)


# =============================================================================================
# Philox stream
# =============================================================================================
def test_random_bits_known_answer(env):
    mod, dev = env
    # Random123 kat_vectors: philox4x32 10, counter 0, key 0 -> first word 0x6627e8d5
    assert int(_u32(mod.random_bits(1, seed=0, offset=0, device=dev))[0]) == 0x6627E8D5


@pytest.mark.parametrize("seed, offset, n", [
    (0, 0, 257), (1, 1, 33), (0x5EED0003, 96, 32), (12345, 2**31 - 5, 64),
    (2**32 + 7, 2**32 - 3, 100),          # key word 1 nonzero; counter wraps 2^32 inside
    (2**64 - 1, 2**32 - 1, 5), (-5, -7, 20), (987654321, 3 * 2**32 + 11, 40), (7, 0, 0)])
def test_random_bits_equals_reference(env, seed, offset, n):
    mod, dev = env
    got = _u32(mod.random_bits(n, seed=seed, offset=offset, device=dev))
    assert got.shape == (n,)
    np.testing.assert_array_equal(got, ref_random_bits((n,), seed, offset))


# =============================================================================================
# edge inputs
# =============================================================================================
def _edge_rows(fmt: str) -> np.ndarray:
    """[rows, 32] float32 blocks: grid values, saturation, specials, -0, subnormals, 2^k-1ulp,
    ties and random data (a row is one MX block)."""
    el = FORMATS[fmt].element
    mags = sorted({float(v) for v in (el.value_table() if callable(el.value_table)
                                      else el.value_table) if np.isfinite(v) and v >= 0})
    mx = mags[-1]
    rng = np.random.default_rng(sum(fmt.encode()))
    rows = []
    g = np.array(mags, np.float64)
    grid = np.resize(np.concatenate([g, -g]), 32) * 2.0 ** 3          # exactly representable
    grid[0] = mx * 8
    rows.append(grid)
    mids = (g[1:] + g[:-1]) / 2                                         # exact midpoints (ties)
    rows.append(np.resize(np.concatenate([mids, -mids, [mx]]), 32))
    sat = np.linspace(mx * 0.9, mx * 1.06, 32)                          # saturation boundary
    rows.append(sat)
    r = rng.standard_normal(32)
    r[3] = np.nan
    rows.append(r)                                                      # NaN block
    r = rng.standard_normal(32)
    r[7] = -np.inf
    rows.append(r)                                                      # Inf block
    r = rng.standard_normal(32) * 1e-3
    r[:8] = -0.0
    rows.append(r)                                                      # -0
    rows.append(np.zeros(32))                                           # all-zero block
    for k in (0, 5, -3, 100, -100):                                     # amax = 2^k - 1ulp
        a = np.float32(2.0 ** k)
        r = rng.standard_normal(32) * 2.0 ** (k - 3)
        r[0] = np.nextafter(a, np.float32(0))
        rows.append(r)
    rows.append(rng.standard_normal(32) * 2.0 ** rng.integers(-20, 20))
    rows.append(rng.standard_normal(32) * 2.0 ** 120)                   # huge block
    out = np.stack([np.asarray(r, np.float64) for r in rows]).astype(np.float32)
    sub = np.arange(1, 33, dtype=np.uint32) * np.uint32(0x12345)        # fp32 subnormals
    sub[::3] |= np.uint32(0x80000000)
    out = np.concatenate([out, sub.view(np.float32)[None]])
    tiny = rng.standard_normal(32).astype(np.float32) * np.float32(2.0 ** -10)
    tiny[0] = 8.0                                                       # elements far below grid
    return np.concatenate([out, tiny[None]]).astype(np.float32)


def _sr_word_rows(x: np.ndarray, fmt: str, prof: str) -> np.ndarray:
    """rbits for x's rows: a few rows of 0, 0xFFFFFFFF, and per element f + r = 2^32 (round
    up) / 2^32 - 1 (round down) from the exact fraction f (a Fraction computation on the
    reference's scale byte, as the golden builder does); the rest random."""
    rng = np.random.default_rng(5)
    el = FORMATS[fmt].element
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    ref = mxref.quantize(x, fmt, prof, axis=-1)
    for i in range(x.shape[0]):
        mode = i % 4
        if mode == 0:
            rb[i] = 0
        elif mode == 1:
            rb[i] = 0xFFFFFFFF
        else:
            sb = int(ref.scales[i, 0])
            if sb == 0xFF:
                continue
            for j in range(x.shape[1]):
                v = float(x[i, j])
                if not np.isfinite(v):
                    continue
                f = _sr_fraction(Fraction(v) / Fraction(2) ** (sb - 127), el)
                if f:
                    rb[i, j] = ((1 << 32) - f - (mode == 3)) & 0xFFFFFFFF
    return rb


def _check(mod, dev, x, fmt, prof, axis=-1, *, rbits=None, seed=None, offset=0):
    sd = "bfloat16" if x.dtype == np.uint16 else None
    ref = mxref.quantize(x, fmt, sr_profile(prof), axis=axis, rbits=rbits, seed=seed,
                         rng_offset=offset, source_dtype=sd)
    kw = {"rbits": _t(rbits, dev)} if rbits is not None else {"seed": seed, "offset": offset}
    s, c = mod.quantize_sr(_t(x, dev), fmt, prof, axis, src_dtype=sd, **kw)
    np.testing.assert_array_equal(_np(s), ref.scales)
    np.testing.assert_array_equal(_np(c), ref.codes)
    return _np(s), _np(c)


@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("prof", ["ocp", "rceil"])
def test_rbits_edges_equal_reference(env, fmt, prof):
    mod, dev = env
    x = _edge_rows(fmt)
    rb = _sr_word_rows(x, fmt, prof)
    # one call: every row with its rbits pattern, plus the same rows under r = 0 / 2^32 - 1
    xx = np.concatenate([x, x, x])
    rr = np.concatenate([rb, np.zeros_like(rb), np.full_like(rb, 0xFFFFFFFF)])
    _, c = _check(mod, dev, xx, fmt, prof, rbits=rr)
    # grid values are never rounded: r = 0 and r = 2^32 - 1 agree on row 0 with RNE
    n = x.shape[0]
    rne = mxref.quantize(x[:1], fmt, prof).codes[0]
    np.testing.assert_array_equal(c[n], rne)
    np.testing.assert_array_equal(c[2 * n], rne)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxint8"])
def test_bfloat16_source_and_other_profiles(env, fmt):
    mod, dev = env
    x = _edge_rows(fmt)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    rb = _sr_word_rows(x, fmt, "ocp")
    _check(mod, dev, bits, fmt, "ocp", rbits=rb)
    for prof in ("torchao_even", "triton_kernels_round_up", "microxcaling", "torchao_rceil"):
        try:
            mxref.get_profile(prof).check_format(FORMATS[fmt])
        except mxref.MXRefError:
            continue
        _check(mod, dev, x, fmt, prof, rbits=rb)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_seed_stream_every_axis_and_ragged(env, fmt):
    mod, dev = env
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 37, 70)) * 2.0 ** rng.integers(-8, 8, (3, 37, 1))) \
        .astype(np.float32)
    x[1, 2, 5] = np.nan
    x[2, 3, :] = 0.0
    for axis, seed, offset in ((-1, 1234, 0), (0, 2**40 + 3, 2**32 - 1000), (1, 77, 5)):
        _check(mod, dev, x, fmt, "ocp" if axis else "rceil", axis, seed=seed, offset=offset)


def test_rbits_axis0_and_empty(env):
    mod, dev = env
    rng = np.random.default_rng(3)
    x = rng.standard_normal((45, 6)).astype(np.float32)
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    _check(mod, dev, x, "mxfp6_e2m3", "ocp", 0, rbits=rb)
    for shape in ((0, 32), (4, 0)):
        e = np.zeros(shape, np.float32)
        _check(mod, dev, e, "mxfp4", "ocp", seed=1)
        _check(mod, dev, e, "mxfp4", "ocp", rbits=np.zeros(shape, np.uint32))


def test_rbits_as_uint32_tensor(env):
    mod, dev = env
    if not hasattr(torch, "uint32"):
        pytest.skip("torch without uint32")
    x = _edge_rows("mxfp4")
    rb = _sr_word_rows(x, "mxfp4", "ocp")
    ref = mxref.quantize(x, "mxfp4", sr_profile("ocp"), rbits=rb)
    s, c = mod.quantize_sr(_t(x, dev), "mxfp4", rbits=_t(rb, dev).view(torch.uint32))
    np.testing.assert_array_equal(_np(c), ref.codes)
    np.testing.assert_array_equal(_np(s), ref.scales)


def test_bad_input_raises(env):
    mod, dev = env
    KU = mod.KernelUnsupported          # the (possibly private) triton_quant copy's class
    x = torch.zeros(4, 32, device=dev)
    with pytest.raises(KU, match="exactly one"):
        mod.quantize_sr(x, "mxfp4")
    with pytest.raises(KU, match="exactly one"):
        mod.quantize_sr(x, "mxfp4", seed=1, rbits=torch.zeros(4, 32, dtype=torch.int32,
                                                                 device=dev))
    with pytest.raises(KU, match="nvfp4"):
        mod.quantize_sr(x, "nvfp4", seed=1)
    with pytest.raises(KU, match="shape"):
        mod.quantize_sr(x, "mxfp4", rbits=torch.zeros(4, 31, dtype=torch.int32, device=dev))
    with pytest.raises(KU, match="uint32"):
        mod.quantize_sr(x, "mxfp4", rbits=torch.zeros(4, 32, dtype=torch.int64, device=dev))
    with pytest.raises(KU, match="float32"):
        mod.quantize_sr(x.double(), "mxfp4", seed=1)
    with pytest.raises(KU):
        mod.random_bits(-1, seed=0, device=dev)
    # non-contiguous input: handled (copied), same result as contiguous
    xt = torch.randn(32, 8, device=dev).t()
    s1, c1 = mod.quantize_sr(xt, "mxfp4", seed=9)
    s2, c2 = mod.quantize_sr(xt.contiguous(), "mxfp4", seed=9)
    assert torch.equal(s1, s2) and torch.equal(c1, c2)


# =============================================================================================
# golden files (op quantize_mx_sr, levels 0 and 1) through the verify engine
# =============================================================================================
class _SRBackend(Backend):
    name = "triton-sr-test"
    version = "0"
    ops = frozenset({"quantize_mx_sr"})
    profiles = ("ocp", "rceil")

    def __init__(self, mod, dev):
        self.mod, self.dev, self.device = mod, dev, dev

    def quantize_mx_sr(self, src, rbits, *, src_dtype, fmt, profile, axis):
        s, c = self.mod.quantize_sr(_t(src, self.dev), fmt, profile, axis,
                                    rbits=_t(rbits, self.dev), src_dtype=src_dtype)
        return _np(s), _np(c)

    def random_bits(self, n, *, seed, offset):
        return _u32(self.mod.random_bits(n, seed=seed, offset=offset, device=self.dev))


@pytest.mark.corpus_twin
@pytest.mark.parametrize("level", [0, 1])
def test_golden_quantize_mx_sr(env, level):
    mod, dev = env
    rep = verify(_SRBackend(mod, dev), ops=["quantize_mx_sr"], levels=(level,))
    s = rep.doc["summary"]
    assert rep.exit_code == 0, (rep.doc["mismatches"][:2], rep.doc["errors"][:2])
    assert s["cases"] > 0 and s["passed_cases"] == s["cases"]
    assert len(rep.doc["files"]) == 24


# =============================================================================================
# a planted bug: round up iff f + r > 2^32 (the rule is >=)
# =============================================================================================
def _planted_copy(tmp_path, old: str, new: str):
    """An interpreted copy of triton_sr.py with one line changed, importing the interpreted
    triton_quant copy (as the verify backend's loader does)."""
    text = SRC.read_text()
    assert text.count(old) == 1, f"planting site {old!r} not found exactly once"
    path = tmp_path / "triton_sr_planted.py"
    path.write_text(text.replace(old, new))
    ks = load_kernels(True)
    deps = ("mxkernels.triton_common", "mxkernels.triton_quant")   # what the module imports
    return _exec_interpreted(path, {d: ks[d.rsplit(".", 1)[1]] for d in deps})


def test_planted_strict_compare_is_caught(tmp_path):
    # up iff f + r >= 2^32, the carry out of the uint32 add; planted: f + r > 2^32
    site = "up = (f + rb.to(tl.uint32, bitcast=True)) < f"
    bad = _planted_copy(tmp_path, site, site.replace(
        "up = (f + rb.to(tl.uint32, bitcast=True)) < f",
        "up = ((f + rb.to(tl.uint32, bitcast=True)) < f) & "
        "((f + rb.to(tl.uint32, bitcast=True)) != 0)"))
    fmt, prof = "mxfp4", "ocp"
    x = _edge_rows(fmt)
    rb = _sr_word_rows(x, fmt, prof)
    with pytest.raises(AssertionError):
        _check(bad, "cpu", x, fmt, prof, rbits=rb)
    # the golden corpus names the class that catches it (SR4: f + r exactly 2^32)
    rep = verify(_SRBackend(bad, "cpu"), ops=["quantize_mx_sr"], levels=(1,), formats=[fmt],
                 profiles=[prof], src_dtypes=["float32"])
    assert rep.exit_code == 1
    bad_cls = {c for c, v in rep.doc["summary"]["by_class"].items() if v["mismatched"]}
    assert bad_cls == {"SR4"}, bad_cls


# =============================================================================================
# ahead-of-time compilation for sm_90, gfx942, gfx950 (no GPU needed)
# =============================================================================================



@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e5m2", "mxint8"])
def test_four_word_stream_every_axis_and_ragged(env, fmt):
    """words=4: word i mod 4 of counter offset + i div 4 (mxref.random_bits(..., words=4)),
    with an offset that wraps 2^32; the one-word stream gives other codes."""
    mod, dev = env
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 37, 70)) * 2.0 ** rng.integers(-8, 8, (3, 37, 1))) \
        .astype(np.float32)
    for axis, seed, offset in ((-1, 1234, 0), (0, 2**40 + 3, 2**32 - 10), (1, 77, 5)):
        ref = mxref.quantize(x, fmt, sr_profile("ocp"), axis=axis, seed=seed,
                             rng_offset=offset, rng_words=4)
        s, c = mod.quantize_sr(_t(x, dev), fmt, "ocp", axis, seed=seed, offset=offset, words=4)
        np.testing.assert_array_equal(_np(s), ref.scales)
        np.testing.assert_array_equal(_np(c), ref.codes)
        one = mxref.quantize(x, fmt, sr_profile("ocp"), axis=axis, seed=seed,
                             rng_offset=offset)
        assert not np.array_equal(one.codes, ref.codes)
    # the last axis a multiple of 4 (ragged last block of 4): four words per evaluation
    x2 = (rng.standard_normal((37, 100)) * 4).astype(np.float32)
    ref = mxref.quantize(x2, fmt, sr_profile("ocp"), seed=5, rng_offset=2**32 - 7, rng_words=4)
    s, c = mod.quantize_sr(_t(x2, dev), fmt, "ocp", seed=5, offset=2**32 - 7, words=4)
    np.testing.assert_array_equal(_np(s), ref.scales)
    np.testing.assert_array_equal(_np(c), ref.codes)
    with pytest.raises(mod.KernelUnsupported, match="words=3"):
        mod.quantize_sr(_t(x, dev), fmt, seed=1, words=3)
    with pytest.raises(mod.KernelUnsupported, match="rbits"):
        mod.quantize_sr(_t(x, dev), fmt, rbits=_t(np.zeros(x.shape, np.uint32), dev), words=4)


def test_four_word_stream_nvfp4(env):
    mod, dev = env
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((1, 40, 64)) * 3).astype(np.float32)
    for prof in ("te_nvfp4", "ocp"):
        ref = mxref.quantize(x[0], "nvfp4", sr_profile(prof), seed=99, rng_offset=2**32 - 3,
                             rng_words=4)
        s, c, ts = mod.quantize_nvfp4_sr(_t(x, dev), prof, seed=99, offset=2**32 - 3, words=4)
        np.testing.assert_array_equal(_np(s)[0], ref.scales)
        np.testing.assert_array_equal(_np(c)[0], ref.codes)
