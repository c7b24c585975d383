"""Planted-bug backends: the reference with one classic kernel bug each.

They exist to prove that ``mxref verify`` catches what it claims to catch (tests run each one
and check the exit code, the class named in the report and what ``--detect-profile`` says),
and to show users what a real mismatch report looks like::

    mxref verify --backend mxref.backends.planted:TiesAway --ops quantize_mx --profile ocp

Each claims ``ocp`` (a buggy kernel believes it is right).
"""
from __future__ import annotations

import numpy as np

from .. import _kernels as K
from ..formats import get_format
from ..inputs import as_f32_bits
from ..profiles import get_profile
from ..quantize import quantize
from .numba_backend import NumbaBackend, _view


class _Planted(NumbaBackend):
    profiles = ("ocp",)
    bug = ""

    def describe(self) -> dict:
        return {**super().describe(), "planted_bug": self.bug}


class _KnobBug(_Planted):
    """The reference run with one knob changed behind the caller's back."""

    knobs: dict = {}

    def _prof(self, profile):
        p = get_profile(profile)
        return p.replace(name=f"{p.name}+bug", **self.knobs)

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        x, sd = _view(src, src_dtype)
        mx = quantize(x, fmt, self._prof(profile), axis=axis, source_dtype=sd)
        return mx.scales, mx.codes

    def convert(self, src, *, src_dtype, fmt, profile):
        return super().convert(src, src_dtype=src_dtype, fmt=fmt, profile=self._prof(profile))


class TiesAway(_KnobBug):
    name, bug = "planted-ties-away", "element ties rounded away from zero instead of to even"
    knobs = {"rounding": "ties_away"}


class NanNotPoisoned(_KnobBug):
    name, bug = "planted-nan-not-poisoned", "a NaN in a block is skipped by amax (scale not 0xFF)"
    knobs = {"nan_in_block": "ignore", "inf_in_block": "scale_max"}


