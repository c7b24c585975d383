"""graphcore-research/gfloat as a verify backend: its own MX block encoder, run on the CPU.

gfloat (``pip install gfloat==0.5.2``) is a scalar, spec-driven Python model of the OCP formats.
The adapter only turns bit patterns into float64 (exact for every fp32/bf16/fp16 input) and
gfloat's integer codes back into uint8 arrays; every numeric decision is gfloat's:

``quantize_mx`` (golden ops ``quantize_mx``, ``quantize_mx_tensor``): per block, the body of
    ``gfloat.quantize_block`` up to its encode step (``quantize_block`` itself returns decoded
    floats, not codes): ``q = compute_scale_amax(etype.emax, vals)``, then
    ``encode_block(fi, q, vals / q)`` with ``RoundMode.TiesToEven``, which yields the E8M0
    scale code and then one saturated element code per value. A ragged last block is passed as
    the shorter block it is (its amax equals the zero-padded one).
``convert``: ``encode_float(etype, round_float(etype, x, TiesToEven, sat=True))`` per element,
    the element step of ``encode_block``.
``dequantize``: ``decode_ndarray(ocp_e8m0, scale) * decode_ndarray(etype, code)`` in float64
    (exact, as ``decode_block`` multiplies), rounded once to fp32 by numpy (RNE).

Where gfloat refuses a value (``round_float`` raises ``ValueError: No NaN in format ...`` for a
NaN bound for FP4, FP6 or INT8), there is no gfloat code to report. ``quantize_mx`` keeps the
scale code gfloat yielded before refusing (E8M0 0xFF: NaN) and writes :data:`REFUSED` (0xFF) for
every element of that block; ``convert`` writes :data:`REFUSED` for the refused element of an
FP4/FP6 format, a byte outside their 4- and 6-bit code spaces, so it can never pass for a code;
INT8 uses every byte, so an INT8 ``convert`` call with a refused element raises
:class:`Unsupported` naming the refusal. conformance/expectations/gfloat.toml lists where gfloat
differs from ``ocp``, the profile it is nearest.
"""
from __future__ import annotations

import numpy as np

from .base import BackendUnavailable, Unsupported
from .peers import _check_src, _CpuPeer, _fmt

REFUSED = 0xFF   # written where gfloat refused to encode a value (see the module docstring)

# mxref format -> (gfloat BlockFormatInfo name, gfloat element FormatInfo name) in gfloat.formats
_GF_FORMATS = {"mxfp8_e4m3": ("format_info_mxfp8_e4m3", "format_info_ocp_e4m3"),
               "mxfp8_e5m2": ("format_info_mxfp8_e5m2", "format_info_ocp_e5m2"),
               "mxfp6_e2m3": ("format_info_mxfp6_e2m3", "format_info_ocp_e2m3"),
               "mxfp6_e3m2": ("format_info_mxfp6_e3m2", "format_info_ocp_e3m2"),
               "mxfp4": ("format_info_mxfp4_e2m1", "format_info_ocp_e2m1"),
               "mxint8": ("format_info_mxint8", "format_info_ocp_int8")}


def _to_f64(src: np.ndarray, src_dtype: str) -> np.ndarray:
    """Source bit patterns -> float64 values (exact: every fp32/bf16/fp16 value is a double;
    a signalling NaN becomes a quiet one, which gfloat treats alike)."""
    import ml_dtypes
    view = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    with np.errstate(invalid="ignore"):
        return src.view(view[src_dtype]).astype(np.float64)


