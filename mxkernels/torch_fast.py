"""Float-domain torch fast paths beside the integer emulator :mod:`mxkernels.torch_emu`.

* :func:`quantize_mx` is the fast twin of :func:`mxkernels.torch_emu.quantize_mx`: fp32/fp64
  float operations that are exact on its domain (finite inputs, nonzero block amax in
  [2^-100, 2^100], a float element format, a profile that differs from 'ocp' at most in its
  scale rule (floor / rceil) and rounding (rne / ties_away / stochastic); :func:`supports`),
  giving the same scale bytes and codes; outside it, it returns None and the caller uses
  torch_emu. tests/test_torch_twins.py checks the two agree.
* the torch corrections of the training path (macro-block scales, outlier fallback masks,
  vector-wise E2M1 scaling, OCC clamp bounds): torch re-implementations of mxref.corrections /
  the E2M1 grid, checked against mxref by mxkernels.training.validate and
  tests/test_training_corrections_fast.py.
"""
from __future__ import annotations

import numpy as np
import torch

from mxkernels import torch_emu as te
from mxkernels._memo import DeviceConsts
from mxref.formats import get_format

__all__ = ["quantize_mx", "supports", "macro_scales", "flag_blocks", "outlier_mask",
           "e2m1_codes", "vector_scaling", "occ_bounds", "MACRO_P"]

_I64 = torch.int64
_MANT = 0x7FFFFF
_CONSTS = DeviceConsts()


# ---- fast float-domain MX path ----------------------------------------------------------------
# torch_emu decides everything on int64 bit patterns (any input, any profile); on CPU that costs
# ~1 s per 10^5 elements. For the common case -- finite inputs whose nonzero block amax lies in
# [2^-100, 2^100], a float element format, a profile that differs from 'ocp' at most in its
# scale rule (floor / rceil) and rounding (rne / ties_away / stochastic) -- every step below is
# exact in fp32/fp64 (power-of-two scalings, integer-valued rounding), so the result is the same
# bits; anything else falls back to torch_emu. The in-run validation and
# tests/test_training_mxlinear.py check it against mxref.
_FAST_KNOBS = dict(overflow="saturate", nan_in_block="poison", inf_in_block="poison",
                   signed_zero="preserve", flush_fp32_subnormals=False, block_size=None,
                   block_axis=-1, ragged="zero_pad", rceil_subnormal="exact",
                   scale_overflow="clamp", zero_scale_elem_exp=-127, rceil_f32_log2=False)
_FAST_KNOBS["amax_floor"] = 0          # dsv4 amax floor: torch_emu only
_FAST_KNOBS["nan_element"] = "nan"     # amd_gfx950 signed-max NaN elements: torch_emu only
_FAST_KNOBS.update(scale_log2_f32=False, element_round_f32=False,   # microxcaling_torch:
                   zero_block_amax="zero")                         # torch_emu only


