"""The golden ops, once (TestFloat's ``functionInfos.c``).

One line per op of the golden corpus: its family (the module pair that writes and reads it:
``mxref/golden/suites/<family>.py`` and ``mxref/verify/checks/<family>.py``), whether its
expected bits depend on a profile, the backend method ``verify`` calls for it, and its row
layout (input columns, then expected columns; every file also has the four columns of
:data:`COMMON_COLUMNS`). Everything else that used to list the ops (CORE_OPS, EXT_OPS,
GOLDEN_OPS, PROFILE_FREE_OPS, RUNNERS, ...) is derived from :data:`OPS`.

The row layouts themselves are documented in ``golden/README.md``; the backend methods in
:mod:`mxref.backends.base`.
"""
from __future__ import annotations

from dataclasses import dataclass

#: columns every golden file has, in this order, before its op's own columns
COMMON_COLUMNS = ("case_id", "class", "tags", "check")

#: families in the order the corpus and the reports list them
FAMILIES = ("quantize", "rotate", "gemm", "sr", "fp8fp4", "decompose")


@dataclass(frozen=True)
class Op:
    """One golden op.

    ``profile_free``: its expected bits do not depend on a profile (its files are labelled
    ``ocp`` and every backend is asked for them whatever profiles it claims).
    ``method``: the backend method verify calls (``pack`` also calls ``scale_layout``).
    ``inputs`` / ``expected``: the op's own row columns, in file order.
    """

    name: str
    family: str
    profile_free: bool
    method: str
    inputs: tuple
    expected: tuple

    @property
    def columns(self) -> tuple:
        """Every column of the op's golden files, in file order."""
        return COMMON_COLUMNS + self.inputs + self.expected


OPS: dict[str, Op] = {op.name: op for op in (
    # -- quantize: the core conversions --------------------------------------------------------
    Op("quantize_mx", "quantize", False, "quantize_mx",
       ("n_valid", "src_bits"), ("exp_scale", "exp_codes", "exp_packed", "exp_dequant")),
    Op("quantize_mx_tensor", "quantize", False, "quantize_mx",
       ("src_bits",), ("exp_scales_axis0", "exp_codes_axis0", "exp_scales_axis1",
                       "exp_codes_axis1")),
    Op("quantize_nvfp4", "quantize", False, "quantize_nvfp4",
       ("src_bits",), ("exp_scales", "exp_codes", "exp_tensor_scale", "exp_dequant")),
    Op("convert", "quantize", False, "convert", ("src_bits",), ("exp_codes",)),
    Op("dequantize", "quantize", True, "dequantize", ("scale", "codes"), ("exp_dequant",)),
    Op("pack", "quantize", True, "pack",
       ("kind", "shape", "input"), ("exp_packed", "exp_cublas", "exp_amd")),
    # -- rotate: Hadamard rotations and what is built on them ----------------------------------
    Op("rotate", "rotate", True, "rotate",
       ("n", "sign_kind", "seed", "step", "tensor_id", "src_bits", "signs"),
       ("exp_butterfly", "exp_exact", "exp_butterfly_bf16")),
    Op("quantize_rotated", "rotate", False, "quantize_rotated",
       ("n", "sign_kind", "round_to", "src_bits", "signs"),
       ("exp_rotated", "exp_scales", "exp_codes", "exp_tensor_scale")),
    Op("rotated_gemm", "rotate", False, "rotated_gemm",
       ("n", "sign_kind", "round_to", "signs", "x_bits", "w_bits"),
       ("exp_exact", "exp_block_sequential", "exp_bound", "ref_xwt")),
    # -- gemm ----------------------------------------------------------------------------------
    Op("gemm", "gemm", True, "gemm",
       ("m", "n", "k", "a_codes", "a_scales", "b_codes", "b_scales", "a_tensor_scale",
        "b_tensor_scale"), ("exp_exact", "exp_block_sequential", "exp_bound")),
    # -- sr: stochastic rounding -----------------------------------------------------------------
    Op("quantize_mx_sr", "sr", False, "quantize_mx_sr",
       ("src_bits", "rbits", "seed", "offset"), ("exp_scale", "exp_codes")),
    Op("quantize_nvfp4_sr", "sr", False, "quantize_nvfp4_sr",
       ("src_bits", "rbits", "seed", "offset"), ("exp_scales", "exp_codes", "exp_tensor_scale")),
    # -- fp8fp4: FP8 <-> MXFP4 and re-blocking ---------------------------------------------------
    Op("mxfp4_to_fp8", "fp8fp4", True, "mxfp4_to_fp8",
       ("group", "codes", "scales", "n_groups"), ("exp_codes", "exp_scales", "exp_exact")),
    Op("fp8_to_mxfp4", "fp8fp4", False, "fp8_to_mxfp4",
       ("codes", "group_scales"), ("exp_scales", "exp_codes")),
    Op("reblock", "fp8fp4", False, "reblock",
       ("codes_axis1", "scales_axis1"), ("exp_codes_axis0", "exp_scales_axis0")),
    # -- decompose: the exact error decomposition and its corrections ---------------------------
    Op("decompose", "decompose", False, "decompose",
       ("src_bits", "denominator"), ("exp_scale", "exp_dead", "exp_grid", "exp_total",
                                     "exp_flags")),
    Op("macroblock", "decompose", False, "macroblock",
       ("macro", "macro_scale_dtype", "src_bits", "n_macro"),
       ("exp_macro_scales", "exp_scales", "exp_codes")),
    Op("outlier_fallback", "decompose", False, "outlier_fallback",
       ("rule", "src_bits"), ("exp_flagged", "exp_scales", "exp_codes", "exp_residual")),
    Op("quantize_4over6", "decompose", False, "quantize_4over6",
       ("src_bits",), ("exp_scales", "exp_codes", "exp_tensor_scale", "exp_choice")),
)}

#: every golden op name, in table order
OP_NAMES: tuple = tuple(OPS)
#: ops whose expected bits do not depend on a profile
PROFILE_FREE_OPS: tuple = tuple(n for n, o in OPS.items() if o.profile_free)


def family_ops(family: str) -> tuple:
    """The op names of one family, in table order."""
    if family not in FAMILIES:
        raise KeyError(f"unknown op family {family!r}; known: {', '.join(FAMILIES)}")
    return tuple(n for n, o in OPS.items() if o.family == family)
