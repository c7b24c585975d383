"""Corrections for the three error components, each a quantizer whose effect the
decomposition (mxref.decompose) measures; plus the AQN noise schedule (a training utility).

* Macro-block scaling (against scale bias): a [1, 2] scale S_M per macro block, E8M0 scales
  of the 32-blocks of x / S_M.
* Outlier fallback (against the deadzone, and some scale bias): flagged blocks, or the top-k
  elements of flagged blocks, kept in bf16.
* Four-over-Six NVFP4: per 16-block, the block scale maps amax to 6 or to 4, whichever gives
  the smaller block error.
* AQN (QeRL): the stage-wise sigma schedule and the RMSNorm weight noise.

A corrected quantizer is decomposed against the ideal quantizer of the blocks it actually
block-quantizes; elements it keeps outside the block format (bf16 passthrough) carry only
their own rounding, as their grid component. docs/decompose.md states every rule exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numba as nb
import numpy as np

from ._kernels import (
    _JIT,
    F32_INF,
    F32_MAXBITS,
    F32_ONE,
    NV_EXACT,
    NV_TE,
    bit_length,
    block_amax,
    block_poisoned,
    code_to_f32,
    element_parts,
    encode_f32,
    exact_quotient,
    f32_div,
    f32_min_pos,
    f32_mul,
    f32_parts,
    finish_code,
    normalize_f32,
    nvfp4_block_scale,
    round_magnitude,
    te_4over6_block_scale,
    zero_code,
)
from .decompose import (
    Decomposition,
    _blocked,
    _resolve,
    decompose_quantized,
    finite_block_amax,
    grid_facts,
    ideal_scaled,
    mx_exact_values,
    mx_scales,
)
from .errors import BlockSizeError, MXRefError, ProfileConflictError
from .formats import E2M1, E4M3, FP32, P_NAN
from .profiles import K_FLUSH, K_OVERFLOW, K_ROUNDING, K_SZERO
from .quantize import MXTensor, _from_rows, _global_amax_bits, _to_rows, quantize

__all__ = [
    "MacroBlockTensor", "quantize_macroblock", "decompose_macroblock", "MACRO_SCALE_DTYPES",
    "OutlierFallbackTensor", "quantize_outlier_fallback", "decompose_outlier_fallback",
    "bf16_rne_bits", "quantize_nvfp4_4over6", "decompose_nvfp4_4over6",
    "aqn_sigma_trend", "aqn_stage", "aqn_sigma", "aqn_apply", "CorrectionConfigError",
    "GeneratorTypeError",
]

_F32P = FP32.kernel_params()
_E4M3P = E4M3.kernel_params()


class CorrectionConfigError(MXRefError, ValueError):
    """A correction parameter out of its domain (macro size, rule, tau, rho, k, AQN knobs)."""


class GeneratorTypeError(MXRefError, TypeError):
    """aqn_apply got a weight / generator pair it cannot use together."""


def _rows_of(x, fmt, profile, axis, source_dtype, from_float64=None):
    fmt, prof, bits, src, ax = _resolve(x, fmt, profile, axis, None, source_dtype, from_float64)
    return fmt, prof, src, ax, _to_rows(bits, ax), np.moveaxis(bits, ax, -1).shape


def _block_of(fmt, prof) -> int:
    return prof.block_size or fmt.block_size


# ==== macro-block scaling ==================================================================
MACRO_SCALE_DTYPES = {"float32": 24, "bfloat16": 8, "e4m3": 4}   # significant bits


@nb.njit(**_JIT)
def _macro_scale_ints(bits, macro, flush, m_odd, p, out):
    """out[r, j] = S_M * 2^(p-1): the significand of A_M / M (A_M the finite amax of macro
    block j), rounded up to p bits; 2^(p-1) (S_M = 1) for an all-zero macro block.

    A_M / M = (sa / m_odd) 2^(ea - e_m), sa in [2^23, 2^24); with t = floor(log2(sa / m_odd)),
    S_M = ceil(sa 2^(p-1-t) / m_odd) / 2^(p-1), in [1, 2]."""
    rows, n = bits.shape
    for r in range(rows):
        for j in range(out.shape[1]):
            lo = j * macro
            amax, _, _ = block_amax(bits, r, lo, min(lo + macro, n), flush)
            if amax == 0:
                out[r, j] = np.int64(1) << (p - 1)
                continue
            sa, _ = normalize_f32(amax)
            t = bit_length(sa) - bit_length(m_odd)
            if sa < (np.int64(m_odd) << t):
                t -= 1
            sh = p - 1 - t
            if sh >= 0:
                num = sa << sh
                den = np.int64(m_odd)
            else:
                num = sa
                den = np.int64(m_odd) << (-sh)
            out[r, j] = (num + den - 1) // den


@nb.njit(**_JIT)
def _divide_rows(bits, group, divisor_bits, f32p, out):
    """out[r, i] = fl32(x[r, i] / S[r, i // group]): one IEEE fp32 RNE division each, in the
    integer domain (mxref._kernels.f32_div)."""
    rows, n = bits.shape
    for r in range(rows):
        for i in range(n):
            out[r, i] = f32_div(np.int64(bits[r, i]), divisor_bits[r, i // group], f32p)


def _scale_ints_to_f32_bits(s_int: np.ndarray, p: int) -> np.ndarray:
    """fp32 bits of S = s_int / 2^(p-1) for 2^(p-1) <= s_int <= 2^p (S in [1, 2])."""
    frac = (s_int - (1 << (p - 1))) << (24 - p)
    bits = (127 << 23) + frac                         # s_int = 2^p carries into exponent 128
    return bits.astype(np.uint32)


def _encode_macro_bits(f32_bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return f32_bits.astype(np.uint32)
    if dtype == "bfloat16":
        return (f32_bits >> np.uint32(16)).astype(np.uint16)     # exact: 8 significant bits
    # e4m3 code of S in [1, 2]: exponent field e + 7, mantissa the top 3 fraction bits
    e = (f32_bits >> np.uint32(23)).astype(np.int64) - 127
    m = (f32_bits >> np.uint32(20)) & np.uint32(7)
    return (((e + 7) << 3) | m).astype(np.uint8)


@dataclass
class MacroBlockTensor:
    """Macro-block scaled MX tensor: ``x_hat = S_M * 2^(e_b) * element``.

    ``inner`` is the MX quantization (codes, E8M0 micro-scales) of ``x / S_M``;
    ``macro_scales`` holds S_M (float32 values in [1, 2]) with the block axis reduced to
    ``ceil(n / macro)``; ``macro_scale_bits`` the same values encoded in
    ``macro_scale_dtype`` (fp32 bits, bf16 bits or an E4M3 code); ``scaled_bits`` the fp32
    bits of x / S_M that the micro quantizer saw.
    """

    inner: MXTensor
    macro_scales: np.ndarray
    macro_scale_bits: np.ndarray
    macro: int
    macro_scale_dtype: str
    scaled_bits: np.ndarray

    codes = property(lambda self: self.inner.codes)
    scales = property(lambda self: self.inner.scales)
    fmt = property(lambda self: self.inner.fmt)
    profile = property(lambda self: self.inner.profile)
    axis = property(lambda self: self.inner.axis)
    block_size = property(lambda self: self.inner.block_size)

    def _macro_rep(self) -> np.ndarray:
        s2 = _to_rows(self.macro_scales, self.axis).astype(np.float64)
        n = _to_rows(self.codes, self.axis).shape[1]
        return np.repeat(s2, self.macro, axis=1)[:, :n]

    def dequantize_exact(self) -> np.ndarray:
        """S_M * element * 2^(e_b) as exact float64 (<= 24 + 8 significant bits)."""
        v2 = mx_exact_values(self.inner) * self._macro_rep()
        return _from_rows(v2, np.moveaxis(self.codes, self.axis, -1).shape, self.axis)

    def dequantize(self) -> np.ndarray:
        """The exact value rounded once to fp32 (RNE; overflow -> Inf)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self.dequantize_exact().astype(np.float32)


def _macro_size(macro, n: int, block: int) -> int:
    if macro == "row":
        return max(n, 1)
    if not isinstance(macro, (int, np.integer)) or isinstance(macro, bool) or macro < block \
            or macro % block:
        raise CorrectionConfigError(
            f"macro={macro!r}: a macro block is 'row' or a positive multiple of the block size "
            f"{block} (e.g. 128 or 256), so no micro block straddles two macro blocks")
    return int(macro)


def quantize_macroblock(x, fmt="mxfp4", profile="ocp", *, macro=128, axis=-1,
                        macro_scale_dtype="float32", source_dtype=None) -> MacroBlockTensor:
    """Macro-block scaling (training_anchors B.3), bit-exactly:

    1. A_M = max |x| over the finite elements of each macro block (``macro`` elements along
       the axis, or the whole row); S_M = the significand of A_M / M rounded **up** to the
       dtype's precision (24, 8 or 4 bits), S_M in [1, 2] (1 for an all-zero macro block).
       Rounding up keeps A_M / S_M <= M 2^k, so the macro maximum is never clipped.
    2. x' = fl32(x / S_M): one IEEE fp32 RNE division per element (integer domain).
    3. x' is quantized by mxref.quantize(fmt, profile): E8M0 micro-scales per 32-block.
    Dequantize: S_M * element * 2^(e_b).
    """
    fmt, prof, _, ax, bits2, moved_shape = _rows_of(x, fmt, profile, axis, source_dtype)
    if fmt.is_nvfp4:
        raise ProfileConflictError("macro-block scaling is defined for E8M0 (MX) formats, "
                                   "not nvfp4 (which already has a tensor scale)")
    if macro_scale_dtype not in MACRO_SCALE_DTYPES:
        raise CorrectionConfigError(
            f"macro_scale_dtype={macro_scale_dtype!r}; use one of {', '.join(MACRO_SCALE_DTYPES)}")
    block = _block_of(fmt, prof)
    n = bits2.shape[1]
    m = _macro_size(macro, n, block)
    p = MACRO_SCALE_DTYPES[macro_scale_dtype]
    nmac = -(-n // m)
    s_int = np.zeros((bits2.shape[0], nmac), dtype=np.int64)
    _macro_scale_ints(bits2, m, prof.flush_fp32_subnormals, grid_facts(fmt).m_odd, p, s_int)
    s_bits = _scale_ints_to_f32_bits(s_int, p)
    scaled2 = np.empty_like(bits2)
    _divide_rows(bits2, m, s_bits.astype(np.int64), _F32P, scaled2)
    scaled = _from_rows(scaled2, moved_shape, ax)
    inner = quantize(scaled, fmt, prof, axis=ax, source_dtype="float32")
    mshape = tuple(moved_shape[:-1]) + (nmac,)
    return MacroBlockTensor(
        inner=inner, macro_scales=_from_rows(s_bits, mshape, ax).view(np.float32),
        macro_scale_bits=_from_rows(_encode_macro_bits(s_bits, macro_scale_dtype), mshape, ax),
        macro=m, macro_scale_dtype=macro_scale_dtype, scaled_bits=scaled)


def decompose_macroblock(x, fmt="mxfp4", profile="ocp", *, macro=128, axis=-1,
                         macro_scale_dtype="float32", source_dtype=None) -> Decomposition:
    """Decomposition of the macro-block quantizer against the same per-32-block ideal as
    :func:`mxref.decompose.decompose`: s = S_M 2^(e_b); deadzone and grid components are
    those of the uncorrected decomposition, bit for bit (only Q_s changes)."""
    mb = quantize_macroblock(x, fmt, profile, macro=macro, axis=axis,
                             macro_scale_dtype=macro_scale_dtype, source_dtype=source_dtype)
    bits, src = _resolve(x, fmt, profile, axis, None, source_dtype, None)[2:4]
    ax = mb.axis
    bits2 = _to_rows(bits, ax)
    block = mb.block_size
    s_e, sdiv_e = mx_scales(mb.inner)
    nblk = s_e.shape[1]
    per_macro = mb.macro // block
    s_mac = np.repeat(_to_rows(mb.macro_scales, ax).astype(np.float64), per_macro,
                      axis=1)[:, :nblk]
    xp = _to_rows(mb.scaled_bits, ax).view(np.float32).astype(np.float64)
    sdiv_rep = np.repeat(sdiv_e, block, axis=1)[:, :xp.shape[1]]
    with np.errstate(invalid="ignore"):
        sat = np.abs(xp) > grid_facts(mb.fmt).max_normal * sdiv_rep   # what the rounding saw
    return decompose_quantized(
        bits2, np.moveaxis(bits, ax, -1).shape, ax, mb.fmt, mb.profile, block,
        q2=_to_rows(mb.dequantize_exact(), ax), s2=s_e * s_mac, saturated2=sat,
        scale_rule=mb.profile.scale_rule, source_dtype=src,
        correction=f"macroblock(macro={mb.macro}, {mb.macro_scale_dtype})",
        meta={"macro": mb.macro, "macro_scale_dtype": mb.macro_scale_dtype})


# ==== outlier fallback =====================================================================
def bf16_rne_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bits of fp32 bits, IEEE RNE (overflow -> Inf), NaN kept quiet, sign kept."""
    b = bits.astype(np.uint32)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(F32_INF)
    rounded = (b.astype(np.uint64) + 0x7FFF + ((b >> np.uint32(16)) & np.uint32(1))) >> 16
    return np.where(nan, (b >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


def _bf16_values(b16: np.ndarray) -> np.ndarray:
    return (b16.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


@dataclass
class OutlierFallbackTensor:
    """MX tensor of the non-passthrough elements plus a bf16 passthrough.

    ``mx`` quantizes x with the passthrough elements replaced by 0; ``residual_bits`` holds
    the bf16 bits of the passthrough elements (0 elsewhere); ``passthrough`` marks them;
    ``flagged`` marks the flagged blocks (block shape).
    """

    mx: MXTensor
    residual_bits: np.ndarray
    passthrough: np.ndarray
    flagged: np.ndarray
    rule: str
    tau: float | None
    rho: int | None
    k: int

    def dequantize_exact(self) -> np.ndarray:
        ax = self.mx.axis
        v2 = np.where(_to_rows(self.passthrough, ax), _bf16_values(_to_rows(self.residual_bits,
                                                                           ax)),
                      mx_exact_values(self.mx))
        return _from_rows(v2, np.moveaxis(self.mx.codes, ax, -1).shape, ax)

    def dequantize(self) -> np.ndarray:
        """fp32: every MX value and every bf16 value is an fp32 number (exact)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self.dequantize_exact().astype(np.float32)


def _check_fallback_args(rule, tau, rho, k, block):
    if rule not in ("block", "topk"):
        raise CorrectionConfigError(f"rule={rule!r}; use 'block' or 'topk'")
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float))
                            or not math.isfinite(tau) or tau < 0):
        raise CorrectionConfigError(f"tau={tau!r} must be a finite number >= 0 or None")
    if rho is not None and (isinstance(rho, bool) or not isinstance(rho, (int, np.integer))
                            or rho < 0):
        raise CorrectionConfigError(f"rho={rho!r} must be an int >= 0 or None")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= block:
        raise CorrectionConfigError(f"k={k!r} must be an int in [1, {block}]")


