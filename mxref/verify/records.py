"""Mismatch records: bits, decoded values and field decompositions, the way TestFloat prints them."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..formats import E4M3, E8M0, FORMATS

SRC_WIDTH = {"float32": 8, "bfloat16": 4, "float16": 4}


def src_value(bits: int, src_dtype: str) -> float:
    if src_dtype == "float32":
        return float(np.uint32(bits).view(np.float32))
    if src_dtype == "bfloat16":
        return float(np.uint32(int(bits) << 16).view(np.float32))
    return float(np.uint16(bits).view(np.float16))


def f32_value(bits: int) -> float:
    return float(np.uint32(bits).view(np.float32))


def _num(v) -> str:
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "+Inf" if v > 0 else "-Inf"
        return f"{v:+.9g}" if v != 0 or str(v)[0] != "-" else "-0"
    return f"{float(v):+.9g}"


def src_record(bits: int, src_dtype: str) -> dict:
    w = SRC_WIDTH.get(src_dtype, 8)
    return {"bits": f"0x{int(bits):0{w}x}", "value": _num(src_value(bits, src_dtype))}


def f32_record(bits: int) -> dict:
    b = int(bits)
    return {"bits": f"0x{b:08x}", "value": _num(f32_value(b)),
            "fields": f"S={b >> 31} E={(b >> 23) & 0xFF:08b} M={b & 0x7FFFFF:023b}"}


def element_decode(el, code: int) -> tuple[str, str]:
    """(decoded value, field decomposition) of one element code."""
    code = int(code)
    if el.kind == "int":
        v = code - 256 if code >= 128 else code
        return _num(Fraction(v, 64)), f"int={v} (x/64)"
    sign = (code >> (el.ebits + el.mbits)) & 1
    e = (code >> el.mbits) & ((1 << el.ebits) - 1)
    m = code & ((1 << el.mbits) - 1)
    fields = f"S={sign} E={e:0{el.ebits}b} M={m:0{el.mbits}b}" if el.mbits else \
        f"S={sign} E={e:0{el.ebits}b}"
    if el.is_nan_code(code):
        return "NaN", fields
    if el.is_inf_code(code):
        return ("-Inf" if sign else "+Inf"), fields
    v = el.decode(code)
    if v == 0:
        return ("-0" if sign else "+0"), fields
    return _num(v if isinstance(v, float) else float(v)), fields


def code_distance(el, a: int, b: int) -> int:
    """Ordinal distance between two codes on the format's number line (not ULPs)."""
    def ordinal(c):
        c = int(c)
        if el.kind == "int":
            return c - 256 if c >= 128 else c
        sbit = 1 << (el.ebits + el.mbits)
        mag = c & (sbit - 1)
        return -mag if c & sbit else mag
    return abs(ordinal(a) - ordinal(b))


def scale_decode(scale_fmt: str, byte: int) -> str:
    byte = int(byte)
    if scale_fmt == "e8m0":
        return "NaN" if byte == 0xFF else f"2^{byte - 127}"
    return element_decode(E4M3, byte)[0]


def element_side(el, scale_fmt, scale_byte, code) -> dict:
    out = {}
    if scale_byte is not None:
        out["scale_bits"] = f"0x{int(scale_byte):02x}"
        out["scale"] = scale_decode(scale_fmt, scale_byte)
    if code is not None:
        dec, fields = element_decode(el, code)
        out.update({"code": f"0x{int(code):02x}", "decoded": dec, "fields": fields})
    return out


def scale_format_name(fmt_name: str) -> str:
    return "e4m3" if FORMATS[fmt_name].is_nvfp4 else E8M0.name
