"""Stochastic rounding: the acceptance properties, for every element format and NVFP4.

docs/semantics.md fixes the rule: with n = v / q (v the exact scaled magnitude, q the quantum),
f = floor(frac(n) 2^32) and a uint32 r, round up iff f + r >= 2^32. tests/test_api.py and
tests/test_oracle_diff.py already check mxfp4's rbits contract, one unbiasedness case, the
Philox stream and bit-exactness against the oracle with random rbits. Here, for mxfp4,
mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8 and nvfp4:

(a) every output is one of the two grid neighbours of the exact scaled value (Fractions),
    with the scale checked against tests/oracle.py;
(b) unbiasedness: the mean of N draws (Philox stream, fixed seed, so deterministic) is within
    5 standard deviations (sqrt(p (1 - p)) (hi - lo) / sqrt(N)) of the input, plus the
    truncation bias of at most 2^-32 (hi - lo);
(c) P(up) = f / 2^32: statistically (5 sigma), and exactly on a lattice of r values;
(d) the consumption rule's edges: r = 0, r = 2^32 - 1, f + r = 2^32 and 2^32 - 1, f = 0 for a
    value off the grid, f = 1; every grid value stays put whatever r.
The grid neighbours are computed here from the code tables decoded by tests/oracle.py, not by
mxref's rounding.
"""
import bisect
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

import mxref  # noqa: E402

ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2", "mxfp8_e4m3": "e4m3",
        "mxfp8_e5m2": "e5m2", "mxint8": "int8", "nvfp4": "e2m1"}
FORMATS = list(ELEM)
SR = mxref.get_profile("ocp").replace(name="sr", rounding="stochastic")
TWO32 = 1 << 32
N_DRAWS = 16384
S_MX = -2                          # block exponent of the constructed MX blocks
NV_S = Fraction(1, 4)              # NVFP4 block scale (E4M3 0.25) with tensor scale T = 1
NV_GLOBAL_AMAX = np.float32(2688)  # T = fl(2688 / 2688) = 1


# ---------------------------------------------------------------------------------------------
# grid facts, from the oracle's decoder
# ---------------------------------------------------------------------------------------------
def finite_codes(elem):
    width = O.facts(elem)[7]
    out = []
    for c in range(1 << width):
        v = O.decode_element(c, elem)
        if isinstance(v, str) or (elem == "int8" and c == 0x80):
            continue
        out.append((c, v))
    return out


def grid(elem):
    """Sorted non-negative magnitudes of the element grid."""
    return sorted({v[1] for _, v in finite_codes(elem)})


def neighbours(v, g):
    """(lo, hi): the largest grid point <= v and the smallest >= v (max normal when v is
    beyond it: saturation)."""
    k = bisect.bisect_right(g, v)
    lo = g[k - 1]
    hi = g[k] if k < len(g) and lo != v else (lo if lo == v else g[-1])
    return lo, hi


def quantum(v, elem):
    """The rounding quantum at magnitude v (docs/semantics.md)."""
    mb, emin = O.facts(elem)[:2]
    if elem == "int8":
        return Fraction(1, 64)
    if v == 0:
        return O.pow2(emin - mb)
    return O.pow2(max(O.floor_log2(v), emin) - mb)


def trunc_fraction(v, elem):
    """f = floor(frac(v / q) 2^32)."""
    n = v / quantum(v, elem)
    return O.floor_int((n - O.floor_int(n)) * TWO32)


def f32_of(v):
    """fp32 bits of the Fraction v (must be exactly representable)."""
    b = O.value_to_fp32_bits(int(v < 0), abs(v))
    got = O.fp32_bits_to_value(b)
    assert (-got[1] if got[0] else got[1]) == v, v
    return b


def scale_of(fmt):
    """Exact scale dividing x into the element grid in the constructed blocks."""
    return NV_S if fmt == "nvfp4" else O.pow2(S_MX)