def flag_outlier_blocks(bits2, fmt, prof, block, tau, rho):
    """(flagged, n_dead, median_bits, amax_bits), each (rows, nblk).

    A block is flagged when all its elements are finite, it has a nonzero element, and
    (tau is not None and fl64(tau * median) < amax) or (rho is not None and n_dead > rho);
    median = the lower median of |x| (the ceil(m/2)-th smallest of its m elements, flushed
    subnormals read as 0), n_dead = the number of nonzero elements the ideal quantizer zeroes.
    """
    flush = prof.flush_fp32_subnormals
    amax2 = finite_block_amax(bits2, block, flush)
    _, codes = ideal_scaled(bits2, amax2, block, fmt, prof)
    a2 = (bits2 & np.uint32(0x7FFFFFFF)).astype(np.int64)
    if flush:
        a2 = np.where(a2 < 0x800000, 0, a2)
    finite = a2 < F32_INF
    n_dead = _blocked(finite & (a2 != 0) & (codes == 0), block).sum(-1)
    n = bits2.shape[1]
    real = _blocked(np.ones(bits2.shape, dtype=bool), block)       # False on the padding
    keys = np.where(real & _blocked(finite, block), _blocked(a2, block), np.iinfo(np.int64).max)
    keys = np.sort(keys, axis=-1)
    m = (real & _blocked(finite, block)).sum(-1)
    all_finite = m == real.sum(-1)
    med = np.take_along_axis(keys, np.maximum(m - 1, 0)[..., None] // 2, axis=-1)[..., 0]
    med = np.where(m > 0, med, 0)
    amax_f = amax2.astype(np.uint32).view(np.float32).astype(np.float64)
    med_f = med.astype(np.uint32).view(np.float32).astype(np.float64)
    crit = np.zeros(amax2.shape, dtype=bool)
    if tau is not None:
        crit |= amax_f > float(tau) * med_f
    if rho is not None:
        crit |= n_dead > rho
    flagged = crit & all_finite & (amax2 > 0) & (n > 0)
    return flagged, n_dead, med, amax2


def _topk_mask(bits2, flagged, block, k, flush):
    """In flagged blocks, the k largest |x| among finite nonzero elements (ties: lower index
    first)."""
    a2 = (bits2 & np.uint32(0x7FFFFFFF)).astype(np.int64)
    if flush:
        a2 = np.where(a2 < 0x800000, 0, a2)
    key = np.where(a2 < F32_INF, a2, 0)
    kb = _blocked(key, block)
    order = np.argsort(-kb, axis=-1, kind="stable")
    rank = np.argsort(order, axis=-1)                 # position of each element in that order
    chosen = (rank < k) & (kb > 0) & flagged[..., None]
    return chosen.reshape(bits2.shape[0], -1)[:, :bits2.shape[1]]


def quantize_outlier_fallback(x, fmt="mxfp4", profile="ocp", *, rule="block", tau=10.0, rho=8,
                              k=1, axis=-1, source_dtype=None) -> OutlierFallbackTensor:
    """Outlier fallback (training_anchors B.4).

    Blocks are flagged by :func:`flag_outlier_blocks` (amax / median|v| > tau or more than
    rho deadzone elements; blocks holding NaN/Inf are never flagged, the profile's NaN policy
    stays in charge). rule='block': every element of a flagged block is kept in bf16 (RNE);
    rule='topk': the k largest |v| of each flagged block are kept in bf16 and the rest of the
    block is MX-quantized with its (smaller) amax. tau=0 flags every nonzero block.
    Removes: the deadzone of flagged blocks (all of it for 'block'; for 'topk' the rest's
    deadzone threshold falls with its amax) and their scale bias.
    """
    fmt, prof, _, ax, bits2, moved_shape = _rows_of(x, fmt, profile, axis, source_dtype)
    block = _block_of(fmt, prof)
    _check_fallback_args(rule, tau, rho, k, block)
    flagged, *_ = flag_outlier_blocks(bits2, fmt, prof, block, tau, rho)
    n = bits2.shape[1]
    if rule == "block":
        pt = np.repeat(flagged, block, axis=1)[:, :n]
    else:
        pt = _topk_mask(bits2, flagged, block, k, prof.flush_fp32_subnormals)
    rest2 = np.where(pt, np.uint32(0), bits2)
    mx = quantize(_from_rows(rest2, moved_shape, ax), fmt, prof, axis=ax, source_dtype="float32")
    resid = np.where(pt, bf16_rne_bits(bits2), np.uint16(0))
    scale_shape = tuple(moved_shape[:-1]) + (flagged.shape[1],)
    return OutlierFallbackTensor(
        mx=mx, residual_bits=_from_rows(resid, moved_shape, ax),
        passthrough=_from_rows(pt, moved_shape, ax),
        flagged=_from_rows(flagged, scale_shape, ax), rule=rule, tau=tau, rho=rho, k=int(k))


def decompose_outlier_fallback(x, fmt="mxfp4", profile="ocp", *, rule="block", tau=10.0, rho=8,
                               k=1, axis=-1, source_dtype=None) -> Decomposition:
    """Decomposition of the fallback quantizer: MX elements against the ideal quantizer of
    the block they are quantized in (for 'topk', the rest of the block, whose amax is
    smaller); bf16 elements are passthrough (grid = bf16(v) - v, no scale or deadzone part).
    Blocks wholly in bf16 get s = NaN (no block scale) and leave the s/s* mean."""
    fb = quantize_outlier_fallback(x, fmt, profile, rule=rule, tau=tau, rho=rho, k=k, axis=axis,
                                   source_dtype=source_dtype)
    bits, src = _resolve(x, fmt, profile, axis, None, source_dtype, None)[2:4]
    ax = fb.mx.axis
    mx = fb.mx
    bits2 = _to_rows(bits, ax)
    pt2 = _to_rows(fb.passthrough, ax)
    block = mx.block_size
    s2, sdiv2 = mx_scales(mx)
    flagged2 = _to_rows(fb.flagged, ax)
    if rule == "block":
        s2 = np.where(flagged2, np.nan, s2)
    rest2 = np.where(pt2, np.uint32(0), bits2)
    ref = finite_block_amax(rest2, block, mx.profile.flush_fp32_subnormals)
    return decompose_quantized(
        bits2, np.moveaxis(bits, ax, -1).shape, ax, mx.fmt, mx.profile, block,
        q2=_to_rows(fb.dequantize_exact(), ax), s2=s2, sdiv2=sdiv2, passthrough2=pt2,
        ref_amax2=ref, scale_rule=mx.profile.scale_rule if not mx.fmt.is_nvfp4 else
        f"nvfp4_{mx.profile.nvfp4_order}", source_dtype=src,
        correction=f"outlier_fallback(rule={rule}, tau={tau}, rho={rho}, k={k})",
        meta={"flagged_blocks": int(flagged2.sum())})


# ==== Four-over-Six NVFP4 ==================================================================
SELECT_MODES = ("mse", "mae", "always6", "always4")
# float64 block sums decide when |sum6 - sum4| > DECISION_MARGIN * gamma_17 * (sum6 + sum4);
# the rounding error of each sum is at most gamma_16 times it, so any margin > 1 is rigorous
DECISION_MARGIN = 4.0


@nb.njit(**_JIT)
def _nvfp4_candidate(bits, block, divisor, t, sck, order, fp, e4p, f32p, pp,
                     codes, scales):
    """NVFP4 quantization whose block scale maps the block amax to ``divisor`` (6 is
    mxref.quantize's own; 4 is the 4/6 alternative). 'exact': _kernels.quantize_nvfp4's order
    with the constant 6 become ``divisor``; 'te': the block scale of TE's Four-over-Six kernel
    (te_4over6_block_scale, ``sck`` = S_enc), elements as _kernels.quantize_nvfp4's 'te'."""
    rows, n = bits.shape
    nblk = (n + block - 1) // block
    flush = pp[K_FLUSH] != 0
    st, et = f32_parts(t)
    for r in range(rows):
        for jb in range(nblk):
            lo = jb * block
            hi = min(lo + block, n)
            amax, has_nan, has_inf = block_amax(bits, r, lo, hi, flush)
            if block_poisoned(has_nan, has_inf, pp):
                scales[r, jb] = e4p[P_NAN]
                for i in range(lo, hi):
                    codes[r, i] = 0
                continue
            if has_inf:
                amax = F32_INF
            if order == NV_TE:
                sc = te_4over6_block_scale(amax, sck, divisor, e4p, f32p, pp)
            else:
                sc = nvfp4_block_scale(amax, order, True, t, sck, divisor, e4p, f32p, pp)
            scales[r, jb] = sc
            sval = code_to_f32(sc, e4p, f32p)
            inv = f32_min_pos(f32_div(F32_ONE, f32_mul(sval, t, f32p), f32p), F32_MAXBITS)
            for i in range(lo, hi):
                b = np.int64(bits[r, i])
                a = b & 0x7FFFFFFF
                if a >= F32_INF or order != NV_EXACT:
                    if order == NV_TE:
                        b = f32_mul(b, inv, f32p)
                    codes[r, i] = encode_f32(b, 0, fp, pp, 0)
                    continue
                neg = b >> 31
                if a == 0 or (flush and a < 0x800000):
                    codes[r, i] = zero_code(neg, True, fp, pp[K_SZERO])
                    continue
                if sc == 0:
                    codes[r, i] = zero_code(neg, False, fp, pp[K_SZERO])
                    continue
                sx, ex = f32_parts(a)
                _, _, ss, es = element_parts(np.int64(sc), e4p)
                q, e, sticky = exact_quotient(sx, ex, ss * st, es + et)
                code, ovf = round_magnitude(q, bit_length(q) - 1, e, sticky, fp, pp[K_ROUNDING], 0)
                if code == 0:
                    codes[r, i] = zero_code(neg, False, fp, pp[K_SZERO])
                else:
                    codes[r, i] = finish_code(code, ovf, neg, fp, pp[K_OVERFLOW])


def four_over_six_constants(gbits: int, order: str, two_level: bool, bound: int):
    """fp32 bits (T, K6, K4) for a tensor amax ``gbits`` and an E4M3 bound B (448:
    mxref.quantize's own; 256 leaves room for the x1.5 of map-to-4):
    exact: T = fl(amax / (6 B)) (1 for amax 0, 2^-149 on underflow), K unused;
    te: S_enc = min(fl(6 B / amax), FLT_MAX) (1 for amax 0 or S_enc 0), T = fl(1 / S_enc),
    K6 = K4 = S_enc (TE's compute_scale_pair starts both candidates from fl(amax / 6) * S_enc);
    single level: T = S_enc = 1."""
    fb = int(np.float32(6 * bound).view(np.uint32))
    one = F32_ONE
    if not two_level:
        return one, one, one
    if order == "te":
        s_enc = f32_min_pos(f32_div(fb, gbits, _F32P), F32_MAXBITS)
        if gbits == 0 or s_enc == 0:
            s_enc = one
        return f32_div(one, s_enc, _F32P), s_enc, s_enc
    t = f32_div(gbits, fb, _F32P)
    if gbits == 0:
        t = one
    elif t == 0:
        t = 1
    return t, 0, 0


def _candidate(bits2, block, divisor, t, sck, prof):
    order = {"exact": NV_EXACT, "te": NV_TE}[prof.nvfp4_order]
    codes = np.empty(bits2.shape, dtype=np.uint8)
    scales = np.empty((bits2.shape[0], -(-bits2.shape[1] // block)), dtype=np.uint8)
    if bits2.size:
        _nvfp4_candidate(bits2, block, divisor, t, sck, order,
                         E2M1.kernel_params(), _E4M3P, _F32P, prof.kernel_params(), codes, scales)
    return codes, scales


def _block_errors(codes, scales, t_val, x2, block, metric):
    """Float64 block error sums and a mask of elements whose error was not exact."""
    s = np.repeat(E4M3.value_table[scales] * t_val, block, axis=1)[:, :x2.shape[1]]
    with np.errstate(invalid="ignore", over="ignore"):
        q = E2M1.value_table[codes] * s                      # exact: 2 + 4 + 24 bits
        e = q - x2
        bp = e - q
        resid = (q - (e - bp)) + (-x2 - bp)                  # TwoSum: 0 iff e is exact
        term = e * e if metric == "mse" else np.abs(e)
    return _blocked(term, block).sum(-1), _blocked(resid != 0, block).any(-1), q


def _exact_block_error(q_row, x_row, metric):
    tot = Fraction(0)
    for qi, xi in zip(q_row, x_row):
        d = Fraction(float(qi)) - Fraction(float(xi))
        tot += d * d if metric == "mse" else abs(d)
    return tot


def quantize_nvfp4_4over6(x, profile="te_nvfp4", *, axis=-1, select="mse", scale_bound=256,
                          global_amax=None, source_dtype=None) -> MXTensor:
    """Four-over-Six NVFP4 (training_anchors A.11).

    Per 16-block, two candidates under the profile's op order ('exact' or 'te'): map-to-6
    (block scale from amax / 6, mxref.quantize's rule) and map-to-4 (amax / 4), with the
    tensor scale of bound ``scale_bound`` (256, as TE's 4over6: T = amax / (6 * 256)).
    select='mse' / 'mae' keeps the candidate with the smaller block sum of squared / absolute
    errors sum |Q(v_i) - v_i|^p; ties -> map-to-6. The comparison is exact: each error
    Q(v_i) - v_i is exact in float64 (checked with TwoSum), the float64 sums decide when they
    differ by more than a rigorous rounding bound (DECISION_MARGIN * gamma_17 * (sum6 +
    sum4)); candidates with identical values tie; any other block is re-evaluated in exact
    rational arithmetic. Blocks with a NaN/Inf input keep map-to-6. meta['four_over_six']
    holds 4 or 6 per block.
    """
    fmt, prof, src, ax, bits2, moved_shape = _rows_of(x, "nvfp4", profile, axis, source_dtype)
    if prof.nvfp4_order not in ("exact", "te"):
        raise ProfileConflictError(
            f"profile {prof.name!r}: Four-over-Six is defined for nvfp4_order 'exact' and 'te', "
            f"not {prof.nvfp4_order!r}")
    if prof.nvfp4_amax_scope != "tensor" or prof.nvfp4_tile_2d:
        raise ProfileConflictError(
            f"profile {prof.name!r}: Four-over-Six is defined for one tensor scale and 1x16 "
            "blocks (nvfp4_amax_scope='tensor', nvfp4_tile_2d=False)")
    if select not in SELECT_MODES:
        raise CorrectionConfigError(f"select={select!r}; use one of {', '.join(SELECT_MODES)}")
    if scale_bound not in (256, 448):
        raise CorrectionConfigError(f"scale_bound={scale_bound!r}; use 256 (TE 4over6) or 448")
    block = _block_of(fmt, prof)
    if block != 16:
        raise BlockSizeError(f"NVFP4 blocks are 16 elements, profile gives {block}")
    gbits = _global_amax_bits(bits2, prof, global_amax)
    t, sc6, sc4 = four_over_six_constants(gbits, prof.nvfp4_order, prof.nvfp4_tensor_scale,
                                          scale_bound)
    c6, s6 = _candidate(bits2, block, 6, t, sc6, prof)
    c4, s4 = _candidate(bits2, block, 4, t, sc4, prof)
    t_val = float(np.uint32(t).view(np.float32))
    with np.errstate(invalid="ignore"):      # a signaling NaN input is quieted, silently
        x2 = bits2.view(np.float32).astype(np.float64)
    nonfinite = _blocked(~np.isfinite(x2), block).any(-1)
    n_exact = 0
    if select in ("always6", "always4"):
        four = np.full(s6.shape, select == "always4") & ~nonfinite
    else:
        xs = np.where(np.isfinite(x2), x2, 0.0)
        e6, bad6, q6 = _block_errors(c6, s6, t_val, xs, block, select)
        e4, bad4, q4 = _block_errors(c4, s4, t_val, xs, block, select)
        u = 2.0 ** -53
        gamma17 = 17 * u / (1 - 17 * u)
        with np.errstate(invalid="ignore"):
            decided = (np.abs(e6 - e4) > DECISION_MARGIN * gamma17 * (e6 + e4)) & ~bad6 & ~bad4
        four = decided & (e4 < e6)
        same = _blocked(q6 == q4, block).all(-1)             # identical values: a tie
        todo = ~decided & ~same & ~nonfinite & np.isfinite(e6) & np.isfinite(e4)
        q6b, q4b, xb = _blocked(q6, block), _blocked(q4, block), _blocked(xs, block)
        for r, j in zip(*np.nonzero(todo)):
            n_exact += 1
            four[r, j] = _exact_block_error(q4b[r, j], xb[r, j], select) < \
                _exact_block_error(q6b[r, j], xb[r, j], select)
        four &= ~nonfinite & np.isfinite(e6) & np.isfinite(e4)
    n = bits2.shape[1]
    codes2 = np.where(np.repeat(four, block, axis=1)[:, :n], c4, c6)
    scales2 = np.where(four, s4, s6)
    scale_shape = tuple(moved_shape[:-1]) + (s6.shape[1],)
    return MXTensor(
        codes=_from_rows(codes2, moved_shape, ax), scales=_from_rows(scales2, scale_shape, ax),
        fmt=fmt, profile=prof, axis=ax, block_size=block,
        tensor_scale=np.uint32(t).view(np.float32), source_dtype=src,
        meta={"four_over_six": _from_rows(np.where(four, 4, 6).astype(np.uint8), scale_shape, ax),
              "select": select, "scale_bound": scale_bound, "global_amax_bits": int(gbits),
              "exact_comparisons": n_exact})


def decompose_nvfp4_4over6(x, profile="te_nvfp4", *, axis=-1, select="mse", scale_bound=256,
                           global_amax=None, source_dtype=None) -> Decomposition:
    """Decomposition of the 4/6 quantizer against the per-16-block ideal s* = amax / 6 (the
    deadzone and grid components are those of the plain decomposition, bit for bit)."""
    mx = quantize_nvfp4_4over6(x, profile, axis=axis, select=select, scale_bound=scale_bound,
                               global_amax=global_amax, source_dtype=source_dtype)
    bits, src = _resolve(x, "nvfp4", profile, axis, None, source_dtype, None)[2:4]
    s2, _ = mx_scales(mx)
    return decompose_quantized(
        _to_rows(bits, mx.axis), np.moveaxis(bits, mx.axis, -1).shape, mx.axis, mx.fmt,
        mx.profile, mx.block_size, q2=mx_exact_values(mx), s2=s2,
        scale_rule=f"nvfp4_{mx.profile.nvfp4_order}", source_dtype=src,
        correction=f"four_over_six(select={select}, bound={scale_bound})",
        meta={"four_blocks": int((mx.meta["four_over_six"] == 4).sum())})


# ==== AQN (QeRL) ===========================================================================
def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise CorrectionConfigError(f"{name}={v!r} must be an int >= {lo}")


def aqn_sigma_trend(sigma_start=1e-2, sigma_end=1e-4, stages=10) -> list[float]:
    """QeRL's sigma_trend: ``sigma_start * (sigma_end / sigma_start) ** (i / (K - 2))`` for
    i = 0 .. K-2, in Python float arithmetic in that order (as QeRL). K = 2 has one active
    stage, [sigma_start] (QeRL's expression would divide 0 by 0 there)."""
    _check_int("stages", stages, 2)
    for name, v in (("sigma_start", sigma_start), ("sigma_end", sigma_end)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise CorrectionConfigError(f"{name}={v!r} must be a finite number > 0")
    if stages == 2:
        return [float(sigma_start)]
    return [sigma_start * (sigma_end / sigma_start) ** (i / (stages - 2))
            for i in range(stages - 1)]


def aqn_stage(step, total_steps, stages=10, *, boundaries="exact") -> int:
    """The stage j in [0, K-1] of a step: training is split into K equal intervals, the step
    clamped to total_steps. boundaries='exact': j = min(floor(K * step / total_steps), K-1)
    in integer arithmetic; 'qerl': QeRL's float code, j = int(step // (total_steps / K))
    (at an exact boundary where total_steps / K rounds up, QeRL gives the previous stage)."""
    _check_int("step", step, 0)
    _check_int("total_steps", total_steps, 1)
    _check_int("stages", stages, 2)
    step = min(int(step), int(total_steps))
    if boundaries == "exact":
        j = stages * step // total_steps
    elif boundaries == "qerl":
        j = int(step // (total_steps / stages))
    else:
        raise CorrectionConfigError(f"boundaries={boundaries!r}; use 'exact' or 'qerl'")
    return min(j, stages - 1)


def aqn_sigma(step, total_steps, sigma_start=1e-2, sigma_end=1e-4, stages=10, *,
              boundaries="exact") -> float:
    """AQN noise sigma at a step (QeRL code semantics): stage 0 -> 0, stage j >= 1 ->
    sigma_trend[j - 1]."""
    trend = aqn_sigma_trend(sigma_start, sigma_end, stages)
    j = aqn_stage(step, total_steps, stages, boundaries=boundaries)
    return 0.0 if j == 0 else trend[j - 1]


def aqn_apply(norm_weight, sigma, generator, *, inplace=False):
    """Add N(0, sigma^2) noise to RMSNorm weights (QeRL: float32 noise, cast to the weight
    dtype, added in the weight dtype). numpy weight + numpy.random.Generator: the noise is
    ``generator.normal(0, sigma, shape)`` rounded to float32; torch weight + torch.Generator
    (CPU): ``torch.normal(0, sigma, shape, generator=..., dtype=float32)`` moved to the weight's
    device. sigma == 0 draws nothing. Returns the noised weight (the same object if inplace)."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) \
            or sigma < 0:
        raise CorrectionConfigError(f"sigma={sigma!r} must be a finite number >= 0")
    if isinstance(norm_weight, np.ndarray):
        if not isinstance(generator, np.random.Generator):
            raise GeneratorTypeError("a numpy weight needs a numpy.random.Generator, got "
                                     f"{type(generator).__name__}")
        if norm_weight.dtype.kind != "f" and norm_weight.dtype.name != "bfloat16":
            raise GeneratorTypeError(f"weight dtype {norm_weight.dtype} is not floating point")
        if sigma == 0:
            return norm_weight if inplace else norm_weight.copy()
        noise = generator.normal(0.0, float(sigma), norm_weight.shape).astype(np.float32)
        noise = noise.astype(norm_weight.dtype)
        if inplace:
            norm_weight += noise
            return norm_weight
        return norm_weight + noise
    if type(norm_weight).__module__.startswith("torch"):
        import torch

        if not isinstance(generator, torch.Generator):
            raise GeneratorTypeError("a torch weight needs a torch.Generator, got "
                                     f"{type(generator).__name__}")
        if sigma == 0:
            return norm_weight if inplace else norm_weight.detach().clone()
        noise = torch.normal(0.0, float(sigma), size=tuple(norm_weight.shape),
                             generator=generator, dtype=torch.float32,
                             device=generator.device)
        noise = noise.to(device=norm_weight.device, dtype=norm_weight.dtype)
        with torch.no_grad():
            if inplace:
                norm_weight.add_(noise)
                return norm_weight
            return norm_weight.detach() + noise
    raise GeneratorTypeError(
        f"norm_weight must be a numpy array or a torch tensor, got {type(norm_weight).__name__}")
