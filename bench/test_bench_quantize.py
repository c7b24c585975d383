"""CPU quantize throughput: mxref vs torchao to_mx, torch eager and ml_dtypes, same run.

Run with ``bash bench/run_cpu.sh`` (pytest-benchmark; writes bench/results/). Not part of the
test suite: a benchmark is measured, never asserted.
"""
import os

import ml_dtypes
import numpy as np
import pytest

import mxref

torch = pytest.importorskip("torch")

FMTS = {"mxfp4": (ml_dtypes.float4_e2m1fn, "fp4"), "mxfp8_e4m3": (ml_dtypes.float8_e4m3fn, "fp8")}
FP4_MID = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def torch_eager(x, fmt):
    """A plain torch implementation of OCP floor scaling + RNE (what a user writes by hand)."""
    b = x.reshape(-1, 32)
    amax = b.abs().amax(dim=1, keepdim=True)
    e = ((amax.view(torch.int32) >> 23) & 0xFF) - 127
    emax = 2 if fmt == "mxfp4" else 8
    s = torch.clamp(e - emax, -127, 127)
    scale = torch.where(amax == 0, torch.zeros_like(s), s).to(torch.float32)
    v = b * torch.exp2(-scale)
    if fmt == "mxfp8_e4m3":
        codes = v.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    else:
        a = v.abs().clamp(max=6.0)
        mid = torch.tensor(FP4_MID)
        lo = torch.bucketize(a, mid, right=False)
        hi = torch.bucketize(a, mid, right=True)
        idx = torch.where((hi != lo) & (lo % 2 == 1), hi, lo)   # ties to the even code
        codes = idx.to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)
    return (s + 127).to(torch.uint8), codes


@pytest.mark.parametrize("fmt", list(FMTS))
def test_mxref(benchmark, x32, fmt):
    mxref.quantize(x32[:64], fmt)  # compile outside the timed region
    benchmark.extra_info.update(fmt=fmt, impl="mxref", elements=x32.size,
                                loadavg_before=os.getloadavg())
    rounds = int(os.environ.get("MXREF_BENCH_ROUNDS", "10"))
    benchmark.pedantic(mxref.quantize, args=(x32, fmt), rounds=rounds, warmup_rounds=2)


@pytest.mark.parametrize("fmt", list(FMTS))
def test_torchao_to_mx(benchmark, x32, fmt):
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    dt = torch.float4_e2m1fn_x2 if fmt == "mxfp4" else torch.float8_e4m3fn
    t = torch.from_numpy(x32)
    benchmark.extra_info.update(fmt=fmt, impl="torchao.to_mx", elements=x32.size)
    benchmark.pedantic(mx_tensor.to_mx, args=(t, dt, 32), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("fmt", list(FMTS))
def test_torch_eager(benchmark, x32, fmt):
    t = torch.from_numpy(x32)
    benchmark.extra_info.update(fmt=fmt, impl="torch-eager", elements=x32.size)
    benchmark.pedantic(torch_eager, args=(t, fmt), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("fmt", list(FMTS))
def test_ml_dtypes_element_cast(benchmark, x32, fmt):
    dt = FMTS[fmt][0]
    benchmark.extra_info.update(fmt=fmt, impl="ml_dtypes.astype (elements only)", elements=x32.size)
    benchmark.pedantic(x32.astype, args=(dt,), rounds=3, warmup_rounds=1)


def _copy_roofline():
    import numba

    @numba.njit(parallel=True)
    def narrow(bits, out):
        # The memory floor of any quantizer: read 4 bytes, write 1 byte per element.
        for r in numba.prange(bits.shape[0]):
            row = bits[r]
            o = out[r]
            for i in range(row.size):
                o[i] = np.uint8(row[i] >> np.uint32(24))
    return narrow


def test_roofline_copy(benchmark, x32):
    narrow = _copy_roofline()
    bits = x32.view(np.uint32)
    out = np.empty(bits.shape, np.uint8)
    narrow(bits[:2], out[:2])
    benchmark.extra_info.update(fmt="roofline", impl="read fp32 + write u8 (numba)",
                                elements=x32.size, loadavg_before=os.getloadavg())
    rounds = int(os.environ.get("MXREF_BENCH_ROUNDS", "5"))
    benchmark.pedantic(narrow, args=(bits, out), rounds=rounds, warmup_rounds=1)


def test_roofline_copy_fresh_output(benchmark, x32):
    """The same copy into a new array per call, as a quantizer returning fresh codes pays
    (page faults and zeroing of 64 MiB); not the reference the table divides by."""
    narrow = _copy_roofline()
    bits = x32.view(np.uint32)
    narrow(bits[:2], np.empty((2, bits.shape[1]), np.uint8))

    def fresh():
        out = np.empty(bits.shape, np.uint8)
        narrow(bits, out)
        return out
    benchmark.extra_info.update(fmt="roofline", impl="read fp32 + write u8, fresh output (numba)",
                                elements=x32.size, loadavg_before=os.getloadavg())
    benchmark.pedantic(fresh, rounds=5, warmup_rounds=1)
