"""A signaling NaN input is quieted silently: no numpy RuntimeWarning from the float64 views
that mxref.decompose / mxref.corrections take of the input (printed on every green
`mxref verify -b numba --level 1` before)."""
import importlib
import warnings

import numpy as np

from mxref import corrections


def test_snan_input_warns_nothing():
    decompose = importlib.import_module("mxref.decompose")
    x = np.ones((2, 32), np.float32)
    b = x.view(np.uint32)
    b[0, 3] = 0x7F800001          # signaling NaN
    b[1, 5] = 0x7FC00000
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        corrections.quantize_nvfp4_4over6(x, profile="ocp")
        decompose.decompose(x, "mxfp4", "ocp")
