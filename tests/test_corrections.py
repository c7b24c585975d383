"""Corrections (mxref.corrections): macro-block scaling, outlier fallback, Four-over-Six NVFP4
and the AQN schedule, each against an independent implementation (Fractions, numpy float32
IEEE arithmetic, ml_dtypes casts, hand-computed values) plus the demonstrations of what each
correction does to the error components."""
import math
import os
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

import mxref  # noqa: E402
from mxref import corrections as C  # noqa: E402
import mxref.decompose  # noqa: E402
D = sys.modules["mxref.decompose"]  # the module (mxref.decompose is also the function)
from mxref.errors import BlockSizeError, ProfileConflictError  # noqa: E402

M_ELEM = {"mxfp4": Fraction(6), "mxfp6_e2m3": Fraction(15, 2), "mxfp8_e4m3": Fraction(448),
          "mxint8": Fraction(127, 64)}
ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp8_e4m3": "e4m3", "mxint8": "int8"}
COMPONENTS = ("exact_scale", "exact_dead", "exact_grid")


def fval(b):
    """Exact Fraction of fp32 bits (finite)."""
    s, m = O.fp32_bits_to_value(int(b))
    return -m if s else m


# ==== macro-block scaling ==================================================================
def oracle_macro_scale(amax: Fraction, m_max: Fraction, p: int) -> Fraction:
    """The significand of amax / M rounded up to p bits (1 for amax 0)."""
    if amax == 0:
        return Fraction(1)
    r = amax / m_max
    sig = r / O.pow2(O.floor_log2(r))
    return Fraction(math.ceil(sig * 2 ** (p - 1)), 2 ** (p - 1))


def macro_inputs():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 256)) * np.exp(rng.standard_normal((6, 1)) * 4)).astype(np.float32)
    x[0, :128] = 0.0                                               # all-zero macro block
    x[1, 5] = 6.0 * 2.0 ** 3                                       # amax = M 2^k: S_M = 1
    x[1, 130] = np.float32(6 * (2 - 2.0 ** -20))                   # significand just below 2
    x[2, :128] = np.float32(2.0 ** -140) * (1 + np.arange(128) % 7)  # subnormal amax
    x[3, 7] = -3.0e38
    x[4, 200] = np.float32(2.0 ** 20)                              # power-of-two amax
    return x


@pytest.mark.parametrize("dtype,p", list(C.MACRO_SCALE_DTYPES.items()))
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3", "mxfp8_e4m3", "mxint8"])
def test_macro_scale_is_the_significand_rounded_up(fmt, dtype, p):
    x = macro_inputs()
    mb = C.quantize_macroblock(x, fmt, macro=128, macro_scale_dtype=dtype)
    assert mb.macro_scales.shape == (6, 2) and mb.macro_scales.dtype == np.float32
    for r in range(6):
        for j in range(2):
            amax = max(abs(fval(b)) for b in x[r, 128 * j:128 * (j + 1)].view(np.uint32))
            want = oracle_macro_scale(amax, M_ELEM[fmt], p)
            assert Fraction(float(mb.macro_scales[r, j])) == want, (r, j)
            assert 1 <= want <= 2
            if amax:       # rounding up: the macro maximum maps to at most M 2^k
                k = O.floor_log2(amax / M_ELEM[fmt])
                assert amax / want <= M_ELEM[fmt] * O.pow2(k)
    bits = mb.macro_scales.view(np.uint32)
    if dtype == "bfloat16":
        assert np.array_equal(mb.macro_scale_bits.astype(np.uint32) << 16, bits)
    elif dtype == "e4m3":
        assert np.array_equal(mxref.formats.E4M3.value_table[mb.macro_scale_bits],
                              mb.macro_scales.astype(np.float64))
    else:
        assert np.array_equal(mb.macro_scale_bits, bits)


def test_macro_division_is_one_ieee_fp32_division():
    x = macro_inputs()
    x[5, :8] = [np.nan, np.inf, -np.inf, -0.0, 1e-45, -3e-39, 3.4e38, 1.0]
    mb = C.quantize_macroblock(x, "mxfp4", macro=64, macro_scale_dtype="float32")
    s = np.repeat(mb.macro_scales, 64, axis=1)
    with np.errstate(invalid="ignore"):
        want = x / s                                  # numpy float32 / float32: IEEE RNE
    got = mb.scaled_bits.view(np.float32)
    fin = np.isfinite(want)
    assert np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(mb.codes, mxref.quantize(got, "mxfp4").codes)


