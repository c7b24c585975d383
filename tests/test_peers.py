"""Independent peers: mxref's torchao_* profiles against torchao's own to_mx, bit for bit.

torchao is an independent implementation (torch ops, bit tricks of its own); agreement on
every scale byte and every code, for every scale mode and format it supports, is evidence
for both the profile definitions and the kernels. Skipped when torchao is not installed.
"""
import numpy as np
import pytest

import mxref

torch = pytest.importorskip("torch")
mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
config = pytest.importorskip("torchao.prototype.mx_formats.config")

MODES = {"torchao_floor": "FLOOR", "torchao_rceil": "RCEIL", "torchao_ceil": "CEIL",
         "torchao_even": "EVEN"}
DTYPES = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2,
          "mxfp4": torch.float4_e2m1fn_x2, "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2"}


def inputs():
    g = torch.Generator().manual_seed(0)
    gauss = torch.randn(128, 512, generator=g) * torch.exp2(torch.randint(-20, 20, (128, 1), generator=g).float())
    # TestFloat-style: every bf16 exponent with boundary significands, shuffled into blocks
    e = torch.arange(1, 255, dtype=torch.int32).repeat_interleave(16)
    m = torch.tensor([0, 1, 0x3F, 0x40, 0x41, 0x60, 0x70, 0x7E, 0x7F, 0x20, 0x10, 0x30, 0x50, 0x58, 0x68, 0x78],
                     dtype=torch.int32).repeat(254)
    s = torch.randint(0, 2, e.shape, generator=g, dtype=torch.int32)
    bits = (s << 15) | (e << 7) | m
    perm = torch.randperm(bits.numel(), generator=g)
    special = bits[perm].to(torch.int16).view(torch.bfloat16).reshape(-1, 32)
    return {"gauss_bf16": gauss.to(torch.bfloat16), "gauss_fp32": gauss, "boundary_bf16": special}


def golden_inputs(fmt, dtype):
    """Every coverage class of the committed L1 corpus (ties, zero and Inf blocks, E8M0 edges)."""
    from pathlib import Path

    from mxref.golden.store import column_numpy, read_golden
    path = Path(__file__).resolve().parents[1] / f"golden/L1/quantize_mx/{fmt}__ocp__{dtype}.arrow"
    src = np.array(column_numpy(read_golden(path), "src_bits"))   # writable copy for torch
    if dtype == "bfloat16":
        return torch.from_numpy(src.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(src.view(np.float32))


@pytest.mark.parametrize("profile", list(MODES))
@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("name", ["gauss_bf16", "gauss_fp32", "boundary_bf16", "golden_bfloat16",
                                  "golden_float32"])
def test_torchao_to_mx_bit_exact(profile, fmt, name):
    x = golden_inputs(fmt, name.split("_")[1]) if name.startswith("golden") else inputs()[name]
    mode = getattr(config.ScaleCalculationMode, MODES[profile])
    scale, data = mx_tensor.to_mx(x, DTYPES[fmt], 32, mode)
    ours = mxref.quantize(x, fmt, profile)
    theirs_s = scale.view(torch.uint8).numpy().reshape(ours.scales.shape)
    np.testing.assert_array_equal(theirs_s, ours.scales)
    finite = np.repeat(ours.scales != 0xFF, 32, axis=-1)
    theirs_c = data.view(torch.uint8).numpy()
    if fmt == "mxfp4":
        theirs_c = mxref.layouts.unpack_codes(theirs_c.reshape(x.shape[0], -1), 4, x.shape[1])
    theirs_c = theirs_c.reshape(ours.codes.shape)
    np.testing.assert_array_equal(np.where(finite, theirs_c, 0), np.where(finite, ours.codes, 0))


def test_peer_check_can_fail():
    """The same comparison catches a planted scale-rule swap."""
    x = inputs()["gauss_bf16"]
    scale, _ = mx_tensor.to_mx(x, torch.float8_e4m3fn, 32, config.ScaleCalculationMode.RCEIL)
    ours = mxref.quantize(x, "mxfp8_e4m3", "torchao_floor")
    assert (scale.view(torch.uint8).numpy().reshape(ours.scales.shape) != ours.scales).any()
