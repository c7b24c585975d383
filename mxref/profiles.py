"""Semantic profiles: every implementation-defined choice, in one named place.

Like SoftFloat's "specialization" directories, a `Profile` fixes each knob where MX stacks
disagree; the kernels read the profile's knobs and never a stack's name. Each named profile
documents where its behaviour comes from (the divergence numbers refer to
shared/research/mx_anchors.md section B) and which vectors tell it apart from ``ocp``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from .errors import ProfileConflictError, UnknownProfileError

__all__ = ["Profile", "PROFILES", "get_profile", "SCALE_RULES", "ROUNDINGS", "INT8_MINS"]

SCALE_RULES = ("floor", "rceil", "ceil", "even", "round_down")
ROUNDINGS = ("rne", "ties_away", "ties_zero", "stochastic")
OVERFLOWS = ("saturate", "nonsaturating")
NAN_POLICIES = ("poison", "ignore")          # poison: scale 0xFF; ignore: amax skips NaN (TE)
INF_POLICIES = ("poison", "scale_max", "exponent")
# scale_max: Inf amax -> 0xFE (TE satfinite); exponent: Inf read as 2^128 by the scale rule
# (torchao 0.18 FLOOR/CEIL/EVEN take the exponent field of the Inf bits)
ZERO_SCALE_ELEM_EXP = (-127, -126, 0)   # exponent elements are divided by when the byte is 0x00
SIGNED_ZERO = ("preserve", "input_neg_zero_to_pos", "never_negative")
RCEIL_SUBNORMAL = ("exact", "any_up")        # any_up: triton_kernels bits + 0x7FFFFF (B5)
SCALE_OVERFLOW = ("clamp", "nan")            # shared exponent > 127: clamp (OCP) or NaN (microxcaling)
RAGGED = ("zero_pad", "error")
NVFP4_ORDERS = ("exact", "te", "torchao", "triton_kernels")
# triton_kernels: single-level, S = E4M3_rne(min(fl(amax / 6), 448)), x * fl(1 / S) (0 if S = 0)
NVFP4_SCALE_MIN = ("subnormal", "tiny")      # tiny: clamp the E4M3 block scale to >= 2^-6 (torchao)
INT8_MINS = ("symmetric", "full")            # MXINT8's smallest code: 0x81 (-127/64) or 0x80 (-2.0)
NAN_ELEMENTS = ("nan", "signed_max")         # NaN element of an unpoisoned block (AMD gfx950: +-max)
ZERO_BLOCK_AMAX = ("zero", "min_normal")     # all-zero block's amax read as 0 or 2^-126 (microxcaling torch)
NVFP4_AMAX_SCOPES = ("tensor", "row")        # NVFP4 second-level (fp32) scale per tensor or per row


@dataclass(frozen=True)
class Profile:
    """All knobs of an MX / NVFP4 quantization. Defaults are the canonical OCP semantics."""

    name: str
    description: str = ""
    source: str = ""
    scale_rule: str = "floor"
    rounding: str = "rne"
    overflow: str = "saturate"
    nan_in_block: str = "poison"
    inf_in_block: str = "poison"
    signed_zero: str = "preserve"
    flush_fp32_subnormals: bool = False
    block_size: int | None = None      # None: the format's own (32 MX, 16 NVFP4)
    block_axis: int = -1
    ragged: str = "zero_pad"
    rceil_subnormal: str = "exact"
    scale_overflow: str = "clamp"
    nvfp4_order: str = "exact"
    nvfp4_scale_min: str = "subnormal"
    nvfp4_tensor_scale: bool = True
    zero_scale_elem_exp: int = -127    # -126: torchao FLOOR/CEIL/EVEN clamp; 0: torchao RCEIL
    rceil_f32_log2: bool = False       # torchao 0.18 RCEIL: ceil(float32 log2(fl(amax / max)))
    amax_floor: int = 0
    """fp32 bits of a floor the scale rule applies to the block amax (max(amax, floor)); 0: none.
    DeepSeek-V4 MXFP4 (reference 6*2^-126, vLLM Triton 1e-4)."""
    nan_element: str = "nan"
    scale_log2_f32: bool = False       # floor rule from floor(fl32(log2(amax))) (microxcaling torch)
    element_round_f32: bool = False    # elements as floor(|x| * 2^k + 0.5) in float32 (microxcaling torch)
    zero_block_amax: str = "zero"
    nvfp4_amax_scope: str = "tensor"
    nvfp4_tile_2d: bool = False        # NVFP4 block = a 16x16 tile of the last two axes (TE 2D weights)
    source_dtypes: tuple | None = None  # source dtypes the stack's semantics are defined for; None: all
    int8_min: str = "symmetric"
    """MXINT8's most negative element. ``symmetric``: codes -127..127 (0x81 = -127/64 is the
    smallest), so a negative x/X below -127/64 rounds and saturates to 0x81, as it does on the
    positive side. ``full``: the two's complement code 0x80 = -2.0 is reachable; a negative x/X
    whose magnitude rounds above 127/64 (x/X <= -127.5/64 under RNE: the tie 127.5 picks the
    even 128) or overflows (-Inf included) gives 0x80, as graphcore gfloat 0.5.2 does
    (``round_float`` saturates a negative value to ``-fi.min`` = 2.0 for ``format_info_ocp_int8``).
    Only MXINT8 reads it; decoding 0x80 as -2.0 is the same under both.

    Why ``symmetric`` is the default: the OCP MX v1.0 PDF is not in any source this project
    can search, so its sentence on the INT8 code 0b1000_0000 could not be quoted here. The
    only spec reading on record is microxcaling's README (which cites the spec): "Following
    the OCP MX Formats Specification, MXINT elements utilize 2's complement with the
    asymmetric maximum negative representation left unused", in line with the spec's INT8
    element table as recalled (max normal 1 63/64; not re-read here). Nothing on record
    mandates -2.0, so ``ocp`` keeps ``symmetric`` and its committed corpus is unchanged;
    ``full`` exists for the stacks that emit 0x80 (``gfloat``)."""
    formats: tuple | None = None       # formats the source stack defines; None: every format
    distinguishing: tuple = field(default_factory=tuple)  # prose: vectors that tell it from ocp

    def __post_init__(self):
        for knob, allowed in (("scale_rule", SCALE_RULES), ("rounding", ROUNDINGS),
                              ("overflow", OVERFLOWS), ("nan_in_block", NAN_POLICIES),
                              ("inf_in_block", INF_POLICIES), ("signed_zero", SIGNED_ZERO),
                              ("ragged", RAGGED), ("rceil_subnormal", RCEIL_SUBNORMAL),
                              ("scale_overflow", SCALE_OVERFLOW), ("nvfp4_order", NVFP4_ORDERS),
                              ("nvfp4_scale_min", NVFP4_SCALE_MIN), ("int8_min", INT8_MINS),
                              ("nan_element", NAN_ELEMENTS), ("zero_block_amax", ZERO_BLOCK_AMAX),
                              ("nvfp4_amax_scope", NVFP4_AMAX_SCOPES)):
            value = getattr(self, knob)
            if value not in allowed:
                raise ProfileConflictError(
                    f"profile {self.name!r}: {knob}={value!r} is not one of {allowed}")
        if self.zero_scale_elem_exp not in ZERO_SCALE_ELEM_EXP:
            raise ProfileConflictError(
                f"profile {self.name!r}: zero_scale_elem_exp={self.zero_scale_elem_exp!r} is not "
                f"one of {ZERO_SCALE_ELEM_EXP}")
        if self.rceil_f32_log2 and (self.scale_rule != "rceil" or self.rceil_subnormal != "exact"):
            raise ProfileConflictError(
                f"profile {self.name!r}: rceil_f32_log2 needs scale_rule='rceil' with "
                "rceil_subnormal='exact'")
        if self.rceil_subnormal != "exact" and self.scale_rule != "rceil":
            raise ProfileConflictError(
                f"profile {self.name!r}: rceil_subnormal={self.rceil_subnormal!r} only applies "
                f"to scale_rule='rceil', not {self.scale_rule!r}")
        if self.nan_in_block == "ignore" and self.inf_in_block == "poison":
            raise ProfileConflictError(
                f"profile {self.name!r}: nan_in_block='ignore' with inf_in_block='poison' "
                "has no source stack; ignoring NaN while poisoning on Inf is contradictory")
        if self.block_size is not None and (not isinstance(self.block_size, int)
                                            or self.block_size < 1):
            raise ProfileConflictError(
                f"profile {self.name!r}: block_size must be a positive int, got {self.block_size!r}")
        # NVFP4 variants (triton_kernels_nvfp4, te_nvfp4_row, te_nvfp4_2d)
        if not isinstance(self.nvfp4_tile_2d, bool):
            raise ProfileConflictError(
                f"profile {self.name!r}: nvfp4_tile_2d must be a bool, got {self.nvfp4_tile_2d!r}")
        if self.nvfp4_order == "triton_kernels" and self.nvfp4_tensor_scale:
            raise ProfileConflictError(
                f"profile {self.name!r}: nvfp4_order='triton_kernels' is single-level "
                "(downcast_to_mxfp has no tensor scale); set nvfp4_tensor_scale=False")
        if self.nvfp4_amax_scope == "row" and not self.nvfp4_tensor_scale:
            raise ProfileConflictError(
                f"profile {self.name!r}: nvfp4_amax_scope='row' scopes the second-level "
                "(tensor) scale, which nvfp4_tensor_scale=False removes")
        if self.nvfp4_amax_scope == "row" and self.nvfp4_tile_2d:
            raise ProfileConflictError(
                f"profile {self.name!r}: nvfp4_amax_scope='row' with nvfp4_tile_2d has no "
                "source stack (TE's row-scaled NVFP4 supports 1x16 tiles only)")
        # amax_floor (dsv4, dsv4_vllm)
        if isinstance(self.amax_floor, bool) or not isinstance(self.amax_floor, int) or \
                not 0 <= self.amax_floor < 0x5F800000:
            raise ProfileConflictError(
                f"profile {self.name!r}: amax_floor must be 0 or the fp32 bits of a positive "
                f"number below 2^64 (0x5F800000), got {self.amax_floor!r}")
        if self.amax_floor and self.zero_block_amax != "zero":
            raise ProfileConflictError(
                f"profile {self.name!r}: amax_floor with zero_block_amax="
                f"{self.zero_block_amax!r}: two rules for an all-zero block's amax")
        # microxcaling torch path (microxcaling_torch)
        for knob in ("scale_log2_f32", "element_round_f32"):
            if not isinstance(getattr(self, knob), bool):
                raise ProfileConflictError(
                    f"profile {self.name!r}: {knob} must be a bool, got {getattr(self, knob)!r}")
        if self.scale_log2_f32 and self.scale_rule != "floor":
            raise ProfileConflictError(
                f"profile {self.name!r}: scale_log2_f32 is the float32-log2 variant of "
                f"scale_rule='floor', not {self.scale_rule!r}")
        if self.element_round_f32 and self.rounding != "ties_away":
            raise ProfileConflictError(
                f"profile {self.name!r}: element_round_f32 is floor(|x| * 2^k + 0.5) in float32, "
                f"a variant of rounding='ties_away', not {self.rounding!r}")
        if self.source_dtypes is not None and (
                not isinstance(self.source_dtypes, tuple) or not self.source_dtypes or
                any(d not in ("float32", "bfloat16", "float16") for d in self.source_dtypes)):
            raise ProfileConflictError(
                f"profile {self.name!r}: source_dtypes must be None or a non-empty tuple of "
                f"'float32', 'bfloat16', 'float16', got {self.source_dtypes!r}")

    def replace(self, **knobs) -> "Profile":
        """A copy with some knobs changed (validated again)."""
        return replace(self, **knobs)

    def knobs(self) -> dict:
        d = asdict(self)
        d["distinguishing"] = list(self.distinguishing)
        d["formats"] = None if self.formats is None else list(self.formats)
        d["source_dtypes"] = None if self.source_dtypes is None else list(self.source_dtypes)
        return d

    def check_format(self, fmt) -> None:
        """Refuse knob/format combinations that cannot mean anything."""
        el = fmt.element
        if self.formats is not None and fmt.name not in self.formats:
            raise ProfileConflictError(
                f"profile {self.name!r} is defined only for {', '.join(self.formats)}, "
                f"not {fmt.name}")
        if self.nan_element == "signed_max" and (el.nan_code is not None or el.kind == "int"):
            raise ProfileConflictError(
                f"profile {self.name!r}: nan_element='signed_max' is for float formats without "
                f"NaN (FP4/FP6); {fmt.name} ({el.name}) encodes NaN itself or is an integer")
        if self.overflow == "nonsaturating" and el.nan_code is None:
            raise ProfileConflictError(
                f"profile {self.name!r}: overflow='nonsaturating' needs a format with NaN or Inf; "
                f"{fmt.name} ({el.name}) has neither")
        if fmt.is_nvfp4 and (self.inf_in_block == "exponent" or self.zero_scale_elem_exp != -127):
            raise ProfileConflictError(
                f"profile {self.name!r}: inf_in_block='exponent' and zero_scale_elem_exp are "
                "E8M0 knobs; NVFP4 does not define them")
        if fmt.is_nvfp4 and self.amax_floor:
            raise ProfileConflictError(
                f"profile {self.name!r}: amax_floor is an E8M0 scale knob; NVFP4 does not "
                "define it")
        if fmt.is_nvfp4 and self.scale_rule != "floor":
            raise ProfileConflictError(
                f"profile {self.name!r}: scale_rule={self.scale_rule!r} is an E8M0 rule; NVFP4 "
                "block scales are E4M3 values chosen by nvfp4_order")
        if fmt.is_nvfp4 and (self.scale_log2_f32 or self.element_round_f32
                             or self.zero_block_amax != "zero"):
            raise ProfileConflictError(
                f"profile {self.name!r}: scale_log2_f32 / element_round_f32 / zero_block_amax "
                "are knobs of microxcaling's E8M0 torch path; NVFP4 does not define them")
        if not fmt.is_nvfp4 and (self.nvfp4_amax_scope != "tensor" or self.nvfp4_tile_2d
                                 or self.nvfp4_order == "triton_kernels"):
            raise ProfileConflictError(
                f"profile {self.name!r}: nvfp4_amax_scope / nvfp4_tile_2d / "
                f"nvfp4_order='triton_kernels' are NVFP4 knobs; {fmt.name} has no such scales")

    def check_source_dtype(self, src_dtype) -> None:
        """Refuse a source dtype the profile's stack is not modelled for (``source_dtypes``)."""
        if self.source_dtypes is not None and src_dtype not in self.source_dtypes:
            raise ProfileConflictError(
                f"profile {self.name!r} is defined only for {', '.join(self.source_dtypes)} "
                f"sources, not {src_dtype}")

    def kernel_params(self) -> np.ndarray:
        p = np.zeros(N_KNOBS, dtype=np.int64)
        p[K_SCALE_RULE] = SCALE_RULES.index(self.scale_rule)
        p[K_ROUNDING] = ROUNDINGS.index(self.rounding)
        p[K_OVERFLOW] = OVERFLOWS.index(self.overflow)
        p[K_NAN] = NAN_POLICIES.index(self.nan_in_block)
        p[K_INF] = INF_POLICIES.index(self.inf_in_block)
        p[K_SZERO] = SIGNED_ZERO.index(self.signed_zero)
        p[K_FLUSH] = int(self.flush_fp32_subnormals)
        p[K_RCEIL_SUB] = RCEIL_SUBNORMAL.index(self.rceil_subnormal)
        p[K_SCALE_OVF] = SCALE_OVERFLOW.index(self.scale_overflow)
        p[K_NV_ORDER] = NVFP4_ORDERS.index(self.nvfp4_order)
        p[K_NV_MIN] = NVFP4_SCALE_MIN.index(self.nvfp4_scale_min)
        p[K_NV_TSCALE] = int(self.nvfp4_tensor_scale)
        p[K_ZEXP] = self.zero_scale_elem_exp
        p[K_RCEIL_LOG2] = int(self.rceil_f32_log2)
        p[K_INT8_MIN] = INT8_MINS.index(self.int8_min)
        p[K_AMAX_FLOOR] = self.amax_floor
        p[K_NAN_ELEM] = NAN_ELEMENTS.index(self.nan_element)
        p[K_LOG2_F32] = int(self.scale_log2_f32)
        p[K_ELEM_F32] = int(self.element_round_f32)
        p[K_ZERO_AMAX] = ZERO_BLOCK_AMAX.index(self.zero_block_amax)
        p[K_NV_SCOPE] = NVFP4_AMAX_SCOPES.index(self.nvfp4_amax_scope)
        p[K_NV_2D] = int(self.nvfp4_tile_2d)
        return p


