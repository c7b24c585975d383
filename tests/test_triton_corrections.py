"""mxkernels/triton_corrections.py: the decomp-fixed operand in one launch and the OCC clamp
bounds by radix select, held to mxref.

Expected values come from mxref.corrections (quantize_outlier_fallback, quantize_macroblock,
bf16_rne_bits: Numba, integer domain) and numpy's sort, never from mxkernels. The inputs are the
edge blocks of test_training_corrections_fast (ratios exactly at tau and one ulp either side,
tied maxima, NaN / Inf / zero / subnormal blocks, amax = 2^k - 1 ulp, the fp32 maximum) and,
for the order statistics, ties, NaN of both signs, +-0 and +-Inf. CPU: the interpreter; on a GPU
the compiled kernels too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from test_training_corrections_fast import (
    _macro_rows,
    _np_bounds,
    _occ_case,
    _outlier_rows,
)

import mxref
from mxkernels.loader import load_kernels
from mxkernels.training.recipes import RECIPES
from mxref import corrections as C

SRC = Path(__file__).resolve().parents[1] / "mxkernels" / "triton_corrections.py"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DEC = RECIPES["decomp-fixed"].fprop.a          # mxfp4 ocp, topk k=1 tau 10, macro 128 bf16


@pytest.fixture(scope="module", params=DEVICES)
def tc(request):
    return load_kernels(request.param == "cpu").modules["triton_corrections"], request.param


def _expected(x: np.ndarray, spec):
    """mxref's operand (the in-run validation's recipe, validate._expected_operand)."""
    prof = mxref.get_profile(spec.profile)
    pt = None
    rest = x
    if spec.outlier is not None:
        pt = C.quantize_outlier_fallback(x, spec.fmt, prof, rule=spec.outlier,
                                         tau=float(spec.outlier_tau), rho=None,
                                         k=int(spec.outlier_k), axis=-1).passthrough
        rest = np.where(pt, np.float32(0), x).astype(np.float32)
    sm = None
    if spec.macro is not None:
        mb = C.quantize_macroblock(rest, spec.fmt, prof, macro=spec.macro, axis=-1,
                                   macro_scale_dtype=spec.macro_scale_dtype)
        s, c, sm, vals = mb.scales, mb.codes, np.asarray(mb.macro_scales, np.float32), \
            mb.dequantize()
    else:
        mx = mxref.quantize(rest, spec.fmt, prof, axis=-1)
        s, c, vals = mx.scales, mx.codes, mxref.dequantize(mx)
    vals = np.asarray(vals, np.float32)
    if pt is not None:
        kept = C.bf16_rne_bits(x.view(np.uint32))
        vals = np.where(pt, (kept.astype(np.uint32) << np.uint32(16)).view(np.float32), vals)
    return s, c, vals, pt, sm


def _edge_operand(block_rows: int = 3) -> np.ndarray:
    """Rows of _outlier_rows (tau 10) and of _macro_rows, cut to a multiple of 128 columns,
    stacked with their negatives and reversals (every edge block at several offsets)."""
    o = _outlier_rows(32, 10.0)                  # [1, 14 * 32]
    o = np.concatenate([o, o[:, ::-1], -o], axis=0)[:, :384]
    m = _macro_rows()[:, :256]
    m = np.concatenate([m, m[:, ::-1]], axis=1)[:, :384]
    g = np.random.default_rng(5)
    noise = (g.standard_normal((block_rows, 384)) *
             np.exp2(g.integers(-8, 8, (block_rows, 1)))).astype(np.float32)
    noise[0, 100] = np.float32(2000.0)           # one outlier in a normal block
    # x / S_M exactly on an E2M1 tie: amax 6 S gives S_M = S = 223 / 128 (6 S / 3 = 2 S), and
    # x = 2.5 S divides to 2.5 (the tie of 2 and 3 at block scale 2^0); a multiply by
    # fl(1 / S) misses it
    S = np.float32(223 / 128)
    tie = np.full((1, 384), 1.25, np.float32)      # no block flagged: 10 x 1.25 > 6 S
    tie[0, ::128] = np.float32(6) * S
    tie[0, 1::128] = np.float32(2.5) * S
    tie[0, 2::128] = -np.float32(2.5) * S
    return np.ascontiguousarray(np.concatenate([o, m, noise, tie], axis=0).astype(np.float32))


def _check(got, want):
    s, c, v, pt, sm = got
    ws, wc, wv, wpt, wsm = want
    np.testing.assert_array_equal(s.cpu().numpy(), ws)
    np.testing.assert_array_equal(c.cpu().numpy(), wc)
    gv = v.cpu().numpy()
    nan = np.isnan(wv)
    np.testing.assert_array_equal(np.isnan(gv), nan)
    # bits, but +-0 alike: mxref's macro-block dequantize gives +0 where a code is -0
    gb, wb = gv[~nan].view(np.uint32), wv[~nan].view(np.uint32)
    zero = (gb & 0x7FFFFFFF) == 0
    np.testing.assert_array_equal(np.where(zero, 0, gb), np.where(zero, 0, wb))
    if wpt is None:
        assert pt is None
    else:
        np.testing.assert_array_equal(pt.cpu().numpy(), wpt)
    if wsm is None:
        assert sm is None
    else:
        np.testing.assert_array_equal(sm.cpu().numpy().view(np.uint32), wsm.view(np.uint32))


SPECS = {
    "decomp-fixed": DEC,
    "outlier-only": dataclasses.replace(DEC, macro=None),
    "macro-only": dataclasses.replace(DEC, outlier=None),
    "block-rule": dataclasses.replace(DEC, outlier="block"),
    "tau-third": dataclasses.replace(DEC, outlier_tau=1.0 / 3.0),
    "macro64-f32": dataclasses.replace(DEC, macro=64, macro_scale_dtype="float32"),
    "macro256-e4m3": dataclasses.replace(DEC, macro=256, macro_scale_dtype="e4m3"),
    "mxfp8": dataclasses.replace(DEC, fmt="mxfp8_e4m3"),
    "mxfp6": dataclasses.replace(DEC, fmt="mxfp6_e2m3", macro=32),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_decomp_qdq_equals_mxref(tc, name):
    mod, dev = tc
    spec = SPECS[name]
    x = _edge_operand()
    if spec.macro == 256:
        x = np.concatenate([x, x[:, :128]], axis=1)        # 512 columns
    x = np.ascontiguousarray(x)
    want = _expected(x, spec)
    if spec.outlier is not None:
        assert want[3].any() and not want[3].all()      # both answers reached
    got = mod.decomp_qdq(torch.from_numpy(x.copy()).to(dev), spec)
    _check(got, want)


@pytest.mark.parametrize("name", ["decomp-fixed", "block-rule", "macro256-e4m3", "mxfp8"])
def test_decomp_qdq_reads_a_transposed_view(tc, name):
    """A transposed view (the backward's W^T, dy^T, x^T) is read in place, with the same
    results as mxref on the operand it views; row counts off the tile (masked) included."""
    mod, dev = tc
    spec = SPECS[name]
    x = _edge_operand()
    if spec.macro == 256:
        x = np.concatenate([x, x[:, :128]], axis=1)
    for rows in (x.shape[0], 33):
        xr = np.ascontiguousarray(np.resize(x, (rows, x.shape[1])).astype(np.float32))
        view = torch.from_numpy(np.ascontiguousarray(xr.T)).to(dev).t()
        assert not view.is_contiguous()
        np.testing.assert_array_equal(view.cpu().numpy().view(np.uint32), xr.view(np.uint32))
        got = mod.decomp_qdq(view, spec)
        assert all(g is None or g.is_contiguous() for g in got)
        _check(got, _expected(xr, spec))


def test_decomp_qdq_rows_beyond_a_tile_and_empty(tc):
    """Row counts that are not a multiple of the tile's (masked rows), one row, none."""
    mod, dev = tc
    x = _edge_operand()
    for rows in (x.shape[0], 1, 33):
        xr = np.ascontiguousarray(np.resize(x, (rows, x.shape[1])).astype(np.float32))
        _check(mod.decomp_qdq(torch.from_numpy(xr).to(dev), DEC), _expected(xr, DEC))
    s, c, v, pt, sm = mod.decomp_qdq(torch.zeros((0, 256), device=dev), DEC)
    assert v.shape == (0, 256) and s.shape == (0, 8) and sm.shape == (0, 2)


def _bf16(x: np.ndarray) -> np.ndarray:
    """fp32 x rounded to bf16 (RNE on the bits, mxref's), as fp32."""
    return (C.bf16_rne_bits(x.view(np.uint32)).astype(np.uint32) << np.uint32(16)).view(
        np.float32)


@pytest.mark.parametrize("name", ["decomp-fixed", "outlier-only", "macro-only", "block-rule",
                                  "tau-third"])
def test_decomp_qdq_reads_bf16(tc, name):
    """A bf16 operand (what the training path hands over under autocast: no fp32 copy first),
    contiguous and as a transposed view, gives mxref's results on its fp32 value; the kept
    passthrough value is the element itself."""
    mod, dev = tc
    spec = SPECS[name]
    x = _bf16(_edge_operand())
    want = _expected(x, spec)
    if spec.outlier is not None:
        assert want[3].any() and not want[3].all()
    assert not (x.view(np.uint32) & 0xFFFF).any()                   # exact in bf16
    xb = torch.from_numpy((x.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)).view(
        torch.bfloat16)                                                # the bits, no cast
    _check(mod.decomp_qdq(xb.to(dev), spec), want)
    view = xb.t().contiguous().to(dev).t()
    assert not view.is_contiguous()
    _check(mod.decomp_qdq(view, spec), want)


@pytest.mark.parametrize("shape", [(1, 1), (3, 70), (64, 64), (130, 65), (200, 1000)])
def test_transpose_contiguous_is_the_transpose(tc, shape):
    """transpose_contiguous of a transposed view of 2- or 4-byte elements (bf16, fp16, fp32
    with NaN payloads and -0: bits moved, never converted) equals torch's contiguous copy bit
    for bit (ragged tiles both ways, one element); a contiguous tensor comes back as it is;
    anything else is refused."""
    mod, dev = tc
    R, C = shape
    g = torch.Generator().manual_seed(R * 1000 + C)
    for dtype, it in ((torch.bfloat16, torch.int16), (torch.float16, torch.int16),
                      (torch.float32, torch.int32)):
        info = torch.iinfo(it)
        x = torch.randint(info.min, info.max, (C, R), generator=g, dtype=it).view(dtype)
        v = x.to(dev).t()
        y = mod.transpose_contiguous(v)
        assert y.is_contiguous() and y.dtype == dtype and y.shape == (R, C)
        assert torch.equal(y.view(it).cpu(), v.contiguous().view(it).cpu())
    c = torch.zeros((4, 6), dtype=torch.bfloat16, device=dev)
    assert mod.transpose_contiguous(c) is c
    assert mod.transpose_contiguous(c[:0].t()).shape == (6, 0)
    for bad in (torch.zeros((4, 6), dtype=torch.float64, device=dev).t(), c[:, ::2], c[None],
                torch.zeros((4, 6), dtype=torch.uint8, device=dev).t()):
        with pytest.raises(mod.KernelUnsupported):
            mod.transpose_contiguous(bad)


def test_planted_transpose_bug_is_caught(tmp_path):
    """The transpose test can fail: the store's row index off by one tile row."""
    bad = _planted(tmp_path, "tl.store(y_ptr + (c.to(tl.int64)[:, None] * n_rows + r[None, :])",
                   "tl.store(y_ptr + (c.to(tl.int64)[:, None] * n_rows + "
                   "(r[None, :] ^ 1))")
    with pytest.raises(AssertionError):
        test_transpose_contiguous_is_the_transpose((bad, "cpu"), (130, 65))


def _threshold_case(tau: float, g) -> tuple[np.ndarray, list[int]]:
    """Blocks that sit on the tau rule's boundary: amax A, 15 elements far below A / tau, 15
    between T and A (not below), and one element at T - 1 ulp (below: 16 below, flagged) or
    at T (not below: 15, not flagged), T the smallest fp32 with fl64(tau T) >= A, found here
    by a scan of the exact fl64 test. Returns the [rows, 128] operand and T - t0 per block
    (t0 = fl32(A * fl64(1 / tau)), the kernel's first guess)."""
    rows, offs = [], []
    for _ in range(8):
        blocks = []
        for below in (True, False, True, False):
            A = np.float32(g.integers(1 << 23, 1 << 24)) * np.float32(2.0 ** g.integers(-40, 20))
            t0 = int(np.float32(np.float64(A) * (1.0 / tau)).view(np.int32))
            T = next(c for c in range(t0 - 3, t0 + 4) if not (
                np.float64(tau) * np.float64(np.int32(c).view(np.float32)) < np.float64(A)))
            offs.append(T - t0)
            Tf = np.int32(T).view(np.float32)
            lo = np.float32(Tf / np.float32(4)) * g.uniform(0.5, 1.0, 15).astype(np.float32)
            hi = (Tf + (A - Tf) * g.uniform(0.0, 1.0, 15)).astype(np.float32)
            hi = np.clip(hi, Tf, A)
            edge = np.int32(T - 1 if below else T).view(np.float32)
            blk = np.concatenate([[A], lo, hi, [edge]]).astype(np.float32)
            blocks.append(g.permutation(blk) * np.where(g.random(32) < 0.5, -1, 1))
        rows.append(np.concatenate(blocks))
    return np.ascontiguousarray(np.stack(rows).astype(np.float32)), offs


def test_decomp_tau_threshold_is_exact(tc):
    """The per-block integer threshold T (fl64(tau a) < amax iff a < T) on blocks one ulp
    either side of it, for taus with many significand bits: flags exactly what mxref flags,
    with both first guesses (T = t0 and T = t0 + 1) reached."""
    mod, dev = tc
    g = np.random.default_rng(11)
    seen = set()
    for tau in (10.0, 1.0 / 0.3, float(np.pi) * 3, 7.000000000000001, 1.5, 97.31):
        x, offs = _threshold_case(tau, g)
        seen.update(offs)
        spec = dataclasses.replace(DEC, macro=None, outlier_tau=tau)
        want = _expected(x, spec)
        flagged = want[3].reshape(-1, 32).any(axis=1)
        assert flagged.any() and not flagged.all()
        _check(mod.decomp_qdq(torch.from_numpy(x.copy()).to(dev), spec), want)
    assert {0, 1} <= seen


def test_decomp_supports_and_rejects():
    from mxkernels.triton_common import KernelUnsupported
    from mxkernels.triton_corrections import decomp_qdq, decomp_supports
    assert decomp_supports(DEC, 768)
    assert not decomp_supports(DEC, 96)                  # not a multiple of the macro size
    assert not decomp_supports(dataclasses.replace(DEC, outlier_k=2))
    assert not decomp_supports(dataclasses.replace(DEC, macro="row"))
    assert not decomp_supports(dataclasses.replace(DEC, rounding="sr"))
    assert not decomp_supports(dataclasses.replace(DEC, outlier=None, macro=None))
    assert not decomp_supports(dataclasses.replace(DEC, fmt="nvfp4", profile="te_nvfp4"))
    with pytest.raises(KernelUnsupported, match="float32 or bfloat16"):
        decomp_qdq(torch.zeros((2, 128), dtype=torch.float16), DEC)
    with pytest.raises(KernelUnsupported, match="transpose of a contiguous"):
        decomp_qdq(torch.zeros((4, 256))[:, ::2], DEC)
    with pytest.raises(KernelUnsupported, match="96 columns"):
        decomp_qdq(torch.zeros((2, 96)), DEC)


@pytest.mark.parametrize("case", ["normal", "ties", "nan_few", "nan_many", "nan_negative", "tiny",
                                  "one", "inf", "zeros", "subnormal", "same_digit",
                                  "large"])
@pytest.mark.parametrize("q", [0.99, 0.999, 0.51, 1.0])
def test_occ_bounds_are_the_sorted_order_statistics(tc, case, q):
    mod, dev = tc
    x = _occ_case(case)
    lo, hi = mod.occ_bounds(torch.from_numpy(x.copy()).to(dev), q)
    wlo, whi = _np_bounds(x, q)
    for got, want in ((lo, wlo), (hi, whi)):
        g = np.float32(got.item())
        if np.isnan(want):
            assert np.isnan(g)
        else:
            assert g == want          # +-0 compare equal, as numpy's sort leaves their order


def _vector_rows() -> np.ndarray:
    """Rows for vector-wise E2M1: amax 6 (s = 1) with every E2M1 tie and one ulp either side,
    -0; a zero row; a NaN row; an Inf row; a subnormal row; amax / 6 inexact (|y| just above
    6 saturates); random rows over 2^-40..2^40."""
    ties = []
    for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0):
        f = np.float32(t)
        ties += [f, np.nextafter(f, np.float32(0)), np.nextafter(f, np.float32(9))]
    c = 200
    g = np.random.default_rng(9)
    rows = []
    r = np.zeros(c, np.float32)
    r[: len(ties)] = ties
    r[len(ties): 2 * len(ties)] = -np.array(ties, np.float32)
    r[-1], r[-2] = 6.0, -0.0
    rows.append(r)
    rows.append(np.zeros(c, np.float32))
    r = g.standard_normal(c).astype(np.float32)
    r[5] = np.nan
    rows.append(r)
    r = g.standard_normal(c).astype(np.float32)
    r[9] = -np.inf
    rows.append(r)
    rows.append((g.standard_normal(c) * 1e-41).astype(np.float32))
    r = g.standard_normal(c).astype(np.float32)
    r[0] = np.float32(7.0)                      # 7 / fl(7 / 6) is a hair off 6
    rows.append(r)
    rows += list((g.standard_normal((6, c)) * np.exp2(g.integers(-40, 40, (6, 1))))
                 .astype(np.float32))
    return np.ascontiguousarray(np.stack(rows).astype(np.float32))


