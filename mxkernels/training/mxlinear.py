"""MXLinear: an nn.Linear whose three GEMMs run on quantized operands per a Recipe.

``y = x W^T + b``. Each GEMM (recipes module docstring: fprop, dgrad, wgrad) is computed as
quantize -> dequantize to exact values -> torch.matmul with fp32 accumulation (fp32 operands on
CPU; bf16 operands on CUDA when every value is exactly a bf16 number, else fp32), with the NVFP4
tensor scales and vector-wise row scales applied after the product (an epilogue, as hardware
does; training_anchors pitfall 8). ``gemm="block_sequential"`` calls torch.ops.mxkernels.gemm.

Backends: "torch" (mxkernels.torch_emu, any device), "triton" (torch.ops.mxkernels.*, CUDA; the
CPU interpreter works but is slow), "auto" (triton for CUDA tensors, else torch). Both are
bit-exact with mxref; the block Hadamard is a torch butterfly (torch backend) or one
``triton_rotate.rotate`` launch (triton backend; a plain NVFP4 RNE operand is rotated and
quantized by one ``triton_rotate.quantize_rotated``), all bit-exact with mxref.rotate. On the triton
backend stochastic rounding (MX and NVFP4) draws its words from the kernels' in-kernel Philox
stream, the same words mxref.random_bits gives (the torch backend builds them on the host).

``weight`` and ``bias`` are ordinary Parameters. ``step`` (set by :func:`set_step`) and
``layer_id`` (set by :func:`swap_linears`) seed the random Hadamard signs and the SR streams:
signs = mxref.sign_vector("random", n, seed=recipe.seed, step=step, tensor_id=4 * layer_id +
gemm index); SR words = mxref.random_bits(shape, mix_seed(recipe.seed, layer_id, step, gemm
index, operand index)).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import re
import weakref

import numpy as np
import torch
import torch.nn.functional as F

from mxkernels._memo import DeviceConsts
from mxref.formats import get_format

from . import carrier as CR
from . import quant as Q
from .errors import RecipeError, TrainingConfigError
from .recipes import GEMMS, GemmSpec, OperandSpec, Recipe, get_recipe

__all__ = ["MXLinear", "swap_linears", "set_step", "quant_timer", "QuantTimer", "BACKENDS",
           "DEFAULT_SKIP", "fast_plan", "FAST_PATH", "use_device_step"]

BACKENDS = ("auto", "torch", "triton")
DEFAULT_SKIP = ("lm_head", "*embed*", "router", "gate", "score")
quant_timer = Q.quant_timer
QuantTimer = Q.QuantTimer
_GEMM_INDEX = {g: i for i, g in enumerate(GEMMS)}


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise RecipeError(f"backend={backend!r}; use one of {BACKENDS}")
    if backend == "auto":
        backend = "triton" if device.type == "cuda" else "torch"
    if backend == "triton":
        import mxkernels.ops  # noqa: F401  (registers torch.ops.mxkernels.*)
    return backend


class MXLinear(torch.nn.Module):
    """Drop-in nn.Linear with quantized GEMMs (see the module docstring)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 recipe: Recipe | str = "bf16", backend: str = "auto", device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device,
                                                     dtype=dtype))
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self._setup(recipe, backend)
        self.reset_parameters()

    def _setup(self, recipe, backend: str) -> None:
        """Recipe, backend and per-step state (shared by __init__ and from_linear)."""
        self.recipe = get_recipe(recipe)
        if backend not in BACKENDS:
            raise RecipeError(f"backend={backend!r}; use one of {BACKENDS}")
        self.backend = backend
        self.step = 0
        self.layer_id = 0
        self.name = ""
        self._capture = None          # validate.capture_next arms it
        self._plan = self._plan_recipe = None

    def reset_parameters(self) -> None:
        torch.nn.Linear.reset_parameters(self)   # same init as nn.Linear

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe, *, backend: str = "auto"
                    ) -> "MXLinear":
        """An MXLinear sharing ``linear``'s weight and bias Parameters (same tensors)."""
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        m.in_features, m.out_features = linear.in_features, linear.out_features
        m.weight = linear.weight
        if linear.bias is not None:
            m.bias = linear.bias
        else:
            m.register_parameter("bias", None)
        m._setup(recipe, backend)
        return m

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, recipe={self.recipe.name}, backend={self.backend}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.recipe.quantized and self._capture is None:
            return F.linear(x, self.weight, self.bias)
        if FAST_PATH[0]:
            c = self._plan_recipe                   # (recipe, backend, device type) planned
            if c is None or c[0] is not self.recipe or c[1] != self.backend or \
                    c[2] != x.device.type:
                self._plan = fast_plan(self.recipe) \
                    if _resolve_backend(self.backend, x.device) == "triton" else None
                self._plan_recipe = (self.recipe, self.backend, x.device.type)
            if self._plan is not None and self._plan["carried"]:
                return _MXLinearCarriedFn.apply(x, self.weight, self.bias, self, self._plan)
            if self._plan is not None and (not self._plan["shaped"] or _fast_shapes_ok(
                    self._plan, x.numel() // x.shape[-1], x.shape[-1], self.weight.shape[0])) \
                    and (self._plan["store"] is None or x.shape[-1] % 2 == 0):
                return _MXLinearFastFn.apply(x, self.weight, self.bias, self, self._plan)
            if self._plan is not None and _capturing(x):
                raise TrainingConfigError(
                    f"layer {self.name or self.layer_id}: input {tuple(x.shape)} with weight "
                    f"{tuple(self.weight.shape)} does not fit recipe {self.recipe.name!r}'s fast "
                    "path (a rotated axis is not a multiple of the Hadamard size, or K is odd "
                    "under FP4 activation storage); the generic path it falls back to cannot "
                    "run inside a CUDA graph: run without --cuda-graph or change the shapes")
        return _MXLinearFn.apply(x, self.weight, self.bias, self)


def _capturing(x: torch.Tensor) -> bool:
    """Whether x's CUDA stream is capturing a graph (the fast path's fallback refuses then)."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


# ---- the three GEMMs ------------------------------------------------------------------------
class _Ctx:
    """Per-call state: the layer's recipe, backend, seeds, capture sink."""

    def __init__(self, layer: MXLinear, device: torch.device):
        self.layer = layer
        self.recipe = layer.recipe
        self.backend = _resolve_backend(layer.backend, device)
        self.step = int(layer.step)
        self.layer_id = int(layer.layer_id)
        self.capture = layer._capture

    def signs(self, gemm: str, g: GemmSpec, device) -> np.ndarray | None:
        if g.hadamard == "none":
            return None
        return Q.hadamard_signs(g.hadamard, g.hadamard_n, seed=self.recipe.seed, step=self.step,
                                tensor_id=4 * self.layer_id + _GEMM_INDEX[gemm])

    def sr_seed(self, gemm: str, side: str) -> int:
        return Q.mix_seed(self.recipe.seed, self.layer_id, self.step, _GEMM_INDEX[gemm],
                          0 if side == "a" else 1)


_SIGNS = DeviceConsts()      # sign vectors on the GPU: no host sync per rotated GEMM


def _pad_to(t: torch.Tensor, mult: int) -> torch.Tensor:
    c = t.shape[-1]
    r = (-c) % mult
    return torch.nn.functional.pad(t, (0, r)) if r else t


def _np(t):
    """A captured tensor as numpy, bits unchanged (bf16 as ml_dtypes.bfloat16: numpy has none)."""
    if t is None:
        return None
    # copy before .numpy(): numpy over a CPU tensor's own storage marks that storage
    # non-resizable for good, and FSDP2 frees a layer's unsharded parameters by resizing theirs
    t = t.detach().to("cpu", copy=True)
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _operand(ctx: _Ctx, gemm: str, side: str, t: torch.Tensor, spec: OperandSpec,
             signs_t: torch.Tensor | None, n: int, rec: dict | None, signs=None):
    """Rotate (if the GEMM rotates) and quantize one operand; returns (QOperand or None, hp
    tensor fed to the GEMM when unquantized). ``signs``: the host (numpy) copy of signs_t,
    which the triton backend's rotation kernel takes. An operand that stays high precision
    and unrotated keeps its layout (a transposed view stays one: the GEMMs take either). The
    fused decomp launch takes fp32 or bf16 as it is, and the backward's transposed W^T, dy^T
    and x^T after one tiled transpose (or in place: DECOMP_VIEW_READ)."""
    if signs_t is None and _decomp_takes(ctx, spec, t):
        # the fused decomp launch reads fp32 or bf16 as it is (no fp32 copy of bf16); a
        # transposed view after one tiled transpose (or, DECOMP_VIEW_READ, in place)
        if not t.is_contiguous() and not DECOMP_VIEW_READ[0]:
            t = Q.triton_module("triton_corrections", t.device).transpose_contiguous(t)
    else:
        t = t.to(torch.float32)
        if spec.fmt is not None or signs_t is not None:
            t = t.contiguous()
    if rec is not None:
        rec["input"] = _np(t.to(torch.float32))
    if signs_t is not None and ctx.backend == "triton" and Q.fused_rotation_ok(spec):
        # one kernel rotates and quantizes (the rotated operand is not needed: quantized)
        q = Q.quantize_rotated_operand(t, spec, n, signs)
        if rec is not None:
            _record(rec, q, None)
        return q, None
    if signs_t is not None:
        with Q._section(t.device):          # the quant timer counts the rotation too
            if ctx.backend == "triton":
                t = Q.rotate(t, n, signs, backend="triton")
            else:
                t = Q.rotate(t, n, signs_t)
    if spec.fmt is None:
        return None, t
    seed = ctx.sr_seed(gemm, side) if spec.rounding == "sr" else None
    q = Q.quantize_operand(t, spec, ctx.backend, sr_seed=seed)
    if rec is not None:
        _record(rec, q, seed)
    return q, t


# whether a transposed view goes to the decomp launch as it is (its transposed read: 296 us
# for a 16384 x 2048 fp32 operand on an H200, 2.4x the row read's 124) or made contiguous by
# one tiled transpose first (triton_corrections.transpose_contiguous; bench/gpu_decomp.py)
DECOMP_VIEW_READ = [False]


def _decomp_takes(ctx: _Ctx, spec: OperandSpec, t: torch.Tensor) -> bool:
    """Whether t goes to triton_corrections.decomp_qdq as it is, without an fp32 copy (the
    triton backend, a 2-D fp32 or bf16 operand that is contiguous or a transposed view, a
    spec that decomp_supports: block-scaled with an outlier rule or macro scaling, no clamp)."""
    return ctx.backend == "triton" and t.ndim == 2 and spec.fmt is not None and \
        t.dtype in (torch.float32, torch.bfloat16) and \
        (t.is_contiguous() or t.t().is_contiguous()) and \
        Q.triton_module("triton_corrections", t.device).decomp_supports(spec, t.shape[1])


def _record(rec: dict, q, seed) -> None:
    """What the in-run validation needs of one quantized operand."""
    rec.update(sr_seed=seed, scales=_np(q.scales), codes=_np(q.codes),
               tensor_scale=None if q.tensor_scale is None else float(q.tensor_scale),
               row_scale=_np(q.row_scale),
               extra={k: (_np(v) if isinstance(v, torch.Tensor) else v)
                      for k, v in q.extra.items()})


def run_gemm(ctx: _Ctx, gemm: str, a: torch.Tensor, b: torch.Tensor,
             fwd: dict | None = None, pre_a=None) -> torch.Tensor:
    """out = A . B^T for 2-D a [M, C], b [P, C] under the recipe's GemmSpec for ``gemm``.
    ``fwd``: collects the forward QOperands (fprop only). ``pre_a``: A already quantized per
    the spec (the backward's dual-orientation dy; never with a capture or rotation)."""
    g: GemmSpec = getattr(ctx.recipe, gemm)
    rec = None
    if ctx.capture is not None:
        rec = ctx.capture.setdefault(gemm, {"a": {}, "b": {}})
    signs = ctx.signs(gemm, g, a.device)
    signs_t = None
    if signs is not None:
        signs_t = _SIGNS.get(torch.from_numpy(signs.astype(np.float32)), a.device)
        a, b = _pad_to(a, g.hadamard_n), _pad_to(b, g.hadamard_n)
        if rec is not None:
            rec["signs"] = signs.copy()
            rec["hadamard_n"] = g.hadamard_n
    memo = gemm == "fprop" and rec is None and signs is None and _memo_ok(ctx, g.a)
    hit = _A_MEMO.get(a, g.a, ctx.backend) if memo else None
    if pre_a is not None:
        qa, ta = pre_a, None
    elif hit is not None:
        qa, ta = hit
    else:
        qa, ta = _operand(ctx, gemm, "a", a, g.a, signs_t, g.hadamard_n,
                          None if rec is None else rec["a"], signs)
        if memo:
            _A_MEMO.put(a, g.a, ctx.backend, (qa, ta))
    qb, tb = _operand(ctx, gemm, "b", b, g.b, signs_t, g.hadamard_n,
                      None if rec is None else rec["b"], signs)
    if fwd is not None:
        fwd.update(qa=qa, qb=qb, ta=ta, tb=tb, signs_t=signs_t)
    if g.gemm == "block_sequential":
        out = torch.ops.mxkernels.gemm(qa.scales, qa.codes, qb.scales, qb.codes, g.a.fmt,
                                       g.b.fmt, "block_sequential")
    elif g.gemm == "fp8":
        ca, cb = CR.to_carrier(qa.values, 1), CR.to_carrier(qb.values, 1)
        out = CR.carrier_mm(ca, cb, torch.float32)
        if rec is not None:
            rec["a"]["carrier"], rec["b"]["carrier"] = CR.record(ca), CR.record(cb)
    else:
        va = ta if qa is None else qa.values
        vb = tb if qb is None else qb.values
        exact16 = (qa is None or qa.bf16_exact) and (qb is None or qb.bf16_exact)
        narrow_a = qa is not None or ta.dtype == torch.bfloat16      # bf16 / TF32 values
        narrow_b = qb is not None or tb.dtype == torch.bfloat16
        cuda = va.device.type == "cuda"
        if cuda and exact16 and narrow_a and narrow_b:
            out = _mm_bf16_f32(va, vb.t())
        elif cuda and _FAST_GEMMS[0] and narrow_a and narrow_b and \
                (qa is None or qa.tf32_exact) and (qb is None or qb.tf32_exact):
            out = _mm_tf32(va, vb.t())
        elif cuda and _FAST_GEMMS[0] and _bf16_side(qa, ta) and qb is None and \
                tb.dtype == torch.float32:
            out = _mm_split3(va, vb, 1)
        elif cuda and _FAST_GEMMS[0] and _bf16_side(qb, tb) and qa is None and \
                ta.dtype == torch.float32:
            out = _mm_split3(va, vb, 0)
        else:
            # fp32 accumulation is the contract the in-run check holds the output to: autocast
            # (CPU bf16 runs) would round every product sum to bf16, so it is off here; products
            # of bf16-exact values are exact in fp32
            with torch.autocast(device_type=va.device.type, enabled=False):
                out = torch.matmul(va.float(), vb.float().t())
        ra = None if qa is None else qa.row_scale
        rb = None if qb is None else qb.row_scale
        if ra is not None or rb is not None:
            # out is this call's own fresh tensor: the one-pass epilogue may write over it
            out = Q.scale_rows_cols(out, ra, rb, ctx.backend, inplace=True)
        tsa = None if qa is None else qa.tensor_scale
        tsb = None if qb is None else qb.tensor_scale
        if tsa is not None or tsb is not None:
            alpha = (tsa if tsa is not None else 1.0) * (tsb if tsb is not None else 1.0)
            out = out * alpha
    if rec is not None:
        rec["out"] = _np(out)
        rec["spec"] = g
    # OCC compensation: the clamped-off residual times the other (high-precision) operand
    for q, other, axis in ((qa, b, 0), (qb, a, 1)):
        if q is not None and "occ_residual" in q.extra:
            r = q.extra["occ_residual"]
            comp = r @ other.to(torch.float32).t() if axis == 0 else \
                other.to(torch.float32) @ r.t()
            out = out + comp
    return out


_BF16_MM = [True]


def _mm_bf16_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bf16 x bf16 -> fp32 output (fp32 accumulation) where torch has mm(out_dtype=); else
    the fp32 matmul of the same (exact) values, with autocast off (CPU autocast has no
    mm(out_dtype=) and would round an fp32 mm's result to bf16)."""
    if _BF16_MM[0]:
        try:
            return torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16), out_dtype=torch.float32)
        except (RuntimeError, TypeError, NotImplementedError):
            _BF16_MM[0] = False
    with torch.autocast(device_type=a.device.type, enabled=False):
        return torch.mm(a.to(torch.float32), b.to(torch.float32))


_FAST_GEMMS = [True]     # tests switch the TF32 and split-bf16 GEMMs off to compare


def _bf16_side(q, t) -> bool:
    """An operand whose values are all exact in bf16: quantized bf16-exact, or a bf16 tensor."""
    return (q is not None and q.bf16_exact) or (q is None and t.dtype == torch.bfloat16)


@contextlib.contextmanager
def _tf32_on():
    """TF32 tensor-core math for fp32 matmuls inside, restored after (the new fp32_precision
    switch where torch has it: setting the legacy allow_tf32 after it raises)."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        old = m.fp32_precision
        m.fp32_precision = "tf32"
        try:
            yield
        finally:
            m.fp32_precision = old
    else:  # pragma: no cover - torch < 2.9
        old = m.allow_tf32
        m.allow_tf32 = True
        try:
            yield
        finally:
            m.allow_tf32 = old


def _mm_tf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in fp32 on TF32 tensor cores, for operands whose every value has at most 11
    significant bits (QOperand.tf32_exact: TF32 reads them unchanged, their products are exact
    in fp32, the sums accumulate in fp32 as the bf16 GEMMs' do): the fp32 matmul's contract at
    the tensor cores' speed instead of the fp32 pipes' (decomp-fixed: values e2m1 x 2^k x S_M
    of 10 bits)."""
    with torch.autocast(device_type=a.device.type, enabled=False), _tf32_on():
        return torch.matmul(a.to(torch.float32), b.to(torch.float32))


def _split_bf16(v: torch.Tensor):
    """(v1, v2, v3) bf16 with v = v1 + v2 + v3 exactly for fp32 v: the top 8 significant bits
    (truncated: never rounded up to Inf), the next 8 of the exact remainder, the rest (at most
    8 bits; exact while it stays above bf16's smallest subnormal 2^-133, |v| above ~2^-110).
    A NaN or Inf stays in v1 (v2 = v3 = 0). One Triton pass (triton_corrections.split3_bf16)."""
    v = v.to(torch.float32)
    if v.ndim == 2 and not v.is_contiguous() and v.t().is_contiguous():
        # a transposed view (wgrad's x^T, dgrad's W^T): split the storage, transpose the pieces
        return tuple(p.t() for p in _split_contiguous(v.t()))
    return _split_contiguous(v.contiguous())


def _split_contiguous(v: torch.Tensor):
    """split3_bf16 of a contiguous fp32 v, kept for the next call on the same tensor (Wgrad of
    q, k and v splits one saved x)."""
    hit = _SPLIT_MEMO.get(v, None, "triton") if MEMO[0] else None
    if hit is None:
        hit = Q.triton_module("triton_corrections", v.device).split3_bf16(v)
        if MEMO[0]:
            _SPLIT_MEMO.put(v, None, "triton", hit)
    return hit


class _TensorMemo:
    """Cached results for the last ``slots`` tensors (least recently used out first): hit when
    a call sees the same storage, offset, shape, strides, dtype and version counter (a write
    to the tensor in place bumps it) under the same spec and backend. An entry holds its
    tensor, so the storage cannot be freed and its address handed to another tensor while the
    entry lives. The generic path's repeated work: q, k and v (gate and up) quantize one x in
    the forward, and their Wgrads split one saved copy of it (each backward splits its own W
    for Dgrad in between: two slots)."""

    def __init__(self, slots: int = 1):
        self.slots = slots
        self.entries: list = []

    @property
    def entry(self):
        """The most recent entry (None when empty)."""
        return self.entries[-1] if self.entries else None

    @staticmethod
    def _key(t: torch.Tensor, spec, backend: str):
        """The tensor's identity, or None where it has none to read: an inference tensor (no
        version counter: nothing proves it unchanged), a tensor being traced or a fake one
        (torch.compile: no storage address, or address 0 for all of them), an empty one."""
        if t.is_inference() or torch.compiler.is_compiling():
            return None
        try:
            ptr = t.untyped_storage().data_ptr()
            return None if ptr == 0 else (ptr, t.storage_offset(), tuple(t.shape), t.stride(),
                                          t.dtype, t.device, t._version, spec, backend)
        except (RuntimeError, NotImplementedError):
            return None

    def get(self, t: torch.Tensor, spec, backend: str):
        if not self.entries:
            return None
        key = self._key(t, spec, backend)
        if key is None:
            return None
        for i, e in enumerate(self.entries):
            if e[0] == key:
                self.entries.append(self.entries.pop(i))       # now the most recent
                return e[2]
        return None

    def put(self, t: torch.Tensor, spec, backend: str, value) -> None:
        key = self._key(t, spec, backend)
        if key is None:
            return
        self.entries.append((key, t, value))
        del self.entries[:-self.slots]

    def clear(self) -> None:
        self.entries = []


_A_MEMO = _TensorMemo()          # the forward's A operand (x), on deterministic specs
_SPLIT_MEMO = _TensorMemo(2)     # the backward's split-bf16 pieces: a saved x and a W
MEMO = [True]                    # tests switch the memos off to compare


def _memo_ok(ctx: _Ctx, spec: OperandSpec) -> bool:
    """Whether one quantization of x may serve every layer that projects it: the triton
    backend, a quantized spec with nothing layer- or step-dependent (no SR stream: its seed
    mixes the layer id; rotations are excluded by the caller)."""
    return MEMO[0] and ctx.backend == "triton" and spec.fmt is not None and \
        spec.rounding != "sr"


_ADDMM_DTYPE = [True]


def _mm_acc(y: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """y + a @ b for bf16 a, b with fp32 accumulation and output (y None: a @ b): cuBLAS adds
    y in its fp32 epilogue (one rounding, as a separate add) where torch has addmm(out_dtype=)."""
    if y is None:
        return torch.mm(a, b, out_dtype=torch.float32)
    if _ADDMM_DTYPE[0]:
        try:
            return torch.addmm(y, a, b, out_dtype=torch.float32)
        except (RuntimeError, TypeError, NotImplementedError):
            _ADDMM_DTYPE[0] = False
    return y + torch.mm(a, b, out_dtype=torch.float32)


def _mm_split3(va: torch.Tensor, vb: torch.Tensor, split: int) -> torch.Tensor:
    """va @ vb.t() for one bf16-exact operand and one fp32 operand (``split``: 0 for va, 1 for
    vb): the fp32 operand in three bf16 pieces (:func:`_split_bf16`), three bf16 GEMMs with
    fp32 accumulation, the smallest piece first, each added in the next GEMM's epilogue.
    Every product is exact (8 x 8 bits) and sums in fp32: the fp32 matmul's contract (whose
    products round) on tensor cores (ms-fp4's backward GEMMs against the forward's
    vector-scaled copies). CUDA only (bf16 mm with fp32 output)."""
    with torch.autocast(device_type=va.device.type, enabled=False):
        if split == 1:
            a16 = va.to(torch.bfloat16)
            ps = _split_bf16(vb)
            pairs = [(a16, p.t()) for p in reversed(ps)]
        else:
            b16 = vb.t().to(torch.bfloat16)
            pairs = [(p, b16) for p in reversed(_split_bf16(va))]
        y = None
        for a, b in pairs:
            y = _mm_acc(y, a, b)
        return y


def _dge_factor(w_scaled: torch.Tensor, k: float) -> torch.Tensor:
    """MS-FP4 DGE derivative f'(x) = (1/k) |2 (x - a) / delta - 1|^(1/k - 1), clipped at 3,
    on the E2M1 intervals (delta 0.5 on [0, 2], 1 on [2, 4], 2 on [4, 6]); training_anchors
    B.6."""
    ax = w_scaled.abs().clamp(max=6.0)
    delta = torch.where(ax < 2, torch.full_like(ax, 0.5),
                        torch.where(ax < 4, torch.ones_like(ax), torch.full_like(ax, 2.0)))
    lo = torch.where(ax < 2, torch.zeros_like(ax), torch.where(ax < 4, torch.full_like(ax, 2.0),
                                                                torch.full_like(ax, 4.0)))
    a = lo + torch.floor((ax - lo) / delta) * delta
    u = (2 * (ax - a) / delta - 1).abs()
    with torch.no_grad():
        d = (1.0 / k) * u.pow(1.0 / k - 1.0)
    return torch.clamp(torch.nan_to_num(d, posinf=3.0), max=3.0)


class _MXLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        _SPLIT_MEMO.clear()             # the last backward's pieces are not needed again
        c = _Ctx(layer, x.device)
        r = c.recipe
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        fwd: dict = {}
        y = run_gemm(c, "fprop", x2, weight, fwd)
        if bias is not None:
            y = y + bias.to(torch.float32)
        # what the backward needs
        saved_x = saved_w = None
        x_store = None
        if r.dgrad.b.source == "fwd":
            saved_w = _fwd_value(fwd["qb"], fwd["tb"])
        if r.wgrad.b.source == "fwd":
            saved_x = _fwd_value(fwd["qa"], fwd["ta"])
        elif r.save_activations is not None:
            x_store = _store_activation(x2, r.save_activations, c.backend)
        dge = None
        if r.fprop.b.dge_k is not None and fwd["qb"] is not None:
            dge = _dge_factor(fwd["qb"].extra["scaled"], r.fprop.b.dge_k)
        elif r.fprop.b.dge_const is not None and fwd["qb"] is not None:
            dge = torch.tensor(float(r.fprop.b.dge_const), dtype=torch.float32, device=x.device)
        ctx.c = c
        ctx.shape = shape
        ctx.fwd_signs = fwd["signs_t"]
        # the stored codes and scales go through save_for_backward like every other saved
        # tensor, so saved-tensor hooks (offloading, mxkernels.training.memory) see them
        ctx.x_store = None if x_store is None else \
            {k: v for k, v in x_store.items() if k not in ("codes", "scales")}
        ctx.has_bias = bias is not None
        ctx.w_dtype = weight.dtype
        ctx.save_for_backward(
            x2 if (saved_x is None and x_store is None) else saved_x,
            weight if saved_w is None else saved_w, dge,
            *(() if x_store is None else (x_store["codes"], x_store["scales"])))
        ctx.saved_kinds = ("hp" if saved_x is None and x_store is None else
                           ("fwd" if saved_x is not None else "store"),
                           "hp" if saved_w is None else "fwd")
        return y.to(x.dtype).reshape(*shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        c: _Ctx = ctx.c
        r = c.recipe
        _A_MEMO.clear()                 # the forward's x operands are not needed again
        xs, ws, dge, *stored = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        if not _dy_stays_bf16(c, dy2):
            dy2 = dy2.to(torch.float32)
        n_fwd = r.fprop.hadamard_n
        dx = dw = db = None
        pre = _dual_dy(c, dy2) if ctx.needs_input_grad[0] and ctx.needs_input_grad[1] \
            else None
        if ctx.needs_input_grad[0]:
            # dx = dy . W: B operand is W^T [K, N] (hp, or the forward copy in the forward basis)
            dx = run_gemm(c, "dgrad", dy2, ws.t(), pre_a=None if pre is None else pre[0])
            if ctx.saved_kinds[1] == "fwd" and ctx.fwd_signs is not None:
                dx = Q.unrotate(dx, n_fwd, ctx.fwd_signs)
            dx = dx[:, :ctx.shape[-1]].to(dy.dtype).reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            if ctx.saved_kinds[0] == "store":
                xs = _load_activation({**ctx.x_store, "codes": stored[0], "scales": stored[1]},
                                      r.save_activations)
            dw = run_gemm(c, "wgrad", dy2.t(), xs.t(), pre_a=None if pre is None else pre[1])
            if ctx.saved_kinds[0] == "fwd" and ctx.fwd_signs is not None:
                dw = Q.unrotate(dw, n_fwd, ctx.fwd_signs)
            dw = dw[:, :ctx.shape[-1]]
            if dge is not None:
                dw = dw * dge
            dw = dw.to(ctx.w_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.to(torch.float32).sum(0)
        if c.capture is not None and "wgrad" in c.capture and "dgrad" in c.capture:
            c.capture["complete"] = True
            c.layer._capture_done = c.capture
            c.layer._capture = None
        return dx, dw, db, None


def _dy_stays_bf16(c: _Ctx, dy2: torch.Tensor) -> bool:
    """Whether the backward hands a bf16 dy to its GEMMs as it is (no fp32 copy of dy; the
    same bits): ms-fp4's dual launch takes it (:func:`_dual_applies`), or both GEMMs quantize
    it with the fused decomp launch, which reads bf16."""
    r = c.recipe
    if dy2.dtype != torch.bfloat16 or dy2.ndim != 2:
        return False
    if _dual_applies(c, dy2):
        return True
    return r.dgrad.hadamard == "none" and r.wgrad.hadamard == "none" and \
        r.dgrad.gemm == "matmul" and r.wgrad.gemm == "matmul" and \
        _decomp_takes(c, r.dgrad.a, dy2) and _decomp_takes(c, r.wgrad.a, dy2.t())


def _dual_applies(c: _Ctx, dy2: torch.Tensor) -> bool:
    """Whether :func:`_dual_dy` quantizes this dy (fp32 or bf16, read as it is)."""
    r = c.recipe
    spec = r.dgrad.a
    if c.backend != "triton" or c.capture is not None or \
            spec != r.wgrad.a or spec.fmt is None or spec.rounding == "sr" or \
            spec.scaling != "block" or spec.macro is not None or spec.outlier is not None or \
            spec.clamp_quantile is not None or r.dgrad.hadamard != "none" or \
            r.wgrad.hadamard != "none" or get_format(spec.fmt).is_nvfp4 or \
            r.dgrad.gemm != "matmul" or r.wgrad.gemm != "matmul" or \
            dy2.ndim != 2 or dy2.shape[0] % 32 or dy2.shape[1] % 32 or \
            dy2.dtype not in (torch.float32, torch.bfloat16) or not dy2.is_contiguous():
        return False
    tf = Q.triton_module("triton_fast", dy2.device)
    prof = Q._profile(spec).name
    src = "bfloat16" if dy2.dtype == torch.bfloat16 else "float32"
    return tf.supports(spec.fmt, prof, src, -1) and tf.supports(spec.fmt, prof, src, 0)


def _dual_dy(c: _Ctx, dy2: torch.Tensor):
    """(Dgrad's A, Wgrad's A) from one read of dy [M, N] (fp32, or bf16 as it is) where both
    GEMMs quantize dy the same plain MX way (ms-fp4's E5M2): triton_fast.quantize_dequantize
    with rows and columns, bit for bit the two separate quantizations (the second of dy^T,
    which it reads down the columns instead of copying the transpose). None where that does
    not apply (:func:`_dual_applies`): another backend, a capture step (its records take the
    separate path), a rotation, SR, a correction, NVFP4, a GEMM other than the matmul, or a
    ragged block."""
    if not _dual_applies(c, dy2):
        return None
    spec = c.recipe.dgrad.a
    tf = Q.triton_module("triton_fast", dy2.device)
    prof = Q._profile(spec).name
    with Q._section(dy2.device):
        # values only: a matmul GEMM multiplies nothing else, and no record is made here
        rv, cv, _ = tf.quantize_dequantize(dy2, spec.fmt, prof, rows=True, cols=True,
                                           out_dtype=torch.float32)
    ex16, ex32 = Q.bf16_exact(spec), Q.tf32_exact(spec)
    return (Q.QOperand(rv, None, None, None, None, {}, ex16, ex32),
            Q.QOperand(cv.t(), None, None, None, None, {}, ex16, ex32))


def _fwd_value(q, t):
    """The forward operand as the backward re-uses it (dequantized, fp32)."""
    return t if q is None else q.full()


def _store_activation(x2: torch.Tensor, fmt: str, backend: str):
    """x [T, K] as MX codes + scales along K (what the backward keeps; packed for FP4)."""
    from mxkernels import torch_emu as te
    spec = OperandSpec(fmt=fmt)
    q = Q.quantize_operand(x2.to(torch.float32).contiguous(), spec, backend)
    codes = q.codes
    packed = get_format(fmt).element.bits == 4 and x2.shape[-1] % 2 == 0
    if packed:
        codes = te.pack(codes, fmt)
    return {"scales": q.scales, "codes": codes, "packed": packed, "k": x2.shape[-1]}


def _load_activation(st: dict, fmt: str) -> torch.Tensor:
    from mxkernels import torch_emu as te
    codes = te.unpack(st["codes"], fmt, st["k"]) if st["packed"] else st["codes"]
    with Q._section(codes.device):
        return te.dequantize(st["scales"], codes, fmt, axis=-1).view(torch.float32)


# ---- the fast path: one fake-quantization launch per tensor --------------------------------
FAST_PATH = [True]      # tests switch it off to compare with the generic path


def _plain(spec: OperandSpec, source: str = "hp") -> bool:
    """An MX operand the fused fake-quantization kernels implement: a fast-kernel format and
    profile, RNE or SR, from ``source`` (high precision, or "fwd": the forward's copy), block
    scaling, no corrections."""
    if spec.fmt is None or spec.rounding not in ("rne", "sr") or spec.source != source or \
            spec.scaling != "block" or spec.macro is not None or spec.outlier is not None or \
            spec.clamp_quantile is not None or spec.dge_k is not None or \
            spec.dge_const is not None:
        return False
    if get_format(spec.fmt).is_nvfp4:
        from mxkernels.triton_train_nvfp4 import supports as nvfp4_supports
        return nvfp4_supports(spec.profile)
    from mxkernels.triton_fast import supports
    return supports(spec.fmt, spec.profile, "float32")


def _unquantized(spec: OperandSpec) -> bool:
    """An operand the GEMM reads from the high-precision tensor itself (not the forward copy)."""
    return spec.fmt is None and spec.source == "hp"


@dataclasses.dataclass(frozen=True)
class Orient:
    """One quantized orientation of a tensor in a fast plan: its operand spec, the GEMM (index
    into GEMMS) and side (0: A, 1: B) it feeds, and that GEMM's Hadamard kind and size ("none",
    0 when it does not rotate). ``fused``: it needs the fused kernel (rotation or SR)."""

    spec: OperandSpec
    gemm: int
    side: int
    hadamard: str = "none"
    n: int = 0

    @property
    def nvfp4(self) -> bool:
        return self.spec.fmt == "nvfp4"

    @property
    def fused(self) -> bool:
        return self.n > 0 or self.spec.rounding == "sr" or self.nvfp4


def fast_plan(recipe) -> dict | None:
    """The fast path's plan for ``recipe``, or None when the generic path must run it.

    Eligible: every one of the six operands either unquantized (fmt None, read from the
    high-precision tensor) or quantized by an MX format and profile that the fast kernels
    implement, RNE or SR, from high precision, block scaling, no corrections or activation
    storage, plain "matmul" GEMMs; a GEMM may rotate (any Hadamard kind, n = 16 or 32) when
    both its operands are quantized; at least one operand quantized. Dgrad's W and Wgrad's x
    may also be quantized from the forward's copy (source "fwd", Quartet's double
    quantization) when the forward quantized that operand and its rotation, if any, has fixed
    signs ("deterministic" or "fixed_sign"): the forward keeps its dequantized values
    (``plan["fw"]`` / ``plan["fx"]``: the orientation the backward quantizes them in) and the
    backward rotates dx / dW back through the forward rotation (``plan["unrot"]``: its size,
    0 for none), as the generic path does. A tensor with a quantized
    orientation needs one launch that writes the dequantized (exact, bf16) values of the
    orientations that are quantized: x along K (fprop) and T (wgrad), W along K (fprop) and N
    (dgrad), dy along N (dgrad) and T (wgrad); a rotated orientation is rotated along the same
    axis and SR draws its words in the kernel (``triton_train.qdq``). An unquantized
    orientation is the tensor itself, cast to bf16 under bf16 autocast (what nn.Linear
    multiplies there) and to fp32 otherwise (what the generic path multiplies). The plan maps
    "x", "w", "dy" to (row, column) :class:`Orient`, None for an unquantized orientation."""
    return _fast_plan(recipe)


@functools.lru_cache(maxsize=64)
def _fast_plan(recipe) -> dict | None:
    from mxkernels.triton_train import ROT_SIZES
    if recipe.save_activations not in (None, "mxfp4"):
        return None
    if recipe.save_activations is not None and (
            recipe.wgrad.hadamard != "none" or not _plain(recipe.wgrad.b) or
            recipe.wgrad.b.rounding != "rne"):
        return None           # Wgrad's x is re-quantized from the FP4 copy: plain RNE only
    fp = recipe.fprop
    # the forward copies a backward operand may be quantized from: (gemm, fprop's side)
    fwd_of = {("dgrad", "b"): fp.b, ("wgrad", "b"): fp.a}
    any_q = False
    for gemm in GEMMS:
        g = getattr(recipe, gemm)
        if g.gemm not in ("matmul", "fp8"):
            return None

        def ok(spec, side):
            if spec.source == "fwd" and spec.fmt is not None:
                fo = fwd_of.get((gemm, side)) or OperandSpec()
                return _plain(spec, "fwd") and _plain(fo) and fo.fmt != "nvfp4" and \
                    recipe.save_activations is None and \
                    fp.hadamard in ("none", "deterministic", "fixed_sign")
            return _plain(spec)
        if g.hadamard != "none" and (g.hadamard_n not in ROT_SIZES or not ok(g.a, "a") or
                                     not ok(g.b, "b")):
            return None
        for spec, side in ((g.a, "a"), (g.b, "b")):
            if ok(spec, side):
                any_q = True
            elif not _unquantized(spec):
                return None
    if not any_q:
        return None

    def o(gemm, side):
        g = getattr(recipe, gemm)
        spec = g.b if side else g.a
        if spec.fmt is None:
            return None
        rot = g.hadamard != "none"
        return Orient(spec, _GEMM_INDEX[gemm], side, g.hadamard, g.hadamard_n if rot else 0)

    def hp(gemm, side):          # the orientation quantized from the high-precision tensor
        return None if getattr(recipe, gemm).b.source == "fwd" else o(gemm, side)

    def fwd(gemm):               # the orientation quantized from the forward's copy
        return o(gemm, 1) if getattr(recipe, gemm).b.source == "fwd" else None
    plan = {"x": (o("fprop", 0), hp("wgrad", 1)), "w": (o("fprop", 1), hp("dgrad", 1)),
            "dy": (o("dgrad", 0), o("wgrad", 0)), "fx": fwd("wgrad"), "fw": fwd("dgrad")}
    fr = fp.hadamard_n if fp.hadamard != "none" else 0
    plan["unrot"] = {"fx": fr if plan["fx"] else 0, "fw": fr if plan["fw"] else 0}
    # GEMMs on the FP8 carrier (fprop, dgrad, wgrad): their values go through carrier.to_carrier
    plan["fp8"] = tuple(getattr(recipe, gm).gemm == "fp8" for gm in GEMMS)
    us = None if not fr else Q.hadamard_signs(fp.hadamard, fr, seed=recipe.seed, step=0,
                                              tensor_id=0)          # fixed signs
    plan["unrot_signs"] = us if us is not None and (us < 0).any() else None   # None: all +1
    plan["rotates"] = any(o is not None and o.n for k in ("x", "w", "dy") for o in plan[k]) \
        or any(plan[k] is not None and plan[k].n for k in ("fx", "fw"))
    # the shapes decide whether a call can take the fast path (_fast_shapes_ok)
    plan["shaped"] = plan["rotates"] or any(o is not None and o.nvfp4
                                            for k in ("x", "w", "dy") for o in plan[k])
    # FP4-stored activations: the forward keeps x as MXFP4 codes + scales along K (OCP, as
    # the generic path's _store_activation) instead of its Wgrad orientation, which the
    # backward fake-quantizes from the stored bytes (triton_train.qdq_fp4_stored)
    plan["store"] = None
    if recipe.save_activations is not None:
        plan["store"] = plan["x"][1]
        plan["x"] = (plan["x"][0], None)
    # every GEMM on the FP8 carrier with plain OCP MXFP4 RNE operands quantized from high
    # precision: one triton_carrier.qdq_carrier launch per tensor writes both carriers
    # directly (_MXLinearCarriedFn); otherwise the carriers are converted from the values
    plan["carried"] = all(plan["fp8"]) and plan["fx"] is None and plan["fw"] is None and \
        plan["store"] is None and all(
            o is not None and not o.fused and (o.spec.fmt, o.spec.profile) == ("mxfp4", "ocp")
            for k in ("x", "w", "dy") for o in plan[k])
    return plan


def _fast_shapes_ok(plan, T: int, K: int, N: int) -> bool:
    """Whether a rotated orientation's axis is a multiple of its size (x rows: K, x cols: T,
    W rows: K, W cols: N, dy rows: N, dy cols: T), and an NVFP4 orientation's a multiple of
    16; else the generic path pads."""
    for key, (rax, cax) in (("x", (K, T)), ("w", (K, N)), ("dy", (N, T))):
        for o, ax in zip(plan[key], (rax, cax)):
            if o is not None and ((o.n and ax % o.n) or (o.nvfp4 and ax % 16)):
                return False
    for key, ax in (("fx", T), ("fw", N)):        # the forward copies' column orientations
        o = plan[key]
        if o is not None and o.n and ax % o.n:
            return False
    return True


def _triton_fast(device: torch.device):
    """The triton_fast module for ``device`` (compiled, or interpreted for CPU tensors)."""
    return Q.triton_module("triton_fast", device)


_TE16_MASK = [None]
# the training step on the GPU (int64 [1]) while a CUDA graph replays the step: the fused
# launches read it (see use_device_step)
_DEV_STEP: list = [None]


def use_device_step(device) -> torch.Tensor | None:
    """From now on the fused fast-path launches read the step from an int64 tensor on
    ``device`` (returned; :func:`set_step` writes it) instead of taking it as a launch argument,
    so that a CUDA graph holding them follows the step; ``device`` None goes back."""
    _DEV_STEP[0] = None if device is None else torch.zeros(1, dtype=torch.int64, device=device)
    return _DEV_STEP[0]


def _launch_args(o: Orient, layer) -> tuple:
    """(signs, SR seed) of one fused orientation for this call (triton_train.qdq's arguments;
    the generic path's signs and seeds: _Ctx.signs / _Ctx.sr_seed). With a device step the
    step is left to the kernel: ('random', seed, None, tensor_id) and ('mix', state after
    (recipe seed, layer), gemm, side)."""
    r = layer.recipe
    dev = _DEV_STEP[0] is not None
    seed = None
    if o.spec.rounding == "sr":
        seed = ("mix", Q.mix_state(r.seed, layer.layer_id), o.gemm, o.side) if dev else \
            Q.mix_seed(r.seed, layer.layer_id, layer.step, o.gemm, o.side)
    if o.hadamard in ("none", "deterministic"):
        return None, seed
    if o.hadamard == "fixed_sign":
        if o.n == 16:
            if _TE16_MASK[0] is None:
                from mxref.rotate import TE16_SIGNS
                _TE16_MASK[0] = sum(1 << j for j, v in enumerate(TE16_SIGNS) if v < 0)
            return ("mask", _TE16_MASK[0]), seed
        return ("random", int(r.seed), 0, 0), seed
    return ("random", int(r.seed), None if dev else int(layer.step) % 2**32,
            (4 * int(layer.layer_id) + o.gemm) % 2**32), seed


def _launch(t: torch.Tensor, o0, o1, a0, a1, want_q: bool, step):
    """One fused launch for the orientations o0 (rows) and o1 (columns) of t, which share
    format, profile and NVFP4-ness (either may be None): triton_train.qdq (MX) or
    triton_train_nvfp4.qdq (NVFP4, its tensor scales as a 4th item; None for MX)."""
    s = (o0 or o1).spec
    n0 = o0.n if o0 is not None else 0
    n1 = o1.n if o1 is not None else 0
    kw = dict(rows=o0 is not None, cols=o1 is not None, with_codes=want_q, rot_n=max(n0, n1),
              row_rot=n0 > 0, col_rot=n1 > 0, row_signs=a0 and a0[0], col_signs=a1 and a1[0],
              row_sr=a0 and a0[1], col_sr=a1 and a1[1], step=step,
              sr_words=_sr_words(o0) or _sr_words(o1) or 1)
    if s.fmt == "nvfp4":
        return Q.triton_module("triton_train_nvfp4", t.device).qdq(t, s.profile, **kw)
    return (*Q.triton_module("triton_train", t.device).qdq(t, s.fmt, s.profile, **kw), None)


def _sr_words(o) -> int | None:
    """The SR stream's words per Philox counter of an orientation (None: no SR)."""
    return o.spec.sr_words if o is not None and o.spec.rounding == "sr" else None


def _fused(t: torch.Tensor, o0, o1, layer, want_q: bool, args=None):
    """_qdq for a tensor with a fused orientation: one launch (:func:`_launch`) when both
    orientations share format, profile and rotation size (or only one is quantized), else
    one per orientation. ``args``: the orientations' _launch_args when the caller has them.
    Returns (rows, cols, q, tensor scales or None)."""
    a0, a1 = args if args is not None else _orient_args((o0, o1), layer)
    step = _DEV_STEP[0]
    with Q._section(t.device):
        if o0 is None or o1 is None or ((o0.spec.fmt, o0.spec.profile) ==
                                        (o1.spec.fmt, o1.spec.profile) and
                                        (o0.n == o1.n or not o0.n or not o1.n) and
                                        (_sr_words(o0) == _sr_words(o1) or
                                         not _sr_words(o0) or not _sr_words(o1))):
            return _launch(t, o0, o1, a0, a1, want_q, step)
        r, _, qr, tr = _launch(t, o0, None, a0, None, want_q, step)
        _, c, qc, tc = _launch(t, None, o1, None, a1, want_q, step)
    ts = None
    if tr is not None or tc is not None:
        one = torch.ones(1, dtype=torch.float32, device=t.device)
        ts = torch.cat((one if tr is None else tr[:1], one if tc is None else tc[1:]))
    return r, c, (None if not want_q else (qr[0], qr[1], qc[2], qc[3])), ts


def _orient_args(orients, layer) -> tuple:
    """_launch_args of each orientation (None for an unquantized one)."""
    return tuple(None if o is None else _launch_args(o, layer) for o in orients)


def _qdq(t: torch.Tensor, orients, want_q: bool, layer=None, args=None):
    """(row values, col values, codes/scales or None, NVFP4 tensor scales or None) of t
    [R, C] (the tensor scales: fp32 [2], T of the rows and of the columns, when an
    orientation is NVFP4; its values leave T out): rows blocked along C per
    orients[0], columns blocked along R per orients[1]; None for an unquantized orientation
    (None) and no launch when neither is quantized; one launch when both use the same format
    and profile, or when only one orientation is quantized. (Host time matters here: a step
    calls this three times per layer.) Rotated or SR orientations go to :func:`_fused`."""
    o0, o1 = orients
    if o0 is None and o1 is None:
        return None, None, None, None
    if (o0 is not None and o0.fused) or (o1 is not None and o1.fused):
        return _fused(t, o0, o1, layer, want_q, args)
    return (*_qdq_plain(t, o0, o1, want_q), None)


def _qdq_plain(t: torch.Tensor, o0, o1, want_q: bool):
    """_qdq of plain MX orientations (triton_fast.quantize_dequantize)."""
    s0 = None if o0 is None else o0.spec
    s1 = None if o1 is None else o1.spec
    tf = _triton_fast(t.device)
    if s1 is None or s0 is None:
        s = s0 if s1 is None else s1
        if Q._ACTIVE[0] is None:
            return tf.quantize_dequantize(t, s.fmt, s.profile, rows=s1 is None,
                                          cols=s0 is None, with_codes=want_q)
        with Q._section(t.device):
            return tf.quantize_dequantize(t, s.fmt, s.profile, rows=s1 is None,
                                          cols=s0 is None, with_codes=want_q)
    if Q._ACTIVE[0] is None and s0.fmt == s1.fmt and s0.profile == s1.profile:
        return tf.quantize_dequantize(t, s0.fmt, s0.profile, rows=True, cols=True,
                                      with_codes=want_q)
    with Q._section(t.device):
        if (s0.fmt, s0.profile) == (s1.fmt, s1.profile):
            return tf.quantize_dequantize(t, s0.fmt, s0.profile, rows=True, cols=True,
                                          with_codes=want_q)
        r, _, qr = tf.quantize_dequantize(t, s0.fmt, s0.profile, rows=True, cols=False,
                                          with_codes=want_q)
        _, c, qc = tf.quantize_dequantize(t, s1.fmt, s1.profile, rows=False, cols=True,
                                          with_codes=want_q)
    return r, c, (None if not want_q else (qr[0], qr[1], qc[2], qc[3]))


# the last layer input's fake quantization: q_proj, k_proj and v_proj (gate_proj and up_proj)
# read the same tensor; the entry is keyed by the tensor's identity and version counter and
# dropped by any backward
_X_CACHE: dict = {}


def _qdq_input(x: torch.Tensor, x2: torch.Tensor, orients, want_q: bool, layer,
               store: bool = False):
    """_qdq of the layer input plus, with ``store``, its MXFP4 copy along K (scales, packed
    codes): (rows, cols, q, tensor scales, stored or None), shared by the layers that read
    the same x."""
    # a fused orientation's signs and SR stream depend on the layer and step: they join the
    # key, and the launch takes them from here
    dyn = _orient_args(orients, layer) if any(o is not None and o.fused for o in orients) \
        else None
    key = (orients, dyn, store, x.shape, x.dtype, x.device)
    ref = _X_CACHE.get("ref")
    if not want_q and ref is not None and ref() is x and _X_CACHE["version"] == x._version \
            and _X_CACHE["key"] == key:
        return _X_CACHE["out"]
    out = _qdq(x2, orients, want_q, layer, dyn)
    stored = None
    if store:
        with Q._section(x2.device):
            stored = _triton_fast(x2.device).quantize_fast(x2, "mxfp4", "ocp", -1, packed=True)
    out = (*out, stored)
    _X_CACHE.clear()
    if not want_q:
        _X_CACHE.update(ref=weakref.ref(x), version=x._version, key=key, out=out)
    return out


def _mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, autocast: bool) -> torch.Tensor:
    """a @ b with fp32 accumulation. Under bf16 autocast (both operands bf16; what nn.Linear
    does there): the bf16 result cast to ``dtype``. Otherwise bf16 operands give the fp32
    result of the bf16 mm cast to ``dtype``, and an fp32 operand (an unquantized one outside
    bf16 autocast) the fp32 matmul with autocast off, as the generic path computes it."""
    if autocast:
        out = torch.mm(a, b)
        return out if dtype == torch.bfloat16 else out.to(dtype)
    if a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16:
        return _mm_bf16_f32(a, b).to(dtype)
    return _mm_f32(a, b).to(dtype)


def _alpha(ta, tb):
    """The NVFP4 epilogue factor T_a T_b of a GEMM (the generic path's product of the two
    0-dim tensor scales, 1.0 for a side without one), or None when neither side has one."""
    if ta is None and tb is None:
        return None
    return (ta if ta is not None else 1.0) * (tb if tb is not None else 1.0)


def _ts(ts, k: int):
    """Slot k (0: rows, 1: columns) of a qdq's tensor scales as a 0-dim tensor, or None."""
    return None if ts is None else ts[k]


def _gemm(a, b, dtype: torch.dtype, autocast: bool, alpha=None, n: int = 0, signs=None,
          carried: bool = False) -> torch.Tensor:
    """a @ b for the fast path (:func:`_mm`). With an NVFP4 operand its fp32 result is first
    multiplied by ``alpha`` (:func:`_alpha`, as the generic path), and with ``n`` rotated back
    through the forward's rotation along the last axis (size n, fixed signs +-1): the generic
    path's Q.unrotate (butterfly, * 1/sqrt(n), * signs) as one triton_rotate launch (the same
    butterfly) and, with ``signs`` (None when all are +1), an exact sign flip. Such a GEMM keeps its
    fp32 result under autocast too (rounding before the epilogue would change it).
    ``carried``: a and b are FP8 carriers (carrier.to_carrier; b as the [N, K] operand of
    A . B^T), multiplied by carrier.carrier_mm: bf16 output under autocast, else fp32."""
    if carried:
        if not n and alpha is None:
            out = CR.carrier_mm(a, b, torch.bfloat16 if autocast else torch.float32)
            return out if out.dtype == dtype else out.to(dtype)
        out = CR.carrier_mm(a, b, torch.float32)
    elif not n and alpha is None:
        return _mm(a, b, dtype, autocast)
    else:
        out = _mm_out(a, b)
    if alpha is not None:
        if not n and out.is_cuda:        # one pass: fl32(out * alpha), then the cast
            return Q.triton_module("triton_train_nvfp4", out.device).scale_cast(
                out, alpha.reshape(1), dtype)
        out = out * alpha
    if not n:
        return out.to(dtype)
    with Q._section(out.device):
        rot = Q.triton_module("triton_rotate", out.device).rotate
        if signs is None and dtype == torch.bfloat16:   # rotate and round in one pass
            return rot(out.contiguous(), n, round_to="bfloat16", out_dtype=torch.bfloat16)
        out = rot(out.contiguous(), n)
        if signs is not None:                # per n-block along the last axis
            sg = _SIGNS.get(torch.from_numpy(signs.astype(np.float32)), out.device)
            out = (out.reshape(-1, n) * sg).reshape(out.shape)
    return out.to(dtype)


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The fp32 matmul of a and b (autocast off: it would round the result to bf16)."""
    with torch.autocast(device_type=a.device.type, enabled=False):
        return torch.matmul(a.float(), b.float())


def _mm_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The fp32-output GEMM of the values a step multiplied (what a capture records)."""
    if a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16:
        return _mm_bf16_f32(a, b)
    return _mm_f32(a, b)


def _hp(t: torch.Tensor, bf16: bool) -> torch.Tensor:
    """An unquantized operand as the fast path multiplies it: cast to bf16 under bf16 autocast
    (nn.Linear's operand there), else to fp32 (the generic path's)."""
    return t.to(torch.bfloat16 if bf16 else torch.float32).contiguous()


def _rec_operand(t, q, side_rows: bool, values, sr_seed=None, ts=None):
    """A capture record of an operand blocked along its last axis, from a qdq of the tensor
    (side_rows: the operand is t itself (row blocks), else t^T (column blocks)). ``q`` None:
    an unquantized operand, recorded as its high-precision input and the values multiplied.
    ``ts``: an NVFP4 orientation's tensor scale (0-dim tensor; its values leave it out)."""
    if q is None:
        if side_rows:
            return {"input": _np(t.float()), "values": _np(values)}
        return {"input": _np(t.float().t()), "values": _np(values.t())}
    tsv = None if ts is None else float(ts)
    if side_rows:
        return {"input": _np(t.float()), "scales": _np(q[0]), "codes": _np(q[1]),
                "sr_seed": sr_seed, "tensor_scale": tsv, "row_scale": None, "extra": {},
                "values": _np(values)}
    return {"input": _np(t.float().t()), "scales": _np(q[2].t()), "codes": _np(q[3].t()),
            "sr_seed": sr_seed, "tensor_scale": tsv, "row_scale": None, "extra": {},
            "values": _np(values.t())}


def _rec_out(a: torch.Tensor, b: torch.Tensor, alpha):
    """The fp32 GEMM output a capture records: the product of the values multiplied, times
    the NVFP4 epilogue factor (before any rotation back), as the generic path records it."""
    out = _mm_out(a, b)
    return _np(out if alpha is None else out * alpha)


def _seed(o, layer):
    """The SR seed an orientation's record carries (None: RNE or unquantized), computed on the
    host as the generic path does (_Ctx.sr_seed), whatever the launch took."""
    if o is None or o.spec.rounding != "sr":
        return None
    return Q.mix_seed(layer.recipe.seed, layer.layer_id, layer.step, o.gemm, o.side)


def _rec_carried(ca, cb):
    """The fp32 output a capture records for a GEMM on the FP8 carrier: the same carriers
    multiplied with an fp32 result (before any rotation back)."""
    return _np(CR.carrier_mm(ca, cb, torch.float32))


def _x_carrier(xr: torch.Tensor):
    """The FP8 carrier of the layer input's Fprop values, shared like the values themselves
    by the layers that read the same x (_qdq_input's cache)."""
    c = _X_CACHE.get("carrier")
    if c is not None and c[0] is xr:
        return c[1]
    ca = CR.to_carrier(xr, 1)
    out = _X_CACHE.get("out")
    if out is not None and out[0] is xr:
        _X_CACHE["carrier"] = (xr, ca)
    return ca


def _rec_gemm(layer, gemm: str, a: dict, b: dict, out, spec, carriers=None) -> dict:
    """A capture record of one fast-path GEMM; a rotating GEMM also records the host copy of
    its signs and its size, as the generic path does; a GEMM on the FP8 carrier records both
    carriers (carrier.record) with its operands."""
    if carriers is not None:
        a["carrier"], b["carrier"] = CR.record(carriers[0]), CR.record(carriers[1])
    rec = {"a": a, "b": b, "out": out, "spec": spec}
    if spec.hadamard != "none":
        r = layer.recipe
        rec["signs"] = Q.hadamard_signs(spec.hadamard, spec.hadamard_n, seed=r.seed,
                                        step=int(layer.step),
                                        tensor_id=4 * int(layer.layer_id) + _GEMM_INDEX[gemm])
        rec["hadamard_n"] = spec.hadamard_n
    return rec


def _qpart(q, rows: bool):
    """The codes/scales of one orientation of a qdq's ``q``, or None when it is unquantized."""
    if q is None or (q[0] if rows else q[2]) is None:
        return None
    return q


def _keep(ctx, layer, plan, bf: bool, shape, x, weight, bias) -> None:
    """What a fast-path backward needs of its forward, besides the saved tensors."""
    ctx.layer, ctx.plan, ctx.autocast, ctx.shape = layer, plan, bf, shape
    ctx.x_dtype, ctx.w_dtype, ctx.has_bias = x.dtype, weight.dtype, bias is not None


def _fwd_state(x: torch.Tensor, layer):
    """(shape, x as 2-D, the capture or None, capturing, autocast on, output dtype, bf16
    autocast) of a fast-path forward."""
    cap = layer._capture
    ac = torch.is_autocast_enabled(x.device.type)
    odt = torch.get_autocast_dtype(x.device.type) if ac else x.dtype
    return x.shape, x.reshape(-1, x.shape[-1]), cap, cap is not None, ac, odt, \
        ac and odt == torch.bfloat16


class _MXLinearFastFn(torch.autograd.Function):
    """The recipes of fast_plan on CUDA: per step and layer one fake-quantization launch per
    tensor with a quantized orientation (x, W, dy; x shared by the layers that read it) and
    three GEMMs. Quantized orientations are the launch's exact bf16 values; unquantized ones
    the tensor cast to bf16 under bf16 autocast, else to fp32. Under bf16 autocast the GEMMs
    are bf16 torch.mm (fp32 accumulation, bf16 results cast to the input / weight dtype:
    nn.Linear under autocast); otherwise fp32-output GEMMs (fp32 matmuls where an operand is
    fp32), bit-identical to the generic path. A capture (in-run validation) also records the
    codes and scales from the same launches, the values every GEMM multiplied, the autocast
    state, and fp32-output GEMMs of the same operands (what mxref.check_gemm and the bound
    check)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer, plan):
        shape, x2, cap, want, ac, odt, bf = _fwd_state(x, layer)
        st = plan["store"]
        xr, xc, qx, tsx, stored = _qdq_input(x, x2, plan["x"], want, layer, st is not None)
        wr, wc, qw, tsw = _qdq(weight, plan["w"], want, layer)
        if xr is None or (xc is None and st is None):
            xh = _hp(x2, bf)
            xr = xh if xr is None else xr
            xc = xh if xc is None and st is None else xc
        if wr is None or wc is None:
            wh = _hp(weight, bf)
            wr = wh if wr is None else wr
            wc = wh if wc is None else wc
        alpha = _alpha(_ts(tsx, 0), _ts(tsw, 0))
        f8 = plan["fp8"]
        if f8[0]:
            ca, cb = _x_carrier(xr), CR.to_carrier(wr, 1)
            y = _gemm(ca, cb, odt, bf, carried=True)
        else:
            y = _gemm(xr, wr.t(), odt, bf, alpha)
        if bias is not None:
            y = y + bias.to(odt)
        # Quartet's double quantization: the backward quantizes the forward's copies
        if plan["fx"] is not None:
            xc = xr
        if plan["fw"] is not None:
            wc = wr
        if want:
            cap["autocast"] = str(odt).replace("torch.", "") if ac else None
            cap["fprop"] = _rec_gemm(
                layer, "fprop",
                _rec_operand(x2, _qpart(qx, True), True, xr, _seed(plan["x"][0], layer),
                             _ts(tsx, 0)),
                _rec_operand(weight, _qpart(qw, True), True, wr, _seed(plan["w"][0], layer),
                             _ts(tsw, 0)),
                _rec_out(xr, wr.t(), alpha) if not f8[0] else _rec_carried(ca, cb),
                layer.recipe.fprop, (ca, cb) if f8[0] else None)
            ctx.cap = (cap, qx, qw, x2.detach(), weight.detach())
        else:
            ctx.cap = None
        ctx.k = x2.shape[-1]
        _keep(ctx, layer, plan, bf, shape, x, weight, bias)
        # with FP4 storage x's Wgrad orientation comes back from its MXFP4 copy
        ctx.save_for_backward(*((xc, wc) if st is None else (stored[0], stored[1], wc)),
                              tsx, tsw)
        return y.reshape(*shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        _X_CACHE.clear()
        want = ctx.cap is not None
        st = ctx.plan["store"]
        qxs = xdeq = None
        *saved, tsx, tsw = ctx.saved_tensors
        if st is None:
            xc, wc = saved
        else:
            sc, cd, wc = saved
            tt = Q.triton_module("triton_train", cd.device)
            with Q._section(cd.device):
                xc, qxs = tt.qdq_fp4_stored(cd, sc, ctx.k, st.spec.fmt, st.spec.profile,
                                            with_codes=want)
            if want:        # what the backward dequantized, for the stored-activation check
                xdeq = _load_activation({"scales": sc, "codes": cd, "packed": True,
                                         "k": ctx.k}, "mxfp4")
        dy2 = dy.reshape(-1, dy.shape[-1])
        dyr, dyc, qd, tsd = _qdq(dy2, ctx.plan["dy"], want, ctx.layer)
        if dyr is None or dyc is None:
            dh = _hp(dy2, ctx.autocast)
            dyr = dh if dyr is None else dyr
            dyc = dh if dyc is None else dyc
        p = ctx.plan
        wf = xf = qfw = qfx = None        # the forward copies and their backward quantization
        if p["fw"] is not None:          # (a forward copy is MX: no tensor scale)
            wf = wc
            _, wc, qfw, tsw = _qdq(wf, (None, p["fw"]), want, ctx.layer)
        if p["fx"] is not None:
            xf = xc
            _, xc, qfx, tsx = _qdq(xf, (None, p["fx"]), want, ctx.layer)
        a_d = _alpha(_ts(tsd, 0), _ts(tsw, 1))
        a_w = _alpha(_ts(tsd, 1), _ts(tsx, 1))
        dx = dw = db = None
        f8 = p["fp8"]
        cd = cw = None                    # the FP8 carriers of the Dgrad and Wgrad operands
        if f8[1] and (ctx.needs_input_grad[0] or want):
            cd = (CR.to_carrier(dyr, 1), CR.to_carrier(wc, 0))
        if f8[2] and (ctx.needs_input_grad[1] or want):
            cw = (CR.to_carrier(dyc, 0), CR.to_carrier(xc, 0))
        if ctx.needs_input_grad[0]:
            dx = _gemm(*(cd or (dyr, wc)), ctx.x_dtype, ctx.autocast, a_d, p["unrot"]["fw"],
                       p["unrot_signs"], carried=cd is not None).reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            dw = _gemm(*(cw or (dyc.t(), xc)), ctx.w_dtype, ctx.autocast, a_w,
                       p["unrot"]["fx"], p["unrot_signs"], carried=cw is not None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.float().sum(0).to(ctx.w_dtype)
        if want:
            cap, qx, qw, x2, w = ctx.cap
            lay = ctx.layer
            r = lay.recipe
            wrec = _rec_operand(w, _qpart(qw, False), False, wc, _seed(p["w"][1], lay),
                                _ts(tsw, 1)) if wf is None else \
                _rec_operand(wf, _qpart(qfw, False), False, wc, _seed(p["fw"], lay))
            cap["dgrad"] = _rec_gemm(
                lay, "dgrad",
                _rec_operand(dy2, _qpart(qd, True), True, dyr, _seed(p["dy"][0], lay),
                             _ts(tsd, 0)),
                wrec, _rec_out(dyr, wc, a_d) if cd is None else _rec_carried(*cd), r.dgrad,
                cd)
            if xf is not None:
                xrec = _rec_operand(xf, _qpart(qfx, False), False, xc, _seed(p["fx"], lay))
            elif st is None:
                xrec = _rec_operand(x2, _qpart(qx, False), False, xc, _seed(p["x"][1], lay),
                                    _ts(tsx, 1))
            else:
                xrec = _rec_operand(xdeq, (None, None, qxs[0], qxs[1]), False, xc, None)
            cap["wgrad"] = _rec_gemm(
                lay, "wgrad",
                _rec_operand(dy2, _qpart(qd, False), False, dyc, _seed(p["dy"][1], lay),
                             _ts(tsd, 1)),
                xrec, _rec_out(dyc.t(), xc, a_w) if cw is None else _rec_carried(*cw),
                r.wgrad, cw)
            cap["complete"] = True
            ctx.layer._capture_done = cap
            ctx.layer._capture = None
            ctx.cap = None
        return dx, dw, db, None, None


def _tcar(device: torch.device):
    """The triton_carrier module for ``device`` (compiled, or interpreted for CPU tensors)."""
    return Q.triton_module("triton_carrier", device)


def _x_carriers(x: torch.Tensor, x2: torch.Tensor):
    """(row, column) carriers of the layer input, shared by the layers that read the same x
    (keyed like _qdq_input's cache: the tensor's identity and version counter)."""
    ref = _X_CACHE.get("cref")
    if ref is not None and ref() is x and _X_CACHE["cversion"] == x._version and \
            _X_CACHE["ckey"] == (x.shape, x.dtype, x.device):
        return _X_CACHE["carriers"]
    with Q._section(x2.device):
        out = _tcar(x2.device).qdq_carrier(x2, rows=True, cols=True)
    _X_CACHE.clear()
    _X_CACHE.update(cref=weakref.ref(x), cversion=x._version,
                    ckey=(x.shape, x.dtype, x.device), carriers=out)
    return out


class _MXLinearCarriedFn(torch.autograd.Function):
    """Recipes whose three GEMMs run on the FP8 carrier with plain OCP MXFP4 RNE operands
    (fast_plan's "carried", e.g. mxfp4-fdw-fp8): per step and layer one
    triton_carrier.qdq_carrier launch per tensor (x shared by the layers that read it) writes
    both orientations' carriers, E4M3 codes + 1x128 power-of-two scales, one byte per element
    (the bf16 fast path writes two), and the three GEMMs are carrier.carrier_mm (FP8 tensor
    cores). The backward keeps the column carriers of x and W (one byte per element each).
    A capture also runs the values launches of _MXLinearFastFn for the operand records (codes,
    scales, values against mxref) and records the carriers the GEMMs used and their fp32
    outputs (validate: carriers against mxref.mxfp4_to_fp8, outputs against the carrier
    bound)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer, plan):
        shape, x2, cap, want, ac, odt, bf = _fwd_state(x, layer)
        cxr, cxc = _x_carriers(x, x2)
        with Q._section(weight.device):
            cwr, cwc = _tcar(weight.device).qdq_carrier(weight, rows=True, cols=True)
        y = _gemm(cxr, cwr, odt, bf, carried=True)
        if bias is not None:
            y = y + bias.to(odt)
        ctx.cap = None
        if want:
            xr, xc, qx, _ = _qdq(x2, plan["x"], True, layer)
            wr, wc, qw, _ = _qdq(weight, plan["w"], True, layer)
            cap["autocast"] = str(odt).replace("torch.", "") if ac else None
            cap["fprop"] = _rec_gemm(layer, "fprop",
                                     _rec_operand(x2, _qpart(qx, True), True, xr),
                                     _rec_operand(weight, _qpart(qw, True), True, wr),
                                     _rec_carried(cxr, cwr), layer.recipe.fprop, (cxr, cwr))
            ctx.cap = (cap, qx, qw, x2.detach(), weight.detach(), xc, wc)
        _keep(ctx, layer, plan, bf, shape, x, weight, bias)
        ctx.k = (cxc.k, cwc.k)
        ctx.save_for_backward(cxc.codes, cxc.scales, cwc.codes, cwc.scales)
        return y.reshape(*shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        from mxkernels.triton_carrier import Carrier
        _X_CACHE.clear()
        want = ctx.cap is not None
        xcc, xcs, wcc, wcs = ctx.saved_tensors
        cxc, cwc = Carrier(xcc, xcs, ctx.k[0]), Carrier(wcc, wcs, ctx.k[1])
        dy2 = dy.reshape(-1, dy.shape[-1])
        with Q._section(dy2.device):
            cdr, cdc = _tcar(dy2.device).qdq_carrier(dy2, rows=True, cols=True)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _gemm(cdr, cwc, ctx.x_dtype, ctx.autocast, carried=True).reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            dw = _gemm(cdc, cxc, ctx.w_dtype, ctx.autocast, carried=True)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.float().sum(0).to(ctx.w_dtype)
        if want:
            cap, qx, qw, x2, w, xc, wc = ctx.cap
            lay, p, r = ctx.layer, ctx.plan, ctx.layer.recipe
            dyr, dyc, qd, _ = _qdq(dy2, p["dy"], True, lay)
            cap["dgrad"] = _rec_gemm(lay, "dgrad",
                                     _rec_operand(dy2, _qpart(qd, True), True, dyr),
                                     _rec_operand(w, _qpart(qw, False), False, wc),
                                     _rec_carried(cdr, cwc), r.dgrad, (cdr, cwc))
            cap["wgrad"] = _rec_gemm(lay, "wgrad",
                                     _rec_operand(dy2, _qpart(qd, False), False, dyc),
                                     _rec_operand(x2, _qpart(qx, False), False, xc),
                                     _rec_carried(cdc, cxc), r.wgrad, (cdc, cxc))
            cap["complete"] = True
            ctx.layer._capture_done = cap
            ctx.layer._capture = None
            ctx.cap = None
        return dx, dw, db, None, None


# ---- model surgery --------------------------------------------------------------------------
def _skipped(name: str, skip) -> bool:
    parts = name.split(".")
    return any(fnmatch.fnmatchcase(p, pat) for p in parts for pat in skip)


_IDX = re.compile(r"^\d+$")


def _block_index(name: str) -> int | None:
    for p in name.split("."):
        if _IDX.match(p):
            return int(p)
    return None


def swap_linears(model: torch.nn.Module, recipe, *, skip=DEFAULT_SKIP, backend: str = "auto"
                 ) -> list[str]:
    """Replace every nn.Linear of ``model`` by an MXLinear sharing its Parameters, in place.

    Skipped: modules with a dotted-name component matching a ``skip`` pattern (fnmatch;
    default lm_head, embeddings, the MoE router ``gate`` (not ``gate_proj``), ``score``), and
    the linears of the first ``recipe.bf16_first`` / last ``recipe.bf16_last`` transformer
    blocks (the first integer component of the name is the block index). Returns the swapped
    qualified names, in module order; their ``layer_id`` is that order's index."""
    recipe = get_recipe(recipe)
    if backend not in BACKENDS:
        raise RecipeError(f"backend={backend!r}; use one of {BACKENDS}")
    cands = [(n, m) for n, m in model.named_modules()
             if type(m) is torch.nn.Linear and not _skipped(n, skip)]
    idx = [_block_index(n) for n, _ in cands]
    known = [i for i in idx if i is not None]
    nblocks = max(known) + 1 if known else 0
    swapped = []
    for (name, lin), bi in zip(cands, idx):
        if bi is not None and (bi < recipe.bf16_first or bi >= nblocks - recipe.bf16_last):
            continue
        new = MXLinear.from_linear(lin, recipe, backend=backend)
        new.layer_id = len(swapped)
        new.name = name
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
        swapped.append(name)
    return swapped


def set_step(model: torch.nn.Module, step: int) -> None:
    """Set ``.step`` on every MXLinear of ``model`` (seeds random signs and SR streams), and
    the device step of :func:`use_device_step` when one is in use."""
    for m in model.modules():
        if isinstance(m, MXLinear):
            m.step = int(step)
    if _DEV_STEP[0] is not None:
        _DEV_STEP[0].fill_(int(step))
