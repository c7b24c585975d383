"""One declarative description per format; every other fact is derived from it.

Element formats (`FloatFormat`, `IntFormat`) follow gfloat's FormatInfo idea: a handful of
declared fields, everything else (bias, max normal, emax_elem, codes of NaN/Inf/max, value
tables) is a derived property. Block formats (`BlockFormat`) pair an element format with a
scale format and a block size. Values are exact `fractions.Fraction`s; nothing here uses floats.

Code conventions (shared by encode, decode and the Numba kernels):

* float codes are ``sign << (ebits + mbits) | exponent_field << mbits | mantissa``;
* NaN encodings: ``"none"`` (FP4/FP6), ``"all_ones"`` (only S.1111.111, OCP E4M3),
  ``"ieee"`` (exponent all ones with mantissa != 0; all-ones exponent with mantissa 0 is Inf);
* the integer format MXINT8 is two's complement ``k / 2**frac_bits`` with code -128 unused.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from .errors import UnknownFormatError

__all__ = [
    "FloatFormat", "IntFormat", "BlockFormat", "ELEMENT_FORMATS", "FORMATS", "E8M0", "FP32",
    "get_format", "get_element_format",
]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``(-1)^s * 2^(e - bias) * 1.m`` (or ``0.m`` subnormal)."""

    name: str
    ebits: int
    mbits: int
    bias: int
    nan: str = "none"  # "none" | "all_ones" | "ieee"
    has_subnormals: bool = True
    signed: bool = True

    kind = "float"

    # --- derived facts -------------------------------------------------------------------
    @property
    def bits(self) -> int:
        return int(self.signed) + self.ebits + self.mbits

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal (also the subnormal exponent)."""
        return 1 - self.bias if self.has_subnormals else -self.bias

    @property
    def sign_mask(self) -> int:
        return (1 << (self.ebits + self.mbits)) if self.signed else 0

    @property
    def max_code(self) -> int:
        """Magnitude code of the largest finite value."""
        all_ones = (1 << (self.ebits + self.mbits)) - 1
        if self.nan == "all_ones":
            return all_ones - 1
        if self.nan == "ieee":
            return ((1 << self.ebits) - 2) << self.mbits | ((1 << self.mbits) - 1)
        return all_ones

    @property
    def nan_code(self) -> int | None:
        """Canonical (positive) NaN code, or None when the format has no NaN."""
        if self.nan == "all_ones":
            return (1 << (self.ebits + self.mbits)) - 1
        if self.nan == "ieee":
            return (1 << (self.ebits + self.mbits)) - 1
        return None

    @property
    def inf_code(self) -> int | None:
        return ((1 << self.ebits) - 1) << self.mbits if self.has_inf else None

    @property
    def emax(self) -> int:
        """emax_elem: unbiased exponent of the largest normal value (OCP MX 6.3)."""
        return (self.max_code >> self.mbits) - self.bias

    @property
    def max_normal(self) -> Fraction:
        return self.decode_magnitude(self.max_code)

    @property
    def max_significand(self) -> Fraction:
        """Significand of max_normal in [1, 2): 1.5 for E2M1, 1.75 for E4M3, 1.875 for E2M3."""
        return self.max_normal / Fraction(2) ** self.emax

    @property
    def min_subnormal(self) -> Fraction:
        return Fraction(2) ** (self.emin - self.mbits) if self.has_subnormals else self.min_normal

    @property
    def min_normal(self) -> Fraction:
        return Fraction(2) ** self.emin

    def is_nan_code(self, code: int) -> bool:
        mag = code & ~self.sign_mask & ((1 << self.bits) - 1)
        if self.nan == "all_ones":
            return mag == self.nan_code
        if self.nan == "ieee":
            return mag >> self.mbits == (1 << self.ebits) - 1 and mag & ((1 << self.mbits) - 1) != 0
        return False

    def is_inf_code(self, code: int) -> bool:
        return self.has_inf and (code & ~self.sign_mask) == self.inf_code

    def decode_magnitude(self, mag: int) -> Fraction:
        e, m = mag >> self.mbits, mag & ((1 << self.mbits) - 1)
        if e == 0 and self.has_subnormals:
            return Fraction(m, 1 << self.mbits) * Fraction(2) ** self.emin
        return (1 + Fraction(m, 1 << self.mbits)) * Fraction(2) ** (e - self.bias)

    def decode(self, code: int) -> Fraction | float:
        """Exact value of a code: a Fraction, or float nan/inf for specials (-0 returns 0)."""
        if self.is_nan_code(code):
            return float("nan")
        neg = bool(code & self.sign_mask)
        if self.is_inf_code(code):
            return float("-inf") if neg else float("inf")
        v = self.decode_magnitude(code & ~self.sign_mask)
        return -v if neg else v

    @cached_property
    def value_table(self) -> np.ndarray:
        """float64 value of every code (exact: all these formats fit a double)."""
        return np.array([float(self.decode(c)) for c in range(1 << self.bits)], dtype=np.float64)

    def kernel_params(self) -> np.ndarray:
        return _params(self)

    @cached_property
    def midpoint_bits(self) -> np.ndarray:
        """fp32 bit patterns of the midpoints between consecutive magnitude codes, for
        formats with at most 15 magnitude codes (FP4); empty otherwise. Each midpoint of such
        a small format is exactly representable in fp32."""
        if self.max_code > 15:
            return np.zeros(0, dtype=np.int32)
        mids = [(self.decode_magnitude(k) + self.decode_magnitude(k + 1)) / 2
                for k in range(self.max_code)]
        return np.array([_fp32_bits_exact(v) for v in mids], dtype=np.int32)

    def tie_goes_up(self, rounding: str) -> np.ndarray:
        """Per midpoint: 1 where a tie rounds to the upper code under ``rounding``."""
        k = np.arange(1, self.midpoint_bits.size + 1)
        if rounding == "rne":
            return (k % 2 == 0).astype(np.int32)
        return np.full(k.size, 1 if rounding == "ties_away" else 0, dtype=np.int32)


def _fp32_bits_exact(v: Fraction) -> int:
    """fp32 bits of a positive Fraction that fp32 represents exactly (normal range)."""
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    sig = v / Fraction(2) ** e                      # in [1, 2)
    frac = (sig - 1) * (1 << 23)
    if frac.denominator != 1 or not -126 <= e <= 127:
        raise ValueError(f"{v} is not an exact normal fp32 value")
    return (e + 127) << 23 | int(frac)


@dataclass(frozen=True)
class IntFormat:
    """Two's complement fixed point ``k / 2**frac_bits`` with the most negative code unused."""

    name: str
    bits: int
    frac_bits: int

    kind = "int"
    nan = "none"
    has_inf = False
    nan_code = None
    inf_code = None
    mbits = property(lambda self: self.frac_bits)  # mantissa width used by the EVEN scale rule

    @property
    def max_code(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def max_normal(self) -> Fraction:
        return Fraction(self.max_code, 1 << self.frac_bits)

    @property
    def emax(self) -> int:
        """floor(log2(max)): 0 for MXINT8 (max = 127/64)."""
        return self.max_code.bit_length() - 1 - self.frac_bits

    @property
    def max_significand(self) -> Fraction:
        return self.max_normal / Fraction(2) ** self.emax

    @property
    def min_subnormal(self) -> Fraction:
        return Fraction(1, 1 << self.frac_bits)

    def is_nan_code(self, code: int) -> bool:
        return False

    def is_inf_code(self, code: int) -> bool:
        return False

    midpoint_bits = np.zeros(0, dtype=np.int32)

    def tie_goes_up(self, rounding: str) -> np.ndarray:
        return np.zeros(0, dtype=np.int32)

    def decode(self, code: int) -> Fraction:
        k = code - (1 << self.bits) if code >= 1 << (self.bits - 1) else code
        return Fraction(k, 1 << self.frac_bits)

    @cached_property
    def value_table(self) -> np.ndarray:
        return np.array([float(self.decode(c)) for c in range(1 << self.bits)], dtype=np.float64)

    def kernel_params(self) -> np.ndarray:
        return _params(self)


# ---- kernel parameter vector (int64), so one compiled kernel serves every format ----------
P_KIND, P_EBITS, P_MBITS, P_BIAS, P_EMIN, P_EMAX, P_MAXCODE, P_NAN, P_INF, P_SIGNBIT, \
    P_MAXSIG, P_EVENTHR, P_BITS, P_SUBN, P_MAXF32 = range(15)
N_PARAMS = 15


def _params(f) -> np.ndarray:
    p = np.zeros(N_PARAMS, dtype=np.int64)
    is_int = f.kind == "int"
    p[P_KIND] = 1 if is_int else 0
    p[P_EBITS] = 0 if is_int else f.ebits
    p[P_MBITS] = f.mbits
    p[P_BIAS] = 0 if is_int else f.bias
    p[P_EMIN] = -f.frac_bits + f.mbits if is_int else f.emin  # int: quantum is 2^(emin - mbits)
    p[P_EMAX] = f.emax
    p[P_MAXCODE] = f.max_code
    p[P_NAN] = -1 if f.nan_code is None else f.nan_code
    p[P_INF] = -1 if f.inf_code is None else f.inf_code
    p[P_SIGNBIT] = (f.bits - 1) if is_int else (f.ebits + f.mbits)
    # max_significand * 2^23 and the EVEN rule's threshold (2 - 2^-(mbits+1)) * 2^23, integers
    p[P_MAXSIG] = int(f.max_significand * (1 << 23))
    p[P_EVENTHR] = (1 << 24) - (1 << (22 - f.mbits)) if f.mbits <= 22 else 1 << 24
    p[P_BITS] = f.bits
    p[P_SUBN] = 1 if (is_int or f.has_subnormals) else 0
    if f.bits <= 8:   # fp32 bits of max normal (exact for every element format)
        p[P_MAXF32] = _fp32_bits_exact(f.max_normal)
    return p


E2M1 = FloatFormat("e2m1", ebits=2, mbits=1, bias=1)
E2M3 = FloatFormat("e2m3", ebits=2, mbits=3, bias=1)
E3M2 = FloatFormat("e3m2", ebits=3, mbits=2, bias=3)
E4M3 = FloatFormat("e4m3", ebits=4, mbits=3, bias=7, nan="all_ones")
E5M2 = FloatFormat("e5m2", ebits=5, mbits=2, bias=15, nan="ieee")
INT8 = IntFormat("int8", bits=8, frac_bits=6)
E8M0 = FloatFormat("e8m0", ebits=8, mbits=0, bias=127, nan="all_ones", has_subnormals=False,
                   signed=False)
FP32 = FloatFormat("fp32", ebits=8, mbits=23, bias=127, nan="ieee")
FP16 = FloatFormat("fp16", ebits=5, mbits=10, bias=15, nan="ieee")
BF16 = FloatFormat("bf16", ebits=8, mbits=7, bias=127, nan="ieee")

ELEMENT_FORMATS = {f.name: f for f in (E2M1, E2M3, E3M2, E4M3, E5M2, INT8)}


@dataclass(frozen=True)
class BlockFormat:
    """A microscaling format: element format, scale format, block size (and NVFP4's tensor scale)."""

    name: str
    element: FloatFormat | IntFormat
    scale: FloatFormat
    block_size: int
    tensor_scale: bool = False

    @property
    def is_nvfp4(self) -> bool:
        return self.tensor_scale

    def allowed_block_size(self, k: int) -> bool:
        """OCP fixes k = 32 and NVFP4 k = 16; MX research variants may use other powers of two."""
        if self.is_nvfp4:
            return k == 16
        return isinstance(k, (int, np.integer)) and 2 <= k <= 1024 and k & (k - 1) == 0


FORMATS = {f.name: f for f in (
    BlockFormat("mxfp8_e4m3", E4M3, E8M0, 32),
    BlockFormat("mxfp8_e5m2", E5M2, E8M0, 32),
    BlockFormat("mxfp6_e3m2", E3M2, E8M0, 32),
    BlockFormat("mxfp6_e2m3", E2M3, E8M0, 32),
    BlockFormat("mxfp4", E2M1, E8M0, 32),
    BlockFormat("mxint8", INT8, E8M0, 32),
    BlockFormat("nvfp4", E2M1, E4M3, 16, tensor_scale=True),
)}


def get_format(fmt) -> BlockFormat:
    if isinstance(fmt, BlockFormat):
        return fmt
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise UnknownFormatError(
            f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}") from None


def get_element_format(name) -> FloatFormat | IntFormat:
    if isinstance(name, (FloatFormat, IntFormat)):
        return name
    try:
        return ELEMENT_FORMATS[name]
    except (KeyError, TypeError):
        raise UnknownFormatError(
            f"unknown element format {name!r}; known: {', '.join(ELEMENT_FORMATS)}") from None
