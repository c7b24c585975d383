"""Coverage-class case generators for the golden corpus (conformance_anchors Part B).

Each generator returns a list of :class:`Case`: one block of source bit patterns (uint32 for
float32, uint16 for bfloat16 / float16) with a primary class id and tags. Everything here is
a pure, deterministic function of its arguments:

* values are built exactly (``fractions.Fraction`` and integer bit arithmetic) and encoded
  straight into the source format's bit pattern; a value the source cannot hold exactly is
  dropped (never rounded), except in R2, whose inputs are rounded to the source once by a
  fixed, correctly rounded conversion (float64 -> float32 -> source);
* random classes draw raw 64-bit words from ``np.random.PCG64`` (the bit generator behind
  ``np.random.default_rng``) seeded by sha256 of ``element|src_dtype|class|key``; distributions
  are built only from integer ops and IEEE ``+ - * / sqrt`` (no libm), so the bytes are the
  same on every machine. The seed does not include the level and every block has its own key,
  so each level's cases are a superset of the level below (level 0 is the first case of each
  class at level 1).

Element classes (E*) fix the shared scale with an ANCHOR element ``max_normal * 2^k`` (so the
canonical floor rule gives ``X = 2^k``) and put the element values under test, times ``2^k``,
in the other positions. Block classes (S*) are about the block amax itself.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..formats import ELEMENT_FORMATS

__all__ = ["Case", "SRC_DTYPES", "GENERATOR_VERSION", "ELEMENTS", "CLASS_IDS", "block_cases",
           "nvfp4_cases", "class_description", "classes_for"]

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


class _Ctx:
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

    # ---- element value pools (values at scale 2^k, without the anchor) ----------------------
    def pool(self, cls: str, k: int) -> list:
        return list(_pool(self.el.name, self.srcname, cls, k))

    def _pool(self, cls: str, k: int) -> list:
        el, s = self.el, self.s
        X = _p2(k)
        both = (False, True)
        if cls == "E1":
            return self.sv([(m, n) for m in el.mags for n in both], k)
        if cls == "E2":
            return self.sv([(m, n) for m in el.mids for n in both], k)
        if cls == "E3":
            out = []
            for m in el.mids:
                lo, hi = s.below(m * X), s.above(m * X)
                for neg in both:
                    sg = s.sign if neg else 0
                    out += [b | sg for b in (lo, hi) if b]
            return out
        if cls == "E4":
            return self._traps(k) if s.name == "float32" else []
        if cls == "E5":
            if el.is_int:
                return []
            n = el.n_sub
            subs = el.mags[1:n]
            mids = [(el.mags[i] + el.mags[i + 1]) / 2 for i in range(1, n)]
            out = self.sv([(m, ng) for m in subs + mids for ng in both], k)
            for m in mids:
                lo, hi = s.below(m * X), s.above(m * X)
                out += [b | sg for b in (lo, hi) if b for sg in (0, s.sign)]
            return out
        if cls == "E6":
            h = el.min_sub / 2
            out = self.sv([(v, ng) for v in (h, el.min_sub / 4, 3 * el.min_sub / 4,
                                              _p2(-30), _p2(-60)) for ng in both], k)
            lo, hi = s.below(h * X), s.above(h * X)
            out += [b | sg for b in (lo, hi) if b for sg in (0, s.sign)]
            out += [1, 1 | s.sign]            # the source's min subnormal
            return out
        if cls == "E7":
            h = el.min_sub / 2
            neg = self.sv([(v, True) for v in (h, h / 2, _p2(-30))], k)
            lo = s.below(h * X)
            if lo:
                neg.append(lo | s.sign)
            neg.append(1 | s.sign)
            out = []
            for i, v in enumerate(neg):
                out += [0, s.sign, v] if i % 2 == 0 else [s.sign, v, 0]
            return out
        if cls == "E8":
            return [b | sg for b in self.e8_values(k) for sg in (0, s.sign)]
        raise KeyError(cls)

    def _traps(self, k: int) -> list:
        """fp32 values within half a bf16 (fp16) ulp of an element midpoint, both sides:
        an fp32 -> bf16/fp16 -> element cast rounds them onto the tie first."""
        s = self.s
        out = []
        for i, m in enumerate(self.el.mids):
            v = m * _p2(k)
            e = _ilog2(v)
            eb = e - 1 if v == _p2(e) else e
            neg = bool(i & 1)
            for inter in (_SRCS["bfloat16"], _SRCS["float16"]):
                if inter.enc(v) is None:       # the intermediate cannot land on this tie
                    continue
                ups = _p2(inter.qexp(e) - 1) - _p2(s.qexp(e))
                dns = _p2(inter.qexp(eb) - 1) - _p2(s.qexp(eb))
                for t in (v + ups if ups > 0 else None, v - dns if dns > 0 else None):
                    if t is not None and t > 0:
                        b = s.enc(t, neg)
                        if b is not None:
                            out.append(b)
        return out

    def e8_values(self, k: int) -> list:
        """Block maxima in [max_normal, 2^(emax+1)) * 2^k around the overflow tie."""
        el, s = self.el, self.s
        X = _p2(k)
        M, vmid, top, vnext = el.M * X, el.vmid * X, el.top * X, el.vnext * X
        c = [s.enc(M), s.above(M), s.grid((M + vmid) / 2, "floor"), s.below(vmid), s.enc(vmid),
             s.above(vmid), s.grid((vmid + top) / 2, "floor"), s.below(top)]
        if vnext < top:
            c += [s.below(vnext), s.enc(vnext), s.above(vnext)]
        out = sorted({b for b in c if b is not None and M <= s.dec(b) < top})
        return out

    # ---- element classes --------------------------------------------------------------------
    def gen_pool_class(self, cls: str, tags=()) -> list:
        ks = self.ks()[:1] if self.level == 0 else self.ks()
        groups = [(k, self.pool(cls, k), ()) for k in ks]
        return self.pack_groups(cls, groups, self.cap(cls), tags)

    def gen_E7(self) -> list:
        s = self.s
        groups = []
        for i, k in enumerate(self.ks()):
            groups.append((k, self.pool("E7", k), ()))
            if i < 2:
                groups.append((k, [s.sign], ("all_neg_zero",)))
        return self.pack_groups("E7", groups, self.cap("E7"))

    def gen_E8(self) -> list:
        out, B, s, cap = [], self.B, self.s, self.cap("E8")
        for gi, k in enumerate(self.ks()):
            vals = self.e8_values(k)
            small = self.pool("E1", k)
            if cap is not None and out and len(out) + len(vals) > cap:
                continue
            for vi, v in enumerate(vals):
                sg = s.sign if (vi + gi) % 2 else 0
                fill = [small[(vi * 3 + i) % len(small)] for i in range(B - 1)]
                blk = self.with_amax(v | sg, 3 * vi + gi, fill)
                out.append(self.case("E8", ("S4", f"k={k}"), blk))
        return out

    def gen_E9(self) -> list:
        s, B = self.s, self.B
        specials = [(s.inf, "+inf"), (s.inf | s.sign, "-inf")] + list(zip(s.nans, _NAN_LABELS))
        mixed = [((s.inf, s.inf | s.sign), "+inf-inf"), ((s.nans[0], s.inf), "nan+inf"),
                 ((s.nans[2], s.nans[1], s.inf | s.sign), "snan-qnan-inf"),
                 (tuple(s.nans), "all_nans")]
        out, cap = [], self.cap("E9")
        for gi, k in enumerate(self.ks()[:2]):
            group = []
            jj0 = gi * 31
            items = [((sp,), lab) for sp, lab in specials] + mixed
            for i, (sps, lab) in enumerate(items):
                blk, apos = self.anchored(k, self.pool("E1", k), jj0 + i, i)
                free = [p for p in range(B) if p != apos]
                for j, sp in enumerate(sps):
                    blk[free[(i * 5 + 1 + j * 3) % len(free)]] = sp
                group.append(self.case("E9", (lab, f"k={k}"), blk))
            if cap is not None and out and len(out) + len(group) > cap:
                break
            out += group
        return out

    def gen_E10(self) -> list:
        s, el, B = self.s, self.el, self.B
        r = self.rng("E10")
        subs = [1, 2, 3, s.mmask >> 1, 1 << (s.mbits - 1), s.mmask, s.mmask - 1]
        subs += [1 << j for j in range(s.mbits)]
        subs += [int(x) for x in (r.raw(5) % np.uint64(s.mmask)) + np.uint64(1)]
        subs = sorted(set(subs))
        vals = [b | sg for b in subs for sg in (0, s.sign)]
        out = []
        # normal anchors: (a) at the source's min normal binade (or where floor reaches -127),
        # (b) 2^8 above it, (c) at 1.0 (every subnormal underflows)
        for tag, k in (("anchor_min_normal", max(-127, s.emin - el.emax)),
                       ("anchor_min_normal+8", max(-127, s.emin - el.emax) + 8),
                       ("anchor_one", -el.emax)):
            if self.anchor(k) is None:
                continue
            nb = -(-len(vals) // (B - 1))
            for b in range(nb):
                blk, _ = self.anchored(k, vals, len(out), b * (B - 1))
                out.append(self.case("E10", (tag, f"k={k}"), blk))
        # entirely subnormal blocks
        fills = [
            ("all_sub_max", [s.mmask] + self.fill(r, s.emin, B - 1, spread=s.mbits + 2)),
            ("all_sub_min", [1, 1 | s.sign] + [0, s.sign] * ((B - 2) // 2) + [1] * ((B - 2) % 2)),
            ("all_sub_single_bits", [(1 << (j % s.mbits)) | (s.sign if j % 3 == 1 else 0)
                                     for j in range(B)]),
            ("all_sub_mid", [s.p2(s.emin - 3) | s.sign] + self.fill(r, s.emin - 3, B - 1,
                                                                    spread=s.mbits - 2)),
        ]
        for tag, blk in fills:
            out.append(self.case("E10", (tag,), blk[:B]))
        cap = self.cap("E10")
        return out[:cap] if cap else out

    def gen_E11(self) -> list:
        """Every 16-bit pattern, grouped by exponent field, B-1 per block next to an anchor.
        Pass A: anchor 2^e in the group's binade (group lands on the element's top binade);
        pass B: anchor 2^(e+j) (group lands j binades lower, j cycling through the element's
        range down to underflow). Subnormals/zeros: anchor at the min normal (pass A) and 2^j
        above (pass B); Inf/NaN patterns next to an anchor 1.0."""
        s, el, B = self.s, self.el, self.B
        if s.name == "float32":
            return []
        span = el.emax - (-6 if el.is_int else el.fmt.emin - el.mbits) + 2
        emask = (1 << s.ebits) - 1
        out = []
        for f in range(emask + 1):
            pats = [(f << s.mbits) | m for m in range(s.mmask + 1)]
            pats = pats + [p | s.sign for p in pats]
            if f == emask:
                anchors = [("specials", s.p2(0))]
            else:
                e = max(f - s.bias, s.emin)
                j = 1 + f % span
                anchors = [("binade_top", s.p2(e)), (f"binade+{j}", s.p2(min(e + j, s.emax)))]
            for tag, a in anchors:
                for b0 in range(0, len(pats), B - 1):
                    chunk = [pats[(b0 + i) % len(pats)] for i in range(B - 1)]
                    pos = (b0 // (B - 1)) % B
                    out.append(self.case("E11", (tag, f"field={f}"),
                                         chunk[:pos] + [a] + chunk[pos:]))
        return out

    # ---- block classes ----------------------------------------------------------------------
    def sweep(self, lo: int, hi: int, extra=()) -> list:
        full = list(range(lo, hi + 1))
        if self.level >= 2 or len(full) <= 64:
            exps = full
        else:
            s, e0 = self.s, self.el.emax - 127
            cand = set(extra)
            for c, w in ((lo, 2), (s.emin, 2), (e0, 2), (0, 2), (hi, 2)):
                cand.update(range(c - w, c + w + 1))
            cand.update(range(lo - lo % 16, hi + 1, 16))
            exps = [e for e in cand if lo <= e <= hi]
        return sorted(exps, key=lambda e: (e != 0, e))

    def gen_S1(self) -> list:
        s, out = self.s, []
        for e in self.sweep(s.min_exp, s.emax):
            r = self.rng("S1", e)
            a = s.p2(e) | (s.sign if e % 3 == 0 else 0)
            blk = self.with_amax(a, e * 7, self.fill(r, e, self.B - 1))
            out.append(self.case("S1", (f"e={e}",), blk))
        return out

    def gen_S2(self) -> list:
        s, out = self.s, []
        extra = (24,) if s.name == "float32" else ()
        for e in self.sweep(s.min_exp + 1, s.emax + 1, extra):
            r = self.rng("S2", e)
            a = (s.p2(e) - 1) | (s.sign if e % 3 == 1 else 0)
            out.append(self.case("S2", (f"e={e}",),
                                 self.with_amax(a, e * 5 + 3, self.fill(r, e - 1, self.B - 1))))
        return out

    def _amax_block(self, cls, tags, amax: int, key, pos=None, spread=12) -> Case:
        r = self.rng(cls, *key)
        e = self.s.exp_of(amax)
        pos = r.int(0, self.B) if pos is None else pos
        return self.case(cls, tags, self.with_amax(amax, pos, self.fill(r, e, self.B - 1, spread)))

    def gen_S3(self) -> list:
        s, el = self.s, self.el
        bases = (("M_elem", el.M_sig), ("one", Fraction(1)), ("one_half", Fraction(3, 2)),
                 ("even_threshold", el.t_even))
        exps = [0, el.emax - 127, s.emax, s.emin, -20, 20, -5, 5]
        if self.level >= 2:
            exps += list(range(s.min_exp - s.min_exp % 4, s.emax + 1, 4))
        seen, out, cap = [], [], self.cap("S3")
        for e in exps:
            if e in seen or not s.min_exp <= e <= s.emax:
                continue
            seen.append(e)
            group, got = [], set()
            for lab, b in bases:
                v = b * _p2(e)
                x = s.enc(v)
                cands = ((x - 1, "-ulp"), (x, ""), (x + 1, "+ulp")) if x is not None else \
                    ((s.grid(v, "floor"), "-"), (s.grid(v, "ceil"), "+"))
                for c, d in cands:
                    if c and c < s.inf and c not in got:
                        got.add(c)
                        group.append(self._amax_block("S3", (lab + d, f"e={e}"), c,
                                                      (e, c), pos=len(group) * 3))
            if cap is not None and out and len(out) + len(group) > cap:
                continue
            out += group
        return out

    def gen_S4(self) -> list:
        s, el, B = self.s, self.el, self.B
        out, cap = [], self.cap("S4")
        for gi, k in enumerate(self.ks()):
            X = _p2(k)
            M, vmid, top = el.M * X, el.vmid * X, el.top * X
            c = [s.above(vmid), s.below(top), s.grid((vmid + top) / 2, "floor"), s.above(M)]
            vals = []
            for b in c:
                if b is not None and M < s.dec(b) < top and b not in vals:
                    vals.append(b)
            if cap is not None and out and len(out) + len(vals) > cap:
                continue
            small = self.pool("E1", k)
            lo = s.p2(el.emax + k)
            for vi, a in enumerate(vals):
                r = self.rng("S4", k, vi)
                big = [lo + int(x % np.uint64(a - lo + 1)) for x in r.raw(B // 2).tolist()]
                big = [b | (s.sign if i % 3 == 2 else 0) for i, b in enumerate(big)]
                fill = big + [small[(vi + i) % len(small)] for i in range(B - 1 - len(big))]
                sg = s.sign if vi % 2 else 0
                out.append(self.case("S4", ("E8", f"k={k}"),
                                     self.with_amax(a | sg, gi + 5 * vi, fill)))
        return out

    def gen_S5(self) -> list:
        s, el = self.s, self.el
        e0 = el.emax - 127                     # floor: amax in binade e0 -> scale byte 0x00
        ms = s.enc(el.M_sig * _p2(e0))
        mt = s.enc(el.M_sig * _p2(s.emax))
        cands = [
            (1, "src_min_subnormal"), (3, "src_subnormal_3"), (s.mmask, "src_max_subnormal"),
            (s.p2(e0), "scale_0x00"), (ms, "scale_0x00_M_elem"),
            (None if ms is None else ms + 1, "scale_0x00_M_elem+ulp"),
            (s.p2(e0 - 1), "scale_clamped_-128"), (s.p2(e0 - 8), "scale_clamped_-135"),
            (s.p2(s.emin), "src_min_normal"), (s.p2(s.emax), "src_top_binade"),
            (mt, "largest_exponent_M_elem"), (None if mt is None else mt + 1,
                                               "largest_exponent_M_elem+ulp"),
            (s.inf - 1, "src_max_finite"),
        ]
        out, seen = [], set()
        for i, (a, lab) in enumerate(cands):
            if a is None or a in seen or not 0 < a < s.inf:
                continue
            seen.add(a)
            sg = s.sign if i % 3 == 2 else 0
            out.append(self._amax_block("S5", (lab,), a | sg, (a,), spread=40))
        return out[:self.cap("S5")] if self.cap("S5") else out

    def gen_S6(self) -> list:
        s, B = self.s, self.B
        pool = self.pool("E1", 0)
        half = [0] * (B // 2) + [self.anchor(0)] + pool[:B - B // 2 - 1]
        half += [0] * (B - len(half))
        blocks = [
            ("all_pos_zero", [0] * B),
            ("all_neg_zero", [s.sign] * B),
            ("alternating_zero", [s.sign * (i % 2) for i in range(B)]),
            ("one_neg_zero", [s.sign if i == B // 3 else 0 for i in range(B)]),
            ("half_zero", half[:B]),
            ("zeros_last_max", [0] * (B - 1) + [self.anchor(0)]),
            ("zeros_one_src_min_subnormal", [1 | s.sign if i == 1 else s.sign * (i % 2)
                                             for i in range(B)]),
        ]
        return [self.case("S6", (t,), b) for t, b in blocks]

    def gen_S7(self) -> list:
        s, B = self.s, self.B
        out = []
        for variant in ("anchor", "random"):
            for sp, lab in ((s.nans[0], "nan"), (s.inf, "+inf"), (s.inf | s.sign, "-inf")):
                for pos in (0, B // 2, B - 1):
                    if variant == "anchor":
                        blk, _ = self.anchored(0, self.pool("E1", 0), pos, pos)
                    else:
                        r = self.rng("S7", lab, pos)
                        blk = self.fill(r, r.int(-10, 11), B)
                    blk[pos] = sp
                    out.append(self.case("S7", (lab, f"pos={pos}", variant), blk))
        return out

    def gen_S8(self) -> list:
        s, el, B = self.s, self.el, self.B
        out = []
        ks = self.ks()
        for k in ks[:2]:
            ms = el.min_sub
            tiny = self.sv([(v, i % 2 == 1) for i, v in enumerate(
                (ms, ms / 2, 3 * ms / 4, ms / 4, 3 * ms / 2, 5 * ms / 4, 5 * ms / 8, _p2(-40),
                 _p2(-12), ms * 2))], k)
            blk, _ = self.anchored(k, tiny, 0)
            out.append(self.case("S8", ("large_plus_tiny", "E5", "E6", f"k={k}"), blk))
            r = self.rng("S8", "spread", k)
            a = self.anchor(k)
            out.append(self.case("S8", ("large_plus_spread", f"k={k}"),
                                 self.with_amax(a, B - 1, self.fill(r, s.exp_of(a) - 8, B - 1,
                                                                    spread=30))))
        singles = [(self.anchor(0), 0), (s.enc(Fraction(1), True), B - 1),
                   (s.enc(el.min_sub), B // 2), (1, 3), (s.enc(Fraction(3), True), 5)]
        for v, pos in singles:
            if v is None:
                continue
            blk = [0] * B
            blk[pos % B] = v
            out.append(self.case("S8", ("single_nonzero", f"pos={pos % B}"), blk))
        r = self.rng("S8", "mixed")
        mixed = [b & ~s.sign | (s.sign if i % 2 else 0)
                 for i, b in enumerate(self.fill(r, 3, B, 4, 0))]
        out.append(self.case("S8", ("mixed_signs",), mixed))
        r = self.rng("S8", "negamax")
        pos_vals = [b & ~s.sign for b in self.fill(r, el.emax, B - 1, 10)]
        out.append(self.case("S8", ("negative_amax",),
                             self.with_amax(self.anchor(0) | s.sign, 7, pos_vals)))
        v = s.enc(Fraction(5, 4) * _p2(min(3, s.emax)))
        out.append(self.case("S8", ("all_equal",), [v] * B))
        out.append(self.case("S8", ("all_equal_negative",), [v | s.sign] * B))
        return out

    def gen_S9(self) -> list:
        s, el = self.s, self.el
        e0 = el.emax - 127
        if self.level >= 2:
            exps = list(range(s.min_exp, s.emax + 1))
        else:
            exps = [0, e0, e0 - 1, e0 + 1, s.emin, s.emax - 1, s.emax, s.min_exp + 2]
        out, seen, cap = [], [], self.cap("S9")
        for e in exps:
            if e in seen or not s.min_exp <= e <= s.emax:
                continue
            seen.append(e)
            m = s.enc(el.M_sig * _p2(e))
            if m is None:
                m = s.grid(el.M_sig * _p2(e), "floor")
            p, p1 = s.p2(e), s.p2(e + 1)
            h = s.enc(Fraction(3, 2) * _p2(e))
            pats = [(m - 1, "M_elem-ulp"), (m, "M_elem"), (m + 1, "M_elem+ulp"), (p, "one"),
                    (p + 1, "one+ulp"), (p1 - 1, "two-ulp"), (h, "one_half")]
            group, got = [], set()
            for i, (a, lab) in enumerate(pats):
                if a is None or not 0 < a < s.inf or a in got:
                    continue
                got.add(a)
                sg = s.sign if (e + i) % 4 == 3 else 0
                group.append(self._amax_block("S9", (lab, f"e={e}"), a | sg, (e, a), pos=e + 5 * i))
            if cap is not None and out and len(out) + len(group) > cap:
                continue
            out += group
        return out

    def gen_L1(self) -> list:
        s, B = self.s, self.B
        out = []
        ks = self.ks()
        for n in _L1_NVALID:
            if not 1 <= n < B:
                continue
            # (a) anchor at the last valid position, ties before it
            ties = self.pool("E2", 0)
            va = [ties[i % len(ties)] for i in range(n - 1)] + [self.anchor(0)]
            # (b) realistic values
            vb = self.r2_values(self.rng("L1", n), n, dist=n % 3)
            # (c) negative values incl. -0 and subnormal-ish at the low anchor scale
            k = ks[1] if len(ks) > 1 else ks[0]
            e1 = [b | s.sign for b in self.pool("E1", k)]
            vc = [e1[(i * 5) % len(e1)] for i in range(n)]
            vc[n // 2] = self.anchor(k) | s.sign
            for lab, v in (("ties_anchor_last", va), ("realistic", vb), ("negative_low_scale", vc)):
                out.append(self.case("L1", (lab, f"n_valid={n}"), v + [0] * (B - n), n_valid=n))
        return out

    # ---- random classes ---------------------------------------------------------------------
    def r1_table(self) -> list:
        s, el = self.s, self.el
        t = [s.min_exp, s.min_exp + 1, s.emin - 1, s.emin, s.emin + 1, -64, -1, 0, 1, 64,
             s.emax - 1, s.emax, el.emax - 127, el.emax - 128, el.emax, el.emax + 1]
        return [e for e in t if s.min_exp <= e <= s.emax]

    def r1_values(self, r: _Rng, base: int, n: int) -> list:
        s = self.s
        mb, mm = s.mbits, s.mmask
        out = []
        for _ in range(n):
            u = r.uniform(1)[0]
            e = base - (r.int(0, 4) if u < 0.8 else r.int(0, 24))
            kind, a, b = r.int(0, 10), r.int(0, mb), r.int(0, mb)
            m = (mm, 0, 1 << a, (1 << a) | (1 << b), (1 << a) - 1, mm ^ ((1 << a) - 1),
                 ((1 << a) - 1 + (mm ^ ((1 << b) - 1))) & mm)[kind] if kind < 7 else \
                int(r.raw(1)[0]) & mm
            v = 0 if r.int(0, 20) == 0 else s.native(e, m)
            out.append(v | (s.sign if r.int(0, 2) else 0))
        return out

    def gen_R1(self, n=None) -> list:
        s, B = self.s, self.B
        table = self.r1_table()
        if n is None:
            n = _R1_N if self.level <= 1 else 10 * _R1_N
        out = []
        for i in range(n):
            r = self.rng("R1", i)
            if r.int(0, 5) < 3:
                base = table[r.int(0, len(table))]
            else:
                base = r.int(s.min_exp, s.emax + 1)
            vals = self.r1_values(r, base, B)
            if r.int(0, 20) == 0:
                vals[r.int(0, B)] = (s.inf, s.inf | s.sign, *s.nans)[r.int(0, 2 + len(s.nans))]
            out.append(self.case("R1", (f"base={base}",), vals))
        return out

    def r2_values(self, r: _Rng, n: int, dist: int, outliers=()) -> list:
        """Realistic values rounded to the source: gaussian / student-t(3) / outlier channels,
        magnitude (1+u) * 2^[-10, 10)."""
        scale = (1.0 + r.uniform(1)[0]) * 2.0 ** r.int(-10, 10)
        x = r.student_t3(n) if dist == 1 else r.normal(n)
        x = x * scale
        for p in outliers:
            x[p] *= 50.0
        return _to_src(x, self.s)

    def gen_R2(self, n=None) -> list:
        if n is None:
            n = _R2_N if self.level <= 1 else 10 * _R2_N
        out, B = [], self.B
        labels = ("gaussian", "student_t3", "outlier_channels")
        for i in range(n):
            r = self.rng("R2", i)
            dist = i % 3
            chans = ()
            if dist == 2:
                rc = self.rng("R2", "channels", i // 9)
                chans = tuple(sorted(set(rc.ints(0, B, 3))))
            out.append(self.case("R2", (labels[dist],), self.r2_values(r, B, dist, chans)))
        return out

    # ---- level 2: cross products of element classes inside one block ------------------------
    def gen_cross(self) -> list:
        classes = ["E1", "E2", "E3"] + (["E4"] if self.s.name == "float32" else []) + \
            ([] if self.el.is_int else ["E5"]) + ["E6", "E7", "E8"]
        out, B = [], self.B
        for k in self.ks()[:2]:
            pools = {c: self.pool(c, k) for c in classes}
            for ia, a in enumerate(classes):
                for b in classes[ia + 1:]:
                    pa, pb = pools[a], pools[b]
                    if not pa or not pb:
                        continue
                    r = self.rng("cross", a, b, k)
                    ia_, ib_ = r.ints(0, len(pa), B - 1), r.ints(0, len(pb), B - 1)
                    vals = [pa[ia_[i]] if i % 2 == 0 else pb[ib_[i]] for i in range(B - 1)]
                    blk, _ = self.anchored(k, vals, len(out))
                    out.append(self.case(a, ("cross", b, f"k={k}"), blk))
            r = self.rng("cross", "all", k)
            allv = [v for c in classes for v in pools[c]]
            vals = [allv[j] for j in r.ints(0, len(allv), B - 1)]
            blk, _ = self.anchored(k, vals, len(out))
            out.append(self.case("E1", ("cross", *classes[1:], f"k={k}"), blk))
        return out


@lru_cache(maxsize=4096)
def _pool(element: str, src: str, cls: str, k: int) -> tuple:
    return tuple(_Ctx(element, src, 1, 32)._pool(cls, k))


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


_BLOCK_ORDER = ("E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E9", "E10", "E11",
                "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "L1", "R1", "R2")


def classes_for(element: str, src_dtype: str, level: int, block: int = 32) -> tuple:
    """Class ids block_cases produces for this combination (in output order)."""
    out = []
    for c in _BLOCK_ORDER:
        if c == "E4" and src_dtype != "float32":
            continue
        if c == "E5" and element == "int8":
            continue
        if c == "E11" and (level < 3 or src_dtype == "float32"):
            continue
        if c == "L1" and not any(1 <= n < block for n in _L1_NVALID):
            continue
        out.append(c)
    return tuple(out)


def _check_args(src_dtype, level):
    if src_dtype not in SRC_DTYPES:
        raise ValueError(f"src_dtype {src_dtype!r} is not one of {SRC_DTYPES}")
    if not isinstance(level, (int, np.integer)) or not 0 <= level <= 3:
        raise ValueError(f"level must be 0, 1, 2 or 3, got {level!r}")


def block_cases(element: str, src_dtype: str, level: int, block: int = 32) -> list:
    """MX element/block coverage cases for one element format and source dtype.

    Level 0: exactly one case per applicable class; 1: lean full enumerations; 2: level 1 plus
    10x more R1/R2, full exponent sweeps (S1, S2, S3, S9), all anchor scales and cross products
    of element classes inside one block; 3: level 2 plus the exhaustive 16-bit sweep E11.
    """
    if element not in ELEMENT_FORMATS:
        raise ValueError(f"unknown element format {element!r}; known: {', '.join(ELEMENTS)}")
    _check_args(src_dtype, level)
    if not isinstance(block, (int, np.integer)) or block < 2:
        raise ValueError(f"block must be an int >= 2, got {block!r}")
    ctx = _Ctx(element, src_dtype, int(level), int(block))
    gens = {
        "E1": lambda: ctx.gen_pool_class("E1"), "E2": lambda: ctx.gen_pool_class("E2", ("tie",)),
        "E3": lambda: ctx.gen_pool_class("E3", ("tie_neighbour",)),
        "E4": lambda: ctx.gen_pool_class("E4", ("double_rounding",)),
        "E5": lambda: ctx.gen_pool_class("E5"), "E6": lambda: ctx.gen_pool_class("E6", ("E7",)),
        "E7": ctx.gen_E7, "E8": ctx.gen_E8, "E9": ctx.gen_E9, "E10": ctx.gen_E10,
        "E11": ctx.gen_E11, "S1": ctx.gen_S1, "S2": ctx.gen_S2, "S3": ctx.gen_S3,
        "S4": ctx.gen_S4, "S5": ctx.gen_S5, "S6": ctx.gen_S6, "S7": ctx.gen_S7,
        "S8": ctx.gen_S8, "S9": ctx.gen_S9, "L1": ctx.gen_L1, "R1": ctx.gen_R1,
        "R2": ctx.gen_R2,
    }
    out = []
    for c in classes_for(element, src_dtype, level, block):
        if level == 0:
            out += _first_case(ctx, c)
            continue
        out += gens[c]()
    if level >= 2:
        out += ctx.gen_cross()
    return out


def _first_case(ctx: _Ctx, c: str) -> list:
    """Level 0: the first level-1 case of the class (cheap paths for the big generators)."""
    if c in ("R1", "R2"):
        return (ctx.gen_R1(1) if c == "R1" else ctx.gen_R2(1))[:1]
    tags = {"E2": ("tie",), "E3": ("tie_neighbour",), "E4": ("double_rounding",), "E6": ("E7",)}
    if c in ("E1", "E2", "E3", "E4", "E5", "E6"):
        got = ctx.gen_pool_class(c, tags.get(c, ()))
    else:
        got = getattr(ctx, f"gen_{c}")()
    return got[:1]


# ---------------------------------------------------------------------------------------------
# NVFP4 tensor cases: 4 blocks of 16 (64 elements), E2M1 elements, E4M3 block scales,
# fp32 tensor scale T = global_amax / 2688
# ---------------------------------------------------------------------------------------------
_NV_B, _NV_N = 16, 64


def _rne_codes(mags: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Index of the RNE (ties to the even index), saturating rounding of v >= 0 onto the
    sorted float64 grid mags (every value involved is exact in float64)."""
    i = np.clip(np.searchsorted(mags, v, side="right") - 1, 0, len(mags) - 2)
    d1, d2 = v - mags[i], mags[i + 1] - v
    up = (d2 < d1) | ((d1 == d2) & (i % 2 == 1))
    return np.where(v >= mags[-1], len(mags) - 1, i + up)