def _vector_expected(x: np.ndarray):
    """mxref's vector-wise E2M1 (validate._expected_operand's oracle: fl32(amax / 6), then
    the element conversion at scale 2^0 by mxref.quantize on a block of two with 4.0)."""
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(amax > 0, amax / np.float32(6), np.float32(1)).astype(np.float32)
        y = (x / s[:, None]).astype(np.float32)
    fin = np.isfinite(y)
    pair = np.stack([np.where(fin, y, 0), np.full_like(y, 4.0)], axis=-1)
    mx = mxref.quantize(pair, "mxfp4", "ocp", axis=-1, block_size=2)
    assert (mx.scales == 127).all()
    codes = mx.codes[..., 0]
    vals = mxref.dequantize(mx)[..., 0].astype(np.float32)
    # NaN y: code 0, value 0 (torch_emu.convert's answer, what the training path writes); an
    # infinite y saturates
    codes = np.where(np.isnan(y), 0, np.where(np.isinf(y), np.where(y < 0, 15, 7), codes))
    vals = np.where(np.isnan(y), 0, np.where(np.isinf(y), np.sign(y) * 6, vals))
    return codes.astype(np.uint8), vals.astype(np.float32), s, y


@pytest.mark.parametrize("occ", [False, True])
def test_vector_qdq_equals_mxref(tc, occ):
    mod, dev = tc
    x = _vector_rows()
    xt = torch.from_numpy(x.copy()).to(dev)
    bounds = None
    want_x = x
    if occ:
        lo, hi = np.float32(-0.5), np.float32(1.5)
        bounds = torch.tensor([lo, hi], device=dev)
        with np.errstate(invalid="ignore"):
            want_x = np.clip(x, lo, hi).astype(np.float32)
    codes, vals, s, y, res = mod.vector_qdq(xt, bounds, write_y=True)
    wc, wv, ws, wy = _vector_expected(want_x)
    np.testing.assert_array_equal(codes.cpu().numpy(), wc)
    np.testing.assert_array_equal(vals.cpu().numpy().view(np.uint32), wv.view(np.uint32))
    np.testing.assert_array_equal(s.cpu().numpy().view(np.uint32), ws.view(np.uint32))
    np.testing.assert_array_equal(y.cpu().numpy(), wy)
    if occ:
        np.testing.assert_array_equal(res.cpu().numpy(), (x - want_x).astype(np.float32))
    else:
        assert res is None