class GfloatBackend(_CpuPeer):
    """gfloat's MX block encoder, element encoder and decoders (see the module docstring)."""

    name = dist = "gfloat"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor", "convert", "dequantize"})
    profiles = ("gfloat", "ocp")   # its own profile; ocp for convert (no gfloat convert files)

    def check_available(self) -> None:
        try:
            import gfloat
            import gfloat.formats  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
            raise BackendUnavailable(f"gfloat is not importable ({type(e).__name__}: {e}); "
                                     "pip install gfloat==0.5.2") from None

    def describe(self) -> dict:
        return {**super().describe(), "runtime": f"numpy {np.__version__}",
                "path": "scalar Python (compute_scale_amax, encode_block, TiesToEven)"}

    @staticmethod
    def _infos(fmt: str):
        import gfloat.formats as gff
        f = _fmt(fmt)
        if fmt not in _GF_FORMATS:
            raise Unsupported(f"gfloat has no block format for {f.name}")
        block, elem = _GF_FORMATS[fmt]
        return f, getattr(gff, block), getattr(gff, elem)

    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        from gfloat import RoundMode, compute_scale_amax, encode_block
        src = _check_src(src, src_dtype)
        f, fi, _ = self._infos(fmt)
        if src.ndim == 0:
            raise Unsupported("cannot block a 0-d input")
        bs = f.block_size
        x = np.moveaxis(_to_f64(np.ascontiguousarray(src), src_dtype), axis, -1)
        lead, n = x.shape[:-1], x.shape[-1]
        nb = -(-n // bs)
        x2 = x.reshape(-1, n)
        scales = np.zeros((x2.shape[0], nb), np.uint8)
        codes = np.zeros(x2.shape, np.uint8)
        with np.errstate(all="ignore"):
            for r in range(x2.shape[0]):
                for b in range(nb):
                    vals = x2[r, b * bs:(b + 1) * bs]
                    q = compute_scale_amax(fi.etype.emax, vals)
                    out = []
                    try:
                        out.extend(encode_block(fi, q, vals / q, RoundMode.TiesToEven))
                    except ValueError:           # gfloat refused an element (NaN into FP4/6/INT8)
                        if not out:
                            raise
                        out[1:] = [REFUSED] * len(vals)
                    scales[r, b] = out[0]
                    codes[r, b * bs:b * bs + len(vals)] = out[1:]
        return (np.ascontiguousarray(np.moveaxis(scales.reshape(lead + (nb,)), -1, axis)),
                np.ascontiguousarray(np.moveaxis(codes.reshape(lead + (n,)), -1, axis)))

    def convert(self, src, *, src_dtype, fmt, profile=None):
        from gfloat import RoundMode, encode_float, round_float
        src = _check_src(src, src_dtype)
        f, _, ei = self._infos(fmt)
        x = _to_f64(np.ascontiguousarray(src), src_dtype).reshape(-1)
        out = np.empty(x.size, np.uint8)
        for i, v in enumerate(x.tolist()):
            try:
                out[i] = encode_float(ei, round_float(ei, v, RoundMode.TiesToEven, True))
            except ValueError as e:
                if f.element.bits == 8:
                    raise Unsupported(f"gfloat refuses {v!r} -> {ei.name} ({e}); every INT8 "
                                      "byte is a code, so the refusal cannot be reported "
                                      "per element") from None
                out[i] = REFUSED
        return out.reshape(src.shape)

    def dequantize(self, scales, codes, *, fmt, profile=None):
        import gfloat.formats as gff
        from gfloat import decode_ndarray
        f, _, ei = self._infos(fmt)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        scales = np.ascontiguousarray(scales, dtype=np.uint8)
        bs = f.block_size
        if codes.shape[-1] != scales.shape[-1] * bs:
            raise Unsupported(f"codes last axis {codes.shape[-1]} != {scales.shape[-1]} blocks "
                              f"x {bs}")
        if np.any(codes >> f.element.bits):
            raise Unsupported(f"codes have bits above the {f.element.bits}-bit element")
        s = decode_ndarray(gff.format_info_ocp_e8m0, scales.astype(np.int64))
        v = decode_ndarray(ei, codes.astype(np.int64))
        with np.errstate(all="ignore"):
            prod = np.repeat(s, bs, axis=-1) * v                # exact in float64
            return np.ascontiguousarray(prod.astype(np.float32)).view(np.uint32)