class _ScaleBug(_Planted):
    """Recompute each block's scale byte with a wrong rule, then encode the elements with it."""

    def new_scale(self, amax_bits: np.ndarray, ref_scale: np.ndarray, emax: int) -> np.ndarray:
        raise NotImplementedError

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        scales, codes = super().quantize_mx(src, src_dtype=src_dtype, fmt=fmt, profile=profile,
                                            axis=axis)
        f = get_format(fmt)
        el, bs = f.element, f.block_size
        x, sd = _view(src, src_dtype)
        bits, _ = as_f32_bits(x, source_dtype=sd)
        b = np.moveaxis(bits, axis, -1)
        n = b.shape[-1]
        nb = -(-n // bs)
        pad = np.zeros(b.shape[:-1] + (nb * bs,), np.uint32)
        pad[..., :n] = b
        blocks = pad.reshape(-1, nb, bs)
        mag = blocks & np.uint32(0x7FFFFFFF)
        amax = mag.max(axis=-1).reshape(-1)
        s_ref = np.moveaxis(scales, axis, -1).reshape(-1)
        s_new = self.new_scale(amax, s_ref, el.emax)
        c_moved = np.moveaxis(codes, axis, -1).copy()
        rows = c_moved.reshape(-1, n)
        flat_blocks = blocks.reshape(-1, bs)
        fp, pp = el.kernel_params(), get_profile(profile).kernel_params()
        o2 = np.empty(bs, np.uint8)
        for k in np.nonzero((s_new != s_ref) & (s_ref != 0xFF))[0]:
            K.encode_elements(np.ascontiguousarray(flat_blocks[k]), int(s_new[k]) - 127, fp, pp, o2)
            r, j = divmod(int(k), nb)
            hi = min(n, (j + 1) * bs)
            rows[r, j * bs:hi] = o2[:hi - j * bs]
        s_out = np.where(s_ref == 0xFF, s_ref, s_new).astype(np.uint8)
        s_moved = s_out.reshape(np.moveaxis(scales, axis, -1).shape)
        return (np.ascontiguousarray(np.moveaxis(s_moved, -1, axis)),
                np.ascontiguousarray(np.moveaxis(c_moved, -1, axis)))


class Float32Log2Scale(_ScaleBug):
    name = "planted-f32-log2"
    bug = "shared exponent from float32 floor(log2(amax)) (rounds up just below a power of two)"

    def new_scale(self, amax_bits, ref_scale, emax):
        v = amax_bits.view(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.floor(np.log2(v, dtype=np.float32))
        e = np.where(np.isfinite(e), e, -127).astype(np.int64)
        s = np.clip(e - emax + 127, 0, 254)
        return np.where(amax_bits == 0, 0, s).astype(np.int64)


class EmaxOffByOne(_ScaleBug):
    name, bug = "planted-emax-off-by-one", "emax_elem one too large (scale one binade too small)"

    def new_scale(self, amax_bits, ref_scale, emax):
        s = ref_scale.astype(np.int64)
        return np.where((s > 0) & (amax_bits != 0), s - 1, s)


class SwappedNibbles(_Planted):
    name, bug = "planted-swapped-nibbles", "FP4 packing puts element 0 in the high nibble"

    def pack(self, codes, *, fmt):
        p = super().pack(codes, fmt=fmt)
        if get_format(fmt).element.bits == 4:
            p = ((p & 0x0F) << 4) | (p >> 4)
        return p.astype(np.uint8)


class ZeroScaleIsZero(_Planted):
    name, bug = "planted-zero-scale", "dequantize decodes scale byte 0x00 as zero (not 2^-127)"

    def dequantize(self, scales, codes, *, fmt, profile):
        out = super().dequantize(scales, codes, fmt=fmt, profile=profile)
        bs = get_format(fmt).block_size
        zero = np.repeat(scales == 0, bs, axis=-1)[..., :codes.shape[-1]]
        return np.where(zero, out & np.uint32(0x80000000), out).astype(np.uint32)


class GemmZeroScale(_Planted):
    name, bug = ("planted-gemm-zero-scale", "GEMM decodes scale byte 0x00 as zero (tl.dot_scaled "
                 "on Hopper, mx_anchors B9-B12)")

    def gemm(self, a_scales, a_codes, b_scales, b_codes, **kw):
        def zero_blocks(scales, codes, fmt):
            if get_format(fmt).is_nvfp4:
                return codes
            bs = get_format(fmt).block_size
            dead = np.repeat(scales == 0, bs, axis=-1)[..., :codes.shape[-1]]
            return np.where(dead, np.uint8(0), codes).astype(np.uint8)
        return super().gemm(a_scales, zero_blocks(a_scales, a_codes, kw["fmt_a"]), b_scales,
                            zero_blocks(b_scales, b_codes, kw["fmt_b"]), **kw)


class RotateFloat64(_Planted):
    name, bug = ("planted-rotate-f64", "Hadamard rotation summed exactly and rounded once instead "
                 "of the fp32 butterfly contract")

    def rotate(self, src, *, src_dtype, n, signs, method, round_to):
        return super().rotate(src, src_dtype=src_dtype, n=n, signs=signs, method="exact",
                              round_to=round_to)


class SRStrict(_Planted):
    name, bug = ("planted-sr-strict", "stochastic rounding rounds up only when f + r > 2^32 "
                 "(the rule is >=)")

    @staticmethod
    def _strict(rbits):
        return np.maximum(rbits.astype(np.int64) - 1, 0).astype(np.uint32)

    def quantize_mx_sr(self, src, rbits, **kw):
        return super().quantize_mx_sr(src, self._strict(rbits), **kw)

    def quantize_nvfp4_sr(self, src, rbits, **kw):
        return super().quantize_nvfp4_sr(src, self._strict(rbits), **kw)


PLANTED = {"ties_away": TiesAway, "f32_log2_scale": Float32Log2Scale,
           "swapped_nibbles": SwappedNibbles, "nan_not_poisoned": NanNotPoisoned,
           "zero_scale_dequant": ZeroScaleIsZero, "emax_off_by_one": EmaxOffByOne,
           "gemm_zero_scale": GemmZeroScale, "rotate_f64": RotateFloat64, "sr_strict": SRStrict}
