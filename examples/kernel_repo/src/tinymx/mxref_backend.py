"""tinymx as an mxref backend: bit patterns in, bit patterns out (mxref.backends.base.Backend).

Registered under the entry point group ``mxref.backends`` (see pyproject.toml), so
``mxref verify -b tinymx`` and ``pytest --mxref-backend=tinymx`` find it; without installing,
``tinymx.mxref_backend:Backend`` works too. It claims the ocp profile and two formats; the
others raise Unsupported, which mxref reports as unsupported, never as passing.
"""
from __future__ import annotations

import numpy as np

from . import kernels

try:
    from mxref.backends import Unsupported
except ImportError:  # mxref is a test-time dependency only
    class Unsupported(Exception):
        pass


def _values(src, src_dtype):
    if src_dtype == "float32":
        return src.view(np.float32)
    if src_dtype == "float16":
        return src.view(np.float16)
    if src_dtype == "bfloat16":
        return (src.astype(np.uint32) << 16).view(np.float32)
    raise Unsupported(f"source dtype {src_dtype}")


class Backend:
    name = "tinymx"
    version = "0.1.0"
    device = "cpu"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor", "dequantize"})
    profiles = ("ocp",)

    def check_available(self) -> None:
        pass

    def describe(self) -> dict:
        return {"name": self.name, "version": self.version, "device": self.device}

    def claims(self, profile: str) -> bool:
        return profile in self.profiles

    def _format(self, fmt, profile):
        if fmt not in kernels.FORMATS or profile != "ocp":
            raise Unsupported(f"tinymx implements {', '.join(kernels.FORMATS)} under ocp only")

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        self._format(fmt, profile)
        return kernels.quantize_mx(_values(src, src_dtype), fmt, axis)

    def dequantize(self, scales, codes, *, fmt, profile):
        self._format(fmt, profile)
        return kernels.dequantize_mx(scales, codes, fmt).view(np.uint32)
