"""Vectorized torch emulation of OCP MX and NVFP4 quantization, bit-exact, on any device.

A second implementation of the semantics in ``docs/semantics.md``, written independently of
the Numba reference kernels so that each can catch the other's mistakes, and the fast
emulator for GPU users (every function runs on CPU, CUDA and ROCm tensors alike).

Everything happens in the integer domain: inputs are read as IEEE bit patterns in int64
tensors, and every rounding decision (element grids, E8M0 shared exponents, E4M3 block
scales, the fp32 operations the NVFP4 ``te`` / ``torchao`` operation orders prescribe) is
made with shifts, masks, integer division and compares. No float arithmetic touches the
data, so the result does not depend on the device's float behaviour (flush-to-zero, fast
math, fused multiply-add).

Public API (tensors in, tensors out; ``x`` is either a float tensor (float32 / bfloat16 /
float16, or float64 with ``from_float64="rne"``) or an integer tensor of bit patterns together
with ``src_dtype``):

* :func:`quantize_mx` ``(x, src_dtype, fmt, profile, axis) -> (scales, codes)``
* :func:`quantize_nvfp4` ``(x, src_dtype, profile, batch_dims) -> (scales, codes, tensor_scale)``
* :func:`convert` ``(x, src_dtype, fmt, profile) -> codes`` (element conversion at scale 2^0)
* :func:`dequantize` / :func:`dequantize_nvfp4` ``-> fp32 bits (int32)``
* :func:`pack` / :func:`unpack` / :func:`scale_layout`
* :func:`to_f32_bits`, :func:`bits_to_float`

Codes and scales are ``torch.uint8``; fp32 results are ``torch.int32`` tensors holding the
IEEE bits (``.view(torch.float32)`` gives the values).

Readings of docs/semantics.md this module makes where the text leaves room:

* ``signed_zero = input_neg_zero_to_pos`` under the NVFP4 ``te`` / ``torchao`` orders looks at
  the input of the E2M1 cast, i.e. the fp32 value ``fl(x * ...)``: a tiny negative ``x``
  whose scaled product underflows to ``-0.0`` is an exact ``-0.0`` cast input and gives +0.
  (MX and the ``exact`` order have no intermediate value, so there it is ``x`` itself.)
* Element rounding in every NVFP4 order follows the profile's ``rounding`` knob (RNE in every
  named profile); the E4M3 block scale is always RNE.
* A scale byte 0xFF from ``scale_overflow = nan`` is treated like a poisoned block: element
  codes are written as the format's NaN code (FP8) or 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import torch

from mxref.errors import (AmbiguousInputError, AxisError, BlockSizeError, ProfileConflictError,
                          ShapeError, UnknownFormatError, UnsupportedDtypeError)
from mxref.formats import ELEMENT_FORMATS, get_format
from mxref.profiles import get_profile

__all__ = ["quantize_mx", "quantize_nvfp4", "convert", "dequantize", "dequantize_nvfp4",
           "pack", "unpack", "scale_layout", "to_f32_bits", "bits_to_float", "SRC_DTYPES"]

SRC_DTYPES = ("float32", "bfloat16", "float16")

_I64 = torch.int64
_INF = 0x7F800000
_QNAN = 0x7FC00000
_FLT_MAX = 0x7F7FFFFF
_MANT = 0x7FFFFF
_ONE = 0x3F800000          # 1.0f
_SIXTH = 0x3E2AAAAB        # fl(1/6)
_E4M3_NAN = 0x7F
_E4M3_MAXC = 0x7E


# ---------------------------------------------------------------------------------------------
# integer helpers
# ---------------------------------------------------------------------------------------------
def _shl(x, s):
    return torch.bitwise_left_shift(x, s)


def _shr(x, s):
    return torch.bitwise_right_shift(x, s)


def _bitlen(x):
    """Number of significant bits of a non-negative int64 tensor (0 for 0)."""
    n = torch.zeros_like(x)
    for s in (32, 16, 8, 4, 2, 1):
        m = x >= (1 << s)
        n = n + m.to(_I64) * s
        x = torch.where(m, _shr(x, s), x)
    return n + (x > 0).to(_I64)


def _const(v, like):
    return torch.full_like(like, v, dtype=_I64)


@dataclass(frozen=True)
class _Grid:
    """Integer constants of a target number grid (an element format, E4M3, or fp32)."""

    name: str
    is_int: bool
    mbits: int           # mantissa bits (int: fraction bits)
    emin: int            # unbiased exponent of the smallest normal (int: unused)
    emax: int            # emax_elem = floor(log2(max normal))
    max_code: int        # magnitude code of max normal
    nan_code: int        # canonical positive NaN code, -1 if none
    inf_code: int        # +Inf magnitude code, -1 if none
    sign_shift: int      # float: sign bit position; int: total bits
    bias: int
    max_sig24: int       # significand of max normal * 2^23
    even24: int          # (2 - 2^-(mbits+1)) * 2^23, the EVEN scale rule's threshold
    max_f32: int         # fp32 bits of max normal


def _exact_f32_bits(v: Fraction) -> int:
    """fp32 bits of a positive value that fp32 represents exactly as a normal number."""
    num, den = v.numerator, v.denominator
    if den & (den - 1):
        raise ValueError(f"{v} is not a dyadic rational")
    dl = den.bit_length() - 1
    e = num.bit_length() - 1 - dl
    mant = (num << (23 - (num.bit_length() - 1))) if num.bit_length() <= 24 else None
    if mant is None or not -126 <= e <= 127:
        raise ValueError(f"{v} is not an exact normal fp32 value")
    return (e + 127) << 23 | (mant & _MANT)


@lru_cache(maxsize=None)
def _grid(name: str) -> _Grid:
    if name == "fp32":
        return _Grid("fp32", False, 23, -126, 127, _FLT_MAX, -1, -1, 31, 127,
                     (1 << 24) - 1, 0, _FLT_MAX)
    el = ELEMENT_FORMATS[name]
    maxn = Fraction(el.max_normal)
    sig = maxn / Fraction(2) ** el.emax
    m24 = sig * (1 << 23)
    if m24.denominator != 1:
        raise ValueError(f"{name}: max significand is not a 23-bit fraction")
    if el.kind == "int":
        return _Grid(name, True, el.frac_bits, 0, el.emax, el.max_code, -1, -1, el.bits, 0,
                     int(m24), (1 << 24) - (1 << (22 - el.frac_bits)), _exact_f32_bits(maxn))
    return _Grid(name, False, el.mbits, el.emin, el.emax, el.max_code,
                 -1 if el.nan_code is None else el.nan_code,
                 -1 if el.inf_code is None else el.inf_code,
                 el.ebits + el.mbits, el.bias, int(m24),
                 (1 << 24) - (1 << (22 - el.mbits)), _exact_f32_bits(maxn))


_ROUNDINGS = ("rne", "ties_away", "ties_zero", "stochastic")


def _round_grid(q, e, sticky, g: _Grid, rounding: str, rbits=None):
    """Round the non-negative real ``(q + eps) * 2^e`` onto grid ``g``.

    ``q`` int64 (< 2^62), ``e`` int64, ``sticky`` bool tensor or None: eps in (0, 1) exists
    (the exact value lies strictly above ``q`` but below ``q + 1``). When sticky may be set,
    ``q`` must carry enough bits that the decision point lies inside it (callers guarantee
    at least 32 bits below the quantum). Returns ``(mag, overflow)``: the magnitude code
    (float: ``exponent_field << mbits | mantissa``, a carry gives the next binade; int: ``n``)
    and whether the rounded magnitude exceeds max normal.
    """
    big_e = _bitlen(q) - 1 + e                       # floor(log2 v) where q > 0
    if g.is_int:
        qe = torch.full_like(e, -g.mbits)
    else:
        qe = torch.clamp(big_e, min=g.emin) - g.mbits
    rs = qe - e                                      # v / quantum = q >> rs (+ fraction)
    n_exact = _shl(q, torch.clamp(-rs, 0, 40))
    rsc = torch.clamp(rs, 1, 62)
    one = torch.ones_like(q)
    n0 = _shr(q, rsc)
    rem = q & (_shl(one, rsc) - 1)
    half = _shl(one, rsc - 1)
    if sticky is None:
        sticky = torch.zeros_like(q, dtype=torch.bool)
    tie = (rem == half) & ~sticky
    above = (rem > half) | ((rem == half) & sticky)
    if rounding == "rne":
        up = above | (tie & ((n0 & 1) == 1))
    elif rounding == "ties_away":
        up = above | tie
    elif rounding == "ties_zero":
        up = above
    elif rounding == "stochastic":
        if rbits is None:
            raise ProfileConflictError("stochastic rounding needs random bits (rand_bits)")
        f = torch.where(rs >= 32, _shr(rem, torch.clamp(rs - 32, 0, 62)),
                        _shl(rem, torch.clamp(32 - rs, 0, 31)))
        up = (f + (rbits & 0xFFFFFFFF)) >= (1 << 32)
    else:
        raise ProfileConflictError(f"unknown rounding {rounding!r}; known: {_ROUNDINGS}")
    n = torch.where(rs <= 0, n_exact, n0 + up.to(_I64))
    n = torch.where(q > 0, n, torch.zeros_like(n))
    if g.is_int:
        mag = n
    else:
        mag = _shl(torch.clamp(big_e, min=g.emin) - g.emin, g.mbits) + n
        mag = torch.where(n > 0, mag, torch.zeros_like(mag))
    overflow = (q > 0) & ((big_e > g.emax + 1) | (mag > g.max_code))
    return mag, overflow


# ---------------------------------------------------------------------------------------------
# fp32 bit helpers (magnitudes: non-negative int64 bit patterns, NaN = anything > 0x7F800000)
# ---------------------------------------------------------------------------------------------
def _split(a):
    """Finite magnitude bits -> (sig, e): value = sig * 2^e (sig < 2^24, not normalized)."""
    ex = _shr(a, 23)
    man = a & _MANT
    sig = torch.where(ex > 0, man | (1 << 23), man)
    e = torch.where(ex > 0, ex - 150, torch.full_like(ex, -149))
    return sig, e


def _split_norm(a):
    """Finite non-zero magnitude bits -> (sig, e) with sig in [2^23, 2^24)."""
    sig, e = _split(a)
    sh = torch.clamp(24 - _bitlen(sig), 0, 24)
    return _shl(sig, sh), e - sh


def _to_f32(q, e, sticky=None):
    """RNE of ``(q + eps) * 2^e`` to fp32 magnitude bits (overflow -> Inf)."""
    mag, ovf = _round_grid(q, e, sticky, _grid("fp32"), "rne")
    return torch.where(ovf, torch.full_like(mag, _INF), mag)


def _isnan(a):
    return a > _INF


def _f32_mul(a, b):
    """fl(a * b) for magnitude bits a, b (IEEE specials included)."""
    nan = _isnan(a) | _isnan(b) | ((a == _INF) & (b == 0)) | ((a == 0) & (b == _INF))
    inf = (a == _INF) | (b == _INF)
    zero = (a == 0) | (b == 0)
    fa = torch.where(inf | zero | nan, _const(_ONE, a), a)
    fb = torch.where(inf | zero | nan, _const(_ONE, b), b)
    sa, ea = _split(fa)
    sb, eb = _split(fb)
    r = _to_f32(sa * sb, ea + eb)
    r = torch.where(zero, torch.zeros_like(r), r)
    r = torch.where(inf, _const(_INF, r), r)
    return torch.where(nan, _const(_QNAN, r), r)


def _f32_div(a, b):
    """fl(a / b) for magnitude bits a, b (IEEE specials included)."""
    nan = _isnan(a) | _isnan(b) | ((a == 0) & (b == 0)) | ((a == _INF) & (b == _INF))
    inf = (a == _INF) | (b == 0)
    zero = (a == 0) | (b == _INF)
    bad = inf | zero | nan
    sa, ea = _split_norm(torch.where(bad, _const(_ONE, a), a))
    sb, eb = _split_norm(torch.where(bad, _const(_ONE, b), b))
    num = _shl(sa, 37)
    q = torch.div(num, sb, rounding_mode="floor")
    sticky = (num - q * sb) != 0
    r = _to_f32(q, ea - 37 - eb, sticky)
    r = torch.where(zero, torch.zeros_like(r), r)
    r = torch.where(inf, _const(_INF, r), r)
    return torch.where(nan, _const(_QNAN, r), r)


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
_FLOAT_SRC = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def to_f32_bits(x, src_dtype: str | None = None, from_float64: str | None = None):
    """Widen ``x`` exactly to fp32 bit patterns (int64 tensor, values in [0, 2^32)).

    ``x``: a float32 / bfloat16 / float16 tensor (``src_dtype`` optional, must agree), a
    float64 tensor with ``from_float64="rne"``, or an integer tensor of bit patterns with
    ``src_dtype`` in :data:`SRC_DTYPES` (uint32/int32 for float32, uint16/int16 for the
    16-bit formats; wider integer dtypes holding the same values are accepted too).
    """
    if not isinstance(x, torch.Tensor):
        raise UnsupportedDtypeError(f"expected a torch tensor, got {type(x).__name__}")
    if x.dtype == torch.float64:
        if from_float64 != "rne":
            raise UnsupportedDtypeError(
                "float64 input is refused unless from_float64='rne' (round to fp32 first)")
        if src_dtype not in (None, "float32"):
            raise UnsupportedDtypeError(f"float64 input cannot be read as {src_dtype!r}")
        return _f64_to_f32_bits(x.contiguous().view(_I64))
    if x.is_floating_point():
        actual = _FLOAT_SRC.get(x.dtype)
        if actual is None:
            raise UnsupportedDtypeError(f"unsupported input dtype {x.dtype}")
        if src_dtype is not None and src_dtype != actual:
            raise UnsupportedDtypeError(f"tensor dtype {x.dtype} does not match src_dtype "
                                        f"{src_dtype!r}")
        src_dtype = actual
        x = x.contiguous().view(torch.int32 if actual == "float32" else torch.int16)
    elif x.dtype == torch.bool or x.is_complex():
        raise UnsupportedDtypeError(f"unsupported input dtype {x.dtype}")
    elif src_dtype is None:
        raise AmbiguousInputError(
            f"integer tensor ({x.dtype}) without src_dtype: say which float format the bit "
            f"patterns encode ({', '.join(SRC_DTYPES)})")
    if src_dtype not in SRC_DTYPES:
        raise UnsupportedDtypeError(f"unknown src_dtype {src_dtype!r}; known: {SRC_DTYPES}")
    b = x.to(_I64)
    if src_dtype == "float32":
        return b & 0xFFFFFFFF
    h = b & 0xFFFF
    if src_dtype == "bfloat16":
        return _shl(h, 16)
    # float16 -> float32, exact
    s = _shl(_shr(h, 15), 31)
    ef = _shr(h, 10) & 0x1F
    m = h & 0x3FF
    normal = _shl(ef + 112, 23) | _shl(m, 13)
    special = _shl(m, 13) | _INF
    bl = _bitlen(m)
    sub = _shl(bl + 102, 23) | (_shl(m, torch.clamp(24 - bl, 0, 24)) & _MANT)
    mag = torch.where(ef == 31, special,
                      torch.where(ef > 0, normal, torch.where(m > 0, sub, torch.zeros_like(m))))
    return s | mag


def _f64_to_f32_bits(b):
    """IEEE round-to-nearest-even float64 -> float32 (NaN quieted, payload top bits kept)."""
    neg = b < 0
    a = b & 0x7FFFFFFFFFFFFFFF
    ex = _shr(a, 52)
    man = a & ((1 << 52) - 1)
    is_nan = (ex == 0x7FF) & (man != 0)
    is_inf = (ex == 0x7FF) & (man == 0)
    sig = torch.where(ex > 0, man | (1 << 52), man)
    e = torch.where(ex > 0, ex - 1075, torch.full_like(ex, -1074))
    fin = ~(is_nan | is_inf)
    mag = _to_f32(torch.where(fin, sig, torch.zeros_like(sig)), e)
    mag = torch.where(is_inf, _const(_INF, mag), mag)
    mag = torch.where(is_nan, _QNAN | _shr(man, 29), mag)
    return torch.where(neg, mag | (1 << 31), mag)


def bits_to_float(bits):
    """fp32 bit patterns (any integer tensor) -> float32 tensor with exactly those bits."""
    b = bits.to(_I64) & 0xFFFFFFFF
    return (b - _shl(_shr(b, 31), 32)).to(torch.int32).view(torch.float32)


def _to_i32(bits):
    b = bits & 0xFFFFFFFF
    return (b - _shl(_shr(b, 31), 32)).to(torch.int32)


def _resolve(fmt, profile):
    f = get_format(fmt)
    p = get_profile(profile)
    p.check_format(f)
    return f, p


# ---------------------------------------------------------------------------------------------
# element encoding
# ---------------------------------------------------------------------------------------------
def _finish_codes(sign, mag, overflow, is_nan, is_inf, exact_neg_zero, g: _Grid, p, sat=None):
    """Apply overflow (with int8_min), specials, signed zero and the sign to magnitude codes
    -> code (int64)."""
    sat = p.overflow == "saturate" if sat is None else sat
    ovf = overflow | is_inf
    if sat:
        ovf_code = g.max_code
    else:
        ovf_code = g.inf_code if g.inf_code >= 0 else g.nan_code
    mag = torch.where(ovf, _const(ovf_code, mag), mag)
    if g.is_int and p.int8_min == "full":    # a negative reaches -(max_code + 1): 0x80 = -2.0
        mag = torch.where(ovf & sign, _const(g.max_code + 1, mag), mag)
    zero = mag == 0
    if g.is_int:
        code = torch.where(sign, (-mag) & ((1 << g.sign_shift) - 1), mag)
    else:
        sbit = sign
        if p.signed_zero == "never_negative":
            sbit = sbit & ~zero
        elif p.signed_zero == "input_neg_zero_to_pos":
            sbit = sbit & ~(zero & exact_neg_zero)
        code = mag | _shl(sbit.to(_I64), g.sign_shift)
    if p.nan_element == "signed_max" and not g.is_int:
        # AMD gfx950 (fcbx::nan): max normal (NaN code where the format has one) with the sign
        nan_mag = g.nan_code if g.nan_code >= 0 else g.max_code
        signed = _const(nan_mag, code) | _shl(sign.to(_I64), g.sign_shift)
        return torch.where(is_nan, signed, code)
    nan_code = g.nan_code if g.nan_code >= 0 else 0
    return torch.where(is_nan, _const(nan_code, code), code)


def _encode_scaled(bits, sexp, g: _Grid, p, rounding=None, rbits=None):
    """Element codes of fp32 bits ``bits`` divided by 2^sexp (exact, one rounding)."""
    a = bits & 0x7FFFFFFF
    sign = _shr(bits, 31) == 1
    is_nan = a > _INF
    is_inf = a == _INF
    sig, e = _split(torch.where(is_nan | is_inf, torch.zeros_like(a), a))
    mag, ovf = _round_grid(sig, e - sexp, None, g, rounding or p.rounding, rbits)
    exact_zero = a == 0
    if p.element_round_f32:
        # microxcaling torch: A = fl32(x / 2^s) is 0 (an exact zero, +0) iff x / 2^s <= 2^-150;
        # floor(fl32(|A| / quantum + 0.5)) differs from ties-away only at |A| / quantum =
        # 0.5 - 2^-25 (sig 2^24 - 1 at 2^-25 quanta), where it gives one quantum
        bl = _bitlen(sig)
        top = bl - 1 + e - sexp
        pow2 = sig == _shl(torch.ones_like(sig), torch.clamp(bl - 1, 0, 30))
        under = (sig > 0) & ((top < -150) | ((top == -150) & pow2))
        qexp = -g.mbits if g.is_int else g.emin - g.mbits
        bump = (sig == (1 << 24) - 1) & (e - sexp == qexp - 25)
        mag = torch.where(bump, torch.ones_like(mag), mag)
        mag = torch.where(under, torch.zeros_like(mag), mag)
        ovf = ovf & ~under
        exact_zero = exact_zero | under
    return _finish_codes(sign, mag, ovf, is_nan, is_inf, exact_zero, g, p)


def _flush(bits, p):
    if not p.flush_fp32_subnormals:
        return bits
    a = bits & 0x7FFFFFFF
    return torch.where((a > 0) & (a < 0x00800000), bits & 0x80000000, bits)


def _rand(rbits, like, generator):
    if rbits is not None:
        return rbits.to(device=like.device, dtype=_I64).expand_as(like)
    return torch.randint(0, 1 << 32, like.shape, dtype=_I64, device=like.device,
                         generator=generator)


# ---------------------------------------------------------------------------------------------
# MX shared exponent
# ---------------------------------------------------------------------------------------------
# floor(ln2 * 2^j) via a 64-bit fixed-point ln2 (integers only)
_LN2_Q64 = 0xB17217F7D1CF79AB


# thresholds for the rceil_f32_log2 rule: index 0 (k == 0) never keeps k; index e + 2 for the
# float32 binade exponent e in [-1, 8]: keep k iff m < ln2 * 2^(e-1), i.e. m <= floor(...)
_F32LOG2_THR = [-1] + [(_LN2_Q64 >> (65 - e)) if e <= 65 else 0 for e in range(-1, 9)]


def _shared_exp(amax, g: _Grid, p):
    """Unclamped shared exponent s from the block amax magnitude bits (0x7F800000 = 2^128)."""
    ex = _shr(amax, 23)
    man = amax & _MANT
    bl = _bitlen(man)
    sub = ex == 0
    big_e = torch.where(sub, bl - 150, ex - 127)
    sig24 = torch.where(sub, _shl(man, torch.clamp(24 - bl, 0, 24)), man | (1 << 23))
    base = big_e - g.emax
    rule = p.scale_rule
    if rule == "floor" and p.scale_log2_f32:
        s = _floor_f32_log2(big_e, sig24) - g.emax
    elif rule == "floor":
        s = base
    elif rule == "rceil":
        s = base + (sig24 > g.max_sig24).to(_I64)
    elif rule == "ceil":
        s = base + (sig24 > (1 << 23)).to(_I64)
    elif rule == "even":
        s = base + (sig24 >= g.even24).to(_I64)
    elif rule == "round_down":
        s = base - (sig24 < g.max_sig24).to(_I64)
    else:
        raise ProfileConflictError(f"unknown scale_rule {rule!r}")
    if rule == "rceil" and p.rceil_f32_log2:
        s = _rceil_f32_log2(amax, g)
    if rule == "rceil" and p.rceil_subnormal == "any_up":
        # fp32 quotient amax / max_normal is a nonzero (subnormal) number iff
        # amax > max_normal * 2^-150; compare sig24 * 2^(E-23) with max_normal * 2^-150
        mq = _const(g.max_f32, amax)
        msig, mexp = _split_norm(mq)
        d = (big_e - 23) - (mexp - 150)
        lhs = _shl(sig24, torch.clamp(d, 0, 38))
        rhs = _shl(msig, torch.clamp(-d, 0, 38))
        nonzero_q = (amax > 0) & ((d > 38) | (lhs > rhs))
        low = s <= -126
        s = torch.where(low, torch.where(nonzero_q, _const(-126, s), _const(-127, s)), s)
    return torch.where(amax == 0, _const(-127, s), s)


def _floor_f32_log2(big_e, sig24):
    """floor(fl32(log2(sig24 * 2^(big_e - 23)))) on integers (microxcaling torch,
    scale_log2_f32): the log2 of an amax just below 2^j rounds up to j iff
    d = 2^24 - sig24 < ln2 * 2^(24 - t) (to first order; the next term is below 2^-10 and every
    bound's fractional part is >= 0.09), 2^-t half an ulp of the float32 binade next to j on
    log2's side: t = 24 - floor(log2 j) + [j a power of two] for j > 0, 24 - floor(log2 |j|)
    for j < 0; j = 0 never."""
    j = big_e + 1
    aj = j.abs()
    b = _bitlen(aj) - 1
    pow2 = (j > 0) & ((aj & (aj - 1)) == 0)
    t = torch.clamp(24 - b + pow2.to(_I64), 17, 40)
    dmax = _shr(torch.full_like(t, _LN2_Q64 >> 24), t + 16)      # floor(ln2 * 2^(24 - t))
    up = (j != 0) & (sig24 != (1 << 23)) & (((1 << 24) - sig24) <= dmax)
    return big_e + up.to(_I64)


def _rceil_f32_log2(amax, g: _Grid):
    """ceil(fl32(log2(fl32(amax / max_normal)))), decided on integers."""
    q = _f32_div(amax, _const(g.max_f32, amax))
    qz = q == 0
    sig, k = _split_norm(torch.where(qz, _const(_ONE, q), q))
    k = k + 23
    m = sig - (1 << 23)
    absk = k.abs()
    # binade exponent of |k + eps|: floor(log2 k) for k > 0, floor(log2(|k| - eps)) for k < 0
    ebin = torch.where(k > 0, _bitlen(absk) - 1, _bitlen(absk - 1) - 1)
    idx = torch.where(k == 0, torch.zeros_like(k), torch.clamp(ebin + 2, 1, 10))
    thr = torch.tensor(_F32LOG2_THR, dtype=_I64, device=amax.device)[idx]
    s = k + ((m > 0) & (m > thr)).to(_I64)
    return torch.where(qz, _const(-1000, s), s)


# ---------------------------------------------------------------------------------------------
# MX quantization
# ---------------------------------------------------------------------------------------------
def _norm_axis(axis, ndim):
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise AxisError(f"axis must be an int, got {axis!r}")
    if ndim == 0 or not -ndim <= axis < ndim:
        raise AxisError(f"axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _block_view(bits, axis, bs, ragged):
    """Move ``axis`` last, zero-pad to whole blocks -> ([..., nb, bs], n)."""
    x = torch.movedim(bits, axis, -1)
    n = x.shape[-1]
    nb = -(-n // bs)
    if n % bs:
        if ragged == "error":
            raise BlockSizeError(f"axis length {n} is not a multiple of the block size {bs} "
                                 "and the profile refuses ragged blocks (ragged='error')")
        x = torch.nn.functional.pad(x, (0, nb * bs - n))
    return x.reshape(*x.shape[:-1], nb, bs), n


def _unblock(codes, n, axis):
    c = codes.reshape(*codes.shape[:-2], codes.shape[-2] * codes.shape[-1])[..., :n]
    return torch.movedim(c, -1, axis)


def quantize_mx(x, src_dtype: str | None = None, fmt="mxfp8_e4m3", profile="ocp",
                axis: int | None = None, *, rand_bits=None, generator=None,
                from_float64: str | None = None):
    """MX block quantization (E8M0 scales) of ``x`` along ``axis``.

    Returns ``(scales, codes)``, both ``torch.uint8``: ``scales`` has ``x.shape`` with
    ``axis`` reduced to ``ceil(n / block)``, ``codes`` has ``x.shape`` (one code per byte).
    ``axis`` defaults to the profile's ``block_axis``. ``rand_bits`` (uint32 values, shaped
    like ``x``) feeds stochastic rounding; without it the bits are drawn from ``generator``.
    """
    f, p = _resolve(fmt, profile)
    if f.is_nvfp4:
        raise UnknownFormatError(f"{f.name} is not an E8M0 MX format; use quantize_nvfp4")
    bits = _flush(to_f32_bits(x, src_dtype, from_float64), p)
    p.check_source_dtype(src_dtype if src_dtype is not None else _FLOAT_SRC.get(x.dtype, "float32"))
    g = _grid(f.element.name)
    bs = p.block_size or f.block_size
    if not f.allowed_block_size(bs):
        raise BlockSizeError(f"block size {bs} is not allowed for {f.name}")
    if bits.ndim == 0:
        bits = bits.reshape(1)
        axis_n = 0
    else:
        axis_n = _norm_axis(p.block_axis if axis is None else axis, bits.ndim)
    rb = None
    if p.rounding == "stochastic":
        rb = _rand(None if rand_bits is None else rand_bits.reshape(x.shape), bits, generator)
        rb, _ = _block_view(rb, axis_n, bs, "zero_pad")
    blocks, n = _block_view(bits, axis_n, bs, p.ragged)
    if blocks.numel() == 0:
        sshape = list(bits.shape)
        sshape[axis_n] = -(-bits.shape[axis_n] // bs)
        return (torch.zeros(sshape, dtype=torch.uint8, device=bits.device),
                torch.zeros(bits.shape, dtype=torch.uint8, device=bits.device))
    scales, codes = _quantize_blocks(blocks, g, p, rb)
    codes = _unblock(codes, n, axis_n)
    scales = torch.movedim(scales, -1, axis_n)
    if x.ndim == 0:
        scales, codes = scales.reshape(()), codes.reshape(())
    return scales.to(torch.uint8).contiguous(), codes.to(torch.uint8).contiguous()


def _block_poisoned(has_nan, has_inf, p):
    """Blocks whose NaN / Inf poisons them (nan_in_block / inf_in_block = 'poison'): the scale
    is NaN and the element codes are don't-care (docs/semantics.md, step 2)."""
    poison = torch.zeros_like(has_nan)
    if p.nan_in_block == "poison":
        poison = poison | has_nan
    if p.inf_in_block == "poison":
        poison = poison | has_inf
    return poison


