"""mxkernels.triton_fast.quantize_dequantize (``mx_qdq_kernel``, fake quantization) against mxref.

Expected values come only from the reference: ``mxref.quantize`` (scales, codes) and
``mxref.dequantize`` (fp32 values) of the input's values as float32; the bf16 expectation is
that fp32 value rounded to nearest even by integer operations here (cross-checked against
ml_dtypes). Nothing expected is computed by mxkernels. The kernels run in the Triton
interpreter (private copies from ``load_kernels(True)``), one default-sized tile per tensor
except in the multi-tile test, so the whole file stays fast on a CPU.

Comparison rules (``_assert_values``): bit for bit, so -0 != +0 and one ulp counts; any NaN
matches any NaN (a poisoned block is NaN in both), a NaN never matches a number.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
ml_dtypes = pytest.importorskip("ml_dtypes")

import mxref
from mxkernels.triton_fast import FAST_COMBOS, FAST_FORMATS
from mxkernels.loader import load_kernels
from mxref.formats import get_format

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
# the interpreter's numpy arithmetic on poisoned / huge blocks (their values are replaced by NaN
# or are compared below)
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]
COMBO_IDS = [f"{f}-{p}" for f, p in FAST_COMBOS]


@pytest.fixture(scope="module")
def tf():
    return load_kernels(True).modules["triton_fast"]


# ---- expected values (mxref only) ----------------------------------------------------------
def _ref(x, fmt, prof, axis):
    """mxref's quantization of x's values, given to the reference as float32.

    A block-axis length that is a nonzero multiple of 32 gets one zero slice appended, which
    is its own (ragged) block and is cut off again: MX blocks are quantized independently, so
    every other block's scale and codes are unchanged. It keeps mxref on one kernel
    (quantize_mx; tests/test_fast_paths.py holds its whole-block fast path to it), whose
    first-use compilation already dominates this file's runtime (the fast path's adds ~10 s)."""
    a = x.detach().cpu().to(F32).numpy()
    ax = axis % a.ndim
    n = a.shape[ax]
    if not a.size or n % 32:
        return mxref.quantize(a, fmt, prof, axis=axis)
    pad = list(a.shape)
    pad[ax] = 1
    q = mxref.quantize(np.concatenate([a, np.zeros(pad, np.float32)], axis=ax), fmt, prof,
                       axis=axis)
    keep = [slice(None)] * a.ndim
    keep[ax] = slice(0, n)
    codes = np.ascontiguousarray(q.codes[tuple(keep)])
    keep[ax] = slice(0, n // 32)
    return dataclasses.replace(q, codes=codes, scales=np.ascontiguousarray(q.scales[tuple(keep)]))


def _bf16_rne_bits(v32: np.ndarray) -> np.ndarray:
    """uint16 bits of float32 values rounded to nearest even in bfloat16, by integer ops on the
    fp32 bits (exact for subnormals and for the carry into the exponent; overflow gives Inf;
    NaN stays a quiet NaN)."""
    u = np.ascontiguousarray(v32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = np.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, r)
    return r.astype(np.uint16)


def _expected_bits(v32: np.ndarray, out_dtype) -> np.ndarray:
    v32 = np.ascontiguousarray(v32, dtype=np.float32)
    return v32.view(np.uint32) if out_dtype == F32 else _bf16_rne_bits(v32)


def _bits(t) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == F32:
        return t.view(torch.int32).numpy().view(np.uint32)
    assert t.dtype == BF16, t.dtype
    return t.view(torch.int16).numpy().view(np.uint16)


def _value_mismatches(got: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """Indices where the bit patterns differ, any NaN matching any NaN."""
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got.dtype, exp.dtype,
                                                               got.shape, exp.shape)
    if got.dtype == np.uint32:
        mag, inf = np.uint32(0x7FFFFFFF), np.uint32(0x7F800000)
    else:
        mag, inf = np.uint16(0x7FFF), np.uint16(0x7F80)
    gn, en = (got & mag) > inf, (exp & mag) > inf
    return np.argwhere((gn != en) | (~en & (got != exp)))


def _assert_values(got, v32: np.ndarray, out_dtype, what: str, ignore=None) -> None:
    """Kernel values ``got`` (torch) == mxref's fp32 values ``v32`` in ``out_dtype`` (except
    where the boolean mask ``ignore`` is set)."""
    assert got is not None, f"{what}: no output"
    assert got.dtype == out_dtype, f"{what}: dtype {got.dtype}, expected {out_dtype}"
    assert tuple(got.shape) == v32.shape, f"{what}: shape {tuple(got.shape)} != {v32.shape}"
    g, e = _bits(got), _expected_bits(v32, out_dtype)
    if ignore is not None:
        g, e = g[~ignore], e[~ignore]
        v32 = v32[~ignore]
    bad = _value_mismatches(g, e)
    if bad.size:
        i = tuple(int(k) for k in bad[0])
        raise AssertionError(f"{what}: {len(bad)} value mismatches, first at {i}: got "
                             f"{int(g[i]):#x}, expected {int(e[i]):#x} (mxref fp32 "
                             f"{float(v32[i])!r})")


def _assert_bytes(got, exp: np.ndarray, what: str) -> None:
    assert got is not None, f"{what}: not returned"
    g = got.detach().cpu().numpy()
    assert g.dtype == np.uint8 and g.shape == exp.shape, f"{what}: {g.dtype} {g.shape} != " \
                                                         f"{exp.dtype} {exp.shape}"
    bad = np.argwhere(g != exp)
    if bad.size:
        i = tuple(int(k) for k in bad[0])
        raise AssertionError(f"{what}: {len(bad)} mismatches, first at {i}: got "
                             f"{int(g[i]):#04x}, expected {int(exp[i]):#04x}")


def _check(mod, x, fmt, prof, *, out_dtype=F32, rows=True, cols=True, **launch):
    """quantize_dequantize(with_codes=True) == mxref for every output; returns the outputs."""
    rv, cv, q = mod.quantize_dequantize(x, fmt, prof, rows=rows, cols=cols, out_dtype=out_dtype,
                                        with_codes=True, **launch)
    assert q is not None and len(q) == 4
    tag = f"{fmt}/{prof}/{x.dtype}/{tuple(x.shape)}/{out_dtype}"
    rs, rc, cs, cc = q
    for on, axis, v, s, c, name in ((rows, -1, rv, rs, rc, "rows"), (cols, 0, cv, cs, cc, "cols")):
        if not on:
            assert v is None and s is None and c is None, f"{tag}: {name} not asked for"
            continue
        ref = _ref(x, fmt, prof, axis)
        _assert_bytes(s, ref.scales, f"{tag} {name} scales")
        _assert_bytes(c, ref.codes, f"{tag} {name} codes")
        _assert_values(v, mxref.dequantize(ref), out_dtype, f"{tag} {name} values")
    return rv, cv, q


# ---- inputs ----------------------------------------------------------------------------------
def _grid(fmt) -> np.ndarray:
    """float64 magnitudes of element codes 0..max_code, from mxref's format description."""
    el = get_format(fmt).element
    return np.array([float(el.decode_magnitude(k)) for k in range(el.max_code + 1)])


