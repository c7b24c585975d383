"""The FP8 carrier (mxkernels.triton_carrier, mxkernels.training.carrier, recipe mxfp4-fdw-fp8):
the carrier kernel against mxref.mxfp4_to_fp8 byte for byte (edge tensors: NaN blocks and
groups, zeros, -0, scale-byte-0 blocks, spreads past the exact limit, ragged groups, SR
blocks), the recipe's refusals, the fast and generic paths with their in-run checks, and checks
that fail when a carrier byte, a group byte or the GEMM output is wrong. Kernels run through
the Triton interpreter on CPU; the CUDA test (scaled_mm) skips without a GPU. Expected values
come from mxref."""
import dataclasses

import numpy as np
import pytest
import torch

import mxref
from mxkernels.ops import kernels
from mxkernels.training import MXLinear, capture_next, check_capture, get_recipe
from mxkernels.training import carrier as CR
from mxkernels.training import mxlinear as M
from mxkernels.training.errors import RecipeError
from mxref.fp8fp4 import mxfp4_to_fp8


def _tc(device="cpu"):
    return kernels(device).modules["triton_carrier"]


def _edge(rng, R=40, C=300):
    x = (rng.standard_normal((R, C)) * np.exp2(rng.integers(-30, 30, (R, 1)))).astype(np.float32)
    x[0, :32] = np.nan                     # a NaN block beside live ones
    x[1, :128] = np.nan                    # a whole NaN group
    x[2, :] = -0.0
    x[3, :] = 0.0
    x[4, :64] = np.float32(2.0 ** -140)    # scale byte 0
    x[5, 32:64] *= np.float32(2.0 ** -18)  # spread 18 > 15 + nu: rounded elements
    x[6, 64:96] *= np.float32(2.0 ** -16)
    x[7, :] = np.arange(C, dtype=np.float32) * 0.25
    x[8, 256:] = np.nan                    # the ragged last group (44 elements) all NaN
    return x


@pytest.fixture(scope="module")
def edge():
    rng = np.random.default_rng(0)
    x = _edge(rng)
    mx = mxref.quantize(x, "mxfp4", "ocp", axis=-1)
    sr = mxref.quantize(x[9:20], "mxfp4", mxref.get_profile("ocp").replace(
        name="ocp+sr", rounding="stochastic"), axis=-1, seed=7)
    return mx, sr


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("axis", [1, 0])
def test_carrier_kernel_is_mxref_mxfp4_to_fp8(edge, dtype, axis):
    for mx in edge:
        ref = mxfp4_to_fp8(mx, group=128)
        v = torch.from_numpy(mxref.dequantize(mx).astype(np.float32)).to(dtype)
        c = _tc().carrier(v if axis == 1 else v.t().contiguous(), axis)
        assert c.codes.shape == (v.shape[0], 384) and c.k == v.shape[1]
        assert np.array_equal(c.codes[:, :c.k].numpy(), ref.codes)
        assert not c.codes[:, c.k:].any()           # the tail past K is +0
        assert np.array_equal(c.group_bytes().numpy(), ref.scales)
        # the carrier's exact values are mxref's carrier values
        got = CR.carrier_values(c).numpy()
        exp = ref.dequantize()
        assert np.array_equal(np.isnan(got), np.isnan(exp))
        assert np.array_equal(np.nan_to_num(got).view(np.uint32),
                              np.nan_to_num(exp).astype(np.float32).view(np.uint32))
    mx = edge[0]
    ref = mxfp4_to_fp8(mx, group=128)
    assert ref.n_inexact > 0                      # the rounded fallback is exercised
    assert ref.scales[1, 0] == 0xFF and ref.scales[8, 2] == 0xFF and ref.scales[3, 0] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qdq_carrier_is_mxref_from_x(dtype):
    """One launch from x: MXFP4 (OCP, RNE) along each axis, then the carrier, against
    mxref.quantize then mxref.mxfp4_to_fp8 (ragged 200 x 300: partial tiles and groups)."""
    x = torch.from_numpy(_edge(np.random.default_rng(2), R=200, C=300)).to(dtype)
    xn = x.float().numpy()
    rc, cc = _tc().qdq_carrier(x, rows=True, cols=True)
    for c, src in ((rc, xn), (cc, np.ascontiguousarray(xn.T))):
        ref = mxfp4_to_fp8(mxref.quantize(src, "mxfp4", "ocp", axis=-1), group=128)
        assert np.array_equal(c.codes[:, :c.k].numpy(), ref.codes)
        assert not c.codes[:, c.k:].any()
        assert np.array_equal(c.group_bytes().numpy(), ref.scales)
    # the GPU's launch policies: one dual launch, or two one-orientation launches with small
    # tiles (the sweep's choices), give the same bytes
    for tiles in ({"split": False, "dual": (128, 128, None), "trans": False},
                  {"split": True, "rows": (8, 128, None), "cols": (128, 16, None),
                   "trans": True}):
        got = _tc().qdq_carrier(x, rows=True, cols=True, tiles=tiles)
        for c, e in zip(got, (rc, cc)):
            assert torch.equal(c.codes, e.codes) and torch.equal(c.scales.view(torch.int32),
                                                                  e.scales.view(torch.int32))
    r_only, none = _tc().qdq_carrier(x, rows=True, cols=False)
    assert none is None and torch.equal(r_only.codes, rc.codes)
    with pytest.raises(ValueError, match="rows, cols or both"):
        _tc().qdq_carrier(x, rows=False, cols=False)


