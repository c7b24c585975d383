"""Our kernels as ``mxref verify`` backends: ``torch``, ``triton`` and ``rocm``.

They register through the ``mxref.backends`` entry-point group (pyproject.toml), exactly as a
third party's backend would; mxref itself knows nothing of them. The protocol they implement is
documented in ``mxref/backends/base.py``; they duck-type it (any object with its attributes and
methods will do) and raise its errors, which live in :mod:`mxref.errors`.

``torch``
    The vectorized torch emulator (:mod:`mxkernels.torch_emu`): an implementation of
    docs/semantics.md written independently of the Numba reference, on any torch device
    (``cpu``, ``cuda``, ``cuda:1``, ROCm's ``cuda`` devices).
``triton``
    The Triton kernels of ``mxkernels/triton_*.py``, on the GPU (torch device ``cuda``: NVIDIA,
    or AMD through a ROCm build of torch) or, on a machine without one, through the Triton
    interpreter when ``TRITON_INTERPRET=1`` is in the environment (device
    ``cpu (triton interpreter)``). The kernels are loaded by :mod:`mxkernels.loader`, which
    explains how compiled and interpreted kernels live side by side in one process.
``rocm``
    The same Triton kernels, required to run on an AMD GPU.

Importing this module imports neither torch nor triton.
"""
from __future__ import annotations

import numpy as np

from mxref import __version__
from mxref.backends.base import Backend
from mxref.errors import BackendUnavailable, MXRefError, Unsupported
from mxref.formats import FORMATS, get_format
from mxref.ops import family_ops
from mxref.profiles import get_profile, sr_profile

from .loader import interpret_requested, load_kernels, present_modules

_SRC_NUMPY = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}


def _torch(who: str = ""):
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        raise BackendUnavailable(f"{who}cannot import torch: {e}") from None
    return torch


def torch_dtype(name: str):
    return getattr(_torch(), name)


# ==== torch ==================================================================================
# Profiles for which every L0 and L1 golden file passes bit-exactly (tests/test_torch_backend.py).
TORCH_PROFILES = (
    "ocp", "rceil", "torchao_floor", "torchao_rceil", "torchao_ceil", "torchao_even",
    "microxcaling", "triton_kernels_round_up", "triton_kernels_round_down",
    "triton_kernels_ties_up", "rocm_te_mxfp4", "te_mxfp8", "te_nvfp4", "torchao_nvfp4",
    "gfloat", "triton_kernels_nvfp4", "te_nvfp4_row", "te_nvfp4_2d",
)
TORCH_PROFILES += ("dsv4", "dsv4_vllm")     # amax_floor: torch_emu (tests/test_profile_dsv4.py)
TORCH_PROFILES += ("amd_gfx950",)   # nan_element: torch_emu (tests/test_profile_amd_gfx950.py)
TORCH_PROFILES += ("microxcaling_torch",)  # tests/test_profile_microxcaling_torch.py


def _emu():
    from . import torch_emu
    return torch_emu