def anchor(fmt):
    """An element that pins the block scale: max normal * 2^S_MX (MX) or 6 * 0.25 (NVFP4)."""
    return f32_of(O.facts(ELEM[fmt])[3] * scale_of(fmt))


def build_rows(fmt, values, rows):
    """Blocks [anchor, x_1, ..., x_k, 0...]: x_i = values[i] * scale (exact fp32)."""
    bs = 16 if fmt == "nvfp4" else 32
    assert len(values) < bs
    row = [anchor(fmt)] + [f32_of(v * scale_of(fmt)) for v in values]
    row += [0] * (bs - len(row))
    return np.tile(np.array(row, np.uint32), (rows, 1))


def run(fmt, bits2, rbits=None, seed=None):
    x = np.ascontiguousarray(bits2, np.uint32).view(np.float32)
    kw = dict(global_amax=NV_GLOBAL_AMAX) if fmt == "nvfp4" else {}
    return mxref.quantize(x, fmt, SR, rbits=rbits, seed=seed, **kw)


def check_constructed_scale(fmt, mx):
    if fmt == "nvfp4":
        assert float(mx.tensor_scale) == 1.0 and (mx.scales == 0x28).all()   # E4M3 0.25
    else:
        assert (mx.scales == S_MX + 127).all()


def magnitude_and_sign(code, elem):
    sign, mag = O.decode_element(int(code), elem)
    return mag, sign


