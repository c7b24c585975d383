"""Exact three-way decomposition of a block quantizer's error: scale bias, deadzone, grid noise.

For one block (32 elements for MX, 16 for NVFP4) with finite amax ``A > 0``, element max
``M`` (6, 7.5, 28, 448, 57344, 127/64) and smallest positive element value ``q_min``:

* ideal real scale ``s* = A / M``; actual scale ``s`` (E8M0 ``2^e``; NVFP4 ``S * T``);
* ``Q_s(v)`` is what the profile's quantizer actually returns (the exact dequantized value);
  ``Q_{s*}(v) = s* * R(|v| / s*)`` with ``R`` the profile's element rounding on the element
  grid (RNE by default). ``|v| <= A`` so the ideal quantizer never clips;
* deadzone ``D = {i : v_i != 0 and R(|v_i| / s*) = 0}``, i.e. ``|v_i| < s* q_min / 2``
  (E2M1: ``A / 24``), plus ``|v_i| = s* q_min / 2`` when that tie rounds down (RNE, ties_zero).

Then for every finite element (``[.]`` is 1 when true)::

    e_scale_i = Q_s(v_i) - Q_{s*}(v_i)                 (for i in D this is Q_s(v_i))
    e_dead_i  = -v_i * [i in D]
    e_grid_i  = (Q_{s*}(v_i) - v_i) * [i not in D]
    e_scale_i + e_dead_i + e_grid_i = Q_s(v_i) - v_i   (exactly)

The ideal values are rationals with denominator ``M_odd`` (the odd part of M's numerator:
3, 15, 7, 7, 7, 127; NVFP4 3). The ``exact_*`` fields hold ``M_odd * component`` as float64,
which is exact (docs/decompose.md proves it; every subtraction is also checked at run time
with an error-free TwoSum). The plain fields are ``exact / M_odd`` rounded once.
NaN/Inf inputs and elements whose quantized value is not finite (poisoned blocks, scale NaN,
non-saturating overflow) are ``special``: all three components are 0 there and statistics
leave them out. docs/decompose.md has the equations, the proof and the statistics.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numba as nb
import numpy as np

from ._kernels import (
    _JIT,
    F32_INF,
    bit_length,
    block_amax,
    normalize_f32,
    round_magnitude,
)
from .errors import MXRefError, ProfileConflictError
from .formats import E4M3, P_MAXCODE, BlockFormat, get_format
from .inputs import as_f32_bits, as_shape, check_int
from .profiles import ROUNDINGS, Profile, get_profile
from .quantize import MXTensor, _from_rows, _normalize_axis, _to_rows, quantize

__all__ = [
    "Decomposition", "decompose", "decompose_quantized", "compare_scale_rules", "synthetic",
    "grid_facts", "GridFacts", "DISTRIBUTIONS", "SCALE_RULE_CHOICES",
    "EmptyTensorError", "NoFiniteValuesError", "UnknownDistributionError",
    "UnknownScaleRuleError", "ExactnessError",
]

SCALE_RULE_CHOICES = ("floor", "rceil", "ceil", "even", "round_down", "ideal")
DISTRIBUTIONS = ("gaussian", "laplace", "student-t3", "uniform", "outlier")
OUTLIER_RATE = 1e-3      # "outlier": each element independently, with this probability ...
OUTLIER_GAIN = 20.0      # ... is multiplied by this factor


# ---- typed errors -------------------------------------------------------------------------
class EmptyTensorError(MXRefError, ValueError):
    """A tensor with no elements: there is nothing to decompose."""


class NoFiniteValuesError(MXRefError, ValueError):
    """A tensor whose elements are all NaN or Inf: every element would be `special`."""


class UnknownDistributionError(MXRefError, ValueError):
    """A synthetic distribution name that is not in DISTRIBUTIONS."""


class UnknownScaleRuleError(MXRefError, ValueError):
    """A scale rule that is not in SCALE_RULE_CHOICES."""


class ExactnessError(MXRefError, ArithmeticError):
    """A float64 operation that docs/decompose.md proves exact was not (an internal bug)."""


# ---- exact float64 constants --------------------------------------------------------------
def _pow2(k: int) -> float:
    """2^k as a float64 (exact for -1074 <= k <= 1023)."""
    return float(Fraction(2) ** k)


_E8M0_VALUE = np.array([_pow2(b - 127) for b in range(255)] + [np.nan])   # byte -> 2^(b-127)


@dataclass(frozen=True)
class GridFacts:
    """Exact constants of an element format that the decomposition needs.

    ``max_normal = m_odd * 2^e_m`` with ``m_odd`` odd; ``q_min`` the smallest positive value.
    """

    max_normal: float
    m_odd: int
    e_m: int
    q_min: float

    @property
    def denominator(self) -> int:
        return self.m_odd

    @property
    def deadzone_fraction_of_ideal_scale(self) -> float:
        """The deadzone threshold in units of s*: q_min / 2 (E2M1: 1/4, MXINT8: 1/128)."""
        return self.q_min / 2


def grid_facts(fmt) -> GridFacts:
    el = get_format(fmt).element
    m = Fraction(el.max_normal)
    num, den = m.numerator, m.denominator          # den is a power of two
    tz = (num & -num).bit_length() - 1
    return GridFacts(max_normal=float(m), m_odd=num >> tz, e_m=tz - (den.bit_length() - 1),
                     q_min=float(Fraction(el.min_subnormal)))


# ---- the ideal quantizer, in the integer domain -------------------------------------------
@nb.njit(**_JIT)
def _finite_block_amax(bits, block, flush, amax):
    """amax[r, j] = fp32 bits of max |x| over the finite elements of block j (after flush)."""
    rows, n = bits.shape
    for r in range(rows):
        for j in range(amax.shape[1]):
            lo = j * block
            m, _, _ = block_amax(bits, r, lo, min(lo + block, n), flush)
            amax[r, j] = m


@nb.njit(**_JIT)
def _ideal_codes(bits, amax, block, fp, mode, flush, m_odd, e_m, skip, use_skip, codes):
    """Magnitude code of R(|x| * M / A) on the element grid, one exact rounding.

    With |x| = sx 2^(ex-23), A = sa 2^(ea-23) (24-bit significands) and M = m_odd 2^e_m,
    |x| M / A = (sx * m_odd * 2^30 / sa) * 2^(ex - ea + e_m - 30): an integer quotient of at
    least 30 bits plus a sticky bit, rounded once by round_magnitude (as the NVFP4 exact path).
    0 for zeros, non-finite or flushed elements and all-zero blocks.
    """
    rows, n = bits.shape
    maxcode = fp[P_MAXCODE]
    for r in range(rows):
        for i in range(n):
            codes[r, i] = 0
            if use_skip and skip[r, i]:
                continue
            big_a = amax[r, i // block]
            a = np.int64(bits[r, i] & np.uint32(0x7FFFFFFF))
            if big_a == 0 or a == 0 or a >= F32_INF or (flush and a < 0x800000):
                continue
            sx, ex = normalize_f32(a)
            sa, ea = normalize_f32(big_a)
            num = (sx * m_odd) << 30
            quo = num // sa
            sticky = quo * sa != num
            code, ovf = round_magnitude(quo, bit_length(quo) - 1, ex - ea + e_m - 30, sticky,
                                        fp, mode, 0)
            codes[r, i] = maxcode if ovf else code   # ovf cannot happen: |x| <= A


def finite_block_amax(bits2: np.ndarray, block: int, flush: bool) -> np.ndarray:
    """(rows, nblk) int64 fp32 bits of each block's finite amax."""
    nblk = -(-bits2.shape[1] // block)
    out = np.zeros((bits2.shape[0], nblk), dtype=np.int64)
    if bits2.size:
        _finite_block_amax(bits2, block, flush, out)
    return out


def ideal_scaled(bits2, amax2, block, fmt, prof, skip2=None):
    """(M_odd * Q_{s*}(x) as exact float64, ideal magnitude codes), both (rows, n)."""
    el = get_format(fmt).element
    g = grid_facts(fmt)
    codes = np.zeros(bits2.shape, dtype=np.int64)
    if bits2.size:
        use_skip = skip2 is not None
        skip = skip2 if use_skip else np.zeros((1, 1), dtype=np.bool_)
        _ideal_codes(bits2, amax2, block, el.kernel_params(), ROUNDINGS.index(prof.rounding),
                     prof.flush_fp32_subnormals, g.m_odd, g.e_m, skip, use_skip, codes)
    value = el.value_table[codes]                      # n * q on the grid, exact
    amax_f = np.repeat(amax2.astype(np.uint32).view(np.float32).astype(np.float64), block,
                       axis=1)[:, :bits2.shape[1]]
    # M_odd Q_{s*}(x) = A * (n q) * 2^-e_m: <= 24 + 8 significant bits, exact (docs proof 1)
    mag = amax_f * (value * _pow2(-g.e_m))
    neg = (bits2 >> np.uint32(31)).astype(bool)
    return np.where(neg, -mag, mag), codes


def exact_difference(a: np.ndarray, b: np.ndarray, what: str) -> np.ndarray:
    """a - b in float64, checked exact with Knuth's TwoSum (the rounding error is computed
    error-free and must be 0). a and b must be finite."""
    d = a - b
    bp = d - a
    err = (a - (d - bp)) + (-b - bp)
    if np.any(err != 0):
        i = int(np.flatnonzero(err != 0)[0])
        raise ExactnessError(
            f"{what}: float64 difference not exact at flat index {i}: "
            f"{a.flat[i]!r} - {b.flat[i]!r} (rounding error {err.flat[i]!r})")
    return d


# ---- result -------------------------------------------------------------------------------
def _blocked(a2: np.ndarray, block: int) -> np.ndarray:
    """(rows, n) -> (rows, nblk, block), zero padded (the padding adds nothing to any sum)."""
    rows, n = a2.shape
    nblk = -(-n // block)
    if nblk * block != n:
        a2 = np.concatenate([a2, np.zeros((rows, nblk * block - n), dtype=a2.dtype)], axis=1)
    return a2.reshape(rows, nblk, block)


def _ratio_se(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """Ratio of sums sum(num)/sum(den) over blocks and its sampling standard error
    (ratio-estimator linearization, blocks taken as independent draws)."""
    tot = float(den.sum())
    m = num.size
    if m == 0 or tot == 0:
        return float("nan"), float("nan")
    r = float(num.sum()) / tot
    if m < 2:
        return r, float("nan")
    resid = num - r * den
    return r, (m / (m - 1) * float((resid * resid).sum())) ** 0.5 / abs(tot)


def _mean_se(v: np.ndarray) -> tuple[float, float]:
    if v.size == 0:
        return float("nan"), float("nan")
    mean = float(v.mean())
    if v.size < 2:
        return mean, float("nan")
    return mean, (float(v.var(ddof=1)) / v.size) ** 0.5


@dataclass
class Decomposition:
    """Exact decomposition of ``q - x`` into ``scale + dead + grid`` (see the module doc).

    Element arrays have x's shape; per-block arrays (``s``, ``s_ideal``, ``s_ratio``) have
    x's shape with ``axis`` reduced to the number of blocks. ``exact_*`` are
    ``denominator * component`` as exact float64; ``scale``/``dead``/``grid`` are those
    divided by ``denominator`` (rounded once). ``q`` is the dequantized value (exact, except
    for ``scale_rule='ideal'`` where it is ``Q_{s*}`` rounded once).
    """

    x: np.ndarray
    q: np.ndarray
    scale: np.ndarray
    dead: np.ndarray
    grid: np.ndarray
    exact_scale: np.ndarray
    exact_dead: np.ndarray
    exact_grid: np.ndarray
    denominator: int
    deadzone: np.ndarray
    special: np.ndarray
    saturated: np.ndarray
    zeroed: np.ndarray
    s: np.ndarray
    s_ideal: np.ndarray
    s_ratio: np.ndarray
    fmt: BlockFormat
    profile: Profile
    scale_rule: str
    axis: int
    block_size: int
    passthrough: np.ndarray | None = None
    correction: str | None = None
    source_dtype: str = "float32"
    meta: dict = field(default_factory=dict)

    @property
    def exact_total(self) -> np.ndarray:
        """denominator * (Q_s(x) - x), summed as exact_scale + (exact_dead + exact_grid)."""
        return self.exact_scale + (self.exact_dead + self.exact_grid)

    @property
    def error(self) -> np.ndarray:
        """Q_s(x) - x rounded once to float64 (0 at special elements)."""
        return self.exact_total / self.denominator

    def _block_arrays(self) -> dict:
        ax, bs = self.axis, self.block_size
        ok = ~self.special

        def blk(a):
            return _blocked(_to_rows(a, ax), bs)

        sc, dd, gr = blk(self.scale), blk(self.dead), blk(self.grid)
        e = blk(self.error)
        x = blk(np.where(ok, self.x, 0.0))
        q = blk(np.where(ok, self.q, 0.0))
        pt = self.passthrough if self.passthrough is not None else np.zeros_like(ok)

        def count(mask):
            return blk(mask).sum(axis=-1).astype(np.int64)

        out = {
            "n_elements": count(ok), "n_special": count(self.special),
            "n_zeroed": count(self.zeroed), "n_deadzone": count(self.deadzone),
            "n_saturated": count(self.saturated), "n_passthrough": count(pt & ok),
            "energy_scale": (sc * sc).sum(-1), "energy_dead": (dd * dd).sum(-1),
            "energy_grid": (gr * gr).sum(-1), "energy_cross": 2 * (sc * (dd + gr)).sum(-1),
            "energy_error": (e * e).sum(-1), "energy_signal": (x * x).sum(-1),
            "dot_qx": (q * x).sum(-1), "dot_scale_x": (sc * x).sum(-1),
            "dot_dead_x": (dd * x).sum(-1), "dot_grid_x": (gr * x).sum(-1),
            "sum_scale": sc.sum(-1), "sum_dead": dd.sum(-1), "sum_grid": gr.sum(-1),
            "sum_error": e.sum(-1),
            "s": _to_rows(self.s, ax), "s_ideal": _to_rows(self.s_ideal, ax),
            "s_ratio": _to_rows(self.s_ratio, ax),
        }
        return out

    def block_stats(self) -> dict:
        """Per-block arrays (x's shape with the block axis reduced): element counts
        (n_elements (non-special), n_special, n_zeroed, n_deadzone, n_saturated,
        n_passthrough), energies sum(e_c^2) of each component, the cross term
        2 sum(e_scale (e_dead + e_grid)), error and signal energies, dot_qx = <q, x>,
        dot_c_x = <e_c, x>, signed sums of each component, and s, s_ideal, s_ratio."""
        b = self._block_arrays()
        shape = np.moveaxis(self.s, self.axis, -1).shape
        return {k: _from_rows(v, shape, self.axis) for k, v in b.items()}

    def stats(self) -> dict:
        """Tensor statistics over non-special elements, with sampling standard errors.

        energy_share[c] = sum e_c^2 / sum e^2 (c = scale, dead, grid; ``cross`` =
        2 sum e_scale (e_dead + e_grid) / sum e^2, so the four add to 1); mean[c] = sum e_c / N;
        gain = <q, x> / ||x||^2 and gain_contrib[c] = <e_c, x> / ||x||^2 (the three add to
        gain - 1: the systematic, bias-like part of each component); zeroed, deadzone,
        saturated and passthrough fractions of the N non-special elements; mean_s_ratio =
        mean over blocks with A > 0 of s/s*; error_to_signal = ||e||^2 / ||x||^2. ``se``
        holds the standard errors, treating blocks as independent draws (ratio estimator for
        ratios of sums).
        """
        b = {k: v.reshape(-1) for k, v in self._block_arrays().items()}
        used = b["n_elements"] > 0
        u = {k: v[used] for k, v in b.items()}
        n = u["n_elements"].astype(np.float64)
        ee = u["energy_error"]
        st, se = {"energy_share": {}, "mean": {}}, {"energy_share": {}, "mean": {}}
        for c in ("scale", "dead", "grid", "cross"):
            st["energy_share"][c], se["energy_share"][c] = _ratio_se(u[f"energy_{c}"], ee)
        for c in ("scale", "dead", "grid", "error"):
            st["mean"][c], se["mean"][c] = _ratio_se(u[f"sum_{c}"], n)
        st["gain"], se["gain"] = _ratio_se(u["dot_qx"], u["energy_signal"])
        st["gain_contrib"], se["gain_contrib"] = {}, {}
        for c in ("scale", "dead", "grid"):
            st["gain_contrib"][c], se["gain_contrib"][c] = _ratio_se(u[f"dot_{c}_x"],
                                                                     u["energy_signal"])
        st["error_to_signal"], se["error_to_signal"] = _ratio_se(ee, u["energy_signal"])
        for c in ("zeroed", "deadzone", "saturated", "passthrough"):
            st[f"{c}_fraction"], se[f"{c}_fraction"] = _ratio_se(u[f"n_{c}"].astype(float), n)
        ratio = u["s_ratio"][np.isfinite(u["s_ratio"])]
        st["mean_s_ratio"], se["mean_s_ratio"] = _mean_se(ratio)
        head = {
            "format": self.fmt.name, "profile": self.profile.name, "scale_rule": self.scale_rule,
            "correction": self.correction, "axis": self.axis, "block_size": self.block_size,
            "denominator": self.denominator,
            "n_elements": int(b["n_elements"].sum()), "n_special": int(b["n_special"].sum()),
            "n_blocks": int(b["n_elements"].size), "n_blocks_used": int(used.sum()),
            "n_blocks_ratio": int(ratio.size),
        }
        return {**head, **st, "se": se}


# ---- assembling a decomposition from a quantizer's output ---------------------------------
def _block_flags(bits2: np.ndarray, block: int):
    a = _blocked(bits2 & np.uint32(0x7FFFFFFF), block)
    return (a > np.uint32(F32_INF)).any(-1), (a == np.uint32(F32_INF)).any(-1)


def decompose_quantized(bits2, moved_shape, ax, fmt, prof, block, *, q2, s2, sdiv2=None,
                        saturated2=None, passthrough2=None, ref_amax2=None, scale_rule="profile",
                        correction=None, source_dtype="float32", meta=None) -> Decomposition:
    """Build a Decomposition from any block quantizer's output, in the (rows, n) layout.

    bits2: fp32 input bits; q2: the exact dequantized output Q_s(x) (float64; ignored where
    ``scale_rule == 'ideal'``, pass None); s2 (rows, nblk): the decode scale of each block;
    sdiv2: the divisor the element rounding saw (default s2; ``saturated`` is
    ``|x| > M * sdiv``) or saturated2: the clip mask itself; passthrough2: elements the
    quantizer kept outside the block format (their own rounding is their ``grid`` component;
    no scale or deadzone part); ref_amax2:
    the fp32-bits amax defining s* per block (default: the finite amax of bits2).
    """
    fmt = get_format(fmt)
    g = grid_facts(fmt)
    dd = float(g.denominator)
    flush = prof.flush_fp32_subnormals
    amax2 = finite_block_amax(bits2, block, flush) if ref_amax2 is None else ref_amax2
    n = bits2.shape[1]
    pt = np.zeros(bits2.shape, dtype=bool) if passthrough2 is None else passthrough2
    dq_star, codes = ideal_scaled(bits2, amax2, block, fmt, prof, pt if passthrough2 is not None
                                  else None)
    with np.errstate(invalid="ignore"):      # a signaling NaN input is quieted, silently
        x2 = bits2.view(np.float32).astype(np.float64)
    ideal = scale_rule == "ideal"
    if ideal:
        has_nan, has_inf = _block_flags(bits2, block)
        poisoned = (has_nan & (prof.nan_in_block == "poison")) | \
            (has_inf & (prof.inf_in_block == "poison"))
        special = ~np.isfinite(x2) | np.repeat(poisoned, block, axis=1)[:, :n]
        q2 = np.where(special, np.nan, dq_star / dd)
    else:
        special = ~np.isfinite(x2) | ~np.isfinite(q2)
    ok = ~special
    xs = np.where(ok, x2, 0.0)
    dx = xs * dd                                     # <= 24 + 7 bits: exact
    dq = dq_star if ideal else np.where(ok, q2, 0.0) * dd   # <= 32 + 7 bits: exact
    dq = np.where(ok, dq, 0.0)
    dqs = np.where(ok & ~pt, dq_star, dq)            # passthrough: its own value is the reference
    dead = ok & ~pt & (xs != 0) & (codes == 0)
    ex_scale = exact_difference(dq, dqs, "M_odd*(Q_s - Q_ideal)")
    ex_dead = np.where(dead, -dx, 0.0)
    ex_grid = np.where(dead, 0.0, exact_difference(dqs, dx, "M_odd*(Q_ideal - x)"))
    s_blk = np.repeat(s2 if sdiv2 is None else sdiv2, block, axis=1)[:, :n]
    with np.errstate(invalid="ignore"):
        saturated = ok & ~pt & (np.abs(xs) > g.max_normal * s_blk)   # M * sdiv: exact
    if saturated2 is not None:
        saturated = ok & ~pt & saturated2
    if ideal:
        saturated[:] = False                         # |x| <= A = M s*: the ideal never clips
    zeroed = ok & (xs != 0) & (q2 == 0)
    amax_f = amax2.astype(np.uint32).view(np.float32).astype(np.float64)
    s_ideal2 = amax_f / g.max_normal                 # rounded once
    with np.errstate(divide="ignore", invalid="ignore"):
        s_ratio2 = np.where(amax_f > 0, (s2 * g.max_normal) / amax_f, np.nan)   # s*M exact
    if ideal:
        s2 = s_ideal2
        s_ratio2 = np.where(amax_f > 0, 1.0, np.nan)

    def back(a2):
        return _from_rows(a2, moved_shape, ax)

    scale_shape = tuple(moved_shape[:-1]) + (amax2.shape[1],)

    def back_blk(a2):
        return _from_rows(a2, scale_shape, ax)

    return Decomposition(
        x=back(x2), q=back(q2),
        scale=back(ex_scale / dd), dead=back(ex_dead / dd), grid=back(ex_grid / dd),
        exact_scale=back(ex_scale), exact_dead=back(ex_dead), exact_grid=back(ex_grid),
        denominator=g.denominator, deadzone=back(dead), special=back(special),
        saturated=back(saturated), zeroed=back(zeroed),
        s=back_blk(s2), s_ideal=back_blk(s_ideal2), s_ratio=back_blk(s_ratio2),
        fmt=fmt, profile=prof, scale_rule=scale_rule, axis=ax, block_size=block,
        passthrough=back(pt), correction=correction, source_dtype=source_dtype,
        meta=dict(meta or {}))


def mx_scales(mx: MXTensor):
    """(decode scale s, element divisor) per block, float64 (rows, nblk), from an MXTensor.

    MX: s = 2^(byte - 127) (byte 0xFF -> NaN); the divisor differs only for byte 0x00, where
    the profile's zero_scale_elem_exp applies. NVFP4: s = S * T (exact, 28 bits)."""
    s2 = _to_rows(mx.scales, mx.axis)
    if mx.fmt.is_nvfp4:
        s = E4M3.value_table[s2] * float(np.float32(mx.tensor_scale))
        return s, s
    s = _E8M0_VALUE[s2]
    sdiv = np.where(s2 == 0, _pow2(mx.profile.zero_scale_elem_exp), s)
    return s, sdiv


def mx_exact_values(mx: MXTensor) -> np.ndarray:
    """Exact dequantized values (rows, n) as float64: code value * s (MX: <= 8 significant
    bits; NVFP4: e2m1 * e4m3 * T, <= 30 bits), NaN/Inf where the decoded value is."""
    c2 = _to_rows(mx.codes, mx.axis)
    s, _ = mx_scales(mx)
    srep = np.repeat(s, mx.block_size, axis=1)[:, :c2.shape[1]]
    with np.errstate(invalid="ignore"):
        return mx.fmt.element.value_table[c2] * srep


def _resolve(x, fmt, profile, axis, scale_rule, source_dtype, from_float64):
    fmt = get_format(fmt)
    prof = get_profile(profile)
    if scale_rule is not None and scale_rule not in SCALE_RULE_CHOICES:
        raise UnknownScaleRuleError(
            f"unknown scale rule {scale_rule!r}; known: {', '.join(SCALE_RULE_CHOICES)}")
    if fmt.is_nvfp4 and scale_rule not in (None, "ideal"):
        raise ProfileConflictError(
            f"scale_rule={scale_rule!r} is an E8M0 rule; NVFP4 block scales are E4M3 values "
            "chosen by the profile's nvfp4_order (use None or 'ideal')")
    if scale_rule not in (None, "ideal") and scale_rule != prof.scale_rule:
        prof = prof.replace(name=f"{prof.name}[scale_rule={scale_rule}]", scale_rule=scale_rule)
    prof.check_format(fmt)
    if prof.rounding == "stochastic":
        raise ProfileConflictError(
            f"profile {prof.name!r} rounds stochastically; the decomposition needs a "
            "deterministic element rounding (rne, ties_away or ties_zero)")
    bits, src = as_f32_bits(x, source_dtype=source_dtype, from_float64=from_float64)
    if bits.size == 0:
        raise EmptyTensorError(f"empty tensor (shape {tuple(bits.shape)}): nothing to decompose")
    if not np.any((bits & np.uint32(0x7FFFFFFF)) < np.uint32(F32_INF)):
        raise NoFiniteValuesError(
            f"tensor of shape {tuple(bits.shape)} has no finite element (all NaN/Inf)")
    ax = _normalize_axis(axis, bits.ndim)
    return fmt, prof, bits, src, ax


def decompose(x, fmt, profile="ocp", *, axis=-1, scale_rule=None, source_dtype=None,
              from_float64=None) -> Decomposition:
    """Decompose the error of quantizing x to ``fmt`` under ``profile`` (see the module doc).

    x: anything mxref.inputs.as_f32_bits accepts. scale_rule: None (the profile's), an E8M0
    rule ('floor', 'rceil', 'ceil', 'even', 'round_down': the profile with that rule) or
    'ideal' (s = s*, so the scale component is exactly 0).
    """
    fmt, prof, bits, src, ax = _resolve(x, fmt, profile, axis, scale_rule, source_dtype,
                                        from_float64)
    mx = quantize(bits, fmt, prof, axis=ax, source_dtype="float32")
    bits2 = _to_rows(bits, ax)
    moved_shape = np.moveaxis(bits, ax, -1).shape
    s2, sdiv2 = mx_scales(mx)
    rule = "ideal" if scale_rule == "ideal" else prof.scale_rule if not fmt.is_nvfp4 else \
        f"nvfp4_{prof.nvfp4_order}"
    q2 = None if rule == "ideal" else mx_exact_values(mx)
    return decompose_quantized(bits2, moved_shape, ax, fmt, prof, mx.block_size, q2=q2, s2=s2,
                               sdiv2=sdiv2, scale_rule=rule, source_dtype=src)


def compare_scale_rules(x, fmt, rules=("floor", "rceil", "even", "ideal"), profile="ocp", *,
                        axis=-1, source_dtype=None, from_float64=None) -> dict:
    """{rule: decompose(x, fmt, profile, scale_rule=rule).stats()}; rule 'profile' means the
    profile's own rule."""
    bits, _ = as_f32_bits(x, source_dtype=source_dtype, from_float64=from_float64)
    return {r: decompose(bits, fmt, profile, axis=axis, source_dtype="float32",
                         scale_rule=None if r == "profile" else r).stats()
            for r in rules}


# ---- synthetic inputs ---------------------------------------------------------------------
def synthetic(dist: str, shape, seed: int) -> np.ndarray:
    """float32 samples from ``numpy.random.default_rng(seed)`` (PCG64), drawn in float64 and
    rounded to float32 once (IEEE RNE, numpy's astype):

    gaussian: standard_normal(shape); laplace: laplace(0, 1, shape); student-t3:
    standard_t(3, shape); uniform: uniform(-1, 1, shape); outlier: standard_normal(shape),
    then random(shape) < 1e-3 marks elements that are multiplied by 20 (both draws from the
    same generator, in that order).
    """
    if dist not in DISTRIBUTIONS:
        raise UnknownDistributionError(
            f"unknown distribution {dist!r}; known: {', '.join(DISTRIBUTIONS)}")
    shp = as_shape(shape)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    if dist == "gaussian":
        v = rng.standard_normal(shp)
    elif dist == "laplace":
        v = rng.laplace(0.0, 1.0, shp)
    elif dist == "student-t3":
        v = rng.standard_t(3, shp)
    elif dist == "uniform":
        v = rng.uniform(-1.0, 1.0, shp)
    else:
        v = rng.standard_normal(shp)
        v = np.where(rng.random(shp) < OUTLIER_RATE, v * OUTLIER_GAIN, v)
    return v.astype(np.float32)