(K_SCALE_RULE, K_ROUNDING, K_OVERFLOW, K_NAN, K_INF, K_SZERO, K_FLUSH, K_RCEIL_SUB, K_SCALE_OVF,
 K_NV_ORDER, K_NV_MIN, K_NV_TSCALE, K_ZEXP, K_RCEIL_LOG2, K_INT8_MIN,
 K_AMAX_FLOOR, K_NAN_ELEM, K_LOG2_F32, K_ELEM_F32, K_ZERO_AMAX, K_NV_SCOPE, K_NV_2D,
 K_SPARE) = range(23)
N_KNOBS = 23

_OCP = Profile(
    "ocp",
    description="Canonical OCP MX v1.0: floor scale (6.3), RNE, saturate to max normal, any "
                "NaN/Inf in a block -> scale 0xFF, -0 kept, exponent clamped to [-127, 127]. "
                "For NVFP4: exact single rounding of every scale and element, E4M3 subnormal "
                "block scales allowed.",
    source="OCP MX v1.0 section 6.3 and the MX paper's Algorithm 1",
)

PROFILES: dict[str, Profile] = {p.name: p for p in (
    _OCP,
    _OCP.replace(
        name="rceil",
        description="OCP with the NVIDIA round-up scale rule: X = 2^ceil(log2(amax / max_elem)).",
        source="cuBLAS/cuDNN block scaling docs; B1",
        scale_rule="rceil",
        distinguishing=("mxfp8_e4m3 block amax 480: ocp scale 0x7F (480->448), rceil 0x80 (exact 240)",)),
    _OCP.replace(
        name="torchao_floor",
        description="torchao 0.18 mx_formats to_mx, ScaleCalculationMode.FLOOR (default): the "
                    "ocp rule, but an Inf is read as 2^128 by the scale (FP8: byte 0xF7) and a "
                    "0x00 block divides its elements by 2^-126 (scale clamped to the smallest "
                    "normal); NaN block -> 0xFF.",
        source="pytorch/ao torchao/prototype/mx_formats/mx_tensor.py::to_mx (torchao 0.18.0)",
        inf_in_block="exponent", zero_scale_elem_exp=-126,
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"),
        distinguishing=("none on finite data; NaN-block element bytes differ (don't-care)",)),
    _OCP.replace(
        name="torchao_rceil",
        description="torchao 0.18 to_mx ScaleCalculationMode.RCEIL (the cuBLAS algorithm, computed "
                    "as ceil(float32 log2(fl(amax / max)))): fp32 amax one ulp above a rceil "
                    "boundary stays below it; Inf amax -> 0xFE; a 0x00 block leaves its elements "
                    "unscaled (multiplier 1.0).",
        source="torchao mx_tensor.py::_to_mx_rceil (torchao 0.18.0); B1, B5",
        scale_rule="rceil", inf_in_block="scale_max", zero_scale_elem_exp=0, rceil_f32_log2=True,
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"),
        distinguishing=("mxfp4 block {7.0, 0.25}: scale 0x80, 7 -> 8 (code 0x6)",)),
    _OCP.replace(
        name="torchao_ceil",
        description="torchao 0.18 ScaleCalculationMode.CEIL: ceil(log2 amax) - emax_elem; Inf "
                    "and 0x00 blocks as torchao_floor.",
        source="torchao mx_tensor.py (mantissa_gt_one branch, torchao 0.18.0); B2",
        scale_rule="ceil", inf_in_block="exponent", zero_scale_elem_exp=-126,
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"),
        distinguishing=("mxfp8_e4m3 amax 300: ceil 2^1 (0x80), rceil 2^0 (0x7F)",)),
    _OCP.replace(
        name="torchao_even",
        description="torchao 0.18 / AMD Quark EVEN: round amax to the element mantissa width "
                    "(ties up), then floor; Inf and 0x00 blocks as torchao_floor.",
        source="torchao mx_tensor.py (EVEN branch, torchao 0.18.0); Quark mx/triton.py mode 2; B3",
        scale_rule="even", inf_in_block="exponent", zero_scale_elem_exp=-126,
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"),
        distinguishing=("mxfp4 amax 7.0 (significand 1.75): even 0x80, ocp 0x7F",)),
    _OCP.replace(
        name="microxcaling",
        description="microsoft/microxcaling default MX spec, its C++/CUDA path "
                    "(quantize_mx_func_cpp and the CUDA kernels): floor scale, round='nearest' "
                    "(ties away from zero), saturate_normals, shared exponent > 127 -> NaN, "
                    "every zero element +0.0 (-0.0 never appears).",
        source="microxcaling mx/elemwise_ops.py::_round_mantissa, mx/mx_ops.py::_shared_exponents; "
               "B15; zeros: mx/cpp/quantize.cuh::quantize_elemwise (the __host__ __device__ "
               "element function mx/cpp/funcs.cpp::quantize_mx_func_cpp calls) returns "
               "`if (tmant == 0) { return 0.0; }` for an input zero and for a mantissa that "
               "rounds to zero (microsoft/microxcaling@3b429a8)",
        rounding="ties_away", scale_overflow="nan", signed_zero="never_negative",
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"),
        distinguishing=("mxfp4 element 0.25 (scale 2^0): ties_away 0.5 (code 0x1), ocp 0 (0x0)",
                        "mxfp4 block {4.0, -0.0, -0.125}: scale 0x7F, codes 0x6, 0x0, 0x0 "
                        "(+0 twice); ocp 0x6, 0x8, 0x8")),
    _OCP.replace(
        name="microxcaling_torch",
        description="microsoft/microxcaling default MX spec, its pure-PyTorch path "
                    "(_quantize_mx(..., custom_cuda=False)) on float32 tensors: shared exponent "
                    "floor(fl32(log2(amax))) - emax_elem, so an amax a few ulps below a power of "
                    "two reads as that power (mxfp4 amax 0x40FFFFFF: scale 0x80, not 0x7F); an "
                    "all-zero block's amax is 2^-126 (FP32_MIN_NORMAL), so MXINT8 writes scale "
                    "0x01 (every FP format 0x00); exponent > 127 -> NaN (scale 0xFF); elements "
                    "sign(A) * floor(fl32(|A| * 2^k + 0.5)) on A = fl32(x / 2^s): ties away, "
                    "and |A| * 2^k = 0.5 - 2^-25 rounds up to one quantum (double rounding); "
                    "saturate; -0.0 inputs (and A underflowing to 0) give +0, a negative value "
                    "rounding to zero gives -0. Float32 sources only (the torch path takes log2 "
                    "and 2**e in the input dtype for bf16/fp16, not modelled).",
        source="microsoft/microxcaling mx/mx_ops.py::_shared_exponents, _quantize_mx "
               "(@3b429a8), mx/elemwise_ops.py::_quantize_elemwise_core, _round_mantissa "
               "(@4adf988), mx/formats.py FP32_MIN_NORMAL, _get_format_params (@3b429a8); "
               "vendored and run in tests/test_profile_microxcaling_torch.py",
        rounding="ties_away", scale_overflow="nan", signed_zero="input_neg_zero_to_pos",
        scale_log2_f32=True, element_round_f32=True, zero_block_amax="min_normal",
        source_dtypes=("float32",),
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"),
        distinguishing=("mxfp4 amax 0x40FFFFFF (8 - 2^-21): scale 0x80 (log2 rounds to 3.0), "
                        "microxcaling/ocp 0x7F",
                        "mxint8 all-zero block: scale 0x01; ocp 0x00",
                        "mxfp4 block {4.0, 0x3E7FFFFF}: scale 0x7F, codes 0x6, 0x1 (0.5); "
                        "microxcaling 0x6, 0x0",
                        "mxfp4 block {4.0, -0.0, -0.125}: codes 0x6, 0x0, 0x8 (-0 kept for "
                        "the underflow); microxcaling 0x6, 0x0, 0x0")),
    _OCP.replace(
        name="gfloat",
        description="graphcore-research gfloat 0.5.2 quantize_block(compute_scale_amax) + "
                    "encode_block (TiesToEven, sat=True): the ocp floor scale; an Inf in a "
                    "block gives floor(log2 Inf) clipped to 127 (scale 0xFE), the Inf saturates "
                    "to max normal and the finite elements are divided by 2^127; MXINT8 emits "
                    "0x80 (-2.0) for x/X <= -127.5/64. NaN into FP4/FP6/INT8 raises in gfloat "
                    "(kept here as ocp's poison rule; the gfloat backend reports Unsupported). "
                    "compute_scale_amax takes log2 in the array's dtype: on float64 arrays it "
                    "is the exact floor this profile uses; on float32 arrays an amax just "
                    "below a power of two >= 2 rounds up (amax 0x40FFFFFF: floor(log2) 3, not "
                    "2), not emulated.",
        source="gfloat 0.5.2 block.py::compute_scale_amax (clip(floor(log2 amax) - emax, "
               "-127, 127)), block.py::encode_block (sat = True), round.py::round_float "
               "(amax = -fi.min if sign else fi.max); formats.py::format_info_ocp_int8 "
               "(is_twos_complement: min -2.0)",
        inf_in_block="scale_max", int8_min="full",
        formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"),
        distinguishing=("mxint8 block {-127.5/64}: scale 0x7F, code 0x80 (-2.0); ocp 0x81",
                        "mxfp8_e4m3 block {+Inf, 1.0}: scale 0xFE, codes 0x7E (448), 0x00; "
                        "ocp scale 0xFF")),
    _OCP.replace(
        name="triton_kernels_round_up",
        description="triton_kernels downcast_to_mxfp DEQUANT_SCALE_ROUNDING_MODE=0 (ROUND_UP): "
                    "(bits(amax/max) + 0x7FFFFF) & 0x7F800000; any nonzero subnormal quotient "
                    "-> 2^-126. Elements RNE (the @0616e645 RTNE version without its sticky bug).",
        source="triton python/triton_kernels/.../_downcast_to_mxfp.py; B5",
        scale_rule="rceil", rceil_subnormal="any_up",
        formats=("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"),
        distinguishing=("mxfp4 amax 2^-140: scale 0x01 here, 0x00 in rceil",)),
    _OCP.replace(
        name="triton_kernels_round_down",
        description="triton_kernels mode 1 (ROUND_DOWN): floor(log2(amax / max_elem)); the block "
                    "maximum always saturates.",
        source="triton_kernels _downcast_to_mxfp.py mode 1; Quark mode 1; B4",
        scale_rule="round_down",
        formats=("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"),
        distinguishing=("mxfp8_e4m3 amax 256: round_down 0x7E (256/0.5 -> 448), ocp 0x7F",)),
    _OCP.replace(
        name="triton_kernels_ties_up",
        description="triton_kernels @d1c192b7 / AMD Quark Triton MXFP4 cast: round-up scale, "
                    "FP4 elements rounded with ties away from zero ((x + 1) >> 1).",
        source="triton_kernels _downcast_to_mxfp.py @d1c192b7; Quark mx/triton.py; B16",
        scale_rule="rceil", rceil_subnormal="any_up", rounding="ties_away",
        formats=("mxfp4",),
        distinguishing=("mxfp4 0.25/1.25/2.5/5.0 at scale 2^0 -> 0.5/1.5/3/6",)),
    _OCP.replace(
        name="rocm_te_mxfp4",
        description="ROCm TransformerEngine / AITER Triton MXFP4 cast: round-up (RCEIL) scale "
                    "with elements rounded ties-up, as in the AITER non-gfx950 fallback.",
        source="ROCm/aiter PR #3992; AITER docs ('ceil' = RoundUp); B3, B16",
        scale_rule="rceil", rounding="ties_away",
        formats=("mxfp4",),
        distinguishing=("mxfp4 element 5.0 at scale 2^0 -> 6.0",)),
    _OCP.replace(
        name="dsv4",
        description="DeepSeek-V4 reference MXFP4 (fp4_act_quant / fp4_quant_kernel, blocks of "
                    "32): amax floored at 6*2^-126 (fp32 0x01C00000), scale "
                    "2^ceil(log2(fl32(amax * fl32(1/6)))) from the fp32 bits (exponent, +1 if "
                    "any mantissa bit is set), which equals the exact RCEIL on every fp32 amax "
                    ">= the floor (checked exhaustively); so an all-zero block gets scale 0x01, "
                    "never 0x00. Elements clamp(x / 2^s, -6, 6) cast to E2M1 (RNE, satfinite; "
                    "-0 kept). Not in the source, ocp chosen: NaN / Inf blocks (poison, 0xFF); "
                    "the kernel reads bf16 inputs (fp32 inputs are taken as they are).",
        source="deepseek-ai DeepSeek-V4-Pro inference/kernel.py::fp4_quant_kernel "
               "(amax_local = T.max(amax_local, 6 * (2**-126)); fast_round_scale = "
               "fast_pow2(fast_log2_ceil(amax * fp4_max_inv)); T.clamp then T.Cast(FP4)), as "
               "mirrored in Anshler/deepseek-v4-with-attention-residuals@082a891c "
               "inference/kernel.py; vLLM PR #41015 reference _quantize_to_mxfp4",
        scale_rule="rceil", amax_floor=0x01C00000,
        formats=("mxfp4",),
        distinguishing=("mxfp4 all-zero block: scale 0x01 (amax read as 6*2^-126); "
                        "ocp / rceil 0x00",
                        "mxfp4 block amax 2^-126 (0x00800000): scale 0x01, element 0x2 (1.0); "
                        "rceil scale 0x00, element 0x4 (2.0)")),
    _OCP.replace(
        name="dsv4_vllm",
        description="vLLM's DeepSeek-V4 MXFP4 Triton kernels before PR #41015 "
                    "(fused_indexer_q.py _quantize_mxfp4_pair, fused_compress_quant_cache.py): "
                    "amax floored at fp32(1e-4) (0x38D1B717), scale 2^ceil(log2(amax / 6)) "
                    "(RCEIL), so every block with amax <= 6*2^-16 gets scale 2^-15 (0x70) and a "
                    "tiny block flushes to zeros. Elements by _e2m1_nibble: bucketize on "
                    "|x / 2^s| clamped to 6 with each midpoint in the lower bucket (ties toward "
                    "zero) and the sign bit set only on a nonzero code (no -0). The kernels "
                    "compute log2(amax / 6.0) with Triton's float division and log2, emulated "
                    "here as the exact RCEIL (approximate-division / log2 boundary effects not "
                    "emulated). Not in the source, ocp chosen: NaN / Inf blocks (poison, 0xFF).",
        source="vllm-project/vllm vllm/v1/attention/ops/deepseek_v4_ops/fused_indexer_q.py::"
               "_quantize_mxfp4_pair and _e2m1_nibble (before PR #41015, 'amax = "
               "tl.maximum(amax, 1e-4)'); PR #41015 review: 'incorrect zeroing of small input "
               "signals' (fixed to 6 * 2**-126 with cvt.rn.satfinite.e2m1x2.f32)",
        scale_rule="rceil", amax_floor=0x38D1B717, rounding="ties_zero",
        signed_zero="never_negative",
        formats=("mxfp4",),
        distinguishing=("mxfp4 block amax 1e-6 (0x358637BD): scale 0x70 (2^-15), element 0x0 "
                        "(flushed); dsv4 scale 0x69, element 0x6 (4.0)",
                        "mxfp4 block {0.75, 6.0}: scale 0x7F, 0.75 -> 0x1 (0.5, tie toward "
                        "zero); dsv4 0x2 (1.0)",
                        "mxfp4 block {-0.0, 6.0}: -0.0 -> 0x0; dsv4 0x8")),
    _OCP.replace(
        name="te_mxfp8",
        description="NVIDIA TransformerEngine MXFP8: RCEIL scale (cvt.rp.satfinite.ue8m0), RNE "
                    "satfinite elements; amax ignores NaN; Inf amax -> scale 0xFE; NaN elements "
                    "-> the format's NaN code, Inf elements -> max normal.",
        source="TE transformer_engine/common/util/ptx_arch_spec.cuh::float_to_e8m0; B6, B7",
        scale_rule="rceil", nan_in_block="ignore", inf_in_block="scale_max",
        formats=("mxfp8_e4m3", "mxfp8_e5m2"),
        distinguishing=("mxfp8_e4m3 block {NaN, 1.0}: te scale 0x77 and 1.0 kept; ocp 0xFF",
                        "block {+Inf, 1.0}: te scale 0xFE, Inf -> 0x7E (448)")),
    _OCP.replace(
        name="te_nvfp4",
        description="TransformerEngine NVFP4 kernel order: S_enc = 2688/amax, block scale "
                    "fl(block_amax * fl(S_enc * fl(1/6))) -> E4M3 RNE satfinite (subnormals "
                    "allowed); zero tensor -> S_enc = 1; elements RNE satfinite. "
                    "Four-over-Six (mxref.corrections) follows TE's own 4over6 kernel: "
                    "base = fl(fl(block_amax / 6) * S_enc), map-to-6 E4M3(base), map-to-4 "
                    "E4M3(fl(base * 1.5)).",
        source="TE core_nvfp4.cuh; tests reference_nvfp4.py; B18-B20, B23; Four-over-Six: "
               "TE quantize_4over6_nvfp4.cuh::compute_scale_pair",
        nvfp4_order="te", nan_in_block="ignore", inf_in_block="scale_max",
        signed_zero="input_neg_zero_to_pos",
        formats=("nvfp4",),
        distinguishing=("global_amax 29.5, block_amax 11.0625: te block scale 0x73 (176), exact 0x72",
                        "Four-over-Six, tensor amax 0x42ad2085, block amax 0x3b754369: map-to-4 "
                        "scale 0x08 (an exact E4M3 tie, RNE); fl(b * fl(S_enc / 4)) gives 0x09")),
    _OCP.replace(
        name="torchao_nvfp4",
        description="torchao 0.18 nvfp4_quantize: per_tensor_scale T = amax/2688, block scale "
                    "fl(fl(block_amax/6)/T) clamped to [2^-6, 448] then E4M3 RNE; elements "
                    "x * fl(fl(1/T)/scale) (the reciprocal, as its Triton kernel), clamp, RNE.",
        source="torchao torchao/prototype/mx_formats/nvfp4_tensor.py::nvfp4_quantize; B18-B20",
        nvfp4_order="torchao", nvfp4_scale_min="tiny",
        formats=("nvfp4",),
        distinguishing=("block amax < 0.09375 without tensor scale: block scale 2^-6 (0x08)",)),
    _OCP.replace(
        name="triton_kernels_nvfp4",
        description="triton_kernels downcast_to_mxfp with E4M3 scales and "
                    "DequantScaleRoundingMode.ROUND_NEAREST: single-level (no tensor scale), "
                    "block scale E4M3_rne(min(fl(block_amax / 6), 448)) (subnormal scales and "
                    "0 allowed), elements fl(x * fl(1 / S)) (x * 0 when S = 0) rounded RNE to "
                    "E2M1, saturating; NaN block -> scale NaN; Inf block -> scale 448, Inf -> 6.",
        source="triton-lang/triton PR #11668; python/triton_kernels/triton_kernels/"
               "numerics_details/mxfp.py::downcast_to_mxfp_torch (@018a674f)",
        nvfp4_order="triton_kernels", nvfp4_tensor_scale=False, inf_in_block="scale_max",
        formats=("nvfp4",),
        distinguishing=("block amax 0.01: scale 0x01 (fl(0.01/6) -> E4M3 2^-9), 0.01 -> 6 "
                        "(0x7); torchao single-level floors the scale at 2^-6 (0x08)",
                        "block {0.005, -0.004}: scale 0x00, codes 0x0, 0x8 (x * 0)")),
    _OCP.replace(
        name="amd_gfx950",
        description="AMD gfx950 (MI350/MI355X) scaled conversions as AMD's own host model "
                    "describes them, with the block scale AMD's AITER MXFP4 kernels feed them; "
                    "built from source only, never run on AMD hardware here. Scale: AITER "
                    "_mxfp4_scale_op, i.e. the EVEN rule (amax rounded to the element mantissa "
                    "width, ties up, then floor; = Quark EVEN), amax by a NaN-ignoring max "
                    "(maxnum), so a NaN does not poison the block; an Inf amax clamps to 0xFE. "
                    "Elements: fcbx::from_float (v_cvt_scalef32_pk_{fp4,fp6,bf6}_f32): x / 2^s "
                    "RNE with sticky bits, overflow and Inf -> +-max, NaN -> +-max with its sign, "
                    "-0 kept. FP8 excluded: the host model's scaled FP8 path uses the non-MX "
                    "E4M3/E5M2 encodings and ignores the scale. Not modelled (AITER's float "
                    "arithmetic, see conformance/expectations/amd_host.toml): an all-NaN block "
                    "(maxnum gives NaN -> 0xFE; here 0x00) and amax >= (2 - 2^-(m+1)) 2^127, "
                    "which AITER rounds to Inf (-> 0xFE; here the exact EVEN exponent).",
        source="AMD amd_hip_ocp_host.hpp (namespace fcbx: from_float, nan, inf), vendored in "
               "triton-lang/triton third_party/amd/backend/include/hip/amd_detail/ "
               "@d2214407; amd_hip_ocp_fp.hpp __amd_cvt_floatx2_to_fp4x2_scale; ROCm/aiter "
               "aiter/ops/triton/_triton_kernels/quant/quant.py::_mxfp4_scale_op and "
               "_mxfp4_sr_pack (@04bbef5c); llvm/llvm-project PRs 117417, 117595",
        scale_rule="even", nan_in_block="ignore", inf_in_block="scale_max",
        nan_element="signed_max",
        formats=("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"),
        distinguishing=("mxfp4 block {NaN, -NaN, 1.0}: scale 0x7D, codes 0x7, 0xF, 0x6 "
                        "(ocp: scale 0xFF)",
                        "mxfp4 block {+Inf, 1.0}: scale 0xFE, codes 0x7, 0x0 (ocp: 0xFF)",
                        "mxfp4 block amax 7.0: scale 0x80 (even), ocp 0x7F")),
)}

