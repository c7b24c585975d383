"""Golden files of the ``decompose`` family: the exact error decomposition (``decompose``) and the
three corrections built on the quantizer: macro-block scaling (``macroblock``), outlier
fallback (``outlier_fallback``) and Four-over-Six NVFP4 (``quantize_4over6``).
"""
from __future__ import annotations

import numpy as np

from ...formats import FORMATS
from .. import cases as C
from ..cases import ROW, rotation_rows
from ..columns import FileSpec, applies, f32_bits, head_columns, src_view, to_src
from ..writer import dict_column, plain_column, tensor_column


# =============================================================================================
# decompose
# =============================================================================================
DECOMP_PROFILES = ("ocp", "rceil", "torchao_even", "te_nvfp4")
DECOMP_CLASSES = ("E1", "E2", "E3", "E5", "E6", "E7", "E9", "S1", "S2", "S4", "S5", "S6", "S7",
                  "S8", "R1", "R2")
FLAG_BITS = {"deadzone": 1, "special": 2, "saturated": 4, "zeroed": 8}


def specs_decompose(level):
    return [FileSpec("decompose", f, p, s, level) for f in FORMATS for p in DECOMP_PROFILES
            for s in ("float32", "bfloat16") if applies(f, p)]


def decomposition_flags(d) -> np.ndarray:
    """uint8 per element: bit 0 deadzone, 1 special, 2 saturated, 3 zeroed."""
    out = np.zeros(d.x.shape, np.uint8)
    for name, bit in FLAG_BITS.items():
        out |= np.where(getattr(d, name), np.uint8(bit), np.uint8(0))
    return out


