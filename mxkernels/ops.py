"""The Triton kernels as torch ops (``torch.ops.mxkernels.*``), for the training code and users.

Each op is a ``torch.library.custom_op`` with a fake (meta) implementation, so it works in eager
mode, under ``torch.compile`` and with FakeTensors. The op runs the compiled kernels for CUDA
tensors (NVIDIA, or AMD through a ROCm build of torch) and the Triton interpreter for CPU
tensors (slow: for tests and CI). Codes are returned unpacked (one uint8 per element) unless an
op says otherwise; scales are uint8 E8M0 bytes (E4M3 for NVFP4).

=============================================  ============================================
op                                             returns
=============================================  ============================================
``quantize_mx(x, fmt, profile, axis)``         ``(scales, codes)``
``quantize_dual(x, fmt, profile)``             ``(row_scales, row_codes, col_scales,
                                               col_codes)``: one read, both orientations
``dequantize_mx(scales, codes, fmt, axis)``    float32, codes x 2^(scale - 127)
``quantize_nvfp4(x, profile)``                 ``(scales, codes, tensor_scale)``; x ``[T, ...,
                                               C]``, T tensors
``quantize_sr(x, fmt, profile, axis, seed,     ``(scales, codes)``: stochastic rounding with
offset, words)``                               the Philox stream of ``mxref.random_bits``
                                               (``words`` 1 or 4 per counter)
``quantize_nvfp4_sr(x, profile, seed,          ``(scales, codes, tensor_scale)``: NVFP4 with
offset, words)``                               stochastic rounding; x ``[T, ..., C]``, element
                                               i of x (C order) takes word offset + i (words
                                               1; 4: word i mod 4 of counter offset + i div 4)
``quantize_rotated(x, fmt, profile, n, signs,  ``(scales, codes)``: fused block Hadamard +
round_to)``                                    quantization (butterfly contract)
``gemm(a_scales, a_codes, b_scales, b_codes,   float32 ``[M, N]`` = A . B^T; mode
fmt_a, fmt_b, mode)``                          ``block_sequential`` (bit-exact where the
                                               kernel guarantees it) or ``fast``
=============================================  ============================================
"""
from __future__ import annotations

import torch

from mxref.formats import get_format

__all__ = ["quantize_mx", "quantize_dual", "dequantize_mx", "quantize_nvfp4", "quantize_sr",
           "quantize_nvfp4_sr", "quantize_rotated", "gemm", "kernels"]


def kernels(device: torch.device | str):
    """The kernel modules for tensors on ``device``: compiled for GPUs, interpreted for CPU."""
    from .loader import load_kernels
    return load_kernels(torch.device(device).type == "cpu")