def test_occ_bounds_bad_input():
    from mxkernels.triton_common import KernelUnsupported
    from mxkernels.triton_corrections import occ_bounds
    with pytest.raises(KernelUnsupported, match="float32"):
        occ_bounds(torch.zeros(4, dtype=torch.float64), 0.99)
    with pytest.raises(KernelUnsupported, match="elements"):
        occ_bounds(torch.zeros(0), 0.99)


# ---- planted bugs: the checks above can fail -------------------------------------------------
def _planted(tmp_path, old: str, new: str):
    from test_kernels_fast import _exec_interpreted
    text = SRC.read_text()
    assert text.count(old) == 1, f"planting site {old!r} not found exactly once"
    path = tmp_path / "triton_corrections_planted.py"
    path.write_text(text.replace(old, new))
    ks = load_kernels(True)
    deps = ("mxkernels.triton_common", "mxkernels.triton_quant", "mxkernels.triton_fast")
    return _exec_interpreted(path, {d: ks[d.rsplit(".", 1)[1]] for d in deps})


@pytest.mark.parametrize("old, new", [
    # a non-strict tau test flags the block sitting exactly on tau * median
    ("count = tl.reduce((a3 < thr[:, :, None])", "count = tl.reduce((a3 <= thr[:, :, None])"),
    # the last tied maximum instead of the first
    ("first = tl.reduce(tl.where(a3 == amax[:, :, None], j, 32), 2, _min)",
     "first = -tl.reduce(tl.where(a3 == amax[:, :, None], -j, 1), 2, _min)"),
    # S_M rounded down instead of up
    ("s_int = (((num + (1 << k) - 1) >> k) + (M_ODD - 1)) // M_ODD",
     "s_int = (num >> k) // M_ODD"),
    # NaN / Inf counted in the macro amax
    ("af = tl.where(a < 0x7F800000, a, 0)", "af = a"),
    # an approximate division
    ("y = tl.math.div_rn(b.to(tl.float32, bitcast=True), s_full)",
     "y = b.to(tl.float32, bitcast=True) * (1.0 / s_full)"),
])
def test_planted_decomp_bug_is_caught(tmp_path, old, new):
    bad = _planted(tmp_path, old, new)
    x = _edge_operand()
    want = _expected(x, DEC)
    with pytest.raises(AssertionError):
        _check(bad.decomp_qdq(torch.from_numpy(x.copy()), DEC), want)


