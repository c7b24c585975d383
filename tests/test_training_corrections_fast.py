"""The sort-free torch pieces of the decomp-fixed and ms-fp4 operands, held to mxref.

``quant._flag_blocks`` / ``_outlier_mask`` (count instead of a per-block sort; argmax for
k = 1), ``_macro_scales`` (fp32 amax), ``_occ_bounds`` (two topk selections instead of
kthvalue) and ``_e2m1_codes`` (float-domain E2M1 RNE instead of torch_emu.convert) are
rewrites for speed. Expected values come from mxref.corrections (Numba, integer domain), from
mxref.quantize (the vector oracle's block-of-two trick, as the in-run validation) and from
numpy's sort, never from mxkernels.training; the inputs are the ones random data does not
hit: ratios exactly at tau and one ulp either side, tied maxima, ragged blocks, NaN / Inf
blocks, zero blocks, subnormals, E2M1 ties and tie +-1 ulp, saturation, -0.
"""
import math

import numpy as np
import pytest
import torch

import mxref
from mxref import corrections as C
from mxkernels.training import quant as Q

OCP = mxref.get_profile("ocp")


def _ulp(x, d):
    return np.nextafter(np.float32(x), np.float32(np.inf if d > 0 else -np.inf))


def _outlier_rows(block, tau, seed=0):
    """Rows of blocks built at the edges of the tau rule and the top-k choice."""
    g = np.random.default_rng(seed)
    rows = []

    def blk():
        return (g.standard_normal(block) * 0.1).astype(np.float32)

    med_hi = np.float32(0.0)
    for case in range(14):
        b = np.abs(blk()) + np.float32(0.01)
        b[g.permutation(block)[: block // 2]] *= np.float32(0.5)
        b *= np.where(g.random(block) < 0.5, 1, -1).astype(np.float32)
        srt = np.sort(np.abs(b))
        med = srt[(block - 1) // 2]
        if case in (0, 1, 2):            # amax exactly tau * med, and one ulp either side
            # the lower median (16th smallest of 32) is 3/64 whatever the last element is, as
            # long as it is the largest; tau * 3/64 is exact in fp32 for the taus with a short
            # significand (10, 3, 0), so the block sits exactly on the rule's edge
            med = np.float32(3 / 64)
            others = np.concatenate([g.uniform(0.01, 0.04, 15), [med], g.uniform(0.05, 0.1, 15)])
            target = np.float32(float(tau) * float(med))
            last = [target, _ulp(target, -1), _ulp(target, +1)][case]
            b = np.concatenate([others, [max(last, np.float32(0.1))]]).astype(np.float32)
            b = b[g.permutation(block)] * np.where(g.random(block) < 0.5, 1, -1)
            b = b.astype(np.float32)
        elif case == 3:                  # tied maxima: the lower index is the outlier
            b[2] = b[9] = np.float32(tau * 50 * med)
        elif case == 4:                  # NaN in an outlier block: never flagged
            b[0], b[1] = np.float32(tau * 50 * med), np.nan
        elif case == 5:                  # +Inf in the block
            b[4] = np.inf
        elif case == 6:                  # all zero (with a -0)
            b[:] = 0
            b[1] = -0.0
        elif case == 7:                  # one nonzero: median 0, flagged
            b[:] = 0
            b[7] = np.float32(-3.0)
        elif case == 8:                  # subnormal median
            b = (b * np.float32(1e-39)).astype(np.float32)
            b[5] = np.float32(1e-30)
        elif case == 9:                  # an outlier far out, negative
            b[11] = -np.float32(1e4)
        elif case == 10:                 # half the block equal to the median
            b[: block // 2 + 1] = np.float32(0.25)
            b[-1] = np.float32(0.25 * tau)
        elif case == 11:
            b[-1] = _ulp(np.float32(0.25 * tau), +1)
            b[: block // 2 + 1] = np.float32(0.25)
        rows.append(b)
        med_hi = max(med_hi, med)
    return np.concatenate(rows)[None, :].astype(np.float32)


@pytest.mark.parametrize("tau", [10.0, 3.0, 0.0, 1.0 / 3.0])
@pytest.mark.parametrize("rule, k", [("topk", 1), ("topk", 2), ("block", 1)])
@pytest.mark.parametrize("ragged", [0, 5, 31])
def test_outlier_mask_is_mxref_passthrough(tau, rule, k, ragged):
    x = _outlier_rows(32, tau)
    x = np.concatenate([x, x[:, ::-1], -x], axis=0)
    if ragged:                      # the last block has 32 - ragged real elements
        x = x[:, : x.shape[1] - ragged]
    want = C.quantize_outlier_fallback(x, "mxfp4", OCP, rule=rule, tau=tau, rho=None, k=k,
                                       axis=-1).passthrough
    got = Q._outlier_mask(torch.from_numpy(x.copy()), 32, rule, tau, k).numpy()
    assert want.any() and not want.all()            # the cases reach both answers
    np.testing.assert_array_equal(got, want)


def test_outlier_mask_tau_edges_decide_as_mxref():
    """The three tau-edge blocks of _outlier_rows: exactly tau * med is not an outlier, one
    ulp above is (the count rewrite must keep the strict inequality)."""
    x = _outlier_rows(32, 10.0)[:, : 3 * 32]
    flagged = Q._outlier_mask(torch.from_numpy(x.copy()), 32, "block", 10.0, 1).numpy()
    per_block = flagged.reshape(3, 32).any(-1).tolist()
    assert per_block == [False, False, True]


def test_flag_blocks_planted_bug_is_caught():
    """The check above can fail: a non-strict comparison (<=) flags the exact-tau block."""
    x = _outlier_rows(32, 10.0)[:, :32]
    t = torch.from_numpy(x.copy())
    _, ok = Q._flag_blocks(t, 32, 10.0)
    a = t.abs().reshape(1, 1, 32)
    amax = a.amax(-1)
    bad = ((10.0 * a.double()) <= amax.double().unsqueeze(-1)).sum(-1) >= 16
    assert not bool(ok.item()) and bool(bad.item())


def _macro_rows():
    g = np.random.default_rng(3)
    x = (g.standard_normal((6, 300)) * np.exp2(g.integers(-20, 20, (6, 300)))).astype(np.float32)
    x[0, :128] = 0.0
    x[0, 5] = -0.0                               # an all-zero macro-block with -0
    x[1, 3] = np.nan                             # NaN and Inf read as 0 in the amax
    x[1, 130] = -np.inf
    x[2, :128] = (g.standard_normal(128) * 1e-40).astype(np.float32)   # subnormal amax
    x[3, 7] = np.float32(3 * 2.0 ** 10)          # amax an odd multiple (m_odd = 3)
    x[4, 200] = _ulp(np.float32(2.0 ** 8), -1)   # amax = 2^k - 1 ulp
    x[5, 260] = np.float32(np.finfo(np.float32).max)
    return x


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "e4m3"])
@pytest.mark.parametrize("macro", [128, 64])
def test_macro_scales_are_mxref_macro_scales(dtype, macro):
    from mxref.decompose import grid_facts
    x = _macro_rows()
    want = C.quantize_macroblock(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), "mxfp4",
                                 OCP, macro=macro, axis=-1,
                                 macro_scale_dtype=dtype).macro_scales
    got = Q._macro_scales(torch.from_numpy(x), macro,
                          int(grid_facts(mxref.get_format("mxfp4")).m_odd), Q._MACRO_P[dtype])
    np.testing.assert_array_equal(got.numpy().view(np.uint32),
                                  np.asarray(want, np.float32).view(np.uint32))


def _np_bounds(x, q):
    s = np.sort(x.reshape(-1))                   # NaN sorts last, as torch's order
    n = s.size
    khi = min(n, max(1, int(math.ceil(q * n))))
    return s[n - khi], s[khi - 1]


def _occ_case(case: str) -> np.ndarray:
    """The order-statistic inputs (also test_triton_corrections')."""
    g = np.random.default_rng(7)
    x = g.standard_normal((37, 53)).astype(np.float32)
    if case == "ties":
        x = np.round(x * 2).astype(np.float32)
    elif case == "nan_few":
        x.reshape(-1)[g.permutation(x.size)[:3]] = np.nan
    elif case == "nan_many":
        x.reshape(-1)[g.permutation(x.size)[: x.size // 2 + 40]] = np.nan
    elif case == "nan_negative":           # NaN with the sign bit set sorts last too
        x.reshape(-1)[:20] = -np.float32(np.nan)
    elif case == "tiny":
        x = x[:1, :3]
    elif case == "one":
        x = x[:1, :1]
    elif case == "inf":
        x.reshape(-1)[:30] = np.inf
        x.reshape(-1)[30:60] = -np.inf
    elif case == "zeros":                  # +-0 at the order statistics
        x = np.where(np.abs(x) < 2.2, np.float32(0.0), x).astype(np.float32)
        x.reshape(-1)[::3] = -np.float32(0.0)
    elif case == "subnormal":
        x = (x * np.float32(1e-42)).astype(np.float32)
    elif case == "large":                  # several programs, each over several blocks
        x = np.round(g.standard_normal((211, 203)) * 64).astype(np.float32)
    elif case == "same_digit":             # keys sharing their top bytes: the deeper passes decide
        x = np.float32(1.0) + np.arange(x.size, dtype=np.float32).reshape(x.shape) * \
            np.float32(2.0 ** -23)
        x = g.permutation(x.reshape(-1)).reshape(37, 53).astype(np.float32)
    return np.ascontiguousarray(x)


@pytest.mark.parametrize("case", ["normal", "ties", "nan_few", "nan_many", "tiny", "inf"])
@pytest.mark.parametrize("q", [0.99, 0.999, 0.51])
def test_occ_bounds_are_the_sorted_order_statistics(case, q):
    x = _occ_case(case)
    lo, hi = Q._occ_bounds(torch.from_numpy(x), q)
    wlo, whi = _np_bounds(x, q)
    np.testing.assert_array_equal(np.float32(lo.item()), wlo)
    np.testing.assert_array_equal(np.float32(hi.item()), whi)


def _e2m1_inputs():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    pts = []
    for a, b in zip(grid, grid[1:]):
        for v in (a, (a + b) / 2, b):           # grid points and ties, and one ulp either side
            f = np.float32(v)
            pts += [f, _ulp(f, -1), _ulp(f, +1)]
    pts += [6.5, 7.0, 8.0, 1e30, np.inf, np.nan, 1e-40, 1e-45, 0.25]
    x = np.array(pts, np.float32)
    g = np.random.default_rng(11)
    return np.concatenate([x, -x, (g.standard_normal(4000) * 3).astype(np.float32)])


def test_e2m1_codes_are_the_mxref_element_conversion():
    """|x| < 8 against mxref.quantize at scale 2^0 (a companion 4.0 in a block of two, as the
    in-run validation's vector oracle); NaN, Inf and |x| >= 8 (saturated) against
    torch_emu.convert, the path this replaces (the oracle poisons NaN / Inf blocks and scales
    a block of |x| >= 8 above 2^0)."""
    x = _e2m1_inputs()
    fin = np.abs(x) < 8          # False for NaN
    got_c, got_v = Q._e2m1_codes(torch.from_numpy(x))
    pair = np.stack([x[fin], np.full(fin.sum(), 4.0, np.float32)], axis=-1)
    mx = mxref.quantize(pair, "mxfp4", "ocp", axis=-1, block_size=2)
    assert (mx.scales == 127).all()
    np.testing.assert_array_equal(got_c.numpy()[fin], mx.codes[..., 0])
    want_v = mxref.dequantize(mx)[..., 0].astype(np.float32)
    np.testing.assert_array_equal(got_v.numpy()[fin].view(np.uint32), want_v.view(np.uint32))
    from mxkernels import torch_emu
    ref = torch_emu.convert(torch.from_numpy(x[~fin]), fmt="mxfp4", profile="ocp")
    np.testing.assert_array_equal(got_c.numpy()[~fin], ref.numpy())
    lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6], np.float32)
    want = lut[ref.numpy() & 7] * np.where(ref.numpy() & 8, np.float32(-1), np.float32(1))
    np.testing.assert_array_equal(got_v.numpy()[~fin].view(np.uint32), want.view(np.uint32))
    assert (~fin).sum() >= 10 and (ref.numpy() & 7 == 7).sum() >= 8


def test_e2m1_codes_planted_bug_is_caught():
    """Round-half-away instead of half-even changes the ties: the oracle comparison sees it."""
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    pair = np.stack([x, np.full(x.size, 4.0, np.float32)], axis=-1)
    want = mxref.quantize(pair, "mxfp4", "ocp", axis=-1, block_size=2).codes[..., 0]
    got, _ = Q._e2m1_codes(torch.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), want)
    a = torch.from_numpy(x).abs()
    q = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    away = torch.floor(a / q + 0.5) * q
    assert not torch.equal(away, torch.from_numpy(mxref.dequantize(
        mxref.quantize(pair, "mxfp4", "ocp", axis=-1, block_size=2))[..., 0].astype(np.float32)))
