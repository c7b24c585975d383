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
mxref.corrections / the E2M1 grid (in :mod:`mxkernels.torch_fast`, with the float-domain fast
MX path, the twin of torch_emu.quantize_mx), checked against mxref by :mod:`.validate`.
"""
from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from mxkernels import torch_emu as te
from mxkernels._memo import DeviceConsts
# the float-domain fast MX path and the torch corrections live in torch_fast; the names below
# are the ones this module's dispatch calls (tests monkeypatch them here)
from mxkernels.torch_fast import MACRO_P as _MACRO_P
from mxkernels.torch_fast import e2m1_codes as _e2m1_codes  # noqa: F401
from mxkernels.torch_fast import flag_blocks as _flag_blocks  # noqa: F401
from mxkernels.torch_fast import macro_scales as _macro_scales
from mxkernels.torch_fast import occ_bounds as _occ_bounds
from mxkernels.torch_fast import outlier_mask as _outlier_mask
from mxkernels.torch_fast import quantize_mx as fast_quantize_mx
from mxkernels.torch_fast import supports as _fast_ok
from mxkernels.torch_fast import vector_scaling as _vector
from mxref.formats import get_format
from mxref.profiles import get_profile

from .recipes import OperandSpec

__all__ = ["QOperand", "quantize_operand", "quantize_rotated_operand", "fused_rotation_ok",
           "rotate", "unrotate", "sr_bits", "QuantTimer",
           "quant_timer", "active_timer", "hadamard_signs", "mix_seed", "bf16_exact"]


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
def mix_state(*parts: int, z: int = 0x9E3779B97F4A7C15) -> int:
    """The 64-bit splitmix state after absorbing ``parts`` into ``z`` (mix_seed before its
    final mask; the fused kernels finish a state with the device step, triton_train)."""
    for p in parts:
        z = (z + (int(p) & 0xFFFFFFFFFFFFFFFF) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
    return z


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 steps): SR streams of different (recipe seed,
    layer, step, GEMM, operand) do not overlap in practice."""
    return mix_state(*parts) & 0x7FFFFFFFFFFFFFFF


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


# mxref's parallel Numba kernels run on numba's workqueue layer, which aborts the process when
# two threads launch at once (mxref/_numba_setup.py). The in-run checks may run on a background
# thread (trainer._PendingCheck, which holds this lock), so every host-side mxref parallel
# kernel the training path calls takes it too: today only mxref.random_bits, below.
HOST_NUMBA = threading.Lock()


def sr_bits(shape, seed: int, device, words: int = 1) -> torch.Tensor:
    """The uint32 words of mxref.random_bits(shape, seed, 0, words) as int64 on ``device``."""
    from mxref.quantize import random_bits
    with HOST_NUMBA:
        words_np = random_bits(tuple(shape), seed, 0, words)
    return torch.from_numpy(words_np.astype(np.int64)).to(device)


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
    tf32_exact: bool = True                       # ... in TF32 (11 significant bits)
    backend: str = "torch"                        # "triton": full() may take a Triton kernel
    _full: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def full(self) -> torch.Tensor:
        """The dequantized operand (fp32), computed once (the result is shared: callers do not
        write to it)."""
        if self._full is not None:
            return self._full
        v = self.values
        if self.row_scale is not None:
            v = scale_rows_cols(v, self.row_scale, None, self.backend)
        if self.tensor_scale is not None:
            v = v * self.tensor_scale
        self._full = v
        return v


def scale_rows_cols(x: torch.Tensor, ra: torch.Tensor | None, rb: torch.Tensor | None,
                    backend: str, *, inplace: bool = False) -> torch.Tensor:
    """``(x * ra[:, None]) * rb[None, :]`` (either vector None), rounded as those two torch
    multiplies: on the triton backend for a contiguous fp32 x, one pass
    (triton_corrections.scale_outer: torch's broadcast multiply is its unvectorised kernel;
    on a CPU tensor the interpreter runs it); ``inplace`` lets that pass write over x."""
    if backend == "triton" and x.dtype == torch.float32 and x.ndim == 2 and \
            x.is_contiguous() and all(v is None or (v.dtype == torch.float32 and
                                                    v.is_contiguous()) for v in (ra, rb)):
        return triton_module("triton_corrections", x.device).scale_outer(
            x, ra, rb, out=x if inplace else None)
    if ra is not None:
        x = x * ra[:, None]
    if rb is not None:
        x = x * rb[None, :]
    return x


def bf16_exact(spec: OperandSpec) -> bool:
    return spec.fmt is not None and spec.macro is None and spec.scaling == "block"


def tf32_exact(spec: OperandSpec) -> bool:
    """Whether every value of the quantized operand has at most 11 significant bits, so a
    TF32 tensor-core GEMM reads it unchanged: the bf16-exact operands, and macro-block scaling
    whose S_M (p bits) times an element significand (mantissa bits + 1) fits, e.g. MXFP4 with
    bf16 S_M: 2 + 8 = 10 bits (an outlier passed through is bf16: 8 bits). A product of a-bit
    and b-bit integers has at most a + b bits; rounding (an fp32 subnormal) only drops bits."""
    if bf16_exact(spec):
        return True
    if spec.fmt is None or spec.scaling != "block" or spec.macro is None:
        return False
    from mxkernels.torch_fast import MACRO_P
    f = get_format(spec.fmt)
    if f.is_nvfp4:
        return False
    return f.element.mbits + 1 + MACRO_P[spec.macro_scale_dtype] <= 11


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