@pytest.mark.parametrize("old, new", [
    # the window without t0 + 1 (a threshold one ulp too high whenever T = t0 + 1)
    ("for k in tl.static_range(3):\n        c = tl.maximum(t0 + (1 - k), 0)",
     "for k in tl.static_range(1, 3):\n        c = tl.maximum(t0 + (1 - k), 0)"),
    # the first guess taken as the threshold
    ("    return thr\n", "    return t0\n"),
    # the threshold's exact test in fp32 instead of fp64
    ("below = (c.to(tl.float32, bitcast=True).to(tl.float64) * tau) < amax_d",
     "below = (c.to(tl.float32, bitcast=True) * tau.to(tl.float32)) < amax_d"),
])
def test_planted_threshold_bug_is_caught(tmp_path, old, new):
    bad = _planted(tmp_path, old, new)
    with pytest.raises(AssertionError):
        test_decomp_tau_threshold_is_exact((bad, "cpu"))


@pytest.mark.parametrize("old, new", [
    # the transposed bf16 read widened one bit short
    ("            b = b.to(tl.uint16, bitcast=True).to(tl.int32) << 16\n",
     "            b = b.to(tl.uint16, bitcast=True).to(tl.int32) << 15\n"),
    # a bf16 source's kept passthrough value one bf16 ulp off
    ("            kept = b\n", "            kept = b + 0x10000\n"),
])
def test_planted_bf16_read_bug_is_caught(tmp_path, old, new):
    """The bf16 test can fail: a wrong widening of the transposed read, a wrong kept value."""
    bad = _planted(tmp_path, old, new)
    with pytest.raises(AssertionError):
        test_decomp_qdq_reads_bf16((bad, "cpu"), "decomp-fixed")


def test_planted_transposed_read_is_caught(tmp_path):
    """The transposed-view test can fail: the view's rows read in reverse order."""
    bad = _planted(tmp_path, "b = tl.load(x_ptr + (cols.to(tl.int64)[None, :] * n_rows + "
                             "rows[:, None]), mask=m,",
                   "b = tl.load(x_ptr + (cols.to(tl.int64)[None, :] * n_rows + "
                   "(n_rows - 1 - rows)[:, None]), mask=m,")
    with pytest.raises(AssertionError):
        test_decomp_qdq_reads_a_transposed_view((bad, "cpu"), "decomp-fixed")


@pytest.mark.parametrize("old, new", [
    # amax / 6 as a multiply by fl(1 / 6)
    ("s = tl.where(amax > 0, tl.math.div_rn(amax, six), 1.0)",
     "s = tl.where(amax > 0, amax * (1.0 / 6.0), 1.0)"),
    # ties rounded away from zero
    ("mag = tl.minimum(((v + 8388608.0) - 8388608.0) * q, 6.0)",
     "mag = tl.minimum(((v + 0.5 + 8388608.0) - 8388608.0 - 0.5) * q, 6.0)"),
    # the sign of a zero dropped
    ("neg = (yb < 0) & ~nan", "neg = (y < 0) & ~nan"),
])
def test_planted_vector_bug_is_caught(tmp_path, old, new):
    bad = _planted(tmp_path, old, new)
    with pytest.raises(AssertionError):
        test_vector_qdq_equals_mxref((bad, "cpu"), False)


def test_planted_split_bug_is_caught(tmp_path):
    """The split's exactness check can fail: the middle piece taken untruncated leaves the
    last piece 0 and the three no longer sum to x."""
    from mxkernels.training import mxlinear as M
    bad = _planted(tmp_path, "h2 = rb & -65536", "h2 = rb")
    v = torch.from_numpy((np.random.default_rng(1).standard_normal(4096) * 1e3)
                         .astype(np.float32))
    total = sum(p.to(torch.float64) for p in bad.split3_bf16(v))
    assert not torch.equal(total, v.to(torch.float64))
    good = sum(p.to(torch.float64) for p in M._split_bf16(v))
    assert torch.equal(good, v.to(torch.float64))


