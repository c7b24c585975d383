"""MX stochastic rounding on the triton backend of the training path: an SR operand
(profile "<base>+sr") goes to ``torch.ops.mxkernels.quantize_sr`` with the seeded in-kernel
Philox stream, not to host-generated words and the torch emulation.

Until this test, ``quant._mx_block`` looked the SR profile's name ("ocp+sr") up among the
base profiles, missed, and built the words on the host with Numba for every operand of every
step (mxfp4-fdw-sr ran at 70x bf16 on an H100). Expected values come from mxref with the
words of mxref.random_bits(shape, seed, 0); the interpreter runs the kernel on CPU.
"""
import numpy as np
import pytest
import torch

import mxref
from mxkernels.training import OperandSpec
from mxkernels.training import quant as Q
from mxkernels.training.mxlinear import _resolve_backend
from mxref.quantize import random_bits


@pytest.fixture(scope="module", autouse=True)
def _ops():
    _resolve_backend("triton", torch.device("cpu"))      # registers torch.ops.mxkernels.*


def _data(shape, seed):
    g = np.random.default_rng(seed)
    x = (g.standard_normal(shape) * np.exp2(g.integers(-12, 6, shape))).astype(np.float32)
    x[0, :5] = 0.0
    x[0, 5] = -0.0
    x[1, :32] = 0.0                                  # an all-zero block
    return x


@pytest.mark.parametrize("fmt,profile", [("mxfp4", "ocp"), ("mxfp8_e4m3", "ocp"),
                                         ("mxfp6_e2m3", "ocp")])
@pytest.mark.parametrize("shape,seed", [((8, 64), 12345), ((5, 40), 2**62 + 977)])
def test_triton_mx_sr_operand_equals_mxref_and_never_builds_host_words(monkeypatch, fmt, profile,
                                                                        shape, seed):
    """Codes, scales and values bit for bit against mxref fed the explicit words (a ragged row
    of 40, a 63-bit seed); ``sr_bits`` (the host words) and torch_emu's quantize_mx must not
    run on the triton backend."""
    x = _data(shape, 7)
    sr_prof = mxref.get_profile(profile).replace(name=f"{profile}+sr", rounding="stochastic")
    ref = mxref.quantize(x, fmt, sr_prof, axis=-1, rbits=random_bits(shape, seed, 0))

    def boom(*a, **k):
        raise AssertionError("host-side SR words / torch emulation on the triton backend")
    monkeypatch.setattr(Q, "sr_bits", boom)
    monkeypatch.setattr(Q.te, "quantize_mx", boom)
    monkeypatch.setattr(Q, "fast_quantize_mx", boom)
    spec = OperandSpec(fmt=fmt, profile=profile, rounding="sr")
    q = Q.quantize_operand(torch.from_numpy(x), spec, "triton", sr_seed=seed)
    assert np.array_equal(q.codes.cpu().numpy().astype(np.uint8), ref.codes)
    assert np.array_equal(q.scales.cpu().numpy().astype(np.uint8), ref.scales)
    val = mxref.dequantize(codes=ref.codes, scales=ref.scales, fmt=fmt, axis=-1)
    assert np.array_equal(q.values.numpy().view(np.uint32),
                          val.astype(np.float32).view(np.uint32))


def test_triton_mx_sr_depends_on_the_seed():
    """Another seed gives other codes (a kernel ignoring the seed would pass the test above
    only by luck); the scales do not depend on the rounding."""
    x = torch.from_numpy(_data((8, 64), 3))
    spec = OperandSpec(fmt="mxfp4", profile="ocp", rounding="sr")
    a = Q.quantize_operand(x, spec, "triton", sr_seed=1)
    b = Q.quantize_operand(x, spec, "triton", sr_seed=2)
    assert not torch.equal(a.codes, b.codes)
    assert torch.equal(a.scales, b.scales)