def _quantize_blocks(blocks, g: _Grid, p, rbits=None):
    """[..., nb, bs] fp32 bits -> (scale bytes [..., nb], codes [..., nb, bs]) int64."""
    a = blocks & 0x7FFFFFFF
    is_nan = a > _INF
    is_inf = a == _INF
    finite = a < _INF
    amax = torch.where(finite, a, torch.zeros_like(a)).amax(-1)
    if p.amax_floor:                 # amax_floor (DeepSeek-V4): the rule reads max(amax, floor)
        amax = torch.clamp(amax, min=p.amax_floor)
    if p.zero_block_amax == "min_normal":   # microxcaling torch: amax + 2^-126 * (amax == 0)
        amax = torch.where(amax == 0, _const(0x00800000, amax), amax)
    has_nan = is_nan.any(-1)
    has_inf = is_inf.any(-1)
    poison = _block_poisoned(has_nan, has_inf, p)
    if p.inf_in_block == "exponent":
        amax = torch.where(has_inf, _const(_INF, amax), amax)   # Inf read as 2^128
    s = _shared_exp(amax, g, p)
    if p.inf_in_block == "scale_max":
        s = torch.where(has_inf, _const(127, s), s)
    s = torch.clamp(s, min=-127)
    sc_nan = poison | (s > 127) if p.scale_overflow == "nan" else poison
    s = torch.clamp(s, max=127)
    byte = torch.where(sc_nan, _const(0xFF, s), s + 127)
    s_elem = torch.where(byte == 0, _const(p.zero_scale_elem_exp, s), s)
    codes = _encode_scaled(blocks, s_elem.unsqueeze(-1), g, p, rbits=rbits)
    dont_care = g.nan_code if g.nan_code >= 0 else 0
    codes = torch.where(sc_nan.unsqueeze(-1), _const(dont_care, codes), codes)
    return byte, codes