def test_group_scales_are_the_outer_major_1x128_layout():
    v = torch.zeros(3, 256)
    v[1, 130] = 6.0 * 2.0 ** 10
    c = _tc().carrier(v, 1)
    assert c.scales.shape == (2, 3) and c.scales_t.shape == (3, 2)
    assert c.scales_t.stride() == (1, 3)
    # G = s_max - 6 with s_max = 10 + 127 - 2: 2^(G - 127) = 2^4
    assert c.scales_t[1, 1].item() == 2.0 ** 4 and c.scales_t[0, 0].item() == 2.0 ** -127


def test_carrier_refuses_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        _tc().carrier(torch.zeros(2, 3, 4))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        _tc().carrier(torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="axis"):
        _tc().carrier(torch.zeros(2, 3), 2)
    c = _tc().carrier(torch.zeros(0, 5))
    assert c.codes.shape == (0, 128)
    a, b = _tc().carrier(torch.ones(2, 128)), _tc().carrier(torch.ones(2, 256))
    with pytest.raises(ValueError, match="contraction"):
        CR.carrier_mm(a, b, torch.float32)


def test_recipe_refuses_what_the_carrier_cannot_hold():
    base = get_recipe("mxfp4-fdw-fp8")
    assert all(g.gemm == "fp8" for _, g in base.gemms())
    for op in (dataclasses.replace(base.fprop.a, profile="rceil"),
               dataclasses.replace(base.fprop.a, fmt="mxfp8_e4m3"),
               dataclasses.replace(base.fprop.a, fmt=None),
               dataclasses.replace(base.fprop.a, macro=64)):
        with pytest.raises(RecipeError, match="fp8"):
            base.replace(name="x", fprop=dataclasses.replace(base.fprop, a=op))
    assert M.fast_plan(base)["fp8"] == (True, True, True)
    assert M.fast_plan(get_recipe("mxfp4-fdw"))["fp8"] == (False, False, False)


def _layer(recipe, backend, K=256, N=160, seed=3):
    torch.manual_seed(seed)
    m = MXLinear(K, N, bias=True, recipe=recipe, backend=backend)
    m.name = "blk.0.proj"
    return m


