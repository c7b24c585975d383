"""MX / NVFP4 GEMM references: the exact product, the per-block sequential product, and an
a-priori error bound with a checker for kernels that accumulate in their own order.

Operands are ``A [M, K]`` and ``B [N, K]`` (B is the weight; the product is ``A . B^T``), each
blocked along K. Every element value is a small dyadic rational, so a product is an integer
times a power of two and sums are computed exactly in integers:

* an element code decodes to ``q * 2^base`` with ``q`` an integer (``base`` is the format's
  smallest quantum: e2m1 -1, e2m3 -3, e3m2 -4, e4m3 -9, e5m2 -16, int8 -6);
* a block scale is ``2^(byte - 127)`` (E8M0; 0xFF is NaN) or, for NVFP4, an E4M3 code
  ``r * 2^-9`` times the operand's fp32 tensor scale;
* a block's dot product ``P_j = sum_k qa_k * qb_k`` is an exact int64 (e5m2 x e5m2 splits A's
  integers into two 16-bit halves so no product leaves int64);
* ``exact`` adds every ``P_j * ra_j * rb_j * 2^(sa_j + sb_j)`` into a Kulisch accumulator (32-bit
  limbs in int64 words with deferred carries) that spans the whole exponent range, then rounds
  the exact sum once to fp32;
* ``block_sequential`` rounds each block once and adds the blocks in ascending K with IEEE fp32
  adds, done here in the integer domain (:func:`f32_add`), tested against numpy float32.

The contracts, the error-bound theorem and the special-value table are in docs/gemm.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cache

import numba as nb
import numpy as np

from ._kernels import (_JIT, F32_INF, F32_PARAMS, F32_QNAN, bit_length, f32_mul, to_f32_bits)
from .errors import AxisError, BlockSizeError, MXRefError, ShapeError
from .formats import ELEMENT_FORMATS, BlockFormat, get_format
from .inputs import as_f32_bits
from .rotate import f32_add  # one integer-domain fp32 adder for the butterfly and the GEMM

__all__ = [
    "gemm", "gemm_codes", "gemm_error_bound", "gemm_error_bound_codes", "check_gemm",
    "GemmCheck", "MODES", "TERMS", "UPCASTS", "ROUNDINGS",
    "GemmShapeError", "GemmDtypeError", "GemmFormatError", "GemmCodeError", "GemmAxisError",
    "GemmModeError", "f32_add",
]

MODES = ("exact", "block_sequential")
TERMS = ("elements", "blocks")
UPCASTS = ("bf16", "bf16_ftz", "fp32")
_UPCAST_MIN_EXP = {"bf16": -133, "bf16_ftz": -126, "fp32": -149}   # smallest quantum kept
ROUNDINGS = ("rne", "faithful")


# ---- errors ----------------------------------------------------------------------------------
class GemmShapeError(ShapeError):
    """Operands whose shapes do not fit a GEMM (rank, K, scale blocks)."""


class GemmDtypeError(MXRefError, TypeError):
    """Codes, scales or tensor scales of the wrong dtype."""


class GemmFormatError(BlockSizeError):
    """Format pairs the GEMM does not define (NVFP4 x MX, different block sizes)."""


class GemmCodeError(MXRefError, ValueError):
    """An element code wider than its format (e.g. 0x10 for FP4)."""


class GemmAxisError(AxisError):
    """An MXTensor blocked along an axis other than K (axis 1)."""


class GemmModeError(MXRefError, ValueError):
    """An unknown mode / terms / upcast / rounding name."""


def _choose(kind: str, value, allowed) -> str:
    if value not in allowed:
        raise GemmModeError(f"unknown {kind} {value!r}; use one of {', '.join(allowed)}")
    return value


# ---- decode tables ---------------------------------------------------------------------------
KIND_FINITE, KIND_INF, KIND_NAN = 0, 1, 2


@cache
def element_table(name: str):
    """Per code: (q, kind, neg) with |value| = q * 2^base exactly; and (base, number of codes)."""
    el = ELEMENT_FORMATS[name]
    base = -el.frac_bits if el.kind == "int" else el.emin - el.mbits
    n = 1 << el.bits
    q = np.zeros(n, dtype=np.int64)
    kind = np.zeros(n, dtype=np.uint8)
    neg = np.zeros(n, dtype=np.bool_)
    unit = Fraction(2) ** base
    for c in range(n):
        v = el.decode(c)
        if isinstance(v, float):                  # nan or +-inf
            kind[c] = KIND_NAN if np.isnan(v) else KIND_INF
            neg[c] = v < 0
            continue
        qv = abs(v) / unit
        assert qv.denominator == 1
        q[c] = int(qv)
        neg[c] = bool(c & el.sign_mask) if el.kind == "float" else v < 0
    return q, kind, neg, base, n


def _exponent_bits_f32(bits: int) -> tuple[int, int, int]:
    """(neg, sig, exp2) of finite fp32 bits: value = (-1)^neg * sig * 2^exp2 (sig = 0 for 0)."""
    neg, a = bits >> 31, bits & 0x7FFFFFFF
    if a == 0:
        return neg, 0, 0
    e = a >> 23
    if e == 0:
        return neg, a, -149
    return neg, (a & 0x7FFFFF) | 0x800000, e - 150


# ---- operands --------------------------------------------------------------------------------
@dataclass
class _Operand:
    """One decoded GEMM operand: element integers, specials, and per-block scale parts.

    value[r, k] = vals[r, k] * bmul[r, j] * 2^(bexp[r, j] + base) * T  with j = k // bs,
    T the NVFP4 tensor scale (``tbits``; None for MX). ``kinds``/``neg``/``zero`` describe the
    value without T: kind 2 (NaN) for NaN elements and for every element of a NaN-scaled block.
    """

    name: str
    fmt: BlockFormat
    bs: int
    vals: np.ndarray
    kinds: np.ndarray
    neg: np.ndarray
    zero: np.ndarray
    bexp: np.ndarray
    bmul: np.ndarray
    bnan: np.ndarray
    base: int
    tbits: int | None
    max_q: int = field(default=0)

    @property
    def rows(self) -> int:
        return self.vals.shape[0]

    @property
    def k(self) -> int:
        return self.vals.shape[1]


def _check_array(name: str, what: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise GemmDtypeError(f"operand {name} {what} must be a numpy uint8 array, got "
                             f"{type(x).__name__}")
    if x.dtype != np.uint8:
        raise GemmDtypeError(f"operand {name} {what} must be uint8, got dtype {x.dtype}")
    if x.ndim != 2:
        raise GemmShapeError(f"operand {name} {what} must be 2-D ([rows, K] / [rows, blocks]), "
                             f"got shape {x.shape}")
    return x


def _tensor_scale_bits(name: str, fmt: BlockFormat, ts) -> int | None:
    if not fmt.is_nvfp4:
        if ts is not None:
            raise GemmFormatError(f"operand {name} is {fmt.name}: a tensor scale is only defined "
                                  f"for nvfp4, got {ts!r}")
        return None
    if ts is None:
        return 0x3F800000                          # single-level NVFP4: T = 1
    if isinstance(ts, (float, int)) and not isinstance(ts, bool):
        f = np.float32(ts)
        if float(f) != ts:
            raise GemmDtypeError(f"operand {name} tensor scale {ts!r} is not an fp32 value; "
                                 "pass np.float32")
        ts = f
    arr = np.asarray(ts)
    if arr.dtype != np.float32 or arr.size != 1:
        raise GemmDtypeError(f"operand {name} tensor scale must be one float32 value, got "
                             f"{arr.dtype} of size {arr.size}")
    return int(arr.reshape(()).view(np.uint32))


def _decode_operand(name, codes, scales, fmt, block_size, tensor_scale) -> _Operand:
    fmt = get_format(fmt)
    codes = _check_array(name, "codes", codes)
    scales = _check_array(name, "scales", scales)
    bs = fmt.block_size if block_size is None else block_size
    if not fmt.allowed_block_size(bs):
        raise GemmFormatError(f"operand {name}: block size {bs!r} is not allowed for {fmt.name}")
    rows, k = codes.shape
    nblk = -(-k // bs)
    if scales.shape != (rows, nblk):
        raise GemmShapeError(
            f"operand {name} scales shape {scales.shape} does not match codes {codes.shape} with "
            f"block {bs} along K: expected ({rows}, ceil({k}/{bs}) = {nblk})")
    tbits = _tensor_scale_bits(name, fmt, tensor_scale)
    q_t, kind_t, neg_t, base, ncodes = element_table(fmt.element.name)
    if codes.size and int(codes.max()) >= ncodes:
        bad = int(codes.max())
        raise GemmCodeError(f"operand {name} has element code 0x{bad:02X}, outside the "
                            f"{fmt.element.bits}-bit {fmt.element.name} codes")
    vals, kinds, neg = q_t[codes], kind_t[codes].copy(), neg_t[codes].copy()
    blk = np.arange(k) // bs
    if fmt.is_nvfp4:                                  # E4M3 block scale r * 2^-9
        sq, skind, sneg, sbase, _ = element_table("e4m3")
        bnan = skind[scales] != KIND_FINITE
        bmul = sq[scales].copy()                     # magnitude: the sign goes into neg
        bmul[bnan] = 0
        bexp = np.zeros(scales.shape, dtype=np.int64)
        base += sbase
        neg ^= sneg[scales][:, blk]
    else:                                             # E8M0: 2^(byte - 127), 0xFF NaN
        bnan = scales == 0xFF
        bmul = np.ones(scales.shape, dtype=np.int64)
        bexp = scales.astype(np.int64) - 127
        bexp[bnan] = 0
    if nblk:
        kinds[bnan[:, blk]] = KIND_NAN
    vals = np.where(kinds == KIND_FINITE, vals, 0)
    signed = np.where(neg, -vals, vals)
    zero = (kinds == KIND_FINITE) & ((vals == 0) | (bmul[:, blk] == 0))
    max_q = int(np.abs(vals).max()) if vals.size else 0
    return _Operand(name, fmt, bs, signed, kinds, neg, zero, bexp, bmul, bnan, base, tbits,
                    max_q)


def _operand_from_tensor(name: str, t) -> tuple:
    """(codes, scales, fmt, block_size, tensor_scale) of an MXTensor blocked along K."""
    codes = getattr(t, "codes", None)
    if codes is None or not hasattr(t, "scales"):
        raise GemmDtypeError(f"operand {name} must be an mxref.MXTensor, got {type(t).__name__}")
    if codes.ndim != 2:
        raise GemmShapeError(f"operand {name} must be 2-D [rows, K], got shape {codes.shape}")
    if t.axis != 1:
        raise GemmAxisError(f"operand {name} is blocked along axis {t.axis}; a GEMM operand must "
                            "be quantized with axis=1 (blocks along K)")
    return t.codes, t.scales, t.fmt, t.block_size, t.tensor_scale


def _pair(a: _Operand, b: _Operand) -> None:
    if a.fmt.is_nvfp4 != b.fmt.is_nvfp4:
        raise GemmFormatError(f"A is {a.fmt.name} and B is {b.fmt.name}: NVFP4 x MX products "
                              "are not defined")
    if a.bs != b.bs:
        raise GemmFormatError(f"block size mismatch: A blocks {a.bs}, B blocks {b.bs}")
    if a.k != b.k:
        raise GemmShapeError(f"K mismatch: A is [{a.rows}, {a.k}], B is [{b.rows}, {b.k}] "
                             "(B is [N, K]; the product is A . B^T)")


def _split_needed(a: _Operand, b: _Operand) -> bool:
    """True when a block's int64 dot product could overflow (e5m2 x e5m2): A is then split."""
    bits = (int(a.max_q).bit_length() + int(b.max_q).bit_length() + int(a.bs).bit_length()
            + int(np.abs(a.bmul).max(initial=0)).bit_length()
            + int(np.abs(b.bmul).max(initial=0)).bit_length())
    return bits > 60