@functools.lru_cache(maxsize=64)
def _qdq_fp32_ok(fmt: str, profile: str) -> bool:
    """Whether triton_fast's one-launch qdq takes (fmt, profile) from fp32 (cached: it sits on
    every generic-path MX operand)."""
    from mxkernels.triton_fast import supports
    return supports(fmt, profile, "float32")


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
                # mxref.random_bits(t.shape, sr_seed, 0, sr_words), the words sr_bits would
                # build on the host and the in-run validation regenerates (as quantize_sr)
                s, c, ts = torch.ops.mxkernels.quantize_nvfp4_sr(x1, spec.profile,
                                                                 int(sr_seed), 0,
                                                                 spec.sr_words)
            else:
                s, c, ts = torch.ops.mxkernels.quantize_nvfp4(x1, prof.name)
            ts = ts.reshape(()).to(torch.float32)
            s, c = s.reshape(s.shape[1:]), c.reshape(c.shape[1:])
        else:
            rb = sr_bits(t.shape, sr_seed, t.device, spec.sr_words) if sr else None
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
    if backend == "triton" and not sr and t.ndim == 2 and t.dtype == torch.float32 and \
            t.is_contiguous() and t.shape[1] % 32 == 0 and _qdq_fp32_ok(fmt, prof.name):
        # one launch: values, scales and codes from one read (triton_fast.quantize_dequantize,
        # bit-exact with mxref as quantize_mx + dequantize_mx, the two launches it replaces)
        v, _, q = triton_module("triton_fast", t.device).quantize_dequantize(
            t, fmt, prof.name, rows=True, out_dtype=torch.float32, with_codes=True)
        return q[0], q[1], v, None
    if backend == "triton" and (spec.profile if sr else prof.name) in _TRITON_PROFILES:
        if sr:
            s, c = torch.ops.mxkernels.quantize_sr(t.contiguous(), fmt, spec.profile, -1,
                                                   int(sr_seed), 0, spec.sr_words)
        else:
            s, c = torch.ops.mxkernels.quantize_mx(t.contiguous(), fmt, prof.name, -1)
    else:
        rb = sr_bits(t.shape, sr_seed, t.device, spec.sr_words) \
            if prof.rounding == "stochastic" else None
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


def _vector_triton(t: torch.Tensor, spec: OperandSpec) -> QOperand:
    """The vector-wise operand (ms-fp4) on the triton backend, bit for bit the torch chain of
    :func:`_quantize_operand`: the OCC bounds by radix select (triton_corrections.occ_bounds,
    no host synchronization), then clamp + residual + vector-wise E2M1 in one launch
    (vector_qdq); ``extra["scaled"]`` (y = x / s) only where DGE reads it (dge_k)."""
    tcm = triton_module("triton_corrections", t.device)
    extra: dict = {}
    bounds = None
    if spec.clamp_quantile is not None:
        lo, hi = tcm.occ_bounds(t, spec.clamp_quantile)
        bounds = torch.stack([lo, hi])
    codes, v, s, y, res = tcm.vector_qdq(t, bounds, write_y=spec.dge_k is not None)
    if bounds is not None:
        extra.update(occ_lo=lo, occ_hi=hi, occ_residual=res)
    if y is not None:
        extra["scaled"] = y
    return QOperand(v, None, codes, None, s, extra, True, backend="triton")


def quantize_operand(t: torch.Tensor, spec: OperandSpec, backend: str, *, sr_seed: int | None = 0
                     ) -> QOperand:
    """Quantize the fp32 operand t [R, C] along its last axis per ``spec`` (bf16 t only where
    the fused decomp launch takes it: the same bits as its fp32 value)."""
    with _section(t.device):
        return _quantize_operand(t, spec, backend, sr_seed)


def _quantize_operand(t, spec, backend, sr_seed):
    extra: dict = {}
    if backend == "triton" and spec.scaling == "vector" and t.ndim == 2 and t.numel() and \
            t.dtype == torch.float32 and t.is_contiguous() and \
            t.shape[1] <= triton_module("triton_corrections", t.device).VECTOR_MAX_COLS:
        return _vector_triton(t, spec)
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
    if backend == "triton" and (spec.outlier is not None or spec.macro is not None) and \
            t.ndim == 2 and t.dtype in (torch.float32, torch.bfloat16) and \
            (t.is_contiguous() or t.t().is_contiguous()) and \
            triton_module("triton_corrections", t.device).decomp_supports(spec, t.shape[1]):
        # outlier fallback + macro-block scaling + MX quantize-dequantize in one launch,
        # bit for bit the chain below on t's fp32 value (a transposed view is read in place;
        # bf16 is read as it is)
        s, c, v, pt, sm = triton_module("triton_corrections", t.device).decomp_qdq(t, spec)
        if pt is not None:
            extra["passthrough"] = pt
        if sm is not None:
            extra.update(macro_scales=sm, macro=spec.macro)
        return QOperand(v, s, c, None, None, extra, bf16_exact(spec), tf32_exact(spec))
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
    return QOperand(v, s, c, ts, None, extra, bf16_exact(spec), tf32_exact(spec))
