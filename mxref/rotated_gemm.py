"""Rotated MX GEMM ``Y = Q(X.D.H) . Q(W.D.H)^T`` and its error versus ``X.W^T``.

H is the normalized Sylvester Hadamard matrix applied block-diagonally along K (n in
{16, ..., 256}), D the sign vector (the same for both operands, so D.H.H^T.D = I and the
rotation cancels in exact arithmetic); Q is MX/NVFP4 quantization along K under ``profile``;
the product is one of the GEMM contracts of :mod:`mxref.gemm`. Every bit of Y follows from the
rotation contract (docs/rotations.md), the quantization rules (docs/semantics.md) and the GEMM
contract (docs/gemm.md); the error statistics against the float64 product ``X.W^T`` are
statistics (float64), not contracts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import ShapeError
from .gemm import gemm, gemm_error_bound
from .inputs import as_f32_bits
from .quantize import MXTensor, quantize
from .rotate import quantize_rotated

__all__ = ["RotatedGemm", "rotated_gemm", "rotated_gemm_error"]


@dataclass
class RotatedGemm:
    y: np.ndarray                 # float32 [M, N]
    qx: MXTensor                  # Q(X.D.H), blocks along K
    qw: MXTensor                  # Q(W.D.H)
    mode: str
    rotation: dict = field(default_factory=dict)

    def bound(self) -> np.ndarray:
        """|y_kernel - y_exact| bound for any fp32 accumulation order (mxref.gemm)."""
        return gemm_error_bound(self.qx, self.qw)


def _operands(x, w, source_dtype):
    xb, _ = as_f32_bits(x, source_dtype=source_dtype)
    wb, _ = as_f32_bits(w, source_dtype=source_dtype)
    if xb.ndim != 2 or wb.ndim != 2:
        raise ShapeError(f"rotated_gemm takes 2-D operands X[M, K] and W[N, K]; got X with "
                         f"{xb.ndim} and W with {wb.ndim} dimensions")
    if xb.shape[1] != wb.shape[1]:
        raise ShapeError(f"K mismatch: X[M, K] has K = {xb.shape[1]}, W[N, K] has K = "
                         f"{wb.shape[1]}")
    return xb.view(np.float32), wb.view(np.float32)


def rotated_gemm(x, w, fmt_x="mxfp4", fmt_w=None, *, n: int = 32, profile="ocp",
                 signs="none", seed: int = 0, step: int = 0, tensor_id: int = 0,
                 method: str = "butterfly", round_to: str = "float32", mode: str = "exact",
                 source_dtype: str | None = None) -> RotatedGemm:
    """Y = Q(X.D.H) . Q(W.D.H)^T for X[M, K], W[N, K] (K a multiple of n).

    Both operands are rotated with the same H_n and the same sign vector (kind + seed, step,
    tensor_id, or an explicit +-1 array), then quantized along K with ``profile`` (``fmt_w``
    defaults to ``fmt_x``), then multiplied with GEMM contract ``mode`` ('exact' or
    'block_sequential')."""
    xf, wf = _operands(x, w, source_dtype)
    fmt_w = fmt_w or fmt_x
    kw = dict(axis=1, signs=signs, seed=seed, step=step, tensor_id=tensor_id, method=method,
              round_to=round_to)
    qx = quantize_rotated(xf, fmt_x, profile, n, **kw)
    qw = quantize_rotated(wf, fmt_w, profile, n, **kw)
    y = gemm(qx, qw, mode=mode)
    return RotatedGemm(y=y, qx=qx, qw=qw, mode=mode, rotation=dict(qx.meta.get("rotation", {})))


def _rel_err(y, ref) -> float:
    """||y - ref||_F / ||ref||_F in float64 (a statistic, never a value the contract decides)."""
    den = float(np.sum(ref * ref))
    return (float(np.sum((y - ref) ** 2)) / den) ** 0.5 if den else float("nan")


def rotated_gemm_error(x, w, fmt_x="mxfp4", fmt_w=None, *, n: int = 32, profile="ocp",
                       signs="none", seed: int = 0, step: int = 0, tensor_id: int = 0,
                       source_dtype: str | None = None) -> dict:
    """Error of the rotated and of the plain quantized GEMM versus X.W^T (float64).

    Returns relative Frobenius errors ``rel_err_rotated`` and ``rel_err_plain``, their ratio,
    and the max abs errors. The reference X.W^T is float64 (each fp32 x fp32 product is exact
    in float64; the sums round: a statistic, not a contract). Rows with NaN/Inf are dropped
    from the statistics and counted."""
    xf, wf = _operands(x, w, source_dtype)
    fmt_w = fmt_w or fmt_x
    r = rotated_gemm(xf, wf, fmt_x, fmt_w, n=n, profile=profile, signs=signs, seed=seed,
                     step=step, tensor_id=tensor_id)
    plain = gemm(quantize(xf, fmt_x, profile, axis=1), quantize(wf, fmt_w, profile, axis=1))
    ref = xf.astype(np.float64) @ wf.astype(np.float64).T
    ok = np.isfinite(ref) & np.isfinite(r.y) & np.isfinite(plain)
    yr, yp, rf = (np.where(ok, a.astype(np.float64), 0.0) for a in (r.y, plain, ref))
    er, ep = _rel_err(yr, rf), _rel_err(yp, rf)
    return {"fmt_x": str(fmt_x), "fmt_w": str(fmt_w), "n": n, "profile": str(profile),
            "signs": r.rotation.get("signs"), "shape": [int(xf.shape[0]), int(wf.shape[0]),
                                                        int(xf.shape[1])],
            "rel_err_rotated": er, "rel_err_plain": ep,
            "ratio_rotated_to_plain": er / ep if ep else float("nan"),
            "max_abs_err_rotated": float(np.max(np.abs(yr - rf))) if ok.any() else 0.0,
            "max_abs_err_plain": float(np.max(np.abs(yp - rf))) if ok.any() else 0.0,
            "non_finite_outputs": int((~ok).sum())}