class TorchBackend(Backend):
    name = "torch"
    # quantize_nvfp4_sr: torch_emu's NVFP4 with rand_bits, a second implementation of the SR
    # rule beside the reference (the MX SR op is not wired: torch_emu.quantize_mx would do)
    ops = frozenset(family_ops("quantize") + ("quantize_nvfp4_sr",))
    profiles = TORCH_PROFILES

    def __init__(self, device: str | None = None):
        self.device = "cpu" if device is None else str(device)
        self._dev = None
        try:   # the constructor never fails for a missing torch: check_available says why
            self.version = _torch("torch backend: ").__version__
        except BackendUnavailable:
            self.version = "unavailable"

    # ---- availability -----------------------------------------------------------------
    def check_available(self) -> None:
        torch = _torch("torch backend: ")
        try:
            dev = torch.device(self.device)
        except (RuntimeError, ValueError, TypeError) as e:
            raise BackendUnavailable(f"torch backend: bad device {self.device!r}: {e}") from None
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                runtime = "ROCm/HIP" if torch.version.hip else "CUDA"
                raise BackendUnavailable(
                    f"torch backend: device {self.device!r} requested but torch "
                    f"{torch.__version__} sees no {runtime} device")
            index = 0 if dev.index is None else dev.index
            if index >= torch.cuda.device_count():
                raise BackendUnavailable(
                    f"torch backend: device {self.device!r} does not exist "
                    f"({torch.cuda.device_count()} visible)")
        elif dev.type != "cpu":
            try:
                torch.zeros(1, device=dev)
            except Exception as e:
                raise BackendUnavailable(
                    f"torch backend: device {self.device!r} is not usable: {e}") from None
        try:
            _emu()
        except ImportError as e:
            raise BackendUnavailable(f"torch backend: cannot import mxkernels.torch_emu: {e}") \
                from None

    def describe(self) -> dict:
        d = super().describe()
        try:
            torch = _torch("torch backend: ")
        except BackendUnavailable as e:
            return {**d, "error": str(e)}
        runtime = f"torch {torch.__version__}"
        if torch.version.hip:
            runtime += f", hip {torch.version.hip}"
        elif torch.version.cuda:
            runtime += f", cuda {torch.version.cuda}"
        d["runtime"] = runtime
        try:
            dev = torch.device(self.device)
            if dev.type == "cuda" and torch.cuda.is_available():
                d["gpu"] = torch.cuda.get_device_name(dev)
                props = torch.cuda.get_device_properties(dev)
                if torch.version.hip:
                    d["arch"] = getattr(props, "gcnArchName", "") or "unknown"
                else:
                    d["arch"] = f"sm_{props.major}{props.minor}"
        except Exception:  # describe never fails
            pass
        return d

    # ---- helpers ----------------------------------------------------------------------
    def _t(self, arr: np.ndarray):
        torch = _torch("torch backend: ")
        if self._dev is None:
            self._dev = torch.device(self.device)
        a = np.ascontiguousarray(arr)
        if a.dtype in (np.uint32, np.uint16, np.uint8):
            a = a.astype(np.int64)
        return torch.from_numpy(a).to(self._dev)

    @staticmethod
    def _np(t, dtype) -> np.ndarray:
        a = t.cpu().numpy()
        if dtype == np.uint32:
            return np.ascontiguousarray(a.astype(np.int32, copy=False).view(np.uint32))
        return np.ascontiguousarray(a.astype(dtype, copy=False))

    @staticmethod
    def _src_dtype(src_dtype: str) -> str:
        if src_dtype not in ("float32", "bfloat16", "float16"):
            raise Unsupported(f"torch backend: source dtype {src_dtype!r} is not supported")
        return src_dtype

    # ---- golden ops -------------------------------------------------------------------
    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        emu = _emu()
        scales, codes = emu.quantize_mx(self._t(src), self._src_dtype(src_dtype), fmt, profile,
                                        axis=axis)
        return self._np(scales, np.uint8), self._np(codes, np.uint8)

    def quantize_nvfp4(self, src, *, src_dtype, profile):
        emu = _emu()
        scales, codes, ts = emu.quantize_nvfp4(self._t(src), self._src_dtype(src_dtype), profile,
                                               batch_dims=1)
        return self._np(scales, np.uint8), self._np(codes, np.uint8), self._np(ts, np.uint32)

    def quantize_nvfp4_sr(self, src, rbits, *, src_dtype, profile):
        emu = _emu()
        scales, codes, ts = emu.quantize_nvfp4(self._t(src), self._src_dtype(src_dtype),
                                               sr_profile(profile), batch_dims=1,
                                               rand_bits=self._t(np.asarray(rbits, np.uint32)))
        return self._np(scales, np.uint8), self._np(codes, np.uint8), self._np(ts, np.uint32)

    def convert(self, src, *, src_dtype, fmt, profile):
        emu = _emu()
        codes = emu.convert(self._t(src), self._src_dtype(src_dtype), fmt, profile)
        return self._np(codes, np.uint8)

    def dequantize(self, scales, codes, *, fmt, profile):
        emu = _emu()
        if get_format(fmt).is_nvfp4:
            raise Unsupported("torch backend: NVFP4 dequantize needs the tensor scale; "
                              "use mxkernels.torch_emu.dequantize_nvfp4")
        bits = emu.dequantize(self._t(scales), self._t(codes), fmt, axis=-1)
        return self._np(bits, np.uint32)

    def pack(self, codes, *, fmt):
        emu = _emu()
        return self._np(emu.pack(self._t(codes), fmt), np.uint8)

    def scale_layout(self, scales, *, layout):
        emu = _emu()
        if layout not in ("cublas", "amd"):
            raise Unsupported(f"unknown scale layout {layout!r}")
        return self._np(emu.scale_layout(self._t(scales), layout), np.uint8)