def _nblk(n: int, fmt: str) -> int:
    return -(-n // get_format(fmt).block_size)


def _axis_shape(shape, axis, fmt):
    s = list(shape)
    ax = axis % len(s)
    s[ax] = _nblk(s[ax], fmt)
    return s


# ---- quantize ------------------------------------------------------------------------------
@torch.library.custom_op("mxkernels::quantize_mx", mutates_args=())
def quantize_mx(x: torch.Tensor, fmt: str, profile: str = "ocp",
                axis: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    ks = kernels(x.device)
    fast = ks.modules.get("triton_fast")
    src = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(
        x.dtype)
    if fast is not None and x.ndim == 2 and src and fast.supports(fmt, profile, src, axis):
        return fast.quantize_fast(x, fmt, profile, axis=axis)
    return ks.mx_quantize(x, fmt, profile, axis=axis)


@quantize_mx.register_fake
def _(x, fmt, profile="ocp", axis=-1):
    return (x.new_empty(_axis_shape(x.shape, axis, fmt), dtype=torch.uint8),
            x.new_empty(x.shape, dtype=torch.uint8))


@torch.library.custom_op("mxkernels::quantize_dual", mutates_args=())
def quantize_dual(x: torch.Tensor, fmt: str, profile: str = "ocp"
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    fast = kernels(x.device).modules.get("triton_fast")
    if fast is None:
        raise NotImplementedError("mxkernels.triton_fast is not installed")
    return tuple(fast.quantize_dual(x, fmt, profile))


@quantize_dual.register_fake
def _(x, fmt, profile="ocp"):
    u8 = torch.uint8
    return (x.new_empty(_axis_shape(x.shape, -1, fmt), dtype=u8), x.new_empty(x.shape, dtype=u8),
            x.new_empty(_axis_shape(x.shape, 0, fmt), dtype=u8), x.new_empty(x.shape, dtype=u8))


@torch.library.custom_op("mxkernels::dequantize_mx", mutates_args=())
def dequantize_mx(scales: torch.Tensor, codes: torch.Tensor, fmt: str,
                  axis: int = -1) -> torch.Tensor:
    return kernels(codes.device).mx_dequantize(scales, codes, fmt, axis=axis)


@dequantize_mx.register_fake
def _(scales, codes, fmt, axis=-1):
    return codes.new_empty(codes.shape, dtype=torch.float32)


@torch.library.custom_op("mxkernels::quantize_nvfp4", mutates_args=())
def quantize_nvfp4(x: torch.Tensor, profile: str = "ocp"
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(kernels(x.device).nvfp4_quantize(x, profile))


@quantize_nvfp4.register_fake
def _(x, profile="ocp"):
    return (x.new_empty(_axis_shape(x.shape, -1, "nvfp4"), dtype=torch.uint8),
            x.new_empty(x.shape, dtype=torch.uint8),
            x.new_empty((x.shape[0],), dtype=torch.float32))


@torch.library.custom_op("mxkernels::quantize_sr", mutates_args=())
def quantize_sr(x: torch.Tensor, fmt: str, profile: str = "ocp", axis: int = -1, seed: int = 0,
                offset: int = 0, words: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    sr = kernels(x.device).modules.get("triton_sr")
    if sr is None:
        raise NotImplementedError("mxkernels.triton_sr is not installed")
    return tuple(sr.quantize_sr(x, fmt, profile, axis=axis, seed=seed, offset=offset,
                                words=words))


@quantize_sr.register_fake
def _(x, fmt, profile="ocp", axis=-1, seed=0, offset=0, words=1):
    return (x.new_empty(_axis_shape(x.shape, axis, fmt), dtype=torch.uint8),
            x.new_empty(x.shape, dtype=torch.uint8))


@torch.library.custom_op("mxkernels::quantize_nvfp4_sr", mutates_args=())
def quantize_nvfp4_sr(x: torch.Tensor, profile: str = "ocp", seed: int = 0,
                      offset: int = 0,
                      words: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # a sibling of quantize_sr: NVFP4 also returns the tensor scale, which quantize_sr's
    # (scales, codes) schema cannot carry
    sr = kernels(x.device).modules.get("triton_sr")
    if sr is None:
        raise NotImplementedError("mxkernels.triton_sr is not installed")
    return tuple(sr.quantize_nvfp4_sr(x, profile, seed=seed, offset=offset, words=words))


@quantize_nvfp4_sr.register_fake
def _(x, profile="ocp", seed=0, offset=0, words=1):
    return (x.new_empty(_axis_shape(x.shape, -1, "nvfp4"), dtype=torch.uint8),
            x.new_empty(x.shape, dtype=torch.uint8),
            x.new_empty((x.shape[0],), dtype=torch.float32))


@torch.library.custom_op("mxkernels::quantize_rotated", mutates_args=())
def quantize_rotated(x: torch.Tensor, fmt: str, profile: str = "ocp", n: int = 32,
                     signs: torch.Tensor | None = None,
                     round_to: str = "float32") -> tuple[torch.Tensor, torch.Tensor]:
    rot = kernels(x.device).modules.get("triton_rotate")
    if rot is None:
        raise NotImplementedError("mxkernels.triton_rotate is not installed")
    out = rot.quantize_rotated(x, fmt, profile, n, signs="none" if signs is None else signs,
                               round_to=round_to)
    return out[0], out[1]


@quantize_rotated.register_fake
def _(x, fmt, profile="ocp", n=32, signs=None, round_to="float32"):
    return (x.new_empty(_axis_shape(x.shape, -1, fmt), dtype=torch.uint8),
            x.new_empty(x.shape, dtype=torch.uint8))


# ---- GEMM ----------------------------------------------------------------------------------
@torch.library.custom_op("mxkernels::gemm", mutates_args=())
def gemm(a_scales: torch.Tensor, a_codes: torch.Tensor, b_scales: torch.Tensor,
         b_codes: torch.Tensor, fmt_a: str, fmt_b: str,
         mode: str = "block_sequential") -> torch.Tensor:
    gm = kernels(a_codes.device).modules.get("triton_gemm")
    if gm is None:
        raise NotImplementedError("mxkernels.triton_gemm is not installed")
    return gm.mx_gemm(a_scales, a_codes, b_scales, b_codes, fmt_a, fmt_b, mode=mode)


@gemm.register_fake
def _(a_scales, a_codes, b_scales, b_codes, fmt_a, fmt_b, mode="block_sequential"):
    return a_codes.new_empty((a_codes.shape[0], b_codes.shape[0]), dtype=torch.float32)