_NO64 = np.zeros((1, 1), dtype=np.int64)
_NO32 = np.zeros((1, 1), dtype=np.int32)


def _kernel_operands(a: _Operand, b: _Operand):
    """The integer arrays the kernels multiply, with fixed dtypes (one compiled kernel):
    (a64, a_hi64, bt64, a32, bt32, split, narrow). B is transposed to [K, N].

    split: A's integers are cut into 16-bit halves (a = a_hi * 2^16 + a64) so that no block
    sum leaves int64 (e5m2 x e5m2). narrow: every block sum fits int32; the int32 copies are
    then used (twice the SIMD lanes) and the int64 ones are placeholders."""
    split = _split_needed(a, b)
    if split:
        hi, lo = a.vals >> 16, a.vals & 0xFFFF
        return (np.ascontiguousarray(lo, np.int64), np.ascontiguousarray(hi, np.int64),
                _t(b.vals.astype(np.int64)), _NO32, _NO32, True, False)
    if a.max_q * b.max_q * a.bs < 2**31:
        return (_NO64, _NO64, _NO64, np.ascontiguousarray(a.vals, np.int32),
                _t(b.vals.astype(np.int32)), False, True)
    return (np.ascontiguousarray(a.vals, np.int64), _NO64, _t(b.vals.astype(np.int64)), _NO32,
            _NO32, False, False)


# ---- Kulisch accumulator (32-bit limbs in int64 words, deferred carries) ---------------------
_M32 = 0xFFFFFFFF
_NORM_EVERY = 1 << 29     # each add moves a limb by < 2^32: normalize well before 2^63
F64_QNAN = 0x7FF8000000000000
F64_INF = 0x7FF0000000000000


@nb.njit(**_JIT)
def _knorm(acc):
    """Propagate carries: limbs 0..L-2 in [0, 2^32), the top limb keeps the sign."""
    carry = 0
    for i in range(acc.size - 1):
        t = acc[i] + carry
        acc[i] = t & _M32
        carry = t >> 32
    acc[acc.size - 1] += carry