def _step(m, x0, fast=True):
    M.FAST_PATH[0] = fast
    M._X_CACHE.clear()
    try:
        m.weight.grad = None
        x = x0.clone().requires_grad_(True)
        y = m(x)
        (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        return y.detach(), x.grad, m.weight.grad.clone()
    finally:
        M.FAST_PATH[0] = True


@pytest.fixture(scope="module")
def x0():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(144, 256, generator=g)
    x[:, 32:64] *= 2.0 ** -17      # a block 17 binades below its group: rounded elements
    return x


@pytest.mark.parametrize("backend,fast", [("triton", True), ("torch", False)])
def test_fast_and_generic_paths_validate_against_mxref(x0, backend, fast):
    m = _layer("mxfp4-fdw-fp8", backend)
    capture_next(m)
    y, dx, dw = _step(m, x0, fast)
    recs = check_capture(m)
    assert all(r.ok for r in recs), [r.detail for r in recs if not r.ok]
    car = [r for r in recs if "carrier" in r.operand]
    assert len(car) == 6 and all(r.fallback is not None for r in car)
    assert sum(r.fallback["elements_rounded"] for r in car) > 0
    outs = [r for r in recs if r.operand == "out"]
    assert [r.detail.split(";")[0].split("=")[0] for r in outs] == ["max |y - exact| / bound "] * 3
    # the carrier multiplies MXFP4's values where a group is exact: close to mxfp4-fdw
    b = _layer("mxfp4-fdw", backend)
    y2, dx2, dw2 = _step(b, x0, fast)
    for p, q in ((y, y2), (dx, dx2), (dw, dw2)):
        assert torch.allclose(p, q, rtol=1e-3, atol=1e-4 * float(q.abs().max()))


def _plant(monkeypatch, spoil):
    """Spoil every carrier the training paths make: the conversion from values
    (carrier.to_carrier) and the fused launch of the carried fast path (qdq_carrier)."""
    real = CR.to_carrier

    def bad(values, axis=1):
        c = real(values, axis)
        spoil(c)
        return c
    monkeypatch.setattr(CR, "to_carrier", bad)
    tc = _tc()
    real_q = tc.qdq_carrier

    def bad_q(x, **kw):
        out = real_q(x, **kw)
        for c in out:
            if c is not None:
                spoil(c)
        return out
    monkeypatch.setattr(tc, "qdq_carrier", bad_q)


def _flip_carrier_byte(monkeypatch):
    def spoil(c):
        c.codes[0, 3] ^= 1
    _plant(monkeypatch, spoil)


def _wrong_group_byte(monkeypatch):
    def spoil(c):
        c.scales[0, 0] *= 2
    _plant(monkeypatch, spoil)


@pytest.mark.parametrize("plant,what", [(_flip_carrier_byte, "codes"),
                                        (_wrong_group_byte, "group bytes")])
@pytest.mark.parametrize("backend,fast", [("triton", True), ("torch", False)])
def test_validation_fails_on_a_wrong_carrier(monkeypatch, x0, plant, what, backend, fast):
    plant(monkeypatch)
    m = _layer("mxfp4-fdw-fp8", backend)
    capture_next(m)
    _step(m, x0, fast)
    bad = [r for r in check_capture(m) if not r.ok]
    assert bad and bad[0].gemm == "fprop" and "carrier" in bad[0].operand
    assert what in bad[0].detail and bad[0].first_index is not None


def test_carried_path_is_the_values_path_bit_for_bit(x0, monkeypatch):
    """mxfp4-fdw-fp8 takes the carried path (one qdq_carrier launch per tensor); with it
    turned off the same recipe converts the fast path's bf16 values (carrier.to_carrier):
    the same carriers, so the same outputs and gradients, bit for bit."""
    m = _layer("mxfp4-fdw-fp8", "triton")
    assert M.fast_plan(m.recipe)["carried"]
    calls = []
    real = M._MXLinearCarriedFn.apply
    monkeypatch.setattr(M._MXLinearCarriedFn, "apply", lambda *a: calls.append(1) or real(*a))
    got = _step(m, x0)
    assert calls
    plan = dict(M.fast_plan(m.recipe), carried=False)
    monkeypatch.setattr(M, "fast_plan", lambda r: plan)
    m2 = _layer("mxfp4-fdw-fp8", "triton")
    exp = _step(m2, x0)
    assert len(calls) == 1
    for g, e in zip(got, exp):
        assert torch.equal(g, e)


def test_validation_fails_on_a_corrupted_carrier_gemm_output(x0):
    m = _layer("mxfp4-fdw-fp8", "triton")
    capture_next(m)
    _step(m, x0, True)
    out = m._capture_done["dgrad"]["out"]
    out[5, 7] += 1e3 * np.abs(out).max()
    bad = [r for r in check_capture(m) if not r.ok]
    assert [(r.gemm, r.operand, r.first_index) for r in bad] == [("dgrad", "out", [5, 7])]


def test_carrier_mm_emulation_is_the_exact_values_product():
    rng = np.random.default_rng(5)
    a = mxref.quantize(rng.standard_normal((32, 384)).astype(np.float32), "mxfp4", "ocp")
    b = mxref.quantize(rng.standard_normal((48, 384)).astype(np.float32), "mxfp4", "ocp")
    va, vb = mxref.dequantize(a).astype(np.float64), mxref.dequantize(b).astype(np.float64)
    ca = _tc().carrier(torch.from_numpy(va.astype(np.float32)), 1)
    cb = _tc().carrier(torch.from_numpy(vb.astype(np.float32)), 1)
    y = CR.carrier_mm(ca, cb, torch.float32).numpy().astype(np.float64)
    exact = va @ vb.T
    assert np.all(np.abs(y - exact) <= 386 * 2.0 ** -24 * (np.abs(va) @ np.abs(vb).T))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch._scaled_mm)")
def test_scaled_mm_within_the_carrier_bound_cuda():
    from mxkernels.training.validate import CARRIER_ACC_BITS
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    x[:, 100:132] *= 2.0 ** -9
    a = mxref.quantize(x, "mxfp4", "ocp")
    b = mxref.quantize(rng.standard_normal((512, 1024)).astype(np.float32), "mxfp4", "ocp")
    ra, rb = mxfp4_to_fp8(a, group=128), mxfp4_to_fp8(b, group=128)
    va, vb = ra.dequantize().astype(np.float64), rb.dequantize().astype(np.float64)
    ca = _tc("cuda").carrier(torch.from_numpy(mxref.dequantize(a)).cuda(), 1)
    cb = _tc("cuda").carrier(torch.from_numpy(mxref.dequantize(b)).cuda(), 1)
    assert np.array_equal(ca.codes[:, :1024].cpu().numpy(), ra.codes)
    y = CR.carrier_mm(ca, cb, torch.float32).cpu().numpy().astype(np.float64)
    absprod = np.abs(va) @ np.abs(vb).T
    bound = (128 * 2.0 ** -CARRIER_ACC_BITS + 10 * 2.0 ** -24) * absprod
    assert np.all(np.abs(y - va @ vb.T) <= bound + 1e-45)
