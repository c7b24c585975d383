"""tinymx's own unit tests (no mxref needed)."""
import numpy as np

from tinymx import dequantize_mx, quantize_mx


def test_round_trip_of_grid_values():
    x = np.array([[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -6.0] * 4], np.float32)
    scales, codes = quantize_mx(x, "mxfp4")
    assert scales.tolist() == [[127]] and codes[0, 7] == 0xF
    assert np.array_equal(dequantize_mx(scales, codes, "mxfp4"), x)


def test_nan_poisons_the_block():
    x = np.ones((1, 64), np.float32)
    x[0, 3] = np.nan
    scales, _ = quantize_mx(x, "mxfp8_e4m3")
    assert scales.tolist() == [[0xFF, 127 - 8]]