def _exact_in(v, dt) -> np.ndarray:
    """Mask: float64 values exactly representable (and finite) in torch dtype dt."""
    v = np.asarray(v, dtype=np.float64)
    t = torch.from_numpy(v).to(dt).to(torch.float64).numpy()
    return np.isfinite(t) & (t == v)


def _step(v, dt, k) -> np.ndarray:
    """|v| (exact in dt) moved by k units in the last place of dt (bit pattern + k)."""
    t = torch.from_numpy(np.abs(np.asarray(v, dtype=np.float64))).to(dt)
    it = torch.int32 if dt == F32 else torch.int16
    return (t.view(it) + k).view(dt).to(torch.float64).numpy()


# scale exponents k of the tie blocks: amax = max_normal * 2^k makes every scale rule pick 2^k;
# -120 puts ties among fp32 subnormal inputs, 100 near the top of the exponent range
TIE_EXPS = {F32: (0, -9, 11, 100), BF16: (0, -9, 11, 100), F16: (0, -4, 3, -12)}
TINY_TIE_EXPS = {F32: (-120,), BF16: (-120,), F16: ()}


def _tie_blocks(fmt, dt, exps) -> list:
    """Blocks of amax max_normal * 2^k whose other 31 slots are element-grid midpoints * 2^k
    (exact ties) and those midpoints +-1 ulp of dt, with both signs, for k in exps."""
    vals = _grid(fmt)
    mids = (vals[1:] + vals[:-1]) / 2
    out = []
    for k in exps:
        amax = vals[-1] * 2.0 ** k
        if not _exact_in([amax], dt)[0]:
            continue
        m = mids * 2.0 ** k
        m = m[_exact_in(m, dt)]
        pool = np.concatenate([m, _step(m, dt, 1), _step(m, dt, -1)])
        pool = pool[np.isfinite(pool) & (pool > 0) & (pool <= amax)]
        for i in range(0, len(pool), 31):
            chunk = pool[i:i + 31]
            b = np.zeros(32)
            b[0] = amax
            b[1:1 + len(chunk)] = chunk
            b[2::3] *= -1.0
            out.append(b)
    return out