def supports(fmt, prof) -> bool:
    """Whether :func:`quantize_mx` serves ``fmt`` / ``prof`` (else torch_emu.quantize_mx)."""
    f = get_format(fmt)
    if f.is_nvfp4 or f.element.kind == "int":
        return False
    if prof.scale_rule not in ("floor", "rceil") or \
            prof.rounding not in ("rne", "ties_away", "stochastic"):
        return False
    return all(getattr(prof, k) == v for k, v in _FAST_KNOBS.items())


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 a) for positive normal fp32 a (exact, from the exponent)."""
    return torch.frexp(a)[1].to(torch.int64) - 1


def quantize_mx(t: torch.Tensor, fmt: str, prof, rbits=None):
    """Fast twin of :func:`mxkernels.torch_emu.quantize_mx` (fp32/fp64 float ops instead of
    int64 bit patterns): (scales, codes, values) of MX block quantization of the 2-D ``t``
    along its last axis, the same scales and codes bit for bit, or None when the input /
    profile is outside the fast path's domain (see above; :func:`supports`)."""
    f = get_format(fmt)
    g = te._grid(f.element.name)
    bs = f.block_size
    R, Cn = t.shape
    nb = -(-Cn // bs)
    pad = nb * bs - Cn
    x = torch.nn.functional.pad(t, (0, pad)) if pad else t
    xb = x.reshape(R, nb, bs)
    a = xb.abs()
    amax = a.amax(-1)
    if not bool(torch.isfinite(amax).all()):
        return None
    nz = amax > 0
    lo, hi = 2.0 ** -100, 2.0 ** 100
    if bool(((amax < lo) & nz).any()) or bool((amax > hi).any()):
        return None
    am = torch.where(nz, amax, torch.ones_like(amax))
    e = _floor_log2(am) - g.emax
    if prof.scale_rule == "rceil":
        maxn = float(np.uint32(g.max_f32).view(np.float32))
        # smallest e with amax <= maxn * 2^e: start from floor(log2 amax) - emax
        e = torch.where(am > torch.ldexp(torch.full_like(am, maxn), e), e + 1, e)
        e = torch.where(am <= torch.ldexp(torch.full_like(am, maxn), e - 1), e - 1, e)
    e = torch.clamp(e, -127, 127)
    byte = torch.where(nz, e + 127, torch.zeros_like(e))
    v = xb / torch.ldexp(torch.ones_like(am), e).unsqueeze(-1)       # exact (powers of two)
    av = v.abs().to(torch.float64)
    ex = torch.clamp(torch.frexp(torch.where(av > 0, av, torch.ones_like(av)))[1].to(torch.int64)
                     - 1, min=g.emin)
    quantum = torch.ldexp(torch.ones_like(av), ex - g.mbits)
    r = av / quantum                                                   # exact
    if prof.rounding == "rne":
        n = torch.round(r)
    elif prof.rounding == "ties_away":
        n = torch.floor(r + 0.5)
    else:
        if rbits is None:
            return None
        fl = torch.floor(r)
        frac = torch.floor((r - fl) * 2.0 ** 32)
        rb = rbits.reshape(R, Cn).to(torch.float64)
        rb = torch.nn.functional.pad(rb, (0, pad)).reshape(R, nb, bs) if pad else \
            rb.reshape(R, nb, bs)
        n = fl + ((frac + rb) >= 2.0 ** 32).to(torch.float64)
    mag_val = torch.clamp(n * quantum, max=float(np.uint32(g.max_f32).view(np.float32)))
    # encode the (exact) rounded magnitude
    pos = mag_val > 0
    ev = torch.frexp(torch.where(pos, mag_val, torch.ones_like(mag_val)))[1].to(torch.int64) - 1
    sub = ev < g.emin
    mant_sub = (mag_val / 2.0 ** (g.emin - g.mbits)).to(torch.int64)
    mant_norm = (mag_val / torch.ldexp(torch.ones_like(mag_val), ev - g.mbits)).to(torch.int64) \
        - (1 << g.mbits)
    field_ = torch.clamp(ev - g.emin + 1, min=0)
    mag = torch.where(sub, mant_sub, (field_ << g.mbits) | mant_norm)
    mag = torch.where(pos, mag, torch.zeros_like(mag))
    neg = torch.signbit(v)
    code = (neg.to(torch.int64) << g.sign_shift) | mag
    codes = code.reshape(R, nb * bs)[:, :Cn].to(torch.uint8)
    sign = torch.where(neg, -1.0, 1.0)
    scale = torch.ldexp(torch.ones_like(am), e).unsqueeze(-1)
    values = (sign * mag_val).to(torch.float32) * scale                 # exact
    values = values.reshape(R, nb * bs)[:, :Cn]
    return byte.to(torch.uint8), codes, values


# ---- torch corrections ---------------------------------------------------------------------
def _bitlen(x):
    """Bit length of non-negative int64 values below 2^53: the frexp exponent of the exactly
    converted float64 (x = m 2^e with m in [0.5, 1) has e bits; 0 for 0). Two launches; the
    shift-and-test loop it replaces was ~30 on the per-macro-block tensors."""
    return torch.frexp(x.to(torch.float64))[1].to(_I64)


MACRO_P = {"float32": 24, "bfloat16": 8, "e4m3": 4}


def macro_scales(t: torch.Tensor, macro: int, m_odd: int, p: int) -> torch.Tensor:
    """fp32 S_M [R, ceil(C / macro)]: the significand of A_M / M rounded up to p bits
    (mxref.corrections.quantize_macroblock step 1), integers only on the per-macro amax.

    The finite amax is taken on fp32 |x| (NaN and Inf read as 0): for non-negative floats the
    order of values is the order of bit patterns, so its bits are the integer amax of the
    bit patterns mxref takes, without an int64 copy of the operand."""
    R, C = t.shape
    nmac = -(-C // macro)
    a = torch.where(torch.isfinite(t), t.abs(), torch.zeros((), dtype=t.dtype, device=t.device))
    if nmac * macro != C:
        a = torch.nn.functional.pad(a, (0, nmac * macro - C))
    amax = a.reshape(R, nmac, macro).amax(-1).view(torch.int32).to(_I64)
    ex = amax >> 23
    mant = amax & _MANT
    sub_sa = mant << torch.clamp(24 - _bitlen(mant), 0, 24)
    sa = torch.where(ex > 0, mant | (1 << 23), sub_sa)
    bl_m = int(m_odd).bit_length()
    tt = _bitlen(sa) - bl_m
    tt = torch.where(sa < (m_odd << torch.clamp(tt, min=0)), tt - 1, tt)
    sh = p - 1 - tt
    num = torch.where(sh >= 0, sa << torch.clamp(sh, min=0), sa)
    den = torch.where(sh >= 0, torch.full_like(sa, m_odd), m_odd << torch.clamp(-sh, min=0))
    s_int = (num + den - 1) // den
    s_int = torch.where(amax == 0, torch.full_like(s_int, 1 << (p - 1)), s_int)
    bits = (127 << 23) + ((s_int - (1 << (p - 1))) << (24 - p))
    return bits.to(torch.int32).view(torch.float32)


def flag_blocks(t: torch.Tensor, block: int, tau: float):
    """(|x| blocked [R, nb, block] with zero padding, flagged [R, nb]) of the tau rule of
    mxref.corrections.flag_outlier_blocks (rho=None): all elements finite, amax > 0 and
    fl64(tau * med) < amax, med the lower median of |x| (the ceil(m/2)-th smallest of the m
    real elements).

    No sort: fl64(tau * a) is non-decreasing in a (tau >= 0), so the ceil(m/2)-th smallest
    a satisfies fl64(tau * a) < amax exactly when at least ceil(m/2) elements do; the count is
    one comparison per element and a sum per block."""
    R, C = t.shape
    nb = -(-C // block)
    pad = nb * block - C
    a = t.abs()
    if pad:
        a = torch.nn.functional.pad(a, (0, pad))
    a3 = a.reshape(R, nb, block)
    amax = a3.amax(-1)                  # NaN or Inf when the block has one (amax propagates NaN)
    below = (float(tau) * a3.double()) < amax.double().unsqueeze(-1)
    count = below.sum(-1)
    real = torch.full((nb,), block, dtype=count.dtype, device=t.device)
    if pad:
        real[-1] = block - pad
    need = (real - 1) // 2 + 1
    # padding elements are 0: fl64(tau * 0) = 0 < amax whenever amax > 0, so they are counted;
    # take them back out
    count = count - (block - real)
    flagged = (count >= need) & torch.isfinite(amax) & (amax > 0)
    return a3, flagged


def outlier_mask(t: torch.Tensor, block: int, rule: str, tau: float, k: int) -> torch.Tensor:
    """Passthrough mask [R, C] of the outlier fallback (tau rule, rho=None)."""
    R, C = t.shape
    a3, flagged = flag_blocks(t, block, tau)
    if rule == "block":
        mask = flagged.unsqueeze(-1).expand_as(a3)
    elif k == 1:
        # the largest |x| of each flagged block, ties to the lower index: argmax returns the
        # first maximal index (flagged blocks are all finite, padding is 0)
        first = a3.argmax(-1, keepdim=True)
        mask = torch.zeros_like(a3, dtype=torch.bool).scatter_(-1, first, True)
        mask = mask & (a3 > 0) & flagged.unsqueeze(-1)
    else:
        key = torch.where(torch.isfinite(a3), a3, torch.zeros_like(a3))
        order = torch.sort(key, dim=-1, descending=True, stable=True).indices
        rank = torch.empty_like(order)
        rank.scatter_(-1, order, torch.arange(block, device=t.device).expand_as(order))
        mask = (rank < k) & (key > 0) & flagged.unsqueeze(-1)
    return mask.reshape(R, -1)[:, :C]


_E2M1_CODE_OF_2MAG = torch.tensor([0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7], dtype=torch.uint8)


def e2m1_codes(y: torch.Tensor):
    """(E2M1 codes, their values) of fp32 y at scale 2^0 with RNE and saturation:
    ``torch_emu.convert(y, fmt="mxfp4", profile="ocp")`` bit for bit (NaN -> code 0, +-Inf ->
    +-6), in fp32 ops that are all exact: the quantum of |y| is 0.5 below 2, 1 below 4, else 2
    (a power of two, so |y| / q is exact), torch.round is round-half-even, and n * q is an
    E2M1 magnitude or above 6 (saturated)."""
    a = y.abs()
    nan = torch.isnan(y)
    half, one, two = (torch.full((), v, dtype=torch.float32, device=y.device)
                      for v in (0.5, 1.0, 2.0))
    q = torch.where(a < 2, half, torch.where(a < 4, one, two))
    mag = torch.clamp(torch.round(a / q) * q, max=6.0)
    mag = torch.where(nan, torch.zeros((), dtype=mag.dtype, device=mag.device), mag)
    neg = torch.signbit(y) & ~nan
    lut = _CONSTS.get(_E2M1_CODE_OF_2MAG, y.device)
    codes = lut[(mag * 2).to(torch.int64)] | (neg.to(torch.uint8) << 3)
    return codes, torch.where(neg, -mag, mag)


def vector_scaling(t: torch.Tensor):
    """Vector-wise E2M1: s = fl32(amax_row / 6) (1 for a zero row), code = E2M1 RNE of
    fl32(x / s) at scale 2^0 (saturating), value = code's E2M1 value."""
    amax = t.abs().amax(-1)
    # a tensor divisor: CUDA torch turns `tensor / python_float` into a multiply by the
    # rounded reciprocal, which is 1 ulp off fl32(amax / 6) for some amax (the in-run check
    # caught it on an H100)
    s = amax / torch.full_like(amax, 6.0)
    s = torch.where(amax > 0, s, torch.ones_like(s))
    y = t / s[:, None]
    codes, v = e2m1_codes(y)
    return codes, s, v, y


def occ_bounds(t: torch.Tensor, q: float):
    """(lo, hi): the (n - ceil(q n) + 1)-th and ceil(q n)-th smallest elements of t (NaN
    counts as the largest, as in sort).

    Two partial selections of the kk = n - ceil(q n) + 1 extreme elements (torch.topk, its
    radix select) instead of kthvalue, which took ~0.2 s per 10^7-element operand on an
    H100: lo is the largest of the kk smallest, hi the smallest of the kk largest."""
    flat = t.reshape(-1)
    n = flat.numel()
    khi = min(n, max(1, int(np.ceil(q * n))))
    kk = n - khi + 1
    lo = torch.topk(flat, kk, largest=False, sorted=False).values.max()
    top = torch.topk(flat, kk, largest=True, sorted=False).values
    nan = torch.isnan(top)
    hi = torch.where(nan, torch.full_like(top, float("inf")), top).min()
    # all kk largest NaN: the ceil(q n)-th smallest is NaN itself
    hi = torch.where(nan.all(), torch.full_like(hi, float("nan")), hi)
    return lo, hi