def convert(x, src_dtype: str | None = None, fmt="mxfp8_e4m3", profile="ocp", *,
            rand_bits=None, generator=None, from_float64: str | None = None):
    """Element conversion alone at scale 2^0: uint8 codes shaped like ``x``. ``fmt`` is a
    block format name (its element format is used) or an element format name."""
    if isinstance(fmt, str) and fmt in ELEMENT_FORMATS:
        el = fmt
        p = get_profile(profile)
    else:
        f, p = _resolve(fmt, profile)
        el = f.element.name
    g = _grid(el)
    if p.overflow == "nonsaturating" and g.nan_code < 0:
        raise ProfileConflictError(f"overflow='nonsaturating' needs a format with NaN or Inf; "
                                   f"{el} has neither")
    bits = _flush(to_f32_bits(x, src_dtype, from_float64), p)
    rb = _rand(rand_bits, bits, generator) if p.rounding == "stochastic" else None
    codes = _encode_scaled(bits, torch.zeros_like(bits), g, p, rbits=rb)
    return codes.to(torch.uint8)


# ---------------------------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------------------------
def _e4m3_value_parts(code):
    """E4M3 magnitude code (finite) -> (sig, e), value = sig * 2^e."""
    ef = _shr(code, 3) & 0xF
    m = code & 7
    sig = torch.where(ef > 0, m | 8, m)
    e = torch.where(ef > 0, ef - 10, torch.full_like(ef, -9))
    return sig, e


