"""mxref.fp8fp4: direct FP8 <-> MXFP4 conversion and scaling-aware re-blocking.

Expected values come from an exact fractions.Fraction oracle written below (on top of the
element/rounding helpers of tests/oracle.py) and from mxref.quantize applied to independently
decoded values; never from the code under test. docs/fp8fp4.md states the contracts.
"""
import os
import sys
import zlib
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O

import mxref
from mxref import fp8fp4 as F
from mxref.errors import MXRefError, ProfileConflictError

OCP = mxref.get_profile("ocp")
ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2", "mxfp8_e4m3": "e4m3",
        "mxfp8_e5m2": "e5m2", "mxint8": "int8"}
NAN8 = 0x7F                      # canonical FP8 NaN code (E4M3 and E5M2)
P2 = O.pow2


# ---------------------------------------------------------------------------------------------
# exact oracle
# ---------------------------------------------------------------------------------------------
def headroom(fp8):
    """k = max{k : 6 * 2^k <= max_normal(fp8)}, from the oracle's own format facts."""
    k, mx = 0, O.facts(fp8)[3]
    while 6 * P2(k + 1) <= mx:
        k += 1
    return k


def mx_value(code, sbyte, elem):
    """Exact value of an MX element: (sign, Fraction) or 'nan' / '+inf' / '-inf'."""
    if sbyte == 0xFF:
        return "nan"
    v = O.decode_element(code, elem)
    return v if isinstance(v, str) else (v[0], v[1] * P2(sbyte - 127))


