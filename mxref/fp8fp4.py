"""Direct FP8 <-> MXFP4 conversion and scaling-aware re-blocking of MX tensors.

The reference contracts for the two conversions of "Practical FP4 Training for Large-Scale MoE
Models on Hopper GPUs" (arXiv 2603.02731), whose code is not public; docs/fp8fp4.md states
them in equations and derives the exactness condition.

* :func:`mxfp4_to_fp8`: MXFP4 values ``q * 2^(s_b - 127)`` re-encoded as FP8 (E4M3 or E5M2)
  under one coarser E8M0 scale per ``group`` elements along the block axis. The group
  exponent is ``G = max(s_max - k, 0)`` (bytes), ``s_max`` the largest scale byte of the
  group's live blocks (not NaN, at least one nonzero code) and ``k`` the largest integer with
  ``6 * 2^k <= max_normal(fp8)`` (6 for E4M3, 13 for E5M2). An element becomes the FP8 code
  of ``q * 2^(s_b - G)``: exact unless that value falls off the FP8 subnormal grid, in which
  case it is rounded once (RNE) and its group is marked inexact.
* :func:`fp8_to_mxfp4`: FP8 codes with their group scales quantized to MXFP4 from the exact
  values ``code * 2^(G - 127)`` (integer exponent/mantissa arithmetic, no float round trip);
  equal to ``quantize(fp8.dequantize(), "mxfp4", profile)`` whenever those values are finite
  in fp32, and to the same rules applied to the exact values when they are not.
* :func:`reblock`: an MX tensor blocked along one axis re-quantized along another from its
  exactly decoded values (decoded MX values are exact in fp32 unless they reach 2^128,
  which is refused).
* :func:`reblock_error`: what re-blocking costs against quantizing the source directly.

Every decision is made on integers by the kernels of mxref._kernels (element_parts,
round_magnitude, shared_exponent, zero_code, finish_code); nothing here rounds a float.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numba as nb
import numpy as np

from . import _kernels as K
from .errors import (AxisError, BlockSizeError, MXRefError, ProfileConflictError, ShapeError,
                     UnknownFormatError)
from .formats import E2M1, E4M3, E5M2, FORMATS, P_NAN, P_SIGNBIT, get_format
from .inputs import as_f32_bits
from .profiles import K_FLUSH, K_OVERFLOW, K_RCEIL_LOG2, K_ROUNDING, K_SZERO, get_profile
from .quantize import (MXTensor, _from_rows, _normalize_axis, _to_rows, dequantize, quantize,
                       sr_stream_rows)

__all__ = [
    "FP8_FORMATS",
    "DecodedOverflowError",
    "FP8FP4Error",
    "FP8Tensor",
    "FP8TensorError",
    "GroupSizeError",
    "ReblockShapeError",
    "ScaleRangeError",
    "UnsupportedConversionError",
    "exact_spread_limit",
    "fp8_to_mxfp4",
    "group_headroom",
    "mxfp4_to_fp8",
    "predict_exact",
    "quantize_fp8",
    "reblock",
    "reblock_error",
]

FP8_FORMATS = {"e4m3": E4M3, "e5m2": E5M2}
_FP8_MX = {"e4m3": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2"}
_MXFP4 = FORMATS["mxfp4"]
_E2M1P = E2M1.kernel_params()


# ---- typed errors --------------------------------------------------------------------------
class FP8FP4Error(MXRefError):
    """Base class of the errors this module raises."""


class UnsupportedConversionError(FP8FP4Error, TypeError):
    """A source format the conversion does not define (the message names it)."""


class GroupSizeError(FP8FP4Error, BlockSizeError):
    """An FP8 scale group that is not a whole number of MX blocks."""


class FP8TensorError(FP8FP4Error, ShapeError):
    """An FP8Tensor (or MXTensor) whose arrays do not fit together or hold invalid codes."""


class ReblockShapeError(FP8FP4Error, ShapeError):
    """reblock needs a 2-D tensor."""


class DecodedOverflowError(FP8FP4Error, ValueError):
    """An MX element whose exact value is >= 2^128 (not an fp32 number) in reblock."""


class ScaleRangeError(FP8FP4Error, ValueError):
    """A block amax >= 2^128 under a profile whose scale rule is defined on an fp32 amax."""


# ---- the FP8 tensor -------------------------------------------------------------------------
@dataclass
class FP8Tensor:
    """FP8 codes with one E8M0 scale byte per ``group`` elements along ``axis``.

    Value of element i: ``fp8(codes[i]) * 2^(scales[group of i] - 127)``; scale byte 0xFF
    makes its whole group NaN (as an OCP MX block). ``codes`` has the source's shape;
    ``scales`` has the same ndim with ``axis`` reduced to ``ceil(n / group)`` (``"row"``: one
    group spanning the axis, 0 groups for an empty axis). ``exact`` (bool, the shape of
    ``scales``) says per group whether the re-encoding that produced it was exact (None when
    the tensor did not come from :func:`mxfp4_to_fp8`); ``n_inexact`` counts the rounded
    elements, ``n_flushed`` the nonzero ones of them that became zero.
    """

    codes: np.ndarray
    scales: np.ndarray
    group: int | str
    axis: int
    fp8: str = "e4m3"
    exact: np.ndarray | None = None
    n_inexact: int = 0
    n_flushed: int = 0

    @property
    def shape(self):
        return self.codes.shape

    @property
    def group_length(self) -> int:
        """Elements per group along ``axis`` (``"row"``: the axis length, at least 1)."""
        n = self.codes.shape[self.axis]
        return max(n, 1) if self.group == "row" else int(self.group)

    def dequantize(self) -> np.ndarray:
        """float32 of ``code value * 2^(scale - 127)``, rounded once (as mxref.dequantize:
        exact unless it reaches 2^128, which gives Inf; NaN codes and 0xFF groups give NaN)."""
        _check_fp8_tensor(self)
        return dequantize(codes=self.codes, scales=self.scales, fmt=_FP8_MX[self.fp8],
                          axis=self.axis, block_size=self.group_length)


# ---- format facts, derived once from mxref.formats --------------------------------------------
def _fp8_format(fp8):
    if not isinstance(fp8, str) or fp8 not in FP8_FORMATS:
        raise UnknownFormatError(
            f"unknown fp8 element format {fp8!r}; use one of {', '.join(FP8_FORMATS)}")
    return FP8_FORMATS[fp8]


def group_headroom(fp8: str = "e4m3") -> int:
    """k: the largest integer with ``max_normal(e2m1) * 2^k <= max_normal(fp8)``
    (6 for E4M3: 6 * 64 = 384 <= 448 < 768; 13 for E5M2)."""
    el = _fp8_format(fp8)
    k = 0
    while E2M1.max_normal * 2 ** (k + 1) <= el.max_normal:
        k += 1
    return k


def _two_adic(v: Fraction) -> int:
    """Exponent of the lowest set bit of a nonzero dyadic Fraction (v = odd * 2^result)."""
    n, d = v.numerator, v.denominator
    return ((n & -n).bit_length() - 1) - (d.bit_length() - 1)


# finest-bit exponent nu(q) of each E2M1 magnitude code (q = odd * 2^nu); code 0 has none
FINEST_BIT = np.array([127] + [_two_adic(E2M1.decode_magnitude(c)) for c in range(1, 8)],
                      dtype=np.int64)


def _min_subnormal_exp(el) -> int:
    return el.emin - el.mbits       # e4m3: -9, e5m2: -16


def exact_spread_limit(finest_bit_exp: int, fp8: str = "e4m3") -> int:
    """Largest scale spread ``s_max - s_b`` at which a block is still exact in FP8, for a
    group whose largest live scale byte is at least k: ``k - e_sub + nu``, with nu the block's
    finest-bit exponent (min over its nonzero |q| of the exponent of the lowest set bit:
    -1 for 0.5/1.5, 0 for 1/3, 1 for 2/6, 2 for 4) and e_sub = log2 of FP8's smallest
    subnormal (-9 E4M3, -16 E5M2). E4M3: 15 + nu, so any spread <= 14 is exact."""
    return group_headroom(fp8) - _min_subnormal_exp(_fp8_format(fp8)) + int(finest_bit_exp)


# ---- validation ------------------------------------------------------------------------------
def _check_mx(mx, what: str, allow_any_mx: bool) -> int:
    """Validate an MXTensor argument; returns its normalized block axis."""
    if not isinstance(mx, MXTensor):
        raise UnsupportedConversionError(
            f"{what} takes an mxref.MXTensor, got {type(mx).__name__}")
    if mx.fmt.is_nvfp4:
        raise UnsupportedConversionError(
            f"{what} is not defined for NVFP4: its E4M3 block scales and fp32 tensor scale are "
            "not powers of two, so there is no exponent-only re-encoding or re-blocking contract"
            " (requantize from the source instead)")
    if not allow_any_mx and mx.fmt.element != E2M1:
        raise UnsupportedConversionError(
            f"{what} takes MXFP4 input, got {mx.fmt.name} ({mx.fmt.element.name} elements)")
    codes, scales = np.asarray(mx.codes), np.asarray(mx.scales)
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise FP8TensorError(f"{what}: codes and scales must be uint8, got {codes.dtype} and "
                             f"{scales.dtype}")
    ax = _normalize_axis(mx.axis, codes.ndim)
    expect = list(codes.shape)
    expect[ax] = -(-codes.shape[ax] // mx.block_size)
    if list(scales.shape) != expect:
        raise FP8TensorError(f"{what}: scales shape {scales.shape} does not match codes "
                             f"{codes.shape} with block {mx.block_size} along axis {ax}")
    width = mx.fmt.element.bits
    if width < 8 and codes.size and int(codes.max()) >> width:
        bad = int(np.flatnonzero(codes.reshape(-1) >> width)[0])
        raise FP8TensorError(f"{what}: code {int(codes.reshape(-1)[bad]):#x} at flat index {bad}"
                             f" does not fit {mx.fmt.element.name} ({width} bits)")
    return ax


def _group_length(group, block: int, n: int, what: str = "group") -> int:
    if isinstance(group, str):
        if group != "row":
            raise GroupSizeError(f"{what}={group!r}: use an int or 'row'")
        return max(n, 1)
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < 1:
        raise GroupSizeError(f"{what}={group!r} must be a positive int or 'row'")
    if group % block:
        raise GroupSizeError(
            f"{what}={group} is not a multiple of the MX block size {block}: every FP8 group "
            f"must hold whole blocks (use {block}, {2 * block}, {4 * block}, ... or 'row')")
    return int(group)


def _check_fp8_tensor(t) -> None:
    if not isinstance(t, FP8Tensor):
        raise UnsupportedConversionError(f"expected an FP8Tensor, got {type(t).__name__}")
    _fp8_format(t.fp8)
    codes, scales = np.asarray(t.codes), np.asarray(t.scales)
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise FP8TensorError(
            f"FP8Tensor codes and scales must be uint8, got {codes.dtype} and {scales.dtype}")
    ax = _normalize_axis(t.axis, codes.ndim)
    n = codes.shape[ax]
    glen = _group_length(t.group, 1, n, "FP8Tensor.group")
    expect = list(codes.shape)
    expect[ax] = -(-n // glen)
    if list(scales.shape) != expect:
        raise FP8TensorError(f"FP8Tensor scales shape {scales.shape} does not match codes "
                             f"{codes.shape} with group {t.group!r} along axis {ax} "
                             f"(expected {tuple(expect)})")


# ---- MXFP4 -> FP8 -----------------------------------------------------------------------------
@nb.njit(**K._JIT)
def _same_value(sig, e, sig8, e8):
    """sig * 2^e == sig8 * 2^e8 for positive integers (exponents within 62 of each other)."""
    m = min(e, e8)
    if e - m > 60 or e8 - m > 60:
        return False
    return (sig << (e - m)) == (sig8 << (e8 - m))


@nb.njit(**K._JIT)
def mxfp4_to_fp8_rows(codes, scales, block, glen, k, fp4p, fp8p, out, gscales, exact, counts):
    """Re-encode (rows, n) MXFP4 codes with (rows, nblk) E8M0 bytes along axis 1 as FP8.

    Per group: G = max(s_max - k, 0) over live blocks (not 0xFF, a nonzero code), 0 when none
    is live, 0xFF when every block is NaN. Element: FP8 code of q * 2^(s_b - G), RNE; NaN-block
    elements -> the FP8 NaN code; +-0 -> +-0. counts[r] = (inexact, flushed-to-zero)."""
    rows, n = codes.shape
    ngroups = gscales.shape[1]
    nan8 = fp8p[P_NAN]
    sbit8 = fp8p[P_SIGNBIT]
    mag4 = (np.int64(1) << fp4p[P_SIGNBIT]) - 1
    for r in range(rows):
        for gi in range(ngroups):
            glo = gi * glen
            ghi = min(glo + glen, n)
            smax = np.int64(-1)
            all_nan = True
            for b in range(glo // block, (ghi + block - 1) // block):
                sb = np.int64(scales[r, b])
                if sb == 0xFF:
                    continue
                all_nan = False
                for i in range(b * block, min(b * block + block, n)):
                    if np.int64(codes[r, i]) & mag4:
                        smax = max(smax, sb)
                        break
            if all_nan:
                g = np.int64(0xFF)
            elif smax < 0:
                g = np.int64(0)              # all-zero group: byte 0x00, as an MX amax of 0
            else:
                g = max(smax - k, np.int64(0))
            gscales[r, gi] = g
            ok = True
            for i in range(glo, ghi):
                sb = np.int64(scales[r, i // block])
                if sb == 0xFF:
                    out[r, i] = nan8
                    continue
                _, neg, sig, exp2 = K.element_parts(np.int64(codes[r, i]), fp4p)
                if sig == 0:
                    out[r, i] = neg << sbit8
                    continue
                e = exp2 + sb - g
                code8, _ = K.round_magnitude(sig, K.bit_length(sig) - 1, e, False, fp8p, K.RNE, 0)
                if code8 == 0:
                    ok = False
                    counts[r, 0] += 1
                    counts[r, 1] += 1
                else:
                    _, _, sig8, e8 = K.element_parts(code8, fp8p)
                    if not _same_value(sig, e, sig8, e8):
                        ok = False
                        counts[r, 0] += 1
                out[r, i] = code8 | (neg << sbit8)
            exact[r, gi] = ok


def mxfp4_to_fp8(mx: MXTensor, *, group=128, fp8: str = "e4m3") -> FP8Tensor:
    """Re-encode an MXFP4 tensor as FP8 with one E8M0 scale per ``group`` elements along its
    block axis (``group`` a multiple of the block size, or ``"row"``).

    Scale byte ``G = max(s_max - k, 0)`` (``s_max``: largest scale byte of the group's live
    blocks; ``k = group_headroom(fp8)``), 0x00 for an all-zero group, 0xFF when every block of
    the group is NaN; element: the FP8 code of ``q * 2^(s_b - G)`` (exact iff it lies on the
    FP8 grid, see :func:`predict_exact`; otherwise RNE, counted, group marked inexact).
    A NaN block (0xFF) inside a group with live blocks becomes FP8 NaN codes (0x7F).
    """
    _check_mx(mx, "mxfp4_to_fp8", allow_any_mx=False)
    el8 = _fp8_format(fp8)
    codes = np.asarray(mx.codes)
    ax = _normalize_axis(mx.axis, codes.ndim)
    n = codes.shape[ax]
    glen = _group_length(group, mx.block_size, n)
    ngroups = -(-n // glen)
    moved_shape = np.moveaxis(codes, ax, -1).shape
    c2 = _to_rows(codes, ax)
    s2 = _to_rows(np.asarray(mx.scales), ax)
    out = np.empty(c2.shape, dtype=np.uint8)
    g2 = np.empty((c2.shape[0], ngroups), dtype=np.uint8)
    ex2 = np.ones((c2.shape[0], ngroups), dtype=np.bool_)
    counts = np.zeros((c2.shape[0], 2), dtype=np.int64)
    if c2.size:
        mxfp4_to_fp8_rows(c2, s2, mx.block_size, glen, group_headroom(fp8), _E2M1P,
                          el8.kernel_params(), out, g2, ex2, counts)
    gshape = moved_shape[:-1] + (ngroups,)
    return FP8Tensor(codes=_from_rows(out, moved_shape, ax), scales=_from_rows(g2, gshape, ax),
                     group=group, axis=ax, fp8=fp8, exact=_from_rows(ex2, gshape, ax),
                     n_inexact=int(counts[:, 0].sum()), n_flushed=int(counts[:, 1].sum()))


def predict_exact(mx: MXTensor, *, group=128, fp8: str = "e4m3") -> np.ndarray:
    """Closed-form exactness of :func:`mxfp4_to_fp8` per group (bool, the FP8 scales' shape).

    A live block b (not NaN, a nonzero code) is exact iff ``(s_b - G) + nu_b >= e_sub``, with
    ``G = max(s_max - k, 0)``, ``nu_b`` its finest-bit exponent and ``e_sub`` log2 of the FP8
    smallest subnormal; for ``s_max >= k`` that is ``s_max - s_b <= exact_spread_limit(nu_b)``.
    Computed from scale bytes and code classes alone, independently of the kernel."""
    _check_mx(mx, "predict_exact", allow_any_mx=False)
    el8 = _fp8_format(fp8)
    k, esub = group_headroom(fp8), _min_subnormal_exp(el8)
    codes = np.asarray(mx.codes)
    ax = _normalize_axis(mx.axis, codes.ndim)
    n, bs = codes.shape[ax], mx.block_size
    glen = _group_length(group, bs, n)
    ngroups, nblk = -(-n // glen), -(-n // bs)
    c2 = _to_rows(codes, ax).astype(np.int64)
    s2 = _to_rows(np.asarray(mx.scales), ax).astype(np.int64)
    rows = c2.shape[0]
    pad = nblk * bs - n
    nu = FINEST_BIT[np.pad(c2 & 7, ((0, 0), (0, pad)))].reshape(rows, nblk, bs).min(axis=2)
    live = (nu < 127) & (s2 != 0xFF)
    bpg = glen // bs if group != "row" else max(nblk, 1)
    gpad = ngroups * bpg - nblk
    live_g = np.pad(live, ((0, 0), (0, gpad))).reshape(rows, ngroups, bpg)
    s_g = np.pad(s2, ((0, 0), (0, gpad))).reshape(rows, ngroups, bpg)
    nu_g = np.pad(nu, ((0, 0), (0, gpad)), constant_values=127).reshape(rows, ngroups, bpg)
    smax = np.where(live_g, s_g, -1).max(axis=2, initial=-1)
    g = np.maximum(smax - k, 0)[..., None]
    ok = ~live_g | ((s_g - g) + nu_g >= esub)
    moved_shape = np.moveaxis(codes, ax, -1).shape
    return _from_rows(ok.all(axis=2), moved_shape[:-1] + (ngroups,), ax)


# ---- FP8 -> MXFP4 -----------------------------------------------------------------------------
BAD_SCALE = -1000        # kernel status: amax >= 2^128 under a profile defined on fp32 amax


@nb.njit(**K._JIT)
def exact_amax_exponent(nsig, top, fp, pp):
    """Shared exponent of the exact amax ``nsig * 2^(top - 23)`` (2^23 <= nsig < 2^24).

    In fp32 range the amax is an fp32 number and K.shared_exponent decides on its bits
    (subnormals included: nsig has at most 4 significant bits here, so the shift is exact).
    Above it (top >= 128) every exact rule is E - emax_elem + [a test on nsig], so the rule is
    applied to the amax scaled by 2^-64 and 64 added before the clamp; torchao's float32-log2
    RCEIL is not shift invariant and returns BAD_SCALE."""
    if top >= -126 and top <= 127:
        return K.shared_exponent((top + 127) << 23 | (nsig & 0x7FFFFF), fp, pp)
    if top < -126:
        return K.shared_exponent(nsig >> (-126 - top), fp, pp)
    if pp[K_RCEIL_LOG2] != 0:
        return BAD_SCALE
    s = K.shared_exponent((top - 64 + 127) << 23 | (nsig & 0x7FFFFF), fp, pp) + 64
    return K.clamp_exponent(s, pp)


@nb.njit(**K._JIT)
def fp8_to_mxfp4_rows(codes, gscales, glen, block, fp8p, fp4p, pp, rbits, out, scales, status):
    """MXFP4-quantize (rows, n) FP8 codes with (rows, ngroups) E8M0 group bytes along axis 1.

    Element i is sig * 2^(exp2 + G - 127) with (sig, exp2) read from its FP8 fields; the block
    amax is the integer max of normalized (exponent, significand) pairs; the rest is the MX
    quantization of docs/semantics.md on those exact values, step for step as
    K.quantize_mx / K.encode_f32, with the block's NaN / Inf decided by K.nonfinite_policy."""
    rows, n = codes.shape
    nblk = scales.shape[1]
    flush = pp[K_FLUSH] != 0
    mode = pp[K_ROUNDING]
    use_rbits = mode == K.STOCHASTIC
    ovf_mode = pp[K_OVERFLOW]
    szero = pp[K_SZERO]
    fill = K.nan_element_code(fp4p)
    for r in range(rows):
        for b in range(nblk):
            lo = b * block
            hi = min(lo + block, n)
            has_nan = False
            has_inf = False
            atop = np.int64(-100000)
            asig = np.int64(0)
            for i in range(lo, hi):
                g = np.int64(gscales[r, i // glen])
                kind, _, sig, exp2 = K.element_parts(np.int64(codes[r, i]), fp8p)
                if g == 0xFF or kind == 2:
                    has_nan = True
                elif kind == 1:
                    has_inf = True
                elif sig != 0:
                    p = K.bit_length(sig) - 1
                    top = p + exp2 + g - 127
                    nsig = sig << (23 - p)
                    if not (flush and top < -126) and (top > atop or (top == atop and nsig > asig)):
                        atop = top
                        asig = nsig
            s = K.nonfinite_policy(has_nan, has_inf, fp4p, pp)
            if s == K.FINITE_RULE:
                # an all-zero block: shared_exponent(0) (-127, or amax_floor's exponent)
                s = K.shared_exponent(0, fp4p, pp) if asig == 0 else \
                    exact_amax_exponent(asig, atop, fp4p, pp)
            if s == BAD_SCALE:
                status[0] = 1
                status[1] = r
                status[2] = b
                s = K.NAN_SCALE
            scales[r, b] = 0xFF if s == K.NAN_SCALE else s + 127
            if s == K.NAN_SCALE:
                for i in range(lo, hi):
                    out[r, i] = fill
                continue
            se = K.element_exponent(s, pp)
            for i in range(lo, hi):
                g = np.int64(gscales[r, i // glen])
                kind, neg, sig, exp2 = K.element_parts(np.int64(codes[r, i]), fp8p)
                if g == 0xFF or kind == 2:
                    out[r, i] = K.nan_element(neg, fp4p, pp)   # fill, or +-6 (signed_max)
                elif kind == 1:
                    out[r, i] = K.finish_code(0, True, neg, fp4p, ovf_mode)
                elif sig == 0:
                    out[r, i] = K.zero_code(neg, True, fp4p, szero)
                else:
                    p = K.bit_length(sig) - 1
                    if flush and p + exp2 + g - 127 < -126:
                        out[r, i] = K.zero_code(neg, True, fp4p, szero)
                        continue
                    rb = np.int64(rbits[r, i]) if use_rbits else np.int64(0)
                    code, ovf = K.round_magnitude(sig, p, exp2 + g - 127 - se, False, fp4p,
                                                  mode, rb)
                    if code == 0:
                        out[r, i] = K.zero_code(neg, False, fp4p, szero)
                    else:
                        out[r, i] = K.finish_code(code, ovf, neg, fp4p, ovf_mode)


def fp8_to_mxfp4(fp8: FP8Tensor, *, profile="ocp", block_size: int | None = None,
                 rbits=None, seed: int | None = None, rng_offset: int = 0) -> MXTensor:
    """Quantize FP8 codes with their group scales to MXFP4 along ``fp8.axis``, directly.

    Contract: ``quantize(V, "mxfp4", profile, axis=fp8.axis)`` with V the exact values
    ``fp8(code) * 2^(G - 127)``; when every V is finite in fp32 (always unless
    ``G + floor(log2 |code|) >= 255``) that is ``quantize(fp8.dequantize(), ...)`` bit for bit.
    rbits / seed as in :func:`mxref.quantize` (stochastic profiles only).
    """
    _check_fp8_tensor(fp8)
    el8 = _fp8_format(fp8.fp8)
    prof = get_profile(profile)
    prof.check_format(_MXFP4)
    if prof.scale_log2_f32 or prof.element_round_f32 or prof.zero_block_amax != "zero":
        raise ProfileConflictError(
            f"profile {prof.name!r}: fp8_to_mxfp4 does not define microxcaling's float32 torch "
            "operation order (scale_log2_f32 / element_round_f32 / zero_block_amax); quantize "
            "the dequantized float32 values with mxref.quantize instead")
    bs = block_size or prof.block_size or _MXFP4.block_size
    if block_size and prof.block_size and block_size != prof.block_size:
        raise ProfileConflictError(
            f"block_size={block_size} contradicts profile {prof.name!r} block_size={prof.block_size}")
    if not _MXFP4.allowed_block_size(bs):
        raise BlockSizeError(f"block size {bs!r} is not allowed for mxfp4 (a power of two in "
                             "[2, 1024], OCP uses 32)")
    codes = np.asarray(fp8.codes)
    ax = _normalize_axis(fp8.axis, codes.ndim)
    n = codes.shape[ax]
    if n % bs and prof.ragged == "error":
        raise BlockSizeError(f"length {n} along axis {ax} is not a multiple of block size {bs} "
                             f"and profile {prof.name!r} refuses ragged blocks")
    rb2 = sr_stream_rows(prof, rbits, seed, rng_offset, codes.shape, ax)
    moved_shape = np.moveaxis(codes, ax, -1).shape
    c2 = _to_rows(codes, ax)
    g2 = _to_rows(np.asarray(fp8.scales), ax)
    nblk = -(-n // bs)
    out = np.empty(c2.shape, dtype=np.uint8)
    s2 = np.empty((c2.shape[0], nblk), dtype=np.uint8)
    status = np.zeros(3, dtype=np.int64)
    if c2.size:
        fp8_to_mxfp4_rows(c2, g2, fp8.group_length, bs, el8.kernel_params(), _E2M1P,
                          prof.kernel_params(), rb2, out, s2, status)
    if status[0]:
        raise ScaleRangeError(
            f"profile {prof.name!r} defines its scale from an fp32 amax (float32 log2), but "
            f"block {int(status[2])} of row {int(status[1])} has an exact amax >= 2^128")
    return MXTensor(codes=_from_rows(out, moved_shape, ax),
                    scales=_from_rows(s2, moved_shape[:-1] + (nblk,), ax),
                    fmt=_MXFP4, profile=prof, axis=ax, block_size=bs,
                    source_dtype=f"fp8_{fp8.fp8}", meta={"source": "fp8_to_mxfp4"})


def quantize_fp8(x, *, group=128, fp8: str = "e4m3", axis: int = -1, profile="ocp") -> FP8Tensor:
    """Power-of-two-scaled FP8 (one E8M0 byte per ``group`` along ``axis``): MX quantization
    of ``x`` with block size ``group`` (so ``group`` is a power of two in [2, 1024], or "row"
    for such an axis length). A convenience source for :func:`fp8_to_mxfp4`."""
    _fp8_format(fp8)
    fmt = FORMATS[_FP8_MX[fp8]]
    bits, _ = as_f32_bits(x)
    ax = _normalize_axis(axis, bits.ndim)
    glen = _group_length(group, 1, bits.shape[ax])
    if not fmt.allowed_block_size(glen):
        raise GroupSizeError(f"quantize_fp8 needs a group that is a power of two in [2, 1024] "
                             f"(an MX block size), got {group!r} (length {glen})")
    q = quantize(bits.view(np.float32), fmt, profile, axis=ax, block_size=glen)
    return FP8Tensor(codes=q.codes, scales=q.scales, group=group, axis=ax, fp8=fp8)


# ---- re-blocking ------------------------------------------------------------------------------
@cache
def _floor_log2_table(el) -> np.ndarray:
    """floor(log2 |value|) per element code (-1000 for zeros, NaN and Inf), from Fractions."""
    out = np.full(256, -1000, dtype=np.int64)
    for c in range(1 << el.bits):
        v = el.decode(c)
        if isinstance(v, Fraction) and v != 0:
            a = abs(v)
            e = a.numerator.bit_length() - a.denominator.bit_length()
            out[c] = e if Fraction(2) ** e <= a else e - 1
    return out


def _decoded_overflow(mx: MXTensor, ax: int):
    """Flat index of the first element whose exact value is >= 2^128, or None.

    value = q * 2^(s - 127) >= 2^128 iff floor(log2 |q|) + s >= 255 (scale byte s != 0xFF);
    only blocks with s >= 255 - floor(log2 max_normal) can hold one."""
    codes = np.asarray(mx.codes)
    scales = np.asarray(mx.scales).astype(np.int64)
    table = _floor_log2_table(mx.fmt.element)
    if not codes.size or not ((scales >= 255 - table.max()) & (scales != 0xFF)).any():
        return None
    scales = np.repeat(scales, mx.block_size, axis=ax)
    scales = np.take(scales, np.arange(codes.shape[ax]), axis=ax)
    bad = (table[codes.astype(np.int64)] + scales >= 255) & (scales != 0xFF)
    return int(np.flatnonzero(bad.reshape(-1))[0]) if bad.any() else None


def reblock(mx: MXTensor, *, axis: int = 0, profile=None, rbits=None, seed: int | None = None,
            rng_offset: int = 0) -> MXTensor:
    """Scaling-aware re-blocking: the 2-D MX tensor ``mx`` quantized again with its blocks
    along ``axis`` (same format and block size; ``profile`` defaults to ``mx.profile``).

    Contract: ``quantize(V, mx.fmt, profile, axis=axis)`` with V the exact decoded values.
    Every V is an fp32 number (<= 8 significant bits, >= 2^-143) unless it reaches 2^128
    (large scale bytes, e.g. MXFP4 0xFE with |q| >= 2), which raises DecodedOverflowError;
    so V = mxref.dequantize(mx) exactly and the contract is dequantize + quantize. NaN blocks
    (0xFF) and NaN/Inf codes decode to NaN/Inf and follow the profile's poison rules.
    """
    src_ax = _check_mx(mx, "reblock", allow_any_mx=True)
    codes = np.asarray(mx.codes)
    if codes.ndim != 2:
        raise ReblockShapeError(
            f"reblock takes a 2-D tensor (rows x cols), got {codes.ndim}-D shape {codes.shape}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -2 <= axis < 2:
        raise AxisError(f"axis {axis!r} is out of range for a 2-D tensor (use 0, 1, -1 or -2)")
    bad = _decoded_overflow(mx, src_ax)
    if bad is not None:
        idx = np.unravel_index(bad, codes.shape)
        sidx = list(idx)
        sidx[src_ax] //= mx.block_size
        raise DecodedOverflowError(
            f"element {tuple(int(i) for i in idx)} (code {int(codes[idx]):#x}, scale byte "
            f"{int(np.asarray(mx.scales)[tuple(sidx)]):#04x}) decodes to a value >= 2^128, which "
            "fp32 cannot hold; reblock refuses rather than requantize an Inf")
    prof = get_profile(mx.profile if profile is None else profile)
    out = quantize(dequantize(mx), mx.fmt, prof, axis=int(axis), block_size=mx.block_size,
                   rbits=rbits, seed=seed, rng_offset=rng_offset)
    out.meta["reblocked_from_axis"] = src_ax
    return out


def _dequant64(t: MXTensor) -> np.ndarray:
    return dequantize(t).astype(np.float64)


def reblock_error(x, fmt="mxfp4", *, profile="ocp", src_axis: int = 1, dst_axis: int = 0,
                  seed: int | None = None) -> dict:
    """What re-blocking costs: quantize ``x`` along ``src_axis``, :func:`reblock` to
    ``dst_axis``, and compare with quantizing ``x`` directly along ``dst_axis``.

    Statistics in float64 over the elements where x and every decoded tensor are finite:
    ``mse_*`` = mean((decoded - x)^2) for the source, reblocked and direct tensors,
    ``mse_added`` = mean((reblocked - source)^2) (what the re-blocking step alone moves),
    ``rel_*`` = that / mean(x^2), ``mse_ratio`` = mse_reblocked / mse_direct,
    ``code_diff_frac`` / ``scale_diff_frac`` = fraction of element codes / scale bytes where
    the reblocked and direct tensors differ."""
    bits, _ = as_f32_bits(x)
    if bits.ndim != 2:
        raise ReblockShapeError(f"reblock_error takes a 2-D x, got shape {bits.shape}")
    xf = bits.view(np.float32)
    kw = {} if seed is None else {"seed": seed}
    src = quantize(xf, fmt, profile, axis=src_axis, **kw)
    moved = reblock(src, axis=dst_axis, profile=profile, **kw)
    direct = quantize(xf, fmt, profile, axis=dst_axis, **kw)
    x64 = xf.astype(np.float64)
    ds, dr, dd = _dequant64(src), _dequant64(moved), _dequant64(direct)
    ok = np.isfinite(x64) & np.isfinite(ds) & np.isfinite(dr) & np.isfinite(dd)
    x_ok = x64[ok]
    power = float(np.mean(x_ok * x_ok)) if x_ok.size else 0.0

    def mse(d):
        e = d[ok] - x_ok
        return float(np.mean(e * e)) if e.size else 0.0

    m_src, m_re, m_dir = mse(ds), mse(dr), mse(dd)
    added = dr[ok] - ds[ok]
    m_add = float(np.mean(added * added)) if added.size else 0.0
    rel = (lambda m: m / power if power else 0.0)
    return {
        "shape": tuple(bits.shape), "fmt": get_format(fmt).name, "profile": get_profile(profile).name, "src_axis": src_axis,
        "dst_axis": dst_axis, "n_finite": int(ok.sum()),
        "mse_source": m_src, "mse_reblocked": m_re, "mse_direct": m_dir,
        "rel_mse_source": rel(m_src), "rel_mse_reblocked": rel(m_re),
        "rel_mse_direct": rel(m_dir),
        "mse_ratio": m_re / m_dir if m_dir else float("nan"),
        "mse_added": m_add, "rel_mse_added": rel(m_add),
        "code_diff_frac": float(np.mean(moved.codes != direct.codes)) if bits.size else 0.0,
        "scale_diff_frac": float(np.mean(moved.scales != direct.scales)) if bits.size else 0.0,
    }
