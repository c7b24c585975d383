"""``triton`` and ``rocm``: the Triton kernels of ``mxkernels.triton_quant`` as verify backends.

``TritonBackend`` runs on the GPU (torch device ``cuda``: NVIDIA, or AMD through a ROCm build
of torch) or, on a machine without one, through the Triton interpreter when
``TRITON_INTERPRET=1`` is in the environment (device ``cpu (triton interpreter)``).
``RocmBackend`` is the same kernels, required to run on an AMD GPU.

Triton decides interpreter vs compiler when a kernel is *decorated*, i.e. when the kernel module
is imported, not when triton itself is imported. The backend therefore checks which kind of
kernel the imported module holds and, if it is the wrong kind for this run (the module was
imported earlier with another ``TRITON_INTERPRET`` setting), loads a private copy of the module
under the right setting. The kernels call only Triton's core builtins, never the @jit helpers
of ``triton.language.standard`` (``tl.max`` and friends are decorated when *triton* is imported),
so setting ``TRITON_INTERPRET=1`` in ``os.environ`` before the backend is constructed is enough,
whatever was imported before (checked by tests/test_triton_backend.py, which imports triton
first). Setting it in the environment before Python starts works too, of course.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading

import numpy as np

from .. import __version__
from ..errors import MXRefError
from ..formats import FORMATS
from ..profiles import get_profile
from .base import Backend, BackendUnavailable, Unsupported

_KERNEL_MODULE = "mxkernels.triton_quant"
# every kernel module, dependencies first (a later module imports @jit helpers from an earlier
# one with ``from mxkernels.triton_quant import ...``; a private copy resolves those imports to
# the private copies, see _private_copy)
KERNEL_MODULES = ("mxkernels.triton_quant", "mxkernels.triton_fast", "mxkernels.triton_sr",
                  "mxkernels.triton_rotate", "mxkernels.triton_convert", "mxkernels.triton_gemm")
_TRUE = ("1", "true", "on", "yes")
_LOCK = threading.Lock()
_PRIVATE: dict = {}

# Profiles whose every L0 and L1 golden file passes bit-exactly (tests/test_triton_backend.py,
# in the interpreter; the same kernels compile for sm_90/gfx942/gfx950, tests/test_triton_aot.py).
# Stochastic rounding (ops quantize_mx_sr / quantize_nvfp4_sr: each profile with
# rounding="stochastic") is mxkernels/triton_sr.py; no named profile uses it.
_CLAIMED = ("ocp", "rceil", "microxcaling", "torchao_floor", "torchao_rceil", "torchao_ceil",
            "torchao_even", "triton_kernels_round_up", "triton_kernels_round_down",
            "triton_kernels_ties_up", "rocm_te_mxfp4", "te_mxfp8", "te_nvfp4", "torchao_nvfp4")
_OPS = frozenset(("quantize_mx", "quantize_mx_tensor", "quantize_nvfp4", "convert", "dequantize",
                  "pack", "rotate", "quantize_rotated", "gemm", "rotated_gemm", "quantize_mx_sr",
                  "quantize_nvfp4_sr", "mxfp4_to_fp8", "fp8_to_mxfp4", "reblock"))
_SRC_NUMPY = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}


def torch_dtype(name: str):
    return getattr(_torch(), name)


def interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a dependency
        raise BackendUnavailable(f"torch is not importable: {e}") from None
    return torch


class KernelSet:
    """The kernel modules of one kind (all compiled or all interpreted), as one namespace:
    ``ks.mx_quantize`` is looked up in each module in KERNEL_MODULES order; ``ks.modules``
    maps the short module name ("triton_quant", "triton_gemm", ...) to the module."""

    def __init__(self, modules: dict):
        self.modules = modules

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        for mod in self.modules.values():
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(f"no kernel module defines {name!r}")

    def __getitem__(self, short: str):
        return self.modules[short]


def _present(names=KERNEL_MODULES):
    return tuple(n for n in names if importlib.util.find_spec(n) is not None)


_LOADED: dict = {}     # (interpret, TRITON_INTERPRET set) -> KernelSet, once loaded


def load_kernels(interpret: bool) -> KernelSet:
    """Every kernel module with kernels decorated for ``interpret``, as a :class:`KernelSet`.

    Compiled kernels come from the canonical ``mxkernels.triton_*`` modules unless one was
    imported under TRITON_INTERPRET=1; interpreted kernels come from the canonical modules
    only if all were imported that way. Otherwise private copies of the modules are executed
    under the right setting (and kept), so the canonical modules are never turned into
    interpreted kernels behind the back of other code in the process.
    """
    key = (interpret, interpret_requested())
    hit = _LOADED.get(key)
    if hit is not None:         # every op launch asks: the module scan below took ~125 us
        return hit
    with _LOCK:
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise BackendUnavailable(f"triton is not importable: {e}") from None
        try:
            names = _present()
            mods = {n: sys.modules.get(n) for n in names}
            if not interpret and not interpret_requested():
                mods = {n: m if m is not None else importlib.import_module(n)
                        for n, m in mods.items()}
            if all(m is not None and _is_interpreted(m) == interpret for m in mods.values()):
                _LOADED[key] = KernelSet({n.rsplit(".", 1)[1]: m for n, m in mods.items()})
                return _LOADED[key]
            if interpret not in _PRIVATE:
                _PRIVATE[interpret] = _private_copy(interpret, names)
            _LOADED[key] = _PRIVATE[interpret]
            return _LOADED[key]
        except BackendUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
            raise BackendUnavailable(f"cannot load the kernel modules: {type(e).__name__}: {e}") \
                from None


def _private_copy(interpret: bool, names) -> KernelSet:
    """Execute the kernel modules afresh under TRITON_INTERPRET=1/0 (Triton reads the setting
    when @triton.jit decorates a function, so it must hold while the module bodies run). While
    a copy executes, the canonical names in sys.modules point at the copies made so far, so
    ``from mxkernels.triton_quant import _helper`` in a later module binds the copy's helper."""
    prev = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    saved = {n: sys.modules.get(n) for n in names}
    copies = {}
    try:
        for name in names:
            priv = f"{name}__{'interpreted' if interpret else 'compiled'}"
            origin = importlib.util.find_spec(name).origin
            spec = importlib.util.spec_from_file_location(priv, origin)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[priv] = mod
            sys.modules[name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop(priv, None)
                raise
            copies[name.rsplit(".", 1)[1]] = mod
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev
    for mod in copies.values():
        if _is_interpreted(mod) != interpret:
            raise BackendUnavailable(
                "this triton version does not read TRITON_INTERPRET when kernels are decorated; "
                "set TRITON_INTERPRET=1 in the environment before starting Python")
    return KernelSet(copies)


def _is_interpreted(mod) -> bool:
    """Whether the module's @triton.jit kernels were decorated for the interpreter."""
    kinds = {type(v).__name__ for v in vars(mod).values()
             if type(v).__name__ in ("JITFunction", "InterpretedFunction")
             and getattr(getattr(v, "fn", None), "__module__", None) == mod.__name__}
    return kinds == {"InterpretedFunction"}


class TritonBackend(Backend):
    name = "triton"
    version = __version__
    ops = _OPS
    profiles = _CLAIMED

    def __init__(self, device: str | None = None, fast: bool = True):
        self._fast = fast
        self._requested = device
        self._reason = None
        self._tq = None
        self.device = "unavailable"
        self._torch_device = None
        self._arch = None
        self._device_name = None
        try:
            self._setup(device)
        except BackendUnavailable as e:
            self._reason = str(e)
        if self._reason is not None and device is not None:
            raise BackendUnavailable(self._reason)

    # ---- availability ------------------------------------------------------------------
    def _gpu(self):
        torch = _torch()
        try:
            return torch.cuda.is_available() and torch.cuda.device_count() > 0
        except Exception:  # noqa: BLE001 - a broken driver is "no GPU"
            return False

    def _setup(self, device):
        torch = _torch()
        interp = interpret_requested()
        if device is not None and device not in ("cpu", "cuda") and \
                not str(device).startswith("cuda:"):
            raise BackendUnavailable(
                f"{self.name}: device {device!r} is not 'cuda', 'cuda:N' or 'cpu'")
        if interp and device not in (None, "cpu"):
            raise BackendUnavailable(
                f"{self.name}: TRITON_INTERPRET=1 is set, so Triton kernels run in the "
                f"interpreter on the CPU; unset it to run on {device!r}")
        if device == "cpu" or (device is None and interp):
            if not interp:
                raise BackendUnavailable(
                    f"{self.name}: device 'cpu' runs the kernels through the Triton "
                    "interpreter; set TRITON_INTERPRET=1 in the environment")
            self._tq = load_kernels(True)
            self._torch_device = torch.device("cpu")
            self.device = "cpu (triton interpreter)"
            return
        if not self._gpu():
            build = f"torch {torch.__version__}"
            raise BackendUnavailable(
                f"{self.name}: no GPU: torch.cuda.is_available() is False ({build}); the "
                "Triton kernels need a CUDA or ROCm device, or TRITON_INTERPRET=1 in the "
                "environment to run them through the Triton interpreter on the CPU (slow)")
        self._tq = load_kernels(False)
        self._torch_device = torch.device(device or "cuda")
        idx = self._torch_device.index
        idx = torch.cuda.current_device() if idx is None else idx
        props = torch.cuda.get_device_properties(idx)
        self._device_name = props.name
        if torch.version.hip:
            full = getattr(props, "gcnArchName", None) or "gfx?"
            self._arch = full.split(":")[0]            # gfx942:sramecc+:xnack- -> gfx942
            self._runtime = f"ROCm/HIP {torch.version.hip}"
        else:
            self._arch = f"sm_{props.major}{props.minor}"
            self._runtime = f"CUDA {torch.version.cuda}"
        self.device = f"{self._torch_device} ({self._device_name}, {self._arch})"

    @property
    def kernels(self):
        """The kernel module this backend launches (mxkernels.triton_quant or its copy)."""
        self.check_available()
        return self._tq

    @property
    def torch_device(self):
        self.check_available()
        return self._torch_device

    def check_available(self) -> None:
        if self._reason is not None:
            raise BackendUnavailable(self._reason)

    def describe(self) -> dict:
        d = {**super().describe()}
        try:
            import triton
            d["triton"] = triton.__version__
        except ImportError:
            d["triton"] = None
        torch = _torch()
        d["torch"] = torch.__version__
        if self._reason is not None:
            d["unavailable"] = self._reason
        elif self._arch is not None:
            d.update(device_name=self._device_name, arch=self._arch, runtime=self._runtime)
        else:
            d.update(runtime="triton interpreter (TRITON_INTERPRET=1)")
        d["kernels"] = list(_present())
        return d

    # ---- helpers -----------------------------------------------------------------------
    def _ready(self):
        self.check_available()
        return self._tq, _torch()

    def _check_profile(self, profile, fmt):
        if fmt not in FORMATS:
            raise Unsupported(f"unknown format {fmt!r}")
        try:
            pr = get_profile(profile)
            pr.check_format(FORMATS[fmt])
        except MXRefError as e:           # unknown profile, profile/format conflict
            raise Unsupported(f"{type(e).__name__}: {e}") from None
        if pr.rounding == "stochastic":
            raise Unsupported(f"profile {pr.name!r}: stochastic rounding is not implemented "
                              "by the Triton kernels")
        return pr

    def _src(self, src, src_dtype):
        torch = _torch()
        if src_dtype not in _SRC_NUMPY:
            raise Unsupported(f"source dtype {src_dtype!r} is not float32, bfloat16 or float16")
        want = _SRC_NUMPY[src_dtype]
        src = np.asarray(src)
        if src.dtype != want:
            raise Unsupported(f"{src_dtype} source must be {np.dtype(want).name} bit patterns, "
                              f"got {src.dtype}")
        arr = np.ascontiguousarray(src).view(np.int32 if want is np.uint32 else np.int16)
        return torch.from_numpy(arr.copy()).to(self._torch_device)

    @staticmethod
    def _np(t, dtype):
        return np.ascontiguousarray(t.cpu().numpy()).view(dtype)

    def _run(self, fn):
        tq, torch = self._ready()
        try:
            if self._torch_device.type == "cuda":
                with torch.cuda.device(self._torch_device):   # launch on the tensors' GPU
                    return fn(tq)
            return fn(tq)
        except tq.KernelUnsupported as e:
            raise Unsupported(str(e)) from None

    # ---- golden ops --------------------------------------------------------------------
    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        if fmt not in FORMATS or FORMATS[fmt].is_nvfp4:
            raise Unsupported(f"quantize_mx takes an MX format, not {fmt!r}")
        self._check_profile(profile, fmt)
        self.check_available()
        x = self._src(src, src_dtype)
        fast = self._tq.modules.get("triton_fast")
        if fast is not None and x.ndim == 2 and fast.supports(fmt, profile, src_dtype, axis):
            # the production kernel where it applies (the generic one is held to the same
            # files by tests/test_triton_backend.py through TritonBackend(fast=False))
            if self._fast:
                xf = x.view({"float32": torch_dtype("float32"), "bfloat16":
                             torch_dtype("bfloat16"), "float16": torch_dtype("float16")}[
                                 src_dtype])
                scales, codes = self._run(lambda tq: fast.quantize_fast(xf, fmt, profile,
                                                                        axis=axis))
                return self._np(scales, np.uint8), self._np(codes, np.uint8)
        scales, codes = self._run(lambda tq: tq.mx_quantize(x, fmt, profile, axis=axis,
                                                            src_dtype=src_dtype))
        return self._np(scales, np.uint8), self._np(codes, np.uint8)

    def quantize_nvfp4(self, src, *, src_dtype, profile):
        self._check_profile(profile, "nvfp4")
        if np.ndim(src) != 3 or np.shape(src)[-1] % 16:
            raise Unsupported(f"quantize_nvfp4 takes [T, R, C] with C a multiple of 16, got "
                              f"shape {np.shape(src)}")
        x = self._src(src, src_dtype)
        scales, codes, ts = self._run(lambda tq: tq.nvfp4_quantize(x, profile,
                                                                   src_dtype=src_dtype))
        return self._np(scales, np.uint8), self._np(codes, np.uint8), self._np(ts, np.uint32)

    def convert(self, src, *, src_dtype, fmt, profile):
        if fmt not in FORMATS or FORMATS[fmt].is_nvfp4:
            raise Unsupported(f"convert takes an MX format, not {fmt!r}")
        self._check_profile(profile, fmt)
        x = self._src(src, src_dtype)
        codes = self._run(lambda tq: tq.mx_convert(x, fmt, profile, src_dtype=src_dtype))
        return self._np(codes, np.uint8)

    def dequantize(self, scales, codes, *, fmt, profile):
        if fmt not in FORMATS or FORMATS[fmt].is_nvfp4:
            raise Unsupported(f"dequantize takes an MX format, not {fmt!r}")
        torch = _torch()
        scales, codes = np.asarray(scales), np.asarray(codes)
        if scales.dtype != np.uint8 or codes.dtype != np.uint8:
            raise Unsupported("dequantize takes uint8 scales and codes")
        s = torch.from_numpy(np.ascontiguousarray(scales).copy()).to(self._torch_device)
        c = torch.from_numpy(np.ascontiguousarray(codes).copy()).to(self._torch_device)
        out = self._run(lambda tq: tq.mx_dequantize(s, c, fmt, profile, axis=-1))
        return self._np(out, np.uint32)

    def pack(self, codes, *, fmt):
        if fmt not in FORMATS:
            raise Unsupported(f"unknown format {fmt!r}")
        torch = _torch()
        c = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8).copy())
        out = self._run(lambda tq: tq.pack_codes(c.to(self._torch_device), fmt))
        return self._np(out, np.uint8)

    def scale_layout(self, scales, *, layout):
        torch = _torch()
        s = torch.from_numpy(np.ascontiguousarray(scales, dtype=np.uint8).copy())
        out = self._run(lambda tq: tq.scale_layout(s.to(self._torch_device), layout))
        return self._np(out, np.uint8)


    # ---- ops built on the core: the production kernels of mxkernels/triton_*.py ----------
    def _mod(self, short):
        self.check_available()
        mod = self._tq.modules.get(short)
        if mod is None:
            raise Unsupported(f"kernel module mxkernels.{short} is not installed")
        return mod

    def _t(self, arr, dtype=None):
        torch = _torch()
        a = np.ascontiguousarray(arr if dtype is None else np.asarray(arr, dtype))
        return torch.from_numpy(a.copy()).to(self._torch_device)

    def gemm_contract(self, fmt_a, fmt_b):
        """Per format pair: "block_sequential" where the kernel is bit-exact, else "bound"."""
        try:
            return self._mod("triton_gemm").gemm_contract(fmt_a, fmt_b)
        except (Unsupported, BackendUnavailable):
            return "bound"

    def rotate(self, src, *, src_dtype, n, signs, method, round_to):
        if method != "butterfly":
            raise Unsupported(f"rotation method {method!r}: the kernels implement the butterfly "
                              "contract only (the exact rotation is a reference tool)")
        rot = self._mod("triton_rotate")
        x = self._src(src, src_dtype)
        sg = self._t(np.asarray(signs, np.int8))
        out = self._run(lambda tq: rot.rotate(x, int(n), signs=sg, round_to=round_to,
                                              src_dtype=src_dtype))
        return self._np(out, np.uint32)

    def random_signs(self, n, *, seed, step, tensor_id):
        rot = self._mod("triton_rotate")
        out = self._run(lambda tq: rot.random_signs(int(n), seed=int(seed), step=int(step),
                                                    tensor_id=int(tensor_id),
                                                    device=self._torch_device))
        return self._np(out, np.int8)

    def quantize_rotated(self, src, *, src_dtype, fmt, profile, n, signs, round_to):
        self._check_profile(profile, fmt)
        rot = self._mod("triton_rotate")
        x = self._src(src, src_dtype)
        sg = self._t(np.asarray(signs, np.int8))
        if FORMATS[fmt].is_nvfp4:            # each row is its own tensor
            rows = x.shape[0]
            s, c, ts = self._run(lambda tq: rot.quantize_rotated(
                x.reshape(rows, 1, -1), fmt, profile, int(n), signs=sg, round_to=round_to,
                src_dtype=src_dtype))
            return (self._np(s.reshape(rows, -1), np.uint8),
                    self._np(c.reshape(rows, -1), np.uint8),
                    self._np(ts.reshape(-1), np.uint32))
        s, c = self._run(lambda tq: rot.quantize_rotated(x, fmt, profile, int(n), signs=sg,
                                                         round_to=round_to,
                                                         src_dtype=src_dtype))
        return self._np(s, np.uint8), self._np(c, np.uint8)

    def gemm(self, a_scales, a_codes, b_scales, b_codes, *, fmt_a, fmt_b, a_tensor_scale=None,
             b_tensor_scale=None):
        gm = self._mod("triton_gemm")
        torch = _torch()
        ts = (lambda v: None if v is None else
              torch.tensor(np.uint32(v).view(np.float32).item(), dtype=torch.float32,
                           device=self._torch_device))
        contract = self.gemm_contract(fmt_a, fmt_b)
        mode = "block_sequential" if contract == "block_sequential" else "fast"
        args = [self._t(a, np.uint8) for a in (a_scales, a_codes, b_scales, b_codes)]
        y = self._run(lambda tq: gm.mx_gemm(*args, fmt_a, fmt_b,
                                            a_tensor_scale=ts(a_tensor_scale),
                                            b_tensor_scale=ts(b_tensor_scale), mode=mode))
        return self._np(y, np.uint32)

    def rotated_gemm(self, x, w, *, src_dtype, fmt_x, fmt_w, profile, n, signs, round_to):
        """Q(X.D.H) . Q(W.D.H)^T with the fused rotate+quantize kernel and the GEMM kernel."""
        self._check_profile(profile, fmt_x)
        self._check_profile(profile, fmt_w)
        rot, gm = self._mod("triton_rotate"), self._mod("triton_gemm")
        xt, wt = self._src(x, src_dtype), self._src(w, src_dtype)
        sg = self._t(np.asarray(signs, np.int8))
        contract = self.gemm_contract(fmt_x, fmt_w)
        mode = "block_sequential" if contract == "block_sequential" else "fast"

        def go(tq):
            ops = []
            for t, f in ((xt, fmt_x), (wt, fmt_w)):
                if FORMATS[f].is_nvfp4:          # the whole operand is one tensor
                    s, c, tsc = rot.quantize_rotated(t.reshape(1, *t.shape), f, profile, int(n),
                                                     signs=sg, round_to=round_to,
                                                     src_dtype=src_dtype)
                    ops.append((s[0], c[0], tsc.reshape(())))
                else:
                    s, c = rot.quantize_rotated(t, f, profile, int(n), signs=sg,
                                                round_to=round_to, src_dtype=src_dtype)
                    ops.append((s, c, None))
            (sa, ca, ta), (sb, cb, tb) = ops
            return gm.mx_gemm(sa, ca, sb, cb, fmt_x, fmt_w, a_tensor_scale=ta,
                              b_tensor_scale=tb, mode=mode)
        return self._np(self._run(go), np.uint32)

    def quantize_mx_sr(self, src, rbits, *, src_dtype, fmt, profile, axis):
        if fmt not in FORMATS or FORMATS[fmt].is_nvfp4:
            raise Unsupported(f"quantize_mx_sr takes an MX format, not {fmt!r}")
        sr = self._mod("triton_sr")
        x = self._src(src, src_dtype)
        rb = self._t(np.asarray(rbits, np.uint32).view(np.int32))
        s, c = self._run(lambda tq: sr.quantize_sr(x, fmt, profile, axis=axis, rbits=rb,
                                                   src_dtype=src_dtype))
        return self._np(s, np.uint8), self._np(c, np.uint8)

    def quantize_nvfp4_sr(self, src, rbits, *, src_dtype, profile):
        if np.ndim(src) != 3 or np.shape(src)[-1] % 16:
            raise Unsupported(f"quantize_nvfp4_sr takes [T, R, C] with C a multiple of 16, got "
                              f"shape {np.shape(src)}")
        sr = self._mod("triton_sr")
        x = self._src(src, src_dtype)
        rb = self._t(np.asarray(rbits, np.uint32).view(np.int32))
        s, c, ts = self._run(lambda tq: sr.quantize_nvfp4_sr(x, profile, rbits=rb,
                                                             src_dtype=src_dtype))
        return self._np(s, np.uint8), self._np(c, np.uint8), self._np(ts, np.uint32)

    def random_bits(self, n, *, seed, offset):
        sr = self._mod("triton_sr")
        out = self._run(lambda tq: sr.random_bits(int(n), seed=int(seed), offset=int(offset),
                                                  device=self._torch_device))
        return self._np(out, np.uint32)

    def mxfp4_to_fp8(self, scales, codes, *, group):
        cv = self._mod("triton_convert")
        s, c = self._t(scales, np.uint8), self._t(codes, np.uint8)
        g = group if group == "row" else int(group)
        gs, fc, ex = self._run(lambda tq: cv.mxfp4_to_fp8(s, c, group=g))
        return self._np(gs, np.uint8), self._np(fc, np.uint8), self._np(ex, np.bool_)

    def fp8_to_mxfp4(self, group_scales, codes, *, group, profile):
        self._check_profile(profile, "mxfp4")
        cv = self._mod("triton_convert")
        s, c = self._t(group_scales, np.uint8), self._t(codes, np.uint8)
        g = group if group == "row" else int(group)
        ms, mc = self._run(lambda tq: cv.fp8_to_mxfp4(s, c, group=g, profile=profile))
        return self._np(ms, np.uint8), self._np(mc, np.uint8)

    def reblock(self, scales, codes, *, fmt, profile, axis):
        self._check_profile(profile, fmt)
        cv = self._mod("triton_convert")
        s, c = self._t(scales, np.uint8), self._t(codes, np.uint8)
        ms, mc = self._run(lambda tq: cv.reblock(s, c, fmt=fmt, profile=profile, axis=axis))
        return self._np(ms, np.uint8), self._np(mc, np.uint8)