def _pow2_blocks(j, dt) -> list:
    """Blocks of amax 2^j - 1ulp and exactly 2^j (rceil / ceil / round_down decide on the
    mantissa)."""
    p = 2.0 ** j
    out = []
    for a in (_step([p], dt, -1)[0], p):
        b = a * np.linspace(-1.0, 1.0, 32)
        b[0] = a
        out.append(b)
    return out


def _special_blocks(fmt, dt) -> list:
    """NaN / Inf, signed zeros, 2^j +- 1ulp, saturation, the dtype's subnormals (float16) and
    largest values: blocks whose dequantized values are never fp32 subnormals."""
    el = get_format(fmt).element
    maxn = float(el.max_normal)
    emax = el.emax
    base = np.linspace(-3.0, 3.0, 32)
    out = []
    for special in (np.nan, np.inf, -np.inf):          # one special inside a normal block
        b = base.copy()
        b[7] = special
        out.append(b)
    b = base.copy()
    b[0], b[31] = -np.inf, np.nan
    out.append(b)
    b = np.full(32, 2.0 ** -20)                       # NaN beside tiny values
    b[13] = np.nan
    out.append(b)
    b = np.zeros(32)                                  # -0 elements beside normal values, and
    b[3] = b[9] = -0.0                                # negatives that round to -0
    b[5], b[6], b[8] = 1.5, -1e-4, -2.0 ** -12
    out.append(b)
    out.append(np.full(32, -0.0))                     # all -0
    out.append(np.zeros(32))                          # all +0
    b = np.zeros(32)
    b[::2] = -0.0                                     # mixed signed zeros
    out.append(b)
    for j in ((0, 5, -7, 40) if dt != F16 else (0, 5, -7)):
        out += _pow2_blocks(j, dt)
    # saturation: amax just above max_normal * 2^j (floor / round_down scales overflow the
    # element range) and just below 2^(emax + 1 + j)
    for j in ((0, -3, 30) if dt != F16 else (0, -3)):
        hi = _step([maxn * 2.0 ** j], dt, 1)[0]
        top = _step([2.0 ** (emax + 1 + j)], dt, -1)[0]
        for a in (hi, top):
            b = np.linspace(-a, a, 32)
            b[0], b[31] = -a, a
            out.append(b)
    if dt == F16:                                     # float16 subnormals
        sub = 2.0 ** -24 * np.array([1, 3, 64, 511, 1023, 341])
        b = np.zeros(32)
        b[:6], b[6:12] = sub, -sub
        out.append(b.copy())
        b[31] = 1.0
        out.append(b)
        b = np.linspace(-1.0, 1.0, 32) * 60000.0      # near float16 max
        b[0] = -65504.0
        out.append(b)
        return out
    b = np.zeros(32)                                  # fp32 subnormals beside a normal amax
    b[:8], b[8:16] = FP32_SUBNORMALS, -FP32_SUBNORMALS
    b[31] = 1.0
    out.append(b)
    # huge blocks: amax = the dtype's largest finite value and near 2^127
    big = float(torch.finfo(dt).max)
    for amax in (big, 2.0 ** 127, 1.5 * 2.0 ** 127):
        b = np.linspace(-1.0, 1.0, 32) * amax
        b[0], b[1] = amax, -amax
        out.append(b)
    return out


FP32_SUBNORMALS = 2.0 ** -149 * np.array([1, 3, 0x40, 0x400000, 0x7FFFFF, 0x555555, 0x10000,
                                          0x30000])


def _tiny_blocks(fmt, dt) -> list:
    """Blocks whose dequantized values include fp32 subnormals (|v| < 2^-126): scale byte 0
    (amax 2^-126 .. 2^-140), fp32-subnormal inputs, ties at scale 2^-120, amax 2^-100."""
    if dt == F16:
        return []
    out = _tie_blocks(fmt, dt, TINY_TIE_EXPS[dt]) + _pow2_blocks(-100, dt)
    # fp32 subnormal inputs: alone (byte 0) and beside amax ~2^-120 (nonzero codes)
    for amax in (0.0, 2.0 ** -118, 1.75 * 2.0 ** -120):
        b = np.zeros(32)
        b[:8], b[8:16] = FP32_SUBNORMALS, -FP32_SUBNORMALS
        b[31] = amax
        out.append(b)
    # tiny blocks, amax 2^-126 .. 2^-140: scale byte 0 (2^-127); k * 2^-136 are exact element
    # values of E4M3 at that scale, many of them below bf16's smallest subnormal 2^-133
    for e in (-126, -127, -129, -133, -136, -140):
        b = np.arange(-15, 17) / 16 * 2.0 ** e
        b[0] = -(1.5 * 2.0 ** e)
        out.append(b)
    b = np.arange(-15, 17) * 2.0 ** -136
    b[0] = 2.0 ** -126
    out.append(b)
    return out


