"""Primitives every case generator shares: the :class:`Case` record, class ids and their
descriptions, exact source-format arithmetic (:class:`_Src`), element facts (:class:`_Elem`),
the libm-free random draws (:class:`_Rng`) and the block context's plumbing (:class:`_CtxBase`).

Everything here is a pure, deterministic function of its arguments (see :mod:`.` for the rules
the generators follow).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ...formats import ELEMENT_FORMATS

SRC_DTYPES = ("float32", "bfloat16", "float16")
GENERATOR_VERSION = "1"      # bump when outputs change
ELEMENTS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2", "int8")


@dataclass(frozen=True)
class Case:
    cls: str                 # primary class id: "E1".."E11", "S1".."S9", "L1", "R1", "R2"
    tags: tuple              # secondary class ids / short labels (strings)
    src: np.ndarray          # one block of source bit patterns, shape (block,)
    n_valid: int             # number of real elements (== block except L1 ragged cases)

    # arrays do not compare with ==; compare (and hash) by content bytes
    def __eq__(self, other):
        if not isinstance(other, Case):
            return NotImplemented
        return (self.cls, self.tags, self.n_valid, self.src.dtype.str, self.src.shape,
                self.src.tobytes()) == (other.cls, other.tags, other.n_valid,
                                        other.src.dtype.str, other.src.shape, other.src.tobytes())

    def __hash__(self):
        return hash((self.cls, self.tags, self.n_valid, self.src.dtype.str, self.src.tobytes()))


_DESCRIPTIONS = {
    "E1": "every element code x sign, decoded value times 2^k next to an anchor max_normal*2^k",
    "E2": "exact midpoints (ties) between adjacent element codes, at anchor scale 2^k",
    "E3": "element midpoints +-1 ulp of the source format (nearest source values around each tie)",
    "E4": "double-rounding traps (fp32 source): within half a bf16/fp16 ulp of an element midpoint",
    "E5": "element subnormal codes, midpoints between subnormals, the max-subnormal/min-normal "
          "midpoint",
    "E6": "underflow: half the element min subnormal (tie to 0), its source neighbours, "
          "tiny values",
    "E7": "signed zero: +-0 inputs and negative values that round to zero",
    "E8": "element overflow boundary via the block max: max_normal up to 2^(emax+1) - ulp, "
          "around the virtual midpoint",
    "E9": "specials: +-Inf, quiet/signalling NaN, NaN payload and sign variants in finite blocks",
    "E10": "source-format subnormals, next to normal anchors and in all-subnormal blocks",
    "E11": "exhaustive sweep of every 16-bit source pattern, grouped by binade next to an anchor",
    "S1": "block amax exactly 2^e for every source exponent e",
    "S2": "block amax 2^e - 1 source ulp (all-ones mantissa) for every e",
    "S3": "scale-rule separators: amax significand at/around M_elem, 1, 1.5, 2-2^-(mbits+1) "
          "(NVFP4: tensor/block scale op-order vectors)",
    "S4": "block max above the element max after scaling: amax in (max_normal, 2^(emax+1))*2^k",
    "S5": "scale extremes: amax giving scale byte 0x00 or clamping, fp32/bf16 subnormal amax, "
          "amax near the source max",
    "S6": "all-zero, all-negative-zero and partly zero blocks",
    "S7": "one NaN / +Inf / -Inf at the first, a middle and the last position of a finite block",
    "S8": "intra-block dynamic range: large plus tiny elements, single nonzero, mixed signs, "
          "negative amax",
    "S9": "E8M0 conversion: amax = 2^e times guard/round/sticky significand patterns, "
          "over the source exponent range",
    "L1": "ragged last block: n_valid < block with +0 padding",
    "R1": "TestFloat-style weighted random bit patterns (boundary exponents, carry-chain "
          "significands)",
    "R2": "realistic LLM-like rows: gaussian, heavy-tailed, outlier channels, spread 2^-10..2^10",
}
CLASS_IDS = tuple(_DESCRIPTIONS)


def class_description(cls: str) -> str:
    """One line describing a class id (for docs and metadata)."""
    try:
        return _DESCRIPTIONS[cls]
    except KeyError:
        raise ValueError(f"unknown class id {cls!r}; known: {', '.join(CLASS_IDS)}") from None


# ---------------------------------------------------------------------------------------------
# exact arithmetic helpers
# ---------------------------------------------------------------------------------------------
def _p2(e: int) -> Fraction:
    return Fraction(1 << e) if e >= 0 else Fraction(1, 1 << -e)


def _ilog2(x: Fraction) -> int:
    """floor(log2 x) for x > 0, exactly."""
    n, d = x.numerator, x.denominator
    e = n.bit_length() - d.bit_length()
    if (n << -e if e < 0 else n) < (d << e if e > 0 else d):
        e -= 1
    return e


class _Src:
    """An IEEE binary format (fp32, bf16, fp16): exact encode / decode of bit patterns."""

    def __init__(self, name: str, ebits: int, mbits: int, nans: tuple):
        self.name, self.ebits, self.mbits = name, ebits, mbits
        self.bias = (1 << (ebits - 1)) - 1
        self.emin, self.emax = 1 - self.bias, self.bias
        self.min_exp = self.emin - mbits          # exponent of the min subnormal
        self.sign = 1 << (ebits + mbits)
        self.inf = ((1 << ebits) - 1) << mbits
        self.mmask = (1 << mbits) - 1
        self.dtype = np.dtype(np.uint32 if ebits + mbits == 31 else np.uint16)
        self.nans = nans                          # native NaN patterns, payload/sign variants

    def qexp(self, e: int) -> int:
        """Exponent of the quantum (ulp) in binade e (no upper range limit)."""
        return max(e, self.emin) - self.mbits

    def _k(self, mag: Fraction, mode: str):
        e = _ilog2(mag)
        q = self.qexp(e)
        n, d = mag.numerator, mag.denominator
        if q >= 0:
            d <<= q
        else:
            n <<= -q
        if mode == "exact":
            if n % d:
                return e, None
            k = n // d
        elif mode == "floor":
            k = n // d
        else:
            k = -(-n // d)
        return e, k + ((max(e, self.emin) + self.bias - 1) << self.mbits)

    def enc(self, mag: Fraction, neg: bool = False):
        """Bits of the exact value ``(-1)^neg * mag`` (mag >= 0), or None if not representable."""
        if mag == 0:
            return self.sign if neg else 0
        e, bits = self._k(mag, "exact")
        if bits is None or e > self.emax or bits >= self.inf:
            return None
        return bits | (self.sign if neg else 0)

    def grid(self, mag: Fraction, mode: str):
        """Largest representable <= mag ('floor', saturating at max finite) or smallest >= mag
        ('ceil', None past max finite); mag > 0. Returns a positive bit pattern."""
        e, bits = self._k(mag, mode)
        if e > self.emax or bits >= self.inf:
            return self.inf - 1 if mode == "floor" else None
        return bits

    def below(self, mag: Fraction):
        """Largest representable value strictly below mag > 0 (bits, may be +0)."""
        b = self.enc(mag)
        return b - 1 if b is not None else self.grid(mag, "floor")

    def above(self, mag: Fraction):
        """Smallest representable value strictly above mag > 0, or None."""
        b = self.enc(mag)
        if b is not None:
            return b + 1 if b + 1 < self.inf else None
        return self.grid(mag, "ceil")

    def dec(self, bits: int) -> Fraction:
        """Magnitude of a finite pattern."""
        f, m = (bits >> self.mbits) & ((1 << self.ebits) - 1), bits & self.mmask
        if f == 0:
            return m * _p2(self.min_exp)
        return ((1 << self.mbits) | m) * _p2(f - self.bias - self.mbits)

    def p2(self, e: int):
        """Bits of 2^e; 2^(emax+1) gives the Inf pattern (so p2(e) - 1 is the largest value
        below 2^e); None outside the range."""
        if e == self.emax + 1:
            return self.inf
        return self.enc(_p2(e)) if self.min_exp <= e <= self.emax else None

    def native(self, e: int, mant: int) -> int:
        """Positive bits with exponent e and significand bits mant (mbits wide): normal if
        e >= emin, else the subnormal keeping the top bits; 0 below the subnormal range."""
        e = min(e, self.emax)
        if e >= self.emin:
            return ((e + self.bias) << self.mbits) | mant
        if e < self.min_exp:
            return 0
        sh = e - self.min_exp
        return (1 << sh) | (mant >> (self.mbits - sh))

    def exp_of(self, bits: int) -> int:
        return _ilog2(self.dec(bits & ~self.sign))


_SRCS = {
    "float32": _Src("float32", 8, 23, (0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF,
                                       0x7FC00001, 0x7FFFFFFF, 0xFF800001, 0xFFFFFFFF)),
    "bfloat16": _Src("bfloat16", 8, 7, (0x7FC0, 0xFFC0, 0x7F81, 0x7FBF, 0x7FC1, 0x7FFF,
                                        0xFF81, 0xFFFF)),
    "float16": _Src("float16", 5, 10, (0x7E00, 0xFE00, 0x7C01, 0x7DFF, 0x7E01, 0x7FFF,
                                       0xFC01, 0xFFFF)),
}
_NAN_LABELS = ("qnan", "-qnan", "snan", "snan_max_payload", "qnan_payload", "nan_all_ones",
               "-snan", "-nan_all_ones")


class _Elem:
    """Facts about an element format, as exact Fractions."""

    def __init__(self, name: str):
        f = ELEMENT_FORMATS[name]
        self.name, self.fmt = name, f
        self.is_int = f.kind == "int"
        self.mags = [f.decode(c) if self.is_int else f.decode_magnitude(c)
                     for c in range(f.max_code + 1)]
        self.mids = [(a + b) / 2 for a, b in zip(self.mags, self.mags[1:])]
        self.M = f.max_normal
        self.emax, self.mbits = f.emax, f.mbits
        self.M_sig = f.max_significand
        self.min_sub = f.min_subnormal
        self.top = _p2(self.emax + 1)
        self.top_ulp = Fraction(1, 64) if self.is_int else _p2(self.emax - self.mbits)
        self.vnext = self.M + self.top_ulp               # first "virtual" code above max
        self.vmid = (self.M + self.vnext) / 2             # the overflow tie
        self.n_sub = 0 if self.is_int else 1 << self.mbits  # index of the min normal code
        self.t_even = 2 - _p2(-(self.mbits + 1))


@lru_cache(maxsize=None)
def _elem(name: str) -> _Elem:
    return _Elem(name)


class _Rng:
    """Deterministic draws from raw PCG64 words (stable across numpy versions/machines)."""

    def __init__(self, *key):
        h = hashlib.sha256("|".join(map(str, key)).encode()).digest()
        self._bg = np.random.PCG64(int.from_bytes(h[:8], "little"))

    def raw(self, n: int) -> np.ndarray:
        return self._bg.random_raw(n)

    def ints(self, lo: int, hi: int, n: int) -> list:
        """n integers in [lo, hi)."""
        return [lo + int(r % (hi - lo)) for r in self.raw(n).tolist()]

    def int(self, lo: int, hi: int) -> int:
        return self.ints(lo, hi, 1)[0]

    def uniform(self, n: int) -> np.ndarray:
        return (self.raw(n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53

    def normal(self, n: int) -> np.ndarray:
        """Irwin-Hall(12) - 6: an approximately standard normal variate, libm-free."""
        u = self.uniform(12 * n).reshape(n, 12)
        s = u[:, 0].copy()
        for i in range(1, 12):
            s += u[:, i]
        return s - 6.0

    def student_t3(self, n: int) -> np.ndarray:
        z = self.normal(4 * n).reshape(4, n)
        v = z[1] * z[1] + z[2] * z[2]
        v = v + z[3] * z[3]
        return z[0] / np.sqrt(v / 3.0 + 2.0 ** -30)


# ---------------------------------------------------------------------------------------------
# MX block cases
# ---------------------------------------------------------------------------------------------
# Level-1 caps (blocks per class), so the committed corpus stays small; level >= 2: uncapped.
_CAP1 = {"E1": 40, "E2": 40, "E3": 36, "E4": 36, "E5": 16, "E6": 8, "E7": 12, "E8": 24,
         "E9": 16, "E10": 16, "S3": 36, "S4": 16, "S9": 42}
_R1_N, _R2_N = 64, 32
_L1_NVALID = (1, 7, 16, 31)


class _CtxBase:
    """One (element, source dtype, level, block) combination: what every class family's
    generators build their blocks with."""

    def __init__(self, element: str, src: str, level: int, block: int):
        self.element, self.srcname, self.level, self.B = element, src, level, block
        self.s, self.el = _SRCS[src], _elem(element)

    # ---- plumbing ---------------------------------------------------------------------------
    def rng(self, *key) -> _Rng:
        return _Rng(self.element, self.srcname, *key)

    def cap(self, cls):
        return _CAP1.get(cls) if self.level <= 1 else None

    def case(self, cls, tags, vals, n_valid=None) -> Case:
        arr = np.array(vals, dtype=self.s.dtype)
        assert arr.shape == (self.B,), (cls, arr.shape)
        return Case(cls, tuple(tags), arr, self.B if n_valid is None else n_valid)

    def ks(self) -> list:
        """Anchor exponents k (priority order): X = 2^k under floor, anchor max_normal*2^k a
        normal source value, -127 <= k <= 127 (no scale clamp)."""
        el, s = self.el, self.s
        k_low = max(-127, s.emin + 1 - el.emax)
        k_top = min(127, s.emax - el.emax)
        out = []
        for k in (0, k_low, k_top, -20, 7, 100, -100, -3, 3, -60, 60):
            if k in out or not -127 <= k <= 127 or not s.emin <= el.emax + k <= s.emax:
                continue
            if s.enc(el.M * _p2(k)) is None:
                continue
            out.append(k)
        return out

    def anchor(self, k: int) -> int:
        return self.s.enc(self.el.M * _p2(k))

    def anchored(self, k: int, vals: list, jj: int, start: int = 0):
        """A block: the anchor (position and sign varied by jj) plus vals cycled from start."""
        B = self.B
        pos = 0 if jj % 2 == 0 else (5 + 7 * jj) % B
        a = self.anchor(k) | (self.s.sign if jj % 4 == 3 else 0)
        chunk = [vals[(start + i) % len(vals)] for i in range(B - 1)] if vals else [0] * (B - 1)
        return chunk[:pos] + [a] + chunk[pos:], pos

    def pack_groups(self, cls, groups, cap, tags=()) -> list:
        """groups: (k, values, extra tags); each packed B-1 per block next to the anchor.
        Under a cap, whole groups are taken in order while they fit (the first always)."""
        out, B = [], self.B
        for gi, (k, vals, gt) in enumerate(groups):
            if not vals:
                continue
            nb = -(-len(vals) // (B - 1))
            if cap is not None and out and len(out) + nb > cap:
                continue
            for b in range(nb):
                blk, _ = self.anchored(k, vals, gi * 7 + b, b * (B - 1))
                out.append(self.case(cls, tuple(tags) + tuple(gt) + (f"k={k}",), blk))
        return out

    def sv(self, pairs, k: int) -> list:
        """Encode (magnitude, neg) pairs at scale 2^k, dropping what the source cannot hold."""
        X = _p2(k)
        out = []
        for m, neg in pairs:
            b = self.s.enc(m * X, neg)
            if b is not None:
                out.append(b)
        return out

    def fill(self, r: _Rng, e_top: int, n: int, spread: int = 12, zero_frac: float = 0.1):
        """n random source values with |v| < 2^e_top (exponents e_top-1-[0, spread))."""
        s = self.s
        exps = r.ints(0, spread, n)
        mants = (r.raw(n) & np.uint64(s.mmask)).tolist()
        signs = (r.raw(n) & np.uint64(1)).tolist()
        zeros = (r.uniform(n) < zero_frac).tolist()
        out = []
        for d, m, sg, z in zip(exps, mants, signs, zeros):
            b = 0 if z else s.native(e_top - 1 - d, m)
            out.append(b | (s.sign if sg else 0))
        return out

    def with_amax(self, amax: int, pos: int, fill: list) -> list:
        pos %= self.B
        return fill[:pos] + [amax] + fill[pos:self.B - 1]



def _to_src(x: np.ndarray, s: _Src) -> list:
    """float64 values -> source bit patterns: clip to the finite range, round to fp32 (RNE),
    then to the 16-bit source (RNE, correctly rounded casts)."""
    if s.name == "float16":
        x = np.clip(x, -65504.0, 65504.0)
    else:
        x = np.clip(x, -3.0e38, 3.0e38)
    f = x.astype(np.float32)
    if s.name == "float32":
        return f.view(np.uint32).tolist()
    if s.name == "float16":
        return f.astype(np.float16).view(np.uint16).tolist()
    import ml_dtypes
    return f.astype(ml_dtypes.bfloat16).view(np.uint16).tolist()


def f32_bits(x) -> np.ndarray:
    """float64 -> float32 bits, one correctly rounded conversion (numpy's astype is RNE)."""
    return np.asarray(x, np.float64).astype(np.float32).view(np.uint32)
