"""mxkernels/triton_gemm.py in the Triton interpreter (and on CUDA where present), held to
mxref.gemm: bit for bit against gemm_codes(mode="block_sequential") for the pairs whose
contract is block_sequential, within gemm_error_bound (via the exact product) otherwise.
Expected values come from mxref (and its Fraction-checked reference), never from the kernels.
"""
from __future__ import annotations

import glob
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from mxref.formats import ELEMENT_FORMATS
from mxref.gemm import check_gemm, gemm_codes, gemm_error_bound_codes

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # interpreter: Inf/NaN math
ROOT = Path(__file__).resolve().parents[1]
INTERP = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")
BS = {"nvfp4": 16}
BITS = {"mxfp4": 4, "nvfp4": 4, "mxfp6_e2m3": 6, "mxfp6_e3m2": 6, "mxfp8_e4m3": 8,
        "mxfp8_e5m2": 8, "mxint8": 8}
# FP8 pairs: the int8-plane kernel (E5M2 x E5M2 block sums need 69 bits: bound only)
PLANE_PAIRS = [("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp8_e5m2", "mxfp8_e4m3"),
               ("mxfp4", "mxfp8_e5m2"), ("mxint8", "mxfp8_e4m3"), ("mxfp8_e4m3", "mxfp6_e3m2")]
EXACT_PAIRS = [("mxfp4", "mxfp4"), ("mxfp6_e2m3", "mxfp4"), ("mxfp6_e3m2", "mxfp6_e3m2"),
               ("mxint8", "mxfp6_e3m2"), ("mxfp4", "mxint8"), ("nvfp4", "nvfp4")] + PLANE_PAIRS
BOUND_PAIRS = [("mxfp8_e5m2", "mxfp8_e5m2")]


@pytest.fixture(scope="module")
def g():
    from mxkernels.loader import load_kernels
    return load_kernels(True)["triton_gemm"]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=DEVICES)
def gd(request):
    """(module, device): interpreted kernels on CPU, compiled ones on CUDA."""
    from mxkernels.loader import load_kernels
    if request.param == "cuda":
        if INTERP:
            pytest.skip("TRITON_INTERPRET=1")
        return load_kernels(False)["triton_gemm"], "cuda"
    return load_kernels(True)["triton_gemm"], "cpu"


def _bs(fmt):
    return BS.get(fmt, 32)