def _blocks_tensor(blocks, dt):
    """[n, 64] tensor in dt, two blocks per row; values rounded to dt (the reference sees the
    rounded values)."""
    if len(blocks) % 2:
        blocks.append(np.ones(32))
    a = np.array(blocks, dtype=np.float64).reshape(-1, 64)
    return torch.from_numpy(a).to(dt)


def _edge_tensor(fmt, dt, tiny=True):
    """Ties, specials, (with tiny=True) the blocks of fp32-subnormal values."""
    blocks = _tie_blocks(fmt, dt, TIE_EXPS[dt]) + _special_blocks(fmt, dt)
    return _blocks_tensor(blocks + (_tiny_blocks(fmt, dt) if tiny else []), dt)


def _tiny_tensor(fmt, dt=F32):
    return _blocks_tensor(_tiny_blocks(fmt, dt), dt)


def _f32_subnormal(v32):
    return (v32 != 0) & (np.abs(v32) < 2.0 ** -126)


def _random_tensor(R, C, dt, seed):
    g = np.random.default_rng(seed)
    x = g.standard_normal((R, C)) * np.exp2(g.integers(-20, 20, size=(R, 1)))
    x[g.random((R, C)) < 0.02] *= 1000.0
    if dt == F16:
        x = np.clip(x * 2.0 ** -20, -6e4, 6e4)
    x = torch.from_numpy(x).to(dt)
    if R > 20 and C > 40:
        x[3, 4] = float("nan")
        x[20, 40] = float("-inf")
        x[R - 1, C - 1] = -0.0
    return x


# ---- the inputs cover what they claim (reference only) ----------------------------------------
def _both_refs(x, fmt, prof="ocp"):
    return [mxref.dequantize(_ref(x, fmt, prof, ax)) for ax in (-1, 0)]


@pytest.mark.parametrize("fmt", FAST_FORMATS)
def test_edge_tensor_covers_the_cases(fmt):
    el = get_format(fmt).element
    x = _edge_tensor(fmt, F32)
    a = x.numpy()
    assert ((np.abs(a) > 0) & (np.abs(a) < 2.0 ** -126)).any()          # fp32 subnormals
    r = _ref(x, fmt, "ocp", -1)
    amax = np.nan_to_num(np.abs(a), posinf=1.0).reshape(a.shape[0], 2, 32).max(-1)
    assert ((r.scales == 0) & (amax > 0)).any()                          # tiny -> byte 0
    assert (r.scales == 255).any()                                       # NaN / Inf blocks
    assert r.scales[r.scales < 255].max() == 254 - el.emax               # the largest byte
    assert (r.codes == el.sign_mask).any()                               # -0 codes
    v = mxref.dequantize(r)
    assert (np.isnan(v).reshape(-1, 32).all(1) == (r.scales.reshape(-1) == 255)).all()
    assert ((v == 0) & np.signbit(v)).any()
    # fp32-subnormal values come only from the tiny blocks (the bf16 tests rely on it)
    for dt in (F32, BF16, F16):
        xt = _edge_tensor(fmt, dt, tiny=False)
        assert xt.dtype == dt
        for xx in (xt, xt.t().contiguous()):
            assert not any(_f32_subnormal(w).any() for w in _both_refs(xx, fmt))
    for dt in (F32, BF16):
        assert _f32_subnormal(_both_refs(_tiny_tensor(fmt, dt), fmt)[0]).any()
    if fmt.startswith("mxfp8"):
        # values below bf16's smallest subnormal 2^-133, some rounded to 0, some not
        w = _both_refs(_tiny_tensor(fmt), fmt)[0]
        tiny = (w != 0) & (np.abs(w) < 2.0 ** -133)
        b = _bf16_rne_bits(w[tiny])
        assert ((b & 0x7FFF) == 0).any() and ((b & 0x7FFF) != 0).any()