def oracle_to_fp8(codes, scales, bs, glen, fp8):
    """Oracle of mxfp4_to_fp8 on one row (lists): (codes, group bytes, exact, inexact, flushed)."""
    k = headroom(fp8)
    n = len(codes)
    out, gbytes, exact, n_inexact, n_flushed = [], [], [], 0, 0
    for g0 in range(0, n, glen):
        g1 = min(g0 + glen, n)
        blocks = range(g0 // bs, -(-g1 // bs))
        finite = [b for b in blocks if scales[b] != 0xFF]
        live = [b for b in finite if any(codes[i] & 7 for i in range(b * bs, min(n, b * bs + bs)))]
        g = 0xFF if not finite else (max(max(scales[b] for b in live) - k, 0) if live else 0)
        gbytes.append(g)
        ok = True
        for i in range(g0, g1):
            s = scales[i // bs]
            if s == 0xFF:
                out.append(NAN8)
                continue
            sign, q = O.decode_element(codes[i], "e2m1")
            v = q * P2(s - g)                         # value / 2^(G - 127)
            c8 = O.round_to_element(sign, v, fp8, "rne", "saturate")
            back = O.decode_element(c8, fp8)[1]
            if back != v:
                ok = False
                n_inexact += 1
                n_flushed += back == 0
            out.append(c8)
        exact.append(ok)
    return out, gbytes, exact, n_inexact, n_flushed


def exact_scale(amax, elem, knobs):
    """Unclamped shared exponent of a positive exact amax by the profile's rule."""
    mb, _emin, emax, mx = O.facts(elem)[:4]
    rule = knobs["scale_rule"]
    if rule == "floor":
        s = O.floor_log2(amax) - emax
    elif rule == "rceil":
        s = O.ceil_log2(amax / mx)
    elif rule == "ceil":
        s = O.ceil_log2(amax) - emax
    elif rule == "even":
        q = P2(O.floor_log2(amax) - mb)
        s = O.floor_log2(O.floor_int(amax / q + O.HALF) * q) - emax
    elif rule == "round_down":
        s = O.floor_log2(amax / mx)
    else:
        raise ValueError(rule)
    if knobs["rceil_subnormal"] == "any_up" and s <= -126:
        s = -126 if amax / mx > P2(-150) else -127
    return s


def quantize_exact_block(vals, elem, knobs):
    """(scale byte, codes) of one MX block of exact values (docs/semantics.md steps 1-4);
    values may lie outside fp32's range. No torchao float32-log2 rule, no stochastic rounding."""
    assert not knobs.get("rceil_f32_log2") and knobs["rounding"] != "stochastic"
    tiny = P2(-126)

    def flushed(v):
        return knobs["flush_fp32_subnormals"] and not isinstance(v, str) and 0 < v[1] < tiny

    has_nan = "nan" in vals
    has_inf = "+inf" in vals or "-inf" in vals
    amax = max([v[1] for v in vals if not isinstance(v, str) and not flushed(v)],
               default=Fraction(0))
    if (has_nan and knobs["nan_in_block"] == "poison") or \
            (has_inf and knobs["inf_in_block"] == "poison"):
        return 0xFF, [O.nan_or_zero(elem)] * len(vals)
    if has_inf and knobs["inf_in_block"] == "scale_max":
        s = 127
    else:
        if has_inf:
            amax = P2(128)
        s = -127 if amax == 0 else exact_scale(amax, elem, knobs)
        s = max(s, -127)
        if s > 127:
            if knobs["scale_overflow"] == "nan":
                return 0xFF, [O.nan_or_zero(elem)] * len(vals)
            s = 127
    se = knobs["zero_scale_elem_exp"] if s == -127 else s
    codes = []
    for v in vals:
        if v == "nan":
            codes.append(O.nan_or_zero(elem))
        elif isinstance(v, str):
            codes.append(O.overflow_code(int(v == "-inf"), elem, knobs["overflow"]))
        else:
            exact_zero = v[1] == 0 or flushed(v)
            mag = Fraction(0) if flushed(v) else v[1]
            codes.append(O.round_to_element(v[0], mag / P2(se), elem, knobs["rounding"],
                                            knobs["overflow"], knobs["signed_zero"], exact_zero))
    return s + 127, codes


def quantize_exact_rows(vals, elem, knobs, bs):
    """Block each row of a 2-D list of exact values; returns (scales, codes) arrays."""
    rows, n = len(vals), len(vals[0])
    nblk = -(-n // bs)
    scales = np.zeros((rows, nblk), np.uint8)
    codes = np.zeros((rows, n), np.uint8)
    for i in range(rows):
        for j in range(nblk):
            sl = slice(j * bs, min(n, j * bs + bs))
            scales[i, j], codes[i, sl] = quantize_exact_block(vals[i][sl], elem, knobs)
    return scales, codes


def fp8_exact_values(t):
    """Exact values of a 2-D FP8Tensor blocked along axis 1 (oracle decode, no mxref)."""
    rows, n = t.codes.shape
    glen = n if t.group == "row" else t.group
    return [[mx_value(int(t.codes[i, j]), int(t.scales[i, j // glen]), t.fp8) for j in range(n)]
            for i in range(rows)]


def same_mx(a, b):
    """Equal scales, and equal codes outside blocks that both mark NaN (codes don't-care)."""
    if not np.array_equal(a.scales, b.scales):
        return False
    live = np.repeat(np.moveaxis(a.scales, a.axis, -1) != 0xFF, a.block_size, axis=-1)
    live = np.moveaxis(live[..., :a.codes.shape[a.axis]], -1, a.axis)
    return bool(np.array_equal(a.codes[live], b.codes[live]))


# ---------------------------------------------------------------------------------------------
# generators
# ---------------------------------------------------------------------------------------------
def random_mxfp4(rng, rows, n, bs=32, base=(0x7F,), spread=20, nan_rate=0.02, zero_rate=0.05,
                 canonical=False):
    """Random MXFP4 MXTensor (axis 1): per-row base scale byte, block bytes up to ``spread``
    below it, random codes; some NaN blocks and all-zero blocks. ``canonical``: every live
    block holds a 4.0 or 6.0 (code 6/7), as OCP floor quantization writes."""
    nblk = -(-n // bs)
    b0 = rng.choice(np.array(base), (rows, 1))
    scales = np.clip(b0 - rng.integers(0, spread + 1, (rows, nblk)), 0, 254)
    codes = rng.integers(0, 16, (rows, n))
    zero = rng.random((rows, nblk)) < zero_rate
    nan = rng.random((rows, nblk)) < nan_rate
    if canonical:
        col = np.arange(nblk) * bs
        pos = np.minimum(col + rng.integers(0, bs, (rows, nblk)), n - 1)
        codes[np.arange(rows)[:, None], pos] = rng.choice([6, 7, 14, 15], (rows, nblk))
    zmask = np.repeat(zero, bs, axis=1)[:, :n]
    codes[zmask] = rng.choice([0, 8], zmask.sum())
    scales[zero] = 0
    scales[nan] = 0xFF
    codes[np.repeat(nan, bs, axis=1)[:, :n]] = 0
    return mxref.MXTensor(codes=codes.astype(np.uint8), scales=scales.astype(np.uint8),
                          fmt=mxref.get_format("mxfp4"), profile=OCP, axis=1, block_size=bs)


def student_t(rng, shape, df=3):
    return (rng.standard_normal(shape) / np.sqrt(rng.chisquare(df, shape) / df)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# MXFP4 -> FP8
# ---------------------------------------------------------------------------------------------
def check_to_fp8(mx, group, fp8):
    t = F.mxfp4_to_fp8(mx, group=group, fp8=fp8)
    rows, n = mx.codes.shape
    glen = n if group == "row" else group
    tot_inexact = tot_flushed = 0
    for i in range(rows):
        c, g, ex, ni, nf = oracle_to_fp8([int(v) for v in mx.codes[i]],
                                         [int(v) for v in mx.scales[i]], mx.block_size, glen, fp8)
        assert t.codes[i].tolist() == c, f"row {i} codes"
        assert t.scales[i].tolist() == g, f"row {i} group bytes"
        assert t.exact[i].tolist() == ex, f"row {i} exact flags"
        tot_inexact += ni
        tot_flushed += nf
    assert (t.n_inexact, t.n_flushed) == (tot_inexact, tot_flushed)
    return t


@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
@pytest.mark.parametrize("group,n", [(32, 96), (64, 200), (128, 256), (128, 300), ("row", 160)])
def test_mxfp4_to_fp8_matches_oracle(fp8, group, n):
    rng = np.random.default_rng(zlib.crc32(f"{fp8}{group}{n}".encode()))
    mx = random_mxfp4(rng, 24, n, base=(0x7F, 0x00, 0x03, 0x06, 0x40, 0xFE, 0xB0),
                      spread=35 if fp8 == "e5m2" else 22)
    t = check_to_fp8(mx, group, fp8)
    if group == 32:                         # one block per group: spread 0, always exact
        assert t.exact.all() and t.n_inexact == 0
    else:                                   # both kinds of group occur
        assert 0 < t.exact.mean() < 1 and t.n_flushed > 0
    # the closed form agrees with the element-by-element check
    assert np.array_equal(F.predict_exact(mx, group=group, fp8=fp8), t.exact)


def test_mxfp4_to_fp8_other_axis_and_3d():
    rng = np.random.default_rng(7)
    mx = random_mxfp4(rng, 12, 256, spread=18)
    ref = F.mxfp4_to_fp8(mx, group=64)
    # the same data with the block axis first, and as a 3-D tensor blocked along axis 1
    mxt = mxref.MXTensor(codes=mx.codes.T.copy(), scales=mx.scales.T.copy(), fmt=mx.fmt,
                         profile=OCP, axis=0, block_size=32)
    t = F.mxfp4_to_fp8(mxt, group=64)
    assert t.axis == 0 and np.array_equal(t.codes, ref.codes.T)
    assert np.array_equal(t.scales, ref.scales.T) and np.array_equal(t.exact, ref.exact.T)
    mx3 = mxref.MXTensor(codes=mx.codes.reshape(3, 4, 256).transpose(0, 2, 1).copy(),
                         scales=mx.scales.reshape(3, 4, 8).transpose(0, 2, 1).copy(),
                         fmt=mx.fmt, profile=OCP, axis=1, block_size=32)
    t3 = F.mxfp4_to_fp8(mx3, group=64)
    assert np.array_equal(t3.codes.transpose(0, 2, 1).reshape(12, 256), ref.codes)
    assert np.array_equal(t3.scales.transpose(0, 2, 1).reshape(12, 4), ref.scales)


def test_exactness_closed_form_over_spreads():
    """Spreads 0..20 x every nonzero E2M1 code x max scale bytes (incl. < k, where G clamps to
    0): the kernel's element-by-element flag == the closed form == the Fraction oracle."""
    for fp8 in ("e4m3", "e5m2"):
        k = F.group_headroom(fp8)
        spreads = range(21) if fp8 == "e4m3" else range(36)
        cases = [(smax, d, q) for smax in (0x7F, 0xFE, 0x20, k, k + 3, 3, 0)
                 for d in spreads for q in range(1, 8) if smax - d >= 0]
        # two blocks of 8 per group (the block size does not enter the condition)
        codes = np.zeros((len(cases), 16), np.uint8)
        scales = np.zeros((len(cases), 2), np.uint8)
        for r, (smax, d, q) in enumerate(cases):
            codes[r, 0] = 7                 # 6.0 at the group's largest scale
            codes[r, 8:] = q                # the probed block, one code class
            codes[r, 9] = q | 8             # and its negative
            scales[r] = (smax, smax - d)
        mx = mxref.MXTensor(codes=codes, scales=scales, fmt=mxref.get_format("mxfp4"),
                            profile=OCP, axis=1, block_size=8)
        t = check_to_fp8(mx, 16, fp8)
        pred = F.predict_exact(mx, group=16, fp8=fp8)[:, 0]
        assert np.array_equal(pred, t.exact[:, 0])
        esub = O.facts(fp8)[1] - O.facts(fp8)[0]
        for r, (smax, d, q) in enumerate(cases):
            nu = int(F.FINEST_BIT[q])
            if smax >= k:    # the spread form of the condition
                assert t.exact[r, 0] == (d <= F.exact_spread_limit(nu, fp8)), (fp8, smax, d, q)
            else:            # G clamps to 0: every value is q * 2^s_b with s_b >= 0
                assert t.exact[r, 0]
            # the limit is the oracle's: q * 2^(k - d) is on the FP8 grid iff its lowest bit is
            assert (k - d + nu >= esub) == (d <= F.exact_spread_limit(nu, fp8))
    # E4M3: every spread <= 14 is exact; 1.0 survives spread 15 but 1.5 (|q| larger) does not,
    # so the smallest |q| is not the statistic: the finest bit is
    assert F.exact_spread_limit(-1) == 14 and F.exact_spread_limit(0) == 15
    assert F.exact_spread_limit(1, "e5m2") == 30 and F.group_headroom("e5m2") == 13


def test_finest_bit_table_is_the_two_adic_valuation():
    vals = {1: Fraction(1, 2), 2: 1, 3: Fraction(3, 2), 4: 2, 5: 3, 6: 4, 7: 6}
    for c, v in vals.items():
        assert O.decode_element(c, "e2m1")[1] == v
        v = Fraction(v)
        nu = int(F.FINEST_BIT[c])
        assert (v / P2(nu)).denominator == 1 and (v / P2(nu)).numerator % 2 == 1


def test_mxfp4_to_fp8_special_groups():
    e2m1 = mxref.get_format("mxfp4")
    codes = np.zeros((4, 128), np.uint8)
    scales = np.zeros((4, 4), np.uint8)
    # row 0: a NaN block inside a live group: NaN codes there, scale from the other blocks
    codes[0, :32] = 7
    codes[0, 64:96] = 0xB                       # -1.5
    scales[0] = (0x80, 0xFF, 0x7E, 0x00)
    # row 1: every block NaN -> group byte 0xFF
    scales[1] = 0xFF
    # row 2: all-zero group with -0 codes and non-canonical nonzero scale bytes -> 0x00, -0 kept
    codes[2, ::2] = 0x8
    scales[2] = (0x00, 0x90, 0xFE, 0x10)
    # row 3: an all-zero block with a huge scale byte does not cost the live blocks headroom
    codes[3, 32:64] = 0x1                       # 0.5
    scales[3] = (0xFE, 0x70, 0x00, 0x00)
    mx = mxref.MXTensor(codes=codes, scales=scales, fmt=e2m1, profile=OCP, axis=1, block_size=32)
    t = check_to_fp8(mx, 128, "e4m3")
    assert t.scales[:, 0].tolist() == [0x80 - 6, 0xFF, 0x00, 0x70 - 6]
    assert (t.codes[0, 32:64] == NAN8).all() and (t.codes[1] == NAN8).all()
    assert (t.codes[2, ::2] == 0x80).all() and (t.codes[2, 1::2] == 0).all()
    assert t.exact.all() and t.n_inexact == 0
    d = t.dequantize()
    assert np.isnan(d[0, 32:64]).all() and np.isnan(d[1]).all()
    assert np.signbit(d[2, ::2]).all() and (d[2] == 0).all()
    assert (d[3, 32:64] == np.float32(2.0 ** -16)).all()   # 0.5 * 2^(0x70 - 127)
    # empty axis: no groups
    empty = mxref.quantize(np.zeros((3, 0), np.float32), "mxfp4")
    te = F.mxfp4_to_fp8(empty, group="row")
    assert te.codes.shape == (3, 0) and te.scales.shape == (3, 0) and te.dequantize().shape == (3, 0)


def test_fp8_dequantize_matches_fraction_decode():
    rng = np.random.default_rng(3)
    for fp8 in ("e4m3", "e5m2"):
        codes = rng.integers(0, 256, (16, 96)).astype(np.uint8)
        scales = rng.choice(np.array([0, 1, 0x50, 0x7F, 0xF0, 0xF8, 0xFE, 0xFF], np.uint8),
                            (16, 1))
        t = F.FP8Tensor(codes=codes, scales=scales, group="row", axis=1, fp8=fp8)
        got = t.dequantize().view(np.uint32)
        for i in range(16):
            for j in range(96):
                exp = O.dequantize_value(int(codes[i, j]), int(scales[i, 0]), fp8)
                if exp == O.NAN32:
                    assert np.isnan(got[i, j:j + 1].view(np.float32)[0])
                else:
                    assert int(got[i, j]) == exp, (fp8, hex(codes[i, j]), scales[i, 0])


def test_exact_conversion_preserves_every_value():
    """Exact groups decode to the same fp32 values as the MXFP4 source, bit for bit."""
    rng = np.random.default_rng(11)
    x = student_t(rng, (64, 512))
    x[3, 5] = np.nan
    mx = mxref.quantize(x, "mxfp4")
    for group in (32, 128, "row"):
        t = F.mxfp4_to_fp8(mx, group=group)
        a, b = t.dequantize(), mx.dequantize()
        glen = 512 if group == "row" else group
        ok = np.repeat(t.exact, glen, axis=1)[:, :512]
        assert ok.mean() > 0.5
        fin = ok & ~np.isnan(b)
        assert np.array_equal(a[fin].view(np.uint32), b[fin].view(np.uint32))
        assert np.isnan(a[np.isnan(b)]).all()


# ---------------------------------------------------------------------------------------------
# FP8 -> MXFP4
# ---------------------------------------------------------------------------------------------
def exhaustive_fp8_rows(fp8, group_bytes, rng):
    """Rows of FP8 codes (one group per row): for every finite magnitude code a, blocks of 32
    led by +-a and holding every code of magnitude <= a (both signs, -0 included); all-zero
    blocks; and blocks holding each NaN / Inf code among random finite codes."""
    nan_mags = {"e4m3": [0x7F], "e5m2": [0x7D, 0x7E, 0x7F]}[fp8]
    inf_mags = {"e4m3": [], "e5m2": [0x7C]}[fp8]
    finite = [m for m in range(0x80) if m not in nan_mags + inf_mags]
    blocks = [[0] * 16 + [0x80] * 16]
    for a in finite[1:]:
        pool = [m | s for m in finite if m <= a for s in (0, 0x80)]
        rng.shuffle(pool)
        for c in range(0, len(pool), 31):
            blocks.append([a | (0x80 * (c // 31 % 2))] + pool[c:c + 31])
    for sp in nan_mags + inf_mags:
        for s in (0, 0x80):
            blocks.append([sp | s] + list(rng.choice(finite, 31) | rng.choice([0, 0x80], 31)))
    flat = [c for b in blocks for c in b]
    codes = np.tile(np.array(flat, np.uint8), (len(group_bytes), 1))
    scales = np.array(group_bytes, np.uint8)[:, None]
    return F.FP8Tensor(codes=codes, scales=scales, group="row", axis=1, fp8=fp8)


GROUP_BYTES = [0x00, 0x01, 0x02, 0x09, 0x40, 0x7F, 0x80, 0xC0, 0xF5, 0xF6, 0xF7, 0xF8, 0xFD,
               0xFE, 0xFF]


def fits_fp32(t):
    """Per row: every finite FP8 value times its group scale is < 2^128 (oracle arithmetic)."""
    maxv = max(v[1] for v in (O.decode_element(c, t.fp8) for c in range(0x80))
               if not isinstance(v, str))
    return [g == 0xFF or maxv * P2(g - 127) < P2(128) for g in map(int, t.scales[:, 0])]


def _free(p):
    return p.replace(name=p.name + "~", formats=None) if p.formats else p


FP8_PROFILES = [mxref.get_profile(p) for p in (
    "ocp", "rceil", "torchao_floor", "torchao_rceil", "torchao_ceil", "torchao_even",
    "microxcaling", "triton_kernels_round_up", "triton_kernels_round_down",
    "triton_kernels_ties_up", "rocm_te_mxfp4")] + [
    OCP.replace(name="x_ties_zero", rounding="ties_zero"),
    OCP.replace(name="x_flush_nz2pos", flush_fp32_subnormals=True,
                signed_zero="input_neg_zero_to_pos"),
    OCP.replace(name="x_never_neg", signed_zero="never_negative"),
    OCP.replace(name="x_ignore_nan", nan_in_block="ignore", inf_in_block="scale_max"),
    OCP.replace(name="x_inf_exponent", inf_in_block="exponent"),
    OCP.replace(name="x_bs16", block_size=16),
    OCP.replace(name="x_even_ovfnan", scale_rule="even", scale_overflow="nan"),
    _free(mxref.get_profile("te_mxfp8")),
]


@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
def test_fp8_to_mxfp4_every_code_every_profile_vs_quantize(fp8):
    """Every FP8 code x group bytes incl. 0x00/0xFE/0xFF, NaN codes and -0: equal to
    quantize(fp8.dequantize()) on every row whose values stay in fp32's range."""
    t = exhaustive_fp8_rows(fp8, GROUP_BYTES, np.random.default_rng(5))
    in_range = np.array(fits_fp32(t))
    assert not in_range.all() and in_range.sum() >= 8
    deq = t.dequantize()[in_range]
    for prof in FP8_PROFILES:
        got = F.fp8_to_mxfp4(F.FP8Tensor(codes=t.codes[in_range], scales=t.scales[in_range],
                                         group="row", axis=1, fp8=fp8), profile=prof)
        exp = mxref.quantize(deq, "mxfp4", prof, axis=1)
        assert got.block_size == exp.block_size
        bad = np.argwhere(got.codes != exp.codes)
        assert np.array_equal(got.scales, exp.scales), prof.name
        assert bad.size == 0, (prof.name, bad[:3], got.codes[tuple(bad[0])], exp.codes[tuple(bad[0])])


@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
@pytest.mark.parametrize("prof", ["ocp", "rceil", "microxcaling", "torchao_ceil",
                                  "x_flush_nz2pos", "x_ignore_nan", "x_inf_exponent"])
def test_fp8_to_mxfp4_every_code_vs_fraction_oracle(fp8, prof):
    """The same sweep against the exact oracle, out-of-fp32 rows (0xF7..0xFE) included."""
    prof = next(p for p in FP8_PROFILES if p.name == prof)
    rng = np.random.default_rng(9)
    rows = [0x00, 0x7F, 0xF7, 0xFE, 0xFF] if prof.name in ("ocp", "rceil") else [0x01, 0xFD]
    t = exhaustive_fp8_rows(fp8, rows, rng)
    keep = np.sort(rng.choice(t.codes.shape[1] // 32, 96, replace=False))
    cols = (keep[:, None] * 32 + np.arange(32)).reshape(-1)
    t = F.FP8Tensor(codes=t.codes[:, cols].copy(), scales=t.scales, group="row", axis=1, fp8=fp8)
    got = F.fp8_to_mxfp4(t, profile=prof)
    es, ec = quantize_exact_rows(fp8_exact_values(t), "e2m1", prof.knobs(), 32)
    assert np.array_equal(got.scales, es)
    assert np.array_equal(got.codes, ec)


def test_fp8_to_mxfp4_group_scales_per_group_and_misaligned_groups():
    """Random group bytes per 128 (and 48: groups straddling MXFP4 blocks), axis 0, ragged."""
    rng = np.random.default_rng(21)
    for group, n, axis in ((128, 512, 1), (48, 200, 1), (128, 300, 0), (64, 130, 0)):
        shape = (n, 10) if axis == 0 else (10, n)
        codes = rng.integers(0, 256, shape).astype(np.uint8)
        gshape = list(shape)
        gshape[axis] = -(-n // group)
        scales = np.clip(0x78 + rng.integers(-12, 12, gshape), 0, 254).astype(np.uint8)
        scales.flat[::7] = rng.choice([0, 0xFF, 0xF0, 1], scales.flat[::7].size)
        t = F.FP8Tensor(codes=codes, scales=scales, group=group, axis=axis)
        deq = t.dequantize()
        assert not np.isinf(deq).any()          # every value in fp32 range (E4M3 has no Inf)
        for prof in ("ocp", "rceil"):
            got = F.fp8_to_mxfp4(t, profile=prof)
            exp = mxref.quantize(deq, "mxfp4", prof, axis=axis)
            assert np.array_equal(got.scales, exp.scales)
            assert np.array_equal(got.codes, exp.codes), (group, axis, prof)


def test_fp8_to_mxfp4_stochastic_matches_quantize():
    rng = np.random.default_rng(4)
    x = student_t(rng, (16, 256))
    t = F.quantize_fp8(x, group=128)
    sr = OCP.replace(name="sr", rounding="stochastic")
    for seed, off in ((1, 0), (7, 99)):
        got = F.fp8_to_mxfp4(t, profile=sr, seed=seed, rng_offset=off)
        exp = mxref.quantize(t.dequantize(), "mxfp4", sr, seed=seed, rng_offset=off)
        assert np.array_equal(got.codes, exp.codes) and np.array_equal(got.scales, exp.scales)
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint32)
    got = F.fp8_to_mxfp4(t, profile=sr, rbits=rb)
    assert np.array_equal(got.codes, mxref.quantize(t.dequantize(), "mxfp4", sr, rbits=rb).codes)


def test_fp8_to_mxfp4_realistic_data_vs_quantize():
    rng = np.random.default_rng(2)
    x = student_t(rng, (128, 1024)) * np.float32(2.0 ** rng.integers(-30, 30, (128, 1)))
    for fp8 in ("e4m3", "e5m2"):
        for group in (128, 32):
            t = F.quantize_fp8(x, group=group, fp8=fp8)
            for prof in ("ocp", "rceil"):
                got = F.fp8_to_mxfp4(t, profile=prof)
                exp = mxref.quantize(t.dequantize(), "mxfp4", prof)
                assert np.array_equal(got.codes, exp.codes) and np.array_equal(got.scales,
                                                                               exp.scales)


def test_torchao_rceil_amax_beyond_fp32_is_refused_not_guessed():
    codes = np.full((1, 32), 0x7E, np.uint8)               # 448
    ok = F.FP8Tensor(codes=codes, scales=np.array([[0xF6]], np.uint8), group="row", axis=1)
    got = F.fp8_to_mxfp4(ok, profile="torchao_rceil")      # 448 * 2^119 < 2^128: defined
    exp = mxref.quantize(ok.dequantize(), "mxfp4", "torchao_rceil")
    assert np.array_equal(got.scales, exp.scales) and np.array_equal(got.codes, exp.codes)
    big = F.FP8Tensor(codes=codes, scales=np.array([[0xF7]], np.uint8), group="row", axis=1)
    with pytest.raises(F.ScaleRangeError, match="2\\^128"):
        F.fp8_to_mxfp4(big, profile="torchao_rceil")
    assert F.fp8_to_mxfp4(big, profile="rceil").scales[0, 0] == 0x7F + (0xF7 - 0x7F) + 7


# ---------------------------------------------------------------------------------------------
# round trip
# ---------------------------------------------------------------------------------------------
def test_round_trip_exact_groups_ocp():
    rng = np.random.default_rng(13)
    x = np.concatenate([rng.standard_normal((32, 1024)), student_t(rng, (32, 1024)) * 100,
                        rng.standard_normal((32, 1024)) * np.float32(2.0 ** -130)]).astype(
        np.float32)
    x[5, 100] = np.nan
    x[6, 3:40] = 0
    x[7, 64:96] = -0.0
    x[8, :32] *= np.float32(2.0 ** 20)
    mx = mxref.quantize(x, "mxfp4")
    all_exact = 0
    for fp8 in ("e4m3", "e5m2"):
        for group in (32, 64, 128, "row"):
            t = F.mxfp4_to_fp8(mx, group=group, fp8=fp8)
            back = F.fp8_to_mxfp4(t)
            if t.exact.all():
                all_exact += 1
                assert same_mx(back, mx) and np.array_equal(back.codes, mx.codes)
            # stronger: every block of an exact group comes back, whatever the other groups do
            glen = 1024 if group == "row" else group
            blk_ok = np.repeat(t.exact, glen // 32, axis=1)[:, :mx.scales.shape[1]]
            assert np.array_equal(back.scales[blk_ok], mx.scales[blk_ok])
            el_ok = np.repeat(blk_ok, 32, axis=1)
            assert np.array_equal(back.codes[el_ok], mx.codes[el_ok])
    assert all_exact >= 1
    # row 8's first block sits 2^20 above the rest: E4M3 groups over it are inexact, and the
    # exact groups of that row still come back (checked above)
    t = F.mxfp4_to_fp8(mx, group=64)
    assert not t.exact[8, 0] and t.exact[8, 1:].all()


def test_round_trip_random_canonical_tensors():
    rng = np.random.default_rng(17)
    for _ in range(4):
        mx = random_mxfp4(rng, 40, 256, base=(0x7F, 0xFE, 0x0E, 0x03), spread=14, canonical=True)
        t = F.mxfp4_to_fp8(mx, group="row")
        assert t.exact.all()                                 # spread <= 14: exact by the bound
        assert same_mx(F.fp8_to_mxfp4(t), mx)


def test_round_trip_rceil_fixed_points_only():
    """rceil re-quantization is idempotent except for blocks whose largest |q| is 3 (their
    exact amax 3 * 2^s gets scale s - 1): the round trip reproduces exactly the other blocks."""
    rng = np.random.default_rng(23)
    x = student_t(rng, (64, 512))
    mx = mxref.quantize(x, "mxfp4", "rceil")
    back = F.fp8_to_mxfp4(F.mxfp4_to_fp8(mx, group=32), profile="rceil")
    qmax = (mx.codes & 7).reshape(64, 16, 32).max(axis=2)
    fixed = qmax != 5                                        # code 5 is 3.0
    assert (~fixed).any() and fixed.any()
    assert np.array_equal(back.scales[fixed], mx.scales[fixed])
    el = np.repeat(fixed, 32, axis=1)
    assert np.array_equal(back.codes[el], mx.codes[el])
    assert (back.scales[~fixed] == mx.scales[~fixed] - 1).all()


# ---------------------------------------------------------------------------------------------
# reblock
# ---------------------------------------------------------------------------------------------
def random_mx(rng, fmt, rows, cols, axis):
    """Random MX tensor of any MX format: random codes (few NaN/Inf), scales incl. 0x00/0xFF."""
    f = mxref.get_format(fmt)
    el = ELEM[fmt]
    shape = (rows, cols)
    n = shape[axis]
    width = f.element.bits
    codes = rng.integers(0, 1 << width, shape)
    special = [c for c in range(1 << width) if isinstance(O.decode_element(c, el), str)]
    if special:
        sp = np.isin(codes, special)
        codes[sp & (rng.random(shape) < 0.97)] = 0
    sshape = list(shape)
    sshape[axis] = -(-n // 32)
    scales = rng.choice(np.array([0x00, 0x01, 0x05, 0x70, 0x7F, 0x80, 0x85, 0xC0, 0xE8, 0xFF]),
                        sshape, p=[.05, .05, .05, .2, .2, .2, .1, .05, .05, .05])
    return mxref.MXTensor(codes=codes.astype(np.uint8), scales=scales.astype(np.uint8),
                          fmt=f, profile=OCP, axis=axis, block_size=32)


def exact_values_2d(mx):
    el = ELEM[mx.fmt.name]
    rows, cols = mx.codes.shape
    out = []
    for i in range(rows):
        out.append([mx_value(int(mx.codes[i, j]),
                             int(mx.scales[i // 32, j] if mx.axis == 0 else mx.scales[i, j // 32]),
                             el) for j in range(cols)])
    return out


@pytest.mark.parametrize("fmt", list(ELEM))
@pytest.mark.parametrize("prof", ["ocp", "rceil"])
def test_reblock_matches_fraction_requantization(fmt, prof):
    rng = np.random.default_rng(len(fmt) * 31 + len(prof))
    prof = mxref.get_profile(prof)
    for src_axis, dst_axis, rows, cols in ((1, 0, 70, 64), (0, 1, 64, 45), (1, 1, 33, 96)):
        mx = random_mx(rng, fmt, rows, cols, src_axis)
        got = F.reblock(mx, axis=dst_axis, profile=prof)
        vals = exact_values_2d(mx)
        if dst_axis == 0:
            vals = [list(c) for c in zip(*vals)]
        es, ec = quantize_exact_rows(vals, ELEM[fmt], prof.knobs(), 32)
        if dst_axis == 0:
            es, ec = es.T, ec.T
        assert got.axis == dst_axis and got.block_size == 32
        assert np.array_equal(got.scales, es), (fmt, src_axis, dst_axis)
        assert np.array_equal(got.codes, ec), (fmt, src_axis, dst_axis)


def test_reblock_nan_block_poisons_every_column_block_it_touches():
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    x[40, 70] = np.nan                                       # row 40, row block 2 (64..95)
    mx = mxref.quantize(x, "mxfp4")
    assert mx.scales[40, 2] == 0xFF
    r = F.reblock(mx, axis=0)
    bad = np.argwhere(r.scales == 0xFF)
    assert sorted(map(tuple, bad.tolist())) == [(1, c) for c in range(64, 96)]
    assert (r.codes[32:64, 64:96] == 0).all()
    ign = OCP.replace(name="ignore", nan_in_block="ignore", inf_in_block="scale_max")
    assert not (F.reblock(mx, axis=0, profile=ign).scales == 0xFF).any()


def test_reblock_same_axis_is_identity_on_ocp_outputs():
    rng = np.random.default_rng(8)
    for fmt in ELEM:
        x = student_t(rng, (48, 160))
        x[0, :32] = 0
        x[1, :32] = -0.0
        mx = mxref.quantize(x, fmt)
        r = F.reblock(mx, axis=1)
        assert np.array_equal(r.scales, mx.scales) and np.array_equal(r.codes, mx.codes), fmt


def test_reblock_decoded_overflow_is_refused_and_edge_accepted():
    codes = np.zeros((32, 32), np.uint8)
    scales = np.full((32, 1), 0x7F, np.uint8)
    codes[3, 4] = 0x3                                        # 1.5
    scales[3, 0] = 0xFE                                      # 1.5 * 2^127 < 2^128: fine
    mx = mxref.MXTensor(codes=codes, scales=scales, fmt=mxref.get_format("mxfp4"), profile=OCP,
                        axis=1, block_size=32)
    r = F.reblock(mx, axis=0)        # column 4: amax 1.5 * 2^127 -> floor scale 2^125, 6.0
    assert r.scales[0, 4] == 0xFC and r.codes[3, 4] == 0x7
    codes[3, 4] = 0x4                                        # 2.0 * 2^127 = 2^128
    with pytest.raises(F.DecodedOverflowError, match=r"element \(3, 4\).*0xfe"):
        F.reblock(mx, axis=0)
    codes[3, 4] = 0x6                                        # 4.0 * 2^126 = 2^128
    scales[3, 0] = 0xFD
    with pytest.raises(F.DecodedOverflowError):
        F.reblock(mx, axis=0)


def test_reblock_stochastic_passes_the_stream_through():
    rng = np.random.default_rng(6)
    mx = mxref.quantize(student_t(rng, (64, 64)), "mxfp4")
    sr = OCP.replace(name="sr", rounding="stochastic")
    got = F.reblock(mx, axis=0, profile=sr, seed=3)
    exp = mxref.quantize(mx.dequantize(), "mxfp4", sr, axis=0, seed=3)
    assert np.array_equal(got.codes, exp.codes)
    with pytest.raises(ProfileConflictError):
        F.reblock(mx, axis=0, profile=sr)


# ---------------------------------------------------------------------------------------------
# reblock_error
# ---------------------------------------------------------------------------------------------
def test_reblock_error_statistics_recomputed_independently():
    rng = np.random.default_rng(12)
    x = student_t(rng, (96, 128))
    st = F.reblock_error(x)
    src = mxref.quantize(x, "mxfp4", axis=1)
    # independent path: decode by the Fraction oracle, requantize along columns with it
    vals = [list(c) for c in zip(*exact_values_2d(src))]
    es, ec = quantize_exact_rows(vals, "e2m1", OCP.knobs(), 32)
    direct = mxref.quantize(x, "mxfp4", axis=0)
    rb = np.array([[float(O.decode_element(int(ec[j, i]), "e2m1")[1]) *
                    (-1) ** O.decode_element(int(ec[j, i]), "e2m1")[0] *
                    2.0 ** (int(es[j, i // 32]) - 127) for j in range(128)] for i in range(96)])
    xd = x.astype(np.float64)
    dd = direct.dequantize().astype(np.float64)
    ds = src.dequantize().astype(np.float64)
    p = np.mean(xd ** 2)
    assert st["mse_reblocked"] == pytest.approx(np.mean((rb - xd) ** 2), rel=1e-12)
    assert st["mse_direct"] == pytest.approx(np.mean((dd - xd) ** 2), rel=1e-12)
    assert st["mse_source"] == pytest.approx(np.mean((ds - xd) ** 2), rel=1e-12)
    assert st["rel_mse_reblocked"] == pytest.approx(np.mean((rb - xd) ** 2) / p, rel=1e-12)
    assert st["mse_added"] == pytest.approx(np.mean((rb - ds) ** 2), rel=1e-12)
    assert st["code_diff_frac"] == pytest.approx(np.mean(ec.T != direct.codes))
    assert st["scale_diff_frac"] == pytest.approx(np.mean(es.T != direct.scales))
    assert 0 < st["code_diff_frac"] < 1 and st["mse_ratio"] > 1
    assert st["n_finite"] == x.size


def test_reblock_error_is_zero_when_source_is_on_both_grids():
    x = np.full((64, 64), 3.0, np.float32)
    x[::2] = -1.5
    st = F.reblock_error(x)
    assert st["mse_reblocked"] == st["mse_direct"] == 0 and st["code_diff_frac"] == 0
    assert st["scale_diff_frac"] == 0


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
X = np.linspace(-4, 4, 64 * 64, dtype=np.float32).reshape(64, 64)
MX4 = mxref.quantize(X, "mxfp4")
T8 = F.mxfp4_to_fp8(MX4, group=64)
# an NVFP4 tensor built by hand (the refusal comes before any kernel; no NVFP4 compile)
NV4 = mxref.MXTensor(codes=MX4.codes, scales=np.zeros((64, 4), np.uint8),
                     fmt=mxref.get_format("nvfp4"), profile=mxref.get_profile("ocp"), axis=1,
                     block_size=16, tensor_scale=np.float32(1.0))


def _bad_fp8(**kw):
    d = {"codes": T8.codes, "scales": T8.scales, "group": 64, "axis": 1, "fp8": "e4m3"}
    d.update(kw)
    return F.FP8Tensor(**d)


@pytest.mark.parametrize("call,err,msg", [
    (lambda: F.mxfp4_to_fp8(mxref.quantize(X, "mxfp8_e4m3")), F.UnsupportedConversionError,
     "MXFP4 input, got mxfp8_e4m3"),
    (lambda: F.mxfp4_to_fp8(NV4), F.UnsupportedConversionError,
     "not defined for NVFP4"),
    (lambda: F.mxfp4_to_fp8(X), F.UnsupportedConversionError, "MXTensor, got ndarray"),
    (lambda: F.mxfp4_to_fp8(MX4, group=48), F.GroupSizeError, "48 is not a multiple of .* 32"),
    (lambda: F.mxfp4_to_fp8(MX4, group=0), F.GroupSizeError, "positive int"),
    (lambda: F.mxfp4_to_fp8(MX4, group=True), F.GroupSizeError, "positive int"),
    (lambda: F.mxfp4_to_fp8(MX4, group="col"), F.GroupSizeError, "'row'"),
    (lambda: F.mxfp4_to_fp8(MX4, fp8="e3m4"), mxref.UnknownFormatError, "e3m4"),
    (lambda: F.mxfp4_to_fp8(mxref.MXTensor(codes=MX4.codes | 0x10, scales=MX4.scales,
                                           fmt=MX4.fmt, profile=OCP, axis=1, block_size=32)),
     F.FP8TensorError, "does not fit e2m1"),
    (lambda: F.mxfp4_to_fp8(mxref.MXTensor(codes=MX4.codes, scales=MX4.scales[:, :1],
                                           fmt=MX4.fmt, profile=OCP, axis=1, block_size=32)),
     F.FP8TensorError, "scales shape"),
    (lambda: F.fp8_to_mxfp4(_bad_fp8(scales=T8.scales[:, :0])), F.FP8TensorError,
     "expected \\(64, 1\\)"),
    (lambda: F.fp8_to_mxfp4(_bad_fp8(codes=T8.codes.astype(np.int16))), F.FP8TensorError,
     "uint8"),
    (lambda: F.fp8_to_mxfp4(_bad_fp8(fp8="e4m3fnuz")), mxref.UnknownFormatError, "e4m3fnuz"),
    (lambda: F.fp8_to_mxfp4(_bad_fp8(axis=2)), mxref.AxisError, "out of range"),
    (lambda: F.fp8_to_mxfp4(_bad_fp8(group=-3)), F.GroupSizeError, "positive"),
    (lambda: F.fp8_to_mxfp4(MX4), F.UnsupportedConversionError, "FP8Tensor, got MXTensor"),
    (lambda: F.fp8_to_mxfp4(T8, profile="te_nvfp4"), ProfileConflictError, "only for nvfp4"),
    (lambda: F.fp8_to_mxfp4(T8, profile="nope"), mxref.UnknownProfileError, "nope"),
    (lambda: F.fp8_to_mxfp4(T8, block_size=24), mxref.BlockSizeError, "block size 24"),
    (lambda: F.fp8_to_mxfp4(T8, seed=1), ProfileConflictError, "rbits/seed"),
    (lambda: F.fp8_to_mxfp4(T8, profile=OCP.replace(name="s", rounding="stochastic")),
     ProfileConflictError, "needs rbits"),
    (lambda: F.fp8_to_mxfp4(T8, profile=OCP.replace(name="s", rounding="stochastic"),
                            rbits=np.zeros(3, np.uint32)), mxref.ShapeError, "rbits"),
    (lambda: F.reblock(mxref.quantize(X[0], "mxfp4")), F.ReblockShapeError, "2-D.*1-D"),
    (lambda: F.reblock(mxref.quantize(X.reshape(4, 16, 64), "mxfp4")), F.ReblockShapeError,
     "3-D"),
    (lambda: F.reblock(MX4, axis=2), mxref.AxisError, "axis 2 is out of range"),
    (lambda: F.reblock(MX4, axis=-3), mxref.AxisError, "out of range"),
    (lambda: F.reblock(NV4), F.UnsupportedConversionError,
     "not defined for NVFP4"),
    (lambda: F.reblock(MX4, profile=OCP.replace(name="b16", block_size=16)),
     ProfileConflictError, "block_size"),
    (lambda: F.reblock_error(X[0]), F.ReblockShapeError, "2-D"),
    (lambda: F.reblock_error(X, "mxfp5"), mxref.UnknownFormatError, "mxfp5"),
    (lambda: F.quantize_fp8(X[:, :48], group="row"), F.GroupSizeError, "power of two"),
    (lambda: F.quantize_fp8(X, group=96), F.GroupSizeError, "power of two"),
])
def test_typed_errors(call, err, msg):
    with pytest.raises(err, match=msg):
        call()
    assert issubclass(err, MXRefError) and issubclass(err, (ValueError, TypeError, KeyError))


# ---------------------------------------------------------------------------------------------
# the checkers can fail
# ---------------------------------------------------------------------------------------------
def test_oracle_comparisons_catch_planted_bugs(monkeypatch):
    rng = np.random.default_rng(19)
    mx = random_mxfp4(rng, 8, 256, spread=20)
    # a kernel with one binade less or more headroom disagrees with the oracle
    for wrong_k in (5, 7):
        monkeypatch.setattr(F, "group_headroom", lambda fp8="e4m3", k=wrong_k: k)
        with pytest.raises(AssertionError):
            check_to_fp8(mx, 128, "e4m3")
    monkeypatch.undo()
    check_to_fp8(mx, 128, "e4m3")
    # a closed form built on the smallest |q| instead of the finest bit is wrong
    bad_nu = np.array([127, -1, 0, 0, 1, 1, 2, 2])          # floor(log2 |q|)
    monkeypatch.setattr(F, "FINEST_BIT", bad_nu)
    cases = np.zeros((1, 64), np.uint8)
    cases[0, 0], cases[0, 32] = 7, 3                          # 6.0 and 1.5 at spread 15
    m = mxref.MXTensor(codes=cases, scales=np.array([[0x80, 0x80 - 15]], np.uint8),
                       fmt=mx.fmt, profile=OCP, axis=1, block_size=32)
    assert F.predict_exact(m, group=64)[0, 0] != F.mxfp4_to_fp8(m, group=64).exact[0, 0]
    monkeypatch.undo()
    assert F.predict_exact(m, group=64)[0, 0] == F.mxfp4_to_fp8(m, group=64).exact[0, 0]
    # the exact requantization oracle tells profiles apart on the exhaustive sweep
    t = exhaustive_fp8_rows("e4m3", [0x7F], np.random.default_rng(0))
    t = F.FP8Tensor(codes=t.codes[:, :3200].copy(), scales=t.scales, group="row", axis=1)
    es, ec = quantize_exact_rows(fp8_exact_values(t), "e2m1", OCP.knobs(), 32)
    wrong = F.fp8_to_mxfp4(t, profile="rceil")
    assert not (np.array_equal(wrong.scales, es) and np.array_equal(wrong.codes, ec))
    # same_mx sees a changed live code
    a = mxref.quantize(X, "mxfp4")
    b = mxref.quantize(X, "mxfp4")
    b.codes[0, 0] ^= 1
    assert same_mx(a, a) and not same_mx(a, b)