@pytest.mark.parametrize("old, new, case", [
    # -0 and +0 mapped to one key: still right by value, so plant a sign slip instead
    ("k = tl.where(b < 0, ~u, u | 0x80000000)", "k = tl.where(b < 0, u, u | 0x80000000)",
     "normal"),
    # a NaN with its sign bit set keyed as a negative number
    ("return tl.where(nan, 0xFFFFFFFF, k)", "return k", "nan_negative"),
    # every block's candidates written from slot 0 (no reservation): later blocks overwrite
    ("first = tl.atomic_add(cnt_ptr + t, tl.reduce(hit, 0, _add))",
     "first = tl.atomic_add(cnt_ptr + t, tl.reduce(hit, 0, _add)) * 0", "large"),
    # the rank not reduced by the count below the chosen digit
    ("tl.store(state_ptr + 2 + t, r - below)", "tl.store(state_ptr + 2 + t, r)",
     "same_digit"),
])
def test_planted_select_bug_is_caught(tmp_path, old, new, case):
    bad = _planted(tmp_path, old, new)
    with pytest.raises(AssertionError):
        test_occ_bounds_are_the_sorted_order_statistics((bad, "cpu"), case, 0.99)


# ---- the training layer on the triton backend -------------------------------------------------
def _layer(recipe: str, backend: str, k: int = 128, n: int = 256, tokens: int = 128, seed=3,
           device: str = "cpu"):
    from mxkernels.training.mxlinear import MXLinear
    from mxkernels.training.recipes import VARIANTS
    from mxkernels.training.validate import capture_next
    torch.manual_seed(seed)
    m = MXLinear.from_linear(torch.nn.Linear(k, n), VARIANTS.get(recipe, recipe),
                             backend=backend).to(device)
    m.name = "blk.0.mlp"
    capture_next(m)
    x = (torch.randn(tokens, k) * torch.exp(torch.randn(tokens, 1)))
    x[3, 7] = 300.0                              # an outlier block
    x = x.to(device).requires_grad_(True)
    y = m(x)
    (y * torch.linspace(-1, 1, n, device=device)).sum().backward()
    return m, x, y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["decomp-fixed", "decomp-outlier", "decomp-macro", "ms-fp4"])
def test_layer_on_triton_equals_torch_and_passes_in_run_checks(recipe, device, monkeypatch):
    """A layer on the triton backend (the fused decomp launch; the radix-select OCC bounds
    and the vector-wise launch) gives the torch backend's output and gradients bit for bit, its fused launch or select
    really ran (counted), and the in-run validation passes every record (mxref's operands)."""
    from mxkernels.training import quant as Q
    from mxkernels.training.validate import check_capture
    tcm = Q.triton_module("triton_corrections", torch.device(device))
    calls = {"decomp_qdq": 0, "occ_bounds": 0, "vector_qdq": 0}
    views = []
    for name in calls:
        real = getattr(tcm, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            if _name == "decomp_qdq":
                views.append(not a[0].is_contiguous())
            return _real(*a, **k)
        monkeypatch.setattr(tcm, name, counted)
    mt, xt, yt = _layer(recipe, "triton", device=device)
    mr, xr, yr = _layer(recipe, "torch", device=device)
    for a, b in ((yt, yr), (xt.grad, xr.grad), (mt.weight.grad, mr.weight.grad)):
        np.testing.assert_array_equal(a.detach().cpu().numpy().view(np.uint32),
                                      b.detach().cpu().numpy().view(np.uint32))
    if recipe.startswith("decomp"):
        assert calls == {"decomp_qdq": 6, "occ_bounds": 0, "vector_qdq": 0}
        # the backward's W^T, dy^T and x^T reach the launch made contiguous by the tiled
        # transpose (test_layer_hands_bf16_over_under_autocast: or read in place)
        assert views == [False] * 6
    else:                   # x (OCC) and W (DGE) in the forward
        assert calls == {"decomp_qdq": 0, "occ_bounds": 1, "vector_qdq": 2}
    recs = check_capture(mt, gemm_check="bound")
    assert recs and all(r.ok for r in recs), [r for r in recs if not r.ok]


@pytest.mark.parametrize("recipe, view", [("decomp-fixed", False), ("decomp-fixed", True),
                                          ("ms-fp4", False)])
def test_layer_hands_bf16_over_under_autocast(recipe, view, monkeypatch):
    """Under bf16 autocast the generic path hands bf16 over as it is: decomp's fused launch
    gets x and dy without fp32 copies (W^T, dy^T and x^T made contiguous by the tiled
    transpose, or with DECOMP_VIEW_READ read in place; W stays fp32), and
    ms-fp4's dual launch gets a bf16 dy outside capture steps. A capture step and a plain
    step both give the torch backend's output and gradients bit for bit, and the capture
    step's in-run checks pass."""
    from mxkernels.training import mxlinear as ML
    from mxkernels.training import quant as Q
    from mxkernels.training.validate import capture_next, check_capture
    monkeypatch.setattr(ML, "DECOMP_VIEW_READ", [view])
    tcm = Q.triton_module("triton_corrections", torch.device("cpu"))
    seen, duals = [], []
    real, real_dual = tcm.decomp_qdq, ML._dual_dy

    def counted(t, spec):
        seen.append((t.dtype, t.is_contiguous()))
        return real(t, spec)

    def dual(c, dy2):
        out = real_dual(c, dy2)
        duals.append((dy2.dtype, out is not None))
        return out
    monkeypatch.setattr(tcm, "decomp_qdq", counted)
    monkeypatch.setattr(ML, "_dual_dy", dual)

    def layer(backend, capture):
        torch.manual_seed(3)
        m = ML.MXLinear.from_linear(torch.nn.Linear(128, 256), recipe, backend=backend)
        m.name = "blk.0.mlp"
        if capture:
            capture_next(m)
        x = torch.randn(128, 128) * torch.exp(torch.randn(128, 1))
        x[3, 7] = 300.0
        x = x.to(torch.bfloat16).requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(x)
        (y.float() * torch.linspace(-1, 1, 256)).sum().backward()
        return m, x, y
    bf, f32 = torch.bfloat16, torch.float32
    for capture in (True, False):
        seen.clear()
        duals.clear()
        mt, xt, yt = layer("triton", capture)
        # fprop x, W; dgrad dy, W^T; wgrad dy^T, x^T
        assert seen == ([] if recipe == "ms-fp4" else
                        [(bf, True), (f32, True), (bf, True), (f32, not view), (bf, not view),
                         (bf, not view)])
        if recipe == "ms-fp4":      # dy stays bf16 only where the dual launch takes it
            assert duals == [(f32, False)] if capture else [(bf, True)]
        mr, xr, yr = layer("torch", capture)
        for a, b in ((yt, yr), (xt.grad, xr.grad), (mt.weight.grad, mr.weight.grad)):
            assert a.dtype == b.dtype
            assert torch.equal(a.view(torch.int16 if a.dtype == bf else torch.int32),
                               b.view(torch.int16 if b.dtype == bf else torch.int32))
        if capture:
            recs = check_capture(mt, gemm_check="bound")
            assert recs and all(r.ok for r in recs), [r for r in recs if not r.ok]


def test_tf32_and_split_gemm_rules():
    """Which GEMM the generic path may run off the fp32 pipes: TF32 only when every value has
    <= 11 significant bits; the split-bf16 GEMM exact piece by piece."""
    from mxkernels.training import quant as Q
    from mxkernels.training.mxlinear import _split_bf16
    from mxkernels.training.recipes import OperandSpec
    assert Q.tf32_exact(DEC)                                         # 2 + 8 bits
    assert not Q.bf16_exact(DEC)
    assert not Q.tf32_exact(dataclasses.replace(DEC, macro_scale_dtype="float32"))   # 2 + 24
    assert Q.tf32_exact(dataclasses.replace(DEC, fmt="mxfp6_e3m2"))                   # 3 + 8
    assert not Q.tf32_exact(dataclasses.replace(DEC, fmt="mxfp6_e2m3"))               # 4 + 8
    assert Q.tf32_exact(OperandSpec("mxfp8_e4m3"))                                    # bf16
    g = np.random.default_rng(0)
    v = (g.standard_normal(4096) * np.exp2(g.integers(-60, 60, 4096))).astype(np.float32)
    v[:5] = [0.0, -0.0, np.finfo(np.float32).max, np.float32(1e-30), -np.float32(3.4e38)]
    p = _split_bf16(torch.from_numpy(v))
    assert all(t.dtype == torch.bfloat16 for t in p)
    total = sum(t.to(torch.float64) for t in p)
    np.testing.assert_array_equal(total.numpy(), v.astype(np.float64))
    w = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    p = _split_bf16(torch.from_numpy(w))
    np.testing.assert_array_equal(p[0].float().numpy(), w)
    assert not p[1].any() and not p[2].any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the TF32 / split GEMMs run on CUDA")
@pytest.mark.parametrize("recipe, gemm", [("decomp-fixed", "_mm_tf32"), ("ms-fp4", "_mm_split3")])
def test_tensor_core_gemms_pass_the_bound_check(recipe, gemm, monkeypatch):
    """On a GPU decomp-fixed's GEMMs run on TF32 and ms-fp4's backward GEMMs against the
    forward copies as three bf16 GEMMs (spied), and every GEMM output passes the in-run
    bound check against mxref's operands; with them off (the fp32 matmul) the checks pass
    too and the outputs differ only by accumulation order."""
    from mxkernels.training import mxlinear as M
    from mxkernels.training.validate import check_capture
    seen = []
    real = getattr(M, gemm)
    monkeypatch.setattr(M, gemm, lambda *a, **k: seen.append(1) or real(*a, **k))
    m, _, y = _layer(recipe, "triton", device="cuda", k=256, n=512, tokens=512)
    assert len(seen) == (3 if gemm == "_mm_tf32" else 2)
    recs = check_capture(m, gemm_check="bound")
    assert all(r.ok for r in recs), [r for r in recs if not r.ok]
    M._FAST_GEMMS[0] = False
    try:
        m2, _, y2 = _layer(recipe, "triton", device="cuda", k=256, n=512, tokens=512)
    finally:
        M._FAST_GEMMS[0] = True
    assert all(r.ok for r in check_capture(m2, gemm_check="bound"))
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)


