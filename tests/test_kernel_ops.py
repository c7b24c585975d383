"""torch.ops.mxkernels.*: the kernels as torch custom ops (CPU tensors run the interpreted
kernels), compared with mxref, and their fake implementations under FakeTensorMode."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import mxref  # noqa: E402
import mxkernels.ops as mk  # noqa: E402
from mxref.profiles import sr_profile  # noqa: E402


@pytest.fixture(scope="module")
def x():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(64, 96, generator=g)
    v[3, 5] = float("nan")
    v[7, :32] = 0.0
    v[9, 40] = -0.0
    return v.to(torch.bfloat16)


def _same(a, b):
    np.testing.assert_array_equal(a.cpu().numpy(), np.asarray(b))


@pytest.mark.parametrize("fmt,profile,axis", [("mxfp4", "ocp", -1), ("mxfp8_e4m3", "rceil", 0),
                                              ("mxint8", "ocp", -1)])
def test_quantize_mx(x, fmt, profile, axis):
    s, c = torch.ops.mxkernels.quantize_mx(x, fmt, profile, axis)
    ref = mxref.quantize(x, fmt, profile, axis=axis)
    _same(s, ref.scales)
    _same(c, ref.codes)


def test_quantize_dual_and_dequantize(x):
    rs, rc, cs, cc = mk.quantize_dual(x, "mxfp4", "ocp")
    r, col = mxref.quantize(x, "mxfp4", "ocp", axis=-1), mxref.quantize(x, "mxfp4", "ocp", axis=0)
    _same(rs, r.scales), _same(rc, r.codes), _same(cs, col.scales), _same(cc, col.codes)
    y = mk.dequantize_mx(rs, rc, "mxfp4")
    _same(y.view(torch.int32), r.dequantize().astype(np.float32).view(np.int32))


def test_quantize_sr_and_rotated(x):
    s, c = mk.quantize_sr(x, "mxfp4", "ocp", -1, 1234, 0)
    ref = mxref.quantize(x, "mxfp4", sr_profile("ocp"), axis=-1, seed=1234)
    _same(s, ref.scales), _same(c, ref.codes)
    s, c = mk.quantize_rotated(x, "mxfp4", "ocp", 32)
    ref = mxref.quantize_rotated(x, "mxfp4", "ocp", 32)
    _same(s, ref.scales), _same(c, ref.codes)


def test_nvfp4(x):
    s, c, ts = mk.quantize_nvfp4(x[None, :, :64].float(), "ocp")
    ref = mxref.quantize(x[:, :64].float(), "nvfp4", "ocp")
    _same(s[0], ref.scales), _same(c[0], ref.codes)
    assert ts.item() == np.float32(ref.tensor_scale)


def test_gemm_bit_exact(x):
    a = mxref.quantize(x[:16].float().nan_to_num(), "mxfp4", "ocp")
    b = mxref.quantize(x[16:40].float().nan_to_num(), "mxfp4", "ocp")
    t = lambda v: torch.from_numpy(np.ascontiguousarray(v))  # noqa: E731
    y = mk.gemm(t(a.scales), t(a.codes), t(b.scales), t(b.codes), "mxfp4", "mxfp4")
    ref = mxref.gemm_codes(a.codes, a.scales, "mxfp4", b.codes, b.scales, "mxfp4",
                           mode="block_sequential")
    _same(y.view(torch.int32), ref.view(np.int32))


def test_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        v = torch.empty(64, 100, dtype=torch.bfloat16)
        s, c = torch.ops.mxkernels.quantize_mx(v, "mxfp4", "ocp", 0)
        assert tuple(s.shape) == (2, 100) and tuple(c.shape) == (64, 100)
        rs, rc, cs, cc = torch.ops.mxkernels.quantize_dual(v, "mxfp8_e4m3", "ocp")
        assert tuple(rs.shape) == (64, 4) and tuple(cs.shape) == (2, 100)
        y = torch.ops.mxkernels.gemm(s, c, s, c, "mxfp4", "mxfp4", "block_sequential")
        assert tuple(y.shape) == (64, 64) and y.dtype == torch.float32