def test_bf16_rne_helper_matches_ml_dtypes():
    """The integer RNE used for the bf16 expectations == ml_dtypes' float32 -> bfloat16 cast."""
    g = np.random.default_rng(0)
    u = g.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 1, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x28000, 0x7FFFFF,
                        0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F800000, 0xFF800000, 0x3F808000,
                        0x3F818000, 0x007F8000, 0x00008000, 0x00018000, 0x00400000],
                       dtype=np.uint32)
    u = np.concatenate([u, special, special | 0x80000000])
    v = u.view(np.float32)
    ours = _bf16_rne_bits(v)
    with np.errstate(invalid="ignore"):
        theirs = v.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert not _value_mismatches(ours, theirs).size


def test_fast_combos_claim_every_format_with_ocp_and_rceil():
    for fmt in ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"):
        for prof in ("ocp", "rceil"):
            assert (fmt, prof) in FAST_COMBOS


# ---- 1. both orientations, fp32 out, codes and scales --------------------------------------
@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_edges_both_orientations_f32(tf, fmt, prof):
    """Ties, tie +-1ulp, NaN / Inf, signed zeros, 2^k and 2^k - 1ulp, saturation, fp32
    subnormals, tiny (byte 0) and huge blocks: as rows (x) and as columns (x.T), both
    orientations of each computed in one launch."""
    x = _edge_tensor(fmt, F32)
    _check(tf, x, fmt, prof)
    _check(tf, x.t().contiguous(), fmt, prof)


ONE_BY_ONE = (-3.7, float("nan"), float("inf"), -0.0, 1e-40, 3.0e38, 0.0)


@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_ragged_and_one_element(tf, fmt, prof):
    """37 x 45 (random, NaN, -Inf, -0) and a 1 x 1 tensor."""
    i = FAST_COMBOS.index((fmt, prof))
    _check(tf, _random_tensor(37, 45, F32, seed=i), fmt, prof)
    _check(tf, torch.full((1, 1), ONE_BY_ONE[i % len(ONE_BY_ONE)], dtype=F32), fmt, prof)


def test_more_ragged_shapes_and_one_element_specials(tf):
    for fmt, prof in (("mxfp4", "rceil"), ("mxfp8_e5m2", "ocp")):
        for shape in ((31, 33), (1, 70), (65, 2)):
            _check(tf, _random_tensor(*shape, F32, seed=shape[0]), fmt, prof)
    for v in ONE_BY_ONE:
        _check(tf, torch.full((1, 1), v, dtype=F32), "mxfp8_e4m3", "ocp")


def test_multiple_tiles_and_noncontiguous(tf):
    """Several programs with ragged tiles in both directions (the only non-default tiles)."""
    x = _random_tensor(40, 70, F32, seed=5)
    _check(tf, x, "mxfp4", "ocp", block_rows=32, block_cols=32)
    _check(tf, x, "mxfp8_e4m3", "rceil", out_dtype=BF16, block_rows=64, block_cols=32)
    _check(tf, x.t(), "mxfp6_e3m2", "ocp")              # non-contiguous input


@pytest.mark.parametrize("shape", [(0, 45), (37, 0), (0, 0)])
@pytest.mark.parametrize("out_dtype", [F32, BF16], ids=["f32", "bf16"])
def test_empty(tf, shape, out_dtype):
    x = torch.empty(shape, dtype=BF16)
    rv, cv, q = _check(tf, x, "mxfp4", "ocp", out_dtype=out_dtype)
    assert rv.numel() == 0 and cv.numel() == 0
    rv, cv, q = tf.quantize_dequantize(x, "mxfp8_e4m3", "rceil", out_dtype=out_dtype)
    assert tuple(rv.shape) == shape and cv is None and q is None


# ---- 2. bf16 output -------------------------------------------------------------------------
@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_edges_bf16_out(tf, fmt, prof):
    """bf16 values == RNE(bf16) of mxref's fp32 values: every edge block except those whose
    values are fp32 subnormals (see the two tests below)."""
    x = _edge_tensor(fmt, F32, tiny=False)
    _check(tf, x, fmt, prof, out_dtype=BF16)
    _check(tf, x.t().contiguous(), fmt, prof, out_dtype=BF16)


# The bf16 rounding of fp32-subnormal values: a float cast in the kernel was wrong under the
# interpreter (Triton's interpreted fp32 -> bf16 cast truncates and maps 2^-127 to 0x0000);
# the kernel now rounds with integer ops, and these tests caught the cast.
def test_bf16_out_fp32_subnormal_value_minimal(tf):
    x = torch.zeros(1, 32, dtype=F32)
    x[0, 0], x[0, 1] = 2.0 ** -126, 2.0 ** -127
    _check(tf, x, "mxfp4", "ocp", out_dtype=BF16, cols=False)


