"""Opt-in (-m exhaustive): all 2^32 fp32 patterns through every element conversion at scale
2^0, against ml_dtypes' RNE casts wherever their semantics coincide (finite, |v| <= max
normal, since ml_dtypes FP8 is non-saturating and FP4/FP6 NaN handling differs)."""
import ml_dtypes
import numpy as np
import pytest

import mxref
from mxref import _kernels as K

PEERS = {"e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn,
         "e3m2": ml_dtypes.float6_e3m2fn, "e4m3": ml_dtypes.float8_e4m3fn,
         "e5m2": ml_dtypes.float8_e5m2}
CHUNK = 1 << 26


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(PEERS))
def test_all_fp32_patterns_vs_ml_dtypes(name):
    el = mxref.ELEMENT_FORMATS[name]
    fp = el.kernel_params()
    pp = mxref.get_profile("ocp").kernel_params()
    limit = np.float32(float(el.max_normal))
    out = np.empty(CHUNK, np.uint8)
    for start in range(0, 1 << 32, CHUNK):
        bits = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        K.encode_elements(bits, 0, fp, pp, out)
        v = bits.view(np.float32)
        keep = np.isfinite(v) & (np.abs(v) <= limit)
        theirs = v[keep].astype(PEERS[name]).view(np.uint8)
        bad = np.flatnonzero(out[keep] != theirs)
        assert bad.size == 0, (f"{name}: first mismatch input 0x{int(bits[keep][bad[0]]):08x} "
                               f"mxref 0x{out[keep][bad[0]]:02x} ml_dtypes 0x{theirs[bad[0]]:02x}")


def test_exhaustive_harness_on_one_chunk_can_fail():
    """The comparison used above detects a planted ties-away rounding."""
    el = mxref.ELEMENT_FORMATS["e2m1"]
    away = mxref.get_profile("microxcaling").kernel_params()
    bits = np.arange(0x3E000000, 0x3E000000 + (1 << 20), dtype=np.uint32)   # around 0.125..
    bits = np.concatenate([bits, np.float32([0.25, 1.25, 2.5, 5.0]).view(np.uint32)])
    out = np.empty(bits.size, np.uint8)
    K.encode_elements(bits, 0, el.kernel_params(), away, out)
    theirs = bits.view(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert (out != theirs).sum() >= 4