# ==== triton and rocm ========================================================================
# Profiles whose every L0 and L1 golden file passes bit-exactly (tests/test_triton_backend.py,
# in the interpreter; the same kernels compile for sm_90/gfx942/gfx950, tests/test_triton_aot.py).
# Stochastic rounding (ops quantize_mx_sr / quantize_nvfp4_sr: each profile with
# rounding="stochastic") is mxkernels/triton_sr.py; no named profile uses it.
TRITON_PROFILES = (
    "ocp", "rceil", "microxcaling", "torchao_floor", "torchao_rceil", "torchao_ceil",
    "torchao_even", "triton_kernels_round_up", "triton_kernels_round_down",
    "triton_kernels_ties_up", "rocm_te_mxfp4", "te_mxfp8", "te_nvfp4", "torchao_nvfp4",
    "gfloat", "triton_kernels_nvfp4")
# (te_nvfp4_row / te_nvfp4_2d: the Triton NVFP4 kernels raise Unsupported, not claimed)
TRITON_PROFILES += ("dsv4", "dsv4_vllm")    # amax_floor: mx_quantize, rotate_mx_quantize
TRITON_PROFILES += ("amd_gfx950",)  # nan_element: mx_quantize, mx_convert (others refuse)
TRITON_PROFILES += ("microxcaling_torch",)  # mx_quantize, rotate_mx_quantize (others refuse)
TRITON_OPS = frozenset(family_ops("quantize") + (
    "rotate", "quantize_rotated", "gemm", "rotated_gemm", "quantize_mx_sr", "quantize_nvfp4_sr",
    "mxfp4_to_fp8", "fp8_to_mxfp4", "reblock"))


class TritonBackend(Backend):
    name = "triton"
    version = __version__
    ops = TRITON_OPS
    profiles = TRITON_PROFILES

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
        """The kernels this backend launches: a :class:`mxkernels.loader.KernelSet`."""
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
        d["kernels"] = list(present_modules())
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

    def timed_quantize_mx(self, x, *, fmt, profile, axis):
        """The timing entry (mxref/backends/base.py): the kernel ``quantize_mx`` runs for this
        input, on device tensors. The production fast kernel where it applies (FP4 codes packed,
        as bench/gpu_kernels.py times it), else the generic kernel (unpacked codes). ``run()``
        launches it once and returns its (scales, codes) device tensors."""
        if fmt not in FORMATS or FORMATS[fmt].is_nvfp4:
            raise Unsupported(f"quantize_mx takes an MX format, not {fmt!r}")
        self._check_profile(profile, fmt)
        tq, torch = self._ready()
        src = {torch.float32: "float32", torch.bfloat16: "bfloat16",
               torch.float16: "float16"}.get(x.dtype)
        if src is None:
            raise Unsupported(f"source tensor dtype {x.dtype} is not float32/bfloat16/float16")
        fast = tq.modules.get("triton_fast")
        if self._fast and fast is not None and x.ndim == 2 and \
                fast.supports(fmt, profile, src, axis):
            packed = FORMATS[fmt].element.bits == 4

            def launch(tq):
                return fast.quantize_fast(x, fmt, profile, axis=axis, packed=packed)
        else:
            def launch(tq):
                return tq.mx_quantize(x, fmt, profile, axis=axis)
        self._run(launch)                   # compile / autotune outside the timed region

        def run():
            return self._run(launch)
        return run

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