@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_bf16_out_fp32_subnormal_values(tf, fmt, prof):
    """Tiny blocks (scale byte 0, fp32-subnormal inputs, amax 2^-100 / ties at 2^-120) in bf16,
    including values below 2^-133 that RNE rounds to 0 or to bf16's smallest subnormal."""
    _check(tf, _tiny_tensor(fmt), fmt, prof, out_dtype=BF16)


@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_bf16_out_tiny_blocks_outside_the_subnormal_values(tf, fmt, prof):
    """On the tiny blocks the scales, codes and every bf16 value whose fp32 value is not an fp32
    subnormal are right (those are test_bf16_out_fp32_subnormal_values'; fp32 output: all
    right, in test_edges_both_orientations_f32)."""
    x = _tiny_tensor(fmt)
    rv, cv, q = tf.quantize_dequantize(x, fmt, prof, rows=True, cols=True, out_dtype=BF16,
                                       with_codes=True)
    for axis, v, s, c in ((-1, rv, q[0], q[1]), (0, cv, q[2], q[3])):
        ref = _ref(x, fmt, prof, axis)
        _assert_bytes(s, ref.scales, f"axis {axis} scales")
        _assert_bytes(c, ref.codes, f"axis {axis} codes")
        v32 = mxref.dequantize(ref)
        _assert_values(v, v32, BF16, f"axis {axis} values", ignore=_f32_subnormal(v32))


# ---- 3. bf16 / fp16 sources ------------------------------------------------------------------
@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_half_sources(tf, fmt, prof, dt):
    """The edge tensor built in dt (ties +-1ulp of dt; tiny blocks for bf16), the reference
    given the same values as float32."""
    x = _edge_tensor(fmt, dt)
    assert x.dtype == dt
    _check(tf, x, fmt, prof)


def test_half_sources_transposed_bf16_out_and_random(tf):
    for dt in (BF16, F16):
        for fmt, prof in (("mxfp4", "ocp"), ("mxfp8_e5m2", "rceil"), ("mxfp6_e2m3", "ocp")):
            x = _edge_tensor(fmt, dt, tiny=False).t().contiguous()
            _check(tf, x, fmt, prof, out_dtype=BF16)
            _check(tf, _random_tensor(37, 45, dt, seed=11), fmt, prof)


