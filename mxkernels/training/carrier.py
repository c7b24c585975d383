"""GEMMs on the FP8 carrier (recipes whose GemmSpec.gemm is "fp8").

Both operands of such a GEMM are MXFP4 (OCP) values. Each is re-encoded as E4M3 codes with one
power-of-two scale per 128 elements along the contraction axis (mxkernels.triton_carrier: the
contract of mxref.mxfp4_to_fp8 with group=128, exact unless a group's block-scale spread
exceeds 15 + nu, where that group's small elements are rounded once, RNE, as the reference
says) and the GEMM runs on FP8 tensor cores with 1x128 block-wise scales: one
``torch._scaled_mm`` on CUDA. Elsewhere (CPU runs and tests) the product is emulated: the
carrier's values decoded exactly to fp32 and multiplied with fp32 accumulation.

Accumulation: inside one 128-group a Hopper FP8 MMA does not accumulate in plain fp32
(scripts/gpu_fp8_probe.py measures it; docs/training.md states what it found); the in-run
check holds the output to a bound that says so (validate._carrier_bound).
"""
from __future__ import annotations

import torch

from . import quant as Q

__all__ = ["to_carrier", "carrier_mm", "carrier_values", "record"]

E4M3 = torch.float8_e4m3fn
GROUP = 128


def to_carrier(values: torch.Tensor, axis: int = 1):
    """The FP8 carrier of the GEMM operand ``values`` (axis 1: groups along its columns) or
    ``values.T`` (axis 0): a triton_carrier.Carrier."""
    with Q._section(values.device):
        return Q.triton_module("triton_carrier", values.device).carrier(values, axis)


def carrier_values(c) -> torch.Tensor:
    """The exact values [M, K] an operand's carrier holds (fp32: E4M3 times 2^(G - 127); a
    value below 2^-149 cannot occur, see triton_carrier)."""
    v = c.codes.view(E4M3).float()
    s = c.scales.t().repeat_interleave(GROUP, dim=1)
    return (v * s)[:, :c.k]


def carrier_mm(a, b, out_dtype: torch.dtype) -> torch.Tensor:
    """A . B^T [M, N] of two carriers with the same contraction length: torch._scaled_mm with
    1x128 block-wise scales on CUDA (the result rounded once to ``out_dtype``), else the exact
    values multiplied in fp32 and cast."""
    if a.k != b.k:
        raise ValueError(f"carrier_mm: contraction lengths differ ({a.k} and {b.k})")
    if a.codes.is_cuda:
        return torch._scaled_mm(a.codes.view(E4M3), b.codes.view(E4M3).t(),
                                scale_a=a.scales_t, scale_b=b.scales,
                                out_dtype=out_dtype)
    with torch.autocast(device_type=a.codes.device.type, enabled=False):
        return (carrier_values(a) @ carrier_values(b).t()).to(out_dtype)


def record(c) -> dict:
    """What the in-run check compares with mxref.mxfp4_to_fp8: the E4M3 codes [M, K] and the
    group bytes [M, ceil(K / 128)] (numpy uint8)."""
    return {"codes": c.codes[:, :c.k].detach().to("cpu").numpy().copy(),
            "scales": c.group_bytes().to("cpu").numpy().copy()}