# ---- the vector-wise epilogue in one pass ------------------------------------------------------
def _scale_case(rows: int, cols: int, seed: int = 5):
    """fp32 x with zeros of both signs, subnormals, NaN, +-Inf, the fp32 maximum; row and
    column vectors whose products overflow, underflow and round (so (x * a) * b differs from
    x * (a * b) somewhere)."""
    g = np.random.default_rng(seed)
    x = (g.standard_normal((rows, cols)) * np.exp2(g.integers(-40, 40, (rows, cols))))
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, np.finfo(np.float32).max,
                np.float32(1e-42), -np.float32(3e-39)]
    n = min(len(specials), flat.size)
    flat[:n] = specials[:n]
    a = (g.standard_normal(rows) * np.exp2(g.integers(-80, 80, rows))).astype(np.float32)
    b = (g.standard_normal(cols) * np.exp2(g.integers(-80, 80, cols))).astype(np.float32)
    if rows > 2:
        a[:3] = [0.0, np.inf, 1e-30]
    return x, a, b


@pytest.mark.parametrize("shape", [(37, 300), (1, 1), (0, 5), (16, 256), (70, 513)])
def test_scale_outer_equals_torch(tc, shape):
    """triton_corrections.scale_outer is torch's two broadcast multiplies bit for bit (NaN as
    NaN), either vector alone, into a new tensor or over x; ragged tiles and empty tensors."""
    mod, dev = tc
    x, a, b = _scale_case(*shape)
    xt, at, bt = (torch.from_numpy(v).to(dev) for v in (x, a, b))
    for ra, rb in ((at, bt), (at, None), (None, bt)):
        want = xt
        if ra is not None:
            want = want * ra[:, None]
        if rb is not None:
            want = want * rb[None, :]
        got = mod.scale_outer(xt, ra, rb)
        np.testing.assert_array_equal(got.cpu().numpy().view(np.uint32),
                                      want.cpu().numpy().view(np.uint32))
        y = xt.clone()
        assert mod.scale_outer(y, ra, rb, out=y) is y
        np.testing.assert_array_equal(y.cpu().numpy().view(np.uint32),
                                      want.cpu().numpy().view(np.uint32))
    if shape == (37, 300):        # the order of the two roundings shows in these data
        other = (xt * (at[:, None] * bt[None, :])).cpu().numpy().view(np.uint32)
        assert (other != mod.scale_outer(xt, at, bt).cpu().numpy().view(np.uint32)).any()