@nb.njit(**_JIT)
def _kfinish(acc):
    """Normalize to a magnitude in base 2^32; returns 1 if the value was negative."""
    _knorm(acc)
    if acc[acc.size - 1] >= 0:
        return 0
    for i in range(acc.size):
        acc[i] = -acc[i]
    _knorm(acc)
    return 1


@nb.njit(**_JIT)
def _kmul(acc, t):
    """acc *= t for a normalized non-negative acc and 0 <= t < 2^31."""
    for i in range(acc.size):
        acc[i] *= t
    _knorm(acc)


@nb.njit(**_JIT)
def _kextract(acc):
    """(nonzero, sig, low, sticky) of a normalized magnitude: value = (sig + sticky) * 2^low,
    where sig holds the top <= 62 bits and sticky says that nonzero bits lie below them."""
    t = acc.size - 1
    while t >= 0 and acc[t] == 0:
        t -= 1
    if t < 0:
        return False, 0, 0, False
    total = 32 * t + bit_length(acc[t])
    if total <= 62:
        sig = 0
        for i in range(t, -1, -1):
            sig = (sig << 32) | acc[i]
        return True, sig, 0, False
    low = total - 62
    li = low >> 5
    sh = low & 31
    sig = (acc[li] >> sh) | (acc[li + 1] << (32 - sh))
    if sh > 0 and li + 2 < acc.size:
        sig |= acc[li + 2] << (64 - sh)
    sticky = (acc[li] & ((1 << sh) - 1)) != 0
    for i in range(li):
        if acc[i] != 0:
            sticky = True
            break
    return True, sig, low, sticky


@nb.njit(**_JIT)
def _f64_bits_up(sig, exp2, sticky):
    """Bits of the smallest float64 >= (sig + sticky) * 2^exp2 (sig > 0, normal range)."""
    bl = bit_length(sig)
    if bl > 53:
        r = bl - 53
        q = sig >> r
        if sticky or (sig & ((1 << r) - 1)) != 0:
            q += 1
        e = exp2 + r
    else:
        q = (sig + 1 if sticky else sig) << (53 - bl)
        e = exp2 - (53 - bl)
    if q == (1 << 53):
        q >>= 1
        e += 1
    return ((e + 52 + 1023) << 52) | (q & ((1 << 52) - 1))


# ---- kernels ---------------------------------------------------------------------------------
@nb.njit(**_JIT)
def _sums32(a_row, bt, lo, hi, p32):
    """p32[n] = sum over k in [lo, hi) of a_row[k] * bt[k, n] (caller: it fits int32)."""
    p32[:] = 0
    for k in range(lo, hi):
        x = a_row[k]
        if x != 0:
            row = bt[k]
            for n in range(p32.size):
                p32[n] = np.int32(p32[n] + np.int32(x * row[n]))


@nb.njit(**_JIT)
def _sums64(a_row, bt, lo, hi, p64):
    """p64[n] = sum over k in [lo, hi) of a_row[k] * bt[k, n] (caller: it fits int64)."""
    p64[:] = 0
    for k in range(lo, hi):
        x = a_row[k]
        if x != 0:
            row = bt[k]
            for n in range(p64.size):
                p64[n] += x * row[n]


@nb.njit(**_JIT)
def _block_sums(m, lo, hi, a64, ahi, bt64, a32, bt32, split, narrow, p32, p64, ph):
    """Exact block sums of row m of A against every row of B: into p32 (narrow), p64, and
    ph (the high halves when split)."""
    if narrow:
        _sums32(a32[m], bt32, lo, hi, p32)
        for n in range(p64.size):
            p64[n] = p32[n]
    else:
        _sums64(a64[m], bt64, lo, hi, p64)
        if split:
            _sums64(ahi[m], bt64, lo, hi, ph)


@nb.njit(**_JIT)
def _kadd_row(acc, n, v, off):
    """acc[n] += v * 2^off (|v| < 2^62, off >= 0), spread over three 32-bit limbs."""
    if v == 0:
        return
    mag = -v if v < 0 else v
    li = off >> 5
    sh = off & 31
    c0 = (mag & ((1 << (32 - sh)) - 1)) << sh
    rest = mag >> (32 - sh)
    c1 = rest & _M32
    c2 = rest >> 32
    if v < 0:
        acc[n, li] -= c0
        acc[n, li + 1] -= c1
        acc[n, li + 2] -= c2
    else:
        acc[n, li] += c0
        acc[n, li + 1] += c1
        acc[n, li + 2] += c2


@nb.njit(**_JIT)
def _special_sum(ka, kb, za, zb, na, nb_, lo, hi):
    """fp32 bits of a sum of products over [lo, hi) that involves NaN or Inf elements:
    NaN x anything, Inf x 0 and +Inf + -Inf give NaN, otherwise the Inf with its sign."""
    pinf = False
    ninf = False
    for k in range(lo, hi):
        if ka[k] == 2 or kb[k] == 2:
            return F32_QNAN
        if ka[k] == 1 or kb[k] == 1:
            if (ka[k] == 0 and za[k]) or (kb[k] == 0 and zb[k]):
                return F32_QNAN
            if na[k] != nb_[k]:
                ninf = True
            else:
                pinf = True
    if pinf and ninf:
        return F32_QNAN
    if ninf:
        return F32_INF | (1 << 31)
    if pinf:
        return F32_INF
    return 0


@nb.njit(**_JIT)
def _all_products_neg_zero(za, zb, na, nb_):
    """IEEE sign of an exact zero sum: -0 only when every product is -0 (and K >= 1)."""
    if za.size == 0:
        return False
    for k in range(za.size):
        if not ((za[k] or zb[k]) and na[k] != nb_[k]):
            return False
    return True


@nb.njit(**_JIT)
def _special_out(m, n, rnan_a, rnan_b, rinf_a, rinf_b, ka, kb, za, zb, na, nb_, k_len, out32,
                 out64):
    """Output (m, n) where a row with a NaN or an Inf element meets it: written here (fp32
    bits of the IEEE result; float64 NaN / Inf for the bound's sums); returns whether it was."""
    if rnan_a[m] or rnan_b[n]:
        out32[m, n] = F32_QNAN
        out64[m, n] = F64_QNAN
        return True
    if rinf_a[m] or rinf_b[n]:
        r = _special_sum(ka[m], kb[n], za[m], zb[n], na[m], nb_[n], 0, k_len)
        out32[m, n] = r
        out64[m, n] = F64_QNAN if (r & 0x7FFFFFFF) > F32_INF else F64_INF
        return True
    return False


@nb.njit(**_JIT)
def _round_out(m, n, nonzero, neg, sig, exp2, sticky, want_f64, za, zb, na, nb_, out32, out64):
    """The one rounding of an exact sum (sig + sticky) * 2^exp2 with sign neg: fp32 RNE, or up
    to float64 (the bound's sums); an exact zero is -0 only when every product is -0."""
    if want_f64:
        out64[m, n] = _f64_bits_up(sig, exp2, sticky) if nonzero else 0
    elif nonzero:
        out32[m, n] = to_f32_bits(neg, sig, exp2, sticky, F32_PARAMS)
    else:
        out32[m, n] = (1 << 31) if _all_products_neg_zero(za[m], zb[n], na[m], nb_[n]) else 0


