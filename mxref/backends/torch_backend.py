"""``torch``: the vectorized torch emulator (``mxkernels.torch_emu``) as a verify backend.

An implementation of docs/semantics.md written independently of the Numba reference, on any
torch device (``cpu``, ``cuda``, ``cuda:1``, ROCm's ``cuda`` devices). torch is imported lazily:
importing this module does not import torch.
"""
from __future__ import annotations

import numpy as np

from .base import CORE_OPS, Backend, BackendUnavailable, Unsupported

# Profiles for which every L0 and L1 golden file passes bit-exactly (tests/test_torch_backend.py).
CLAIMED_PROFILES = (
    "ocp", "rceil", "torchao_floor", "torchao_rceil", "torchao_ceil", "torchao_even",
    "microxcaling", "triton_kernels_round_up", "triton_kernels_round_down",
    "triton_kernels_ties_up", "rocm_te_mxfp4", "te_mxfp8", "te_nvfp4", "torchao_nvfp4",
)


def _torch():
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        raise BackendUnavailable(f"torch backend: cannot import torch: {e}") from None
    return torch


def _emu():
    from mxkernels import torch_emu
    return torch_emu


class TorchBackend(Backend):
    name = "torch"
    # quantize_nvfp4_sr: torch_emu's NVFP4 with rand_bits, a second implementation of the SR
    # rule beside the reference (the MX SR op is not wired: torch_emu.quantize_mx would do)
    ops = frozenset(CORE_OPS + ("quantize_nvfp4_sr",))
    profiles = CLAIMED_PROFILES

    def __init__(self, device: str | None = None):
        self.device = "cpu" if device is None else str(device)
        self._dev = None
        try:   # the constructor never fails for a missing torch: check_available says why
            self.version = _torch().__version__
        except BackendUnavailable:
            self.version = "unavailable"

    # ---- availability -----------------------------------------------------------------
    def check_available(self) -> None:
        torch = _torch()
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
            torch = _torch()
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
        torch = _torch()
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
        from ..golden.suites_ext import sr_profile
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
        from ..formats import get_format
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
