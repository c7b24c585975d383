"""Golden files of the ``fp8fp4`` family: MXFP4 -> FP8 (``mxfp4_to_fp8``: format ``mxfp4``, profile
``ocp``), FP8 -> MXFP4 (``fp8_to_mxfp4``: src_dtype ``e4m3``) and re-blocking (``reblock``).
"""
from __future__ import annotations

import numpy as np

from ...formats import FORMATS
from ...profiles import get_profile
from ...quantize import MXTensor, quantize
from .. import cases as C
from ..cases import ROW
from ..columns import MX_FORMATS, FileSpec, applies, f32_bits, head_columns
from ..writer import plain_column, tensor_column

CONVERT_PROFILES = ("ocp", "rceil")


FP8_GROUPS = (32, 128, 0)       # 0 = the whole row ("row")


def specs_mxfp4_to_fp8(level):
    return [FileSpec("mxfp4_to_fp8", "mxfp4", "ocp", "float32", level)]


def specs_fp8_to_mxfp4(level):
    return [FileSpec("fp8_to_mxfp4", "mxfp4", p, "e4m3", level) for p in CONVERT_PROFILES]


def specs_reblock(level):
    return [FileSpec("reblock", f, p, "float32", level) for f in MX_FORMATS for p in CONVERT_PROFILES
            if applies(f, p)]