@nb.njit(**_JIT)
def _exact_row(m, ints, ea, ebt, ma, mbt, bs, nlimbs, abs_blocks, rnan_a, rnan_b, rinf_a,
               rinf_b, ka, kb, za, zb, na, nb_, e0, tsig_a, tsig_b, tneg, want_f64, out32,
               out64):
    """Row m of the exact product: every output's exact sum in a Kulisch accumulator, then
    one rounding, to fp32 RNE (out32) or up to float64 (out64).

    ea/ebt are block exponents shifted to be >= 0 (B transposed: [blocks, N]); e0 is the
    exponent of the accumulator's lowest bit (element bases, the shifts and NVFP4
    tensor-scale exponents). abs_blocks adds |P_j| (for the error bound) instead of P_j.
    """
    a64, ahi, bt64, a32, bt32, split, narrow = ints
    k_len = ka.shape[1]
    n_rows = ebt.shape[1]
    nblk = ea.shape[1]
    acc = np.zeros((n_rows, nlimbs), dtype=np.int64)
    p32 = np.zeros(n_rows, dtype=np.int32)
    p64 = np.zeros(n_rows, dtype=np.int64)
    ph = np.zeros(n_rows, dtype=np.int64)
    count = 0
    for j in range(nblk):
        lo = j * bs
        hi = min(k_len, lo + bs)
        _block_sums(m, lo, hi, a64, ahi, bt64, a32, bt32, split, narrow, p32, p64, ph)
        ea_j = ea[m, j]
        ma_j = ma[m, j]
        for n in range(n_rows):
            off = ea_j + ebt[j, n]
            if split:
                s_hi = abs(ph[n]) if abs_blocks else ph[n]
                s_lo = abs(p64[n]) if abs_blocks else p64[n]
                _kadd_row(acc, n, s_hi, off + 16)
                _kadd_row(acc, n, s_lo, off)
            else:
                p = p64[n] * ma_j * mbt[j, n]
                _kadd_row(acc, n, abs(p) if abs_blocks else p, off)
        count += 2
        if count >= _NORM_EVERY:
            for n in range(n_rows):
                _knorm(acc[n])
            count = 0
    for n in range(n_rows):
        if _special_out(m, n, rnan_a, rnan_b, rinf_a, rinf_b, ka, kb, za, zb, na, nb_, k_len,
                        out32, out64):
            continue
        an = acc[n]
        neg = _kfinish(an) ^ tneg
        if tsig_a != 1:
            _kmul(an, tsig_a)
        if tsig_b != 1:
            _kmul(an, tsig_b)
        nonzero, sig, low, sticky = _kextract(an)
        _round_out(m, n, nonzero, neg, sig, e0 + low, sticky, want_f64, za, zb, na, nb_, out32,
                   out64)


@nb.njit(**_JIT)
def _exact_row_int64(m, ints, ea, ebt, ma, mbt, bs, abs_blocks, rnan_a, rnan_b, rinf_a,
                     rinf_b, ka, kb, za, zb, na, nb_, e0, tneg, want_f64, out32, out64,
                     eb_base):
    """Row m of the exact product when every output's exact sum fits one int64 (the caller
    checked: no split, no tensor-scale significands, and the row's block exponents, each B
    row's and the block sums' bits leave the sum below 2^62): sum_j P_j 2^(off_j - base) in
    an int64, then the same single rounding as :func:`_exact_row`. Here ebt holds each B
    row's exponents less that row's smallest (eb_base[n]), so output (m, n) has base
    min_j ea[m, j] + eb_base[n]."""
    a64, ahi, bt64, a32, bt32, split, narrow = ints
    k_len = ka.shape[1]
    n_rows = ebt.shape[1]
    nblk = ea.shape[1]
    acc = np.zeros(n_rows, dtype=np.int64)
    p32 = np.zeros(n_rows, dtype=np.int32)
    p64 = np.zeros(n_rows, dtype=np.int64)
    ph = np.zeros(n_rows, dtype=np.int64)
    base = ea[m, 0] if nblk else 0
    for j in range(1, nblk):
        base = min(base, ea[m, j])
    for j in range(nblk):
        lo = j * bs
        hi = min(k_len, lo + bs)
        _block_sums(m, lo, hi, a64, ahi, bt64, a32, bt32, split, narrow, p32, p64, ph)
        sa = ea[m, j] - base
        ma_j = ma[m, j]
        for n in range(n_rows):
            p = p64[n] * ma_j * mbt[j, n]
            if abs_blocks and p < 0:
                p = -p
            acc[n] += p << (sa + ebt[j, n])
    for n in range(n_rows):
        if _special_out(m, n, rnan_a, rnan_b, rinf_a, rinf_b, ka, kb, za, zb, na, nb_, k_len,
                        out32, out64):
            continue
        v = acc[n]
        _round_out(m, n, v != 0, (1 if v < 0 else 0) ^ tneg, -v if v < 0 else v,
                   e0 + base + eb_base[n], False, want_f64, za, zb, na, nb_, out32, out64)


@nb.njit(parallel=True, **_JIT)
def _exact_kernel(ints, ea, ebt, ma, mbt, bs, nlimbs, abs_blocks, rnan_a, rnan_b, rinf_a,
                  rinf_b, ka, kb, za, zb, na, nb_, e0, tsig_a, tsig_b, tneg, want_f64, out32,
                  out64, fast_rows, ebt_rel, eb_base):
    """Rows of A in parallel (the bodies are plain functions: parallel compile stays cheap);
    a row in ``fast_rows`` sums in one int64 per output, the others in the Kulisch
    accumulator. Both give the exact sum, so the same bits."""
    for m in nb.prange(ea.shape[0]):
        if fast_rows[m]:
            _exact_row_int64(m, ints, ea, ebt_rel, ma, mbt, bs, abs_blocks, rnan_a, rnan_b,
                             rinf_a, rinf_b, ka, kb, za, zb, na, nb_, e0, tneg, want_f64,
                             out32, out64, eb_base)
        else:
            _exact_row(m, ints, ea, ebt, ma, mbt, bs, nlimbs, abs_blocks, rnan_a, rnan_b,
                       rinf_a, rinf_b, ka, kb, za, zb, na, nb_, e0, tsig_a, tsig_b, tneg,
                       want_f64, out32, out64)


@nb.njit(**_JIT)
def _split_block_f32(s_hi, s_lo, exp2):
    """fp32 bits of (s_hi * 2^16 + s_lo) * 2^exp2 rounded once (the value may need 70 bits)."""
    q = s_hi + (s_lo >> 16)                    # value = q * 2^16 + r, 0 <= r < 2^16
    r = s_lo & 0xFFFF
    if abs(q) < (1 << 45):
        v = q * (1 << 16) + r
        return to_f32_bits(1 if v < 0 else 0, abs(v), exp2, False, F32_PARAMS)
    if q > 0:
        return to_f32_bits(0, q, exp2 + 16, r != 0, F32_PARAMS)
    if r == 0:
        return to_f32_bits(1, -q, exp2 + 16, False, F32_PARAMS)
    return to_f32_bits(1, -q - 1, exp2 + 16, True, F32_PARAMS)


