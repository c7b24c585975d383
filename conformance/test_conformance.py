"""The repository's conformance run: the shipped suite (mxref/conformance), collected here.

    pytest conformance --mxref-backend=numba
    TRITON_INTERPRET=1 pytest conformance --mxref-backend=triton --mxref-level=0
"""
from mxref.conformance.test_mx_conformance import (test_convert, test_dequantize,  # noqa: F401
                                                   test_pack, test_quantize_mx,
                                                   test_quantize_mx_tensor, test_quantize_nvfp4)
