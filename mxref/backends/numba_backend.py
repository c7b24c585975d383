"""``numba``: the reference itself as a backend (a self-check of the corpus and the harness)."""
from __future__ import annotations

import numpy as np

from .. import __version__
from .. import _kernels as K
from ..formats import get_format
from ..inputs import as_f32_bits
from ..layouts import pack_codes, to_amd_shuffle, to_cublas_blocked
from ..profiles import get_profile
from ..quantize import dequantize, quantize
from .base import GOLDEN_OPS, Backend, BackendUnavailable, Unsupported


def _view(src: np.ndarray, src_dtype: str):
    """(array, source_dtype) as mxref.quantize takes them."""
    if src_dtype == "float32":
        return src.view(np.float32), None
    return src, src_dtype


class NumbaBackend(Backend):
    name = "numba"
    version = __version__
    device = "cpu"
    ops = frozenset(GOLDEN_OPS)
    profiles = ("*",)

    def __init__(self, device: str | None = None):
        if device not in (None, "cpu"):
            raise BackendUnavailable(f"the numba reference runs on the CPU only, not {device!r}")

    def describe(self) -> dict:
        import numba
        return {**super().describe(), "runtime": f"numba {numba.__version__}"}

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        x, sd = _view(src, src_dtype)
        mx = quantize(x, fmt, profile, axis=axis, source_dtype=sd)
        return mx.scales, mx.codes

    def quantize_nvfp4(self, src, *, src_dtype, profile):
        scales = np.empty(src.shape[:-1] + (src.shape[-1] // 16,), np.uint8)
        codes = np.empty(src.shape, np.uint8)
        ts = np.empty(src.shape[0], np.uint32)
        for t in range(src.shape[0]):        # each tensor has its own global amax
            x, sd = _view(src[t], src_dtype)
            mx = quantize(x, "nvfp4", profile, axis=-1, source_dtype=sd)
            scales[t], codes[t] = mx.scales, mx.codes
            ts[t] = np.float32(mx.tensor_scale).view(np.uint32)
        return scales, codes, ts

    def convert(self, src, *, src_dtype, fmt, profile):
        x, sd = _view(src, src_dtype)
        bits, _ = as_f32_bits(x, source_dtype=sd)
        el = get_format(fmt).element
        out = np.empty(bits.size, np.uint8)
        K.encode_elements(np.ascontiguousarray(bits).reshape(-1), 0, el.kernel_params(),
                          get_profile(profile).kernel_params(), out)
        return out.reshape(bits.shape)

    def dequantize(self, scales, codes, *, fmt, profile):
        return dequantize(codes=codes, scales=scales, fmt=fmt, axis=-1).view(np.uint32)

    def pack(self, codes, *, fmt):
        return pack_codes(codes, get_format(fmt).element.bits)

    def scale_layout(self, scales, *, layout):
        if layout == "cublas":
            return to_cublas_blocked(scales).reshape(-1)
        if layout == "amd":
            return to_amd_shuffle(scales).reshape(-1)
        raise Unsupported(f"unknown scale layout {layout!r}")
