"""Differential tests: mxref (Numba, integer domain) vs tests/oracle.py (Fraction, exact).

The oracle is written from docs/semantics.md only. Where the two disagree, the test fails with
the input bits, the oracle's (expected) and mxref's (actual) bytes.
"""
import os
import sys
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

import mxref  # noqa: E402
from mxref.errors import ProfileConflictError  # noqa: E402

ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2", "mxfp8_e4m3": "e4m3",
        "mxfp8_e5m2": "e5m2", "mxint8": "int8"}
MX_FORMATS = list(ELEM)
ML = {"mxfp4": ml_dtypes.float4_e2m1fn, "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
      "mxfp6_e3m2": ml_dtypes.float6_e3m2fn, "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
      "mxfp8_e5m2": ml_dtypes.float8_e5m2}
ONE_CODE = {"e2m1": 0x2, "e2m3": 0x08, "e3m2": 0x0C, "e4m3": 0x38, "e5m2": 0x3C, "int8": 0x40}

_OCP = mxref.get_profile("ocp")
CUSTOM = [
    _OCP.replace(name="x_ties_zero", rounding="ties_zero"),
    _OCP.replace(name="x_stoch", rounding="stochastic"),
    _OCP.replace(name="x_stoch_rceil16", rounding="stochastic", scale_rule="rceil", block_size=16),
    _OCP.replace(name="x_nonsat", overflow="nonsaturating"),
    _OCP.replace(name="x_nonsat_infmax", overflow="nonsaturating", inf_in_block="scale_max"),
    _OCP.replace(name="x_flush_nz2pos", flush_fp32_subnormals=True,
                 signed_zero="input_neg_zero_to_pos"),
    _OCP.replace(name="x_never_neg_away", signed_zero="never_negative", rounding="ties_away"),
    _OCP.replace(name="x_even_ovfnan", scale_rule="even", scale_overflow="nan"),
    _OCP.replace(name="x_ceil_ovfnan_bs8", scale_rule="ceil", scale_overflow="nan", block_size=8),
    _OCP.replace(name="x_anyup_ignore_flush", scale_rule="rceil", rceil_subnormal="any_up",
                 nan_in_block="ignore", inf_in_block="scale_max", flush_fp32_subnormals=True),
    _OCP.replace(name="x_rd_bs64", scale_rule="round_down", block_size=64),
    _OCP.replace(name="x_rceil_bs2_ovfnan", scale_rule="rceil", block_size=2, scale_overflow="nan"),
]
ALL_PROFILES = list(mxref.PROFILES.values()) + CUSTOM


def _fits(fmt, prof):
    try:
        prof.check_format(mxref.get_format(fmt))
        return True
    except ProfileConflictError:
        return False


def knob_profile(fmt, prof):
    """The profile if it accepts fmt; if it refuses fmt only through its `formats` list (the
    source stack does not define that format), an unrestricted copy with the same knobs (named
    'name~'), so every knob combination is exercised on every format; else None."""
    prof = mxref.get_profile(prof)
    if _fits(fmt, prof):
        return prof
    if getattr(prof, "formats", None) is not None:
        free = prof.replace(name=prof.name + "~", formats=None)
        if _fits(fmt, free):
            return free
    return None


MX_CASES = [(f, knob_profile(f, p)) for f in MX_FORMATS for p in ALL_PROFILES
            if knob_profile(f, p) is not None]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def run_mx(bits2, fmt, prof, rbits2=None, block_size=None):
    return mxref.quantize(np.ascontiguousarray(bits2, dtype=np.uint32).view(np.float32), fmt,
                          prof, rbits=rbits2, block_size=block_size)


