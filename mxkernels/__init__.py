"""mxkernels: Triton production kernels and torch ops (MXLinear, recipes, training).

The reference they are held to is `mxref`. Importing this package stays light: the Triton ops
(``mx_quantize``, ``mx_dequantize``, ``mx_convert``, ``nvfp4_quantize``, ``pack_codes``,
``scale_layout``) are loaded from ``mxkernels.triton_quant`` on first use, so triton is
imported only then.
"""

_TRITON_OPS = ("mx_quantize", "mx_dequantize", "mx_convert", "nvfp4_quantize", "pack_codes",
               "scale_layout")

__all__ = list(_TRITON_OPS)


def __getattr__(name):
    if name in _TRITON_OPS:
        from . import triton_quant
        return getattr(triton_quant, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