def test_scale_outer_bad_input(tc):
    mod, dev = tc
    x = torch.ones(4, 8, device=dev)
    for args in ((x.t(), None, None), (x.double(), None, None), (x, torch.ones(5, device=dev),
                                                                   None),
                 (x, None, torch.ones(8, dtype=torch.float64, device=dev)), (x[0], None, None)):
        with pytest.raises(mod.KernelUnsupported, match="scale_outer takes"):
            mod.scale_outer(*args)
    with pytest.raises(mod.KernelUnsupported, match="scale_outer takes"):
        mod.scale_outer(x, None, None, out=torch.empty(4, 9, device=dev))


@pytest.mark.parametrize("old, new", [
    # the two vectors multiplied first (one rounding fewer on x)
    ("        x = x * tl.load(ra_ptr + rows, mask=rm, other=1.0)[:, None]\n"
     "    if HAS_B:\n"
     "        x = x * tl.load(rb_ptr + cols, mask=cm, other=1.0)[None, :]",
     "        x = x * (tl.load(ra_ptr + rows, mask=rm, other=1.0)[:, None] *\n"
     "                 tl.load(rb_ptr + cols, mask=cm, other=1.0)[None, :])\n"
     "    if HAS_B:\n"
     "        x = x"),
    # the column vector indexed by the row
    ("x = x * tl.load(rb_ptr + cols, mask=cm, other=1.0)[None, :]",
     "x = x * tl.load(rb_ptr + rows % n_cols, mask=rm, other=1.0)[:, None]"),
])
def test_planted_scale_outer_bug_is_caught(tmp_path, old, new):
    bad = _planted(tmp_path, old, new)
    with pytest.raises(AssertionError):
        test_scale_outer_equals_torch((bad, "cpu"), (37, 300))


# ---- the generic path's shared work: one x for several layers, one dy for two GEMMs ----------
def _pair(recipe: str, device: str, seed: int = 11, same_x: bool = True):
    """Two layers of one recipe on the triton backend projecting the same x (as q and k do),
    then a loss through both: (outputs, x.grad, both weight grads). ``same_x=False``: the
    second layer gets an equal copy of x (another tensor: nothing to reuse)."""
    from mxkernels.training.mxlinear import MXLinear
    from mxkernels.training.recipes import VARIANTS
    torch.manual_seed(seed)
    ms = [MXLinear.from_linear(torch.nn.Linear(128, 96), VARIANTS.get(recipe, recipe),
                               backend="triton").to(device) for _ in range(2)]
    for i, m in enumerate(ms):
        m.name = f"blk.0.attn.{'qk'[i]}"
    x = (torch.randn(64, 128) * torch.exp(torch.randn(64, 1)))
    x[3, 7] = 300.0
    h = x.to(device).requires_grad_(True)
    y0 = ms[0](h)
    y1 = ms[1](h if same_x else h * 1.0)
    ((y0 * torch.linspace(-1, 1, 96, device=device)).sum() +
     (y1 * torch.linspace(1, -2, 96, device=device)).sum()).backward()
    return [t.detach().cpu().numpy().view(np.uint32)
            for t in (y0, y1, h.grad, ms[0].weight.grad, ms[1].weight.grad)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["ms-fp4", "decomp-fixed"])
