"""MX GEMM references (mxref.gemm) against independent implementations.

* ``exact`` against an exact fractions.Fraction oracle (every product, one rounding at the end,
  the IEEE special-value rules spelled out again below);
* ``block_sequential`` against a plain Python loop over numpy float32 scalars;
* ``gemm_error_bound`` against numpy float32 emulations of kernels that sum in other orders,
  and ``check_gemm`` against planted bugs it must reject.
"""
import itertools
import os
import sys
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import decode_element, fp32_bits_to_value, pow2, value_to_fp32_bits  # noqa: E402

import mxref  # noqa: E402
import mxref.gemm  # noqa: E402
G = sys.modules["mxref.gemm"]  # the module (mxref.gemm is also the function)
from mxref.errors import MXRefError  # noqa: E402

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]
ELEM = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e3m2": "e3m2", "mxfp6_e2m3": "e2m3",
        "mxfp4": "e2m1", "mxint8": "int8", "nvfp4": "e2m1"}
WIDTH = {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4, "int8": 8}
F32_NAN = 0x7FC00000


# ---- independent exact oracle ------------------------------------------------------------------
# A value is ("nan",), ("inf", sign) or ("fin", sign, Fraction magnitude).
def _from_decoded(d):
    if d == "nan":
        return ("nan",)
    if d in ("+inf", "-inf"):
        return ("inf", int(d == "-inf"))
    return ("fin", d[0], d[1])


def _mul(x, y):
    if x[0] == "nan" or y[0] == "nan":
        return ("nan",)
    if x[0] == "inf" or y[0] == "inf":
        other = y if x[0] == "inf" else x
        if other[0] == "fin" and other[2] == 0:
            return ("nan",)                                  # Inf x 0
        return ("inf", x[1] ^ y[1])
    return ("fin", x[1] ^ y[1], x[2] * y[2])


def _sum_bits(products):
    """fp32 bits of the exact sum of a list of values, rounded once (IEEE rules)."""
    if any(p[0] == "nan" for p in products):
        return F32_NAN
    infs = {p[1] for p in products if p[0] == "inf"}
    if len(infs) == 2:
        return F32_NAN
    if infs:
        return 0x7F800000 | (infs.pop() << 31)
    total = sum((-p[2] if p[1] else p[2] for p in products), Fraction(0))
    if total == 0:
        all_neg_zero = products and all(p[2] == 0 and p[1] for p in products)
        return 0x80000000 if all_neg_zero else 0
    return value_to_fp32_bits(int(total < 0), abs(total))


def _mx_scale(byte):
    return ("nan",) if byte == 0xFF else ("fin", 0, pow2(byte - 127))


def _nv_scale(code):
    return _from_decoded(decode_element(int(code), "e4m3"))


def _tensor(t):
    if t is None:
        return ("fin", 0, Fraction(1))
    return _from_decoded(fp32_bits_to_value(int(np.float32(t).view(np.uint32))))