def test_macro_dequantize_is_exact_product():
    x = macro_inputs()[:, :128]
    mb = C.quantize_macroblock(x, "mxfp6_e2m3", macro="row", macro_scale_dtype="bfloat16")
    assert mb.macro == 128 and mb.macro_scales.shape == (6, 1)
    ex = mb.dequantize_exact()
    fp = mb.dequantize()
    for r in range(6):
        sm = Fraction(float(mb.macro_scales[r, 0]))
        for i in range(0, 128, 5):
            v = O.decode_element(int(mb.codes[r, i]), "e2m3")
            want = (-v[1] if v[0] else v[1]) * O.pow2(int(mb.scales[r, i // 32]) - 127) * sm
            assert Fraction(float(ex[r, i])) == want
            assert fp[r, i].view(np.uint32) == O.value_to_fp32_bits(int(want < 0), abs(want))


def test_macro_never_clips_the_macro_maximum():
    x = D.synthetic("outlier", (64, 1024), 4)
    for rule in ("floor", "rceil", "even"):
        prof = mxref.get_profile("ocp").replace(scale_rule=rule)
        d = C.decompose_macroblock(x, "mxfp4", prof, macro=256)
        a = np.abs(x).reshape(64, 4, 256)
        at_max = (a == a.max(-1, keepdims=True)).reshape(64, 1024)
        assert not (d.saturated & at_max).any(), rule


def test_macro_changes_only_the_scale_component():
    x = D.synthetic("student-t3", (32, 512), 5)
    plain = D.decompose(x, "mxfp4")
    for macro in (32, 128, "row"):
        d = C.decompose_macroblock(x, "mxfp4", macro=macro)
        for c in ("exact_dead", "exact_grid", "deadzone"):
            assert np.array_equal(getattr(d, c), getattr(plain, c)), (macro, c)
        assert not np.array_equal(d.exact_scale, plain.exact_scale)
        lhs = d.exact_scale + (d.exact_dead + d.exact_grid)
        assert np.array_equal(lhs, 3 * d.q - 3 * d.x)
        assert np.array_equal(d.q, C.quantize_macroblock(x, macro=macro).dequantize_exact())


def _scale_energy(dec):
    return float((dec.scale[~dec.special] ** 2).sum())


def test_macro_demonstration_scale_energy_removed():
    """macro = block size makes every block scale the ideal one (to 24 bits): all of the
    scale-bias energy goes; coarser macro blocks fix only the block holding the macro
    maximum, so less goes, and least for whole rows. Numbers: docs/decompose.md."""
    for dist in ("gaussian", "outlier"):
        x = D.synthetic(dist, (256, 1024), 0)
        base = _scale_energy(D.decompose(x, "mxfp4"))
        removed = {m: 1 - _scale_energy(C.decompose_macroblock(x, macro=m)) / base
                   for m in (32, 128, 256, "row")}
        assert removed[32] > 1 - 1e-9, (dist, removed)
        assert removed[32] > removed[128] > removed[256] > removed["row"], (dist, removed)


@pytest.mark.parametrize("call,err,msg", [
    (lambda: C.quantize_macroblock(np.ones(64, np.float32), macro=48), C.CorrectionConfigError,
     "multiple of the block size 32"),
    (lambda: C.quantize_macroblock(np.ones(64, np.float32), macro=16), C.CorrectionConfigError,
     "macro=16"),
    (lambda: C.quantize_macroblock(np.ones(64, np.float32), "nvfp4", "te_nvfp4"),
     ProfileConflictError, "E8M0"),
    (lambda: C.quantize_macroblock(np.ones(64, np.float32), macro_scale_dtype="fp16"),
     C.CorrectionConfigError, "macro_scale_dtype"),
    (lambda: C.quantize_macroblock(np.zeros(0, np.float32)), D.EmptyTensorError, "empty"),
])
def test_macro_bad_arguments(call, err, msg):
    with pytest.raises(err, match=msg):
        call()


# ==== outlier fallback =====================================================================
def test_bf16_rounding_matches_ml_dtypes():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    edge = np.array([0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3F80_8001, 0x7F7FFFFF, 0x7F7F8000,
                     0x7F7F7FFF, 0x7F800000, 0xFF800000, 0x00008000, 0x00018000, 0x80000000,
                     0x00000001, 0x007FFFFF], dtype=np.uint32)
    bits = np.concatenate([bits, edge, edge | np.uint32(0x80000000)])
    got = C.bf16_rne_bits(bits)
    f = bits.view(np.float32)
    with np.errstate(invalid="ignore"):
        want = f.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(f)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()


def oracle_flags(row_bits, fmt, tau, rho, bs=32):
    """Independent flags: Python floats, sorted lists and the Fraction deadzone test."""
    out = []
    m_max = M_ELEM[fmt]
    for lo in range(0, len(row_bits), bs):
        blk = [int(b) for b in row_bits[lo:lo + bs]]
        if any((b & 0x7FFFFFFF) >= 0x7F800000 for b in blk):
            out.append(False)
            continue
        mags = sorted(abs(fval(b)) for b in blk)
        amax = mags[-1]
        if amax == 0:
            out.append(False)
            continue
        med = mags[(len(mags) - 1) // 2]
        n_dead = sum(1 for a in mags if a != 0 and
                     O.decode_element(O.round_to_element(0, a * m_max / amax, ELEM[fmt]),
                                      ELEM[fmt])[1] == 0)
        flag = (tau is not None and float(amax) > tau * float(med)) or \
            (rho is not None and n_dead > rho)
        out.append(flag)
    return out


def test_flagging_matches_independent_rule():
    x = D.synthetic("outlier", (24, 256), 1)
    x[0, :32] = 0.0
    x[1, 3] = np.nan
    x[2, :32] = np.where(np.arange(32) < 20, 0.0, x[2, :32])      # median 0
    for fmt, tau, rho in (("mxfp4", 10.0, 8), ("mxfp4", 4.0, None), ("mxfp8_e4m3", None, 0),
                          ("mxint8", 6.5, 3)):
        fb = C.quantize_outlier_fallback(x, fmt, rule="block", tau=tau, rho=rho)
        for r in range(24):
            assert list(fb.flagged[r]) == oracle_flags(x[r].view(np.uint32), fmt, tau, rho), \
                (fmt, tau, rho, r)


def test_block_rule_keeps_flagged_blocks_in_bf16():
    x = D.synthetic("outlier", (64, 512), 2)
    fb = C.quantize_outlier_fallback(x, rule="block")
    d = C.decompose_outlier_fallback(x, rule="block")
    plain = D.decompose(x, "mxfp4")
    pt = np.repeat(fb.flagged, 32, axis=1)
    assert fb.flagged.sum() > 5 and np.array_equal(fb.passthrough, pt)
    assert np.array_equal(d.passthrough, pt)
    bf = C.bf16_rne_bits(x.view(np.uint32))
    assert np.array_equal(fb.residual_bits[pt], bf[pt])
    deq = fb.dequantize()
    assert np.array_equal(deq[pt], (bf[pt].astype(np.uint32) << 16).view(np.float32))
    assert np.array_equal(deq[~pt], fb.mx.dequantize()[~pt])
    assert np.all(d.exact_scale[pt] == 0) and np.all(d.exact_dead[pt] == 0)
    assert not d.deadzone[pt].any() and not d.saturated[pt].any()
    for i in np.flatnonzero(pt.reshape(-1))[::37]:
        want = 3 * (fval(bf.reshape(-1)[i].astype(np.uint32) << 16) - fval(x.reshape(-1)[i]
                                                                           .view(np.uint32)))
        assert Fraction(float(d.exact_grid.reshape(-1)[i])) == want
    for c in COMPONENTS + ("deadzone", "saturated", "zeroed", "q"):
        assert np.array_equal(getattr(d, c)[~pt], getattr(plain, c)[~pt]), c
    assert np.isnan(d.s[fb.flagged]).all() and np.isnan(d.s_ratio[fb.flagged]).all()


def test_topk_rule_keeps_the_k_largest_and_requantizes_the_rest():
    x = D.synthetic("outlier", (64, 512), 3)
    for k in (1, 3):
        fb = C.quantize_outlier_fallback(x, rule="topk", k=k, tau=10.0, rho=None)
        d = C.decompose_outlier_fallback(x, rule="topk", k=k, tau=10.0, rho=None)
        blocks = np.abs(x).reshape(64, 16, 32)
        kept = fb.passthrough.reshape(64, 16, 32)
        for r, j in zip(*np.nonzero(fb.flagged)):
            order = sorted(range(32), key=lambda i: (-blocks[r, j, i], i))[:k]
            assert sorted(np.flatnonzero(kept[r, j])) == sorted(order)
        assert kept.sum() == k * fb.flagged.sum()
        rest = np.where(fb.passthrough, np.float32(0), x)
        ref = D.decompose(rest, "mxfp4")                 # the rest, decomposed on its own
        pt = fb.passthrough
        for c in COMPONENTS + ("deadzone", "saturated"):
            assert np.array_equal(getattr(d, c)[~pt], getattr(ref, c)[~pt]), c
        assert np.array_equal(d.s[~fb.flagged], ref.s[~fb.flagged])


def test_fallback_demonstration_deadzone_and_scale_energy():
    """Outlier data: the block rule removes all deadzone and scale energy of flagged blocks,
    top-1 nearly all of the deadzone; unflagged blocks are untouched (bit for bit)."""
    x = D.synthetic("outlier", (256, 1024), 0)
    b0 = D.decompose(x, "mxfp4").block_stats()
    for rule in ("block", "topk"):
        fb = C.quantize_outlier_fallback(x, rule=rule)
        b = C.decompose_outlier_fallback(x, rule=rule).block_stats()
        f = fb.flagged
        dead0, dead = b0["energy_dead"][f].sum(), b["energy_dead"][f].sum()
        scale0, scale = b0["energy_scale"][f].sum(), b["energy_scale"][f].sum()
        assert dead0 > 0.1 * b0["energy_dead"].sum()             # outliers own the deadzone
        if rule == "block":
            assert dead == 0 and scale == 0
        else:
            assert dead < 0.05 * dead0 and scale < 0.2 * scale0
        for c in ("energy_scale", "energy_dead", "energy_grid"):
            assert np.array_equal(b[c][~f], b0[c][~f]), (rule, c)
        assert b["energy_error"].sum() < b0["energy_error"].sum()


@pytest.mark.parametrize("kw,msg", [
    ({"rule": "median"}, "rule='median'"), ({"tau": -1.0}, "tau=-1.0"),
    ({"tau": float("nan")}, "tau=nan"), ({"rho": -1}, "rho=-1"), ({"k": 0}, "k=0"),
    ({"k": 33}, r"k=33 must be an int in \[1, 32\]"), ({"rho": 2.5}, "rho=2.5"),
])
def test_fallback_bad_arguments(kw, msg):
    with pytest.raises(C.CorrectionConfigError, match=msg):
        C.quantize_outlier_fallback(np.ones(64, np.float32), **kw)


# ==== Four-over-Six NVFP4 ==================================================================
def edge_nvfp4():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    x[0, :16] = 0.0
    x[1, :16] = [0, -0.0, 1e-45, -1e-40, 6.0, 4.0, 3.0, 5.0, 0.25, 0.75, 2.5, 1.75, 3.5, -6, 1, 2]
    x[2, 16:32] = np.float32(3e38) * np.linspace(-1, 1, 16, dtype=np.float32)
    x[3, 40] = np.float32(2.0 ** -130)
    return x


@pytest.mark.parametrize("profile", ["ocp", "te_nvfp4"])
def test_map_to_six_with_bound_448_is_mxref_quantize(profile):
    # te_nvfp4: TE's 4over6 map-to-6 scale fl(fl(b/6) * S_enc) and its plain NVFP4 scale
    # fl(b * fl(S_enc * fl(1/6))) differ only at E4M3 midpoints, which these inputs avoid
    for x in (edge_nvfp4(), D.synthetic("student-t3", (32, 128), 1)):
        mx = C.quantize_nvfp4_4over6(x, profile, select="always6", scale_bound=448)
        ref = mxref.quantize(x, "nvfp4", profile)
        assert np.array_equal(mx.codes, ref.codes) and np.array_equal(mx.scales, ref.scales)
        assert mx.tensor_scale.view(np.uint32) == np.float32(ref.tensor_scale).view(np.uint32)
        assert (mx.meta["four_over_six"] == 6).all()
    te = edge_nvfp4()
    te[4, 3], te[4, 20] = np.nan, np.inf                          # te: NaN ignored, Inf -> max
    mx = C.quantize_nvfp4_4over6(te, "te_nvfp4", select="always6", scale_bound=448)
    ref = mxref.quantize(te, "nvfp4", "te_nvfp4")
    assert np.array_equal(mx.codes, ref.codes) and np.array_equal(mx.scales, ref.scales)


def fraction_4over6_exact(row_bits, t, divisor):
    """Oracle: (scale codes, codes, exact SSE, exact SAE) per block for the exact order."""
    out = []
    for lo in range(0, len(row_bits), 16):
        blk = [int(b) for b in row_bits[lo:lo + 16]]
        vals = [fval(b) for b in blk]
        amax = max(abs(v) for v in vals)
        sc = O.round_to_element(0, amax / (divisor * t), "e4m3") if amax else 0
        s = O.decode_element(sc, "e4m3")[1]
        codes, sse, sae = [], Fraction(0), Fraction(0)
        for b, v in zip(blk, vals):
            c = O.round_to_element(b >> 31, abs(v) / (s * t), "e2m1") if s else (b >> 31) << 3
            codes.append(c)
            dv = O.decode_element(c, "e2m1")
            e = (-dv[1] if dv[0] else dv[1]) * s * t - v
            sse += e * e
            sae += abs(e)
        out.append((sc, codes, sse, sae))
    return out


@pytest.mark.parametrize("bound", [256, 448])
@pytest.mark.parametrize("select", ["mse", "mae"])
def test_four_over_six_exact_order_matches_fraction_oracle(bound, select):
    x = np.concatenate([edge_nvfp4(), D.synthetic("laplace", (8, 64), 2)])
    prof = mxref.get_profile("ocp")
    mx = C.quantize_nvfp4_4over6(x, prof, select=select, scale_bound=bound)
    gamax = max(abs(fval(b)) for b in x.view(np.uint32).reshape(-1))
    t = O.fp32_bits_to_value(O.value_to_fp32_bits(0, gamax / (6 * bound)))[1]
    assert Fraction(float(mx.tensor_scale)) == t
    key = 2 if select == "mse" else 3
    for r in range(x.shape[0]):
        six = fraction_4over6_exact(x[r].view(np.uint32), t, 6)
        four = fraction_4over6_exact(x[r].view(np.uint32), t, 4)
        for j, (a6, a4) in enumerate(zip(six, four)):
            pick4 = a4[key] < a6[key]                              # ties -> map-to-6
            want = a4 if pick4 else a6
            assert mx.meta["four_over_six"][r, j] == (4 if pick4 else 6), (r, j)
            assert mx.scales[r, j] == want[0], (r, j)
            assert list(mx.codes[r, 16 * j:16 * j + 16]) == want[1], (r, j)


def e2m1_rne_sat(y):
    return np.clip(y, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float32)


def test_four_over_six_te_order_matches_numpy_float32():
    """TE op order, rebuilt from numpy float32 IEEE operations and ml_dtypes casts."""
    x = D.synthetic("gaussian", (16, 64), 4)
    mx = C.quantize_nvfp4_4over6(x, "te_nvfp4", select="mse", scale_bound=256)
    f = np.float32
    amax = np.abs(x).max()
    s_enc = f(1536) / amax
    t = f(1) / s_enc
    assert mx.tensor_scale == t
    deq = mx.dequantize()
    for r in range(16):
        for j in range(4):
            blk = x[r, 16 * j:16 * j + 16]
            cands = {}
            base = (np.abs(blk).max() / f(6)) * s_enc          # TE compute_scale_pair
            for k in (6, 4):
                cand = base * f(1.5) if k == 4 else base
                s = np.minimum(cand, f(448)).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
                inv = f(1) / (s * t)
                c = e2m1_rne_sat(blk * inv)
                q = c * s * t                                  # c * s exact, one rounding
                q64 = c.astype(np.float64) * s.astype(np.float64) * float(t)   # exact
                err = q64 - blk.astype(np.float64)
                cands[k] = (float((err * err).sum()), q)
            k = 4 if cands[4][0] < cands[6][0] else 6
            assert mx.meta["four_over_six"][r, j] == k
            assert np.array_equal(deq[r, 16 * j:16 * j + 16], cands[k][1])


def test_exact_fallback_comparison_agrees_with_float_path(monkeypatch):
    for x, n_min in ((edge_nvfp4(), 1), (D.synthetic("uniform", (8, 64), 5), 30)):
        for select in ("mse", "mae"):
            monkeypatch.setattr(C, "DECISION_MARGIN", 4.0)
            fast = C.quantize_nvfp4_4over6(x, "ocp", select=select)
            monkeypatch.setattr(C, "DECISION_MARGIN", float("inf"))   # every block goes exact
            slow = C.quantize_nvfp4_4over6(x, "ocp", select=select)
            assert slow.meta["exact_comparisons"] >= fast.meta["exact_comparisons"] + n_min
            assert np.array_equal(slow.meta["four_over_six"], fast.meta["four_over_six"])
            assert np.array_equal(slow.codes, fast.codes)


def test_four_over_six_zero_blocks_and_ties_choose_six():
    x = np.zeros((2, 32), np.float32)
    x[1, 16:] = 0.0
    x[1, 0] = 1.0                      # one element: both candidates represent it exactly
    mx = C.quantize_nvfp4_4over6(x, "ocp", scale_bound=448)
    assert (mx.meta["four_over_six"] == 6).all()


def test_four_over_six_demonstration():
    """4/6 lowers the block MSE; the deadzone and grid components (ideal reference) stay."""
    x = D.synthetic("gaussian", (128, 1024), 0)
    d46 = C.decompose_nvfp4_4over6(x, "te_nvfp4")
    d6 = D.decompose(x, "nvfp4", "te_nvfp4")
    always6 = C.quantize_nvfp4_4over6(x, "te_nvfp4", select="always6")
    e46 = d46.error
    err6 = always6.dequantize().astype(np.float64) - x
    assert (e46 * e46).sum() < (err6 * err6).sum()
    for c in ("exact_dead", "exact_grid", "deadzone"):
        assert np.array_equal(getattr(d46, c), getattr(d6, c))
    frac4 = (d46.meta["four_blocks"]) / d46.s.size
    assert 0.2 < frac4 < 0.8


@pytest.mark.parametrize("call,err,msg", [
    (lambda: C.quantize_nvfp4_4over6(np.ones(16, np.float32), "torchao_nvfp4"),
     ProfileConflictError, "'exact' and 'te'"),
    (lambda: C.quantize_nvfp4_4over6(np.ones(16, np.float32), select="l2"),
     C.CorrectionConfigError, "select='l2'"),
    (lambda: C.quantize_nvfp4_4over6(np.ones(16, np.float32), scale_bound=300),
     C.CorrectionConfigError, "scale_bound=300"),
    (lambda: C.quantize_nvfp4_4over6(np.ones(16, np.float32),
                                     mxref.get_profile("ocp").replace(name="b", block_size=32)),
     BlockSizeError, "16"),
])
def test_four_over_six_bad_arguments(call, err, msg):
    with pytest.raises(err, match=msg):
        call()


# ==== AQN ==================================================================================
def test_aqn_sigma_trend_hand_values():
    trend = C.aqn_sigma_trend(1e-2, 1e-4, 10)
    want = [10 ** (-2 - i / 4) for i in range(9)]        # (1e-2)^(i/8) decade steps
    assert len(trend) == 9
    for got, w in zip(trend, want):
        assert got == pytest.approx(w, rel=1e-14)
    assert trend[0] == 1e-2 and trend[4] == pytest.approx(1e-3, rel=1e-15)
    assert C.aqn_sigma_trend(5e-2, 5e-4, 2) == [5e-2]
    assert C.aqn_sigma_trend(1.0, 0.25, 3) == [1.0, 0.25]
    assert C.aqn_sigma_trend(1.0, 0.25, 4) == [1.0, 0.5, 0.25]


@pytest.mark.parametrize("step,total,stages,stage", [
    (0, 100, 10, 0), (9, 100, 10, 0), (10, 100, 10, 1), (99, 100, 10, 9), (100, 100, 10, 9),
    (150, 100, 10, 9), (11, 116, 10, 0), (12, 116, 10, 1), (115, 116, 10, 9),
    (0, 7, 2, 0), (3, 7, 2, 0), (4, 7, 2, 1), (7, 7, 2, 1),
    (5, 10, 6, 3), (1, 2, 10, 5), (4, 8, 10, 5),
])
def test_aqn_stage_boundaries(step, total, stages, stage):
    assert C.aqn_stage(step, total, stages) == stage


def test_aqn_qerl_float_boundaries_differ_where_total_over_k_rounds_up():
    # 10 / 6 -> 1.6666666666666667 > 5/3, so QeRL's step // (total / K) puts step 5 in stage 2
    assert C.aqn_stage(5, 10, 6, boundaries="qerl") == 2 and C.aqn_stage(5, 10, 6) == 3
    assert C.aqn_stage(1, 2, 10, boundaries="qerl") == 4 and C.aqn_stage(1, 2, 10) == 5
    assert C.aqn_stage(12, 116, 10, boundaries="qerl") == 1
    for total in (100, 116, 1000):
        for step in range(0, total + 1, 7):
            a, b = C.aqn_stage(step, total, 10), C.aqn_stage(step, total, 10, boundaries="qerl")
            assert abs(a - b) <= 1


def test_aqn_sigma_schedule():
    trend = C.aqn_sigma_trend()
    assert C.aqn_sigma(0, 1000) == 0.0 and C.aqn_sigma(99, 1000) == 0.0
    assert C.aqn_sigma(100, 1000) == trend[0] == 1e-2
    assert C.aqn_sigma(999, 1000) == trend[8]
    assert C.aqn_sigma(3, 7, 0.5, 0.1, stages=2) == 0.0
    assert C.aqn_sigma(4, 7, 0.5, 0.1, stages=2) == 0.5
    with pytest.raises(C.CorrectionConfigError, match="stages=1"):
        C.aqn_sigma(0, 10, stages=1)
    with pytest.raises(C.CorrectionConfigError, match="total_steps=0"):
        C.aqn_sigma(0, 0)
    with pytest.raises(C.CorrectionConfigError, match="step=-1"):
        C.aqn_sigma(-1, 10)
    with pytest.raises(C.CorrectionConfigError, match="sigma_end=0"):
        C.aqn_sigma(5, 10, sigma_end=0)
    with pytest.raises(C.CorrectionConfigError, match="boundaries"):
        C.aqn_stage(5, 10, boundaries="round")


def test_aqn_apply_numpy():
    w = np.ones(4096, np.float32)
    out = C.aqn_apply(w, 0.01, np.random.default_rng(1))
    want = w + np.random.default_rng(1).normal(0.0, 0.01, 4096).astype(np.float32)
    assert out is not w and np.array_equal(out, want) and np.all(w == 1)
    n = out.astype(np.float64) - 1
    assert abs(n.std() - 0.01) < 5 * 0.01 / (2 * 4096) ** 0.5
    wb = np.ones(8, ml_dtypes.bfloat16)
    g = np.random.default_rng(2)
    same = C.aqn_apply(wb, 0.5, g, inplace=True)
    assert same is wb and wb.dtype == ml_dtypes.bfloat16
    nb = np.random.default_rng(2).normal(0, 0.5, 8).astype(np.float32).astype(ml_dtypes.bfloat16)
    assert np.array_equal(wb, (np.ones(8, ml_dtypes.bfloat16) + nb))
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(C.aqn_apply(w, 0.0, g1), w)              # sigma 0 draws nothing
    assert g1.random() == g2.random()
    with pytest.raises(C.GeneratorTypeError, match="numpy.random.Generator"):
        C.aqn_apply(w, 0.1, 42)
    with pytest.raises(C.CorrectionConfigError, match="sigma=-0.1"):
        C.aqn_apply(w, -0.1, np.random.default_rng(0))
    with pytest.raises(C.GeneratorTypeError, match="not floating"):
        C.aqn_apply(np.ones(3, np.int32), 0.1, np.random.default_rng(0))


def test_aqn_apply_torch():
    import torch

    w = torch.ones(256, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    out = C.aqn_apply(w, 0.02, g)
    want = torch.ones(256, dtype=torch.bfloat16) + torch.normal(
        0.0, 0.02, size=(256,), generator=torch.Generator().manual_seed(7),
        dtype=torch.float32).to(torch.bfloat16)
    assert torch.equal(out, want) and torch.all(w == 1)
    w2 = torch.nn.Parameter(torch.ones(16))
    back = C.aqn_apply(w2, 0.1, torch.Generator().manual_seed(0), inplace=True)
    assert back is w2 and not torch.all(w2 == 1)
    with pytest.raises(C.GeneratorTypeError, match="torch.Generator"):
        C.aqn_apply(w, 0.1, np.random.default_rng(0))
    with pytest.raises(C.GeneratorTypeError, match="numpy array or a torch tensor"):
        C.aqn_apply([1.0, 2.0], 0.1, np.random.default_rng(0))
