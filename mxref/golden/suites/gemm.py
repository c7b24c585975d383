"""Golden files of the ``gemm`` family: MX / NVFP4 GEMMs of quantized operands.

Format ``{fmt_a}+{fmt_b}``, profile ``ocp`` (a GEMM of quantized operands has no profile: scales
and codes decode one way), src_dtype ``float32`` (the result).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...formats import FORMATS
from ...quantize import MXTensor, quantize
from .. import cases as C
from ..columns import MX_FORMATS, FileSpec, head_columns
from ..writer import plain_column

GEMM_CLASSES = ("G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "G9")


def specs_gemm(level):
    pairs = [(a, b) for a in MX_FORMATS for b in MX_FORMATS] + [("nvfp4", "nvfp4")]
    if level == 0:
        pairs = [("mxfp4", "mxfp4"), ("mxfp8_e4m3", "mxfp4"), ("nvfp4", "nvfp4")]
    return [FileSpec("gemm", f"{a}+{b}", "ocp", "float32", level) for a, b in pairs]


def _q(x, fmt):
    """Quantize an [R, K] float32 matrix along K with the canonical profile (exact inputs)."""
    prof = "ocp"
    with np.errstate(over="ignore"):    # the overflow classes cast values past fp32 max to inf
        x32 = np.asarray(x, np.float32)
    return quantize(x32, fmt, prof, axis=1)


def _gemm_problem(cls, fa, fb, rng, i):
    """(A MXTensor, B MXTensor) for one case of class cls."""
    bs = FORMATS[fa].block_size
    if cls == "G9":                          # empty dimensions
        m, n, k = [(0, 3, 64), (3, 0, 64), (2, 3, 0)][i % 3]
        return _q(np.zeros((m, k)), fa), _q(np.zeros((n, k)), fb)
    if cls == "G8":                          # ragged K
        k = (1, bs - 1, bs + 1, 3 * bs - 1)[i % 4]
    else:
        k = bs * (1 + i % 4)
    m, n = 1 + rng.int(0, 4), 1 + rng.int(0, 4)
    nb = -(-k // bs)
    a = rng.normal(m * k).reshape(m, k)
    b = rng.normal(n * k).reshape(n, k)
    # per-block magnitudes in a window around 1 (quantization then picks the scale bytes)
    a *= 2.0 ** np.repeat(np.array(rng.ints(-6, 7, m * nb)).reshape(m, nb), bs, 1)[:, :k]
    b *= 2.0 ** np.repeat(np.array(rng.ints(-6, 7, n * nb)).reshape(n, nb), bs, 1)[:, :k]
    if cls == "G2" and nb >= 1:              # cancellation: block 0 and 1 cancel, block 2 tiny
        k = 3 * bs
        a = rng.normal(m * k).reshape(m, k)
        b = rng.normal(n * k).reshape(n, k)
        a[:, bs:2 * bs] = a[:, :bs]
        b[:, bs:2 * bs] = -b[:, :bs]
        a[:, :2 * bs] *= 2.0 ** 40
        b[:, 2 * bs:] *= 2.0 ** -30
    elif cls == "G3":                        # extreme scales side by side: 0x00..0xFE
        a[:, :bs] *= 2.0 ** (124 - FORMATS[fa].element.emax)
        if k > bs:
            a[:, bs:2 * bs] *= 2.0 ** -140
        b[:, :bs] *= 2.0 ** -130
    elif cls == "G4":                        # final-rounding ties: 2^24 + 1 and 2^24 + 3 (x 2^j)
        k = max(k, 2 * bs)
        a = np.zeros((m, k))
        b = np.zeros((n, k))
        a[:, 0] = 4.0
        b[:, 0] = 2.0 ** 22
        if k > bs:
            a[:, bs] = 1.0
            b[:, bs] = np.array([1.0, 3.0, 1.5, 0.5][:n] + [1.0] * max(0, n - 4))
        else:
            a[:, 1] = 1.0
            b[:, 1] = 1.0
        a *= 2.0 ** (i - 2)
    elif cls == "G5":                        # subnormal fp32 results
        a *= 2.0 ** -70
        b *= 2.0 ** -70
    elif cls == "G6":                        # products overflow fp32 (and cancel in exact mode)
        a *= 2.0 ** 100
        b *= 2.0 ** 100
        if k >= 2 * bs:
            a[:, bs:2 * bs] = a[:, :bs]
            b[:, bs:2 * bs] = -b[:, :bs]
    qa, qb = _q(np.nan_to_num(a, nan=0.0), fa), _q(b, fb)
    if cls == "G7":                          # NaN scale bytes and NaN / Inf element codes
        bad = FORMATS[fa].scale.nan_code if FORMATS[fa].is_nvfp4 else 0xFF
        qa.scales[0, 0] = bad
        el = FORMATS[fb].element
        if el.nan_code is not None and qb.codes.shape[0] > 1:
            qb.codes[1, 0] = el.nan_code
        if el.inf_code is not None and qb.codes.shape[0] > 2:
            qb.codes[2, 0] = el.inf_code
    return qa, qb


def _gemm_row_meta(mx: MXTensor) -> np.uint32:
    return np.float32(1.0 if mx.tensor_scale is None else mx.tensor_scale).view(np.uint32)


def build_gemm(spec, cross_check=True):
    from ...gemm import gemm, gemm_error_bound
    fa, fb = spec.fmt.split("+")
    per = 1 if spec.level == 0 else 4
    classes, data = [], []
    for cls in GEMM_CLASSES:
        rng = C._Rng("gemm", spec.fmt, cls)
        for i in range(per if cls != "G9" else min(per, 3)):
            qa, qb = _gemm_problem(cls, fa, fb, rng, i)
            exact = gemm(qa, qb, mode="exact").view(np.uint32)
            seq = gemm(qa, qb, mode="block_sequential").view(np.uint32)
            bound = np.asarray(gemm_error_bound(qa, qb), np.float64).view(np.uint64)
            classes.append(cls)
            data.append((qa, qb, exact, seq, bound))
    u8, u32, u64 = pa.list_(pa.uint8()), pa.list_(pa.uint32()), pa.list_(pa.uint64())
    flat = lambda a: np.ascontiguousarray(a).reshape(-1).tolist()  # noqa: E731
    shapes = [(d[0].codes.shape[0], d[1].codes.shape[0], d[0].codes.shape[1]) for d in data]
    inputs = [np.concatenate([d[0].codes.reshape(-1), d[0].scales.reshape(-1),
                              d[1].codes.reshape(-1), d[1].scales.reshape(-1)]) for d in data]
    cols = [
        *head_columns(spec, classes, inputs,
               tags=[[f"{m}x{n}x{k}"] for m, n, k in shapes],
               extra=[str(s) for s in shapes]),
        plain_column("m", np.array([s[0] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("n", np.array([s[1] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("k", np.array([s[2] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("a_codes", [flat(d[0].codes) for d in data], {"role": "input",
                     "dtype": FORMATS[fa].element.name, "layout": "[m, k] row-major"}, typ=u8),
        plain_column("a_scales", [flat(d[0].scales) for d in data], {"role": "input",
                     "dtype": FORMATS[fa].scale.name, "layout": "[m, ceil(k/block)]"}, typ=u8),
        plain_column("b_codes", [flat(d[1].codes) for d in data], {"role": "input",
                     "dtype": FORMATS[fb].element.name, "layout": "[n, k] row-major"}, typ=u8),
        plain_column("b_scales", [flat(d[1].scales) for d in data], {"role": "input",
                     "dtype": FORMATS[fb].scale.name, "layout": "[n, ceil(k/block)]"}, typ=u8),
        plain_column("a_tensor_scale", np.array([_gemm_row_meta(d[0]) for d in data], np.uint32),
                     {"role": "input", "dtype": "float32", "note": "NVFP4 only; 1.0 for MX"}),
        plain_column("b_tensor_scale", np.array([_gemm_row_meta(d[1]) for d in data], np.uint32),
                     {"role": "input", "dtype": "float32", "note": "NVFP4 only; 1.0 for MX"}),
        plain_column("exp_exact", [flat(d[2]) for d in data], {"role": "expected",
                     "dtype": "float32", "contract": "exact"}, typ=u32),
        plain_column("exp_block_sequential", [flat(d[3]) for d in data], {"role": "expected",
                     "dtype": "float32", "contract": "block_sequential"}, typ=u32),
        plain_column("exp_bound", [flat(d[4]) for d in data], {"role": "expected",
                     "dtype": "float64", "contract": "bound: |y - exp_exact| <= exp_bound"},
                     typ=u64),
    ]
    return cols, classes, {"contract": "docs/gemm.md"}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "gemm": (specs_gemm, build_gemm),
}