@nb.njit(**_JIT)
def _block_sequential_row(m, ints, ea, ebt, ma, mbt, bs, e0, bnan_a, bnan_bt, binf_a, binf_bt,
                          ka, kb, za, zb, na, nb_, t_bits, out32):
    """Row m: acc = +0; for each block j in ascending K: acc = fl(acc + fl(P_j * scales));
    NVFP4 (t_bits >= 0): Y = fl(acc * t). ea/ebt are the raw block exponents."""
    a64, ahi, bt64, a32, bt32, split, narrow = ints
    k_len = ka.shape[1]
    n_rows = ebt.shape[1]
    nblk = ea.shape[1]
    acc = np.zeros(n_rows, dtype=np.int64)
    p32 = np.zeros(n_rows, dtype=np.int32)
    p64 = np.zeros(n_rows, dtype=np.int64)
    ph = np.zeros(n_rows, dtype=np.int64)
    for j in range(nblk):
        lo = j * bs
        hi = min(k_len, lo + bs)
        _block_sums(m, lo, hi, a64, ahi, bt64, a32, bt32, split, narrow, p32, p64, ph)
        for n in range(n_rows):
            if bnan_a[m, j] or bnan_bt[j, n]:
                c = F32_QNAN
            elif binf_a[m, j] or binf_bt[j, n]:
                c = _special_sum(ka[m], kb[n], za[m], zb[n], na[m], nb_[n], lo, hi)
            else:
                e = ea[m, j] + ebt[j, n] + e0
                if split:
                    c = _split_block_f32(ph[n], p64[n], e)
                else:
                    p = p64[n] * ma[m, j] * mbt[j, n]
                    c = to_f32_bits(1 if p < 0 else 0, abs(p), e, False, F32_PARAMS)
            acc[n] = f32_add(acc[n], c)
    for n in range(n_rows):
        out32[m, n] = f32_mul(acc[n], t_bits, F32_PARAMS) if t_bits >= 0 else acc[n]


@nb.njit(parallel=True, **_JIT)
def _block_sequential_kernel(ints, ea, ebt, ma, mbt, bs, e0, bnan_a, bnan_bt, binf_a, binf_bt,
                             ka, kb, za, zb, na, nb_, t_bits, out32):
    for m in nb.prange(ea.shape[0]):
        _block_sequential_row(m, ints, ea, ebt, ma, mbt, bs, e0, bnan_a, bnan_bt, binf_a,
                              binf_bt, ka, kb, za, zb, na, nb_, t_bits, out32)


# ---- exact mode: the tensor scale folded into the element values -----------------------------
def _folded_specials(op: _Operand):
    """(kinds, neg, zero, tsig, texp, tneg) for the exact product: value = element * T.

    T NaN makes every element NaN; T = +-Inf makes zero elements NaN (Inf x 0) and the others
    Inf; T = 0 makes every finite element a zero; T's sign flips every element's sign."""
    if op.tbits is None:
        return op.kinds, op.neg, op.zero, 1, 0, 0
    a = op.tbits & 0x7FFFFFFF
    tneg = int(op.tbits >> 31)
    kinds, zero = op.kinds, op.zero
    neg = ~op.neg if tneg else op.neg
    if a > 0x7F800000:
        return np.full_like(kinds, KIND_NAN), neg, np.zeros_like(zero), 1, 0, tneg
    if a == 0x7F800000:
        kinds = np.where(kinds == KIND_NAN, KIND_NAN,
                         np.where(zero, KIND_NAN, KIND_INF)).astype(np.uint8)
        return kinds, neg, np.zeros_like(zero), 1, 0, tneg
    _, tsig, texp = _exponent_bits_f32(a)
    if tsig == 0:
        return kinds, neg, kinds == KIND_FINITE, 0, 0, tneg
    tsig = int(tsig)
    low = (tsig & -tsig).bit_length() - 1        # T = odd * 2^(texp + low): a power of two
    return kinds, neg, zero, tsig >> low, int(texp) + low, tneg     # has significand 1


def _sum_bits(a: _Operand, b: _Operand, split: bool) -> tuple[int, int]:
    """(pbits, growth): every scaled block sum |P_j ma mb| < 2^pbits, and a sum of the
    row's blocks stays below 2^(pbits + growth - 1) times the largest power of two."""
    pbits = (a.max_q.bit_length() + b.max_q.bit_length() + int(a.bs).bit_length()
             + int(np.abs(a.bmul).max(initial=1)).bit_length()
             + int(np.abs(b.bmul).max(initial=1)).bit_length() + (16 if split else 0))
    return pbits, (2 * max(a.bexp.shape[1], 1)).bit_length()


def _limbs_needed(ea_span: int, eb_span: int, a: _Operand, b: _Operand, split: bool,
                  tbits: int) -> int:
    pbits, growth = _sum_bits(a, b, split)
    return (ea_span + eb_span + pbits + growth + tbits + 8) // 32 + 4


# tests switch the int64 rows off to compare them with the Kulisch accumulator
INT64_ROWS = [True]


def _int64_rows(ea: np.ndarray, eb_span: int, a: _Operand, b: _Operand, split: bool,
                tsa: int, tsb: int) -> np.ndarray:
    """[M] bool: the rows of A whose every exact output sum fits an int64 (below 2^62) when
    the smallest block exponent of the A row plus that of the B row is the base: no 16-bit
    split, tensor scales of significand 1 (or none), and A row span + the widest B row span
    (``eb_span``) + pbits + growth <= 62."""
    rows = ea.shape[0]
    if split or tsa != 1 or tsb != 1 or not INT64_ROWS[0] or ea.shape[1] == 0:
        return np.zeros(rows, dtype=np.bool_)
    pbits, growth = _sum_bits(a, b, split)
    span = ea.max(axis=1) - ea.min(axis=1)
    return (span + eb_span + pbits + growth) <= 62


def _shifted(bexp: np.ndarray) -> tuple[np.ndarray, int, int]:
    lo = int(bexp.min()) if bexp.size else 0
    hi = int(bexp.max()) if bexp.size else 0
    return np.ascontiguousarray(bexp - lo), lo, hi - lo


