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


def _activation_like(m, n, k):
    """An in-run check's fprop at llama-125m width: x [m, k] with outlier channels (per-column
    magnitudes over about 2^+-6) and per-token spread, W [n, k] small; MXFP4 both."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m, k)) * np.exp2(rng.normal(0, 2.0, (1, k))) * \
        np.exp2(rng.normal(0, 1.0, (m, 1)))
    w = rng.standard_normal((n, k)) * 0.02
    return (mxref.quantize(x.astype(np.float32), "mxfp4", axis=1),
            mxref.quantize(w.astype(np.float32), "mxfp4", axis=1))


@pytest.mark.parametrize("rows", ["int64", "kulisch"])
def test_check_gemm_training_shape(benchmark, compiled, rows):
    """mxref.check_gemm as the in-run check calls it (upcast fp32) on [4096, 768] x [768, 768]:
    the exact product and the bound's sum of |a b|, with the rows summed in one int64 each
    where they fit (the default) and, as the peer in the same run, all in the Kulisch
    accumulator (mxref.gemm.INT64_ROWS off)."""
    import sys
    G = sys.modules["mxref.gemm"]
    m, n, k = 4096, 768, 768
    a, b = _activation_like(m, n, k)
    y = (a.dequantize() @ b.dequantize().T).astype(np.float32)
    benchmark.extra_info.update(what=f"check_gemm (upcast fp32), MXFP4 activation-like, "
                                f"{m}x{n}x{k}, {rows} rows", format="mxfp4", m=m, n=n, k=k,
                                threads=numba.get_num_threads())
    G.INT64_ROWS[0] = rows == "int64"
    try:
        mxref.check_gemm(y[:8], mxref.quantize(np.asarray(a.dequantize()[:8], np.float32),
                                               "mxfp4", axis=1), b, upcast="fp32")
        benchmark.pedantic(mxref.check_gemm, args=(y, a, b), kwargs={"upcast": "fp32"},
                           rounds=3, iterations=1)
    finally:
        G.INT64_ROWS[0] = True
