"""The exact three-way decomposition (mxref.decompose) against an independent Fraction oracle.

The oracle below computes, in exact rational arithmetic and from docs/decompose.md only, the
ideal quantizer Q_{s*} (tests/oracle.py rounding on the element grid), the actual quantizer
Q_s (tests/oracle.py's MX and NVFP4-exact quantizers, or a Fraction decode of mxref's codes
for op orders the oracle does not model) and the three components, masks and block scales.
"""
import json
import os
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

import mxref  # noqa: E402
import mxref.decompose  # noqa: E402
D = sys.modules["mxref.decompose"]  # the module (mxref.decompose is also the function)
from mxref.cli.decompose import decompose_cmd  # noqa: E402
from mxref.errors import ProfileConflictError, UnknownFormatError  # noqa: E402

ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2", "mxfp8_e4m3": "e4m3",
        "mxfp8_e5m2": "e5m2", "mxint8": "int8", "nvfp4": "e2m1"}
MX_FORMATS = [f for f in ELEM if f != "nvfp4"]
ODD = {"e2m1": 3, "e2m3": 15, "e3m2": 7, "e4m3": 7, "e5m2": 7, "int8": 127}
OCP = mxref.get_profile("ocp")


# ---- the oracle ---------------------------------------------------------------------------
def signed(v):
    return -v[1] if v[0] else v[1]


def grid_magnitudes(elem):
    """Every finite non-negative value of the element format, sorted (Fractions)."""
    width = O.facts(elem)[7]
    vals = set()
    for c in range(1 << (width - 1)):
        v = O.decode_element(c, elem)
        if not isinstance(v, str):
            vals.add(v[1])
    return sorted(vals)


def ideal_value(mag_over_s, elem, rounding):
    """R(y) for a real y >= 0 on the element grid (never overflows: y <= M)."""
    code = O.round_to_element(0, mag_over_s, elem, rounding)
    return O.decode_element(code, elem)[1]


def oracle_block(bits, elem, knobs, qs, s_dec, s_div):
    """Exact per-element record of one block. qs: per element the exact Q_s (Fraction) or None
    where the quantized value is not finite; s_dec / s_div: decode scale and element divisor
    (Fractions, None for a NaN scale)."""
    mb, emin, emax, m_max, *_ = O.facts(elem)
    _, _, amax = O.classify(bits, knobs)
    out = []
    for b, q in zip(bits, qs):
        orig = O.fp32_bits_to_value(b)
        if isinstance(orig, str) or q is None:
            out.append({"special": True})
            continue
        x = signed(orig)
        prepared, _ = O.prepare(b, knobs)
        if amax == 0 or prepared[1] == 0:
            star_mag = Fraction(0)
        else:
            star_mag = amax * ideal_value(prepared[1] * m_max / amax, elem,
                                          knobs["rounding"]) / m_max
        qstar = -star_mag if orig[0] else star_mag
        dead = x != 0 and star_mag == 0
        out.append({
            "special": False, "x": x, "qs": q, "qstar": qstar,
            "scale": q - qstar, "dead": -x if dead else Fraction(0),
            "grid": Fraction(0) if dead else qstar - x,
            "deadzone": dead, "zeroed": x != 0 and q == 0,
            "saturated": s_div is not None and abs(x) > m_max * s_div,
        })
    return out, amax, m_max


def oracle_mx(bits, fmt, knobs):
    elem = ELEM[fmt]
    byte, codes = O.quantize_block(bits, elem, knobs)
    if byte == 0xFF:
        return oracle_block(bits, elem, knobs, [None] * len(bits), None, None), None
    s_dec = O.pow2(byte - 127)
    s_div = O.pow2(knobs.get("zero_scale_elem_exp", -127)) if byte == 0 else s_dec
    qs = []
    for c in codes:
        v = O.decode_element(c, elem)
        qs.append(None if isinstance(v, str) else signed(v) * s_dec)
    return oracle_block(bits, elem, knobs, qs, s_dec, s_div), s_dec