def _e4m3_f32(code):
    """E4M3 magnitude code -> fp32 magnitude bits (exact; 0x7F -> NaN)."""
    sig, e = _e4m3_value_parts(code)
    r = _to_f32(sig, e)
    return torch.where((code & 0x7F) == _E4M3_NAN, _const(_QNAN, r), r)


def _e4m3_from_f32(v, satfinite=True):
    """RNE of fp32 magnitude bits to an E4M3 code (satfinite: overflow/Inf -> 0x7E; NaN -> 0x7F)."""
    g = _grid("e4m3")
    nan = v > _INF
    inf = v == _INF
    sig, e = _split(torch.where(nan | inf, torch.zeros_like(v), v))
    mag, ovf = _round_grid(sig, e, None, g, "rne")
    ovf = ovf | inf
    mag = torch.where(ovf, _const(_E4M3_MAXC if satfinite else _E4M3_NAN, mag), mag)
    return torch.where(nan, _const(_E4M3_NAN, mag), mag)


def _e4m3_of_ratio(num_bits, den_sig, den_e):
    """RNE satfinite E4M3 code of the exact real num / (den_sig * 2^den_e), num finite > 0."""
    g = _grid("e4m3")
    sa, ea = _split_norm(num_bits)
    n = _shl(sa, 37)
    q = torch.div(n, den_sig, rounding_mode="floor")
    sticky = (n - q * den_sig) != 0
    mag, ovf = _round_grid(q, ea - 37 - den_e, sticky, g, "rne")
    return torch.where(ovf, _const(_E4M3_MAXC, mag), mag)