# TransformerEngine NVFP4 variants: te_nvfp4's rules with another amax scope / block shape
for _p in (
    PROFILES["te_nvfp4"].replace(
        name="te_nvfp4_row",
        description="TransformerEngine row-scaled NVFP4 (NVFP4QuantizerRef row_scaled_activation): "
                    "te_nvfp4's rules with the second-level scale from each row's amax "
                    "(row = the vector along the block axis): S_enc,r = min(2688 / amax_r, "
                    "FLT_MAX) (1 if 0), one decode-side T_r = fl(1 / S_enc,r) per row.",
        source="NVIDIA/TransformerEngine PR #2931 (row-scaled NVFP4 fprop); "
               "transformer_engine/pytorch/custom_recipes/quantization_nvfp4.py::"
               "NVFP4QuantizerRef._quantize / _quantize_blockwise_reference "
               "(rowwise_amax_is_row_scaled) @1a4d3b0d",
        nvfp4_amax_scope="row",
        distinguishing=(("rows {1.0, 0.5, 0...} and {100, 0...}: scales 0x7E, 0x7E, row 0 "
                         "codes 0x7, 0x5, T = (fl(1/2688), fl(1/fl(2688/100))); te_nvfp4 "
                         "gives row 0 the scale 0x49"),)),
    PROFILES["te_nvfp4"].replace(
        name="te_nvfp4_2d",
        description="TransformerEngine NVFP4 2D block scaling (quant_tile_shape (16, 16), "
                    "weights): te_nvfp4's rules with one E4M3 scale per 16x16 tile (16 rows of "
                    "the [rows, n] view along the block axis x 16 columns), the tile amax in "
                    "place of the block amax; ragged tiles zero-padded; the scale is stored "
                    "once per row and 16-column block (repeated over the tile's rows).",
        source="NVIDIA/TransformerEngine PR #3027; transformer_engine/pytorch/custom_recipes/"
               "quantization_nvfp4.py::NVFP4QuantizerRef._quantize_blockwise_reference "
               "(using_2d_quantization, repeat_interleave) and _pad_tensor @1a4d3b0d",
        nvfp4_tile_2d=True,
        distinguishing=(("32x32, x[0,0] = 6, x[5,3] = 1: rows 0..15 of block 0 scale 0x7E, "
                         "x[5,3] -> 0x2; te_nvfp4: row 5 scale 0x69, x[5,3] -> 0x7"),)),
):
    PROFILES[_p.name] = _p
del _p


def get_profile(profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except (KeyError, TypeError):
        raise UnknownProfileError(
            f"unknown profile {profile!r}; known profiles: {', '.join(PROFILES)}") from None


def sr_profile(name: str) -> Profile:
    """``name`` with stochastic rounding: the profile the corpus's stochastic-rounding files
    (ops quantize_mx_sr, quantize_nvfp4_sr) are generated with and verified against."""
    return get_profile(name).replace(name=f"{name}+sr", rounding="stochastic")