def fraction_decode_nvfp4(mx, r, lo, hi):
    """Q_s of mxref's NVFP4 codes, decoded exactly with the oracle's decoders."""
    t = O.fp32_bits_to_value(int(np.float32(mx.tensor_scale).view(np.uint32)))[1]
    sc = O.decode_element(int(mx.scales[r, lo // 16]), "e4m3")
    if sc == "nan":
        return [None] * (hi - lo), None
    qs = []
    for c in mx.codes[r, lo:hi]:
        v = O.decode_element(int(c), "e2m1")
        qs.append(None if isinstance(v, str) else signed(v) * sc[1] * t)
    return qs, sc[1] * t


def assert_matches_oracle(dec, bits2d, fmt, prof, mx=None):
    """Every element and block of ``dec`` (axis -1, 2-D) equals the oracle exactly."""
    elem = ELEM[fmt]
    knobs = prof.knobs()
    den = ODD[elem]
    assert dec.denominator == den
    bs = dec.block_size
    rows, n = bits2d.shape
    ideal = dec.scale_rule == "ideal"
    if fmt == "nvfp4" and prof.nvfp4_order == "exact" and prof.nan_in_block == "poison" \
            and prof.inf_in_block == "poison" and not ideal:
        t_bits, scales, codes = O.quantize_nvfp4_exact([list(map(int, r)) for r in bits2d], knobs)
        assert mx is not None and list(map(list, mx.scales)) == scales
        assert list(map(list, mx.codes)) == codes
    for r in range(rows):
        for j, lo in enumerate(range(0, n, bs)):
            hi = min(lo + bs, n)
            bits = [int(b) for b in bits2d[r, lo:hi]]
            if fmt == "nvfp4":
                qs, s_dec = fraction_decode_nvfp4(mx, r, lo, hi)
                recs, amax, m_max = oracle_block(bits, elem, knobs, qs, s_dec, s_dec)
            else:
                (recs, amax, m_max), s_dec = oracle_mx(bits, fmt, knobs)
            if ideal:          # s = s*: Q_s is Q_{s*} itself, nothing clips
                s_dec = amax / m_max if amax else Fraction(0)
                for rec in recs:
                    if not rec["special"]:
                        rec.update(qs=rec["qstar"], scale=Fraction(0), saturated=False,
                                   zeroed=rec["x"] != 0 and rec["qstar"] == 0)
            if amax:
                assert dec.s_ideal[r, j] == float(amax / m_max), (r, j)
                want = 1.0 if ideal or s_dec is None else float(s_dec * m_max / amax)
                got = dec.s_ratio[r, j]
                assert (np.isnan(got) and s_dec is None) or got == want, (r, j, got, want)
            if s_dec is not None and not ideal:
                assert dec.s[r, j] == float(s_dec), (r, j)
            for k, rec in enumerate(recs):
                i = lo + k
                where = f"row {r} elem {i} 0x{bits[k]:08X} {fmt}/{prof.name}/{dec.scale_rule}"
                assert bool(dec.special[r, i]) == rec["special"], where
                if rec["special"]:
                    assert dec.exact_scale[r, i] == dec.exact_dead[r, i] == \
                        dec.exact_grid[r, i] == 0, where
                    continue
                for c in ("scale", "dead", "grid"):
                    ex = getattr(dec, f"exact_{c}")[r, i]
                    assert Fraction(float(ex)) == den * rec[c], (where, c, ex, rec[c])
                    assert getattr(dec, c)[r, i] == float(rec[c]), (where, c)
                for m in ("deadzone", "zeroed", "saturated"):
                    assert bool(getattr(dec, m)[r, i]) == rec[m], (where, m)
                if not ideal:
                    assert Fraction(float(dec.q[r, i])) == rec["qs"], where
                # the identity, bit-exact in float64, in the stated order
                lhs = dec.exact_scale[r, i] + (dec.exact_dead[r, i] + dec.exact_grid[r, i])
                assert lhs == den * dec.q[r, i] - den * dec.x[r, i] or ideal, where
                assert Fraction(float(lhs)) == den * (rec["qs"] - rec["x"]), where


# ---- inputs: random and adversarial -------------------------------------------------------
def f32_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def adversarial_rows(fmt, bs, full=False):
    """Blocks random data never hits, as rows of fp32 bits (one block per row): every tie and
    grid point of the ideal grid with its +-1 ulp neighbours (all of them at s* = 1, a sample
    of 40 at s* = 2^-4 and 2^7 unless ``full``), amax 2^k and 2^k - 1 ulp, fp32 subnormals,
    scales clamped at 0x00 and at the top, zeros and -0."""
    elem = ELEM[fmt]
    mb, emin, emax, m_max, *_ = O.facts(elem)
    mags = grid_magnitudes(elem)
    mids = [(a + b) / 2 for a, b in zip(mags, mags[1:])]          # includes the deadzone edge
    vals = []
    for k in (0, -4, 7):                                          # amax = M 2^k: s* = 2^k
        scale = O.pow2(k)
        pick = slice(None) if full or k == 0 else slice(None, None, max(1, len(mids) // 20))
        ties = [float(m * scale) for m in mids[pick]] + [float(g * scale) for g in mags[1:][pick]]
        ties = np.array(ties, dtype=np.float32)
        row = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)),
                              np.nextafter(ties, np.float32(0))])
        sign = np.where(np.arange(row.size) % 3 == 0, -1, 1).astype(np.float32)
        row = row * sign
        head = np.float32(float(m_max * scale))
        for c in range(0, row.size, bs - 1):
            chunk = list(row[c:c + bs - 1])
            vals.append([head] + chunk + [np.float32(0)] * (bs - 1 - len(chunk)))
    rng = np.random.default_rng(7)
    for k in (0, -3, 20, -120):
        p2 = np.float32(float(O.pow2(k)))
        below = np.nextafter(p2, np.float32(0))                   # 2^k - 1 ulp
        for amax in (p2, below):
            others = (rng.standard_normal(bs - 1) * float(amax) / 4).astype(np.float32)
            vals.append([amax] + list(np.clip(others, -amax, amax)))
    sub = np.uint32(1) + rng.integers(0, 0x7FFFFF, bs, dtype=np.uint32)
    vals.append(list(sub.view(np.float32)))                      # all fp32 subnormals
    vals.append([np.float32(1.0)] + list(sub[:bs - 1].view(np.float32)))
    tiny = np.float32(float(O.pow2(-140)))                        # scale clamped at 0x00
    vals.append([tiny] + [np.float32(float(O.pow2(-145)))] * (bs - 1))
    big = np.float32(3.0e38)                                      # largest scales
    vals.append([big, -big / 3, big / 7] + [np.float32(1e37)] * (bs - 3))
    vals.append([np.float32(0.0), np.float32(-0.0)] * (bs // 2))  # all-zero block
    vals.append([np.float32(-0.0)] + [np.float32(v) for v in rng.standard_normal(bs - 1)])
    return f32_bits(np.array(vals, dtype=np.float32))


def random_rows(rows, n, seed, dist="gaussian"):
    return f32_bits(D.synthetic(dist, (rows, n), seed))


def knob_profile(fmt, prof):
    """The profile, with its `formats` list widened when that list alone refuses fmt."""
    try:
        prof.check_format(mxref.get_format(fmt))
        return prof
    except ProfileConflictError:
        wide = prof.replace(formats=None)
        try:
            wide.check_format(mxref.get_format(fmt))
            return wide
        except ProfileConflictError:
            return None


MX_PROFILES = ["ocp", "rceil", "torchao_floor", "torchao_rceil", "torchao_ceil", "torchao_even",
               "microxcaling", "triton_kernels_round_up", "triton_kernels_round_down", "te_mxfp8"]
CUSTOM = [OCP.replace(name="x_ties_zero", rounding="ties_zero"),
          OCP.replace(name="x_flush", flush_fp32_subnormals=True,
                      signed_zero="input_neg_zero_to_pos"),
          OCP.replace(name="x_nonsat", overflow="nonsaturating")]
# the default run: one profile per knob that changes the decomposition (rounding ties, NaN/Inf
# policy, flush, zero-scale divisor, float32-log2 rceil, non-saturating overflow)
FAST_PROFILES = ["ocp", "microxcaling", "te_mxfp8", "torchao_rceil", "x_ties_zero", "x_flush",
                 "x_nonsat"]


def _profiles_for(fmt, names=None):
    out = []
    for p in [mxref.get_profile(n) for n in MX_PROFILES] + CUSTOM:
        if names is not None and p.name not in names:
            continue
        kp = knob_profile(fmt, p)
        if kp is not None:
            out.append(kp)
    return out


# ---- exactness against the oracle ---------------------------------------------------------
@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_mx_components_equal_fraction_oracle(fmt):
    inputs = (random_rows(2, 128, 1), adversarial_rows(fmt, 32))
    for prof in _profiles_for(fmt, FAST_PROFILES):
        for bits2d in inputs:
            dec = D.decompose(bits2d, fmt, prof, source_dtype="float32")
            assert_matches_oracle(dec, bits2d, fmt, prof)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_mx_components_equal_fraction_oracle_every_profile(fmt):
    inputs = (random_rows(4, 256, 2), adversarial_rows(fmt, 32, full=True))
    for prof in _profiles_for(fmt):
        for bits2d in inputs:
            dec = D.decompose(bits2d, fmt, prof, source_dtype="float32")
            assert_matches_oracle(dec, bits2d, fmt, prof)


@pytest.mark.parametrize("rule", ["floor", "rceil", "ceil", "even", "round_down", "ideal"])
def test_every_scale_rule_equals_oracle(rule):
    prof = OCP if rule == "ideal" else OCP.replace(scale_rule=rule)
    for fmt in ("mxfp4", "mxfp6_e2m3", "mxint8"):
        for bits2d in (random_rows(3, 64, 11), adversarial_rows(fmt, 32)):
            dec = D.decompose(bits2d, fmt, "ocp", scale_rule=rule, source_dtype="float32")
            assert_matches_oracle(dec, bits2d, fmt, prof)


def test_ideal_rule_has_exactly_zero_scale_component():
    x = D.synthetic("laplace", (16, 256), 3)
    dec = D.decompose(x, "mxfp4", scale_rule="ideal")
    assert np.all(dec.exact_scale == 0)
    assert np.array_equal(dec.deadzone, dec.zeroed)
    assert not dec.saturated.any()
    assert np.all(dec.s_ratio == 1.0)


@pytest.mark.parametrize("profile", ["ocp", "te_nvfp4", "torchao_nvfp4"])
def test_nvfp4_components_equal_fraction_oracle(profile):
    prof = mxref.get_profile(profile)
    for bits2d in (random_rows(2, 64, 5), adversarial_rows("nvfp4", 16)):
        mx = mxref.quantize(bits2d, "nvfp4", prof, source_dtype="float32")
        for rule in (None, "ideal"):
            dec = D.decompose(bits2d, "nvfp4", prof, scale_rule=rule, source_dtype="float32")
            assert_matches_oracle(dec, bits2d, "nvfp4", prof, mx=mx)


def test_ragged_axis_and_axis0_match_oracle():
    x = D.synthetic("student-t3", (3, 50), 2)
    bits = x.view(np.uint32)
    dec = D.decompose(x, "mxfp4")
    assert dec.s.shape == (3, 2)
    assert_matches_oracle(dec, bits, "mxfp4", OCP)
    dec0 = D.decompose(np.ascontiguousarray(x.T), "mxfp4", axis=0)
    for name in ("exact_scale", "exact_dead", "exact_grid", "deadzone", "saturated"):
        assert np.array_equal(getattr(dec0, name).T, getattr(dec, name)), name
    assert np.array_equal(dec0.s.T, dec.s)


def test_nan_inf_are_their_own_category():
    row = np.array([1.0, np.nan, -3.0, 0.25] + [0.5] * 28 + [2.0, np.inf] + [0.1] * 30,
                   dtype=np.float32)[None, :]
    dec = D.decompose(row, "mxfp8_e4m3", "ocp")             # poison: whole blocks special
    assert dec.special.all()
    assert np.all(dec.exact_scale == 0) and np.all(dec.exact_grid == 0)
    assert dec.stats()["n_special"] == 64 and dec.stats()["n_blocks_used"] == 0
    te = D.decompose(row, "mxfp8_e4m3", "te_mxfp8")         # ignore NaN, Inf -> scale 0xFE
    assert list(np.flatnonzero(te.special[0])) == [1, 33]
    assert te.s[0, 1] == 2.0 ** 127
    assert_matches_oracle(te, row.view(np.uint32), "mxfp8_e4m3", mxref.get_profile("te_mxfp8"))
    st = te.stats()
    assert st["n_special"] == 2 and st["n_elements"] == 62


def test_scale_extremes_0x00_and_0xfe():
    tiny = np.full((1, 32), 2.0 ** -140, np.float32)
    mx = mxref.quantize(tiny, "mxfp4")
    assert mx.scales[0, 0] == 0x00
    dec = D.decompose(tiny, "mxfp4")
    assert_matches_oracle(dec, tiny.view(np.uint32), "mxfp4", OCP)
    assert dec.s[0, 0] == 2.0 ** -127 and dec.zeroed.all()
    big = np.full((1, 32), 2.0 ** 127 * 1.5, np.float32)
    assert mxref.quantize(big, "mxint8").scales[0, 0] == 0xFE
    dec = D.decompose(big, "mxint8")
    assert_matches_oracle(dec, big.view(np.uint32), "mxint8", OCP)


def test_oracle_checker_catches_planted_bugs():
    bits2d = random_rows(1, 64, 9)
    dec = D.decompose(bits2d, "mxfp4", source_dtype="float32")
    assert_matches_oracle(dec, bits2d, "mxfp4", OCP)
    i = int(np.flatnonzero(~dec.deadzone[0])[0])
    dec.exact_grid[0, i] = np.nextafter(dec.exact_grid[0, i], np.inf)
    with pytest.raises(AssertionError):
        assert_matches_oracle(dec, bits2d, "mxfp4", OCP)
    dec = D.decompose(bits2d, "mxfp4", source_dtype="float32")
    dec.deadzone[0, i] = True
    with pytest.raises(AssertionError):
        assert_matches_oracle(dec, bits2d, "mxfp4", OCP)
    dec = D.decompose(bits2d, "mxfp4", source_dtype="float32")
    dec.s_ratio[0, 0] *= 1 + 2.0 ** -52
    with pytest.raises(AssertionError):
        assert_matches_oracle(dec, bits2d, "mxfp4", OCP)


def test_exact_difference_checker_raises_when_rounding_happens():
    a = np.array([1.0, 3.0])
    assert np.array_equal(D.exact_difference(a, np.array([0.5, 1.0]), "t"), [0.5, 2.0])
    with pytest.raises(D.ExactnessError, match="not exact"):
        D.exact_difference(a, np.array([0.0, 2.0 ** -60]), "planted")


def test_identity_is_bit_exact_on_a_large_sample():
    for dist in D.DISTRIBUTIONS:
        x = D.synthetic(dist, (64, 1024), 4)
        for fmt in ("mxfp4", "mxfp8_e5m2", "mxint8", "nvfp4"):
            dec = D.decompose(x, fmt, "te_nvfp4" if fmt == "nvfp4" else "ocp")
            den = dec.denominator
            lhs = dec.exact_scale + (dec.exact_dead + dec.exact_grid)
            assert np.array_equal(lhs, den * dec.q - den * dec.x), (dist, fmt)
            assert np.array_equal(dec.exact_total, lhs)
            # each component from its own definition, not from the others
            assert np.all(dec.exact_dead[~dec.deadzone] == 0)
            assert np.all(dec.exact_grid[dec.deadzone] == 0)
            assert np.array_equal(dec.exact_dead[dec.deadzone], -den * dec.x[dec.deadzone])


# ---- inputs and bad input -----------------------------------------------------------------
def test_input_kinds_give_the_same_decomposition():
    import torch

    x = D.synthetic("gaussian", (4, 64), 8).astype(ml_dtypes.bfloat16)
    ref = D.decompose(x, "mxfp4")
    raw = D.decompose(x.view(np.uint16), "mxfp4", source_dtype="bfloat16")
    tt = D.decompose(torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16), "mxfp4")
    for d in (raw, tt):
        assert np.array_equal(d.exact_grid, ref.exact_grid)
        assert d.source_dtype == "bfloat16"
    f64 = D.decompose(x.astype(np.float64), "mxfp4", from_float64="rne")
    assert np.array_equal(f64.exact_scale, ref.exact_scale)


@pytest.mark.parametrize("call,err,msg", [
    (lambda: D.decompose(np.zeros((0, 32), np.float32), "mxfp4"), D.EmptyTensorError, "empty"),
    (lambda: D.decompose(np.full(64, np.nan, np.float32), "mxfp4"), D.NoFiniteValuesError,
     "no finite"),
    (lambda: D.decompose(np.ones(32, np.float32), "mxfp5"), UnknownFormatError, "mxfp5"),
    (lambda: D.decompose(np.ones(32, np.float32), "mxfp4", scale_rule="nearest"),
     D.UnknownScaleRuleError, "known: floor"),
    (lambda: D.decompose(np.ones(32, np.float32), "nvfp4", scale_rule="floor"),
     ProfileConflictError, "E8M0 rule"),
    (lambda: D.decompose(np.ones(32, np.float32), "mxfp4",
                         OCP.replace(name="sr", rounding="stochastic")),
     ProfileConflictError, "deterministic"),
    (lambda: D.decompose(np.ones(32, np.float32), "mxfp4", "torchao_rceil", scale_rule="floor"),
     ProfileConflictError, "rceil_f32_log2"),
    (lambda: D.synthetic("cauchy", 10, 0), D.UnknownDistributionError, "gaussian, laplace"),
    (lambda: D.synthetic("gaussian", (4, -1), 0), mxref.ShapeError, "shape"),
])
def test_bad_input_gets_typed_errors(call, err, msg):
    with pytest.raises(err, match=msg) as info:
        call()
    assert isinstance(info.value, mxref.MXRefError)
    assert isinstance(info.value, (ValueError, KeyError))


# ---- synthetic ----------------------------------------------------------------------------
def test_synthetic_draws_are_the_documented_ones():
    for dist, draw in (("gaussian", lambda g, s: g.standard_normal(s)),
                       ("laplace", lambda g, s: g.laplace(0.0, 1.0, s)),
                       ("student-t3", lambda g, s: g.standard_t(3, s)),
                       ("uniform", lambda g, s: g.uniform(-1.0, 1.0, s))):
        got = D.synthetic(dist, (3, 5), 42)
        want = draw(np.random.default_rng(42), (3, 5)).astype(np.float32)
        assert got.dtype == np.float32 and np.array_equal(got, want), dist
    g = np.random.default_rng(5)
    base = g.standard_normal((64, 1024))
    hit = g.random((64, 1024)) < 1e-3
    got = D.synthetic("outlier", (64, 1024), 5)
    assert np.array_equal(got, np.where(hit, base * 20, base).astype(np.float32))
    assert 20 < hit.sum() < 120                       # ~65 expected
    assert np.array_equal(D.synthetic("gaussian", 7, 1), D.synthetic("gaussian", (7,), 1))


# ---- statistics ---------------------------------------------------------------------------
def test_stats_against_direct_computation():
    x = D.synthetic("outlier", (32, 256), 6)
    x[0, :3] = [np.nan, np.inf, 1.0]
    dec = D.decompose(x, "mxfp4", "ocp")
    st = dec.stats()
    ok = ~dec.special
    e = dec.error[ok]
    xs = dec.x[ok]
    assert st["n_elements"] == ok.sum() and st["n_special"] == 32
    assert st["zeroed_fraction"] == pytest.approx(dec.zeroed.sum() / ok.sum(), rel=1e-12)
    assert st["saturated_fraction"] == pytest.approx(dec.saturated.sum() / ok.sum(), rel=1e-12)
    assert st["deadzone_fraction"] == pytest.approx(dec.deadzone.sum() / ok.sum(), rel=1e-12)
    assert st["gain"] == pytest.approx((dec.q[ok] @ xs) / (xs @ xs), rel=1e-12)
    assert st["error_to_signal"] == pytest.approx((e @ e) / (xs @ xs), rel=1e-12)
    for c in ("scale", "dead", "grid"):
        comp = getattr(dec, c)[ok]
        assert st["energy_share"][c] == pytest.approx((comp @ comp) / (e @ e), rel=1e-12)
        assert st["mean"][c] == pytest.approx(comp.mean(), rel=1e-9, abs=1e-15)
    assert sum(st["energy_share"].values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(st["gain_contrib"].values()) == pytest.approx(st["gain"] - 1, abs=1e-12)
    r = dec.s_ratio[np.isfinite(dec.s_ratio)]
    assert st["mean_s_ratio"] == pytest.approx(r.mean(), rel=1e-12)
    assert st["se"]["mean_s_ratio"] == pytest.approx(r.std(ddof=1) / r.size ** 0.5, rel=1e-9)
    assert all(v > 0 for v in st["se"]["energy_share"].values())
    bst = dec.block_stats()
    assert bst["n_elements"].shape == dec.s.shape
    assert bst["n_elements"].sum() == st["n_elements"]
    json.dumps(st)                                    # plain Python numbers


# Training-anchors A.0 [my-sim]: 200k Gaussian blocks of 32, RNE; values as printed there
# (mean s/s*, zeroed, saturated, relative MSE) with half a unit of their last digit.
ANCHOR_BLOCKS = 200_000
ANCHOR = {
    "ideal": (1.000, 0.078, 0.000, 0.0102),
    "floor": (1.137, 0.088, 0.023, 0.0132),
    "even": (1.271, 0.097, 0.006, 0.0125),
    "rceil": (1.389, 0.107, 0.000, 0.0133),
}
HALF_UNIT = (0.0005, 0.0005, 0.0005, 0.00005)
KEYS = ("mean_s_ratio", "zeroed_fraction", "saturated_fraction", "error_to_signal")


def _anchor_tolerance(se, n_blocks, half_unit, k=4.0):
    """k standard errors of (ours - anchor): our SE plus the anchor's own sampling SE (the
    same per-block spread over its 200k blocks), plus the anchor's print rounding."""
    se_anchor = se * (n_blocks / ANCHOR_BLOCKS) ** 0.5
    return k * (se * se + se_anchor * se_anchor) ** 0.5 + half_unit


def test_gaussian_acceptance_numbers_match_the_anchor():
    x = D.synthetic("gaussian", (1024, 1024), 0)            # 2^20 elements, 32768 blocks
    res = D.compare_scale_rules(x, "mxfp4", ("floor", "rceil", "even", "ideal"))
    for rule, want in ANCHOR.items():
        st = res[rule]
        for key, w, hu in zip(KEYS, want, HALF_UNIT):
            got, se = st[key], st["se"][key]
            tol = _anchor_tolerance(se, st["n_blocks_used"], hu)
            assert abs(got - w) <= tol, (rule, key, got, w, tol)
    # the tolerance can fail: each rule's numbers are far outside it around the other
    # rules' anchors (mean s/s* and zeroed fraction differ between every pair of rules)
    for rule, st in res.items():
        for key in ("mean_s_ratio", "zeroed_fraction"):
            k = KEYS.index(key)
            tol = _anchor_tolerance(st["se"][key], st["n_blocks_used"], HALF_UNIT[k])
            for other, want in ANCHOR.items():
                if other != rule:
                    assert abs(st[key] - want[k]) > tol, (rule, other, key)


# ---- CLI ----------------------------------------------------------------------------------
def run(args):
    return CliRunner().invoke(decompose_cmd, args, catch_exceptions=False)


def test_cli_synthetic_json_matches_library(tmp_path):
    png, csv_path = tmp_path / "d.png", tmp_path / "b.csv"
    r = run(["--synthetic", "gaussian", "--shape", "16x256", "--seed", "3", "--format", "mxfp4",
             "--json", "--plot", str(png), "--per-block", str(csv_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "mxref-decompose/1" and doc["rules"] == ["floor", "rceil", "even",
                                                                      "ideal"]
    sec = doc["sections"][0]
    want = D.compare_scale_rules(D.synthetic("gaussian", (16, 256), 3), "mxfp4")
    for rule in doc["rules"]:
        assert sec["results"][rule]["energy_share"] == want[rule]["energy_share"]
        assert sec["results"][rule]["mean_s_ratio"] == want[rule]["mean_s_ratio"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("input,rule,block,s,s_ideal,s_ratio")
    assert len(lines) == 1 + 4 * 16 * 8


def test_cli_human_table():
    r = run(["--synthetic", "uniform", "--shape", "8x64", "-f", "nvfp4", "-p", "te_nvfp4"])
    assert r.exit_code == 0, r.output
    assert "te_nvfp4" in r.output and "\nprofile " in r.output and "\nideal " in r.output
    assert "scale%" in r.output


def test_cli_reads_npy_safetensors_and_arrow(tmp_path):
    import pyarrow as pa
    from pyarrow import ipc
    from safetensors.numpy import save_file

    a = D.synthetic("laplace", (8, 64), 1)
    b = D.synthetic("gaussian", (4, 32), 2).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "bits.npy", b.view(np.uint16))
    save_file({"wa": a, "wb": b}, str(tmp_path / "m.safetensors"))
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (64,))
    table = pa.table({"t": pa.FixedShapeTensorArray.from_numpy_ndarray(a),
                      "f": pa.array(a[:, 0]), "s": pa.array(["x"] * 8)})
    assert table.column("t").type == tensor_type
    with ipc.new_file(str(tmp_path / "t.arrow"), table.schema) as w:
        w.write_table(table)
    want_a = D.decompose(a, "mxfp4").stats()
    r = run([str(tmp_path / "a.npy"), "-f", "mxfp4", "--rules", "profile", "--json"])
    assert json.loads(r.output)["sections"][0]["results"]["profile"] == \
        json.loads(json.dumps(want_a))
    r = run([str(tmp_path / "bits.npy"), "-f", "mxfp4", "--source-dtype", "bfloat16", "--json"])
    assert json.loads(r.output)["sections"][0]["source_dtype"] == "bfloat16"
    r = run([str(tmp_path / "m.safetensors"), "-f", "mxfp4", "--json"])
    secs = json.loads(r.output)["sections"]
    assert [s["tensor"] for s in secs] == ["wa", "wb"]
    assert secs[0]["results"]["floor"]["mean_s_ratio"] == want_a["mean_s_ratio"]
    r = run([str(tmp_path / "m.safetensors"), "-f", "mxfp4", "--tensor", "wb", "--json"])
    assert [s["tensor"] for s in json.loads(r.output)["sections"]] == ["wb"]
    r = run([str(tmp_path / "t.arrow"), "-f", "mxfp4", "--json"])
    secs = json.loads(r.output)["sections"]
    assert [s["tensor"] for s in secs] == ["t", "f"]          # the string column is skipped
    assert secs[0]["shape"] == [8, 64]
    assert secs[0]["results"]["even"]["gain"] == D.decompose(a, "mxfp4", scale_rule="even") \
        .stats()["gain"]


@pytest.mark.parametrize("args,msg", [
    (["--synthetic", "cauchy", "-f", "mxfp4"], "unknown distribution 'cauchy'"),
    (["--synthetic", "gaussian", "-f", "mxfp5"], "unknown format 'mxfp5'"),
    (["--synthetic", "gaussian", "-f", "mxfp4", "--rules", "floor,bogus"], "bogus"),
    (["--synthetic", "gaussian", "-f", "mxfp4", "--shape", "12xq"], "shape"),
    (["-f", "mxfp4"], "exactly one of FILE or --synthetic"),
    (["--synthetic", "gaussian", "-f", "mxfp4", "--tensor", "w"], "no meaning with --synthetic"),
    (["--synthetic", "gaussian", "-f", "nvfp4", "--rules", "floor"], "E8M0 rule"),
    (["--synthetic", "gaussian", "-f", "mxfp4", "-p", "nvidia"], "unknown profile"),
])
def test_cli_usage_and_input_errors_exit_2(args, msg):
    r = CliRunner().invoke(decompose_cmd, args)
    assert r.exit_code == 2, r.output
    assert msg in r.output


def test_cli_bad_files_exit_2(tmp_path):
    np.save(tmp_path / "empty.npy", np.zeros((0, 32), np.float32))
    np.save(tmp_path / "nan.npy", np.full((2, 32), np.nan, np.float32))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "junk.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{junk")
    (tmp_path / "x.txt").write_text("1 2 3")
    np.save(tmp_path / "ok.npy", np.ones((1, 32), np.float32))
    for args, msg in (([str(tmp_path / "empty.npy")], "empty tensor"),
                      ([str(tmp_path / "nan.npy")], "no finite element"),
                      ([str(tmp_path / "obj.npy")], "cannot read as .npy"),
                      ([str(tmp_path / "junk.safetensors")], "cannot read as .safetensors"),
                      ([str(tmp_path / "x.txt")], "unknown file type"),
                      ([str(tmp_path / "missing.npy")], "no such file"),
                      ([str(tmp_path / "ok.npy"), "--tensor", "w"], "single .npy")):
        r = CliRunner().invoke(decompose_cmd, args + ["-f", "mxfp4"])
        assert r.exit_code == 2, (args, r.output)
        assert msg in r.output, (args, r.output)


def test_cli_reports_special_elements(tmp_path):
    x = D.synthetic("gaussian", (2, 64), 0)
    x[0, 5] = np.nan
    np.save(tmp_path / "x.npy", x)
    r = run([str(tmp_path / "x.npy"), "-f", "mxfp4", "--json"])      # ocp: the block is poisoned
    sec = json.loads(r.output)["sections"][0]
    assert sec["n_special"] == 32 and sec["results"]["floor"]["n_special"] == 32
    assert sec["results"]["floor"]["n_elements"] == 96


# ---- each component in isolation (blocks built by hand: expected values need no mxref) -------
def _parts(v):
    d = mxref.decompose(np.array(v, np.float32).reshape(1, 32), "mxfp4", "ocp")
    return (np.abs(d.exact_scale).sum(), np.abs(d.exact_dead).sum(), np.abs(d.exact_grid).sum(),
            d)


def test_only_grid_noise():
    """amax = 6 * 2^k: the floor scale is exactly s* = 2^k; every element >= s*/4 and one
    off-grid element (1.3 * 2^k): only the grid term is non-zero, and it is q - x there."""
    k = 3
    v = [6.0 * 2 ** k] + [1.0 * 2 ** k] * 30 + [1.3 * 2 ** k]
    sc, dd, gr, d = _parts(v)
    assert sc == 0 and dd == 0 and gr > 0
    assert float(d.grid.reshape(-1)[31]) == float(np.float32(1.5 * 2 ** k) - np.float32(1.3 * 2 ** k))


def test_only_deadzone():
    """s = s* again, the other elements on the grid, plus elements below s*/4 = 2^k / 4: only
    the deadzone term is non-zero, and it is -x at exactly those elements."""
    k = -2
    tiny = [0.2 * 2 ** k, -0.1 * 2 ** k]
    v = [6.0 * 2 ** k] + [2.0 * 2 ** k] * 29 + tiny
    sc, dd, gr, d = _parts(v)
    assert sc == 0 and gr == 0 and dd > 0
    dead = d.dead.reshape(-1)
    assert np.array_equal(np.nonzero(dead)[0], [30, 31])
    assert dead[30] == -float(np.float32(tiny[0])) and dead[31] == -float(np.float32(tiny[1]))


def test_only_scale_bias():
    """amax = 5: s* = 5/6 and the block holds only 5, 5/2, 5/4 (= 6, 3, 1.5 times s*): the
    ideal quantizer reproduces every element (grid = dead = 0), while the floor scale 2^0 puts
    5 on the E2M1 grid of step 2 around it (5 -> 4, ties to even): only the scale term."""
    v = [5.0, -5.0, 2.5, -2.5, 1.25, -1.25] * 5 + [5.0, 1.25]
    sc, dd, gr, d = _parts(v)
    assert dd == 0 and gr == 0 and sc > 0
    assert float(d.scale.reshape(-1)[0]) == 4.0 - 5.0