def quantize_nvfp4(x, src_dtype: str | None = None, profile="ocp", *, batch_dims: int = 0,
                   global_amax=None, rand_bits=None, generator=None,
                   from_float64: str | None = None):
    """NVFP4 quantization: E2M1 elements, 16-element blocks along the last axis, E4M3 block
    scales, an fp32 tensor scale.

    The leading ``batch_dims`` dimensions index independent tensors, each with its own global
    amax (``batch_dims=1`` for the golden ``[T, R, C]`` layout). ``global_amax`` (fp32 bits or
    a float tensor, shaped like the batch) overrides the computed one. Returns ``(scales,
    codes, tensor_scale)``: uint8 ``[..., C/16]`` E4M3 codes, uint8 E2M1 codes shaped like
    ``x``, and int32 fp32 bits of the decode-side tensor scale shaped ``x.shape[:batch_dims]``
    (dequant = e2m1 * e4m3 * tensor_scale).
    """
    f, p = _resolve("nvfp4", profile)
    bits = _flush(to_f32_bits(x, src_dtype, from_float64), p)
    if bits.ndim < batch_dims + 1:
        raise ShapeError(f"quantize_nvfp4 needs at least {batch_dims + 1} dimensions "
                         f"(batch_dims={batch_dims}), got shape {tuple(bits.shape)}")
    bs = p.block_size or f.block_size
    if not f.allowed_block_size(bs):
        raise BlockSizeError(f"block size {bs} is not allowed for nvfp4 (16 only)")
    if p.nvfp4_amax_scope == "row":
        # TE row-scaled NVFP4: every row (vector along the last axis) is its own tensor
        if global_amax is not None:
            raise ProfileConflictError(f"global_amax given but profile {p.name!r} "
                                       "(nvfp4_amax_scope='row') takes each row's own amax")
        batch_dims = bits.ndim - 1
    bshape = tuple(bits.shape[:batch_dims])
    nbatch = 1
    for d in bshape:
        nbatch *= d
    if p.nvfp4_tile_2d:
        return _nvfp4_tiles_2d(bits, p, nbatch, batch_dims, bshape, global_amax, rand_bits,
                               generator)
    blocks, n = _block_view(bits, bits.ndim - 1, bs, p.ragged)
    per = 1
    for d in blocks.shape[batch_dims:-1]:
        per *= d
    blocks = blocks.reshape(nbatch, per, bs)                 # [T, blocks, 16]
    rb = None
    if p.rounding == "stochastic":
        rb = _rand(None if rand_bits is None else rand_bits.reshape(bits.shape), bits, generator)
        rb = _block_view(rb, bits.ndim - 1, bs, "zero_pad")[0].reshape(nbatch, per, bs)
    if global_amax is not None:
        ga = global_amax
        if ga.is_floating_point():
            ga = to_f32_bits(ga.to(torch.float32))
        ga = (ga.to(device=bits.device, dtype=_I64) & 0x7FFFFFFF).reshape(-1)
        ga = ga.expand(nbatch) if ga.numel() == 1 else ga.reshape(nbatch)
    else:
        ga = None
    scales, codes, ts = _nvfp4_core(blocks, p, ga, rb)
    nb = -(-n // bs)
    scales = scales.reshape(*bits.shape[:-1], nb).to(torch.uint8)
    codes = codes.reshape(*bits.shape[:-1], nb * bs)[..., :n].to(torch.uint8)
    return scales.contiguous(), codes.contiguous(), _to_i32(ts).reshape(bshape)


def _ga_bits(global_amax, bits, nbatch):
    ga = global_amax
    if ga.is_floating_point():
        ga = to_f32_bits(ga.to(torch.float32))
    ga = (ga.to(device=bits.device, dtype=_I64) & 0x7FFFFFFF).reshape(-1)
    return ga.expand(nbatch) if ga.numel() == 1 else ga.reshape(nbatch)


def _nvfp4_tiles_2d(bits, p, nbatch, batch_dims, bshape, global_amax, rand_bits, generator):
    """nvfp4_tile_2d (TE 2D block scaling): per batch, the [R, n] view (leading non-batch
    dims flattened) is zero-padded to multiples of 16, each 16x16 tile quantized as one
    block of 256 by the profile's order, codes scattered back, the tile scale repeated over
    the tile's rows."""
    n = bits.shape[-1]
    if n % 16 and p.ragged == "error":
        raise BlockSizeError(f"length {n} is not a multiple of 16 and profile {p.name!r} "
                             "refuses ragged blocks")
    R = 1
    for d in bits.shape[batch_dims:-1]:
        R *= d
    R16, N16 = -(-R // 16) * 16, -(-n // 16) * 16
    tr, tc = R16 // 16, N16 // 16

    def tiles_of(a):
        pad = torch.zeros((nbatch, R16, N16), dtype=a.dtype, device=a.device)
        pad[:, :R, :n] = a.reshape(nbatch, R, n)
        return pad.reshape(nbatch, tr, 16, tc, 16).permute(0, 1, 3, 2, 4).reshape(
            nbatch, tr * tc, 256)
    tiles = tiles_of(bits)
    rb = None
    if p.rounding == "stochastic":
        rb = tiles_of(_rand(None if rand_bits is None else rand_bits.reshape(bits.shape), bits,
                            generator))
    ga = None if global_amax is None else _ga_bits(global_amax, bits, nbatch)
    st, ct, ts = _nvfp4_core(tiles, p, ga, rb)
    codes = ct.reshape(nbatch, tr, tc, 16, 16).permute(0, 1, 3, 2, 4).reshape(
        nbatch, R16, N16)[:, :R, :n].reshape(bits.shape).to(torch.uint8)
    scales = st.reshape(nbatch, tr, tc).repeat_interleave(16, dim=1)[:, :R].reshape(
        *bits.shape[:-1], tc).to(torch.uint8)
    return scales.contiguous(), codes.contiguous(), _to_i32(ts).reshape(bshape)


def _nvfp4_core(blocks, p, ga, rbits):
    """blocks [T, nb, 16] fp32 bits -> (E4M3 codes [T, nb], E2M1 codes [T, nb, 16], T bits [T])."""
    g2 = _grid("e2m1")
    a = blocks & 0x7FFFFFFF
    sign = _shr(blocks, 31) == 1
    is_nan = a > _INF
    is_inf = a == _INF
    finite = a < _INF
    scale_max = p.inf_in_block == "scale_max"
    amax_src = torch.where(finite | (is_inf & scale_max), a, torch.zeros_like(a))
    bamax = amax_src.amax(-1)                                # [T, nb] (Inf under scale_max)
    if ga is None:
        ga = bamax.amax(-1) if bamax.shape[-1] else torch.zeros(bamax.shape[0], dtype=_I64,
                                                                 device=a.device)
    poison = _block_poisoned(is_nan.any(-1), is_inf.any(-1), p)
    ga1 = ga.unsqueeze(-1)                                   # [T, 1]
    one = _const(_ONE, ga1)
    order = p.nvfp4_order
    xa = torch.where(is_nan | is_inf, torch.zeros_like(a), a)
    if order == "exact":
        if p.nvfp4_tensor_scale:
            t = _f32_div(ga1, _const(0x45280000, ga1))       # 2688.0
            t = torch.where(ga1 == 0, one, t)
            t = torch.where(t == 0, torch.ones_like(t), t)   # 2^-149
        else:
            t = one
        tsig, te = _split_norm(torch.where((t == 0) | (t >= _INF), one, t))
        # S = E4M3_rne_satfinite(block_amax / (6 T))
        bpos = (bamax > 0) & (bamax < _INF)
        s_code = _e4m3_of_ratio(torch.where(bpos, bamax, _const(_ONE, bamax)), 3 * tsig, te + 1)
        s_code = torch.where(bpos, s_code, torch.where(bamax >= _INF, _const(_E4M3_MAXC, bamax),
                                                         torch.zeros_like(bamax)))
        s_code = _scale_min(s_code, p)
        # elements: E2M1_round(|x| / (S T)), exact; S = 0 gives zeros
        ssig, se = _e4m3_value_parts(s_code)
        den = (ssig * tsig).unsqueeze(-1)
        den_e = (se + te).unsqueeze(-1)
        sx, ex = _split_norm(torch.where(xa > 0, xa, _const(_ONE, xa)))
        num = _shl(sx, 38)
        safe_den = torch.where(den > 0, den, torch.ones_like(den))
        q = torch.div(num, safe_den, rounding_mode="floor")
        sticky = (num - q * safe_den) != 0
        q = torch.where((xa > 0) & (den > 0), q, torch.zeros_like(q))
        mag, ovf = _round_grid(q, ex - 38 - den_e, sticky, g2, p.rounding, rbits)
        codes = _finish_codes(sign, mag, ovf, is_nan, is_inf, a == 0, g2, p)
    elif order == "te":
        if p.nvfp4_tensor_scale:
            senc = torch.clamp(_f32_div(_const(0x45280000, ga1), ga1), max=_FLT_MAX)
            senc = torch.where((ga1 == 0) | (senc == 0), one, senc)
        else:
            senc = one
        t = _f32_div(one, senc)
        c = _f32_mul(senc, _const(_SIXTH, senc))
        bsv = torch.clamp(_f32_mul(bamax, c), max=_FLT_MAX)  # fminf (on bits: NaN -> FLT_MAX)
        s_code = _scale_min(_e4m3_from_f32(bsv, satfinite=True), p)
        st = _f32_mul(_e4m3_f32(s_code), t)
        inv = torch.clamp(_f32_div(one, st), max=_FLT_MAX).unsqueeze(-1)   # fminf
        y = _f32_mul(a, inv)
        # signed_zero reads "input" as the input of the E2M1 cast, the fp32 product: a
        # negative x whose product underflows to -0.0 is an exact -0.0 cast input
        codes = _encode_f32_mag(sign, y, y == 0, g2, p, rbits)
    elif order == "torchao":
        t = _f32_div(ga1, _const(0x45280000, ga1)) if p.nvfp4_tensor_scale else one
        bsv = _f32_div(_f32_div(bamax, _const(0x40C00000, bamax)), t)   # / 6.0, / T
        bsv = _clamp_mag(bsv, 0x3C800000, 0x43E00000)                    # [2^-6, 448]
        s_code = _scale_min(_e4m3_from_f32(bsv, satfinite=False), p)
        # torchao 0.18: x * fl(fl(1 / T) / S) (reciprocal of the combined scale); T = 1 when
        # single-level, so fl(1 / T) = 1 and this is x * fl(1 / S)
        recip = _f32_div(_f32_div(one, t), _e4m3_f32(s_code)).unsqueeze(-1)
        y = _clamp_mag(_f32_mul(a, recip), None, 0x40C00000)             # |.| <= 6
        codes = _encode_f32_mag(sign, y, y == 0, g2, p, rbits)
    elif order == "triton_kernels":
        # triton_kernels downcast_to_mxfp_torch ROUND_NEAREST (single-level): E4M3 of
        # fl(amax / 6).clamp(max=448); quant_scale = where(S == 0, 0, fl(1 / S)); x * it,
        # saturating E2M1 (the same codes as a clamp to +-6 then RNE)
        t = one
        bsv = _clamp_mag(_f32_div(bamax, _const(0x40C00000, bamax)), None, 0x43E00000)
        s_code = _scale_min(_e4m3_from_f32(bsv, satfinite=False), p)
        sv = _e4m3_f32(s_code)
        recip = torch.where(s_code == 0, torch.zeros_like(sv), _f32_div(one, sv)).unsqueeze(-1)
        y = _clamp_mag(_f32_mul(a, recip), None, 0x40C00000)             # |.| <= 6
        codes = _encode_f32_mag(sign, y, y == 0, g2, p, rbits)
    else:
        raise ProfileConflictError(f"unknown nvfp4_order {order!r}")
    s_code = torch.where(poison, _const(_E4M3_NAN, s_code), s_code)
    codes = torch.where(poison.unsqueeze(-1), torch.zeros_like(codes), codes)
    return s_code, codes, t.squeeze(-1)


def _clamp_mag(v, lo, hi):
    """torch.clamp on fp32 magnitude bits, NaN propagating."""
    r = v
    if lo is not None:
        r = torch.clamp(r, min=lo)
    if hi is not None:
        r = torch.clamp(r, max=hi)
    return torch.where(v > _INF, v, r)


def _scale_min(s_code, p):
    if p.nvfp4_scale_min == "tiny":
        return torch.where(s_code == _E4M3_NAN, s_code, torch.clamp(s_code, min=0x08))
    return s_code


def _encode_f32_mag(sign, y, exact_neg_zero, g: _Grid, p, rbits):
    """Element codes of fp32 magnitude bits ``y`` (a computed value) with ``sign``."""
    is_nan = y > _INF
    is_inf = y == _INF
    sig, e = _split(torch.where(is_nan | is_inf, torch.zeros_like(y), y))
    mag, ovf = _round_grid(sig, e, None, g, p.rounding, rbits)
    return _finish_codes(sign, mag, ovf, is_nan, is_inf, exact_neg_zero, g, p)


# ---------------------------------------------------------------------------------------------
# dequantization
# ---------------------------------------------------------------------------------------------
def _elem_parts(codes, g: _Grid):
    """Element codes -> (neg, sig, e, is_nan, is_inf): value = +-sig * 2^e."""
    c = codes.to(_I64) & 0xFF
    if g.is_int:
        k = torch.where(c >= 128, c - 256, c)
        z = torch.zeros_like(c, dtype=torch.bool)
        return k < 0, k.abs(), torch.full_like(c, -g.mbits), z, z
    neg = (_shr(c, g.sign_shift) & 1) == 1
    mag = c & ((1 << g.sign_shift) - 1)
    ef = _shr(mag, g.mbits)
    m = mag & ((1 << g.mbits) - 1)
    sig = torch.where(ef > 0, m | (1 << g.mbits), m)
    e = torch.where(ef > 0, ef - g.bias - g.mbits, torch.full_like(ef, g.emin - g.mbits))
    if g.nan_code >= 0 and g.inf_code < 0:
        is_nan = mag == g.nan_code
        is_inf = torch.zeros_like(is_nan)
    elif g.inf_code >= 0:
        is_inf = mag == g.inf_code
        is_nan = mag > g.inf_code
    else:
        is_nan = is_inf = torch.zeros_like(neg)
    return neg, sig, e, is_nan, is_inf


def _signed_f32(neg, mag):
    return torch.where(neg, mag | (1 << 31), mag)


def dequantize(scales, codes, fmt, axis: int = -1, block_size: int | None = None):
    """MX dequantization: ``value(code) * 2^(scale - 127)`` rounded once to fp32.

    ``scales`` uint8 E8M0 bytes with ``codes.shape`` reduced along ``axis`` to
    ``ceil(n / block)``; returns int32 fp32 bits shaped like ``codes`` (scale 0xFF -> NaN).
    """
    f = get_format(fmt)
    if f.is_nvfp4:
        raise UnknownFormatError("nvfp4 needs its tensor scale: use dequantize_nvfp4")
    g = _grid(f.element.name)
    bs = block_size or f.block_size
    c = codes.to(_I64)
    if c.ndim == 0:
        raise ShapeError("dequantize needs at least one dimension")
    ax = _norm_axis(axis, c.ndim)
    cb, n = _block_view(c, ax, bs, "zero_pad")
    s = torch.movedim(scales.to(_I64) & 0xFF, ax, -1)
    if tuple(s.shape) != tuple(cb.shape[:-1]):
        raise ShapeError(f"scales of shape {tuple(scales.shape)} do not fit codes of shape "
                         f"{tuple(codes.shape)} (block {bs} along axis {axis})")
    s = s.unsqueeze(-1)
    neg, sig, e, is_nan, is_inf = _elem_parts(cb, g)
    mag = _to_f32(sig, e + s - 127)
    mag = torch.where(is_inf, _const(_INF, mag), mag)
    out = _signed_f32(neg, mag)
    out = torch.where(is_nan | (s == 0xFF), _const(_QNAN, out), out)
    return _to_i32(_unblock(out, n, ax)).contiguous()


def dequantize_nvfp4(scales, codes, tensor_scale, batch_dims: int = 0):
    """NVFP4 dequantization: ``e2m1 * e4m3 * T`` rounded once to fp32 (int32 bits).

    ``codes`` [..., C], ``scales`` [..., C/16] E4M3 codes, ``tensor_scale`` fp32 bits (or a
    float tensor) shaped like the leading ``batch_dims`` dimensions (a scalar for 0).
    """
    g = _grid("e2m1")
    c = codes.to(_I64)
    cb, n = _block_view(c, c.ndim - 1, 16, "zero_pad")
    s = scales.to(_I64) & 0xFF
    if tuple(s.shape) != tuple(cb.shape[:-1]):
        raise ShapeError(f"scales of shape {tuple(scales.shape)} do not fit codes of shape "
                         f"{tuple(codes.shape)}")
    ts = tensor_scale
    if ts.is_floating_point():
        ts = to_f32_bits(ts.to(torch.float32))
    ts = ts.to(device=c.device, dtype=_I64) & 0xFFFFFFFF
    ts = ts.reshape(tuple(ts.shape) + (1,) * (cb.ndim - ts.ndim))
    neg_e, sig_e, e_e, _, _ = _elem_parts(cb, g)
    s_sig, s_e = _e4m3_value_parts(s & 0x7F)
    s_nan = (s & 0x7F) == _E4M3_NAN
    s_neg = (s & 0x80) != 0
    t_neg = _shr(ts, 31) == 1
    t_mag = ts & 0x7FFFFFFF
    t_sig, t_e = _split(torch.where(t_mag >= _INF, torch.zeros_like(t_mag), t_mag))
    q = sig_e * s_sig.unsqueeze(-1) * t_sig
    mag = _to_f32(q, e_e + s_e.unsqueeze(-1) + t_e)
    prod_zero = (sig_e == 0) | (s_sig.unsqueeze(-1) == 0)
    mag = torch.where(t_mag == _INF, torch.where(prod_zero, _const(_QNAN, mag),
                                                 _const(_INF, mag)), mag)
    neg = neg_e ^ s_neg.unsqueeze(-1) ^ t_neg
    out = _signed_f32(neg, mag)
    out = torch.where(s_nan.unsqueeze(-1) | (t_mag > _INF), _const(_QNAN, out), out)
    out = out.reshape(*out.shape[:-2], out.shape[-2] * out.shape[-1])[..., :n]
    return _to_i32(out).contiguous()


# ---------------------------------------------------------------------------------------------
# packing and scale layouts
# ---------------------------------------------------------------------------------------------
def _element_bits(fmt) -> int:
    if isinstance(fmt, str) and fmt in ELEMENT_FORMATS:
        return ELEMENT_FORMATS[fmt].bits
    return get_format(fmt).element.bits


def pack(codes, fmt):
    """Pack codes along the last axis: FP4 two per byte (element 0 in the low nibble), FP6
    four per three bytes (little-endian 24-bit words, element 0 lowest), FP8/INT8 as is.
    An incomplete group is padded with zero codes."""
    nbits = _element_bits(fmt)
    c = codes.to(_I64)
    if nbits == 8:
        return (c & 0xFF).to(torch.uint8)
    n = c.shape[-1]
    if nbits == 4:
        c = torch.nn.functional.pad(c, (0, (-n) % 2)) & 0xF
        c = c.reshape(*c.shape[:-1], c.shape[-1] // 2, 2)
        return (c[..., 0] | _shl(c[..., 1], 4)).to(torch.uint8)
    if nbits == 6:
        c = torch.nn.functional.pad(c, (0, (-n) % 4)) & 0x3F
        c = c.reshape(*c.shape[:-1], c.shape[-1] // 4, 4)
        w = c[..., 0] | _shl(c[..., 1], 6) | _shl(c[..., 2], 12) | _shl(c[..., 3], 18)
        out = torch.stack([w & 0xFF, _shr(w, 8) & 0xFF, _shr(w, 16) & 0xFF], dim=-1)
        return out.reshape(*out.shape[:-2], out.shape[-2] * 3).to(torch.uint8)
    raise ShapeError(f"no packing defined for {nbits}-bit elements")


def unpack(packed, fmt, n: int):
    """Inverse of :func:`pack`: the first ``n`` codes along the last axis (uint8)."""
    nbits = _element_bits(fmt)
    b = packed.to(_I64)
    if nbits == 8:
        out = b
    elif nbits == 4:
        out = torch.stack([b & 0xF, _shr(b, 4)], dim=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)
    elif nbits == 6:
        if b.shape[-1] % 3:
            raise ShapeError(f"FP6 packed length {b.shape[-1]} is not a multiple of 3")
        t = b.reshape(*b.shape[:-1], b.shape[-1] // 3, 3)
        w = t[..., 0] | _shl(t[..., 1], 8) | _shl(t[..., 2], 16)
        out = torch.stack([_shr(w, 6 * j) & 0x3F for j in range(4)], dim=-1)
        out = out.reshape(*b.shape[:-1], b.shape[-1] // 3 * 4)
    else:
        raise ShapeError(f"no packing defined for {nbits}-bit elements")
    if out.shape[-1] < n:
        raise ShapeError(f"packed data holds {out.shape[-1]} codes, {n} requested")
    return out[..., :n].to(torch.uint8).contiguous()


def scale_layout(scales, layout: str):
    """2-D ``[rows, cols]`` scale bytes -> 1-D uint8 in ``cublas`` (128x4 tiles, offset
    ``(r%32)*16 + (r//32)*4 + c`` inside each 512-byte tile, tiles row-major) or ``amd``
    (AITER e8m0_shuffle) order, zero padded."""
    if scales.ndim != 2:
        raise ShapeError(f"scale layouts take a 2-D [rows, cols] tensor, got shape "
                         f"{tuple(scales.shape)}")
    rows, cols = scales.shape
    s = scales.to(torch.uint8)
    if layout == "cublas":
        pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
        p = torch.nn.functional.pad(s.to(_I64), (0, pc - cols, 0, pr - rows))
        t = p.reshape(pr // 128, 4, 32, pc // 4, 4).permute(0, 3, 2, 1, 4)
    elif layout == "amd":
        pr, pc = -(-rows // 256) * 256, -(-cols // 8) * 8
        p = torch.nn.functional.pad(s.to(_I64), (0, pc - cols, 0, pr - rows))
        t = p.reshape(pr // 32, 2, 16, pc // 8, 2, 4).permute(0, 3, 5, 2, 4, 1)
    else:
        raise ShapeError(f"unknown scale layout {layout!r}; known: cublas, amd")
    return t.reshape(-1).to(torch.uint8).contiguous()
