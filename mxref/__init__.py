"""mxref: the bit-exact reference for OCP MX formats and NVFP4.

CPU only, integer domain, no GPU imports. See docs/semantics.md for the exact rules.

The public names below load on first use (PEP 562), so ``import mxref`` (and ``mxref --help``,
``mxref --version``) cost no Numba start-up; ``from mxref import quantize`` works as before.
"""
from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

#: public name -> the submodule that defines it
_EXPORTS = {
    **dict.fromkeys(("AmbiguousInputError", "AxisError", "BlockSizeError", "CodeRangeError",
                     "GeneratorArgumentError", "MXRefError", "ProfileConflictError",
                     "ScaleValueError", "ShapeError", "UnknownFormatError",
                     "UnknownProfileError", "UnsupportedDtypeError"), "errors"),
    **dict.fromkeys(("ELEMENT_FORMATS", "FORMATS", "BlockFormat", "FloatFormat", "IntFormat",
                     "get_format"), "formats"),
    **dict.fromkeys(("PROFILES", "Profile", "get_profile"), "profiles"),
    **dict.fromkeys(("MXTensor", "dequantize", "quantize", "random_bits"), "quantize"),
    **dict.fromkeys(("hadamard", "quantize_rotated", "rotate", "sign_vector"), "rotate"),
    **dict.fromkeys(("GemmCheck", "check_gemm", "gemm", "gemm_codes", "gemm_error_bound"), "gemm"),
    **dict.fromkeys(("rotated_gemm", "rotated_gemm_error"), "rotated_gemm"),
    **dict.fromkeys(("FP8Tensor", "fp8_to_mxfp4", "mxfp4_to_fp8", "reblock", "reblock_error"),
                    "fp8fp4"),
    **dict.fromkeys(("Decomposition", "compare_scale_rules", "decompose"), "decompose"),
}

__all__ = [
    "quantize", "dequantize", "random_bits", "MXTensor", "FORMATS", "ELEMENT_FORMATS", "PROFILES",
    "Profile", "BlockFormat", "FloatFormat", "IntFormat", "get_format", "get_profile",
    "MXRefError", "UnknownFormatError", "UnknownProfileError", "UnsupportedDtypeError",
    "AmbiguousInputError", "AxisError", "BlockSizeError", "ProfileConflictError", "ShapeError",
    "CodeRangeError", "GeneratorArgumentError", "ScaleValueError",
    "warmup", "hadamard", "sign_vector", "rotate", "quantize_rotated", "gemm", "gemm_codes",
    "gemm_error_bound", "check_gemm", "GemmCheck", "rotated_gemm", "rotated_gemm_error",
    "FP8Tensor", "mxfp4_to_fp8", "fp8_to_mxfp4", "reblock", "reblock_error", "decompose",
    "Decomposition", "compare_scale_rules",
]


#: submodules named like the function they define: ``mxref.<name>`` means the function
_SHADOWED = frozenset(n for n, m in _EXPORTS.items() if n == m)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # importing a submodule binds it on this package; for the five in _SHADOWED, bind the
        # function instead, as the eager ``from .quantize import quantize`` always did
        if (name in _SHADOWED and isinstance(value, types.ModuleType)
                and value.__name__ == f"{__name__}.{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def warmup() -> None:
    """Compile the core kernels once: quantize and dequantize for every format, and SR
    (first-use compilation otherwise lands in the first call). The GEMM, rotation, FP8 <-> FP4
    and correction kernels still compile on their first use."""
    import numpy as np

    from .formats import FORMATS
    from .profiles import get_profile
    from .quantize import dequantize, quantize

    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    for name in FORMATS:
        dequantize(quantize(x, name))
    quantize(x, "mxfp4", get_profile("ocp").replace(name="w", rounding="stochastic"), seed=0)