def _kulisch(a: _Operand, b: _Operand, *, fold_t: bool, want_f64: bool,
             abs_blocks: bool = False):
    """Run the exact kernel: uint32 fp32 bits (RNE) or uint64 float64 bits (rounded up) [M, N].
    fold_t multiplies the NVFP4 tensor scales in (the exact product); the bound leaves them out."""
    unfolded = (lambda op: (op.kinds, op.neg, op.zero, 1, 0, 0))
    ka, na_, za, tsa, tea, tna = (_folded_specials if fold_t else unfolded)(a)
    kb, nb_, zb, tsb, teb, tnb = (_folded_specials if fold_t else unfolded)(b)
    ints = _kernel_operands(a, b)
    split = ints[5]
    ea, lo_a, span_a = _shifted(a.bexp)
    eb, lo_b, span_b = _shifted(b.bexp)
    tb = (48 if (tsa != 1 or tsb != 1) else 0)
    nlimbs = _limbs_needed(span_a, span_b, a, b, split, tb)
    e0 = a.base + b.base + lo_a + lo_b + tea + teb
    out32 = np.zeros((a.rows, b.rows), dtype=np.uint32)
    out64 = np.zeros((a.rows, b.rows), dtype=np.uint64)
    if a.rows and b.rows:
        rnan_a, rnan_b = (ka == KIND_NAN).any(axis=1), (kb == KIND_NAN).any(axis=1)
        rinf_a, rinf_b = (ka == KIND_INF).any(axis=1), (kb == KIND_INF).any(axis=1)
        # the int64 rows take each B row relative to its own smallest exponent: a B with rows
        # of very different magnitudes (outlier channels) still fits
        eb_base = eb.min(axis=1) if eb.shape[1] else np.zeros(eb.shape[0], eb.dtype)
        eb_rel = eb - eb_base[:, None]
        fast = _int64_rows(ea, int(eb_rel.max(initial=0)), a, b, split, tsa, tsb)
        _exact_kernel(ints, ea, _t(eb), a.bmul, _t(b.bmul), a.bs, nlimbs, abs_blocks,
                      rnan_a, rnan_b, rinf_a, rinf_b, ka, kb, za, zb, na_, nb_,
                      e0, tsa, tsb, tna ^ tnb, want_f64, out32, out64, fast, _t(eb_rel),
                      np.ascontiguousarray(eb_base))
    return out64 if want_f64 else out32


def _block_sequential(a: _Operand, b: _Operand) -> np.ndarray:
    out32 = np.zeros((a.rows, b.rows), dtype=np.uint32)
    if a.tbits is not None:
        t_bits = int(f32_mul(np.int64(a.tbits), np.int64(b.tbits), F32_PARAMS))
    else:
        t_bits = -1
    if a.rows and b.rows:
        bnan_a = a.bnan | _block_any(a.kinds == KIND_NAN, a.bs)
        bnan_b = b.bnan | _block_any(b.kinds == KIND_NAN, b.bs)
        _block_sequential_kernel(_kernel_operands(a, b), np.ascontiguousarray(a.bexp),
                                 _t(b.bexp), a.bmul, _t(b.bmul), a.bs, a.base + b.base,
                                 bnan_a, _t(bnan_b), _block_any(a.kinds == KIND_INF, a.bs),
                                 _t(_block_any(b.kinds == KIND_INF, b.bs)),
                                 a.kinds, b.kinds, a.zero, b.zero, a.neg, b.neg, t_bits, out32)
    return out32


def _t(x: np.ndarray) -> np.ndarray:
    """B-side arrays go to the kernels transposed ([K, N] / [blocks, N]), C-contiguous."""
    return np.ascontiguousarray(x.T)


