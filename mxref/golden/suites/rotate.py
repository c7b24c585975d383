"""Golden files of the ``rotate`` family: Hadamard rotations (``rotate``), rotated quantization
(``quantize_rotated``) and the rotated GEMM (``rotated_gemm``).

``rotate`` files: format ``hadamard``, profile ``ocp`` (rotations have no profile). Rows are the
rotation classes H1-H6 (:func:`mxref.golden.cases.rotation_rows`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...formats import FORMATS
from ...profiles import PROFILES
from .. import cases as C
from ..cases import ROW, rotation_rows
from ..columns import FileSpec, applies, bits_to_f32, f32_bits, head_columns, src_view, to_src
from ..writer import dict_column, plain_column, tensor_column


def _signs(kind, n, seed, step, tid) -> np.ndarray:
    """The row's sign vector (first n entries; 0 elsewhere)."""
    from ...rotate import sign_vector
    out = np.zeros(ROW, np.int8)
    out[:n] = sign_vector(kind, n, seed=seed, step=step, tensor_id=tid)
    return out


# =============================================================================================
# rotate
# =============================================================================================
def specs_rotate(level):
    return [FileSpec("rotate", "hadamard", "ocp", s, level) for s in ("float32", "bfloat16")]


def build_rotate(spec, cross_check=True):
    from ...rotate import rotate
    rows = rotation_rows(spec.level, spec.src_dtype)
    classes, srcs, signs, bf, ex, bf16 = [], [], [], [], [], []
    for cls, b32, n, kind, seed, step, tid in rows:
        src = to_src(b32, spec.src_dtype)
        x, sd = src_view(src, spec.src_dtype)
        sv = _signs(kind, n, seed, step, tid)
        kw = dict(signs=sv[:n], source_dtype=sd)
        classes.append(cls)
        srcs.append(src)
        signs.append(sv)
        bf.append(rotate(x, n, method="butterfly", **kw).view(np.uint32))
        ex.append(rotate(x, n, method="exact", **kw).view(np.uint32))
        bf16.append(rotate(x, n, method="butterfly", round_to="bfloat16", **kw).view(np.uint32))
    src = np.stack(srcs)
    f32 = {"dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [ROW]}
    cols = [
        *head_columns(spec, classes, src,
               tags=[[r[3], f"n{r[2]}"] for r in rows],
               extra=[f"{r[2]}|{r[3]}|{r[4]}|{r[5]}|{r[6]}" for r in rows]),
        plain_column("n", np.array([r[2] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[3] for r in rows], {"role": "input"}),
        plain_column("seed", np.array([r[4] for r in rows], np.uint64), {"role": "input"}),
        plain_column("step", np.array([r[5] for r in rows], np.uint32), {"role": "input"}),
        plain_column("tensor_id", np.array([r[6] for r in rows], np.uint32), {"role": "input"}),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [ROW]}),
        tensor_column("signs", np.stack(signs), {"dtype": "int8", "role": "input",
                                                 "note": "first n entries; the rest are 0",
                                                 "logical_shape": [ROW]}),
        tensor_column("exp_butterfly", np.stack(bf), f32),
        tensor_column("exp_exact", np.stack(ex), f32),
        tensor_column("exp_butterfly_bf16", np.stack(bf16), {**f32, "dtype": "bfloat16-in-float32"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md"}


# =============================================================================================
# quantize_rotated
# =============================================================================================
def specs_quantize_rotated(level):
    out = []
    for fmt in FORMATS:
        for pname in PROFILES:
            p = PROFILES[pname]
            if p.nvfp4_amax_scope != "tensor" or p.nvfp4_tile_2d:
                continue    # rows are one-row tensors: the files would repeat te_nvfp4's
            out += [FileSpec("quantize_rotated", fmt, pname, s, level)
                    for s in ("float32", "bfloat16") if applies(fmt, pname, s)]
    return out


def build_quantize_rotated(spec, cross_check=True):
    from ...rotate import quantize_rotated, rotate
    fmt = FORMATS[spec.fmt]
    rows = [r for r in rotation_rows(spec.level, "q" + spec.src_dtype, ("H2", "H3", "H5", "H6"))
            if spec.level == 0 or r[2] in (16, 32, 128)]
    # every fourth row also rounds the rotated values to bf16 (TE's intermediate dtype)
    classes, srcs, signs, rots, scales, codes, tscales, round_to = [], [], [], [], [], [], [], []
    for i, (cls, b32, n, kind, seed, step, tid) in enumerate(rows):
        rt = "bfloat16" if i % 4 == 3 else "float32"
        src = to_src(b32, spec.src_dtype)
        x, sd = src_view(src, spec.src_dtype)
        sv = _signs(kind, n, seed, step, tid)
        mx = quantize_rotated(x.reshape(1, ROW), spec.fmt, spec.profile, n, signs=sv[:n],
                              round_to=rt, source_dtype=sd)
        rot = rotate(x, n, signs=sv[:n], round_to=rt, source_dtype=sd)
        classes.append(cls)
        srcs.append(src)
        signs.append(sv)
        round_to.append(rt)
        rots.append(rot.view(np.uint32))
        scales.append(mx.scales.reshape(-1))
        codes.append(mx.codes.reshape(-1))
        tscales.append(np.float32(mx.tensor_scale if mx.tensor_scale is not None else 1.0)
                       .view(np.uint32))
    src = np.stack(srcs)
    code_meta = {"dtype": fmt.element.name, "encoding": "ocp-code", "packing": "unpacked",
                 "role": "expected", "logical_shape": [ROW]}
    cols = [
        *head_columns(spec, classes, src,
               tags=[[r[3], f"n{r[2]}", rt] for r, rt in zip(rows, round_to)],
               extra=[f"{r[2]}|{r[3]}|{r[4]}|{rt}" for r, rt in zip(rows, round_to)]),
        plain_column("n", np.array([r[2] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[3] for r in rows], {"role": "input"}),
        dict_column("round_to", round_to, {"role": "input"}),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [ROW]}),
        tensor_column("signs", np.stack(signs), {"dtype": "int8", "role": "input",
                                                 "logical_shape": [ROW]}),
        tensor_column("exp_rotated", np.stack(rots), {"dtype": "float32", "role": "expected",
                                                      "encoding": "ieee754-bits",
                                                      "logical_shape": [ROW]}),
        tensor_column("exp_scales", np.stack(scales), {"dtype": fmt.scale.name, "role": "expected",
                                                       "encoding": "ocp-code"}),
        tensor_column("exp_codes", np.stack(codes), code_meta),
        plain_column("exp_tensor_scale", np.array(tscales, np.uint32), {
            "dtype": "float32", "role": "expected", "note": "NVFP4 only; 1.0 for MX"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md (butterfly) + docs/semantics.md"}


# =============================================================================================
# rotated_gemm
# =============================================================================================
RG_PAIRS = (("mxfp4", "mxfp4", "ocp"), ("mxfp8_e4m3", "mxfp4", "ocp"),
            ("mxfp6_e2m3", "mxfp6_e2m3", "ocp"), ("nvfp4", "nvfp4", "te_nvfp4"))
RG_SHAPE = (4, 4, 256)           # M, N, K


def specs_rotated_gemm(level):
    pairs = RG_PAIRS if level else RG_PAIRS[:1] + RG_PAIRS[3:]
    return [FileSpec("rotated_gemm", f"{a}+{b}", p, s, level) for a, b, p in pairs
            for s in ("float32", "bfloat16")]


def _rg_operands(cls, rng, m, n, k):
    x = rng.normal(m * k).reshape(m, k)
    w = rng.normal(n * k).reshape(n, k) * 0.05
    if cls == "RG2":                 # outlier channels of X: what rotations are for
        x[:, rng.ints(0, k, 3)] *= 40.0
    elif cls == "RG3":               # a NaN in X row 0 and an Inf in W row 1
        x[0, rng.int(0, k)] = np.nan
        w[1, rng.int(0, k)] = np.inf
    return x, w


def _exact_xwt(x32: np.ndarray, w32: np.ndarray) -> np.ndarray:
    """X.W^T of fp32 operands, exactly summed and rounded once to float64 (NaN if non-finite)."""
    out = np.empty((x32.shape[0], w32.shape[0]), np.float64)
    for i in range(x32.shape[0]):
        for j in range(w32.shape[0]):
            a, b = x32[i].astype(np.float64), w32[j].astype(np.float64)
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                out[i, j] = np.nan
                continue
            out[i, j] = float(sum(Fraction(float(u)) * Fraction(float(v)) for u, v in zip(a, b)))
    return out


def build_rotated_gemm(spec, cross_check=True):
    from ...gemm import gemm_error_bound
    from ...rotated_gemm import rotated_gemm
    fa, fb = spec.fmt.split("+")
    m, n, k = RG_SHAPE
    combos = [(16, "te16"), (32, "none"), (32, "random"), (128, "random"), (256, "none")]
    if spec.level == 0:
        combos = combos[2:3]
    rows = []
    for cls in ("RG1", "RG2", "RG3"):
        rng = C._Rng("rotated_gemm", spec.fmt, spec.src_dtype, cls)
        for i, (hn, kind) in enumerate(combos):
            x, w = _rg_operands(cls, rng, m, n, k)
            xs, ws = to_src(f32_bits(x), spec.src_dtype), to_src(f32_bits(w), spec.src_dtype)
            (xv, sd), (wv, _) = src_view(xs, spec.src_dtype), src_view(ws, spec.src_dtype)
            sv = _signs(kind, hn, 99 + i, i, 3)
            rt = "bfloat16" if i % 3 == 2 else "float32"
            kw = dict(n=hn, profile=spec.profile, signs=sv[:hn], round_to=rt, source_dtype=sd)
            ex = rotated_gemm(xv, wv, fa, fb, mode="exact", **kw)
            seq = rotated_gemm(xv, wv, fa, fb, mode="block_sequential", **kw)
            bound = gemm_error_bound(ex.qx, ex.qw)
            x32 = xv.astype(np.float32) if sd is None else bits_to_f32(xs, sd)
            w32 = wv.astype(np.float32) if sd is None else bits_to_f32(ws, sd)
            rows.append((cls, xs, ws, hn, kind, sv, rt, ex.y.view(np.uint32).reshape(-1),
                         seq.y.view(np.uint32).reshape(-1),
                         np.asarray(bound, np.float64).reshape(-1).view(np.uint64),
                         _exact_xwt(x32, w32).reshape(-1).view(np.uint64)))
    classes = [r[0] for r in rows]
    f32 = {"dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [m, n]}
    src_meta = {"dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input"}
    cols = [
        *head_columns(spec, classes, [np.concatenate([r[1].reshape(-1), r[2].reshape(-1)])
                               for r in rows],
               tags=[[r[4], f"n{r[3]}", r[6]] for r in rows],
               extra=[f"{r[3]}|{r[4]}|{r[6]}" for r in rows]),
        plain_column("n", np.array([r[3] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[4] for r in rows], {"role": "input"}),
        dict_column("round_to", [r[6] for r in rows], {"role": "input"}),
        tensor_column("signs", np.stack([r[5] for r in rows]), {"dtype": "int8", "role": "input",
                                                                "logical_shape": [ROW]}),
        tensor_column("x_bits", np.stack([r[1] for r in rows]), {**src_meta,
                                                                 "logical_shape": [m, k]}),
        tensor_column("w_bits", np.stack([r[2] for r in rows]), {**src_meta,
                                                                 "logical_shape": [n, k]}),
        tensor_column("exp_exact", np.stack([r[7] for r in rows]), {**f32, "contract": "exact"}),
        tensor_column("exp_block_sequential", np.stack([r[8] for r in rows]),
                      {**f32, "contract": "block_sequential"}),
        tensor_column("exp_bound", np.stack([r[9] for r in rows]), {
            "dtype": "float64", "role": "expected", "logical_shape": [m, n],
            "contract": "bound: |y - exp_exact| <= exp_bound"}),
        tensor_column("ref_xwt", np.stack([r[10] for r in rows]), {
            "dtype": "float64", "role": "information", "logical_shape": [m, n],
            "note": "X.W^T of the unquantized operands, exact sum rounded once to float64"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md + docs/gemm.md"}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "rotate": (specs_rotate, build_rotate),
    "quantize_rotated": (specs_quantize_rotated, build_quantize_rotated),
    "rotated_gemm": (specs_rotated_gemm, build_rotated_gemm),
}