def oracle_rows(bits2, fmt, knobs, bs, rbits2=None):
    rows, n = bits2.shape
    nblk = -(-n // bs)
    scales = np.zeros((rows, nblk), np.uint8)
    codes = np.zeros((rows, n), np.uint8)
    for i in range(rows):
        row = [int(x) for x in bits2[i]]
        for j in range(nblk):
            sl = slice(j * bs, min(n, (j + 1) * bs))
            rb = None if rbits2 is None else [int(r) for r in rbits2[i, sl]]
            scales[i, j], codes[i, sl] = O.quantize_block(row[sl], ELEM[fmt], knobs, rb)
    return scales, codes


def mx_mismatches(bits2, bs, exp_s, exp_c, got_s, got_c, limit=5):
    """Descriptions of differing scales, and codes of blocks the oracle does not poison."""
    out = []
    for i, j in np.argwhere(exp_s != got_s)[:limit]:
        blk = bits2[i, j * bs:(j + 1) * bs]
        out.append(f"scale row {i} block {j}: expected {int(exp_s[i, j]):#04x} got "
                   f"{int(got_s[i, j]):#04x}; block fp32 bits {[hex(int(b)) for b in blk]}")
    live = np.repeat(exp_s != 0xFF, bs, axis=1)[:, :bits2.shape[1]]
    for i, k in np.argwhere((exp_c != got_c) & live)[:limit]:
        j = k // bs
        out.append(f"code row {i} elem {k}: input {int(bits2[i, k]):#010x} "
                   f"(={bits2[i, k:k + 1].view(np.float32)[0]!r}) scale {int(exp_s[i, j]):#04x}: "
                   f"expected {int(exp_c[i, k]):#04x} got {int(got_c[i, k]):#04x}; block amax "
                   f"bits {int((bits2[i, j * bs:(j + 1) * bs] & 0x7FFFFFFF).max()):#010x}")
    return out


def check_mx(bits2, fmt, prof, rbits2=None, block_size=None):
    prof = mxref.get_profile(prof)
    r = run_mx(bits2, fmt, prof, rbits2, block_size)
    exp_s, exp_c = oracle_rows(bits2, fmt, prof.knobs(), r.block_size, rbits2)
    bad = mx_mismatches(bits2, r.block_size, exp_s, exp_c, r.scales, r.codes)
    assert not bad, f"{fmt}/{prof.name}:\n" + "\n".join(bad)


def weighted_bits(rng, rows, n):
    """TestFloat-like fp32 patterns: per-row base exponent (boundaries favoured), elements a
    few binades below it, mantissas all-zero / all-ones / ties / near-ties / random, and a
    sprinkle of NaN, Inf, zeros and fp32 subnormals."""
    bounds = np.array([0, 1, 2, 3, 10, 20, 100, 120, 126, 127, 128, 129, 130, 150, 200, 250,
                       252, 253, 254])
    base = np.where(rng.random((rows, 1)) < 0.4, rng.choice(bounds, (rows, 1)),
                    rng.integers(1, 255, (rows, 1)))
    exp = np.clip(base - (rng.geometric(0.35, (rows, n)) - 1), 0, 254)
    kind = rng.integers(0, 6, (rows, n))
    tiepos = rng.integers(11, 23, (rows, n))  # a tie at mantissa bit tiepos-1 (element LSB+1)
    rnd = rng.integers(0, 1 << 23, (rows, n))
    hi = (rnd >> tiepos) << tiepos
    tie = hi | (1 << (tiepos - 1))
    mant = np.select([kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
                     [0, 0x7FFFFF, tie, tie + rng.choice([-1, 1], (rows, n)), hi], rnd)
    mant = np.clip(mant, 0, 0x7FFFFF)
    bits = (rng.integers(0, 2, (rows, n)) << 31) | (exp << 23) | mant
    u = rng.random((rows, n))
    bits = np.where(u < 0.006, 0x7F800000 | rng.integers(1, 1 << 23, (rows, n)), bits)  # NaN
    bits = np.where((u >= 0.006) & (u < 0.012), 0x7F800000, bits)                      # Inf
    bits = np.where((u >= 0.012) & (u < 0.04), 0, bits)                                  # zero
    bits = np.where((u >= 0.04) & (u < 0.06), rng.integers(1, 1 << 23, (rows, n)), bits)
    sign = rng.integers(0, 2, (rows, n)) << 31
    return (bits.astype(np.int64) & 0x7FFFFFFF | sign).astype(np.uint32)


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ---------------------------------------------------------------------------------------------
# exhaustive element test (every fp16 and bf16 pattern, at every relative binade)
# ---------------------------------------------------------------------------------------------
def source_patterns(dtype):
    p = np.arange(65536, dtype=np.uint32)
    if dtype == "float16":
        return p.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    return p << np.uint32(16)


def n_offsets(fmt):
    """Relative binades an element can take below the anchor: max binade down to underflow."""
    el = ELEM[fmt]
    mb, emin, emax = O.facts(el)[:3]
    lowest = -6 if el == "int8" else emin - mb
    return emax - lowest + 4


def exhaustive_blocks(src, K, passes):
    """[anchor, 31 patterns] blocks. Patterns are grouped by fp32 binade (NaN and Inf apart);
    a group with binade B gets an anchor in binade B + k, k cycling over K offsets between
    passes, so each pattern is rounded at known scales from the max binade to underflow. The
    anchor's mantissa alternates between all ones (amax = anchor) and zero."""
    mag = src & 0x7FFFFFFF
    grp = np.where(mag > 0x7F800000, 256, np.where(mag == 0x7F800000, 257, mag >> 23))
    step = max(1, K // passes)
    out = []
    for p in range(passes):
        for gi, g in enumerate(np.unique(grp)):
            members = src[grp == g]
            binade = 0 if g >= 255 else max(int(g), 1) - 127
            k = (gi + p * step) % K
            a = int(np.clip(binade + k, -126, 127))
            anchor = (a + 127) << 23 | (0x7FFFFF if p % 2 == 0 else 0) | (p % 4 >= 2) << 31
            nb = -(-len(members) // 31)
            blk = np.zeros((nb, 32), np.uint32)
            blk[:, 0] = anchor
            flat = np.zeros(nb * 31, np.uint32)
            flat[:len(members)] = members
            blk[:, 1:] = flat.reshape(nb, 31)
            out.append(blk)
    return np.concatenate(out)


_ELEM_MEMO = {}


def oracle_fast(bits2, fmt, knobs):
    """Oracle result for many blocks at once: scales from oracle.block_scale on a representative
    block (same amax / NaN / Inf), elements from oracle.round_to_element memoized on the exact
    relative value |x| / 2^s (keyed by sign, odd significand, exponent)."""
    el = ELEM[fmt]
    mag = (bits2 & 0x7FFFFFFF).astype(np.int64)
    isnan, isinf = mag > 0x7F800000, mag == 0x7F800000
    amax = np.where(isnan | isinf, 0, mag).max(axis=1)
    bkey = amax | isnan.any(1).astype(np.int64) << 32 | isinf.any(1).astype(np.int64) << 33
    ukeys, inv = np.unique(bkey, return_inverse=True)
    uscale = [O.block_scale([int(k) & 0xFFFFFFFF] + [0x7FC00000] * (int(k) >> 32 & 1)
                            + [0x7F800000] * (int(k) >> 33 & 1), el, knobs) for k in ukeys]
    scales = np.array(uscale, np.uint8)[inv.reshape(-1)]
    s = np.where(scales == 0, knobs.get("zero_scale_elem_exp", -127),
                 scales.astype(np.int64) - 127)[:, None]
    sign = (bits2 >> 31).astype(np.int64)
    expf = mag >> 23
    man = mag & 0x7FFFFF
    m24 = np.where(expf > 0, man | 1 << 23, man)
    zero = (m24 == 0) | (knobs["flush_fp32_subnormals"] & (expf == 0))
    cls = np.select([isnan, isinf, zero], [2, 3, 1], 0)
    m24 = np.where(cls == 0, m24, 1)
    low = m24 & -m24
    tz = np.log2(low.astype(np.float64)).astype(np.int64)  # exact: low is a power of two
    rel = np.where(expf > 0, expf, 1) - 150 + tz - s
    key = np.where(cls == 0, (rel + 4096) << 24 | (m24 >> tz), 0) | cls << 40 | sign << 39
    live = np.broadcast_to((scales != 0xFF)[:, None], key.shape)
    ek, einv = np.unique(key[live], return_inverse=True)
    memo_id = (el, knobs["rounding"], knobs["overflow"], knobs["signed_zero"],
               knobs.get("int8_min", "symmetric"))
    ucodes = []
    for k in ek.tolist():
        mk = memo_id + (k,)
        if mk not in _ELEM_MEMO:
            c, sg = k >> 40, k >> 39 & 1
            if c == 0:
                mag_rel = Fraction(k & 0xFFFFFF) * O.pow2((k >> 24 & 0x7FFF) - 4096)
                _ELEM_MEMO[mk] = O.round_to_element(sg, mag_rel, el, *memo_id[1:4], False,
                                                    None, memo_id[4])
            elif c == 1:
                _ELEM_MEMO[mk] = O.round_to_element(sg, Fraction(0), el, *memo_id[1:4], True,
                                                    None, memo_id[4])
            else:
                rep = sg << 31 | (0x7FC00000 if c == 2 else 0x7F800000)
                _ELEM_MEMO[mk] = O.element_code(rep, 0, el, knobs)
        ucodes.append(_ELEM_MEMO[mk])
    codes = np.zeros(bits2.shape, np.uint8)
    codes[live] = np.array(ucodes, np.uint8)[einv.reshape(-1)]
    return scales[:, None], codes


EXH_PROFILES = ["ocp", "rceil", "microxcaling", "torchao_ceil", "torchao_even",
                "triton_kernels_round_down", "triton_kernels_round_up", "te_mxfp8"]


def _exhaustive(fmt, profile, dtype, passes):
    prof = knob_profile(fmt, profile)
    if prof is None:
        pytest.skip(f"{profile} refuses {fmt}")
    K = n_offsets(fmt)
    bits2 = exhaustive_blocks(source_patterns(dtype), K, min(passes, K))
    r = run_mx(bits2, fmt, prof)
    exp_s, exp_c = oracle_fast(bits2, fmt, prof.knobs())
    bad = mx_mismatches(bits2, 32, exp_s, exp_c, r.scales, r.codes)
    assert not bad, f"{fmt}/{profile}/{dtype}:\n" + "\n".join(bad)
    # the vectorized oracle must agree with the plain per-block oracle
    rng = np.random.default_rng(len(bits2))
    pick = rng.choice(len(bits2), 24, replace=False)
    s2, c2 = oracle_rows(bits2[pick], fmt, prof.knobs(), 32)
    assert not mx_mismatches(bits2[pick], 32, s2, c2, exp_s[pick], exp_c[pick])
    return bits2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("profile", EXH_PROFILES)
def test_exhaustive_elements(profile, fmt, dtype):
    """Every fp16 / bf16 pattern, each at >= 2 relative scales (~all offsets over the set)."""
    _exhaustive(fmt, profile, dtype, passes=2)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("profile", ["ocp", "microxcaling", "rceil"])
def test_exhaustive_elements_all_offsets(profile, fmt, dtype):
    """Every fp16 / bf16 pattern at every relative binade of the element format."""
    _exhaustive(fmt, profile, dtype, passes=10 ** 6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_exhaustive_16bit_input_path(dtype):
    """Passing fp16 / bf16 arrays is the same as passing their exact fp32 widening."""
    name = "float16" if dtype == np.float16 else "bfloat16"
    src16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(dtype).reshape(-1, 32)
    src32 = source_patterns(name).reshape(-1, 32).view(np.float32)
    for prof in ("ocp", "te_mxfp8"):
        a, b = mxref.quantize(src16, "mxfp8_e4m3", prof), mxref.quantize(src32, "mxfp8_e4m3", prof)
        assert np.array_equal(a.scales, b.scales) and np.array_equal(a.codes, b.codes)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", list(ML))
def test_elements_vs_ml_dtypes(fmt, dtype):
    """At scale 2^0 (anchor = max normal), ocp codes equal ml_dtypes' RNE casts for every
    finite fp16 / bf16 value with |v| <= max normal."""
    mx = float(O.facts(ELEM[fmt])[3])
    src = source_patterns(dtype)
    v = src.view(np.float32)
    keep = src[np.isfinite(v) & (np.abs(v) <= mx)]
    nb = -(-len(keep) // 31)
    flat = np.zeros(nb * 31, np.uint32)
    flat[:len(keep)] = keep
    bits2 = np.zeros((nb, 32), np.uint32)
    bits2[:, 0] = f32_bits(mx)
    bits2[:, 1:] = flat.reshape(nb, 31)
    r = run_mx(bits2, fmt, "ocp")
    assert (r.scales == 127).all()
    want = bits2.view(np.float32).astype(ML[fmt]).view(np.uint8)
    bad = np.argwhere(want != r.codes)
    assert not bad.size, [(hex(int(bits2[i, j])), hex(int(want[i, j])), hex(int(r.codes[i, j])))
                          for i, j in bad[:5]]


# ---------------------------------------------------------------------------------------------
# decode: E8M0 bytes, every element code
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_e8m0_all_bytes(fmt):
    scales = np.arange(256, dtype=np.uint8).reshape(256, 1)
    codes = np.full((256, 1), ONE_CODE[ELEM[fmt]], np.uint8)
    got = mxref.dequantize(codes=codes, scales=scales, fmt=fmt).view(np.uint32).reshape(-1)
    want = np.array([0x00400000] + [b << 23 for b in range(1, 255)], np.uint32)
    assert np.array_equal(got[:255], want), [hex(int(x)) for x in got[:3]]
    assert np.isnan(got[255:].view(np.float32)).all()
    assert [O.dequantize_value(ONE_CODE[ELEM[fmt]], b, ELEM[fmt]) for b in range(255)] \
        == want.tolist()


def _bits_equal_nan_aware(got, want):
    got, want = np.asarray(got, np.uint32), np.asarray(want, np.uint32)
    nan_g, nan_w = np.isnan(got.view(np.float32)), np.isnan(want.view(np.float32))
    return (nan_g == nan_w) & ((got == want) | nan_w)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_decode_every_code(fmt):
    el = ELEM[fmt]
    width = O.facts(el)[7]
    codes = np.arange(1 << width, dtype=np.uint8).reshape(-1, 1)
    got = mxref.dequantize(codes=codes, scales=np.full(codes.shape, 127, np.uint8), fmt=fmt)
    want = [O.dequantize_value(c, 127, el) for c in range(1 << width)]
    ok = _bits_equal_nan_aware(got.view(np.uint32).reshape(-1), want)
    assert ok.all(), [(c, hex(want[c]), hex(int(got.view(np.uint32)[c, 0])))
                      for c in np.flatnonzero(~ok)[:5]]


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_dequantize_random(fmt):
    el = ELEM[fmt]
    rng = np.random.default_rng(7)
    width = O.facts(el)[7]
    codes = rng.integers(0, 1 << width, (64, 64)).astype(np.uint8)
    scales = rng.choice(np.r_[0:6, 100:160, 250:256, rng.integers(0, 256, 20)], (64, 2))
    scales = scales.astype(np.uint8)
    got = mxref.dequantize(codes=codes, scales=scales, fmt=fmt).view(np.uint32)
    want = np.array([[O.dequantize_value(int(codes[i, j]), int(scales[i, j // 32]), el)
                      for j in range(64)] for i in range(64)], np.uint32)
    ok = _bits_equal_nan_aware(got, want)
    assert ok.all(), [(int(codes[i, j]), int(scales[i, j // 32]), hex(int(want[i, j])),
                       hex(int(got[i, j]))) for i, j in np.argwhere(~ok)[:5]]


# ---------------------------------------------------------------------------------------------
# random blocks: every MX format x every profile (named + custom knob mixes)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt,prof", MX_CASES, ids=[f"{f}-{p.name}" for f, p in MX_CASES])
def test_random_blocks(fmt, prof):
    seed = zlib.crc32(f"{fmt}/{prof.name}".encode())
    rng = np.random.default_rng(seed)
    bs = prof.block_size or 32
    n = bs * max(1, 64 // bs) + (bs // 2 if prof.name.startswith("x_") else 0)  # ragged too
    bits2 = weighted_bits(rng, max(2, 1536 // n), n)
    rb = None
    if prof.rounding == "stochastic":
        rb = rng.integers(0, 2 ** 32, bits2.shape, dtype=np.uint64).astype(np.uint32)
        rb[:, ::3] = rng.choice(np.array([0, 1, 2 ** 31, 2 ** 32 - 1], np.uint32),
                                rb[:, ::3].shape)
    check_mx(bits2, fmt, prof, rb)


SCALE_PROFILES = ["ocp", "rceil", "torchao_ceil", "torchao_even", "triton_kernels_round_down",
                  "triton_kernels_round_up", "microxcaling", "x_flush_nz2pos"]
# mantissas at every rule's threshold (M_elem, 2 - 2^-(mbits+1), 1, 2-ulp) and one ulp either side
_EDGE_MANT = sorted({m + d for m in (0, 0x400000, 0x700000, 0x600000, 0x7E0000, 0x780000,
                                     0x7F0000, 0x7FFFFF) for d in (-1, 0, 1)} & set(range(1 << 23)))


def scale_edge_bits(fields):
    amax = [f << 23 | m for f in fields for m in _EDGE_MANT if f or m]
    amax += list(range(1, 200)) + [k * 2 ** j + d for k in (3, 15, 7, 127) for j in range(1, 16)
                                   for d in (-1, 0, 1)]  # tiny amax / max_normal near 2^-150
    a = np.array(sorted(set(amax)), np.uint32)
    return np.concatenate([a, a | np.uint32(0x80000000)]).reshape(-1, 1)


def _scale_edges(fmt, profile, fields):
    prof = knob_profile(fmt, next(p for p in ALL_PROFILES if p.name == profile))
    bits2 = scale_edge_bits(fields)
    r = run_mx(bits2, fmt, prof)
    exp_s, exp_c = oracle_fast(bits2, fmt, prof.knobs())
    bad = mx_mismatches(bits2, 1, exp_s, exp_c, r.scales, r.codes)
    assert not bad, f"{fmt}/{prof.name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("profile", SCALE_PROFILES)
def test_scale_rule_edges(profile, fmt):
    """Single-element blocks whose amax sits on (or one ulp off) each scale rule's threshold,
    in the lowest, middle and highest binades (subnormal amax, any_up, clamps, overflow)."""
    _scale_edges(fmt, profile, list(range(0, 12)) + list(range(120, 135)) + list(range(243, 255)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("profile", SCALE_PROFILES)
def test_scale_rule_edges_all_binades(profile, fmt):
    _scale_edges(fmt, profile, list(range(255)))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_float64_input_rne():
    """from_float64='rne' rounds once to fp32 (oracle: exact Fraction rounding)."""
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.normal(size=200) * 2.0 ** rng.integers(-160, 130, 200),
                        [2.0 ** -150, 2.0 ** -150 * 1.0000001, 3 * 2.0 ** -151, 2.0 ** 128,
                         2.0 ** 128 - 2.0 ** 103, 2.0 ** 128 - 2.0 ** 104, -0.0, 1 + 2.0 ** -24,
                         1 + 3 * 2.0 ** -24, np.inf, np.nan]])
    x = np.resize(x, (7, 32))
    want = np.array([[O.value_to_fp32_bits(int(np.signbit(v)), abs(Fraction(v)))
                      if np.isfinite(v) else int(np.float32(v).view(np.uint32)) for v in row]
                     for row in x], np.uint32)
    for fmt, prof in (("mxfp8_e4m3", "ocp"), ("mxint8", "rceil")):
        a = mxref.quantize(x, fmt, prof, from_float64="rne")
        b = run_mx(want, fmt, prof)
        assert np.array_equal(a.scales, b.scales) and np.array_equal(a.codes, b.codes), fmt


def test_documented_poison_codes():
    """Poisoned blocks write the format's NaN code (FP8) or 0 (doc step 2)."""
    bits2 = np.zeros((1, 32), np.uint32)
    bits2[0, :5] = f32_bits([1.0, -2.0, 0.0, 3.5, np.nan])
    for fmt in MX_FORMATS:
        r = run_mx(bits2, fmt, "ocp")
        assert r.scales[0, 0] == 0xFF and (r.codes == O.nan_or_zero(ELEM[fmt])).all(), fmt


def test_stochastic_seed_stream():
    """seed= gives the documented stream (random_bits in C order, moved with the block axis)."""
    rng = np.random.default_rng(3)
    bits = weighted_bits(rng, 6, 96).reshape(2, 3, 96).transpose(0, 2, 1).copy()
    prof = _OCP.replace(name="st", rounding="stochastic")
    r = mxref.quantize(bits.view(np.float32), "mxfp4", prof, axis=1, seed=1234, rng_offset=77)
    rb = mxref.random_bits(bits.shape, 1234, 77)
    b2 = np.moveaxis(bits, 1, -1).reshape(-1, 96)
    s, c = oracle_rows(b2, "mxfp4", prof.knobs(), 32, np.moveaxis(rb, 1, -1).reshape(-1, 96))
    got_c = np.moveaxis(r.codes, 1, -1).reshape(-1, 96)
    got_s = np.moveaxis(r.scales, 1, -1).reshape(-1, 3)
    assert not mx_mismatches(b2, 32, s, c, got_s, got_c)


def test_stochastic_fraction_truncation():
    """The 32-bit fraction is truncated, not rounded: x = (2^24-1) 2^-40 at FP4 scale 2^0 has
    n = x / 0.5 with frac * 2^32 = 131071.99..., so f = 131071 and r = 2^32 - 131072 rounds
    down while r = 2^32 - 131071 rounds up (hand-derived, checked on both sides)."""
    prof = _OCP.replace(name="st", rounding="stochastic")
    bits2 = np.zeros((2, 32), np.uint32)
    bits2[:, 0] = f32_bits(6.0)
    bits2[:, 1] = (110 << 23) | 0x7FFFFF
    rb = np.zeros((2, 32), np.uint32)
    rb[0, 1], rb[1, 1] = 2 ** 32 - 131072, 2 ** 32 - 131071
    r = run_mx(bits2, "mxfp4", prof, rb)
    s, c = oracle_rows(bits2, "mxfp4", prof.knobs(), 32, rb)
    assert c[:, 1].tolist() == [0x0, 0x1] and (s == 127).all()
    assert r.codes[:, 1].tolist() == [0x0, 0x1] and (r.scales == 127).all()


def test_random_bits_is_philox():
    """random_bits vs an independent Philox4x32-10 (checked on Random123's known answers).
    Counter word 0 is 32 bits wide: offsets wrap modulo 2^32."""
    assert O.philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C,
                                                     0x9B00DBD8)
    assert O.philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
                          (0xA4093822, 0x299F31D0)) == (0xD16CFE09, 0x94FDCCEB, 0x5001E420,
                                                        0x24126EA1)
    for seed, off in ((0, 0), (1234, 77), (2 ** 40 + 5, 2 ** 33)):
        got = mxref.random_bits((4, 5), seed, off).reshape(-1)
        want = [O.philox4x32_10(((off + i) & 0xFFFFFFFF, 0, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))[0]
                for i in range(20)]
        assert got.tolist() == want, (seed, off)


# ---------------------------------------------------------------------------------------------
# hypothesis: random bit patterns, shapes, axes, ragged lengths, block sizes
# ---------------------------------------------------------------------------------------------
SPECIAL = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x7F800001, 1,
           0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x3F800000, 0x40C00000, 0x3E800000, 0x43E00000,
           0x47600000, 0x3FF80000, 0x40E00000, 0x3FFC0000, 0x40F00000, 0x41E00000, 0x3FE00000]
word = st.one_of(st.integers(0, 2 ** 32 - 1), st.sampled_from(SPECIAL),
                 st.builds(lambda s, e, m: s << 31 | e << 23 | m, st.integers(0, 1),
                           st.integers(110, 140), st.sampled_from([0, 0x7FFFFF, 0x400000,
                                                                   0x200000, 0x600000, 0x100000,
                                                                   0x080000, 0x7C0000])))


@st.composite
def mx_case(draw):
    fmt = draw(st.sampled_from(MX_FORMATS))
    prof = draw(st.sampled_from([p for f, p in MX_CASES if f == fmt]))
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 3)) for _ in range(ndim)]
    axis = draw(st.integers(-ndim, ndim - 1))
    shape[axis] = draw(st.integers(1, 80))
    bs = prof.block_size or draw(st.sampled_from([2, 4, 16, 32, 32, 32, 64]))
    size = int(np.prod(shape))
    base = draw(st.integers(0, 255))  # correlated exponents half the time
    words = draw(st.lists(word, min_size=size, max_size=size))
    if draw(st.booleans()):
        words = [w & 0x807FFFFF | min(254, max(0, base - ((w >> 23) & 7))) << 23
                 if (w >> 23 & 0xFF) != 0xFF else w for w in words]
    rb = None
    if prof.rounding == "stochastic":
        rb = np.array(draw(st.lists(st.one_of(st.integers(0, 2 ** 32 - 1),
                                              st.sampled_from([0, 2 ** 31, 2 ** 32 - 1])),
                                    min_size=size, max_size=size)), np.uint32).reshape(shape)
    return fmt, prof, np.array(words, np.uint32).reshape(shape), axis, bs, rb


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(mx_case())
def test_hypothesis_structures(case):
    fmt, prof, bits, axis, bs, rb = case
    if prof.block_size:
        r = mxref.quantize(bits.view(np.float32), fmt, prof, axis=axis, rbits=rb)
    else:
        r = mxref.quantize(bits.view(np.float32), fmt, prof, axis=axis, block_size=bs, rbits=rb)
    assert r.codes.shape == bits.shape and r.block_size == bs
    n = bits.shape[axis]
    b2 = np.moveaxis(bits, axis, -1).reshape(-1, n)
    rb2 = None if rb is None else np.moveaxis(rb, axis, -1).reshape(-1, n)
    s, c = oracle_rows(b2, fmt, prof.knobs(), bs, rb2)
    got_c = np.moveaxis(r.codes, axis, -1).reshape(-1, n)
    got_s = np.moveaxis(r.scales, axis, -1).reshape(-1, s.shape[1])
    bad = mx_mismatches(b2, bs, s, c, got_s, got_c)
    assert not bad, f"{fmt}/{prof.name} axis={axis} bs={bs}:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# NVFP4, exact order
# ---------------------------------------------------------------------------------------------
NV_PROFILES = [
    _OCP,
    _OCP.replace(name="nv_tiny_never_neg", nvfp4_scale_min="tiny", signed_zero="never_negative"),
    _OCP.replace(name="nv_single_level", nvfp4_tensor_scale=False),
    _OCP.replace(name="nv_flush_away", flush_fp32_subnormals=True, rounding="ties_away",
                 signed_zero="input_neg_zero_to_pos"),
    _OCP.replace(name="nv_stoch", rounding="stochastic"),
]


def _nv_check(bits2, prof, global_amax=None, rb=None):
    r = mxref.quantize(bits2.view(np.float32), "nvfp4", prof, global_amax=global_amax, rbits=rb)
    gb = None if global_amax is None else int(f32_bits(global_amax))
    rows = [[int(x) for x in row] for row in bits2]
    rbl = None if rb is None else [[int(x) for x in row] for row in rb]
    t, s, c = O.quantize_nvfp4_exact(rows, prof.knobs(), gb, 16, rbl)
    assert int(np.float32(r.tensor_scale).view(np.uint32)) == t, \
        (prof.name, hex(t), hex(int(np.float32(r.tensor_scale).view(np.uint32))))
    s, c = np.array(s, np.uint8), np.array(c, np.uint8)
    bad = mx_mismatches(bits2, 16, s, c, r.scales, r.codes)
    bad += [f"poisoned block code row {i} elem {k}: expected 0 got {int(r.codes[i, k]):#x}"
            for i, k in np.argwhere((np.repeat(s == 0x7F, 16, 1)[:, :bits2.shape[1]])
                                    & (r.codes != 0))[:3]]
    assert not bad, f"nvfp4/{prof.name} T={t:#x}:\n" + "\n".join(bad)
    deq = mxref.dequantize(r).view(np.uint32)
    want = np.array([[O.dequantize_nvfp4_value(int(c[i, k]), int(s[i, k // 16]), t)
                      for k in range(c.shape[1])] for i in range(c.shape[0])], np.uint32)
    ok = _bits_equal_nan_aware(deq, want)
    assert ok.all(), [(i, k, hex(int(want[i, k])), hex(int(deq[i, k])))
                      for i, k in np.argwhere(~ok)[:5]]


@pytest.mark.parametrize("prof", NV_PROFILES, ids=[p.name for p in NV_PROFILES])
def test_nvfp4_exact(prof):
    rng = np.random.default_rng(11)
    for trial in range(10):
        n = 64 if trial % 3 else 40  # ragged last block too
        bits2 = weighted_bits(rng, 3, n)
        if trial < 4:  # a tensor without specials so no block is poisoned
            bits2 = np.where((bits2 & 0x7F800000) == 0x7F800000, bits2 & 0x807FFFFF, bits2)
        bits2 = bits2.astype(np.uint32)
        rb = rng.integers(0, 2 ** 32, bits2.shape, dtype=np.uint64).astype(np.uint32) \
            if prof.rounding == "stochastic" else None
        _nv_check(bits2, prof, rb=rb)
    for ga in (np.float32(1e-30), np.float32(3.0), np.float32(2.0 ** 100), np.float32(0.0)):
        bits2 = f32_bits(rng.normal(size=(2, 32)) * 4).copy()
        rb = rng.integers(0, 2 ** 32, bits2.shape, dtype=np.uint64).astype(np.uint32) \
            if prof.rounding == "stochastic" else None
        _nv_check(bits2, prof, global_amax=ga, rb=rb)


def test_nvfp4_exact_vectors():
    """Tensor-scale corner cases: all-zero tensor (T = 1) and underflowing T (2^-149)."""
    _nv_check(np.zeros((1, 16), np.uint32) | np.uint32(0x80000000), _OCP)
    tiny = np.array([[1, 0x80000003, 2, 0] + [0] * 12], np.uint32)
    _nv_check(tiny, _OCP)
    _nv_check(f32_bits([[29.5, 11.0625] + [0.5] * 14]).copy(), _OCP)


# ---------------------------------------------------------------------------------------------
# planted bugs: the comparison machinery must be able to fail
# ---------------------------------------------------------------------------------------------
TIES = [6.0, 0.25, 1.25, 2.5, 5.0, -0.25, -1.25, -2.5, -5.0]


def test_planted_ties_away_vs_ocp():
    bits2 = np.zeros((1, 32), np.uint32)
    bits2[0, :len(TIES)] = f32_bits(TIES)
    r = run_mx(bits2, "mxfp4", "ocp")
    s_rne, c_rne = oracle_rows(bits2, "mxfp4", _OCP.knobs(), 32)
    s_aw, c_aw = oracle_rows(bits2, "mxfp4", mxref.get_profile("microxcaling").knobs(), 32)
    assert r.scales[0, 0] == 127 and not mx_mismatches(bits2, 32, s_rne, c_rne, r.scales, r.codes)
    bad = mx_mismatches(bits2, 32, s_aw, c_aw, r.scales, r.codes, limit=99)
    assert len(bad) == 8, bad  # every tie except the anchor 6.0
    assert c_rne[0, 1:5].tolist() == [0x0, 0x2, 0x4, 0x6]   # 0, 1, 2, 4
    assert c_aw[0, 1:5].tolist() == [0x1, 0x3, 0x5, 0x7]    # 0.5, 1.5, 3, 6


def test_planted_oracle_rounding_bug(monkeypatch):
    """A wrong oracle (ties away inside 'rne') is caught by the exhaustive comparison."""
    real = O.round_int
    monkeypatch.setattr(O, "round_int", lambda x, rounding, rbits=None:
                        real(x, "ties_away" if rounding == "rne" else rounding, rbits))
    _ELEM_MEMO.clear()
    try:
        with pytest.raises(AssertionError, match="expected"):
            _exhaustive("mxfp4", "ocp", "bfloat16", passes=1)
    finally:
        _ELEM_MEMO.clear()


def test_planted_scale_and_code_bugs():
    rng = np.random.default_rng(5)
    bits2 = weighted_bits(rng, 40, 32)
    r = run_mx(bits2, "mxfp8_e4m3", "ocp")
    s, c = oracle_rows(bits2, "mxfp8_e4m3", mxref.get_profile("rceil").knobs(), 32)
    assert any(x.startswith("scale") for x in mx_mismatches(bits2, 32, s, c, r.scales, r.codes))
    s, c = oracle_rows(bits2, "mxfp8_e4m3", _OCP.knobs(), 32)
    assert not mx_mismatches(bits2, 32, s, c, r.scales, r.codes)
    i = int(np.flatnonzero(s[:, 0] != 0xFF)[0])
    codes = r.codes.copy()
    codes[i, 3] ^= 1
    assert mx_mismatches(bits2, 32, s, c, r.scales, codes)