def _block_any(mask: np.ndarray, bs: int) -> np.ndarray:
    """[rows, K] -> [rows, ceil(K/bs)]: does the block hold a True (ragged tail padded)."""
    rows, k = mask.shape
    nblk = -(-k // bs)
    padded = np.zeros((rows, nblk * bs), dtype=np.bool_)
    padded[:, :k] = mask
    return padded.reshape(rows, nblk, bs).any(axis=2)


# ---- public: the product -----------------------------------------------------------------------
def _operands(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b, a_tensor_scale,
              b_tensor_scale, block_size_a=None, block_size_b=None):
    a = _decode_operand("A", a_codes, a_scales, fmt_a, block_size_a, a_tensor_scale)
    b = _decode_operand("B", b_codes, b_scales, fmt_b, block_size_b, b_tensor_scale)
    _pair(a, b)
    return a, b


def gemm_codes(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b, *, a_tensor_scale=None,
               b_tensor_scale=None, mode: str = "exact", block_size: int | None = None
               ) -> np.ndarray:
    """``Y = A . B^T`` (float32 [M, N]) from raw codes [rows, K] and scales [rows, ceil(K/bs)].

    mode="exact": the exact real sum over K of the products, rounded once to fp32 (RNE).
    mode="block_sequential": acc = +0; per block in ascending K, acc = fl(acc + fl(P_j * scales));
    NVFP4 then Y = fl(acc * fl(ta * tb)). See docs/gemm.md for the special values.
    Tensor scales (NVFP4 only) are float32 values; None means 1.
    """
    _choose("mode", mode, MODES)
    a, b = _operands(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b, a_tensor_scale,
                     b_tensor_scale, block_size, block_size)
    return _product(a, b, mode)


def _product(a: _Operand, b: _Operand, mode: str) -> np.ndarray:
    if mode == "exact":
        bits = _kulisch(a, b, fold_t=True, want_f64=False)
    else:
        bits = _block_sequential(a, b)
    return bits.view(np.float32)


def _tensor_operands(a, b):
    ca, sa, fa, bsa, ta = _operand_from_tensor("A", a)
    cb, sb, fb, bsb, tb = _operand_from_tensor("B", b)
    return _operands(ca, sa, fa, cb, sb, fb, ta, tb, bsa, bsb)


def gemm(a, b, *, mode: str = "exact") -> np.ndarray:
    """``Y = A . B^T`` for MXTensors A [M, K] and B [N, K] quantized with axis=1.

    Same contracts as :func:`gemm_codes` (exact: one rounding of the exact sum;
    block_sequential: one fp32 add per block in ascending K)."""
    _choose("mode", mode, MODES)
    return _product(*_tensor_operands(a, b), mode)


# ---- public: the error bound ---------------------------------------------------------------
FLT_MAX = float(np.finfo(np.float32).max)


def _up(x):
    """The next float64 above x: turns a round-to-nearest result into an upper bound."""
    return np.nextafter(x, np.inf)


def _ulp32(y: np.ndarray) -> np.ndarray:
    """Spacing from |y| to the next fp32 magnitude above it (exact, float64); 2^104 at FLT_MAX."""
    a = y.view(np.uint32) & np.uint32(0x7FFFFFFF)
    a = np.where(a >= 0x7F7FFFFF, np.uint32(0x7F7FFFFE), a).astype(np.uint32)
    lo = a.view(np.float32).astype(np.float64)
    hi = (a + np.uint32(1)).view(np.float32).astype(np.float64)
    return hi - lo


def _gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u), rounded up; inf when n u >= 1 (the model does not apply)."""
    if n * u >= 1.0:
        return np.inf
    return float(_up(np.float64(n * u) / np.float64(1.0 - n * u)))   # both operands exact


@nb.njit(**_JIT)
def _upcast_flags(vals, bexp, bs, base, min_exp, inexact, tiny, too_big):
    """Per element of an MX operand: inexact when the lowest set bit of its value lies below
    2^min_exp (the upcast format's smallest quantum); tiny when the whole value does (|value|
    < 2^min_exp: the upcast may make it 0); per row: too_big when some |value| >= 2^128 (Inf
    in fp32 and bf16). MX significands have <= 8 bits, so nothing else can be inexact in bf16
    or fp32."""
    rows, k_len = vals.shape
    for r in range(rows):
        for k in range(k_len):
            v = abs(vals[r, k])
            if v == 0:
                continue
            e = bexp[r, k // bs] + base
            low = 0
            while (v >> low) & 1 == 0:
                low += 1
            if low + e < min_exp:
                inexact[r, k] = True
            if bit_length(v) - 1 + e < min_exp:
                tiny[r, k] = True
            if bit_length(v) - 1 + e >= 128:
                too_big[r] = True


def _element_flags(op: _Operand, min_exp: int):
    inexact = np.zeros(op.vals.shape, dtype=np.bool_)
    tiny = np.zeros(op.vals.shape, dtype=np.bool_)
    too_big = np.zeros(op.rows, dtype=np.bool_)
    if op.vals.size:
        _upcast_flags(np.ascontiguousarray(op.vals, dtype=np.int64), op.bexp, op.bs, op.base,
                      min_exp, inexact, tiny, too_big)
    return inexact, tiny, too_big


def _inf_meets(a: _Operand, b: _Operand, tiny_a, tiny_b) -> np.ndarray:
    """[M, N]: some k pairs an Inf element of one operand with a nonzero element of the other
    that the upcast may turn into 0. The exact product there is +-Inf (or NaN), but an upcast
    kernel computes Inf * 0 = NaN, as its contract allows."""
    out = np.zeros((a.rows, b.rows), dtype=np.bool_)
    inf_a, inf_b = a.kinds == KIND_INF, b.kinds == KIND_INF
    # only rows with an Inf element can meet one (most tensors have none: nothing to count);
    # the counts are sums of at most K ones, exact in float64, where BLAS does the work (an
    # int64 matmul has no BLAS: [32768, 768] x [768, 768] took minutes)
    ra, rb = np.flatnonzero(inf_a.any(axis=1)), np.flatnonzero(inf_b.any(axis=1))
    if ra.size:
        out[ra] |= (inf_a[ra].astype(np.float64) @ tiny_b.T.astype(np.float64)) > 0
    if rb.size:
        out[:, rb] |= (tiny_a.astype(np.float64) @ inf_b[rb].T.astype(np.float64)) > 0
    return out


def gemm_error_bound(a, b, *, terms: str = "elements", upcast: str = "bf16",
                     rounding: str = "rne", exact=None) -> np.ndarray:
    """float64 [M, N] upper bound on ``|y - Y|``, Y the exact product rounded once to fp32,
    for any kernel y that sums the K products (each exact or rounded once, after an exact or
    ``upcast`` operand conversion) with fp32 adds in any order / parenthesization.

    terms="blocks": kernels that form each block sum exactly (one rounding per block).
    rounding="faithful": each fp32 operation may be any neighbour (u = 2^-23).
    NaN where Y is NaN; +inf where fp32 overflow is possible (see docs/gemm.md, Theorem 1).
    """
    return _bound(*_tensor_operands(a, b), terms, upcast, rounding, exact)


def gemm_error_bound_codes(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b, *,
                           a_tensor_scale=None, b_tensor_scale=None, terms: str = "elements",
                           upcast: str = "bf16", rounding: str = "rne", exact=None,
                           block_size: int | None = None) -> np.ndarray:
    """:func:`gemm_error_bound` from raw codes and scales (as :func:`gemm_codes`)."""
    a, b = _operands(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b, a_tensor_scale,
                     b_tensor_scale, block_size, block_size)
    return _bound(a, b, terms, upcast, rounding, exact)


def _abs_sum(a: _Operand, b: _Operand, va, vb, abs_blocks: bool) -> np.ndarray:
    """Sum of magnitudes rounded up to float64 (finite elements only; specials are masked)."""
    ma, mb = (replace(op, vals=v, bmul=np.abs(op.bmul), kinds=np.zeros_like(op.kinds),
                      max_q=int(np.abs(v).max(initial=0))) for op, v in ((a, va), (b, vb)))
    return _kulisch(ma, mb, fold_t=False, want_f64=True, abs_blocks=abs_blocks).view(np.float64)


def _bound(a: _Operand, b: _Operand, terms, upcast, rounding, exact) -> np.ndarray:
    _choose("terms", terms, TERMS)
    _choose("upcast", upcast, UPCASTS)
    _choose("rounding", rounding, ROUNDINGS)
    y_exact = _product(a, b, "exact") if exact is None else _check_exact(exact, a, b)
    u = 2.0 ** -24 if rounding == "rne" else 2.0 ** -23
    eta = 2.0 ** -150 if rounding == "rne" else 2.0 ** -149
    nblk = a.bexp.shape[1]
    n_terms = a.k if terms == "elements" else nblk
    out = np.zeros((a.rows, b.rows), dtype=np.float64)
    if out.size == 0:
        return out
    half_ulp = _ulp32(y_exact) / 2
    if n_terms == 0:
        out[:] = half_ulp
        return _specials_into_bound(out, y_exact)
    abs_a, abs_b = np.abs(a.vals), np.abs(b.vals)
    if terms == "elements":                       # S = sum_k |a_k b_k|
        s = _abs_sum(a, b, abs_a, abs_b, abs_blocks=False)
    else:                                         # S_b = sum_j |P_j| * scales
        s = _abs_sum(a, b, a.vals, b.vals, abs_blocks=True)
    d = np.zeros_like(s)
    too_big = np.zeros(out.shape, dtype=np.bool_)
    inf_nan = None
    if not a.fmt.is_nvfp4 and terms == "elements":
        min_exp = _UPCAST_MIN_EXP[upcast]
        ina, tiny_a, big_a = _element_flags(a, min_exp)
        inb, tiny_b, big_b = _element_flags(b, min_exp)
        too_big = big_a[:, None] | big_b[None, :]
        inf_nan = _inf_meets(a, b, tiny_a, tiny_b)
        if ina.any() or inb.any():          # D = 3 (sum_inexact-A |a||b| + sum_inexact-B |a||b|)
            da = _abs_sum(a, b, np.where(ina, abs_a, 0), abs_b, False)
            db = _abs_sum(a, b, abs_a, np.where(inb, abs_b, 0), False)
            d = _up(3.0 * _up(da + db))
    gam = _gamma(n_terms, u)
    with np.errstate(over="ignore", invalid="ignore"):
        sd = _up(s + d)
        tail = _up(_up(n_terms * eta) * _up(1.0 + gam))              # n eta (1 + gamma)
        e1 = _up(_up(_up(gam * sd) + d) + tail)                      # |sum - exact sum|
        reach = _up(_up(sd * _up(1.0 + gam)) + tail)                 # any partial sum's size
        if a.tbits is None:
            err = e1
        else:
            err, reach = _nvfp4_epilogue(a.tbits, b.tbits, s, e1, reach, u, eta)
        total = _up(err + half_ulp)
    total = np.where((reach > FLT_MAX) | too_big | np.isinf(total), np.inf, total)
    bound = _specials_into_bound(total, y_exact)
    if inf_nan is not None:       # exact +-Inf, and Inf * (an element the upcast flushed) = NaN
        bound = np.where(np.isinf(y_exact) & inf_nan, np.inf, bound)
    return bound


def _nvfp4_epilogue(ta_bits, tb_bits, s, e1, reach, u, eta):
    """Bound after y = fl(acc * fl(ta * tb)) (Theorem 1, NVFP4 part)."""
    ta = abs(float(np.uint32(ta_bits).view(np.float32)))
    tb = abs(float(np.uint32(tb_bits).view(np.float32)))
    if not (np.isfinite(ta) and np.isfinite(tb)):
        return np.full_like(s, np.inf), np.full_like(s, np.inf)
    t = ta * tb                                   # exact: two 24-bit significands
    eta1 = eta if t < 2.0 ** -126 else 0.0
    se = _up(s + e1)
    t_hat = _up(_up(t * (1.0 + u)) + eta1)        # 1 + u is exact
    err = _up(_up(_up(_up(u * s) * t) + _up(_up(e1 * t) * (1.0 + u))) + _up(se * eta1))
    err = _up(_up(err + _up(u * _up(se * t_hat))) + eta)
    reach_out = _up(_up(se * t_hat) * (1.0 + u))
    reach_all = np.maximum(reach, np.maximum(reach_out, t_hat))
    return err, reach_all


def _specials_into_bound(bound: np.ndarray, y_exact: np.ndarray) -> np.ndarray:
    """NaN where the exact product is NaN. Where it is +-Inf: +inf if fp32 overflow was
    possible (then it may be an overflow), else 0 (an Inf element: y must be that Inf)."""
    bound = np.where(np.isinf(y_exact), np.where(np.isfinite(bound), 0.0, np.inf), bound)
    return np.where(np.isnan(y_exact), np.nan, bound)


def _check_exact(exact, a: _Operand, b: _Operand) -> np.ndarray:
    e = np.asarray(exact)
    if e.dtype != np.float32 or e.shape != (a.rows, b.rows):
        raise GemmShapeError(f"exact must be float32 of shape ({a.rows}, {b.rows}) as returned "
                             f"by gemm(), got {e.dtype} {e.shape}")
    return np.ascontiguousarray(e)


# ---- public: the checker --------------------------------------------------------------------
ULP_BINS = ("0", "1", "2", "3", "4-7", "8-15", "16+")


@dataclass
class GemmCheck:
    """A kernel's output under the bound. ``within[m, n]``: |y - Y| <= bound (decided exactly),
    or both NaN, or bound = +inf and y not NaN. ulp figures are |y - Y| / ulp(Y) over the
    positions where both are numbers; ulp(Y) is the fp32 spacing above |Y|."""

    within: np.ndarray
    n_outside: int
    max_ulp: float
    mean_ulp: float
    ulp_hist: dict
    nan_mismatch: int
    bound: np.ndarray = field(repr=False)
    exact: np.ndarray = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.n_outside == 0 and self.nan_mismatch == 0


def _two_diff(x: np.ndarray, y: np.ndarray):
    """(s, err) with s = fl(x - y) and x - y = s + err exactly (Knuth TwoSum, float64)."""
    s = x - y
    bb = s - x
    err = (x - (s - bb)) + (-y - bb)
    return s, err


def _within(y64: np.ndarray, e64: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """|y - e| <= bound decided exactly for finite fp32 values y, e and a float64 bound."""
    s, err = _two_diff(y64, e64)
    mag = np.abs(s)
    err_out = np.where(s < 0, -err, err)         # the true |y - e| = |s| + err_out
    return (mag < bound) | ((mag == bound) & (err_out <= 0))


def check_gemm(y, a, b, *, exact=None, bound=None, terms: str = "elements",
               upcast: str = "bf16", rounding: str = "rne",
               allow_nan_where_unbounded: bool = False) -> GemmCheck:
    """Check a kernel's [M, N] output y (fp32, bf16, fp16 or torch) against the exact product of
    MXTensors a, b and :func:`gemm_error_bound`. NaN must appear exactly where the exact
    product is NaN; where the bound is +inf any number passes (NaN too with
    ``allow_nan_where_unbounded``: an order-dependent +Inf + -Inf is legitimate there, and so
    is Inf * 0 where the upcast flushed a tiny element facing an Inf)."""
    a_op, b_op = _tensor_operands(a, b)
    y_exact = _product(a_op, b_op, "exact") if exact is None else _check_exact(exact, a_op, b_op)
    if bound is None:
        bound = _bound(a_op, b_op, terms, upcast, rounding, y_exact)
    bound = np.asarray(bound, dtype=np.float64)
    if bound.shape != y_exact.shape:
        raise GemmShapeError(f"bound must have shape {y_exact.shape}, got {bound.shape}")
    bits, _ = as_f32_bits(y)
    if bits.shape != y_exact.shape:
        raise GemmShapeError(f"kernel output must have shape {y_exact.shape}, got "
                             f"{getattr(y, 'shape', None)}")
    yv = bits.view(np.float32)
    y_nan, e_nan = np.isnan(yv), np.isnan(y_exact)
    unbounded = np.isinf(bound) & ~e_nan
    nan_ok = unbounded & allow_nan_where_unbounded
    nan_mismatch = (y_nan != e_nan) & ~nan_ok
    y64, e64 = yv.astype(np.float64), y_exact.astype(np.float64)
    finite = np.isfinite(y64) & np.isfinite(e64)
    within = np.zeros(yv.shape, dtype=np.bool_)
    with np.errstate(invalid="ignore", over="ignore"):
        within[finite] = _within(y64[finite], e64[finite], bound[finite])
    within |= y_nan & e_nan
    within |= unbounded & (~y_nan | nan_ok)
    within |= (~finite & ~y_nan & ~e_nan) & (y64 == e64)          # the same Inf
    ulp = np.full(yv.shape, np.nan)
    both = ~y_nan & ~e_nan
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(y64 == e64, 0.0, np.abs(y64 - e64))
        ulp[both] = diff[both] / _ulp32(y_exact)[both]
    vals = ulp[both]
    hist = _ulp_hist(vals)
    return GemmCheck(within=within, n_outside=int((~within).sum()),
                     max_ulp=float(vals.max()) if vals.size else 0.0,
                     mean_ulp=float(vals.mean()) if vals.size and np.isfinite(vals).all()
                     else (float("inf") if vals.size else 0.0),
                     ulp_hist=hist, nan_mismatch=int(nan_mismatch.sum()),
                     bound=bound, exact=y_exact)


def _ulp_hist(vals: np.ndarray) -> dict:
    """Counts of ceil(ulp distance) in bins 0, 1, 2, 3, 4-7, 8-15, 16+."""
    with np.errstate(invalid="ignore"):
        c = -np.floor_divide(-vals, 1.0)              # ceil without np.ceil; inf stays inf
    edges = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 7), (8, 15)]
    hist = {name: int(((c >= lo) & (c <= hi)).sum()) for name, (lo, hi) in zip(ULP_BINS, edges)}
    hist["16+"] = int((c >= 16).sum())
    return hist
