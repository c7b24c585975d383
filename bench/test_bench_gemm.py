"""CPU cost of the GEMM references (mxref.gemm) at M = N = K = 1024.

Target from the GEMM task: the ``exact`` reference for MXFP4 x MXFP4 at 1024^3 in <= 30 s on
2 cores. Also timed: ``block_sequential`` at the same size, the error bound, and the exact
reference on the widest products (MXFP8 E5M2 x E5M2: A is split into 16-bit halves).
Run with ``python -m pytest bench/test_bench_gemm.py --benchmark-json=...``; compilation
happens in the fixture, outside the timed region. Measured, never asserted.
"""
import numba
import numpy as np
import pytest

import mxref
from mxref.gemm import MODES, gemm, gemm_error_bound

SIZE = 1024


def _operands(fmt, m, n, k):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    return mxref.quantize(x, fmt, axis=1), mxref.quantize(w, fmt, axis=1)


@pytest.fixture(scope="module")
def compiled():
    """Compile every kernel once on a small product (first-use compilation is ~15 s)."""
    small = _operands("mxfp4", 4, 4, 64)
    for mode in MODES:
        gemm(*small, mode=mode)
    gemm_error_bound(*small)
    return True


def _info(benchmark, what, fmt):
    benchmark.extra_info.update(what=what, format=fmt, m=SIZE, n=SIZE, k=SIZE,
                                threads=numba.get_num_threads())


@pytest.mark.parametrize("mode", MODES)
def test_gemm_mxfp4(benchmark, compiled, mode):
    a, b = _operands("mxfp4", SIZE, SIZE, SIZE)
    _info(benchmark, f"gemm {mode}, MXFP4 x MXFP4, 1024^3", "mxfp4")
    benchmark.pedantic(gemm, args=(a, b), kwargs={"mode": mode}, rounds=3, iterations=1)


def test_gemm_error_bound_mxfp4(benchmark, compiled):
    a, b = _operands("mxfp4", SIZE, SIZE, SIZE)
    _info(benchmark, "gemm_error_bound (incl. exact), MXFP4 x MXFP4, 1024^3", "mxfp4")
    benchmark.pedantic(gemm_error_bound, args=(a, b), rounds=2, iterations=1)


def test_gemm_exact_e5m2(benchmark, compiled):
    a, b = _operands("mxfp8_e5m2", SIZE, SIZE, SIZE)
    _info(benchmark, "gemm exact, MXFP8 E5M2 x E5M2 (split products), 1024^3", "mxfp8_e5m2")
    benchmark.pedantic(gemm, args=(a, b), rounds=2, iterations=1)


def test_peer_numpy_float32_matmul(benchmark, compiled):
    """The peer in the same run: dequantize to fp32 and multiply with numpy's BLAS (not exact:
    an fp32 accumulation in BLAS order, i.e. what the bound contract checks)."""
    a, b = _operands("mxfp4", SIZE, SIZE, SIZE)
    _info(benchmark, "peer: mxref.dequantize + numpy float32 matmul (BLAS), MXFP4, 1024^3",
          "mxfp4")
    benchmark.pedantic(lambda: a.dequantize() @ b.dequantize().T, rounds=3, iterations=1)