@lru_cache(maxsize=None)
def _op_order_pairs(src_dtype: str) -> tuple:
    """(global_amax, block_amaxes) source bit patterns for which the exact, TE and torchao
    NVFP4 block-scale op orders (docs/semantics.md) give different E4M3 block scales.
    All arithmetic is single IEEE operations (fp32 where the orders use fp32; float64 for the
    exact quotient, whose rounding cannot move it across an E4M3 tie)."""
    s = _SRCS[src_dtype]
    e4 = np.array([float(m) for m in _elem("e4m3").mags])
    f32 = np.float32
    out = []
    for g in (29.5, 3.0, 100.0, 1000.0, 0.3125, 13.0, 0.01171875, 40000.0):
        gb = s.enc(Fraction(g))
        if gb is None:
            continue
        T = f32(g) / f32(2688)
        c6 = f32(f32(f32(2688) / f32(g)) * (f32(1) / f32(6)))
        e = _ilog2(Fraction(g))
        b = np.concatenate([(128 + np.arange(128)) * 2.0 ** (eb - 7) for eb in range(e - 5, e + 1)])
        b = b[b <= g]
        if s.name == "float16":
            b = b[(b.astype(np.float16).astype(np.float64) == b) & (b >= 2.0 ** -14)]
        b32 = b.astype(np.float32)
        ex = _rne_codes(e4, b / (6.0 * float(T)))
        te = _rne_codes(e4, (b32 * c6).astype(np.float64))
        tao = _rne_codes(e4, np.clip(((b32 / f32(6)) / T).astype(np.float64), 2.0 ** -6, 448.0))
        d_te, d_tao = ex != te, (ex != tao) & (ex == te)
        pick = list(np.flatnonzero(d_te)[:2]) + list(np.flatnonzero(d_tao)[:1])
        if pick:
            out.append((gb, tuple(s.enc(Fraction(float(b[i]))) for i in pick)))
    return tuple(out)


