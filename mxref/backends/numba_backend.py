"""``numba``: the reference itself as a backend (a self-check of the corpus and the harness)."""
from __future__ import annotations

import numpy as np

from .. import __version__
from .. import _kernels as K
from ..formats import get_format
from ..inputs import as_f32_bits
from ..layouts import pack_codes, to_amd_shuffle, to_cublas_blocked
from ..ops import OP_NAMES
from ..profiles import get_profile
from ..quantize import dequantize, quantize
from .base import Backend, BackendUnavailable, Unsupported


def _view(src: np.ndarray, src_dtype: str):
    """(array, source_dtype) as mxref.quantize takes them."""
    if src_dtype == "float32":
        return src.view(np.float32), None
    return src, src_dtype


def _ts_shape(src, profile):
    """tensor_scale of quantize_nvfp4 on [T, R, C]: [T], or [T, R] when the profile takes a
    tensor scale per row (nvfp4_amax_scope='row')."""
    return (src.shape[:-1] if get_profile(profile).nvfp4_amax_scope == "row"
            else (src.shape[0],))


class NumbaBackend(Backend):
    name = "numba"
    version = __version__
    device = "cpu"
    ops = frozenset(OP_NAMES)
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
        ts = np.empty(_ts_shape(src, profile), np.uint32)
        for t in range(src.shape[0]):        # each tensor has its own global amax
            x, sd = _view(src[t], src_dtype)
            mx = quantize(x, "nvfp4", profile, axis=-1, source_dtype=sd)
            scales[t], codes[t] = mx.scales, mx.codes
            ts[t] = np.asarray(mx.tensor_scale, np.float32).view(np.uint32)
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

    # ---- ops built on the core (rotations, GEMM, SR, FP8 <-> MXFP4, decomposition) ----------
    gemm_contract = "exact"

    def rotate(self, src, *, src_dtype, n, signs, method, round_to):
        from ..rotate import rotate
        x, sd = _view(src, src_dtype)
        y = rotate(x, n, signs=signs, method=method, round_to=round_to, source_dtype=sd)
        return np.ascontiguousarray(y).view(np.uint32)

    def random_signs(self, n, *, seed, step, tensor_id):
        from ..rotate import sign_vector
        return sign_vector("random", n, seed=seed, step=step, tensor_id=tensor_id)

    def quantize_rotated(self, src, *, src_dtype, fmt, profile, n, signs, round_to):
        from ..rotate import quantize_rotated
        x, sd = _view(src, src_dtype)
        if not get_format(fmt).is_nvfp4:
            mx = quantize_rotated(x, fmt, profile, n, signs=signs, round_to=round_to,
                                  source_dtype=sd)
            return mx.scales, mx.codes
        outs = [quantize_rotated(x[r:r + 1], fmt, profile, n, signs=signs, round_to=round_to,
                                 source_dtype=sd) for r in range(x.shape[0])]
        return (np.concatenate([o.scales for o in outs]).reshape(x.shape[0], -1),
                np.concatenate([o.codes for o in outs]).reshape(x.shape),
                np.array([np.float32(o.tensor_scale).view(np.uint32) for o in outs], np.uint32))

    def gemm(self, a_scales, a_codes, b_scales, b_codes, *, fmt_a, fmt_b, a_tensor_scale=None,
             b_tensor_scale=None):
        from ..gemm import gemm_codes
        ts = lambda t: None if t is None else np.uint32(t).view(np.float32)  # noqa: E731
        y = gemm_codes(a_codes, a_scales, fmt_a, b_codes, b_scales, fmt_b,
                       a_tensor_scale=ts(a_tensor_scale), b_tensor_scale=ts(b_tensor_scale),
                       mode=self.gemm_contract if self.gemm_contract != "bound" else "exact")
        return np.ascontiguousarray(y, np.float32).view(np.uint32)

    def rotated_gemm(self, x, w, *, src_dtype, fmt_x, fmt_w, profile, n, signs, round_to):
        from ..rotated_gemm import rotated_gemm
        (xv, sd), (wv, _) = _view(x, src_dtype), _view(w, src_dtype)
        mode = self.gemm_contract if self.gemm_contract != "bound" else "exact"
        r = rotated_gemm(xv, wv, fmt_x, fmt_w, n=n, profile=profile, signs=signs,
                         round_to=round_to, mode=mode, source_dtype=sd)
        return np.ascontiguousarray(r.y, np.float32).view(np.uint32)

    def macroblock(self, src, *, src_dtype, fmt, profile, macro, macro_scale_dtype):
        from ..corrections import quantize_macroblock
        x, sd = _view(src, src_dtype)
        mb = quantize_macroblock(x, fmt, profile, macro=macro or "row",
                                 macro_scale_dtype=macro_scale_dtype, source_dtype=sd)
        return mb.macro_scale_bits.astype(np.uint32), mb.scales, mb.codes

    def outlier_fallback(self, src, *, src_dtype, fmt, profile, rule):
        from ..corrections import quantize_outlier_fallback
        x, sd = _view(src, src_dtype)
        of = quantize_outlier_fallback(x, fmt, profile, rule=rule, source_dtype=sd)
        return of.flagged.astype(np.uint8), of.mx.scales, of.mx.codes, of.residual_bits

    def quantize_4over6(self, src, *, src_dtype, profile):
        from ..corrections import quantize_nvfp4_4over6
        x, sd = _view(src, src_dtype)
        outs = [quantize_nvfp4_4over6(x[t], profile, source_dtype=sd) for t in range(x.shape[0])]
        return (np.stack([o.scales for o in outs]), np.stack([o.codes for o in outs]),
                np.array([np.float32(o.tensor_scale).view(np.uint32) for o in outs], np.uint32),
                np.stack([np.asarray(o.meta["four_over_six"], np.uint8) for o in outs]))

    def quantize_mx_sr(self, src, rbits, *, src_dtype, fmt, profile, axis):
        from ..profiles import sr_profile
        x, sd = _view(src, src_dtype)
        mx = quantize(x, fmt, sr_profile(profile), axis=axis, source_dtype=sd, rbits=rbits)
        return mx.scales, mx.codes

    def quantize_nvfp4_sr(self, src, rbits, *, src_dtype, profile):
        from ..profiles import sr_profile
        prof = sr_profile(profile)
        scales = np.empty(src.shape[:-1] + (src.shape[-1] // 16,), np.uint8)
        codes = np.empty(src.shape, np.uint8)
        ts = np.empty(_ts_shape(src, prof), np.uint32)
        for t in range(src.shape[0]):        # each tensor has its own global amax
            x, sd = _view(src[t], src_dtype)
            mx = quantize(x, "nvfp4", prof, axis=-1, source_dtype=sd, rbits=rbits[t])
            scales[t], codes[t] = mx.scales, mx.codes
            ts[t] = np.asarray(mx.tensor_scale, np.float32).view(np.uint32)
        return scales, codes, ts

    def random_bits(self, n, *, seed, offset):
        from ..quantize import random_bits
        return random_bits((n,), seed, offset)

    def mxfp4_to_fp8(self, scales, codes, *, group):
        from ..fp8fp4 import mxfp4_to_fp8
        f8 = mxfp4_to_fp8(_mx(codes, scales, "mxfp4", "ocp"), group=group)
        return f8.scales, f8.codes, np.asarray(f8.exact)

    def fp8_to_mxfp4(self, group_scales, codes, *, group, profile):
        from ..fp8fp4 import FP8Tensor, fp8_to_mxfp4
        f8 = FP8Tensor(codes=codes, scales=group_scales, group=group, axis=1, fp8="e4m3",
                       exact=np.ones(group_scales.shape, bool))
        mx = fp8_to_mxfp4(f8, profile=profile)
        return mx.scales, mx.codes

    def reblock(self, scales, codes, *, fmt, profile, axis):
        from ..fp8fp4 import reblock
        out = reblock(_mx(codes, scales, fmt, profile), axis=axis, profile=profile)
        return out.scales, out.codes

    def decompose(self, src, *, src_dtype, fmt, profile):
        """components: uint64 [R, 3, L] (float64 bits of denominator x (scale, dead, grid));
        flags uint8 [R, L]. MX: blocks along the last axis; NVFP4: each row is a [L/16, 16]
        tensor with its own global amax."""
        from ..decompose import decompose
        from ..golden.suites.decompose import decomposition_flags
        x, sd = _view(src, src_dtype)
        if get_format(fmt).is_nvfp4:
            ds = [decompose(x[r].reshape(-1, 16), fmt, profile, source_dtype=sd)
                  for r in range(x.shape[0])]
        else:
            ds = [decompose(x, fmt, profile, axis=-1, source_dtype=sd)]
        L = x.shape[-1]
        comps = np.concatenate([np.stack([d.exact_scale.reshape(-1, L), d.exact_dead.reshape(-1, L),
                                          d.exact_grid.reshape(-1, L)], axis=1) for d in ds])
        flags = np.concatenate([decomposition_flags(d).reshape(-1, L) for d in ds])
        return np.ascontiguousarray(comps).view(np.uint64), flags


def _mx(codes, scales, fmt, profile):
    """An MXTensor around codes/scales with blocks along axis 1."""
    from ..quantize import MXTensor
    f = get_format(fmt)
    return MXTensor(codes=np.ascontiguousarray(codes), scales=np.ascontiguousarray(scales), fmt=f,
                    profile=get_profile(profile), axis=1, block_size=f.block_size)