# ---- 4. one orientation ----------------------------------------------------------------------
def _same_values(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and \
        not _value_mismatches(_bits(a), _bits(b)).size


@pytest.mark.parametrize(("fmt", "prof"), FAST_COMBOS, ids=COMBO_IDS)
def test_rows_only_cols_only(tf, fmt, prof):
    x = torch.cat([_random_tensor(37, 64, F32, seed=7), _edge_tensor(fmt, F32)[:27]], 0)
    rv, cv, (rs, rc, cs, cc) = _check(tf, x, fmt, prof)
    r1, c1, q1 = _check(tf, x, fmt, prof, rows=True, cols=False)
    assert c1 is None and q1[2] is None and q1[3] is None
    assert _same_values(r1, rv) and torch.equal(q1[0], rs) and torch.equal(q1[1], rc)
    r2, c2, q2 = _check(tf, x, fmt, prof, rows=False, cols=True)
    assert r2 is None and q2[0] is None and q2[1] is None
    assert _same_values(c2, cv) and torch.equal(q2[2], cs) and torch.equal(q2[3], cc)


def test_without_codes(tf):
    """with_codes=False: q is None and the values are those of the with_codes run."""
    x = _random_tensor(37, 64, F32, seed=8)
    for fmt, prof in (("mxfp4", "ocp"), ("mxfp8_e4m3", "rceil")):
        rv, cv, _ = _check(tf, x, fmt, prof)
        r3, c3, q3 = tf.quantize_dequantize(x, fmt, prof, rows=False, cols=True,
                                            out_dtype=F32)
        assert r3 is None and q3 is None and _same_values(c3, cv)
        r4, c4, q4 = tf.quantize_dequantize(x, fmt, prof, out_dtype=F32)   # default: rows
        assert c4 is None and q4 is None and _same_values(r4, rv)
        r5, c5, q5 = tf.quantize_dequantize(x, fmt, prof, cols=True, out_dtype=F32)
        assert q5 is None and _same_values(r5, rv) and _same_values(c5, cv)


def test_default_out_dtype_is_bf16(tf):
    x = _random_tensor(37, 45, F32, seed=1)
    rv, cv, q = tf.quantize_dequantize(x, "mxfp4", "ocp")
    assert rv.dtype == BF16 and cv is None and q is None
    _assert_values(rv, mxref.dequantize(_ref(x, "mxfp4", "ocp", -1)), BF16, "default")


# ---- 5. planted bugs: the comparison fails when an output is wrong -----------------------------
def _first(mask):
    idx = np.argwhere(mask.detach().cpu().numpy())
    assert idx.size, "the planted input lacks the element to corrupt"
    return tuple(int(k) for k in idx[0])


def _flip_value_bit(rv, cv, q):
    rv = rv.clone()
    i = _first(torch.isfinite(rv) & (rv != 0))
    rv.view(torch.int32 if rv.dtype == F32 else torch.int16)[i] ^= 1
    return rv, cv, q


def _plus_zero_to_minus_zero(rv, cv, q):
    cv = cv.clone()
    i = _first((cv == 0) & ~torch.signbit(cv))
    cv[i] = -0.0
    return rv, cv, q


def _nan_to_number(rv, cv, q):
    rv = rv.clone()
    rv[_first(torch.isnan(rv))] = 0.0
    return rv, cv, q


def _number_to_nan(rv, cv, q):
    cv = cv.clone()
    cv[_first(torch.isfinite(cv))] = float("nan")
    return rv, cv, q


def _swap_orientations(rv, cv, q):
    return cv, rv, q


def _flip_code_bit(rv, cv, q):
    q = list(q)
    q[3] = q[3].clone()
    q[3][5, 7] ^= 1
    return rv, cv, tuple(q)


def _scale_plus_one(rv, cv, q):
    q = list(q)
    q[0] = q[0].clone()
    q[0][1, 0] += 1
    return rv, cv, tuple(q)


MUTATIONS = {f.__name__.lstrip("_"): f for f in (
    _flip_value_bit, _plus_zero_to_minus_zero, _nan_to_number, _number_to_nan,
    _swap_orientations, _flip_code_bit, _scale_plus_one)}


class _Planted:
    """The kernel module with quantize_dequantize's outputs passed through ``mutate``."""

    def __init__(self, tf, mutate, bf16_from_f32=None):
        self.tf, self.mutate, self.bf16_from_f32 = tf, mutate, bf16_from_f32

    def quantize_dequantize(self, x, fmt, prof, **kw):
        if self.bf16_from_f32 is not None and kw.get("out_dtype") == BF16:
            rv, cv, q = self.tf.quantize_dequantize(x, fmt, prof, **{**kw, "out_dtype": F32})
            conv = self.bf16_from_f32
            return (None if rv is None else conv(rv), None if cv is None else conv(cv), q)
        return self.mutate(*self.tf.quantize_dequantize(x, fmt, prof, **kw))


def _planted_input():
    x = _random_tensor(64, 64, F32, seed=2)
    x[0, 0] = float("nan")          # a poisoned block in both orientations
    x[0:32, 2] = 2.0 ** -30         # a column block that rounds to +0 under mxfp4 ...
    x[0, 2] = 1.0                   # ... beside its amax
    return x


def test_planted_control_passes(tf):
    """The unmutated kernel passes on the planted input (so the failures below are the
    mutations')."""
    _check(_Planted(tf, lambda *o: o), _planted_input(), "mxfp4", "ocp")


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_planted_bug_is_caught(tf, name):
    with pytest.raises(AssertionError, match="mismatch"):
        _check(_Planted(tf, MUTATIONS[name]), _planted_input(), "mxfp4", "ocp")


def _bf16_truncate(v):
    return (v.view(torch.int32) >> 16).to(torch.int16).view(BF16)


def _bf16_flush_below_normal(v):
    v = v.to(BF16)
    return torch.where(v.abs() < 2.0 ** -126, torch.zeros_like(v), v)


@pytest.mark.parametrize("conv", [_bf16_truncate, _bf16_flush_below_normal],
                         ids=["truncate", "flush_subnormals"])
def test_planted_bf16_rounding_is_caught(tf, conv):
    """A bf16 output truncated or flushed instead of rounded to nearest even differs only on the
    tiny (byte 0) values; the bf16 check sees it."""
    x = _edge_tensor("mxfp8_e4m3", F32)
    mod = _Planted(tf, None, bf16_from_f32=conv)
    with pytest.raises(AssertionError, match="mismatch"):
        _check(mod, x, "mxfp8_e4m3", "ocp", out_dtype=BF16)


def test_comparison_rules():
    """NaN payloads are free, -0 / +0 and one ulp are not (fp32 and bf16 bit patterns)."""
    a = np.array([0x7FC00000, 0x00000000, 0x3F800000], dtype=np.uint32)
    assert not _value_mismatches(a, np.array([0xFFC00001, 0, 0x3F800000], np.uint32)).size
    assert _value_mismatches(a, np.array([0x7FC00000, 0x80000000, 0x3F800000], np.uint32)).size
    assert _value_mismatches(a, np.array([0x7FC00000, 0, 0x3F800001], np.uint32)).size
    assert _value_mismatches(a, np.array([0x7F800000, 0, 0x3F800000], np.uint32)).size
    h = np.array([0x7FC1, 0x8000], dtype=np.uint16)
    assert not _value_mismatches(h, np.array([0xFF80 | 1, 0x8000], np.uint16)).size
    assert _value_mismatches(h, np.array([0x7FC1, 0x0000], np.uint16)).size


# ---- 6. bad input ----------------------------------------------------------------------------
SR = mxref.get_profile("ocp").replace(name="ocp_stochastic", rounding="stochastic")
BAD = {
    "3d": (lambda: torch.zeros(2, 32, 32), "mxfp4", "ocp", {}, "2-D"),
    "int": (lambda: torch.zeros(32, 32, dtype=torch.int32), "mxfp4", "ocp", {}, "dtype"),
    "float64": (lambda: torch.zeros(32, 32, dtype=torch.float64), "mxfp4", "ocp", {}, "dtype"),
    "numpy": (lambda: np.zeros((32, 32), np.float32), "mxfp4", "ocp", {}, "torch tensor"),
    "mxint8": (lambda: torch.zeros(32, 32), "mxint8", "ocp", {}, "format mxint8"),
    "nvfp4": (lambda: torch.zeros(32, 32), "nvfp4", "ocp", {}, "format nvfp4"),
    "no_format": (lambda: torch.zeros(32, 32), "mxfp5", "ocp", {}, "mxfp5"),
    "stochastic": (lambda: torch.zeros(32, 32), "mxfp4", SR, {}, "rounding='stochastic'"),
    "ties_away": (lambda: torch.zeros(32, 32), "mxfp4", "microxcaling", {}, "rounding"),
    "no_profile": (lambda: torch.zeros(32, 32), "mxfp4", "no_such_profile", {},
                   "no_such_profile"),
    "fp16_out": (lambda: torch.zeros(32, 32), "mxfp4", "ocp", {"out_dtype": F16}, "out_dtype"),
    "no_orientation": (lambda: torch.zeros(32, 32), "mxfp4", "ocp",
                       {"rows": False, "cols": False}, "rows, cols"),
    "small_tile": (lambda: torch.zeros(32, 32), "mxfp4", "ocp", {"block_rows": 16},
                   "block_rows"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input(tf, name):
    make, fmt, prof, kw, msg = BAD[name]
    with pytest.raises(tf.KernelUnsupported, match=msg):
        tf.quantize_dequantize(make(), fmt, prof, **kw)


@pytest.mark.parametrize("out_dtype", [F32, BF16])
def test_poisoned_block_is_the_quiet_nan(tf, out_dtype):
    """The NaN of a NaN / Inf block has fixed bits (0x7FC00000, bf16 0x7FC0), not whatever NaN
    the arithmetic makes: the GPU's 0x7FFFFFFF would carry into the sign bit in the bf16 RNE
    and come out as -0 (seen on an H100 before the fix; the interpreter's NaN hides it)."""
    x = torch.ones(32, 64, dtype=F32)
    x[0, 0] = float("nan")
    x[5, 40] = float("-inf")
    rv, cv, _ = tf.quantize_dequantize(x, "mxfp4", "ocp", rows=True, cols=True,
                                       out_dtype=out_dtype)
    want = 0x7FC00000 if out_dtype == F32 else 0x7FC0
    ity = torch.int32 if out_dtype == F32 else torch.int16
    for v, mask in ((rv, (slice(0, 1), slice(0, 32))), (rv, (slice(5, 6), slice(32, 64))),
                    (cv, (slice(0, 32), slice(0, 1))), (cv, (slice(0, 32), slice(40, 41)))):
        bits = v[mask].contiguous().view(ity).to(torch.int64) & (0xFFFFFFFF if ity == torch.int32
                                                                 else 0xFFFF)
        assert (bits == want).all(), bits.unique()
    assert not rv[1:5].isnan().any() and not cv[:, 1:40].isnan().any()