class _NvCtx(_Ctx):
    def __init__(self, src: str, level: int):
        super().__init__("e2m1", src, level, _NV_B)
        self.element = "nvfp4"
        self.e4 = _elem("e4m3")

    def tcase(self, cls, tags, blocks) -> Case:
        vals = [v for b in blocks for v in b]
        arr = np.array(vals, dtype=self.s.dtype)
        assert arr.shape == (_NV_N,), (cls, arr.shape)
        return Case(cls, tuple(tags), arr, _NV_N)

    def js(self) -> list:
        return [0, -8] if self.s.name == "float16" else [0, -20, 40]

    def scaled_block(self, S: Fraction, T: Fraction, vals: list, pos: int):
        """Anchor 6*S*T plus vals (element values times S*T), 16 elements; None if the source
        cannot hold one of them."""
        s = self.s
        a = s.enc(6 * S * T)
        if a is None:
            return None
        body = []
        for m, neg in vals:
            b = s.enc(m * S * T, neg)
            if b is None:
                return None
            body.append(b)
        body = [body[i % len(body)] for i in range(_NV_B - 1)]
        pos %= _NV_B
        return body[:pos] + [a] + body[pos:]

    def code_tensors(self, cls, vals, s_sets) -> list:
        out = []
        for j in self.js():
            T = _p2(j)
            for si, S3 in enumerate(s_sets):
                blocks = []
                for bi, S in enumerate((Fraction(448),) + S3):
                    blk = self.scaled_block(S, T, vals, bi * 5 + si)
                    if blk is None:
                        break
                    blocks.append(blk)
                if len(blocks) == 4:
                    out.append(self.tcase(cls, (f"T=2^{j}", "S=" + ",".join(
                        str(x) for x in S3)), blocks))
        return out

    def s_sets(self) -> list:
        F = Fraction
        sets = [(F(1), F(9, 8), F(1, 64)), (F(3, 512), F(240), F(13, 16))]
        if self.level >= 2:
            r = self.rng("nv", "ssets")
            mags = self.e4.mags
            for _ in range(12):
                sets.append(tuple(mags[i] for i in r.ints(1, len(mags), 3)))
        return sets

    def gen_E1(self):
        vals = [(m, n) for m in self.el.mags for n in (False, True) if (m, n) != (self.el.M, False)]
        return self.code_tensors("E1", vals, self.s_sets())

    def gen_E2(self):
        vals = [(m, n) for m in self.el.mids for n in (False, True)] + [(self.el.M, True)]
        return [Case(c.cls, ("tie",) + c.tags, c.src, c.n_valid)
                for c in self.code_tensors("E2", vals, self.s_sets())]

    def gen_S5(self):
        """Tiny block amax: E4M3 subnormal block scales, the 2^-6 (0.09375 * T) boundary,
        block scales rounding to 0."""
        s, F = self.s, Fraction
        tiny = [F(1, 64), None, F(7, 512), F(1, 512), F(1, 1024), F(3, 2048), F(1, 2048),
                F(3, 1024), F(5, 512)]
        out = []
        for j in self.js()[:2] if self.level <= 1 else self.js():
            T = _p2(j)
            amaxes = []
            for t in tiny:
                if t is None:      # just below 0.09375 * T
                    b = s.below(6 * F(1, 64) * T)
                else:
                    b = s.enc(6 * t * T)
                if b is not None and b not in amaxes:
                    amaxes.append(b)
            head = self.scaled_block(F(448), T, [(m, n) for m in self.el.mags
                                                 for n in (False, True)][1:], 0)
            if head is None:
                continue
            for gi in range(0, len(amaxes), 3):
                blocks = [head]
                for bi, a in enumerate(amaxes[gi:gi + 3]):
                    am = s.dec(a)
                    body = [s.grid(am * m / 6, "floor") if m else 0 for m in self.el.mags]
                    body = [(b or 0) | (s.sign if i % 2 else 0) for i, b in enumerate(body)]
                    body = [body[i % len(body)] for i in range(_NV_B - 1)]
                    p = (bi * 7 + 3) % _NV_B
                    blocks.append(body[:p] + [a] + body[p:])
                while len(blocks) < 4:
                    blocks.append(blocks[-1])
                out.append(self.tcase("S5", ("tiny_block_amax", f"T=2^{j}"), blocks))
        return out

    def gen_S3(self):
        """Op-order vectors: the canonical global_amax 29.5 / block_amax 11.0625 (exact
        0x72 vs TE 0x73) and searched (global, block) pairs where the orders differ."""
        s, F = self.s, Fraction
        out = []
        r = self.rng("nv", "oporder")
        g, b = s.enc(F(59, 2)), s.enc(F(177, 16))
        sm = [s.enc(F(1, 2))] * (_NV_B - 1)
        blocks = [[g] + self.fill(r, 2, _NV_B - 1), [b] + sm,
                  self.fill(r, 1, _NV_B), self.fill(r, -3, _NV_B)]
        out.append(self.tcase("S3", ("op_order", "g=29.5", "b=11.0625"), blocks))
        pairs = _op_order_pairs(self.s.name) if self.level >= 1 else ()
        lim = 6 if self.level <= 1 else len(pairs)
        for gb, bs in pairs[:lim]:
            blocks = [self.with_amax(gb, 0, self.fill(r, s.exp_of(gb), _NV_B - 1))]
            for bb in bs:
                blocks.append(self.with_amax(bb, r.int(0, _NV_B),
                                             self.fill(r, s.exp_of(bb), _NV_B - 1)))
            while len(blocks) < 4:
                blocks.append(self.fill(r, s.exp_of(gb) - 6, _NV_B))
            out.append(self.tcase("S3", ("op_order", "searched"), blocks))
        return out

    def gen_S6(self):
        s = self.s
        r = self.rng("nv", "zeros")
        z, nz = [0] * _NV_B, [s.sign] * _NV_B
        some = self.fill(r, 3, _NV_B, zero_frac=0)
        return [self.tcase("S6", ("all_pos_zero",), [z] * 4),
                self.tcase("S6", ("all_neg_zero",), [nz] * 4),
                self.tcase("S6", ("mixed_zero",),
                           [z, nz, [s.sign * (i % 2) for i in range(_NV_B)], z]),
                self.tcase("S6", ("one_zero_block",), [some, z, self.fill(r, 0, _NV_B, zero_frac=0),
                                                        nz])]

    def gen_S7(self):
        s = self.s
        out = []
        for sp, lab in ((s.nans[0], "nan"), (s.inf, "+inf"), (s.inf | s.sign, "-inf"),
                        (s.nans[2], "snan")):
            for pos in (0, _NV_B + 7, _NV_N - 1):
                if lab == "snan" and pos != 2 * _NV_B and pos != 0:
                    continue
                r = self.rng("nv", "S7", lab, pos)
                vals = [v for bi in range(4) for v in self.fill(r, 4 - 3 * bi, _NV_B)]
                vals[pos] = sp
                out.append(self.tcase("S7", (lab, f"pos={pos}"),
                                      [vals[i:i + _NV_B] for i in range(0, _NV_N, _NV_B)]))
        return out

    def gen_R1(self):
        s = self.s
        n = 16 if self.level <= 1 else 160
        table = [e for e in (s.min_exp + 20, s.emin, s.emin + 10, -64, -1, 0, 1, 8, 64,
                             s.emax - 1, s.emax) if s.min_exp <= e <= s.emax]
        out = []
        for i in range(n):
            r = self.rng("nv", "R1", i)
            b0 = table[r.int(0, len(table))] if r.int(0, 5) < 3 else r.int(s.min_exp, s.emax + 1)
            blocks = [self.r1_values(r, b0 if bi == 0 else b0 - r.int(0, 24), _NV_B)
                      for bi in range(4)]
            if r.int(0, 20) == 0:
                blocks[r.int(0, 4)][r.int(0, _NV_B)] = (s.inf, *s.nans)[r.int(0, 1 + len(s.nans))]
            out.append(self.tcase("R1", (f"base={b0}",), blocks))
        return out

    def gen_R2(self):
        n = 8 if self.level <= 1 else 80
        labels = ("gaussian", "student_t3", "outlier_channels")
        out = []
        for i in range(n):
            r = self.rng("nv", "R2", i)
            dist = i % 3
            chans = tuple(sorted(set(r.ints(0, _NV_B, 2)))) if dist == 2 else ()
            blocks = [self.r2_values(r, _NV_B, dist, chans) for _ in range(4)]
            out.append(self.tcase("R2", (labels[dist],), blocks))
        return out


_NV_ORDER = ("E1", "E2", "S3", "S5", "S6", "S7", "R1", "R2")


def nvfp4_cases(src_dtype: str, level: int) -> list:
    """NVFP4 tensor cases: each Case.src is 64 elements (4 blocks of 16), n_valid = 64."""
    _check_args(src_dtype, level)
    ctx = _NvCtx(src_dtype, int(level))
    out = []
    for c in _NV_ORDER:
        got = getattr(ctx, f"gen_{c}")()
        out += got[:1] if level == 0 else got
    return out