class RocmBackend(TritonBackend):
    """The Triton kernels on an AMD GPU (a ROCm build of torch); nothing else."""

    name = "rocm"

    def _setup(self, device):
        torch = _torch()
        hip = getattr(torch.version, "hip", None)
        ver = ".".join(torch.__version__.split("+")[0].split(".")[:2])
        if not hip:
            kind = "CUDA" if torch.version.cuda else "CPU"
            raise BackendUnavailable(
                f"rocm: no ROCm device: torch {ver} is a {kind} build (torch.version.hip is "
                "None); install a ROCm build of torch on a machine with an AMD GPU")
        if not self._gpu():
            raise BackendUnavailable(
                f"rocm: no ROCm device: torch {ver} is a ROCm {hip} build but "
                "torch.cuda.is_available() is False (no AMD GPU visible: check /dev/kfd, "
                "HIP_VISIBLE_DEVICES and the amdgpu driver)")
        if interpret_requested():
            raise BackendUnavailable(
                "rocm: TRITON_INTERPRET=1 is set; the rocm backend runs compiled kernels on "
                "the AMD GPU only (unset it, or use the 'triton' backend for the interpreter)")
        if device is not None and device != "cuda" and not str(device).startswith("cuda:"):
            raise BackendUnavailable(f"rocm: device {device!r} is not 'cuda' or 'cuda:N' "
                                     "(ROCm builds of torch name AMD GPUs 'cuda')")
        super()._setup(device or "cuda")