def test_shared_operands_equal_separate_ones(recipe, device, monkeypatch):
    """The generic path's reuse changes no bit: x quantized once for two layers (the forward
    memo), dy quantized once in both orientations (ms-fp4's E5M2 for Dgrad and Wgrad), the
    one-pass vector-wise epilogue; against every layer doing its own work (memos off, the
    dual launch off). The reuse really happens (launches counted), and not for an equal
    copy of x."""
    from mxkernels.training import mxlinear as M
    from mxkernels.training import quant as Q
    tcm = Q.triton_module("triton_corrections", torch.device(device))
    tf = Q.triton_module("triton_fast", torch.device(device))
    calls = {"vector_qdq": 0, "decomp_qdq": 0, "dual": 0, "scale_outer": 0, "split3_bf16": 0}
    for mod, name in ((tcm, "vector_qdq"), (tcm, "decomp_qdq"), (tcm, "scale_outer"),
                      (tcm, "split3_bf16"), (tf, "quantize_dequantize")):
        real = getattr(mod, name)

        def counted(*a, _real=real, _name=name, **k):
            if _name != "quantize_dequantize":
                calls[_name] += 1
            elif k.get("cols"):
                calls["dual"] += 1
            return _real(*a, **k)
        monkeypatch.setattr(mod, name, counted)
    shared = _pair(recipe, device)
    seen = dict(calls)
    copied = _pair(recipe, device, same_x=False)
    seen_copied = {k: calls[k] - seen[k] for k in calls}
    monkeypatch.setattr(M, "MEMO", [False])
    monkeypatch.setattr(M, "_dual_dy", lambda c, dy2: None)
    for k in calls:
        calls[k] = 0
    separate = _pair(recipe, device)
    for i, (a, b, c) in enumerate(zip(shared, separate, copied)):
        if device == "cpu" or i < 2:
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, c)
        else:
            # on a GPU a gradient's GEMM may take a transposed view where the separate path
            # multiplies a contiguous copy, and cuBLAS may then sum in another order: the
            # operands are the same bits (test_dual_dy_equals_two_quantizations), the sums
            # agree to fp32 rounding
            for u in (b, c):
                torch.testing.assert_close(torch.from_numpy(a.view(np.float32)),
                                           torch.from_numpy(u.view(np.float32)))
    if recipe == "ms-fp4":
        # the forward: x once (memo) and each W; without the memo x twice
        assert (seen["vector_qdq"], seen_copied["vector_qdq"], calls["vector_qdq"]) == (3, 4, 4)
        # one dual launch per layer's dy (E5M2 for Dgrad and Wgrad), none when off
        assert seen["dual"] == 2 and calls["dual"] == 0
        # two epilogues, the forward copies of one x and two W (three with the memo off:
        # the torch multiplies of full() are not counted, the epilogues' kernel is)
        assert seen["scale_outer"] == 5 and seen_copied["scale_outer"] == 6
        if device == "cuda":
            # the split-bf16 GEMMs (CUDA only): each backward splits its W, then the one
            # saved x, which the second backward finds after its own W (two memo slots)
            assert (seen["split3_bf16"], seen_copied["split3_bf16"],
                    calls["split3_bf16"]) == (3, 4, 4)
    else:
        # x once in the forward with the memo; the backward's operands as before
        assert seen["decomp_qdq"] == calls["decomp_qdq"] - 1 == seen_copied["decomp_qdq"] - 1
        assert seen["dual"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_dual_dy_equals_two_quantizations(device):
    """ms-fp4's dy from one dual launch: Dgrad's A is the E5M2 quantization of dy along its
    rows and Wgrad's A that of dy^T, each bit for bit the separate generic-path quantization
    (the second of a contiguous transpose), on edge rows (NaN, Inf, zeros of both signs,
    subnormals, amax = 2^k - 1 ulp) and random ones; it declines ragged blocks, captures and
    the torch backend."""
    from mxkernels.training import mxlinear as M
    from mxkernels.training import quant as Q
    from mxkernels.training.mxlinear import MXLinear
    lay = MXLinear.from_linear(torch.nn.Linear(64, 64), "ms-fp4", backend="triton").to(device)
    c = M._Ctx(lay, torch.device(device))
    g = np.random.default_rng(4)
    dy = (g.standard_normal((96, 64)) * np.exp2(g.integers(-20, 20, (96, 1)))).astype(np.float32)
    dy[0, :8] = [np.nan, 1.0, -0.0, 0.0, np.inf, -np.inf, 1e-40, -3.0]
    dy[1, :32] = np.float32(np.nextafter(np.float32(64.0), np.float32(0)))
    dy[2, :] = 0.0
    dy[:32, 5] = -np.float32(2.0 ** -130)
    t = torch.from_numpy(dy).to(device)
    pre = M._dual_dy(c, t)
    assert pre is not None
    spec = lay.recipe.dgrad.a
    for q, src in ((pre[0], t), (pre[1], t.t().contiguous())):
        want = Q.quantize_operand(src, spec, "triton").values
        assert q.values.shape == want.shape
        np.testing.assert_array_equal(q.values.cpu().numpy().view(np.uint32),
                                      want.cpu().numpy().view(np.uint32))
    # a bf16 dy (autocast) is read as it is: the same bits as its fp32 value's, and the
    # backward keeps it bf16 for this recipe (not an fp32 one)
    tb = torch.from_numpy((_bf16(dy).view(np.uint32) >> 16).astype(np.uint16).view(
        np.int16)).view(torch.bfloat16).to(device)
    pre_b = M._dual_dy(c, tb)
    assert pre_b is not None and M._dy_stays_bf16(c, tb) and not M._dy_stays_bf16(c, t)
    for q, src in ((pre_b[0], tb.float()), (pre_b[1], tb.float().t().contiguous())):
        want = Q.quantize_operand(src, spec, "triton").values
        np.testing.assert_array_equal(q.values.cpu().numpy().view(np.uint32),
                                      want.cpu().numpy().view(np.uint32))
    assert M._dual_dy(c, t[:, :48].contiguous()) is None          # 48 columns: ragged block
    assert M._dual_dy(c, t[:80].contiguous()) is None             # 80 rows
    c.backend = "torch"
    assert M._dual_dy(c, t) is None
    c.backend, c.capture = "triton", {}
    assert M._dual_dy(c, t) is None


def test_forward_memo_misses_after_an_in_place_write():
    """The forward memo's key: the same storage, offset, shape, strides, dtype and version
    counter under the same spec and backend; a view of the same tensor hits, an in-place
    write, another spec or backend, or an equal copy misses."""
    from mxkernels.training import mxlinear as M
    memo = M._TensorMemo()
    x = torch.randn(8, 32)
    spec = RECIPES["ms-fp4"].fprop.a
    memo.put(x.reshape(-1, 32), spec, "triton", "q")
    assert memo.get(x.reshape(-1, 32), spec, "triton") == "q"
    assert memo.get(x.view(8, 32), spec, "triton") == "q"
    assert memo.get(x.clone(), spec, "triton") is None
    assert memo.get(x, RECIPES["ms-fp4"].fprop.b, "triton") is None
    assert memo.get(x, spec, "torch") is None
    assert memo.get(x[1:], spec, "triton") is None
    x.add_(0.0)
    assert memo.get(x, spec, "triton") is None
    memo.clear()
    assert memo.get(x, spec, "triton") is None
    with torch.inference_mode():                # no version counter: never cached
        z = torch.randn(8, 32)
        memo.put(z, spec, "triton", "q")
        assert memo.entry is None and memo.get(z, spec, "triton") is None
    # a tensor with no storage address (torch.compile's fake tensors): never cached
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        f = torch.empty(8, 32)
        memo.put(f, spec, "triton", "q")
        assert memo.entry is None and memo.get(f, spec, "triton") is None
    # two slots, least recently used out: x, W1, (hit x), W2 keeps x and W2
    two = M._TensorMemo(2)
    w1, w2 = torch.randn(4, 4), torch.randn(4, 4)
    two.put(x, None, "triton", "x")
    two.put(w1, None, "triton", "w1")
    assert two.get(x, None, "triton") == "x"
    two.put(w2, None, "triton", "w2")
    assert two.get(w1, None, "triton") is None
    assert two.get(x, None, "triton") == "x" and two.get(w2, None, "triton") == "w2"
    assert len(two.entries) == 2


def test_layers_run_under_inference_mode():
    """Two ms-fp4 layers on the triton backend projecting one x under torch.inference_mode
    (no version counters) give what they give without it."""
    from mxkernels.training.mxlinear import MXLinear
    torch.manual_seed(0)
    ms = [MXLinear.from_linear(torch.nn.Linear(64, 32), "ms-fp4", backend="triton")
          for _ in range(2)]
    x = torch.randn(32, 64)
    with torch.no_grad():
        want = [m(x) for m in ms]
    with torch.inference_mode():
        got = [m(x) for m in ms]
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_split_of_a_transposed_view_and_its_memo():
    """_split_bf16 of a transposed view is the transpose of the split of its storage (no
    copy), a second split of the same tensor is the first's pieces, and an in-place write
    (version counter) or another tensor gets its own split."""
    from mxkernels.training import mxlinear as M
    g = np.random.default_rng(2)
    v = torch.from_numpy((g.standard_normal((64, 96)) * 1e3).astype(np.float32))
    M._SPLIT_MEMO.clear()
    p = M._split_bf16(v.t())
    assert all(t.shape == (96, 64) and not t.is_contiguous() for t in p)
    np.testing.assert_array_equal(sum(t.double() for t in p).numpy(), v.t().double().numpy())
    q = M._split_bf16(v.t())
    assert all(torch.equal(a, b) and a.data_ptr() == b.data_ptr() for a, b in zip(p, q))
    v.mul_(2.0)
    r = M._split_bf16(v.t())
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(p, r))
    np.testing.assert_array_equal(sum(t.double() for t in r).numpy(), v.t().double().numpy())
    w = v.clone()
    s = M._split_bf16(w)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(r, s))
    # a backward's order: W's split between two splits of one x still finds x's
    u = M._split_bf16(v.t())
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(r, u))
    M._SPLIT_MEMO.clear()