def _mxfp4_row(cls, rng, i):
    """One MXFP4 row of ROW elements: (codes [ROW], scales [ROW/32])."""
    nb = ROW // 32
    codes = np.array(rng.ints(0, 16, ROW), np.uint8)
    base = 127 + rng.int(-10, 10)
    if cls == "C1":                                     # one scale for every block
        scales = np.full(nb, base)
    elif cls == "C2":                                   # spread 1..6: exact in E4M3
        scales = base - np.array(rng.ints(0, 1 + (i % 6) + 1, nb))
    elif cls == "C3":                                   # wide spread: E4M3 subnormals / flush
        scales = base - np.array(rng.ints(0, 12 + 4 * (i % 4), nb))
    elif cls == "C4":                                   # a NaN block
        scales = np.full(nb, base)
        scales[i % nb] = 0xFF
    elif cls == "C5":                                   # all-zero blocks and -0 codes
        scales = np.full(nb, base)
        codes[: 64] = 0
        codes[64: 96] = 8
    else:                                               # C6: scale extremes 0x00 / 0xFE
        scales = np.array([0x00, 0x01, 0xFE, 0xFD, 0x7F, 0x00, 0xFE, 0x80][: nb])
        if i % 2:
            scales = np.array([0xFE] * (nb // 2) + [0xF0] * (nb - nb // 2))
    return codes, np.clip(scales, 0, 255).astype(np.uint8)


def build_mxfp4_to_fp8(spec, cross_check=True):
    from ...fp8fp4 import mxfp4_to_fp8
    per = 1 if spec.level == 0 else 6
    rows = []
    for cls in ("C1", "C2", "C3", "C4", "C5", "C6"):
        rng = C._Rng("mxfp4_to_fp8", cls)
        for i in range(per):
            codes, scales = _mxfp4_row(cls, rng, i)
            for g in (FP8_GROUPS if spec.level else (128,)):
                mx = MXTensor(codes=codes[None].copy(), scales=scales[None].copy(),
                              fmt=FORMATS["mxfp4"], profile=get_profile("ocp"), axis=1,
                              block_size=32)
                f8 = mxfp4_to_fp8(mx, group=g if g else "row")
                gsc = np.zeros(ROW // 32, np.uint8)
                gex = np.zeros(ROW // 32, np.uint8)
                ng = f8.scales.size
                gsc[:ng] = f8.scales.reshape(-1)
                gex[:ng] = np.asarray(f8.exact).reshape(-1)
                rows.append((cls, codes, scales, g, ng, f8.codes.reshape(-1), gsc, gex))
    classes = [r[0] for r in rows]
    cols = [
        *head_columns(spec, classes, [np.concatenate([r[1], r[2]]) for r in rows],
               tags=[[f"group{r[3] or 'row'}"] for r in rows],
               extra=[r[3] for r in rows]),
        plain_column("group", np.array([r[3] for r in rows], np.uint32), {
            "role": "input", "note": "elements per group along the row; 0 = the whole row"}),
        tensor_column("codes", np.stack([r[1] for r in rows]), {"dtype": "e2m1", "role": "input",
                      "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("scales", np.stack([r[2] for r in rows]), {"dtype": "e8m0", "role": "input"}),
        plain_column("n_groups", np.array([r[4] for r in rows], np.uint8), {"role": "expected"}),
        tensor_column("exp_codes", np.stack([r[5] for r in rows]), {
            "dtype": "e4m3", "role": "expected", "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("exp_scales", np.stack([r[6] for r in rows]), {
            "dtype": "e8m0", "role": "expected", "note": "first n_groups entries"}),
        tensor_column("exp_exact", np.stack([r[7] for r in rows]), {
            "dtype": "bool", "role": "expected", "note": "first n_groups entries"}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


def build_fp8_to_mxfp4(spec, cross_check=True):
    from ...fp8fp4 import FP8Tensor, fp8_to_mxfp4
    per = 1 if spec.level == 0 else 8
    rows = []
    for cls in ("C1", "C3", "C4", "C6", "C7"):
        rng = C._Rng("fp8_to_mxfp4", cls)
        for i in range(per):
            codes = np.array(rng.ints(0, 256, ROW), np.uint8)
            if cls != "C4":                                # no NaN codes outside C4
                codes[(codes & 0x7F) == 0x7F] ^= 0x01
            if cls == "C7":                                # every E4M3 code once (+ padding)
                codes = np.arange(ROW, dtype=np.uint8)
            base = 127 + rng.int(-20, 20)
            if cls == "C6":
                gs = np.array([(0x00, 0xFE), (0x01, 0xFD), (0xFE, 0xFE), (0x00, 0x00),
                               (0x7F, 0xF8), (0x10, 0x08), (0xF0, 0x05), (0x02, 0xFC)][i % 8])
            else:
                gs = np.array([base, base - rng.int(0, 8)])
            gs = gs.astype(np.uint8)
            f8 = FP8Tensor(codes=codes[None].copy(), scales=gs[None].copy(), group=128, axis=1,
                           fp8="e4m3", exact=np.ones((1, 2), bool))
            mx = fp8_to_mxfp4(f8, profile=spec.profile)
            rows.append((cls, codes, gs, mx.scales.reshape(-1), mx.codes.reshape(-1)))
    classes = [r[0] for r in rows]
    cols = [
        *head_columns(spec, classes, [np.concatenate([r[1], r[2]]) for r in rows],
               tags=[[] for _ in rows]),
        tensor_column("codes", np.stack([r[1] for r in rows]), {"dtype": "e4m3", "role": "input",
                      "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("group_scales", np.stack([r[2] for r in rows]), {
            "dtype": "e8m0", "role": "input", "note": "one per 128 elements"}),
        tensor_column("exp_scales", np.stack([r[3] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[4] for r in rows]), {
            "dtype": "e2m1", "role": "expected", "encoding": "ocp-code", "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


RB_SHAPE = (64, 64)


def build_reblock(spec, cross_check=True):
    from ...fp8fp4 import reblock
    per = 1 if spec.level == 0 else 4
    rows = []
    for cls in ("B1", "B2", "B3"):
        rng = C._Rng("reblock", spec.fmt, cls)
        for i in range(per):
            x = rng.normal(RB_SHAPE[0] * RB_SHAPE[1]).reshape(RB_SHAPE)
            if cls == "B2":                  # heavy tails: per-row and per-column outliers
                x = rng.student_t3(x.size).reshape(RB_SHAPE) * 2.0 ** rng.int(-20, 20)
            elif cls == "B3":                # specials and extremes: NaN, zero rows, 2^-130 rows
                x[i % 64, 5] = np.nan
                x[(i + 7) % 64, :] = 0.0
                x[(i + 9) % 64, :] *= 2.0 ** -130
                x[(i + 11) % 64, :32] = -0.0
            src = quantize(f32_bits(x).view(np.float32), spec.fmt, spec.profile, axis=1)
            out = reblock(src, axis=0, profile=spec.profile)
            rows.append((cls, src.codes, src.scales, out.codes, out.scales))
    classes = [r[0] for r in rows]
    el = FORMATS[spec.fmt].element
    cm = {"dtype": el.name, "encoding": "ocp-code", "packing": "unpacked",
          "logical_shape": list(RB_SHAPE)}
    cols = [
        *head_columns(spec, classes, [np.concatenate([r[1].reshape(-1), r[2].reshape(-1)])
                               for r in rows],
               tags=[[] for _ in rows]),
        tensor_column("codes_axis1", np.stack([r[1] for r in rows]), {**cm, "role": "input"}),
        tensor_column("scales_axis1", np.stack([r[2] for r in rows]), {"dtype": "e8m0",
                                                                       "role": "input"}),
        tensor_column("exp_codes_axis0", np.stack([r[3] for r in rows]), {**cm, "role": "expected"}),
        tensor_column("exp_scales_axis0", np.stack([r[4] for r in rows]), {"dtype": "e8m0",
                                                                           "role": "expected"}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "mxfp4_to_fp8": (specs_mxfp4_to_fp8, build_mxfp4_to_fp8),
    "fp8_to_mxfp4": (specs_fp8_to_mxfp4, build_fp8_to_mxfp4),
    "reblock": (specs_reblock, build_reblock),
}