def sample_values(elem, nvals):
    """Off-grid magnitudes in several grid intervals (the lowest one (0, min subnormal), a
    subnormal or low one, a middle one and the top one below max normal) at fractions 1/8,
    1/2, 27/32 and ~1/3 (rounded to fp32), with alternating signs."""
    g = grid(elem)
    ks = [0, 1, len(g) // 2, len(g) - 2]
    out = []
    for k in ks:
        lo, hi = g[k], g[k + 1]
        for p in (Fraction(1, 8), Fraction(1, 2), Fraction(27, 32), Fraction(1, 3)):
            v = lo + p * (hi - lo)
            b = O.value_to_fp32_bits(0, v * O.pow2(S_MX))      # fp32-representable
            v = O.fp32_bits_to_value(b)[1] / O.pow2(S_MX)
            out.append(v)
    out = out[:nvals]
    return [v if i % 2 == 0 else -v for i, v in enumerate(out)]


# ---------------------------------------------------------------------------------------------
# (a) outputs are grid neighbours
# ---------------------------------------------------------------------------------------------
def random_data(rng, rows, bs, spread):
    """Blocks 2^k apart (k up to +-spread), elements up to 12 binades below; fp32 subnormals,
    -0 and (for MX, where blocks are independent) a huge block."""
    x = rng.standard_normal((rows, bs)) * np.exp2(rng.integers(-spread, spread + 1, (rows, 1)))
    x *= np.exp2(-rng.integers(0, 12, (rows, bs)))
    bits = x.astype(np.float32).view(np.uint32).copy()
    bits[0, :4] = [1, 0x80000007, 0x007FFFFF, 0x80000000]
    if bs == 32:
        bits[1, 0] = 0x7F7FFFFF
    return bits


def quantize_random(fmt, rng):
    """Random blocks and rbits; returns (bits2, MXTensor, divisors per block), the divisors
    (2^s, or S T) from scales checked against tests/oracle.py."""
    elem = ELEM[fmt]
    bs = 16 if fmt == "nvfp4" else 32
    bits2 = random_data(rng, 48, bs, 3 if fmt == "nvfp4" else 30)
    rb = rng.integers(0, TWO32, bits2.shape, dtype=np.uint64).astype(np.uint32)
    rb[:, ::4] = rng.choice(np.array([0, 1, 2 ** 31, TWO32 - 1], np.uint32), rb[:, ::4].shape)
    mx = mxref.quantize(bits2.view(np.float32), fmt, SR, rbits=rb)
    if fmt == "nvfp4":
        t, s, _ = O.quantize_nvfp4_exact([[int(b) for b in r] for r in bits2], SR.knobs(),
                                         rbits=[[int(b) for b in r] for r in rb])
        assert int(np.float32(mx.tensor_scale).view(np.uint32)) == t
        np.testing.assert_array_equal(mx.scales, np.array(s, np.uint8))
        tval = O.fp32_bits_to_value(t)[1]
        divs = [[O.decode_element(int(c), "e4m3")[1] * tval for c in row] for row in mx.scales]
    else:
        want = [[O.block_scale([int(b) for b in r[j:j + bs]], elem, SR.knobs())
                 for j in range(0, r.size, bs)] for r in bits2]
        np.testing.assert_array_equal(mx.scales, np.array(want, np.uint8))
        divs = [[O.pow2(int(c) - 127 if c else -127) for c in row] for row in mx.scales]
    return bits2, mx, divs


def neighbour_violations(bits2, codes, divs, elem, bs):
    """(violations, round-ups): outputs that are not a grid neighbour of |x| / div (or carry
    the wrong sign), and how many outputs took the upper neighbour."""
    g = grid(elem)
    bad, moved = [], 0
    for i in range(bits2.shape[0]):
        for k in range(bits2.shape[1]):
            sign, mag = O.fp32_bits_to_value(int(bits2[i, k]))
            div = divs[i][k // bs]
            v = mag / div if div else Fraction(0)
            lo, hi = neighbours(v, g)
            got, gsign = magnitude_and_sign(codes[i, k], elem)
            if got not in (lo, hi) or (gsign != sign and (got != 0 or elem != "int8")):
                bad.append((hex(int(bits2[i, k])), v, lo, hi, got))
            moved += got == hi != lo
    return bad, moved


@pytest.mark.parametrize("fmt", FORMATS)
def test_outputs_are_grid_neighbours(fmt):
    rng = np.random.default_rng(sum(map(ord, fmt)))
    bits2, mx, divs = quantize_random(fmt, rng)
    bs = 16 if fmt == "nvfp4" else 32
    bad, moved = neighbour_violations(bits2, mx.codes, divs, ELEM[fmt], bs)
    assert not bad, (fmt, bad[:5])
    assert moved > 50                       # rounding up happened (the check is not vacuous)
    if fmt in ("mxfp4", "nvfp4"):
        # planted bug: codes read against a scale one binade off are caught
        wrong = [[d * 2 for d in row] for row in divs]
        assert len(neighbour_violations(bits2, mx.codes, wrong, ELEM[fmt], bs)[0]) > 100


def test_neighbour_check_can_fail():
    """A planted bug: rounding to the nearest neighbour but one is caught by the same check."""
    g = grid("e2m1")
    v = Fraction(5, 4)
    lo, hi = neighbours(v, g)
    assert (lo, hi) == (1, Fraction(3, 2))
    assert g[g.index(hi) + 1] not in (lo, hi)
    assert neighbours(Fraction(7), g) == (6, 6) and neighbours(Fraction(3), g) == (3, 3)


# ---------------------------------------------------------------------------------------------
# (b) unbiasedness and (c) P(up) = f / 2^32, statistically
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_unbiased_and_up_probability(fmt):
    elem = ELEM[fmt]
    values = sample_values(elem, 15 if fmt == "nvfp4" else 16)
    bits2 = build_rows(fmt, values, N_DRAWS)
    mx = run(fmt, bits2, seed=20240 + len(fmt))
    check_constructed_scale(fmt, mx)
    deq = mxref.dequantize(mx)
    scale = scale_of(fmt)
    g = grid(elem)
    for k, v in enumerate(values, start=1):
        lo, hi = neighbours(abs(v), g)
        assert lo < hi
        col_vals, counts = np.unique(deq[:, k], return_counts=True)
        sgn = -1 if v < 0 else 1
        allowed = {float(lo * scale * sgn), float(hi * scale * sgn)}
        assert set(col_vals.tolist()) <= allowed, (fmt, v, col_vals)
        n_up = int(counts[np.abs(col_vals) == float(hi * scale)].sum())
        f = trunc_fraction(abs(v), elem)
        p = Fraction(f, TWO32)
        sigma = float(np.sqrt(N_DRAWS * float(p) * float(1 - p)))
        # (c): the count of round-ups is Binomial(N, f / 2^32)
        assert abs(n_up - N_DRAWS * float(p)) <= 5 * sigma + 1, (fmt, v, n_up, float(p))
        # (b): the mean of the dequantized draws (exact, from the counts) is the input
        total = sum(Fraction(float(cv)) * int(c) for cv, c in zip(col_vals, counts))
        mean = total / N_DRAWS
        tol = Fraction(5 * sigma / N_DRAWS) * (hi - lo) * scale + (hi - lo) * scale / TWO32
        assert abs(mean - v * scale) <= tol, (fmt, v, float(mean), float(v * scale))


def test_unbiasedness_check_can_fail():
    """A planted bias (always round half-way values up, i.e. rbits = 2^31 for a fraction of
    1/2 plus one ulp) is far outside the 5-sigma tolerance used above."""
    fmt = "mxfp4"
    v = Fraction(5, 4)                     # halfway between 1 and 1.5: p = 1/2
    bits2 = build_rows(fmt, [v], N_DRAWS)
    biased = np.full(bits2.shape, 2 ** 31, np.uint32)     # f + r = 2^32: always up
    deq = mxref.dequantize(run(fmt, bits2, rbits=biased))[:, 1]
    mean = Fraction(float(deq.astype(np.float64).mean()))
    sigma = np.sqrt(N_DRAWS * 0.25)
    tol = Fraction(5 * sigma / N_DRAWS) * Fraction(1, 2) * O.pow2(S_MX)
    assert abs(mean - v * O.pow2(S_MX)) > tol


@pytest.mark.parametrize("fmt", FORMATS)
def test_up_probability_exact_on_an_r_lattice(fmt):
    """With r running over the lattice k 2^20 (k < 4096), exactly #{k: f + k 2^20 >= 2^32}
    of the draws round up: the probability is f / 2^32 up to the lattice step."""
    elem = ELEM[fmt]
    values = sample_values(elem, 15 if fmt == "nvfp4" else 16)
    bits2 = build_rows(fmt, values, 4096)
    rb = np.repeat((np.arange(4096, dtype=np.uint64) << np.uint64(20)).astype(np.uint32)[:, None],
                   bits2.shape[1], axis=1)
    mx = run(fmt, bits2, rbits=rb)
    check_constructed_scale(fmt, mx)
    g = grid(elem)
    dyadic = 0
    for k, v in enumerate(values, start=1):
        f = trunc_fraction(abs(v), elem)
        lo, hi = neighbours(abs(v), g)
        ups = sum(1 for j in range(4096) if f + (j << 20) >= TWO32)
        strict = sum(1 for j in range(4096) if f + (j << 20) > TWO32)
        dyadic += ups != strict         # where '>' instead of '>=' would be caught
        mags = [magnitude_and_sign(c, elem)[0] for c in mx.codes[:, k]]
        assert mags.count(hi) == ups and mags.count(lo) == 4096 - ups, (fmt, v, f)
    assert dyadic >= 4


# ---------------------------------------------------------------------------------------------
# (d) the consumption rule at its edges, and grid values that never move
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_consumption_rule_edges(fmt):
    elem = ELEM[fmt]
    g = grid(elem)
    q0 = quantum(Fraction(0), elem)
    cases = []                                  # (v, r, expected magnitude)
    for v in sample_values(elem, 12)[:12:3] + [q0 * Fraction(3, 7)]:
        v = abs(v)
        b = O.value_to_fp32_bits(0, v * scale_of(fmt))
        v = O.fp32_bits_to_value(b)[1] / scale_of(fmt)
        f = trunc_fraction(v, elem)
        lo, hi = neighbours(v, g)
        assert 0 < f < TWO32 and lo < hi
        cases += [(v, 0, lo), (v, TWO32 - 1, hi), (v, TWO32 - f, hi), (v, TWO32 - f - 1, lo),
                  (v, TWO32 - f + 1, hi)]
    tiny = q0 * O.pow2(-40)                     # off the grid, f = 0: never rounds up
    assert trunc_fraction(tiny, elem) == 0
    cases += [(tiny, TWO32 - 1, Fraction(0)), (tiny, 0, Fraction(0))]
    _check_cases(fmt, cases)


def _check_cases(fmt, cases):
    """Quantize -v (one per block, next to the anchor) with r and compare magnitudes."""
    elem = ELEM[fmt]
    bs = 16 if fmt == "nvfp4" else 32
    bits2 = np.zeros((len(cases), bs), np.uint32)
    rb = np.zeros((len(cases), bs), np.uint32)
    for i, (v, r, _) in enumerate(cases):
        bits2[i, 0] = anchor(fmt)
        bits2[i, 1] = f32_of(-v * scale_of(fmt))        # negative: the rule acts on |x|
        rb[i, 1] = r
    mx = run(fmt, bits2, rbits=rb)
    check_constructed_scale(fmt, mx)
    for i, (v, r, want) in enumerate(cases):
        mag, sign = magnitude_and_sign(mx.codes[i, 1], elem)
        assert mag == want, (fmt, v, r, mag, want)
        assert sign == 1 or elem == "int8" and mag == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_grid_values_never_move(fmt):
    """Every finite code's value (times the block scale) comes back as the same code for any r
    (both signs of zero kept under signed_zero='preserve'; int8 code 0x80 is unused)."""
    elem = ELEM[fmt]
    codes = finite_codes(elem)
    bs = 16 if fmt == "nvfp4" else 32
    per = bs - 1
    rs = np.array([0, 1, 2 ** 31, TWO32 - 1, 0x9E3779B9], np.uint32)
    rows = []
    for start in range(0, len(codes), per):
        chunk = codes[start:start + per]
        row = [anchor(fmt)] + [f32_of((-v[1] if v[0] else v[1]) * scale_of(fmt))
                               if v[1] else (0x80000000 if v[0] else 0) for _, v in chunk]
        rows.append(row + [0] * (bs - len(row)))
    bits2 = np.repeat(np.array(rows, np.uint32), rs.size, axis=0)
    rb = np.repeat(np.tile(rs, len(rows))[:, None], bs, axis=1)
    mx = run(fmt, bits2, rbits=rb)
    check_constructed_scale(fmt, mx)
    for i in range(bits2.shape[0]):
        chunk = codes[(i // rs.size) * per:(i // rs.size) * per + per]
        got = mx.codes[i, 1:1 + len(chunk)].tolist()
        assert got == [c for c, _ in chunk], (fmt, int(rb[i, 0]))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fraction_of_one_rounds_up_only_at_r_max(fmt):
    """(NVFP4 here once caught a core defect: fractions of quotients with >= 63 discarded bits
    were dropped.) v = q0 2^-32 (q0 the smallest quantum): f = 1, so r = 2^32 - 1 rounds up and
    r = 2^32 - 2 does not; likewise 31 q0 2^-34 (f = 7) with r = 2^32 - 7 and 2^32 - 8."""
    q0 = quantum(Fraction(0), ELEM[fmt])
    one = q0 * O.pow2(-32)
    seven = 31 * q0 * O.pow2(-34)
    assert trunc_fraction(one, ELEM[fmt]) == 1 and trunc_fraction(seven, ELEM[fmt]) == 7
    _check_cases(fmt, [(one, TWO32 - 1, q0), (one, TWO32 - 2, Fraction(0)),
                       (seven, TWO32 - 7, q0), (seven, TWO32 - 8, Fraction(0))])


def test_nvfp4_exact_order_threshold_words_match_the_oracle():
    """NVFP4's exact order divides x by S T, whose significand (E4M3 x fp32) can have 28 bits:
    f must be the quotient's first 32 fraction bits, not a shorter quotient's bits padded with
    zeros. With r = 2^32 - f (rounds up) and r = 2^32 - f - 1 (rounds down), f computed here
    from Fractions, every code must equal tests/oracle.py's. (Before mxref._kernels'
    element_quotient the reference read f from a 31-bit quotient: about a third of these
    elements came out one code low.)"""
    rng = np.random.default_rng(77)
    x = (rng.standard_normal((24, 16)) * np.exp2(rng.integers(-3, 4, (24, 1)))).astype(np.float32)
    x[0, 0] = np.float32(2688 * 1.37)              # T = fl(amax / 2688), a long significand
    bits = [[int(b) for b in r] for r in x.view(np.uint32)]
    knobs = SR.knobs()
    t_bits, scales, _ = O.quantize_nvfp4_exact(bits, {**knobs, "rounding": "rne"})
    T = O.fp32_bits_to_value(t_bits)[1]
    assert O.pow2(O.floor_log2(T)) != T
    fs = np.zeros(x.shape, np.int64)
    for i, row in enumerate(bits):
        S = O.decode_element(scales[i][0], "e4m3")[1]
        for j, b in enumerate(row):
            v = O.fp32_bits_to_value(b)[1] / (S * T)
            fs[i, j] = trunc_fraction(v, "e2m1") if v < 6 else 0
    assert (fs > 0).sum() > 300
    for below in (0, 1):
        rb = np.where(fs > 0, (TWO32 - fs - below) % TWO32, 0).astype(np.uint32)
        mx = mxref.quantize(x, "nvfp4", SR, rbits=rb)
        _, _, want = O.quantize_nvfp4_exact(bits, knobs, rbits=[[int(r) for r in row]
                                                                 for row in rb])
        np.testing.assert_array_equal(mx.codes, np.array(want, np.uint8))


def test_four_word_stream_in_quantize():
    """rng_words=4 takes word i mod 4 of counter offset + i div 4 in the operand's C order
    (checked against the words written out by hand from the Philox function); misuse is a
    typed error."""
    from mxref import _kernels as K
    prof = mxref.get_profile("ocp").replace(name="ocp+sr", rounding="stochastic")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 64)) * 3).astype(np.float32)
    seed, off = 2**33 + 5, 7
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    words = np.array([int(K.philox4x32(np.uint64(off + i // 4), np.uint64(0), np.uint64(0),
                                       np.uint64(0), k0, k1, 10)[i % 4])
                      for i in range(x.size)], dtype=np.uint32).reshape(x.shape)
    want = mxref.quantize(x, "mxfp4", prof, rbits=words).codes
    got = mxref.quantize(x, "mxfp4", prof, seed=seed, rng_offset=off, rng_words=4).codes
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, mxref.quantize(x, "mxfp4", prof, seed=seed,
                                                  rng_offset=off).codes)
    with pytest.raises(mxref.errors.GeneratorArgumentError, match="rng_words=2"):
        mxref.quantize(x, "mxfp4", prof, seed=1, rng_words=2)
    with pytest.raises(mxref.errors.GeneratorArgumentError, match="rng_words=True"):
        mxref.quantize(x, "mxfp4", prof, seed=1, rng_words=True)
    with pytest.raises(mxref.errors.ProfileConflictError, match="pass seed"):
        mxref.quantize(x, "mxfp4", prof, rbits=words, rng_words=4)