def build_decompose(spec, cross_check=True):
    from ...decompose import decompose
    fmt = FORMATS[spec.fmt]
    if fmt.is_nvfp4:
        cs = C.nvfp4_cases(spec.src_dtype, spec.level)
        shape = (4, 16)
    else:
        cs = [c for c in C.block_cases(fmt.element.name, spec.src_dtype, spec.level)
              if c.cls in DECOMP_CLASSES and c.n_valid == 32]
        shape = (32,)
    if spec.level >= 1:                      # thin the big classes: decompositions are wide rows
        keep, seen = [], {}
        for c in cs:
            seen[c.cls] = seen.get(c.cls, 0) + 1
            if seen[c.cls] <= 6:
                keep.append(c)
        cs = keep
    rows = []
    for c in cs:
        src = c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16)
        x, sd = src_view(src, spec.src_dtype)
        d = decompose(x.reshape(shape), spec.fmt, spec.profile, source_dtype=sd)
        comps = np.stack([d.exact_scale, d.exact_dead, d.exact_grid]).reshape(3, -1)
        rows.append((c.cls, src, comps.view(np.uint64), decomposition_flags(d).reshape(-1),
                     np.asarray(d.exact_total).reshape(-1).view(np.uint64), d.denominator))
    if not rows:
        return None
    classes = [r[0] for r in rows]
    src = np.stack([r[1] for r in rows])
    L = src.shape[1]
    f64 = {"dtype": "float64", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [L], "scaled_by": "denominator (odd part of the element max)"}
    cols = [
        *head_columns(spec, classes, src,
               tags=[list(c.tags) for c in cs]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": list(shape)}),
        plain_column("denominator", np.array([r[5] for r in rows], np.uint16), {"role": "expected"}),
        tensor_column("exp_scale", np.stack([r[2][0] for r in rows]), f64),
        tensor_column("exp_dead", np.stack([r[2][1] for r in rows]), f64),
        tensor_column("exp_grid", np.stack([r[2][2] for r in rows]), f64),
        tensor_column("exp_total", np.stack([r[4] for r in rows]), {
            **f64, "identity": "exp_total == exp_scale + (exp_dead + exp_grid) == "
                               "denominator * (Q(x) - x), exactly"}),
        tensor_column("exp_flags", np.stack([r[3] for r in rows]), {
            "dtype": "uint8", "role": "expected", "bits": FLAG_BITS, "logical_shape": [L]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md"}


# =============================================================================================
# corrections: macro-block scaling, outlier fallback, Four-over-Six NVFP4
# =============================================================================================
MACRO_SIZES = (32, 128, 0)          # 0 = the whole row
MACRO_DTYPES = ("float32", "bfloat16", "e4m3")


def specs_macroblock(level):
    return [FileSpec("macroblock", f, "ocp", s, level) for f in ("mxfp4", "mxfp8_e4m3")
            for s in ("float32", "bfloat16")]


def specs_outlier_fallback(level):
    return [FileSpec("outlier_fallback", "mxfp4", "ocp", s, level) for s in ("float32", "bfloat16")]


def specs_quantize_4over6(level):
    return [FileSpec("quantize_4over6", "nvfp4", p, s, level) for p in ("ocp", "te_nvfp4")
            for s in ("float32", "bfloat16")]


def _correction_rows(spec, classes=("H2", "H3", "H5", "H6")):
    """[ROW] fp32 rows: Gaussian, specials, subnormal, heavy-tailed (the rotation classes),
    plus outlier rows (class O1: a few elements x 2^6..2^12 in some blocks)."""
    rows = [(r[0], r[1]) for r in rotation_rows(spec.level, spec.op + spec.fmt, classes)
            if r[3] == "none"]
    rng = C._Rng(spec.op, spec.fmt, "O1")
    for _ in range(1 if spec.level == 0 else 4):
        v = rng.normal(ROW)
        for b in rng.ints(0, ROW // 32, 3):
            v[32 * b + rng.int(0, 32)] *= 2.0 ** rng.int(6, 13)
        rows.append(("O1", f32_bits(v)))
    return rows


def build_macroblock(spec, cross_check=True):
    from ...corrections import quantize_macroblock
    fmt = FORMATS[spec.fmt]
    rows = []
    for i, (cls, b32) in enumerate(_correction_rows(spec)):
        src = to_src(b32, spec.src_dtype)
        x, sd = src_view(src, spec.src_dtype)
        macro, dt = MACRO_SIZES[i % 3], MACRO_DTYPES[(i // 3) % 3]
        mb = quantize_macroblock(x.reshape(1, ROW), spec.fmt, "ocp", macro=macro or "row",
                                 macro_scale_dtype=dt, source_dtype=sd)
        ms = np.zeros(ROW // 32, np.uint32)
        ms[:mb.macro_scale_bits.size] = mb.macro_scale_bits.reshape(-1).astype(np.uint32)
        rows.append((cls, src, macro, dt, mb.macro_scale_bits.size, ms, mb.scales.reshape(-1),
                     mb.codes.reshape(-1)))
    classes = [r[0] for r in rows]
    cols = [
        *head_columns(spec, classes, [r[1] for r in rows],
               tags=[[f"macro{r[2] or 'row'}", r[3]] for r in rows],
               extra=[f"{r[2]}|{r[3]}" for r in rows]),
        plain_column("macro", np.array([r[2] for r in rows], np.uint32), {
            "role": "input", "note": "elements per macro block; 0 = the whole row"}),
        dict_column("macro_scale_dtype", [r[3] for r in rows], {"role": "input"}),
        tensor_column("src_bits", np.stack([r[1] for r in rows]), {
            "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
            "logical_shape": [ROW]}),
        plain_column("n_macro", np.array([r[4] for r in rows], np.uint8), {"role": "expected"}),
        tensor_column("exp_macro_scales", np.stack([r[5] for r in rows]), {
            "role": "expected", "encoding": "macro_scale_dtype bits (fp32 / bf16 / e4m3 code) "
            "in a uint32", "note": "first n_macro entries"}),
        tensor_column("exp_scales", np.stack([r[6] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[7] for r in rows]), {
            "dtype": fmt.element.name, "encoding": "ocp-code", "role": "expected",
            "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.1"}


def build_outlier_fallback(spec, cross_check=True):
    from ...corrections import quantize_outlier_fallback
    rows = []
    for i, (cls, b32) in enumerate(_correction_rows(spec)):
        src = to_src(b32, spec.src_dtype)
        x, sd = src_view(src, spec.src_dtype)
        rule = ("block", "topk")[i % 2]
        of = quantize_outlier_fallback(x.reshape(1, ROW), spec.fmt, "ocp", rule=rule,
                                       source_dtype=sd)
        rows.append((cls, src, rule, of.flagged.reshape(-1).astype(np.uint8),
                     of.mx.scales.reshape(-1), of.mx.codes.reshape(-1),
                     of.residual_bits.reshape(-1).astype(np.uint16)))
    classes = [r[0] for r in rows]
    cols = [
        *head_columns(spec, classes, [r[1] for r in rows],
               tags=[[r[2]] for r in rows],
               extra=[r[2] for r in rows]),
        dict_column("rule", [r[2] for r in rows], {
            "role": "input", "note": "tau = 10, rho = 8, k = 1 (corrections.py defaults)"}),
        tensor_column("src_bits", np.stack([r[1] for r in rows]), {
            "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
            "logical_shape": [ROW]}),
        tensor_column("exp_flagged", np.stack([r[3] for r in rows]), {"role": "expected",
                                                                      "dtype": "bool"}),
        tensor_column("exp_scales", np.stack([r[4] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[5] for r in rows]), {
            "dtype": "e2m1", "encoding": "ocp-code", "role": "expected", "logical_shape": [ROW]}),
        tensor_column("exp_residual", np.stack([r[6] for r in rows]), {
            "dtype": "bfloat16", "encoding": "ieee754-bits", "role": "expected",
            "note": "passthrough elements in bf16 (RNE), 0 elsewhere", "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.2"}


def build_quantize_4over6(spec, cross_check=True):
    from ...corrections import quantize_nvfp4_4over6
    cs = C.nvfp4_cases(spec.src_dtype, spec.level) + \
        C.te_4over6_order_cases(spec.src_dtype, spec.level)
    rows = []
    for c in cs:
        x, sd = src_view(c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16),
                          spec.src_dtype)
        mx = quantize_nvfp4_4over6(x.reshape(4, 16), spec.profile, source_dtype=sd)
        rows.append((c.cls, c.src, mx.scales.reshape(-1), mx.codes.reshape(-1),
                     np.float32(mx.tensor_scale).view(np.uint32),
                     np.asarray(mx.meta["four_over_six"]).reshape(-1).astype(np.uint8)))
    classes = [r[0] for r in rows]
    src = np.stack([r[1] for r in rows]).astype(np.uint32 if spec.src_dtype == "float32"
                                                else np.uint16)
    cols = [
        *head_columns(spec, classes, src,
               tags=[list(c.tags) for c in cs]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [4, 16]}),
        tensor_column("exp_scales", np.stack([r[2] for r in rows]), {"dtype": "e4m3",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[3] for r in rows]), {
            "dtype": "e2m1", "encoding": "ocp-code", "role": "expected", "logical_shape": [4, 16]}),
        plain_column("exp_tensor_scale", np.array([r[4] for r in rows], np.uint32), {
            "dtype": "float32", "role": "expected", "note": "bound 256: T = amax / (6 * 256)"}),
        tensor_column("exp_choice", np.stack([r[5] for r in rows]), {
            "role": "expected", "note": "4 or 6 per block (select = mse, ties -> 6)"}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.3"}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "decompose": (specs_decompose, build_decompose),
    "macroblock": (specs_macroblock, build_macroblock),
    "outlier_fallback": (specs_outlier_fallback, build_outlier_fallback),
    "quantize_4over6": (specs_quantize_4over6, build_quantize_4over6),
}
