"""mxref: the bit-exact reference for OCP MX formats and NVFP4.

CPU only, integer domain, no GPU imports. See docs/semantics.md for the exact rules.
"""
from .errors import (AmbiguousInputError, AxisError, BlockSizeError, MXRefError,
                     ProfileConflictError, ShapeError, UnknownFormatError, UnknownProfileError,
                     UnsupportedDtypeError)
from .formats import ELEMENT_FORMATS, FORMATS, BlockFormat, FloatFormat, IntFormat, get_format
from .profiles import PROFILES, Profile, get_profile
from .quantize import MXTensor, dequantize, quantize, random_bits
from .rotate import hadamard, quantize_rotated, rotate, sign_vector
from .gemm import GemmCheck, check_gemm, gemm, gemm_codes, gemm_error_bound
from .rotated_gemm import rotated_gemm, rotated_gemm_error
from .fp8fp4 import FP8Tensor, fp8_to_mxfp4, mxfp4_to_fp8, reblock, reblock_error
from .decompose import Decomposition, compare_scale_rules, decompose

__version__ = "0.1.0"

__all__ = [
    "quantize", "dequantize", "random_bits", "MXTensor", "FORMATS", "ELEMENT_FORMATS", "PROFILES",
    "Profile", "BlockFormat", "FloatFormat", "IntFormat", "get_format", "get_profile",
    "MXRefError", "UnknownFormatError", "UnknownProfileError", "UnsupportedDtypeError",
    "AmbiguousInputError", "AxisError", "BlockSizeError", "ProfileConflictError", "ShapeError",
    "warmup", "hadamard", "sign_vector", "rotate", "quantize_rotated", "gemm", "gemm_codes",
    "gemm_error_bound", "check_gemm", "GemmCheck", "rotated_gemm", "rotated_gemm_error",
    "FP8Tensor", "mxfp4_to_fp8", "fp8_to_mxfp4", "reblock", "reblock_error", "decompose",
    "Decomposition", "compare_scale_rules",
]


def warmup() -> None:
    """Compile every kernel once (first-use compilation otherwise lands in the first call)."""
    import numpy as np

    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    for name in FORMATS:
        dequantize(quantize(x, name))
    quantize(x, "mxfp4", get_profile("ocp").replace(name="w", rounding="stochastic"), seed=0)
