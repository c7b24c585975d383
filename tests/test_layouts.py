"""Scale layouts: the cuBLAS 128x4 swizzle and AMD e8m0_shuffle, checked against the formulas."""
import numpy as np
import pytest

import mxref
from mxref.layouts import (from_amd_shuffle, from_cublas_blocked, pack_codes, to_amd_shuffle,
                           to_cublas_blocked, unpack_codes)


@pytest.mark.parametrize("rows,cols", [(1, 1), (128, 4), (130, 7), (300, 12)])
def test_cublas_offsets_follow_the_documented_formula(rows, cols):
    rng = np.random.default_rng(rows * cols)
    s = rng.integers(0, 255, (rows, cols), dtype=np.uint8)
    b = to_cublas_blocked(s)
    pc = -(-cols // 4) * 4
    assert b.size == -(-rows // 128) * 128 * pc
    tiles_per_row = pc // 4
    for r in range(rows):
        for c in range(cols):
            tile = (r // 128) * tiles_per_row + c // 4
            rr, cc = r % 128, c % 4
            off = tile * 512 + (rr % 32) * 16 + (rr // 32) * 4 + cc
            assert b[off] == s[r, c]
    assert (b.sum(dtype=np.int64) == s.sum(dtype=np.int64))  # padding is 0x00
    np.testing.assert_array_equal(from_cublas_blocked(b, rows, cols), s)


@pytest.mark.parametrize("rows,cols", [(256, 8), (300, 10)])
def test_amd_shuffle_matches_aiter_permute(rows, cols):
    rng = np.random.default_rng(7)
    s = rng.integers(0, 255, (rows, cols), dtype=np.uint8)
    sh = to_amd_shuffle(s)
    pr, pc = -(-rows // 256) * 256, -(-cols // 8) * 8
    assert sh.shape == (pr, pc)
    # AITER: view(sm//32, 2, 16, sn//8, 2, 4).permute(0, 3, 5, 2, 4, 1), written out by index
    flat = sh.reshape(-1)
    for r in range(0, rows, 7):
        for c in range(cols):
            i0, i1, i2 = r // 32, (r // 16) % 2, r % 16
            j0, j1, j2 = c // 8, (c // 4) % 2, c % 4
            idx = ((((i0 * (pc // 8) + j0) * 4 + j2) * 16 + i2) * 2 + j1) * 2 + i1
            assert flat[idx] == s[r, c]
    np.testing.assert_array_equal(from_amd_shuffle(sh, rows, cols), s)


@pytest.mark.parametrize("bits,n", [(4, 7), (4, 8), (6, 5), (6, 8), (8, 3)])
def test_pack_unpack_round_trip(bits, n):
    rng = np.random.default_rng(n)
    c = rng.integers(0, 1 << bits, (3, n), dtype=np.uint8)
    np.testing.assert_array_equal(unpack_codes(pack_codes(c, bits), bits, n), c)


def test_mxtensor_scale_layouts():
    x = np.random.default_rng(0).standard_normal((200, 96)).astype(np.float32)
    r = mxref.quantize(x, "mxfp8_e4m3")
    np.testing.assert_array_equal(from_cublas_blocked(r.scales_layout("cublas"), 200, 3), r.scales)
    np.testing.assert_array_equal(from_amd_shuffle(r.scales_layout("amd"), 200, 3), r.scales)
    with pytest.raises(mxref.ShapeError, match="unknown scale layout"):
        r.scales_layout("nvidia")
