"""Operand quantizers of the training path: vectorized torch (any device) and Triton ops.

Every function takes a 2-D fp32 operand ``t [R, C]`` blocked along its last axis (the GEMM's
contraction axis) and returns a :class:`QOperand`: the values the GEMM multiplies plus what the
in-run validation needs to recompute them with mxref (codes, scales, scale extras).

Bit-exactness: the MX / NVFP4 quantizers are :mod:`mxkernels.torch_emu` (``backend="torch"``)
or ``torch.ops.mxkernels.*`` (``backend="triton"``: quantize_mx / quantize_nvfp4, and for
stochastic rounding quantize_sr / quantize_nvfp4_sr with the seeded in-kernel Philox stream, the
words of :func:`sr_bits`), both bit-exact with mxref. The block Hadamard (:func:`rotate`) is the
butterfly of ``mxref.rotate(method="butterfly")`` written in torch fp32 ops in the same order
(each add / multiply one IEEE RNE operation, no FMA), so it is bit-exact on CPU and on CUDA
(torch does not flush subnormals unless asked to); on the triton backend it is one
``triton_rotate.rotate`` launch (the same contract). The corrections
(macro-block scaling, outlier fallback, vector-wise scaling) are torch re-implementations of
mxref.corrections / the E2M1 grid, checked against mxref by :mod:`.validate`.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from mxkernels import torch_emu as te
from mxkernels._memo import DeviceConsts
from mxref.formats import get_format
from mxref.profiles import get_profile

from .recipes import OperandSpec

__all__ = ["QOperand", "quantize_operand", "quantize_rotated_operand", "fused_rotation_ok",
           "rotate", "unrotate", "sr_bits", "QuantTimer",
           "quant_timer", "active_timer", "hadamard_signs", "mix_seed", "bf16_exact"]

_I64 = torch.int64
_MANT = 0x7FFFFF


# ---- timing ---------------------------------------------------------------------------------
class QuantTimer:
    """Accumulates the time spent in quantization (rotation, quantize, dequantize) while
    active. CUDA: CUDA events around each section (no synchronization until :meth:`seconds`);
    CPU: perf_counter."""

    def __init__(self):
        self.calls = 0
        self._cpu_s = 0.0
        self._events: list = []

    def reset(self) -> None:
        self.calls, self._cpu_s, self._events = 0, 0.0, []

    def _start(self, device: torch.device):
        if device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _stop(self, start) -> None:
        self.calls += 1
        if isinstance(start, float):
            self._cpu_s += time.perf_counter() - start
        else:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((start, end))

    def seconds(self) -> float:
        """Total seconds so far (synchronizes CUDA events once)."""
        if self._events:
            self._events[-1][1].synchronize()
            self._cpu_s += sum(s.elapsed_time(e) for s, e in self._events) / 1e3
            self._events = []
        return self._cpu_s


_ACTIVE: list = [None]


def active_timer() -> QuantTimer | None:
    return _ACTIVE[0]


@contextmanager
def quant_timer(timer: QuantTimer | None = None):
    """``with quant_timer() as t: loss.backward(); t.seconds()``: time every quantization op of
    every MXLinear inside the block. Without an active timer nothing is measured (one global
    lookup per operand)."""
    t = QuantTimer() if timer is None else timer
    prev = _ACTIVE[0]
    _ACTIVE[0] = t
    try:
        yield t
    finally:
        _ACTIVE[0] = prev


@contextmanager
def _section(device):
    t = _ACTIVE[0]
    if t is None:
        yield
        return
    s = t._start(device)
    try:
        yield
    finally:
        t._stop(s)


# ---- seeds and signs ------------------------------------------------------------------------
def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 steps): SR streams of different (recipe seed,
    layer, step, GEMM, operand) do not overlap in practice."""
    z = 0x9E3779B97F4A7C15
    for p in parts:
        z = (z + (int(p) & 0xFFFFFFFFFFFFFFFF) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
    return z & 0x7FFFFFFFFFFFFFFF


def hadamard_signs(kind: str, n: int, *, seed: int, step: int, tensor_id: int) -> np.ndarray:
    """The int8 sign vector of a GemmSpec.hadamard kind (see recipes.GemmSpec)."""
    from mxref.rotate import sign_vector
    if kind == "deterministic":
        return sign_vector("none", n)
    if kind == "fixed_sign":
        return sign_vector("te16", 16) if n == 16 else sign_vector("random", n, seed=seed)
    if kind == "random":
        return sign_vector("random", n, seed=seed, step=step % 2**32,
                           tensor_id=tensor_id % 2**32)
    raise ValueError(kind)


def sr_bits(shape, seed: int, device) -> torch.Tensor:
    """The uint32 words of mxref.random_bits(shape, seed, 0) as int64 on ``device``."""
    from mxref.quantize import random_bits
    return torch.from_numpy(random_bits(tuple(shape), seed, 0).astype(np.int64)).to(device)


# ---- rotation -------------------------------------------------------------------------------
def _inv_sqrt_n(n: int) -> float:
    from mxref.rotate import inv_sqrt_n_bits
    return float(np.uint32(inv_sqrt_n_bits(n)).view(np.float32))


def _butterfly(t: torch.Tensor, n: int) -> torch.Tensor:
    """Fast Walsh-Hadamard transform of each n-block of the last axis, mxref's order:
    for h = 1, 2, ..., n/2: (v[j], v[j+h]) <- (v[j] + v[j+h], v[j] - v[j+h]) for (j & h) == 0."""
    rows = t.reshape(-1, n)
    h = 1
    while h < n:
        v = rows.reshape(-1, n // (2 * h), 2, h)
        a, b = v[:, :, 0, :], v[:, :, 1, :]
        rows = torch.stack((a + b, a - b), dim=2).reshape(-1, n)
        h *= 2
    return rows


def rotate(t: torch.Tensor, n: int, signs, backend: str = "torch") -> torch.Tensor:
    """``mxref.rotate(t, n, axis=-1, signs=signs)`` (butterfly, fp32) bit-exactly: fp32 [R, C],
    C a multiple of n. ``backend="torch"``: signs an fp32 tensor of +-1 of length n on t's
    device, torch ops; ``"triton"``: signs +-1 of length n (a numpy array or CPU tensor: the
    launcher checks it on the host, no device sync), one launch of
    ``triton_rotate.rotate`` (the same butterfly contract; interpreted for CPU tensors)."""
    if backend == "triton":
        return _triton_rotate(t.device).rotate(t.to(torch.float32).contiguous(), n,
                                               signs=_host_signs(signs))
    t = t.to(torch.float32)
    v = (t.reshape(-1, n) * signs)                   # exact sign flips
    out = _butterfly(v, n) * _inv_sqrt_n(n)
    return out.reshape(t.shape)


_MODS: dict = {}


def triton_module(name: str, device: torch.device):
    """The kernel module ``mxkernels.<name>`` for tensors on ``device`` (compiled, or the
    interpreted copy for CPU tensors), looked up once per (name, device type)."""
    key = (name, device.type)
    mod = _MODS.get(key)
    if mod is None:
        from mxkernels.ops import kernels
        mod = _MODS[key] = kernels(device).modules[name]
    return mod


def _triton_rotate(device: torch.device):
    return triton_module("triton_rotate", device)


def _host_signs(signs):
    if isinstance(signs, torch.Tensor):
        if signs.device.type != "cpu":
            raise TypeError("rotate(backend='triton') takes the signs on the host (numpy or a "
                            "CPU tensor), not on " + str(signs.device))
        return signs
    return torch.from_numpy(np.asarray(signs).astype(np.int8))


def unrotate(y: torch.Tensor, n: int, signs: torch.Tensor) -> torch.Tensor:
    """The inverse rotation (R^T = H diag(d) / sqrt(n)), in fp32 (high precision, not part of
    any quantization)."""
    out = (_butterfly(y.to(torch.float32).reshape(-1, n), n) * _inv_sqrt_n(n)) * signs
    return out.reshape(y.shape)


# ---- the quantized operand ------------------------------------------------------------------
@dataclass
class QOperand:
    """A quantized GEMM operand. ``values`` is what the GEMM multiplies (fp32, exact): the
    dequantized value for MX formats and corrections; e2m1 * e4m3 (tensor scale left out, kept
    as ``tensor_scale`` for the epilogue) for NVFP4; the bare E2M1 value (``row_scale`` for the
    epilogue) for vector-wise scaling."""

    values: torch.Tensor
    scales: torch.Tensor | None = None
    codes: torch.Tensor | None = None
    tensor_scale: torch.Tensor | None = None      # fp32 scalar tensor (nvfp4)
    row_scale: torch.Tensor | None = None         # fp32 [R] (vector-wise)
    extra: dict = field(default_factory=dict)
    bf16_exact: bool = True                       # values exactly representable in bf16

    def full(self) -> torch.Tensor:
        """The dequantized operand (fp32)."""
        v = self.values
        if self.row_scale is not None:
            v = v * self.row_scale[:, None]
        if self.tensor_scale is not None:
            v = v * self.tensor_scale
        return v


def bf16_exact(spec: OperandSpec) -> bool:
    return spec.fmt is not None and spec.macro is None and spec.scaling == "block"


def _profile(spec: OperandSpec):
    p = get_profile(spec.profile)
    if spec.rounding == "sr":
        p = p.replace(name=f"{p.name}+sr", rounding="stochastic")
    return p


_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


_E2M1_LUT = torch.tensor(_E2M1_VALUES, dtype=torch.float32)
_CONSTS = DeviceConsts()


def nvfp4_values(scales: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """NVFP4 e2m1 x e4m3 block values in fp32 (tensor scale 1), in the float domain.

    An E2M1 value has at most 2 significant bits and an E4M3 scale at most 4, so each product is
    exact in fp32 (the smallest, 0.5 x 2^-9, is a normal fp32 number); the bits equal
    ``torch_emu.dequantize_nvfp4(scales, codes, 1.0)`` for every code/scale pair but the NaN
    scales, which give a NaN of another payload (tests compare all 16 x 256 pairs)."""
    lut = _CONSTS.get(_E2M1_LUT, codes.device)          # no host sync per operand
    sv = scales.view(torch.float8_e4m3fn).to(torch.float32)
    sv = sv.repeat_interleave(16, dim=-1)[..., :codes.shape[-1]]
    return lut[codes.long()] * sv


def _mx_block(t, spec, backend, sr_seed, fmt=None, prof=None):
    """(scales, codes, fp32 values) of the plain block quantization of t along its last axis."""
    fmt = fmt or spec.fmt
    prof = prof or _profile(spec)
    f = get_format(fmt)
    if f.is_nvfp4:
        sr = prof.rounding == "stochastic"
        if backend == "triton":
            x1 = t.unsqueeze(0).contiguous()            # one tensor: [1, R, C]
            if sr:
                # the in-kernel Philox stream: element i of t (C order) takes word i of
                # mxref.random_bits(t.shape, sr_seed, 0), the words sr_bits would build on
                # the host and the in-run validation regenerates (as quantize_sr for MX)
                s, c, ts = torch.ops.mxkernels.quantize_nvfp4_sr(x1, spec.profile,
                                                                 int(sr_seed), 0)
            else:
                s, c, ts = torch.ops.mxkernels.quantize_nvfp4(x1, prof.name)
            ts = ts.reshape(()).to(torch.float32)
            s, c = s.reshape(s.shape[1:]), c.reshape(c.shape[1:])
        else:
            rb = sr_bits(t.shape, sr_seed, t.device) if sr else None
            s, c, tsb = te.quantize_nvfp4(t, profile=prof, rand_bits=rb)
            ts = tsb.view(torch.float32).reshape(())
        if backend == "triton":
            v = nvfp4_values(s, c)          # 3 launches instead of torch_emu's int64 decode
        else:
            one = torch.tensor(1.0, dtype=torch.float32, device=t.device)
            v = te.dequantize_nvfp4(s, c, one).view(torch.float32)
        return s, c, v, ts
    sr = prof.rounding == "stochastic"
    # an SR operand's profile is "<base>+sr" (see _profile): the Triton SR op takes the base
    # profile and draws its words in-kernel; testing prof.name here sent every MX SR operand to
    # the host-side words + torch emulation below (70x bf16 on llama-30m)
    if backend == "triton" and (spec.profile if sr else prof.name) in _TRITON_PROFILES:
        if sr:
            s, c = torch.ops.mxkernels.quantize_sr(t.contiguous(), fmt, spec.profile, -1,
                                                   int(sr_seed), 0)
        else:
            s, c = torch.ops.mxkernels.quantize_mx(t.contiguous(), fmt, prof.name, -1)
    else:
        rb = sr_bits(t.shape, sr_seed, t.device) if prof.rounding == "stochastic" else None
        if FAST[0] and _fast_ok(fmt, prof):
            r = fast_quantize_mx(t, fmt, prof, rb)
            if r is not None:
                return r[0], r[1], r[2], None
        s, c = te.quantize_mx(t, fmt=fmt, profile=prof, axis=-1, rand_bits=rb)
    if backend == "triton":
        # one Triton launch (the exact decode, as torch_emu's: every MX value x 2^(s-127) is an
        # fp32 value); torch_emu's int64 decode is tens of launches per operand on a GPU
        v = torch.ops.mxkernels.dequantize_mx(s, c, fmt, -1)
    else:
        v = te.dequantize(s, c, fmt, axis=-1).view(torch.float32)
    return s, c, v, None


FAST = [True]     # tests switch the float-domain fast path off to compare


try:
    from mxref.profiles import PROFILES as _P
    _TRITON_PROFILES = set(_P)
except Exception:  # pragma: no cover
    _TRITON_PROFILES = set()


def _bitlen(x):
    """Bit length of non-negative int64 values below 2^53: the frexp exponent of the exactly
    converted float64 (x = m 2^e with m in [0.5, 1) has e bits; 0 for 0). Two launches; the
    shift-and-test loop it replaces was ~30 on the per-macro-block tensors."""
    return torch.frexp(x.to(torch.float64))[1].to(_I64)


_MACRO_P = {"float32": 24, "bfloat16": 8, "e4m3": 4}


def _macro_scales(t: torch.Tensor, macro: int, m_odd: int, p: int) -> torch.Tensor:
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


def _flag_blocks(t: torch.Tensor, block: int, tau: float):
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


def _outlier_mask(t: torch.Tensor, block: int, rule: str, tau: float, k: int) -> torch.Tensor:
    """Passthrough mask [R, C] of the outlier fallback (tau rule, rho=None)."""
    R, C = t.shape
    a3, flagged = _flag_blocks(t, block, tau)
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


def _e2m1_codes(y: torch.Tensor):
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


def _vector(t: torch.Tensor):
    """Vector-wise E2M1: s = fl32(amax_row / 6) (1 for a zero row), code = E2M1 RNE of
    fl32(x / s) at scale 2^0 (saturating), value = code's E2M1 value."""
    amax = t.abs().amax(-1)
    # a tensor divisor: CUDA torch turns `tensor / python_float` into a multiply by the
    # rounded reciprocal, which is 1 ulp off fl32(amax / 6) for some amax (the in-run check
    # caught it on an H100)
    s = amax / torch.full_like(amax, 6.0)
    s = torch.where(amax > 0, s, torch.ones_like(s))
    y = t / s[:, None]
    codes, v = _e2m1_codes(y)
    return codes, s, v, y


def _occ_bounds(t: torch.Tensor, q: float):
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


def fused_rotation_ok(spec: OperandSpec) -> bool:
    """Whether the triton backend rotates and quantizes ``spec`` in one kernel
    (:func:`quantize_rotated_operand`): a plain NVFP4 operand with RNE (no SR: there is no
    fused rotate + SR kernel; no clamping, outlier fallback, macro or vector scaling)."""
    return spec.fmt is not None and get_format(spec.fmt).is_nvfp4 and \
        spec.rounding != "sr" and spec.scaling == "block" and spec.macro is None and \
        spec.outlier is None and spec.clamp_quantile is None


def quantize_rotated_operand(t: torch.Tensor, spec: OperandSpec, n: int, signs) -> QOperand:
    """``quantize_operand(rotate(t, n, signs), spec, "triton")`` bit for bit, for a spec that
    :func:`fused_rotation_ok` accepts: ``triton_rotate.quantize_rotated`` (the rotated tensor's
    amax, then rotate + quantize again in registers: the rotated fp32 tensor is never
    written). signs: +-1 of length n on the host, as :func:`rotate` takes them."""
    if not fused_rotation_ok(spec):
        raise ValueError(f"quantize_rotated_operand takes plain NVFP4 RNE operands, not {spec}")
    with _section(t.device):
        x1 = t.to(torch.float32).contiguous().unsqueeze(0)      # one tensor: [1, R, C]
        s, c, ts = _triton_rotate(t.device).quantize_rotated(x1, "nvfp4", spec.profile, n,
                                                             signs=_host_signs(signs))
        s, c = s.reshape(s.shape[1:]), c.reshape(c.shape[1:])
        v = nvfp4_values(s, c)
        return QOperand(v, s, c, ts.reshape(()).to(torch.float32), None, {}, bf16_exact(spec))


def quantize_operand(t: torch.Tensor, spec: OperandSpec, backend: str, *, sr_seed: int | None = 0
                     ) -> QOperand:
    """Quantize the fp32 operand t [R, C] along its last axis per ``spec``."""
    with _section(t.device):
        return _quantize_operand(t, spec, backend, sr_seed)


def _quantize_operand(t, spec, backend, sr_seed):
    extra: dict = {}
    if spec.clamp_quantile is not None:
        lo, hi = _occ_bounds(t, spec.clamp_quantile)
        tc = torch.clamp(t, lo, hi)
        extra.update(occ_lo=lo, occ_hi=hi, occ_residual=t - tc)
        t = tc
    if spec.scaling == "vector":
        codes, s, v, y = _vector(t)
        extra["scaled"] = y
        return QOperand(v, None, codes, None, s, extra, True)
    f = get_format(spec.fmt)
    pt = None
    if spec.outlier is not None:
        pt = _outlier_mask(t, f.block_size, spec.outlier, spec.outlier_tau, spec.outlier_k)
        kept = t.to(torch.bfloat16).to(torch.float32)           # bf16 RNE passthrough
        t = torch.where(pt, torch.zeros_like(t), t)
        extra["passthrough"] = pt
    if spec.macro is not None:
        m = t.shape[1] if spec.macro == "row" else spec.macro
        m = max(m, 1)
        from mxref.decompose import grid_facts
        sm = _macro_scales(t, m, int(grid_facts(f).m_odd), _MACRO_P[spec.macro_scale_dtype])
        R, C = t.shape
        if C % m == 0:          # broadcast S_M over its macro-block (no repeated copy)
            def scaled(u, op):
                return op(u.reshape(R, C // m, m), sm.unsqueeze(-1)).reshape(R, C)
        else:
            rep = sm.repeat_interleave(m, dim=1)[:, :C]

            def scaled(u, op):
                return op(u, rep)
        t = scaled(t, torch.div)
        extra.update(macro_scales=sm, macro=m)
        s, c, v, ts = _mx_block(t, spec, backend, sr_seed)
        v = scaled(v, torch.mul)
    else:
        s, c, v, ts = _mx_block(t, spec, backend, sr_seed)
    if pt is not None:
        v = torch.where(pt, kept, v)
    return QOperand(v, s, c, ts, None, extra, bf16_exact(spec))


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


def _fast_ok(fmt, prof) -> bool:
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


def fast_quantize_mx(t: torch.Tensor, fmt: str, prof, rbits=None):
    """(scales, codes, values) of MX block quantization along the last axis, or None when the
    input / profile is outside the fast path's domain (see above)."""
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
