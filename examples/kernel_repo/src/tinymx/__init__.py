"""tinymx: MXFP4 and MXFP8 (E4M3) quantize / dequantize in plain numpy, OCP MX v1.0 semantics."""
from .kernels import FORMATS, dequantize_mx, quantize_mx

__all__ = ["FORMATS", "dequantize_mx", "quantize_mx"]
