"""Rotated GEMM: Y = Q(X.D.H) . Q(W.D.H)^T is exactly the composition of the three contracts,
the rotation cancels (same H and signs on both sides), and bad operands get typed errors."""
from __future__ import annotations

import numpy as np
import pytest

from mxref.errors import ShapeError
from mxref.gemm import gemm
from mxref.rotate import RotationShapeError, hadamard, quantize_rotated
from mxref.rotated_gemm import rotated_gemm, rotated_gemm_error


def _xw(seed=0, m=8, n=6, k=256, outliers=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    if outliers:
        x[:, rng.integers(0, k, 4)] *= 40
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    return x, w


@pytest.mark.parametrize("fx, fw, prof", [("mxfp4", "mxfp4", "ocp"),
                                          ("mxfp8_e4m3", "mxfp4", "rceil"),
                                          ("nvfp4", "nvfp4", "te_nvfp4")])
@pytest.mark.parametrize("mode", ["exact", "block_sequential"])
def test_is_the_composition_of_the_contracts(fx, fw, prof, mode):
    x, w = _xw()
    r = rotated_gemm(x, w, fx, fw, n=32, profile=prof, signs="random", seed=5, step=2,
                     mode=mode)
    qx = quantize_rotated(x, fx, prof, 32, axis=1, signs="random", seed=5, step=2)
    qw = quantize_rotated(w, fw, prof, 32, axis=1, signs="random", seed=5, step=2)
    assert np.array_equal(r.y.view(np.uint32), gemm(qx, qw, mode=mode).view(np.uint32))
    assert r.rotation["signs"] == "random" and r.rotation["n"] == 32
    assert np.array_equal(r.qx.codes, qx.codes) and np.array_equal(r.qw.scales, qw.scales)


def test_rotation_cancels_in_exact_arithmetic():
    """(X D H)(W D H)^T = X W^T: with exactly representable data and the exact rotation the
    product is unchanged before quantization (checked with H itself, no mxref code)."""
    n = 16
    h = hadamard(n).astype(np.float64) / 4.0
    d = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float64)
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (3, n)).astype(np.float64)
    w = rng.integers(-8, 8, (2, n)).astype(np.float64)
    assert np.array_equal((x * d) @ h @ ((w * d) @ h).T, x @ w.T)


def test_rotation_lowers_the_error_on_outlier_channels_and_costs_little_without():
    x, w = _xw(seed=3, m=64, n=64, k=512)
    e = rotated_gemm_error(x, w, "mxfp4", n=32, signs="random", seed=1)
    assert e["rel_err_rotated"] < 0.9 * e["rel_err_plain"], e
    x0, w0 = _xw(seed=3, m=64, n=64, k=512, outliers=False)
    e0 = rotated_gemm_error(x0, w0, "mxfp4", n=32, signs="random", seed=1)
    assert e0["rel_err_rotated"] < 1.1 * e0["rel_err_plain"], e0
    assert e["non_finite_outputs"] == 0 and e["shape"] == [64, 64, 512]


def test_bad_operands_are_typed_errors():
    x, w = _xw()
    with pytest.raises(ShapeError, match="K mismatch"):
        rotated_gemm(x, w[:, :128], "mxfp4")
    with pytest.raises(ShapeError, match="2-D"):
        rotated_gemm(x[None], w, "mxfp4")
    with pytest.raises(RotationShapeError):
        rotated_gemm(x[:, :48], w[:, :48], "mxfp4", n=32)