def rand_operand(rng, fmt, rows, k, scale_pool=None, lo=112, hi=142):
    codes = rng.integers(0, 1 << BITS[fmt], (rows, k), dtype=np.uint8)
    nb = -(-k // _bs(fmt))
    if fmt == "nvfp4":   # E4M3 scales of both signs (NaN codes 0x7F/0xFF excluded)
        scales = rng.integers(0, 0x7F, (rows, nb), dtype=np.uint8) | \
            (rng.integers(0, 2, (rows, nb), dtype=np.uint8) << 7)
    elif scale_pool is not None:
        scales = rng.choice(np.array(scale_pool, dtype=np.uint8), (rows, nb))
    else:
        scales = rng.integers(lo, hi, (rows, nb), dtype=np.uint8)
    return codes, scales


def run(g, dev, ac, asc, fa, bc, bsc, fb, **kw):
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(dev)
    ts = {k: (torch.tensor(np.float32(v)).to(dev) if v is not None else None)
          for k, v in kw.pop("ts", {}).items()}
    y = g.mx_gemm(t(asc), t(ac), t(bsc), t(bc), fa, fb, **ts, **kw)
    assert y.dtype == torch.float32 and y.device.type == dev
    return y.cpu().numpy()


def assert_bits(y, ref):
    yb, rb = y.view(np.uint32), np.asarray(ref, np.float32).view(np.uint32)
    # NaN payloads are not part of the contract
    ok = (yb == rb) | (np.isnan(y) & np.isnan(ref))
    if not ok.all():
        i = np.argwhere(~ok)[:5]
        raise AssertionError(f"{(~ok).sum()} of {ok.size} differ; first at {i.tolist()}: "
                             f"kernel {[hex(yb[tuple(j)]) for j in i]} "
                             f"ref {[hex(rb[tuple(j)]) for j in i]}")


def blockseq_ref(ac, asc, fa, bc, bsc, fb, ts=None):
    ts = ts or {}
    return gemm_codes(ac, asc, fa, bc, bsc, fb, mode="block_sequential",
                      **{k: (None if v is None else np.float32(v)) for k, v in ts.items()})


# ---- E2M1 -> E4M3 ---------------------------------------------------------------------------
def _e4m3_code_of(value) -> int:
    """The E4M3 code of an exact value, found through mxref's decoder (independent table)."""
    e4 = ELEMENT_FORMATS["e4m3"]
    for c in range(256):
        v = e4.decode(c)
        if not isinstance(v, float) and v == value and (c >> 7) == (value < 0):
            return c
    raise AssertionError(value)


def _expected_e4m3(codes):
    e2 = ELEMENT_FORMATS["e2m1"]
    table = []
    for c in range(16):
        v = e2.decode(c)
        table.append(0x80 if c == 8 else _e4m3_code_of(v))   # -0 -> E4M3 -0
    return np.array(table, np.uint8)[codes]


@pytest.mark.parametrize("k", [1, 16, 33, 101])
def test_mxfp4_to_e4m3_every_code(gd, k):
    g, dev = gd
    rng = np.random.default_rng(k)
    codes = rng.integers(0, 16, (7, k), dtype=np.uint8)
    codes.reshape(-1)[:16] = np.arange(16)[: codes.size]
    exp = _expected_e4m3(codes)
    out = g.mxfp4_to_e4m3(torch.from_numpy(codes).to(dev)).cpu().numpy()
    np.testing.assert_array_equal(out, exp)
    # packed: element 0 in the low nibble, odd K padded
    pad = np.pad(codes, ((0, 0), (0, k % 2)))
    packed = (pad[:, 0::2] | (pad[:, 1::2] << 4)).astype(np.uint8)
    out = g.mxfp4_to_e4m3(torch.from_numpy(packed).to(dev), packed=True, k=k).cpu().numpy()
    np.testing.assert_array_equal(out, exp)


def test_mxfp4_to_e4m3_refuses(g):
    with pytest.raises(g.KernelUnsupported, match="4 bits"):
        g.mxfp4_to_e4m3(torch.full((2, 3), 16, dtype=torch.uint8))
    with pytest.raises(g.KernelUnsupported, match="uint8"):
        g.mxfp4_to_e4m3(torch.zeros((2, 3), dtype=torch.int32))
    with pytest.raises(g.KernelUnsupported, match="k="):
        g.mxfp4_to_e4m3(torch.zeros((2, 3), dtype=torch.uint8), packed=True, k=9)
    assert g.mxfp4_to_e4m3(torch.zeros((0, 5), dtype=torch.uint8)).shape == (0, 5)


# ---- bit-exact block_sequential -------------------------------------------------------------
EDGE_POOL = [0x00, 0x01, 0x02, 0x03, 0x10, 0x40, 0x7F, 0x80, 0xC0, 0xF0, 0xF4, 0xF5, 0xFD, 0xFE]


@pytest.mark.parametrize("fa,fb", EXACT_PAIRS)
def test_block_sequential_random(gd, fa, fb):
    g, dev = gd
    rng = np.random.default_rng(zlib.crc32(repr((fa, fb)).encode()))
    M, N, K = 70, 37, 200                          # ragged M, N (tiles of 32/64) and K
    ac, asc = rand_operand(rng, fa, M, K)
    bc, bsc = rand_operand(rng, fb, N, K)
    ts = {"a_tensor_scale": 0.375, "b_tensor_scale": 5.0} if fa == "nvfp4" else {}
    y = run(g, dev, ac, asc, fa, bc, bsc, fb, ts=ts, block_m=32, block_n=16, group_m=2)
    assert_bits(y, blockseq_ref(ac, asc, fa, bc, bsc, fb, ts))


def edge_operands(fa, fb, M=48, N=40, K=96, seed=7):
    rng = np.random.default_rng(seed)
    ac, asc = rand_operand(rng, fa, M, K, EDGE_POOL + [0xFF])
    bc, bsc = rand_operand(rng, fb, N, K, EDGE_POOL)
    bsc[3, 1] = 0xFF
    asc[:4] = rng.choice(np.array([0, 1, 2, 3], np.uint8), asc[:4].shape)   # subnormal rows
    bsc[4:8] = rng.choice(np.array([100, 110, 120, 127], np.uint8), bsc[4:8].shape)
    return ac, asc, bc, bsc


@pytest.mark.parametrize("fa,fb", [p for p in EXACT_PAIRS if p[0] != "nvfp4" and
                                   p not in PLANE_PAIRS])    # those: test_planes_finite_edges
def test_block_sequential_scale_edges(gd, fa, fb):
    """Scale bytes 0x00 (2^-127), 0x01..0x03, 0xF4..0xFE, 0xFF (NaN): products that overflow
    fp32, land in its subnormals or underflow to zero; both scaling branches of the kernel."""
    g, dev = gd
    ac, asc, bc, bsc = edge_operands(fa, fb)
    y = run(g, dev, ac, asc, fa, bc, bsc, fb)
    ref = blockseq_ref(ac, asc, fa, bc, bsc, fb)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    fin = np.abs(ref[np.isfinite(ref)])
    assert ((fin > 0) & (fin < 2.0 ** -126)).any()          # subnormal results present
    assert_bits(y, ref)


def test_block_sequential_mxfp4_crafted(gd):
    """Block sums that land exactly on fp32 subnormals / round, overflow by one binade, zero
    and -0 blocks (every product -0), 0x00 against 0xFE, NaN scale against zero codes."""
    g, dev = gd
    K = 128
    ac = np.zeros((8, K), np.uint8)
    bc = np.zeros((4, K), np.uint8)
    asc = np.full((8, 4), 127, np.uint8)
    bsc = np.full((4, 4), 127, np.uint8)
    ac[0, :] = 0x7; bc[0, :] = 0x7                 # 6 * 6 * 32 = 1152 per block
    asc[0] = [0xFE, 0xFE, 0x01, 0x00]; bsc[0] = [0xFE, 0x80, 0x01, 0xFE]
    ac[1, :32] = 0x1; ac[1, 32:] = 0x9             # +-0.5
    asc[1] = [0x00, 0x01, 0x05, 0x7F]
    ac[2, :] = 0x8                                 # -0 everywhere: every product -0
    ac[3, 5] = 0x3                                 # 1.5 * 2^-127 * 2^-127 ... underflow
    asc[3] = [0x00, 0x00, 0x00, 0x00]
    ac[4, :] = 0x7; asc[4, 2] = 0xFF               # NaN block against zeros
    ac[5, :] = 0x1; asc[5] = [0x00, 0x01, 0x16, 0x17]   # 2^-150 .. ties at the subnormal edge
    ac[6, :] = 0x2; asc[6] = [0xFE, 0xFE, 0xFE, 0xFE]   # overflow then Inf + finite
    bc[1, :] = 0x1; bsc[1] = [0x01, 0x01, 0x01, 0x01]
    bc[2, :] = 0xF; bsc[2] = [0x00, 0xFE, 0x00, 0xFE]   # -6: Inf - Inf across blocks
    bc[3, :] = 0x8                                 # -0
    y = run(g, dev, ac, asc, "mxfp4", bc, bsc, "mxfp4")
    ref = blockseq_ref(ac, asc, "mxfp4", bc, bsc, "mxfp4")
    assert_bits(y, ref)
    assert not np.signbit(ref[2]).any()            # +0: acc starts at +0


# ---- FP8 pairs: int8 planes, integer block sums rounded once ---------------------------------
def _code_of(el_name, value) -> int:
    """The code of an exact value of an element format, through mxref's decoder."""
    el = ELEMENT_FORMATS[el_name]
    for c in range(1 << el.bits):
        v = el.decode(c)
        if not isinstance(v, float) and v == value and (v != 0 or not c & el.sign_mask):
            return c
    raise AssertionError((el_name, value))


def _finite_codes(fmt):
    el = ELEMENT_FORMATS[{"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2",
                          "mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxint8": "int8"}[fmt]]
    return np.array([c for c in range(1 << el.bits) if not isinstance(el.decode(c), float)],
                    np.uint8)


@pytest.mark.parametrize("fa,fb", PLANE_PAIRS)
def test_planes_finite_edges(gd, fa, fb):
    """Finite codes only (random FP8 bytes are mostly NaN blocks): block sums far wider than 24
    bits, scale bytes that push c_j into fp32 subnormals, to zero and past the largest fp32."""
    g, dev = gd
    rng = np.random.default_rng(zlib.crc32(repr((fa, fb, 3)).encode()))
    M, N, K = 40, 24, 160
    ac = rng.choice(_finite_codes(fa), (M, K))
    bc = rng.choice(_finite_codes(fb), (N, K))
    pool = np.array(EDGE_POOL + [100, 110, 120, 127, 127, 127], np.uint8)
    asc, bsc = rng.choice(pool, (M, 5)), rng.choice(pool, (N, 5))
    asc[:6] = np.array([[0], [1], [2], [3], [20], [40]], np.uint8)   # whole rows: c_j land in
    bsc[:6] = np.array([[60], [75], [90], [105], [120], [135]], np.uint8)   # fp32 subnormals
    y = run(g, dev, ac, asc, fa, bc, bsc, fb, block_m=16, block_n=16)
    ref = blockseq_ref(ac, asc, fa, bc, bsc, fb)
    fin = np.abs(ref[np.isfinite(ref)])
    assert np.isinf(ref).any() and ((fin > 0) & (fin < 2.0 ** -126)).any()
    assert_bits(y, ref)


@pytest.mark.parametrize("int64", [False, True], ids=["f64-epilogue", "int64-epilogue"])
def test_planes_rounding_ties(monkeypatch, int64):
    """E4M3 block sums 2^24 + r (r = 0..7, both signs, units of 2^-18): c_j = fl(P 2^-18)
    rounds at the 25th bit: ties to even both ways; the same sums scaled into fp32 subnormals,
    to zero (a negative sum to -0) and past the largest fp32. Both epilogues: fp64 (block
    sums < 2^53) and the integer rounding (forced here; E4M3 x E5M2 takes it)."""
    from mxkernels.loader import load_kernels
    g = load_kernels(True)["triton_gemm"]
    if int64:
        monkeypatch.setattr(g, "_max_block_sum_bits", lambda fa, fb: 60)
    assert g.gemm_kernel_params("mxfp8_e4m3", "mxfp8_e4m3")["F64"] is (not int64)
    e4 = "e4m3"
    c8, ctiny = _code_of(e4, 8.0), _code_of(e4, 2.0 ** -9)
    rows = []
    for r in range(8):
        row = np.zeros(32, np.uint8)
        row[0] = c8
        row[1:1 + r] = ctiny
        rows.append(row)
    ac = np.array(rows + [r | 0x80 * (np.arange(32) < 1 + i) for i, r in enumerate(rows)],
                  np.uint8)                                   # negated leading terms too
    bc = np.zeros((1, 32), np.uint8)
    bc[0, :8] = [c8] + [ctiny] * 7                            # products 2^24 * 2^-18, 2^-18
    out = []
    # normal, fp32 subnormal, large, underflow to +-0, overflow to +-Inf
    for sa, sb in ((127, 127), (0, 110), (217, 127), (1, 1), (254, 254)):
        asc = np.full((ac.shape[0], 1), sa, np.uint8)
        bsc = np.full((1, 1), sb, np.uint8)
        y = run(g, "cpu", ac, asc, "mxfp8_e4m3", bc, bsc, "mxfp8_e4m3")
        ref = blockseq_ref(ac, asc, "mxfp8_e4m3", bc, bsc, "mxfp8_e4m3")
        assert_bits(y, ref)
        out.append(ref)
    # the sums really round (ref is not the float64 value) and ties went both ways
    exact = np.array([2.0 ** 24 + r for r in range(8)]) * 2.0 ** -18
    assert (out[0][:8, 0].astype(np.float64) != exact).sum() >= 4


def test_planes_e5m2_infinities(gd):
    """E5M2 Inf elements: Inf x finite = Inf with the product's sign, Inf x 0 = NaN, +Inf and
    -Inf products in one block = NaN, in two blocks = Inf + -Inf = NaN; NaN codes and NaN scales
    poison their block; an Inf in one tile row does not leak into another."""
    g, dev = gd
    e5 = "e5m2"
    pinf, ninf, nan = 0x7C, 0xFC, 0x7E
    one, mtwo, zero, nzero = (_code_of(e5, 1.0), _code_of(e5, -2.0), 0x00, 0x80)
    K = 64
    ac = np.full((8, K), one, np.uint8)
    bc = np.full((6, K), one, np.uint8)
    ac[0, 3] = pinf                                   # +Inf against 1, -2, 0, -0, Inf, -Inf
    ac[1, 3] = ninf
    ac[2, 3], ac[2, 40] = pinf, ninf                  # opposite Infs in two blocks
    ac[3, 3], ac[3, 4] = pinf, ninf                   # in one block
    ac[4, 9] = nan
    ac[5, :] = zero
    bc[1, 3] = mtwo
    bc[2, 3] = zero
    bc[3, 3] = nzero
    bc[4, 3], bc[4, 4] = pinf, pinf
    bc[5, 3] = ninf
    bc[5, 40] = mtwo
    asc = np.full((8, 2), 127, np.uint8)
    bsc = np.full((6, 2), 127, np.uint8)
    asc[6, 1] = 0xFF
    def e4(c):        # the same values as E4M3 codes (E5M2 Infs become 1.0)
        out = np.where((c == pinf) | (c == ninf), one, c)
        return np.vectorize(lambda x: _code_of("e4m3", ELEMENT_FORMATS[e5].decode(int(x))) if
                            not isinstance(ELEMENT_FORMATS[e5].decode(int(x)), float) else
                            0x7F)(out).astype(np.uint8)
    for fa, a, fb, b, sa, sb in (("mxfp8_e5m2", ac, "mxfp8_e4m3", e4(bc), asc, bsc),
                                 ("mxfp8_e4m3", e4(bc), "mxfp8_e5m2", ac, bsc, asc)):
        y = run(g, dev, a, sa, fa, b, sb, fb, block_m=16, block_n=16)
        ref = blockseq_ref(a, sa, fa, b, sb, fb)
        assert np.isposinf(ref).any() and np.isneginf(ref).any() and np.isnan(ref).any()
        assert_bits(y, ref)


def test_planes_every_code_pair():
    """Every E4M3 code against every E5M2 code (NaN and Inf included): one product per block."""
    from mxkernels.loader import load_kernels
    g = load_kernels(True)["triton_gemm"]
    ac = np.arange(256, dtype=np.uint8).reshape(256, 1)
    bc = np.arange(256, dtype=np.uint8).reshape(256, 1)
    s = np.full((256, 1), 127, np.uint8)
    y = run(g, "cpu", ac, s, "mxfp8_e4m3", bc, s, "mxfp8_e5m2")
    assert_bits(y, blockseq_ref(ac, s, "mxfp8_e4m3", bc, s, "mxfp8_e5m2"))


def test_plane_tables_are_exact():
    """Each finite code's plane entry reassembles its exact value (an independent decode)."""
    from fractions import Fraction
    from mxkernels.loader import load_kernels
    g = load_kernels(True)["triton_gemm"]
    for fmt, el in (("mxfp8_e4m3", "e4m3"), ("mxfp8_e5m2", "e5m2"), ("mxfp6_e3m2", "e3m2"),
                    ("mxint8", "int8"), ("mxfp4", "e2m1")):
        table, G = g._plane_table(el)
        e = ELEMENT_FORMATS[el]
        base = -e.frac_bits if e.kind == "int" else e.emin - e.mbits
        for c in range(1 << e.bits):
            v = e.decode(c)
            ent = int(table[c])
            if isinstance(v, float):
                assert ent & (g._PLANE_NAN | g._PLANE_INF)
                continue
            val = ((ent & 0xFF) ^ 0x80) - 0x80
            pl = (ent >> 8) & 15
            assert pl < G
            assert Fraction(val) * 2 ** (4 * pl) * Fraction(2) ** base == Fraction(v), (el, c)


@pytest.mark.parametrize("shape", [(0, 5, 64), (5, 0, 64), (3, 4, 0), (0, 0, 0), (1, 1, 1),
                                   (17, 3, 31), (3, 17, 33)])
@pytest.mark.parametrize("fa", ["mxfp4", "nvfp4", "mxfp6_e2m3"])
def test_block_sequential_shapes(gd, shape, fa):
    g, dev = gd
    M, N, K = shape
    rng = np.random.default_rng(M * 100 + N * 10 + K)
    ac, asc = rand_operand(rng, fa, M, K)
    bc, bsc = rand_operand(rng, fa, N, K)
    ts = {"a_tensor_scale": -2.0, "b_tensor_scale": 0.5} if fa == "nvfp4" else {}
    y = run(g, dev, ac, asc, fa, bc, bsc, fa, ts=ts)
    assert y.shape == (M, N)
    assert_bits(y, blockseq_ref(ac, asc, fa, bc, bsc, fa, ts))


@pytest.mark.parametrize("ts", [(np.nan, 1.0), (np.inf, 1.0), (-np.inf, 0.5), (0.0, 1.0),
                                (-0.0, 2.0), (2.0 ** -140, 2.0 ** -10), (3e38, 4.0),
                                (0.1, 0.3)])
def test_nvfp4_tensor_scales_and_nan_scales(gd, ts):
    g, dev = gd
    rng = np.random.default_rng(3)
    M, N, K = 9, 6, 48
    ac, asc = rand_operand(rng, "nvfp4", M, K)
    bc, bsc = rand_operand(rng, "nvfp4", N, K)
    asc[1, 2] = 0x7F
    bsc[2, 0] = 0xFF
    asc[3, :] = 0                                  # zero scales
    d = {"a_tensor_scale": ts[0], "b_tensor_scale": ts[1]}
    y = run(g, dev, ac, asc, "nvfp4", bc, bsc, "nvfp4", ts=d)
    assert_bits(y, blockseq_ref(ac, asc, "nvfp4", bc, bsc, "nvfp4", d))


def test_nvfp4_negative_scale_sign(g):
    a = np.full((1, 16), 2, np.uint8)
    b = np.full((1, 16), 2, np.uint8)
    sa = np.full((1, 1), 0xB8, np.uint8)           # E4M3 -1.0
    sb = np.full((1, 1), 0x38, np.uint8)
    y = run(g, "cpu", a, sa, "nvfp4", b, sb, "nvfp4")
    assert y[0, 0] == -16.0
    assert_bits(y, blockseq_ref(a, sa, "nvfp4", b, sb, "nvfp4"))


def test_packed_operands(gd):
    g, dev = gd
    rng = np.random.default_rng(11)
    for fmt, K in (("mxfp4", 65), ("nvfp4", 48)):
        ac, asc = rand_operand(rng, fmt, 20, K)
        bc, bsc = rand_operand(rng, fmt, 12, K)

        def pack(c):
            p = np.pad(c, ((0, 0), (0, c.shape[1] % 2)))
            return (p[:, 0::2] | (p[:, 1::2] << 4)).astype(np.uint8)
        ref = blockseq_ref(ac, asc, fmt, bc, bsc, fmt)
        assert_bits(run(g, dev, pack(ac), asc, fmt, pack(bc), bsc, fmt, packed=True, k=K), ref)
        y = run(g, dev, pack(ac), asc, fmt, pack(bc), bsc, fmt, packed=True, k=K, mode="fast")
        assert check_gemm_codes(y, ac, asc, fmt, bc, bsc, fmt)


def test_prepared_matches(gd):
    g, dev = gd
    rng = np.random.default_rng(5)
    ac, asc = rand_operand(rng, "mxfp4", 33, 96, EDGE_POOL)
    bc, bsc = rand_operand(rng, "mxfp4", 18, 96, EDGE_POOL)
    t = lambda x: torch.from_numpy(x).to(dev)
    a8, b8 = g.mxfp4_to_e4m3(t(ac)), g.mxfp4_to_e4m3(t(bc))
    y = g.mx_gemm_prepared(t(asc), a8, t(bsc), b8).cpu().numpy()
    assert_bits(y, blockseq_ref(ac, asc, "mxfp4", bc, bsc, "mxfp4"))


# ---- bound kernels --------------------------------------------------------------------------
def check_gemm_codes(y, ac, asc, fa, bc, bsc, fb, ts=None):
    """y within mxref's error bound of the exact product: NaN where it is NaN; where the bound
    is +inf any value, NaN included (verify's allow_nan_where_unbounded rule)."""
    ts = {k: np.float32(v) for k, v in (ts or {}).items()}
    exact = gemm_codes(ac, asc, fa, bc, bsc, fb, mode="exact", **ts)
    bound = gemm_error_bound_codes(ac, asc, fa, bc, bsc, fb, exact=exact, **ts)
    y64, e64 = y.astype(np.float64), exact.astype(np.float64)
    nan_e, nan_y = np.isnan(e64), np.isnan(y64)
    with np.errstate(invalid="ignore"):
        ok = np.where(nan_e, nan_y, np.isinf(bound) | (~nan_y & (
            (y64 == e64) | (np.abs(y64 - e64) <= bound))))
    if not ok.all():
        i = np.argwhere(~ok)[:3].tolist()
        raise AssertionError(f"{(~ok).sum()} outside the bound at {i}: "
                             f"{[(y[tuple(j)], exact[tuple(j)], bound[tuple(j)]) for j in i]}")
    return True


@pytest.mark.parametrize("mode", ["fast", "fast_fused"])
@pytest.mark.parametrize("fa,fb", BOUND_PAIRS + EXACT_PAIRS)
@pytest.mark.parametrize("pool", ["moderate", "edges"])
def test_fast_within_bound(gd, fa, fb, pool, mode):
    """Both fast variants (operands decoded once to bf16, or decoded in the K loop)."""
    g, dev = gd
    rng = np.random.default_rng(zlib.crc32(repr((fa, fb, pool)).encode()))
    M, N, K = 40, 24, 160
    sp = EDGE_POOL + [0xFF] if pool == "edges" else None
    ac, asc = rand_operand(rng, fa, M, K, sp)
    bc, bsc = rand_operand(rng, fb, N, K, sp)
    ts = {"a_tensor_scale": 0.375, "b_tensor_scale": 5.0} if fa == "nvfp4" else {}
    y = run(g, dev, ac, asc, fa, bc, bsc, fb, ts=ts, mode=mode, block_k=64)
    assert check_gemm_codes(y, ac, asc, fa, bc, bsc, fb, ts)


@pytest.mark.parametrize("mode", ["fast", "fast_fused"])
def test_fast_inf_times_a_flushed_element_is_within_the_contract(gd, mode):
    """An E5M2 +Inf against 2^-143 (0 once decoded to bf16): the fast kernels give NaN where
    the exact product is +Inf, which the bound allows there (+inf) and only there: the +Inf
    output beside it, where nothing is flushed, must still be +Inf."""
    g, dev = gd
    ac = np.zeros((2, 32), np.uint8)
    ac[0, 0], ac[1, 0] = 0x7C, 0x3C                  # +Inf, 1.0
    bc = np.zeros((2, 32), np.uint8)
    bc[0, 0], bc[1, 0] = 0x01, 0x3C                  # 2^-16, 1.0 (block scale 2^-127)
    asc, bsc = np.full((2, 1), 127, np.uint8), np.zeros((2, 1), np.uint8)
    y = run(g, dev, ac, asc, "mxfp8_e5m2", bc, bsc, "mxfp8_e5m2", mode=mode, block_k=64)
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf
    assert check_gemm_codes(y, ac, asc, "mxfp8_e5m2", bc, bsc, "mxfp8_e5m2")
    y[0, 1] = np.nan
    with pytest.raises(AssertionError, match="outside the bound"):
        check_gemm_codes(y, ac, asc, "mxfp8_e5m2", bc, bsc, "mxfp8_e5m2")


@pytest.mark.parametrize("matmul", ["triton", "cublas"])
def test_fast_matmul_choice(gd, matmul):
    """mode="fast" with the Triton bf16 GEMM or the vendor BLAS product of the decoded operands:
    both within the bound; "cublas" is refused (typed) where it cannot run (the interpreter)."""
    g, dev = gd
    rng = np.random.default_rng(7)
    ac, asc = rand_operand(rng, "mxfp4", 40, 160, EDGE_POOL)
    bc, bsc = rand_operand(rng, "mxfp4", 24, 160, EDGE_POOL)
    if matmul == "cublas" and (dev == "cpu" or g.INTERPRETED):
        with pytest.raises(g.KernelUnsupported, match="cublas"):
            run(g, dev, ac, asc, "mxfp4", bc, bsc, "mxfp4", mode="fast", matmul=matmul)
        return
    y = run(g, dev, ac, asc, "mxfp4", bc, bsc, "mxfp4", mode="fast", matmul=matmul)
    assert check_gemm_codes(y, ac, asc, "mxfp4", bc, bsc, "mxfp4", {})


def test_fast_matmul_option_refused(g):
    z = torch.zeros((2, 32), dtype=torch.uint8)
    s = torch.full((2, 1), 127, dtype=torch.uint8)
    with pytest.raises(g.KernelUnsupported, match="expected 'auto'"):
        g.mx_gemm(s, z, s, z, "mxfp4", "mxfp4", mode="fast", matmul="cutlass")
    with pytest.raises(g.KernelUnsupported, match="mode='fast' only"):
        g.mx_gemm(s, z, s, z, "mxfp4", "mxfp4", mode="block_sequential", matmul="triton")


def test_fast_check_gemm_api(g):
    """The same through mxref.check_gemm on MXTensors from mxref.quantize."""
    import mxref
    rng = np.random.default_rng(2)
    a = mxref.quantize(rng.standard_normal((16, 96)).astype(np.float32), "mxfp8_e4m3", axis=1)
    b = mxref.quantize(rng.standard_normal((8, 96)).astype(np.float32), "mxfp4", axis=1)
    y = run(g, "cpu", a.codes, a.scales, "mxfp8_e4m3", b.codes, b.scales, "mxfp4", mode="fast")
    assert check_gemm(y, a, b).ok


@pytest.mark.parametrize("fa,fb", BOUND_PAIRS)
def test_block_sequential_refused_for_bound_pairs(g, fa, fb):
    assert g.gemm_contract(fa, fb) == "bound"
    z = torch.zeros((2, 32), dtype=torch.uint8)
    s = torch.full((2, 1), 127, dtype=torch.uint8)
    with pytest.raises(g.KernelUnsupported, match="block_sequential"):
        g.mx_gemm(s, z, s, z, fa, fb)


def test_contracts(g):
    for fa, fb in EXACT_PAIRS:
        assert g.gemm_contract(fa, fb) == "block_sequential"
    with pytest.raises(g.KernelUnsupported):
        g.gemm_contract("nvfp4", "mxfp4")


# ---- bad input ------------------------------------------------------------------------------
def test_bad_input(g):
    u8 = lambda *s: torch.zeros(s, dtype=torch.uint8)
    s127 = lambda r, c: torch.full((r, c), 127, dtype=torch.uint8)
    KU = g.KernelUnsupported
    with pytest.raises(KU, match="uint8"):
        g.mx_gemm(s127(2, 1), torch.zeros((2, 32), dtype=torch.int32), s127(2, 1), u8(2, 32),
                  "mxfp4", "mxfp4")
    with pytest.raises(KU, match="scales shape"):
        g.mx_gemm(s127(2, 2), u8(2, 32), s127(2, 1), u8(2, 32), "mxfp4", "mxfp4")
    with pytest.raises(KU, match="K mismatch"):
        g.mx_gemm(s127(2, 1), u8(2, 32), s127(2, 1), u8(2, 31), "mxfp4", "mxfp4")
    with pytest.raises(KU, match="element code"):
        g.mx_gemm(s127(2, 1), torch.full((2, 32), 16, dtype=torch.uint8), s127(2, 1),
                  u8(2, 32), "mxfp4", "mxfp4", mode="fast")
    with pytest.raises(KU, match="element code"):
        g.mx_gemm(s127(2, 1), torch.full((2, 32), 64, dtype=torch.uint8), s127(2, 1),
                  u8(2, 32), "mxfp6_e2m3", "mxfp4")
    with pytest.raises(KU, match="tensor scale"):
        g.mx_gemm(s127(2, 1), u8(2, 32), s127(2, 1), u8(2, 32), "mxfp4", "mxfp4",
                  a_tensor_scale=1.0)
    with pytest.raises(KU, match="fp32"):
        g.mx_gemm(s127(2, 2), u8(2, 32), s127(2, 2), u8(2, 32), "nvfp4", "nvfp4",
                  a_tensor_scale=0.1)
    with pytest.raises(KU, match="NVFP4 x MX"):
        g.mx_gemm(s127(2, 2), u8(2, 32), s127(2, 1), u8(2, 32), "nvfp4", "mxfp4")
    with pytest.raises(KU, match="packed"):
        g.mx_gemm(s127(2, 1), u8(2, 24), s127(2, 1), u8(2, 24), "mxfp6_e2m3", "mxfp4",
                  packed=True, mode="fast")
    with pytest.raises(KU, match="format"):
        g.mx_gemm(s127(2, 1), u8(2, 32), s127(2, 1), u8(2, 32), "mxfp3", "mxfp4")
    with pytest.raises(KU, match="mode"):
        g.mx_gemm(s127(2, 1), u8(2, 32), s127(2, 1), u8(2, 32), "mxfp4", "mxfp4", mode="x")
    with pytest.raises(KU, match="power of two"):
        g.mx_gemm(s127(2, 1), u8(2, 32), s127(2, 1), u8(2, 32), "mxfp4", "mxfp4", block_m=48)
    # non-contiguous operands are copied, not misread
    rng = np.random.default_rng(0)
    ac, asc = rand_operand(rng, "mxfp4", 4, 64)
    bc, bsc = rand_operand(rng, "mxfp4", 4, 64)
    at = torch.from_numpy(np.ascontiguousarray(ac.T)).t()
    assert not at.is_contiguous()
    y = g.mx_gemm(torch.from_numpy(asc), at, torch.from_numpy(bsc), torch.from_numpy(bc),
                  "mxfp4", "mxfp4").numpy()
    assert_bits(y, blockseq_ref(ac, asc, "mxfp4", bc, bsc, "mxfp4"))


# ---- golden corpus --------------------------------------------------------------------------
def _golden_files():
    files = sorted(glob.glob(str(ROOT / "golden" / "L0" / "gemm" / "*.arrow")))
    keep = {"mxfp4+mxfp4", "nvfp4+nvfp4", "mxfp6_e3m2+mxint8", "mxint8+mxfp4",
            "mxfp6_e2m3+mxfp6_e3m2", "mxfp8_e5m2+mxfp8_e5m2", "mxfp4+mxfp8_e4m3"}
    files += [f for f in sorted(glob.glob(str(ROOT / "golden" / "L1" / "gemm" / "*.arrow")))
              if os.path.basename(f).split("__")[0] in keep]
    return files


@pytest.mark.corpus_twin
@pytest.mark.parametrize("path", _golden_files(), ids=lambda p: "/".join(Path(p).parts[-3::2]))
def test_golden(g, path):
    from mxref.golden.store import read_golden
    t = read_golden(path)
    fa, fb = os.path.basename(path).split("__")[0].split("+")
    contract = g.gemm_contract(fa, fb)
    cols = {c: t.column(c).to_pylist() for c in t.column_names}
    n_checked = 0
    for r in range(t.num_rows):
        M, N, K = cols["m"][r], cols["n"][r], cols["k"][r]
        ac = np.array(cols["a_codes"][r], np.uint8).reshape(M, K)
        asc = np.array(cols["a_scales"][r], np.uint8).reshape(M, -(-K // _bs(fa)))
        bc = np.array(cols["b_codes"][r], np.uint8).reshape(N, K)
        bsc = np.array(cols["b_scales"][r], np.uint8).reshape(N, -(-K // _bs(fb)))
        ts = {}
        if fa == "nvfp4":
            ts = {k: np.uint32(cols[k][r]).view(np.float32) for k in
                  ("a_tensor_scale", "b_tensor_scale")}
        mode = "block_sequential" if contract == "block_sequential" else "fast"
        y = run(g, "cpu", ac, asc, fa, bc, bsc, fb, ts=ts, mode=mode)
        if mode == "block_sequential":
            exp = np.array(cols["exp_block_sequential"][r], np.uint32).view(np.float32)
            assert_bits(y.reshape(-1), exp)
        else:
            exact = np.array(cols["exp_exact"][r], np.uint32).view(np.float32).reshape(M, N)
            bound = np.array(cols["exp_bound"][r], np.uint64).view(np.float64).reshape(M, N)
            y64, e64 = y.astype(np.float64), exact.astype(np.float64)
            with np.errstate(invalid="ignore"):
                ok = np.where(np.isnan(e64), np.isnan(y64), np.isinf(bound) | (
                    ~np.isnan(y64) & ((y64 == e64) | (np.abs(y64 - e64) <= bound))))
            assert ok.all(), (r, y[~ok], exact[~ok], bound[~ok])
        n_checked += 1
    assert n_checked == t.num_rows


# ---- the tests catch planted bugs ------------------------------------------------------------
def _planted_zero_scale(g):
    """Scale byte 0x00 decoded as zero (the Hopper tl.dot_scaled behaviour): the codes of such
    blocks are zeroed before the real kernel runs."""
    def gemm(a_scales, a_codes, b_scales, b_codes, fa, fb, **kw):
        def zero(c, s):
            blk = (s == 0).repeat_interleave(32, dim=1)[:, : c.shape[1]]
            return torch.where(blk, torch.zeros_like(c), c)
        return g.mx_gemm(a_scales, zero(a_codes, a_scales), b_scales, zero(b_codes, b_scales),
                         fa, fb, **kw)
    return gemm


def _planted_ftz(g):
    """fp32 subnormal results flushed to zero (an FTZ build)."""
    def gemm(*args, **kw):
        y = g.mx_gemm(*args, **kw)
        tiny = (y.abs() < 2.0 ** -126) & (y != 0)
        return torch.where(tiny, torch.zeros_like(y), y)
    return gemm


@pytest.mark.parametrize("plant", [_planted_zero_scale, _planted_ftz])
def test_planted_bugs_are_caught(g, plant):
    rng = np.random.default_rng(7)
    M, N, K = 48, 40, 96
    ac, asc, bc, bsc = edge_operands("mxfp4", "mxfp4", M, N, K)
    bad = plant(g)
    t = torch.from_numpy
    y = bad(t(asc), t(ac), t(bsc), t(bc), "mxfp4", "mxfp4").numpy()
    ref = blockseq_ref(ac, asc, "mxfp4", bc, bsc, "mxfp4")
    with pytest.raises(AssertionError):
        assert_bits(y, ref)
    # ... while moderate random scales alone would not have shown it
    ac, asc = rand_operand(rng, "mxfp4", M, K)
    bc, bsc = rand_operand(rng, "mxfp4", N, K)
    y = bad(t(asc), t(ac), t(bsc), t(bc), "mxfp4", "mxfp4").numpy()
    assert_bits(y, blockseq_ref(ac, asc, "mxfp4", bc, bsc, "mxfp4"))


# ---- tl.dot_scaled peer ---------------------------------------------------------------------
def test_dot_scaled_peer_runs(g):
    if not hasattr(triton.language, "dot_scaled"):
        with pytest.raises(g.KernelUnsupported):
            g.dot_scaled_gemm(*(torch.zeros((1, 1), dtype=torch.uint8),) * 4)
        return
    rng = np.random.default_rng(4)
    ac, asc = rand_operand(rng, "mxfp4", 16, 128, lo=120, hi=134)
    bc, bsc = rand_operand(rng, "mxfp4", 16, 128, lo=120, hi=134)
    pack = lambda c: torch.from_numpy((c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8))
    y = g.dot_scaled_gemm(torch.from_numpy(asc), pack(ac), torch.from_numpy(bsc), pack(bc))
    assert check_gemm_codes(y.numpy(), ac, asc, "mxfp4", bc, bsc, "mxfp4")
    with pytest.raises(g.KernelUnsupported, match="block_k"):
        g.dot_scaled_gemm(torch.from_numpy(asc[:, :1]), pack(ac[:, :32]),
                          torch.from_numpy(bsc[:, :1]), pack(bc[:, :32]))


# ---- ahead-of-time compilation (no GPU needed) ----------------------------------------------



@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e5m2", "mxint8"])
def test_mx_to_bf16_is_the_rounded_exact_value(g, fmt):
    """The fast path's operand pre-pass: every element equals the exact decoded value
    (element value x 2^(scale - 127) in float64, exact) rounded to bf16 by ml_dtypes (RNE,
    gradual underflow), with the edge scale bytes 0x00..0x03, 0xF4..0xFE and 0xFF (NaN)."""
    ml = pytest.importorskip("ml_dtypes")
    from mxref.formats import get_format
    rng = np.random.default_rng(5)
    codes, scales = rand_operand(rng, fmt, 24, 64, EDGE_POOL + [0xFF])
    got = g.mx_to_bf16(torch.from_numpy(scales), torch.from_numpy(codes), fmt)
    el = get_format(fmt).element
    table = el.value_table() if callable(el.value_table) else el.value_table
    vals = np.asarray(table, np.float64)[codes]
    if fmt != "mxint8":          # the sign bit's zero is -0 (the table may hold +0 for it)
        neg = (codes >> (el.bits - 1)) & 1
        vals = np.where(vals == 0, np.where(neg == 1, -0.0, 0.0), vals)
    s = np.repeat(scales.astype(np.int64), 32, axis=1)[:, :codes.shape[1]]
    exact = np.ldexp(vals, s - 127)
    exact[s == 255] = np.nan
    want = exact.astype(ml.bfloat16).view(np.uint16)
    have = got.view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(exact)
    assert nan.any() and (~nan).any()
    np.testing.assert_array_equal(have[~nan], want[~nan])
    assert np.isnan(got.float().numpy()[nan]).all()


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_mx_to_bf16_e2m1_every_byte(g, fmt):
    """The arithmetic E2M1 decode of the fast pre-pass, for all 16 codes at scale 2^0 (E8M0
    127; NVFP4: E4M3 1.0 = 0x38): the exact value's bf16 bits from the format's own decode, -0
    for code 8 (bytes above 15 are refused before the kernel)."""
    from mxref.formats import get_format
    codes = np.tile(np.arange(16, dtype=np.uint8), 16).reshape(8, 32)
    bs = 16 if fmt == "nvfp4" else 32
    scales = np.full((8, 32 // bs), 0x38 if fmt == "nvfp4" else 127, np.uint8)
    got = g.mx_to_bf16(torch.from_numpy(scales), torch.from_numpy(codes), fmt)
    el = get_format(fmt).element
    want = np.zeros(16, np.uint16)
    for c in range(16):
        v = np.float32(el.decode(c))
        if c == 8:
            v = np.float32(-0.0)
        want[c] = v.view(np.uint32) >> 16
    np.testing.assert_array_equal(got.view(torch.int16).numpy().view(np.uint16),
                                  want[codes])