def operand_values(codes, scales, fmt, bs, tscale=None, with_tensor=True):
    """values[r][k]: exact element value incl. block scale (and T when with_tensor)."""
    el = ELEM[fmt]
    rows = []
    for r in range(codes.shape[0]):
        row = []
        for k in range(codes.shape[1]):
            v = _from_decoded(decode_element(int(codes[r, k]), el))
            s = scales[r, k // bs]
            v = _mul(v, _nv_scale(s) if fmt == "nvfp4" else _mx_scale(int(s)))
            if fmt == "nvfp4" and with_tensor:
                v = _mul(v, _tensor(tscale))
            row.append(v)
        rows.append(row)
    return rows


def oracle_exact(a, b):
    """float32 [M, N] of the exact products rounded once (a, b: tuples codes, scales, fmt, T)."""
    va = operand_values(a[0], a[1], a[2], 16 if a[2] == "nvfp4" else 32, a[3])
    vb = operand_values(b[0], b[1], b[2], 16 if b[2] == "nvfp4" else 32, b[3])
    out = np.zeros((len(va), len(vb)), dtype=np.uint32)
    for m, n in itertools.product(range(len(va)), range(len(vb))):
        out[m, n] = _sum_bits([_mul(x, y) for x, y in zip(va[m], vb[n])])
    return out.view(np.float32)


def loop_block_sequential(a, b):
    """The block_sequential contract as a plain loop over np.float32 scalars."""
    bs = 16 if a[2] == "nvfp4" else 32
    va = operand_values(a[0], a[1], a[2], bs, with_tensor=False)
    vb = operand_values(b[0], b[1], b[2], bs, with_tensor=False)
    k = a[0].shape[1]
    out = np.zeros((len(va), len(vb)), dtype=np.float32)
    with np.errstate(all="ignore"):
        for m, n in itertools.product(range(len(va)), range(len(vb))):
            acc = np.float32(0.0)
            for lo in range(0, k, bs):
                prods = [_mul(x, y) for x, y in zip(va[m][lo:lo + bs], vb[n][lo:lo + bs])]
                c = np.uint32(_sum_bits(prods)).view(np.float32)
                acc = np.float32(acc + c)
            if a[2] == "nvfp4":
                t = np.float32(np.float32(a[3]) * np.float32(b[3]))
                acc = np.float32(acc * t)
            out[m, n] = acc
    return out


def same_bits(x, y):
    """Equal fp32 bit patterns, any NaN matching any NaN."""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    both_nan = np.isnan(x) & np.isnan(y)
    return bool(((x.view(np.uint32) == y.view(np.uint32)) | both_nan).all())


# ---- random operands -------------------------------------------------------------------------
def finite_codes(el):
    """Every finite code of an element format (NaN/Inf codes excluded)."""
    out = []
    for c in range(1 << WIDTH[el]):
        d = decode_element(c, el)
        if not isinstance(d, str):
            out.append(c)
    return np.array(out, dtype=np.uint8)


def rand_operand(rng, fmt, rows, k, *, scale_lo=118, scale_hi=136, specials=0.0, tscale=1.0):
    el = ELEM[fmt]
    pool = finite_codes(el)
    codes = rng.choice(pool, size=(rows, k)).astype(np.uint8)
    if specials:
        allc = np.arange(1 << WIDTH[el], dtype=np.uint8)
        mask = rng.random((rows, k)) < specials
        codes[mask] = rng.choice(allc, size=int(mask.sum()))
    bs = 16 if fmt == "nvfp4" else 32
    nblk = -(-k // bs)
    if fmt == "nvfp4":
        scales = rng.integers(0, 0x7F, size=(rows, nblk)).astype(np.uint8)
        if specials:
            m = rng.random((rows, nblk)) < specials
            scales[m] = rng.integers(0, 256, size=int(m.sum()))
        return codes, scales, fmt, np.float32(tscale)
    scales = rng.integers(scale_lo, scale_hi + 1, size=(rows, nblk)).astype(np.uint8)
    if specials:
        m = rng.random((rows, nblk)) < specials
        scales[m] = rng.choice(np.array([0x00, 0xFE, 0xFF], np.uint8), size=int(m.sum()))
    return codes, scales, fmt, None


def run(a, b, mode="exact"):
    return G.gemm_codes(a[0], a[1], a[2], b[0], b[1], b[2], a_tensor_scale=a[3],
                        b_tensor_scale=b[3], mode=mode)


def as_tensor(codes, scales, fmt="mxfp8_e4m3", tensor_scale=None):
    f = mxref.get_format(fmt)
    ts = None if tensor_scale is None else np.float32(tensor_scale)
    return mxref.MXTensor(codes=codes, scales=scales, fmt=f, profile=mxref.get_profile("ocp"),
                          axis=1, block_size=f.block_size, tensor_scale=ts)


PAIRS = list(itertools.product(MX, MX))


def seed(*parts):
    return zlib.crc32(repr(parts).encode())


@pytest.mark.parametrize("fa,fb", PAIRS + [("nvfp4", "nvfp4")])
def test_exact_and_block_sequential_match_oracles_on_random_codes(fa, fb):
    rng = np.random.default_rng(seed(fa, fb))
    a = rand_operand(rng, fa, 3, 70, tscale=0.375)
    b = rand_operand(rng, fb, 4, 70, tscale=-3.0e-3)
    assert same_bits(run(a, b), oracle_exact(a, b))
    assert same_bits(run(a, b, "block_sequential"), loop_block_sequential(a, b))


@pytest.mark.parametrize("fa,fb", [p for i, p in enumerate(PAIRS) if i % 3 == 0]
                         + [("mxfp8_e5m2", "mxfp8_e5m2"), ("mxfp8_e5m2", "mxfp4"),
                            ("nvfp4", "nvfp4")])
def test_specials_and_extreme_scales_match_oracles(fa, fb):
    """NaN/Inf codes, scale bytes 0x00 / 0xFE / 0xFF (NVFP4: any E4M3 scale code, NaN too)."""
    rng = np.random.default_rng(seed(fa, fb, "sp"))
    for k in (1, 31, 33, 95):
        a = rand_operand(rng, fa, 3, k, specials=0.04, scale_lo=0, scale_hi=254)
        b = rand_operand(rng, fb, 3, k, specials=0.04, scale_lo=0, scale_hi=254)
        assert same_bits(run(a, b), oracle_exact(a, b)), k
        assert same_bits(run(a, b, "block_sequential"), loop_block_sequential(a, b)), k


@pytest.mark.parametrize("fa,fb", [("mxfp8_e5m2", "mxfp8_e5m2"), ("mxfp8_e4m3", "mxfp8_e5m2"),
                                   ("mxint8", "mxfp8_e5m2")])
def test_widest_products_need_no_more_than_the_accumulator(fa, fb):
    """Max-magnitude e5m2 codes (57344 = 2^15.8) with scale 0xFE: block sums of 2^69 * 2^254."""
    k = 96
    ca = np.full((2, k), 0x7B, np.uint8) if fa == "mxfp8_e5m2" else \
        np.full((2, k), 0x7E if fa == "mxfp8_e4m3" else 0x7F, np.uint8)
    cb = np.full((2, k), 0x7B, np.uint8)
    ca[1, 40:] |= 0x80                                  # half the second row negative
    sa = np.full((2, 3), 0xFE, np.uint8)
    sb = np.array([[0xFE, 0x00, 0x80], [0x01, 0x7F, 0xFE]], np.uint8)
    a, b = (ca, sa, fa, None), (cb, sb, fb, None)
    assert same_bits(run(a, b), oracle_exact(a, b))
    assert same_bits(run(a, b, "block_sequential"), loop_block_sequential(a, b))


# ---- hand-built edge cases -------------------------------------------------------------------
E4M3_ONE, E4M3_TWO = 0x38, 0x40


def e4m3_rows(rows):
    """MXFP8 E4M3 operand from per-block lists [(scale byte, [codes...])...] per row."""
    k = max(sum(len(c) for _, c in row) for row in rows)
    codes = np.zeros((len(rows), k), np.uint8)
    scales = np.full((len(rows), -(-k // 32)), 127, np.uint8)
    for r, row in enumerate(rows):
        pos = 0
        for j, (s, cs) in enumerate(row):
            assert len(cs) <= 32 and pos == 32 * j
            codes[r, pos:pos + len(cs)] = cs
            scales[r, j] = s
            pos += 32
    return codes, scales, "mxfp8_e4m3", None


def block(scale, codes, pad=True):
    return scale, list(codes) + ([0] * (32 - len(codes)) if pad else [])


def ones_b(nblocks, byte=127):
    """B row of 1.0 in every element, every block scale ``byte``."""
    return e4m3_rows([[block(byte, [E4M3_ONE] * 32) for _ in range(nblocks)]])


def value_of(y):
    return Fraction(float(y[0, 0])) if np.isfinite(y[0, 0]) else float(y[0, 0])


def test_cancellation_leaves_the_tiny_remainder_exactly_rounded():
    # block 0: 448 * 2^127 (x 1.0 * 2^127 in B) = 448 * 2^254; block 1: the same negative;
    # blocks 2 and 3: 1 + 2^-30
    big = [0x7E] + [0] * 31
    a = e4m3_rows([[block(0xFE, big), block(0xFE, [0xFE] + [0] * 31),
                    block(127, [E4M3_ONE]), block(97, [E4M3_ONE])]])
    b = ones_b(4, 0xFE)
    b[1][0, 2:] = 127                                    # blocks 2, 3 of B: scale 1
    y = run(a, b)
    assert same_bits(y, oracle_exact(a, b))
    assert value_of(y) == 1                              # 1 + 2^-30 rounds to 1
    a2 = e4m3_rows([[block(0xFE, big), block(0xFE, [0xFE] + [0] * 31),
                     block(127 - 60, [0x3C])]])          # remainder 1.5 * 2^-60 alone
    b2 = ones_b(3, 0xFE)
    b2[1][0, 2] = 127
    y2 = run(a2, b2)
    assert same_bits(y2, oracle_exact(a2, b2))
    assert value_of(y2) == Fraction(3, 2) * pow2(-60)
    # block_sequential: 448 * 2^254 overflows fp32 in each block -> Inf + -Inf = NaN
    assert np.isnan(run(a2, b2, "block_sequential")[0, 0])


def terms_row(exps, neg=False):
    """A, B with one 1.0 per block: the exact dot product is +-sum(2^e for e in exps).
    Each 2^e is split over the two E8M0 scales (both within [-127, 127])."""
    one = 0xB8 if neg else E4M3_ONE
    ea = [max(min(e, 127), -127) for e in exps]
    a = e4m3_rows([[block(127 + x, [one]) for x in ea]])
    b = e4m3_rows([[block(127 + e - x, [E4M3_ONE]) for e, x in zip(exps, ea)]])
    return a, b


@pytest.mark.parametrize("exps,expect", [
    ([0, -24], 1),                                  # 1 + 2^-24: a tie, to the even 1
    ([0, -24, -80], 1 + Fraction(1, 2**23)),        # the tie broken upward by a far bit
    ([0, -23, -24], 1 + Fraction(2, 2**23)),        # 1 + 3 * 2^-24: tie, up to the even
    ([0, -25, -26], 1),                             # just below the tie
    ([-24, 0], 1),                                  # order of blocks does not matter
])
def test_ties_in_the_final_rounding(exps, expect):
    for neg in (False, True):
        a, b = terms_row(exps, neg)
        y = run(a, b)
        assert same_bits(y, oracle_exact(a, b))
        assert value_of(y) == (-expect if neg else expect)


def test_a_far_sticky_bit_breaks_the_tie_wherever_it_lands():
    """1 + 2^-24 + 2^e for every e from -26 to -140: the bit lands at every offset of the
    accumulator's limbs relative to the 62-bit window that is rounded."""
    for e in range(-26, -141, -1):
        for neg in (False, True):
            a, b = terms_row([0, -24, e], neg)
            want = 1 + Fraction(1, 2**23)
            assert value_of(run(a, b)) == (-want if neg else want), e
            a, b = terms_row([1, -23, e], neg)           # the same tie one binade up
            assert value_of(run(a, b)) == (-2 * want if neg else 2 * want), e


@pytest.mark.parametrize("exps,expect", [
    ([-150, -149], Fraction(2) * pow2(-149)),       # 1.5 units: tie -> even (2 units)
    ([-148, -150], Fraction(2) * pow2(-149)),       # 2.5 units: tie -> even (2 units)
    ([-150, -200], pow2(-149)),                     # just above half a unit
    ([-150], Fraction(0)),                          # exactly half a unit: tie -> +0
    ([-130, -149], pow2(-130) + pow2(-149)),        # exact subnormal
    ([-254], Fraction(0)),
])
def test_subnormal_results_round_once(exps, expect):
    a, b = terms_row(exps)
    y = run(a, b)
    assert same_bits(y, oracle_exact(a, b))
    assert value_of(y) == expect
    assert y.view(np.uint32)[0, 0] >> 31 == 0


@pytest.mark.parametrize("exps,expect", [
    (list(range(104, 128)), "max"),                                # 2^128 - 2^104 = FLT_MAX
    (list(range(103, 128)), np.inf),                               # FLT_MAX + half ulp: tie
    (list(range(104, 128)) + list(range(61, 103)), "max"),         # 2^61 below the tie
    (list(range(103, 128)) + [50], np.inf),                        # above the tie
    ([127, 127], np.inf), ([127, 126], float(2.0**127 * 1.5)),
])
def test_overflow_to_inf_and_the_largest_finite(exps, expect):
    a, b = terms_row(exps)
    y = run(a, b)
    assert same_bits(y, oracle_exact(a, b))
    want = np.finfo(np.float32).max if expect == "max" else np.float32(expect)
    assert y[0, 0] == want
    if expect == np.inf:                 # the same row negated: -Inf
        assert run(*terms_row(exps, True))[0, 0] == -np.inf


def test_nan_scale_poisons_even_a_zero_block():
    a = e4m3_rows([[block(127, [E4M3_ONE]), block(0xFF, [0])]])       # NaN scale, zero codes
    b = e4m3_rows([[block(127, [E4M3_ONE]), block(127, [0])]])         # and zeros opposite
    assert np.isnan(run(a, b)).all() and np.isnan(run(a, b, "block_sequential")).all()
    assert np.isnan(oracle_exact(a, b)).all()


def test_nan_and_inf_elements():
    e5 = "mxfp8_e5m2"
    inf, ninf, nan, one, zero = 0x7C, 0xFC, 0x7E, 0x3C, 0x00

    def row(*codes):
        c = np.zeros((1, 32), np.uint8)
        c[0, :len(codes)] = codes
        return c, np.full((1, 1), 127, np.uint8), e5, None

    cases = [((inf, one), (one, one), np.inf), ((inf, one), (zero, one), np.nan),
             ((inf, ninf), (one, one), np.nan), ((ninf, one), (one, one), -np.inf),
             ((inf, ninf), (one, zero), np.nan), ((inf, one), (one, zero), np.inf),
             ((nan,), (zero,), np.nan),
             ((inf,), (0xBC,), -np.inf)]
    for ca, cb, expect in cases:
        a, b = row(*ca), row(*cb)
        for y in (run(a, b), run(a, b, "block_sequential"), oracle_exact(a, b)):
            assert same_bits(y, np.float32(expect).reshape(1, 1)), (ca, cb, y)
    a = e4m3_rows([[block(127, [0x7F])]])                      # E4M3 NaN code x 0
    assert np.isnan(run(a, e4m3_rows([[block(127, [0])]]))).all()


def test_sign_of_an_exact_zero_sum():
    neg_zero, pos_one, neg_one = 0x80, E4M3_ONE, 0xB8
    cases = [([neg_zero, pos_one], [pos_one, neg_zero], 0x80000000),   # -0 + -0
             ([0, 0], [0, 0], 0), ([neg_zero, 0], [pos_one, pos_one], 0),
             ([pos_one, neg_one], [pos_one, pos_one], 0)]              # 1 - 1 = +0
    for ca, cb, bits in cases:
        a, b = e4m3_rows([[block(127, ca, False)]]), e4m3_rows([[block(127, cb, False)]])
        assert a[0].shape == (1, 2)
        assert run(a, b).view(np.uint32)[0, 0] == bits
        assert oracle_exact(a, b).view(np.uint32)[0, 0] == bits
        assert run(a, b, "block_sequential").view(np.uint32)[0, 0] == 0    # acc starts at +0


@pytest.mark.parametrize("k", [1, 31, 33, 95])
def test_ragged_k(k):
    rng = np.random.default_rng(k)
    for fa, fb in [("mxfp4", "mxfp8_e4m3"), ("mxint8", "mxfp6_e2m3"), ("nvfp4", "nvfp4")]:
        a = rand_operand(rng, fa, 2, k, tscale=2.0 ** -130)
        b = rand_operand(rng, fb, 3, k, tscale=7.0)
        assert same_bits(run(a, b), oracle_exact(a, b))
        assert same_bits(run(a, b, "block_sequential"), loop_block_sequential(a, b))


def test_empty_shapes():
    e = np.zeros((0, 64), np.uint8)
    for (m, n, k) in [(0, 3, 64), (2, 0, 64), (0, 0, 0), (2, 3, 0)]:
        ca, cb = np.zeros((m, k), np.uint8), np.zeros((n, k), np.uint8)
        sa, sb = np.zeros((m, -(-k // 32)), np.uint8), np.zeros((n, -(-k // 32)), np.uint8)
        for mode in G.MODES:
            y = G.gemm_codes(ca, sa, "mxfp4", cb, sb, "mxfp8_e4m3", mode=mode)
            assert y.shape == (m, n) and y.dtype == np.float32
            assert (y.view(np.uint32) == 0).all()                       # K = 0: +0
    assert e.size == 0
    bound = G.gemm_error_bound_codes(np.zeros((2, 0), np.uint8), np.zeros((2, 0), np.uint8),
                                     "mxfp4", np.zeros((3, 0), np.uint8),
                                     np.zeros((3, 0), np.uint8), "mxfp4")
    assert bound.shape == (2, 3) and (bound == 2.0 ** -150).all()


@pytest.mark.parametrize("ta,tb", [(0.5, 3.0), (-2.0 ** -140, 1.5), (0.0, 1.0), (-0.0, 2.0),
                                   (np.inf, 1.0), (-np.inf, 1.0), (np.nan, 1.0),
                                   (2.0 ** 100, 2.0 ** 100),
                                   (1e-30, 1e-30)])
def test_nvfp4_tensor_scales(ta, tb):
    rng = np.random.default_rng(7)
    a = rand_operand(rng, "nvfp4", 3, 40, tscale=ta)
    b = rand_operand(rng, "nvfp4", 2, 40, tscale=tb)
    a[0][0, :] = 0                                       # a zero row (Inf x 0 under T = Inf)
    assert same_bits(run(a, b), oracle_exact(a, b))
    assert same_bits(run(a, b, "block_sequential"), loop_block_sequential(a, b))


def test_nvfp4_signs_of_tensor_scales_reach_zeros_and_infs():
    codes = np.array([[0x2, 0x0]], np.uint8)               # 1.0, +0
    scales = np.array([[0x38]], np.uint8)                  # E4M3 1.0
    for ta, tb, want in [(-0.0, 1.0, 0x80000000), (0.0, 1.0, 0), (-0.0, -0.0, 0),
                         (-np.inf, 1.0, 0x7FC00000), (1.0, 1.0, 0x3F800000)]:
        a = (codes, scales, "nvfp4", np.float32(ta))
        b = (np.array([[0x2, 0x2]], np.uint8), scales, "nvfp4", np.float32(tb))
        y = run(a, b)
        assert same_bits(y, oracle_exact(a, b))
        assert (y.view(np.uint32)[0, 0] == want) or (want == 0x7FC00000 and np.isnan(y[0, 0]))
    a = (np.array([[0x2]], np.uint8), scales, "nvfp4", np.float32(-np.inf))
    b = (np.array([[0x2]], np.uint8), scales, "nvfp4", np.float32(2.0))
    assert run(a, b)[0, 0] == -np.inf and oracle_exact(a, b)[0, 0] == -np.inf


def test_nvfp4_through_the_mxtensor_api():
    rng = np.random.default_rng(3)
    a = rand_operand(rng, "nvfp4", 5, 48, tscale=0.0234375)
    b = rand_operand(rng, "nvfp4", 4, 48, tscale=-1.5e-5)
    A, B = as_tensor(*a), as_tensor(*b)
    assert same_bits(G.gemm(A, B), oracle_exact(a, b))
    assert same_bits(G.gemm(A, B, mode="block_sequential"), loop_block_sequential(a, b))


# ---- the integer-domain fp32 add -------------------------------------------------------------
def test_f32_add_matches_numpy_float32():
    rng = np.random.default_rng(11)
    n = 60000
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    # near neighbours and subnormals: exponent gaps 0..40, cancellation
    b[: n // 3] = (a[: n // 3].astype(np.int64) + rng.integers(-2**26, 2**26, n // 3)).astype(
        np.uint32) ^ np.uint32(0x80000000)
    a[n // 3: n // 2] &= np.uint32(0x807FFFFF)
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF,
                         0xFF7FFFFF, 1, 0x80000001, 0x00800000], np.uint32)
    pa, pb = np.meshgrid(specials, specials)             # every pair of specials
    a[-100:], b[-100:] = pa.ravel(), pb.ravel()
    with np.errstate(all="ignore"):
        expect = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    got = np.array([G.f32_add(np.int64(x), np.int64(y)) for x, y in zip(a, b)],
                   dtype=np.int64).astype(np.uint32)
    assert same_bits(got.view(np.float32), expect.view(np.float32))


# ---- the error bound -------------------------------------------------------------------------
def dequant_f32(t):
    return t.dequantize().astype(np.float32)


def split_k4(p):
    q = -(-p.shape[-1] // 4)
    parts = [np.cumsum(p[..., i:i + q], axis=-1, dtype=np.float32)[..., -1]
             for i in range(0, p.shape[-1], q)]
    assert len(parts) == 4
    return (parts[0] + parts[1]) + (parts[2] + parts[3])     # float32 adds


def orders(a32, b32, upcast=None):
    """Kernel emulations: (name, y) with products in fp32 of (optionally upcast) operands."""
    if upcast == "bf16":
        a32 = a32.astype(ml_dtypes.bfloat16).astype(np.float32)
        b32 = b32.astype(ml_dtypes.bfloat16).astype(np.float32)
    elif upcast == "bf16_ftz":
        a32 = np.where(np.abs(a32) < 2.0 ** -126, 0, a32).astype(ml_dtypes.bfloat16)
        b32 = np.where(np.abs(b32) < 2.0 ** -126, 0, b32).astype(ml_dtypes.bfloat16)
        a32, b32 = a32.astype(np.float32), b32.astype(np.float32)
    with np.errstate(all="ignore"):
        p = a32[:, None, :] * b32[None, :, :]                   # fp32 products, rounded once
        yield "sequential", np.cumsum(p, axis=-1, dtype=np.float32)[..., -1]
        yield "reversed", np.cumsum(p[..., ::-1], axis=-1, dtype=np.float32)[..., -1]
        yield "pairwise", np.sum(p, axis=-1, dtype=np.float32)
        yield "split-k4", split_k4(p)
        yield "sorted-by-size", np.cumsum(np.take_along_axis(p, np.argsort(np.abs(p), -1), -1),
                                          axis=-1, dtype=np.float32)[..., -1]


def adversarial(rng, fmt, m, n, k):
    """Large +x / -x blocks (scale 0xF0..) mixed with small ones: heavy cancellation."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    x[:, ::64] *= 2.0 ** 20
    w[:, 1::64] *= 2.0 ** 20
    x[:, 32:64] = -x[:, :32] if k >= 64 else x[:, 32:64]
    A, B = mxref.quantize(x, fmt, axis=1), mxref.quantize(w, fmt, axis=1)
    B.codes[:, 32:64] = B.codes[:, :32] if k >= 64 else B.codes[:, 32:64]
    B.scales[:, 1] = B.scales[:, 0]
    return A, B


BOUND_CASES = [("mxfp4", "random"), ("mxfp8_e4m3", "random"), ("mxfp8_e5m2", "random"),
               ("mxint8", "random"), ("nvfp4", "random"), ("mxfp8_e4m3", "adversarial"),
               ("mxfp8_e4m3", "extreme-scales"), ("mxfp8_e4m3", "ulp-drift")]
MIN_RATIO = {"random": 1e-4, "adversarial": 1e-3, "extreme-scales": 1e-3, "ulp-drift": 0.25}


def ulp_drift(m, n, k):
    """1 followed by (k - 32) terms of 0.75 ulp(1): in ascending order every fp32 add rounds
    up by a quarter ulp, so the sequential error grows like k/4 ulps (the worst case of the
    gamma_k bound is k/2); summed smallest-first the error is at most half an ulp."""
    ca = np.zeros((m, k), np.uint8)
    ca[:, 0] = E4M3_ONE
    ca[:, 32:] = 0x3C                                     # 1.5
    sa = np.full((m, k // 32), 127 - 24, np.uint8)        # 1.5 * 2^-24 = 0.75 ulp(1)
    sa[:, 0] = 127
    cb = np.full((n, k), E4M3_ONE, np.uint8)
    sb = np.full((n, k // 32), 127, np.uint8)
    return as_tensor(ca, sa), as_tensor(cb, sb)


def bound_case(fmt, kind, m=12, n=10, k=1024):
    rng = np.random.default_rng(seed(fmt, kind))
    if kind == "adversarial":
        return adversarial(rng, fmt, m, n, k)
    if kind == "ulp-drift":
        return ulp_drift(m, n, k)
    if fmt == "nvfp4":                   # random codes, E4M3 scales 2^-5..2^4, tensor scales
        a = rand_operand(rng, fmt, m, k, tscale=0.0123)
        b = rand_operand(rng, fmt, n, k, tscale=3.5e-3)
        a[1][:], b[1][:] = (rng.integers(0x10, 0x58, x[1].shape) for x in (a, b))
        return as_tensor(*a), as_tensor(*b)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    A, B = mxref.quantize(x, fmt, axis=1), mxref.quantize(w, fmt, axis=1)
    if kind == "random":   # spread the scales over 2^-15..2^15
        A.scales[:] = rng.integers(112, 143, A.scales.shape)
        B.scales[:] = rng.integers(112, 143, B.scales.shape)
    if kind == "extreme-scales":        # A's blocks at 2^-127.., B's at 2^97..: bf16 underflow
        A.scales[:] = rng.integers(0, 4, A.scales.shape)
        B.scales[:] = rng.integers(0xE0, 0xF0, B.scales.shape)
    return A, B


@pytest.mark.parametrize("fmt,kind", BOUND_CASES)
def test_bound_holds_for_other_fp32_orders(fmt, kind):
    A, B = bound_case(fmt, kind)
    exact = G.gemm(A, B)
    bound = G.gemm_error_bound(A, B, exact=exact)
    assert np.isfinite(bound).all() and (bound > 0).all()
    a32, b32 = dequant_f32(A), dequant_f32(B)
    tscale = None
    if fmt == "nvfp4":        # the NVFP4 model: e*S products, fp32 sum, then y = fl(acc * t)
        a32 = mxref.dequantize(codes=A.codes, scales=A.scales, fmt="nvfp4", axis=1)
        b32 = mxref.dequantize(codes=B.codes, scales=B.scales, fmt="nvfp4", axis=1)
        tscale = np.float32(A.tensor_scale) * np.float32(B.tensor_scale)
    ratios = {}
    for upcast in (None, "bf16"):
        for name, y in orders(a32, b32, upcast):
            if tscale is not None:
                y = np.float32(y * tscale)
            chk = G.check_gemm(y, A, B, exact=exact, bound=bound)
            assert chk.ok, (name, upcast, chk.n_outside, chk.max_ulp)
            err = np.abs(y.astype(np.float64) - exact.astype(np.float64))
            ratios[(name, upcast)] = float((err / bound).max())
    assert max(ratios.values()) <= 1
    # not absurdly loose: somewhere the observed error is a visible fraction of the bound
    assert max(ratios.values()) > MIN_RATIO[kind], ratios
    bs = G.gemm(A, B, mode="block_sequential")
    assert G.check_gemm(bs, A, B, exact=exact, terms="blocks").ok
    assert G.check_gemm(bs, A, B, exact=exact).ok


def test_bf16_underflow_needs_the_upcast_term():
    """Elements below bf16's subnormal grid: bf16 upcast rounds them; bf16_ftz flushes them."""
    A, B = bound_case("mxfp8_e4m3", "extreme-scales")
    exact = G.gemm(A, B)
    b_fp32 = G.gemm_error_bound(A, B, exact=exact, upcast="fp32")
    b_bf16 = G.gemm_error_bound(A, B, exact=exact, upcast="bf16")
    b_ftz = G.gemm_error_bound(A, B, exact=exact, upcast="bf16_ftz")
    assert (b_bf16 >= b_fp32).all() and (b_bf16 > b_fp32).any() and (b_ftz >= b_bf16).all()
    a32, b32 = dequant_f32(A), dequant_f32(B)
    y_ftz = dict(orders(a32, b32, "bf16_ftz"))["sequential"]
    assert not G.check_gemm(y_ftz, A, B, exact=exact, bound=b_fp32).ok   # the term is needed
    assert G.check_gemm(y_ftz, A, B, exact=exact, bound=b_ftz).ok


def test_bound_specials_nan_and_overflow():
    a = e4m3_rows([[block(127, [E4M3_ONE]), block(0xFF, [0])],             # NaN row
                   [block(0xFE, [0x7E] * 4), block(0xFE, [0xFE] * 4)],     # 4 * 448^2 * 2^254 ...
                   [block(127, [E4M3_ONE]), block(127, [E4M3_TWO])]])      # ordinary
    b = e4m3_rows([[block(127, [E4M3_ONE] * 4), block(127, [E4M3_ONE] * 4)]])
    A, B = as_tensor(a[0], a[1]), as_tensor(b[0], b[1])
    exact = G.gemm(A, B)
    bound = G.gemm_error_bound(A, B)
    assert np.isnan(exact[0, 0]) and np.isnan(bound[0, 0])
    assert exact[1, 0] == 0 and np.isposinf(bound[1, 0])           # exact 0, partials overflow
    assert np.isfinite(bound[2, 0]) and exact[2, 0] == 3
    y = np.array([[np.nan], [np.inf], [3.0]], np.float32)
    chk = G.check_gemm(y, A, B)
    assert chk.ok and chk.within.all()
    y_nan = np.array([[np.nan], [np.nan], [3.0]], np.float32)
    assert G.check_gemm(y_nan, A, B).nan_mismatch == 1
    assert G.check_gemm(y_nan, A, B, allow_nan_where_unbounded=True).ok
    assert G.check_gemm(np.array([[1.0], [0.0], [3.0]], np.float32), A, B).nan_mismatch == 1


# ---- planted bugs: the checker must reject them ----------------------------------------------
def bf16_accumulate(p):
    acc = np.zeros(p.shape[:-1], np.float32)
    for k in range(p.shape[-1]):
        acc = (acc + p[..., k]).astype(ml_dtypes.bfloat16).astype(np.float32)
    return acc


def test_checker_rejects_planted_bugs():
    A, B = bound_case("mxfp4", "random", 8, 8, 512)
    exact = G.gemm(A, B)
    a32, b32 = dequant_f32(A), dequant_f32(B)
    p = a32[:, None, :] * b32[None, :, :]
    good = np.cumsum(p, axis=-1, dtype=np.float32)[..., -1]
    assert G.check_gemm(good, A, B, exact=exact).ok
    bugs = {"bf16 accumulator": bf16_accumulate(p),
            "last block dropped": np.cumsum(p[..., :-32], axis=-1, dtype=np.float32)[..., -1]}
    for name, y in bugs.items():
        chk = G.check_gemm(y, A, B, exact=exact)
        assert not chk.ok and chk.n_outside > 0, name
    # MXINT8 products (14 significant bits) rounded to bf16 before an fp32 sum
    A3, B3 = bound_case("mxint8", "random", 8, 8, 512)
    p3 = dequant_f32(A3)[:, None, :] * dequant_f32(B3)[None, :, :]
    p3_bf16 = p3.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert G.check_gemm(np.cumsum(p3, -1, dtype=np.float32)[..., -1], A3, B3).ok
    chk = G.check_gemm(np.cumsum(p3_bf16, -1, dtype=np.float32)[..., -1], A3, B3)
    assert not chk.ok and chk.n_outside > 0
    # scale byte 0x00 read as 0 instead of 2^-127: visible when B's scales are huge
    A2, B2 = bound_case("mxfp8_e4m3", "extreme-scales", 6, 6, 256)
    A2.scales[:, ::2] = 0
    exact2 = G.gemm(A2, B2)
    zero_scale = A2.dequantize().astype(np.float32)
    zero_scale[:, (np.arange(256) // 32) % 2 == 0] = 0
    with np.errstate(all="ignore"):
        y2 = np.cumsum(zero_scale[:, None, :] * dequant_f32(B2)[None], -1, dtype=np.float32)
    chk = G.check_gemm(y2[..., -1], A2, B2, exact=exact2)
    assert not chk.ok and chk.ulp_hist["16+"] > 0
    # a NaN scale ignored (read as 2^128 -> Inf, or skipped): NaN mismatch
    A.scales[0, 3] = 0xFF
    chk = G.check_gemm(good, A, B)
    assert chk.nan_mismatch == B.codes.shape[0] and not chk.ok


def test_checker_statistics():
    A, B = bound_case("mxfp8_e4m3", "random", 4, 5, 256)
    exact = G.gemm(A, B)
    chk = G.check_gemm(exact, A, B)
    assert chk.ok and chk.max_ulp == 0 and chk.ulp_hist["0"] == 20
    ulp = np.spacing(np.abs(exact)).astype(np.float64)        # fp32 spacing above |Y|
    y = (exact + 3 * np.spacing(np.abs(exact))).astype(np.float32)
    d = np.abs(y.astype(np.float64) - exact.astype(np.float64))
    expect = d / ulp
    assert (expect == 3).sum() >= 15
    chk = G.check_gemm(y, A, B, exact=exact, bound=np.full(exact.shape, np.inf))
    assert chk.ok and chk.max_ulp == expect.max() and chk.mean_ulp == expect.mean()
    assert chk.ulp_hist["3"] == (expect == 3).sum() and sum(chk.ulp_hist.values()) == 20
    chk = G.check_gemm(y, A, B, exact=exact, bound=2.5 * ulp)
    assert chk.n_outside == 20 and not chk.ok
    # exactly on the bound is inside; one float64 ulp below the distance is outside
    assert G.check_gemm(y, A, B, exact=exact, bound=d).ok
    assert G.check_gemm(y, A, B, exact=exact, bound=np.nextafter(d, 0)).n_outside == 20


# ---- typed errors ----------------------------------------------------------------------------
def _ok_operands(k=64, rows=2, fmt="mxfp4"):
    bs = 16 if fmt == "nvfp4" else 32
    return np.zeros((rows, k), np.uint8), np.full((rows, -(-k // bs)), 127, np.uint8)


@pytest.mark.parametrize("case,err,words", [
    ("k_mismatch", G.GemmShapeError, ["K mismatch", "A", "B"]),
    ("scale_shape", G.GemmShapeError, ["operand B", "scales", "ceil"]),
    ("codes_dtype", G.GemmDtypeError, ["operand A", "codes", "uint8"]),
    ("scales_dtype", G.GemmDtypeError, ["operand B", "scales", "uint8"]),
    ("mixed_nvfp4", G.GemmFormatError, ["nvfp4", "mxfp4"]),
    ("block_size", G.GemmFormatError, ["block size", "A", "B"]),
    ("not_2d", G.GemmShapeError, ["operand A", "2-D"]),
    ("wide_code", G.GemmCodeError, ["operand A", "0x10", "e2m1"]),
    ("mode", G.GemmModeError, ["mode", "bound"]),
    ("mx_tensor_scale", G.GemmFormatError, ["operand A", "tensor scale"]),
    ("tensor_scale_f64", G.GemmDtypeError, ["operand B", "tensor scale"]),
])
def test_bad_input_raises_typed_errors(case, err, words):
    ca, sa = _ok_operands()
    cb, sb = _ok_operands()
    kw = {}
    fa = fb = "mxfp4"
    if case == "k_mismatch":
        cb, sb = _ok_operands(k=96)
    elif case == "scale_shape":
        sb = sb[:, :1]
    elif case == "codes_dtype":
        ca = ca.astype(np.int8)
    elif case == "scales_dtype":
        sb = sb.astype(np.int32)
    elif case == "mixed_nvfp4":
        fb = "nvfp4"
        cb, sb = _ok_operands(fmt="nvfp4")
    elif case == "block_size":
        kw["block_size"] = 64
        with pytest.raises(err) as ei:
            G.gemm(mxref.quantize(np.ones((2, 64), np.float32), "mxfp4", axis=1, block_size=64),
                   mxref.quantize(np.ones((2, 64), np.float32), "mxfp4", axis=1))
        assert all(w in str(ei.value) for w in words)
        return
    elif case == "not_2d":
        ca = ca.reshape(2, 2, 32)
    elif case == "wide_code":
        ca[1, 5] = 0x10
    elif case == "mode":
        kw["mode"] = "bound"
    elif case == "mx_tensor_scale":
        kw["a_tensor_scale"] = np.float32(1)
    elif case == "tensor_scale_f64":
        fa = fb = "nvfp4"
        ca, sa = _ok_operands(fmt="nvfp4")
        cb, sb = _ok_operands(fmt="nvfp4")
        kw["b_tensor_scale"] = np.float64(0.1)
    with pytest.raises(err) as ei:
        G.gemm_codes(ca, sa, fa, cb, sb, fb, **kw)
    assert isinstance(ei.value, MXRefError)
    assert all(w in str(ei.value) for w in words), str(ei.value)


def test_axis0_tensor_and_bad_options_are_refused():
    x = np.ones((64, 4), np.float32)
    A0 = mxref.quantize(x, "mxfp4", axis=0)
    B = mxref.quantize(np.ones((3, 4), np.float32), "mxfp4", axis=1)
    with pytest.raises(G.GemmAxisError, match="operand A.*axis 0"):
        G.gemm(A0, B)
    A = mxref.quantize(np.ones((2, 64), np.float32), "mxfp4", axis=1)
    B = mxref.quantize(np.ones((3, 64), np.float32), "mxfp4", axis=1)
    for kw in ({"terms": "rows"}, {"upcast": "fp16"}, {"rounding": "rtz"}):
        with pytest.raises(G.GemmModeError):
            G.gemm_error_bound(A, B, **kw)
    with pytest.raises(G.GemmShapeError, match="shape"):
        G.check_gemm(np.zeros((3, 2), np.float32), A, B)
    with pytest.raises(MXRefError):
        G.check_gemm(np.zeros((2, 3), np.float64), A, B)          # float64 needs a rounding
    three_d = mxref.quantize(np.ones((2, 2, 32), np.float32), "mxfp4", axis=2)
    with pytest.raises(G.GemmShapeError, match="operand B.*2-D"):
        G.gemm(A, three_d)


def test_inf_elements_bound_is_zero_unless_overflow_is_possible():
    ca = np.zeros((2, 32), np.uint8)
    ca[0, :2] = [0x7C, 0x3C]                        # +Inf, 1.0 (E5M2)
    ca[1, :2] = [0xFC, 0x3C]                        # -Inf, 1.0
    A = as_tensor(ca, np.full((2, 1), 127, np.uint8), "mxfp8_e5m2")
    B = as_tensor(np.full((1, 32), 0x3C, np.uint8), np.full((1, 1), 127, np.uint8), "mxfp8_e5m2")
    exact = G.gemm(A, B)
    assert exact[0, 0] == np.inf and exact[1, 0] == -np.inf
    bound = G.gemm_error_bound(A, B)
    assert (bound == 0).all()
    assert G.check_gemm(exact, A, B).ok
    fmax = np.finfo(np.float32).max
    chk = G.check_gemm(np.array([[fmax], [-np.inf]], np.float32), A, B)
    assert chk.n_outside == 1 and not chk.within[0, 0] and chk.within[1, 0]


def test_inf_times_an_element_the_upcast_flushes_may_be_nan():
    """An Inf element against a nonzero element below the upcast's smallest quantum: the exact
    product is Inf, but a kernel that decodes to bf16 makes that element 0 and computes
    Inf * 0 = NaN, as its contract allows: the bound is +inf there (any value), and stays 0 at
    the Inf outputs where nothing is flushed. Found by test_fast_within_bound on e5m2 edges
    (a hash()-seeded run: NaN where the checker demanded +Inf)."""
    ca = np.zeros((2, 32), np.uint8)
    ca[0, 0] = 0x7C                                 # +Inf (E5M2)
    ca[1, 0] = 0x3C                                 # 1.0
    A = as_tensor(ca, np.full((2, 1), 127, np.uint8), "mxfp8_e5m2")
    cb = np.zeros((2, 32), np.uint8)
    cb[0, 0] = 0x01                                 # 2^-16 * 2^-127 = 2^-143: 0 in bf16
    cb[1, 0] = 0x3C                                 # 1.0 * 2^-127: a bf16 subnormal, exact
    B = as_tensor(cb, np.zeros((2, 1), np.uint8), "mxfp8_e5m2")
    exact = G.gemm(A, B)
    assert exact[0, 0] == np.inf and exact[0, 1] == np.inf
    bound = G.gemm_error_bound(A, B, exact=exact)
    assert bound[0, 0] == np.inf and bound[0, 1] == 0
    # what a bf16-decoding kernel computes: NaN at [0, 0], +Inf at [0, 1]
    with np.errstate(invalid="ignore"):                 # Inf * 0, on purpose
        y = (dequant_f32(A).astype(ml_dtypes.bfloat16).astype(np.float32) @
             dequant_f32(B).astype(ml_dtypes.bfloat16).astype(np.float32).T)
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf
    assert G.check_gemm(y, A, B, exact=exact, allow_nan_where_unbounded=True).ok
    # nothing is flushed without the upcast: Inf * 2^-143 must stay +Inf
    assert G.gemm_error_bound(A, B, exact=exact, upcast="fp32")[0, 0] == 0
    y[0, 1] = np.nan                               # NaN where nothing was flushed: caught
    assert not G.check_gemm(y, A, B, exact=exact, allow_nan_where_unbounded=True).ok


def test_faithful_rounding_bound_is_wider_and_still_holds():
    A, B = bound_case("mxfp8_e4m3", "random")
    exact = G.gemm(A, B)
    rne = G.gemm_error_bound(A, B, exact=exact)
    faithful = G.gemm_error_bound(A, B, exact=exact, rounding="faithful")
    blocks = G.gemm_error_bound(A, B, exact=exact, terms="blocks")
    assert (faithful > rne).all() and (blocks < rne).all()
    for _, y in orders(dequant_f32(A), dequant_f32(B)):
        assert G.check_gemm(y, A, B, exact=exact, bound=faithful).ok


def test_sums_for_the_bound_round_up_to_float64():
    """_f64_bits_up: the smallest float64 >= (sig + sticky) * 2^e, checked with Fractions."""
    rng = np.random.default_rng(5)
    for _ in range(3000):
        bits = int(rng.integers(1, 63))
        sig = int(rng.integers(1 << (bits - 1), (1 << bits) - 1, endpoint=True))
        e = int(rng.integers(-400, 400))
        sticky = bool(rng.integers(0, 2)) and bits == 62
        got = float(np.uint64(G._f64_bits_up(np.int64(sig), np.int64(e), sticky)).view(
            np.float64))
        assert Fraction(got) >= (sig + int(sticky)) * pow2(e)   # above every value inside
        assert Fraction(float(np.nextafter(got, 0))) < Fraction(sig) * pow2(e) + (
            pow2(e - 64) if sticky else 0)


def test_blocks_bound_uses_signed_block_sums():
    """Blocks whose products cancel inside the block contribute nothing to S_b."""
    a = e4m3_rows([[block(127, [E4M3_ONE, 0xB8]), block(140, [E4M3_TWO, 0xC0])]])  # 1,-1 | 2,-2
    b = ones_b(2)
    A, B = as_tensor(a[0], a[1]), as_tensor(b[0], b[1])
    elements = G.gemm_error_bound(A, B)
    blocks = G.gemm_error_bound(A, B, terms="blocks")
    assert G.gemm(A, B)[0, 0] == 0
    assert elements[0, 0] > 2.0 ** -12                   # gamma_64 * (2 + 2 * 2^14)
    assert blocks[0, 0] < 2.0 ** -145                    # only underflow and ulp(0)/2 terms


def test_nvfp4_negative_block_scale_sign_is_applied_once():
    """A negative E4M3 block scale flips the sign of its block once (found by the GEMM kernel
    tests: the decoder applied it twice). Expected values from Fractions."""
    from fractions import Fraction
    from mxref.gemm import gemm_codes
    a = np.full((1, 16), 2, np.uint8)                 # E2M1 1.0
    b = np.array([[2, 3] * 8], np.uint8)              # 1.0, 1.5
    for sa, sb, want in ((0xB8, 0x38, -20), (0xB8, 0xC0, 40), (0x38, 0x38, 20)):
        # E4M3 0x38 = 1, 0xB8 = -1, 0xC0 = -2; sum of 8 x 1 + 8 x 1.5 = 20
        for mode in ("exact", "block_sequential"):
            y = gemm_codes(a, np.array([[sa]], np.uint8), "nvfp4", b,
                           np.array([[sb]], np.uint8), "nvfp4", a_tensor_scale=np.float32(1),
                           b_tensor_scale=np.float32(1), mode=mode)
            assert Fraction(float(y[0, 0])) == want, (hex(sa), hex(sb), mode, y)


@pytest.mark.parametrize("fa,fb", [p for i, p in enumerate(PAIRS) if i % 4 == 1]
                         + [("mxfp4", "mxfp4"), ("mxfp8_e5m2", "mxfp8_e5m2"),
                            ("nvfp4", "nvfp4")])
def test_int64_rows_and_the_kulisch_accumulator_give_the_same_bits(fa, fb):
    """The exact product and the bound's sums take one int64 per output for rows whose sums
    fit (INT64_ROWS), the Kulisch accumulator for the others: the same exact sum, so the
    same bits. Rows with narrow and with wide block-scale spans, specials, cancellation to
    zero, and NVFP4 tensor scales (a power of two: int64 rows; 0.375: Kulisch)."""
    rng = np.random.default_rng(seed(fa, fb, "int64"))
    k = 200
    nar = rand_operand(rng, fa, 6, k, scale_lo=120, scale_hi=130, tscale=0.5)
    wid = rand_operand(rng, fa, 4, k, specials=0.02, scale_lo=0, scale_hi=254, tscale=0.375)
    a = tuple(np.concatenate([x, y]) if isinstance(x, np.ndarray) and x.ndim else x
              for x, y in zip(nar, wid))
    b = rand_operand(rng, fb, 5, k, scale_lo=118, scale_hi=136, tscale=-0.25)
    if fa != "nvfp4":            # B rows of very different magnitudes (outlier channels):
        b[1][:] = np.clip(b[1].astype(int) - 127 + np.array([[40], [90], [127], [160], [200]]),
                          0, 254).astype(np.uint8)       # wide overall, narrow in each row
    if fa == "nvfp4":            # E4M3 block scales of a few binades in the narrow rows and B
        a[1][:6] = rng.integers(0x30, 0x48, size=a[1][:6].shape)
        b[1][:] = rng.integers(0x30, 0x48, size=b[1].shape)
    a[0][9] = a[0][0]                                          # a row that cancels row 0 ...
    a[1][9] = a[1][0]
    neg = (1 << (WIDTH[ELEM[fa]] - 1)) if fa != "mxint8" else 0
    if neg:
        a[0][9] ^= neg                                         # ... exactly: sums of zero
    for ts in (a[3], np.float32(0.375)) if fa == "nvfp4" else (a[3],):
        aa = a[:3] + (ts,)
        ops = G._operands(aa[0], aa[1], fa, b[0], b[1], fb, aa[3], b[3])
        results = []
        try:
            for on in (True, False):
                G.INT64_ROWS[0] = on
                results.append([run(aa, b).view(np.uint32)] + [
                    G.gemm_error_bound_codes(aa[0], aa[1], fa, b[0], b[1], fb,
                                             a_tensor_scale=aa[3], b_tensor_scale=b[3],
                                             terms=t).view(np.uint64)
                    for t in ("elements", "blocks")])
        finally:
            G.INT64_ROWS[0] = True
        for x, y in zip(*results):
            np.testing.assert_array_equal(x, y)
        a_op, b_op = ops
        ea, _, _ = G._shifted(a_op.bexp)
        eb, _, _ = G._shifted(b_op.bexp)
        span_b = int((eb - eb.min(axis=1, keepdims=True)).max())     # the widest B row
        assert fa == "nvfp4" or int(eb.max() - eb.min()) > 62    # B as a whole would not fit
        split = G._kernel_operands(a_op, b_op)[5]
        kinds = G._int64_rows(ea, span_b, a_op, b_op, split, *(
            G._folded_specials(op)[3] for op in (a_op, b_op)))
        if (fa, fb) == ("mxfp4", "mxfp4") or ts == np.float32(0.5):
            assert kinds[:6].all(), "narrow FP4 rows should take the int64 sums"
        if (fa, fb) == ("mxfp4", "mxfp4"):
            assert not kinds[6:].all(), "some wide rows should take the Kulisch accumulator"
        if ts == np.float32(0.375):
            assert not kinds.any(), "a tensor-scale significand goes to the Kulisch rows"


def test_inf_meets_counts_only_rows_with_an_inf_and_matches_the_definition():
    """_inf_meets[m, n]: some k pairs an Inf of one operand with an element of the other that
    the upcast may flush (checked against the definition, element by element); it skips
    the matmul for rows without an Inf (most tensors), so a row with one must still count."""
    rng = np.random.default_rng(7)
    seen = []
    for trial in range(6):
        ma, nb_, k = 7, 5, 40
        ka = np.where(rng.random((ma, k)) < (0.02 if trial else 0.0), G.KIND_INF,
                      G.KIND_FINITE).astype(np.uint8)
        kb = np.where(rng.random((nb_, k)) < (0.03 if trial % 2 else 0.0), G.KIND_INF,
                      G.KIND_FINITE).astype(np.uint8)
        tiny_a, tiny_b = rng.random((ma, k)) < 0.3, rng.random((nb_, k)) < 0.3
        a = type("Op", (), {"kinds": ka, "rows": ma})()
        b = type("Op", (), {"kinds": kb, "rows": nb_})()
        want = np.array([[bool(((ka[m] == G.KIND_INF) & tiny_b[n]).any() or
                               (tiny_a[m] & (kb[n] == G.KIND_INF)).any())
                          for n in range(nb_)] for m in range(ma)])
        got = G._inf_meets(a, b, tiny_a, tiny_b)
        np.testing.assert_array_equal(got, want)
        seen.append(bool(want.any()))
    assert seen[0] is False and any(seen), seen       # no Inf at all, then some that meet
