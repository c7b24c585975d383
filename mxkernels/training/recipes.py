"""Training recipes: which GEMM operand of a linear layer is quantized how.

A linear layer ``y = x W^T`` (x ``[T, K]``, W ``[N, K]``, dy ``[T, N]``) runs three GEMMs, each
written here as ``out = A . B^T`` with both operands blocked along the contraction axis (their
last axis; research/training_anchors.md section 0):

=======  =================  =================  ============  ===========
GEMM     A                  B                  contraction   out
=======  =================  =================  ============  ===========
fprop    x ``[T, K]``       W ``[N, K]``       K             y ``[T, N]``
dgrad    dy ``[T, N]``      W^T ``[K, N]``     N             dx ``[T, K]``
wgrad    dy^T ``[N, T]``    x^T ``[K, T]``     T             dW ``[N, K]``
=======  =================  =================  ============  ===========

A :class:`Recipe` is data (STYLE.md: "recipes are data, not subclasses"): one
:class:`GemmSpec` per GEMM, one :class:`OperandSpec` per operand, plus the layer-level options
(which layers stay bf16, FP4 activation storage, the seed of the random streams).
docs/recipes.md has the table of every named recipe and the choices made where a paper is
ambiguous.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from mxref.formats import FORMATS, get_format
from mxref.profiles import PROFILES, get_profile

from .errors import RecipeError, UnknownRecipeError

__all__ = ["OperandSpec", "GemmSpec", "Recipe", "RECIPES", "VARIANTS", "get_recipe",
           "recipe_from_dict", "ROUNDINGS", "HADAMARDS", "SOURCES", "SCALINGS", "GEMMS",
           "HADAMARD_SIZES"]

ROUNDINGS = ("rne", "sr")
HADAMARDS = ("none", "deterministic", "fixed_sign", "random")
HADAMARD_SIZES = (16, 32, 64, 128, 256)
# hp: quantize the high-precision tensor (TE, AMD); fwd: re-quantize (or, with fmt None, reuse)
# the value the forward GEMM used, i.e. double quantization (Quartet, MS-FP4 backward)
SOURCES = ("hp", "fwd")
# block: the format's own blocks (32 MX, 16 NVFP4); vector: one fp32 absmax scale per row of
# the operand (MS-FP4 token-wise / channel-wise, training_anchors A.3)
SCALINGS = ("block", "vector")
GEMMS = ("fprop", "dgrad", "wgrad")
GEMM_MODES = ("matmul", "block_sequential", "fp8")
OUTLIER_RULES = (None, "block", "topk")


@dataclass(frozen=True)
class OperandSpec:
    """How one GEMM operand is quantized.

    fmt: None (stays high precision) or an mxref format name. profile: an mxref profile name.
    rounding: "rne" (the profile's own rounding) or "sr" (stochastic rounding with the Philox
    stream of :func:`mxref.random_bits`; the profile's rounding is replaced by "stochastic").
    sr_words: the SR stream's words per Philox counter, 1 (word 0 of counter i, the corpus's
    stream) or 4 (word i mod 4 of counter i div 4: a quarter of the Philox work in the fused
    kernels). Left out of :meth:`Recipe.to_dict` when 1, so runs made before it keep their
    identities.
    source: "hp" or "fwd" (only dgrad's W and wgrad's x can be "fwd": the forward GEMM's
    dequantized operand, in the forward rotation's basis when fprop rotates).
    scaling: "block" or "vector" (fmt must be mxfp4's element grid e2m1 for "vector").
    macro: macro-block scaling (mxref.corrections.quantize_macroblock): None, an int multiple of
    the block size, or "row"; macro_scale_dtype "float32" | "bfloat16" | "e4m3".
    outlier: outlier fallback (mxref.corrections.quantize_outlier_fallback): None, "block" or
    "topk", with outlier_tau (amax / lower median of |x| above tau flags a block) and
    outlier_k; flagged elements stay bf16.
    clamp_quantile: MS-FP4 Outlier Clamping and Compensation: clamp to the [1 - q, q] quantiles
    of the tensor before quantization and add the (sparse) residual back in high precision.
    dge_k: MS-FP4 Differentiable Gradient Estimator exponent (weights only, "vector" scaling).
    dge_const: a control for DGE: dW is multiplied by this constant instead of f'(W) (same
    place and scaling as dge_k; excludes it). Left out of :meth:`Recipe.to_dict` when None, so
    recipes that do not use it keep their run identities.
    """

    fmt: str | None = None
    profile: str = "ocp"
    rounding: str = "rne"
    source: str = "hp"
    scaling: str = "block"
    macro: int | str | None = None
    macro_scale_dtype: str = "bfloat16"
    outlier: str | None = None
    outlier_tau: float = 10.0
    outlier_k: int = 1
    clamp_quantile: float | None = None
    dge_k: float | None = None
    dge_const: float | None = None
    sr_words: int = 1

    @property
    def quantized(self) -> bool:
        return self.fmt is not None

    def validate(self, where: str) -> None:
        """Raise RecipeError when the options cannot be combined."""
        if self.rounding not in ROUNDINGS:
            raise RecipeError(f"{where}: rounding={self.rounding!r}; use one of {ROUNDINGS}")
        if isinstance(self.sr_words, bool) or self.sr_words not in (1, 4):
            raise RecipeError(f"{where}: sr_words={self.sr_words!r}; use 1 or 4 words per "
                              "Philox counter")
        if self.sr_words != 1 and self.rounding != "sr":
            raise RecipeError(f"{where}: sr_words={self.sr_words!r} needs rounding='sr'")
        if self.source not in SOURCES:
            raise RecipeError(f"{where}: source={self.source!r}; use one of {SOURCES}")
        if self.scaling not in SCALINGS:
            raise RecipeError(f"{where}: scaling={self.scaling!r}; use one of {SCALINGS}")
        if self.outlier not in OUTLIER_RULES:
            raise RecipeError(f"{where}: outlier={self.outlier!r}; use one of {OUTLIER_RULES}")
        if self.fmt is None:
            for knob, default in (("rounding", "rne"), ("scaling", "block"), ("macro", None),
                                  ("outlier", None), ("clamp_quantile", None), ("dge_k", None),
                                  ("dge_const", None)):
                if getattr(self, knob) != default:
                    raise RecipeError(f"{where}: {knob}={getattr(self, knob)!r} needs a format "
                                      "(fmt is None: the operand stays high precision)")
            return
        if self.fmt not in FORMATS:
            raise RecipeError(f"{where}: unknown format {self.fmt!r}; known formats: "
                              f"{', '.join(FORMATS)}")
        if self.profile not in PROFILES:
            raise RecipeError(f"{where}: unknown profile {self.profile!r}; known profiles: "
                              f"{', '.join(PROFILES)}")
        f, p = get_format(self.fmt), get_profile(self.profile)
        try:
            p.check_format(f)
        except Exception as e:  # ProfileConflictError: re-raise under the recipe's name
            raise RecipeError(f"{where}: {e}") from None
        if p.block_size is not None or p.block_axis != -1:
            raise RecipeError(f"{where}: profile {p.name!r} fixes block_size/block_axis; "
                              "training blocks always run along the contraction axis")
        if self.rounding == "sr" and p.rounding == "stochastic":
            raise RecipeError(f"{where}: profile {p.name!r} already rounds stochastically; "
                              "use rounding='sr' with a deterministic profile")
        if self.scaling == "vector":
            if f.element.name != "e2m1" or f.is_nvfp4:
                raise RecipeError(f"{where}: scaling='vector' is defined for the E2M1 grid "
                                  f"(fmt='mxfp4'), not {self.fmt}")
            if self.macro is not None or self.outlier is not None or self.rounding != "rne":
                raise RecipeError(f"{where}: scaling='vector' cannot be combined with macro, "
                                  "outlier or rounding='sr'")
            if p.name != "ocp":
                raise RecipeError(f"{where}: scaling='vector' uses profile 'ocp' for the "
                                  f"element grid, not {p.name!r}")
        if self.dge_k is not None and (self.scaling != "vector" or not self.dge_k >= 1):
            raise RecipeError(f"{where}: dge_k={self.dge_k!r} needs scaling='vector' and k >= 1")
        if self.dge_const is not None:
            c = self.dge_const
            if self.dge_k is not None:
                raise RecipeError(f"{where}: dge_const and dge_k exclude each other")
            if self.scaling != "vector" or isinstance(c, bool) or \
                    not isinstance(c, (int, float)) or not 0 < c < float("inf"):
                raise RecipeError(f"{where}: dge_const={c!r} needs scaling='vector' and a "
                                  "finite constant > 0")
        if self.clamp_quantile is not None and not 0.5 < self.clamp_quantile < 1:
            raise RecipeError(f"{where}: clamp_quantile={self.clamp_quantile!r} must be in "
                              "(0.5, 1)")
        if self.macro is not None or self.outlier is not None:
            if f.is_nvfp4:
                raise RecipeError(f"{where}: macro-block scaling / outlier fallback are defined "
                                  "for E8M0 (MX) formats, not nvfp4")
            if self.rounding == "sr":
                raise RecipeError(f"{where}: macro/outlier corrections round with the "
                                  "profile's rule; rounding='sr' is not supported with them")
        if self.macro is not None:
            bs = f.block_size
            if self.macro != "row" and (isinstance(self.macro, bool) or
                                        not isinstance(self.macro, int) or self.macro < bs or
                                        self.macro % bs):
                raise RecipeError(f"{where}: macro={self.macro!r}: 'row' or a positive multiple "
                                  f"of the block size {bs}")
            if self.macro_scale_dtype not in ("float32", "bfloat16", "e4m3"):
                raise RecipeError(f"{where}: macro_scale_dtype={self.macro_scale_dtype!r}")
        if self.outlier is not None:
            if not (isinstance(self.outlier_tau, (int, float)) and self.outlier_tau >= 0):
                raise RecipeError(f"{where}: outlier_tau={self.outlier_tau!r} must be >= 0")
            if not isinstance(self.outlier_k, int) or not 1 <= self.outlier_k <= f.block_size:
                raise RecipeError(f"{where}: outlier_k={self.outlier_k!r} must be in "
                                  f"[1, {f.block_size}]")

    def label(self) -> str:
        """Short text for tables: ``mxfp4/ocp/rne``, ``mxfp4/ocp/sr4`` (SR, four words per
        Philox counter), ``bf16``."""
        if self.fmt is None:
            return "bf16" + (" (fwd)" if self.source == "fwd" else "")
        parts = [self.fmt, self.profile, self.rounding + ("4" if self.sr_words == 4 else "")]
        extra = []
        if self.source == "fwd":
            extra.append("requant of fwd")
        if self.scaling == "vector":
            extra.append("vector-wise")
        if self.macro is not None:
            extra.append(f"macro={self.macro}/{self.macro_scale_dtype}")
        if self.outlier is not None:
            extra.append(f"outlier={self.outlier}(tau={self.outlier_tau}, k={self.outlier_k})")
        if self.clamp_quantile is not None:
            extra.append(f"OCC q={self.clamp_quantile}")
        if self.dge_k is not None:
            extra.append(f"DGE k={self.dge_k}")
        if self.dge_const is not None:
            extra.append(f"dW x {self.dge_const}")
        return "/".join(parts) + (" [" + ", ".join(extra) + "]" if extra else "")


BF16 = OperandSpec()


@dataclass(frozen=True)
class GemmSpec:
    """One of fprop / dgrad / wgrad: its two operands and the block Hadamard applied to both
    along the contraction axis (so the product is preserved: (A R)(B R)^T = A B^T).

    hadamard: "none"; "deterministic" (Sylvester H_n / sqrt(n), all signs +1, AMD);
    "fixed_sign" (one sign vector for the whole run and every layer: TE's 16-entry vector for
    n = 16, else mxref.sign_vector("random", n, seed=recipe.seed)); "random" (new signs every
    step and layer: mxref.sign_vector("random", n, seed=recipe.seed, step=step,
    tensor_id=layer_id * 4 + gemm index)).
    gemm: "matmul" (dequantize exactly, torch.matmul with fp32 accumulation),
    "block_sequential" (CUDA only: torch.ops.mxkernels.gemm, bit-exact reference order; MX
    operands without corrections only) or "fp8" (the FP8 carrier, mxkernels.training.carrier:
    both operands plain OCP MXFP4, re-encoded as E4M3 with a power-of-two scale per 128
    elements along the contraction axis and multiplied on FP8 tensor cores).
    """

    a: OperandSpec = BF16
    b: OperandSpec = BF16
    hadamard: str = "none"
    hadamard_n: int = 32
    gemm: str = "matmul"

    @property
    def quantized(self) -> bool:
        return self.a.quantized or self.b.quantized

    def validate(self, where: str) -> None:
        self.a.validate(f"{where}.a")
        self.b.validate(f"{where}.b")
        if self.hadamard not in HADAMARDS:
            raise RecipeError(f"{where}: hadamard={self.hadamard!r}; use one of {HADAMARDS}")
        if self.hadamard != "none":
            if isinstance(self.hadamard_n, bool) or self.hadamard_n not in HADAMARD_SIZES:
                raise RecipeError(f"{where}: hadamard_n={self.hadamard_n!r} must be a power of "
                                  f"two in {HADAMARD_SIZES}")
            for side, op in (("a", self.a), ("b", self.b)):
                if op.scaling == "vector" or op.clamp_quantile is not None:
                    raise RecipeError(f"{where}.{side}: a Hadamard rotation cannot be combined "
                                      "with vector-wise scaling or OCC")
        if self.gemm not in GEMM_MODES:
            raise RecipeError(f"{where}: gemm={self.gemm!r}; use one of {GEMM_MODES}")
        if self.gemm == "block_sequential":
            for op in (self.a, self.b):
                if op.fmt is None or get_format(op.fmt).is_nvfp4 or op.scaling != "block" or \
                        op.macro is not None or op.outlier is not None or \
                        op.clamp_quantile is not None:
                    raise RecipeError(f"{where}: gemm='block_sequential' needs two plain MX "
                                      "operands (no bf16 / nvfp4 / corrections)")
        if self.gemm == "fp8":
            for op in (self.a, self.b):
                if op.fmt != "mxfp4" or op.profile != "ocp" or op.scaling != "block" or \
                        op.macro is not None or op.outlier is not None or \
                        op.clamp_quantile is not None:
                    raise RecipeError(f"{where}: gemm='fp8' (the FP8 carrier) needs two plain "
                                      "MXFP4 operands with profile 'ocp' (no bf16 / nvfp4 / "
                                      "other profiles / corrections)")

    def label(self) -> str:
        h = "" if self.hadamard == "none" else f" H{self.hadamard_n}:{self.hadamard}"
        return f"A={self.a.label()}; B={self.b.label()}{h}"


@dataclass(frozen=True)
class Recipe:
    """A named training recipe: one GemmSpec per GEMM plus layer-level options.

    bf16_first / bf16_last: this many transformer blocks at the start / end keep their linear
    layers in bf16 (:func:`~mxkernels.training.mxlinear.swap_linears` reads the block index
    from the module name). save_activations: None or an MX format: the layer input kept for
    the backward is stored as that format's codes + scales (quantized from x along K) and
    dequantized for wgrad (Hopper MoE FP4 activations, training_anchors A.4). seed: the seed
    of every random stream (SR bits, random Hadamard signs) together with (step, layer id).
    """

    name: str
    description: str
    source: str
    fprop: GemmSpec = GemmSpec()
    dgrad: GemmSpec = GemmSpec()
    wgrad: GemmSpec = GemmSpec()
    bf16_first: int = 0
    bf16_last: int = 0
    save_activations: str | None = None
    seed: int = 0

    def __post_init__(self):
        self.validate()

    def gemms(self):
        return (("fprop", self.fprop), ("dgrad", self.dgrad), ("wgrad", self.wgrad))

    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise RecipeError(f"recipe name must be a non-empty string, got {self.name!r}")
        for gname, g in self.gemms():
            if not isinstance(g, GemmSpec):
                raise RecipeError(f"recipe {self.name!r}: {gname} must be a GemmSpec")
            g.validate(f"recipe {self.name!r} {gname}")
        if self.fprop.a.source != "hp" or self.fprop.b.source != "hp":
            raise RecipeError(f"recipe {self.name!r}: fprop operands have no forward copy to "
                              "reuse; source must be 'hp'")
        for gname, side in (("dgrad", "a"), ("wgrad", "a")):
            if getattr(getattr(self, gname), side).source != "hp":
                raise RecipeError(f"recipe {self.name!r}: {gname}.{side} is the incoming "
                                  "gradient, which has no forward copy; source must be 'hp'")
        for gname, side, fwd_side in (("dgrad", "b", "b"), ("wgrad", "b", "a")):
            if getattr(getattr(self, gname), side).source == "fwd" and \
                    not getattr(self.fprop, fwd_side).quantized:
                raise RecipeError(f"recipe {self.name!r}: {gname}.{side} source='fwd' needs the "
                                  f"forward operand fprop.{fwd_side} to be quantized")
        for gname, g in self.gemms():
            for side, op in (("a", g.a), ("b", g.b)):
                for knob in ("dge_k", "dge_const"):
                    if getattr(op, knob) is not None and (gname, side) != ("fprop", "b"):
                        raise RecipeError(f"recipe {self.name!r}: {knob} applies to the weight "
                                          f"in fprop (fprop.b) only, not {gname}.{side}")
        for knob in ("bf16_first", "bf16_last"):
            v = getattr(self, knob)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RecipeError(f"recipe {self.name!r}: {knob}={v!r} must be an int >= 0")
        if self.save_activations is not None:
            if self.save_activations not in FORMATS or get_format(self.save_activations).is_nvfp4:
                raise RecipeError(f"recipe {self.name!r}: save_activations="
                                  f"{self.save_activations!r} must be an MX format name")
            if self.wgrad.b.source == "fwd":
                raise RecipeError(f"recipe {self.name!r}: save_activations and wgrad.b "
                                  "source='fwd' both define the saved x; choose one")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise RecipeError(f"recipe {self.name!r}: seed={self.seed!r} must be an int >= 0")

    @property
    def quantized(self) -> bool:
        return any(g.quantized for _, g in self.gemms()) or self.save_activations is not None

    def replace(self, **changes) -> "Recipe":
        """A copy with some fields changed (validated again), e.g. ``replace(seed=3)``."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-able; :func:`recipe_from_dict` inverts it. An operand's ``dge_const`` is left
        out when None and its ``sr_words`` when 1 (they came after runs whose identity holds
        this dict)."""
        d = dataclasses.asdict(self)
        for gname in ("fprop", "dgrad", "wgrad"):
            for side in ("a", "b"):
                if d[gname][side].get("dge_const", 0) is None:
                    del d[gname][side]["dge_const"]
                if d[gname][side].get("sr_words", 0) == 1:
                    del d[gname][side]["sr_words"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def table_rows(self) -> list[dict]:
        """One row per (GEMM, operand) for docs and logs."""
        rows = []
        for gname, g in self.gemms():
            for side, op in (("a", g.a), ("b", g.b)):
                rows.append({"recipe": self.name, "gemm": gname, "operand": _OPERAND_NAMES[
                    gname][side], "label": op.label(),
                    "hadamard": "none" if g.hadamard == "none"
                    else f"H{g.hadamard_n} {g.hadamard}"})
        return rows


_OPERAND_NAMES = {"fprop": {"a": "x", "b": "W"}, "dgrad": {"a": "dy", "b": "W^T"},
                  "wgrad": {"a": "dy^T", "b": "x^T"}}


def operand_name(gemm: str, side: str) -> str:
    """``x``, ``W``, ``dy``, ``W^T``, ``dy^T``, ``x^T``."""
    return _OPERAND_NAMES[gemm][side]


def recipe_from_dict(d: dict) -> Recipe:
    """Inverse of :meth:`Recipe.to_dict` (validates)."""
    if not isinstance(d, dict):
        raise RecipeError(f"a recipe dict is needed, got {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(Recipe)}
    unknown = set(d) - known
    if unknown:
        raise RecipeError(f"unknown recipe fields: {sorted(unknown)}")
    kw = dict(d)
    for gname in GEMMS:
        if gname in kw:
            g = dict(kw[gname])
            for side in ("a", "b"):
                if side in g:
                    g[side] = OperandSpec(**g[side])
            kw[gname] = GemmSpec(**g)
    try:
        return Recipe(**kw)
    except TypeError as e:
        raise RecipeError(f"bad recipe dict: {e}") from None


# ---- the named recipes -----------------------------------------------------------------------
def _mx(fmt="mxfp4", profile="ocp", **kw) -> OperandSpec:
    return OperandSpec(fmt=fmt, profile=profile, **kw)


_F4 = _mx()
# SR operands of the named recipes draw four words per Philox evaluation (OperandSpec.sr_words)
_F4_SR = _mx(rounding="sr", sr_words=4)
_FULL = GemmSpec(_F4, _F4)


def _h(g: GemmSpec, kind: str, n: int) -> GemmSpec:
    return dataclasses.replace(g, hadamard=kind, hadamard_n=n)


def _build() -> dict[str, Recipe]:
    r = []
    r.append(Recipe(
        "bf16", "Baseline: every GEMM in high precision (an MXLinear with this recipe computes "
        "exactly what nn.Linear computes).", "training_anchors.md section 0"))
    amd = "training_anchors.md A.1 (AMD 2605.09825, progressive MXFP4), A.14"
    r.append(Recipe(
        "mxfp4-f", "MXFP4 (OCP: FLOOR E8M0 scale, RNE) on Fprop x and W only; backward bf16. "
        "Profile choice: the AMD text does not state the scale rule; 'ocp' is the canonical one "
        "(ROCm TE's Triton cast differs: see profile rocm_te_mxfp4).", amd,
        fprop=_FULL))
    r.append(Recipe(
        "mxfp4-fd", "MXFP4 (ocp, RNE) on Fprop and Dgrad (dy, W along N, quantized from the bf16 "
        "W); Wgrad bf16.", amd, fprop=_FULL, dgrad=_FULL))
    r.append(Recipe(
        "mxfp4-fdw", "MXFP4 (ocp, RNE) on all three GEMMs; every operand quantized from high "
        "precision along its GEMM's contraction axis (two copies per tensor, as ROCm TE).", amd,
        fprop=_FULL, dgrad=_FULL, wgrad=_FULL))
    r.append(Recipe(
        "mxfp4-fdw-h16", "mxfp4-fdw plus the deterministic 16-point Hadamard (all signs +1) on "
        "both operands of every GEMM, as ROCm TE's MXFP4 recipe rotates every quantized operand "
        "(AMD Lumen rotates only the Wgrad operands; not this recipe).", amd,
        fprop=_h(_FULL, "deterministic", 16), dgrad=_h(_FULL, "deterministic", 16),
        wgrad=_h(_FULL, "deterministic", 16)))
    fp8 = dataclasses.replace(_FULL, gemm="fp8")
    r.append(Recipe(
        "mxfp4-fdw-fp8", "mxfp4-fdw with every GEMM on the FP8 carrier: each MXFP4 operand "
        "re-encoded as E4M3 with one power-of-two scale per 128 elements along the contraction "
        "axis (exact while a group's block scales span at most 15 + nu binades; otherwise the "
        "group's smallest elements are rounded once, counted by the in-run check) and multiplied "
        "on FP8 tensor cores with 1x128 block-wise scales (the Hopper FP4 paper's idea: MXFP4 "
        "numerics on FP8 tensor cores).", "training_anchors.md A.4 (FP4 on Hopper via FP8)",
        fprop=fp8, dgrad=fp8, wgrad=fp8))
    r.append(Recipe(
        "mxfp4-fdw-sr", "mxfp4-fdw with stochastic rounding on the gradient operands (dy in Dgrad, "
        "dy^T in Wgrad); x and W keep RNE. AMD tried SR as a fix (it did not stabilize Wgrad).",
        amd, fprop=_FULL, dgrad=GemmSpec(_F4_SR, _F4), wgrad=GemmSpec(_F4_SR, _F4)))
    r.append(Recipe(
        "mxfp4-fdw-rht", "mxfp4-fdw-h16 with random signs re-drawn every step (and per layer and "
        "GEMM): the randomized Hadamard AMD reports as failing; same scope (all GEMMs, n = 16) "
        "as mxfp4-fdw-h16 so the pair isolates the sign policy.", amd,
        fprop=_h(_FULL, "random", 16), dgrad=_h(_FULL, "random", 16),
        wgrad=_h(_FULL, "random", 16)))
    rc = _mx(profile="rceil")
    r.append(Recipe(
        "quartet", "Quartet: Fprop on H32-rotated x and W (deterministic Sylvester H32); Dgrad "
        "and Wgrad on H32 with random signs re-drawn each step, the backward re-quantizing the "
        "forward-quantized W and x (double quantization; the results are rotated back through the "
        "forward H32), RTN (the paper's final choice; the scripts used SR). Approximations: the "
        "QuEST RMS-based forward scale and the 3/4 range-matching backward scale are not mxref "
        "profiles; both use 'rceil' (amax/X in (3, 6], no clipping), the closest E8M0 rule, and "
        "the trust mask is not applied.", "training_anchors.md A.5, B.7",
        fprop=GemmSpec(rc, rc, "deterministic", 32),
        dgrad=GemmSpec(rc, dataclasses.replace(rc, source="fwd"), "random", 32),
        wgrad=GemmSpec(rc, dataclasses.replace(rc, source="fwd"), "random", 32)))
    nv = OperandSpec(fmt="nvfp4", profile="te_nvfp4")
    nv_sr = dataclasses.replace(nv, rounding="sr", sr_words=4)
    r.append(Recipe(
        "nvfp4-te", "NVIDIA NVFP4 (TE NVFP4BlockScaling): 16-element E4M3-scaled blocks plus an "
        "fp32 tensor scale (profile te_nvfp4, RNE); SR on the gradient dy in Dgrad and Wgrad; "
        "TE's fixed-sign 16-point RHT on the Wgrad operands only; the last transformer block "
        "keeps bf16 linears (NVIDIA keeps ~16% of blocks: first 2, last 8 of 62; for the small "
        "models here one block at the end). Deviation: W uses 1x16 blocks in both orientations "
        "(quantized from bf16 each time), not TE's 2D 16x16 tiles.",
        "training_anchors.md A.8, B.9",
        fprop=GemmSpec(nv, nv), dgrad=GemmSpec(nv_sr, nv),
        wgrad=GemmSpec(nv_sr, nv, "fixed_sign", 16), bf16_last=1))
    e5 = _mx("mxfp8_e5m2")
    r.append(Recipe(
        "ms-fp4", "Microsoft FP4 (W4A4 + DGE + OCC): Fprop on E2M1 with vector-wise absmax fp32 "
        "scales (x per token, W per output channel), x clamped at its 0.99 quantiles with the "
        "sparse residual added back in bf16 (OCC on), DGE (k = 5) on the weight gradient. "
        "Backward: dy in FP8 E5M2 times the forward FP4 W (Dgrad) and the forward FP4 x (Wgrad). "
        "Choices: element rounding is RNE (MS-AMP rounds ties toward +inf); the per-tensor FP8 "
        "E5M2 cast of dy is replaced by mxfp8_e5m2 (32-blocks along the contraction axis).",
        "training_anchors.md A.3, B.6",
        fprop=GemmSpec(OperandSpec("mxfp4", scaling="vector", clamp_quantile=0.99),
                       OperandSpec("mxfp4", scaling="vector", dge_k=5.0)),
        dgrad=GemmSpec(e5, OperandSpec(source="fwd")),
        wgrad=GemmSpec(e5, OperandSpec(source="fwd"))))
    dec = _mx(macro=128, macro_scale_dtype="bfloat16", outlier="topk", outlier_tau=10.0,
              outlier_k=1)
    r.append(Recipe(
        "decomp-fixed", "MXFP4 (ocp) on all three GEMMs with the decomposition paper's fixes for "
        "scale bias and deadzone: outlier fallback (the largest element of each block whose amax "
        "exceeds 10x its lower median |x| stays bf16) then macro-block scaling (bf16 S_M per 128 "
        "elements along the contraction axis) of the rest. The paper gives no GEMM-level "
        "details; macro size, tau and k are our choices (AQN is a rollout-side option, not here).",
        "training_anchors.md A.2, B.2-B.4",
        fprop=GemmSpec(dec, dec), dgrad=GemmSpec(dec, dec), wgrad=GemmSpec(dec, dec)))
    f8 = _mx("mxfp8_e4m3")
    r.append(Recipe(
        "fp4-activations", "Hopper MoE recipe: every GEMM in MXFP8 E4M3 (DeepSeek-style FP8 "
        "compute, here 32-blocks with E8M0 scales), and the layer input saved for the backward "
        "stored as MXFP4 codes + scales (blocks along K) and dequantized for Wgrad, where it is "
        "re-quantized to MXFP8 along T (the paper's row-to-column FP4 conversion).",
        "training_anchors.md A.4", fprop=GemmSpec(f8, f8), dgrad=GemmSpec(f8, f8),
        wgrad=GemmSpec(f8, f8), save_activations="mxfp4"))
    return {x.name: x for x in r}


RECIPES: dict[str, Recipe] = _build()


def get_recipe(name) -> Recipe:
    """The named recipe (a Recipe is returned as is)."""
    if isinstance(name, Recipe):
        return name
    try:
        return RECIPES[name]
    except (KeyError, TypeError):
        raise UnknownRecipeError(
            f"unknown recipe {name!r}; known recipes: {', '.join(RECIPES)}") from None


# ---- experiment variants -------------------------------------------------------------------
# Ablations and one-fix arms of the experiment grids (mxkernels/training/experiments.py), built
# from the named recipes above; ``mxref train --recipe`` accepts their names too.
def _decomp_variant(name: str, outlier_only: bool, description: str):
    dec = RECIPES["decomp-fixed"]

    def one(op):
        if outlier_only:
            return dataclasses.replace(op, macro=None)
        return dataclasses.replace(op, outlier=None)

    gemms = {g: dataclasses.replace(getattr(dec, g), a=one(getattr(dec, g).a),
                                    b=one(getattr(dec, g).b))
             for g in ("fprop", "dgrad", "wgrad")}
    return dec.replace(name=name, description=description, **gemms)


def _one_word(name: str) -> Recipe:
    """The named SR recipe with the one-word stream (sr_words 1): the recipe as it was before
    the four-word stream, for runs made then and as the stream's control arm."""
    r = RECIPES[name]

    def w1(op):
        return dataclasses.replace(op, sr_words=1) if op.rounding == "sr" else op

    gemms = {g: dataclasses.replace(getattr(r, g), a=w1(getattr(r, g).a), b=w1(getattr(r, g).b))
             for g in ("fprop", "dgrad", "wgrad")}
    return r.replace(name=f"{name}-w1", description=f"{name} with the one-word SR stream (word "
                     "0 of counter i per element; the recipe until the four-word stream).",
                     **gemms)


def _variants() -> dict:
    ms = RECIPES["ms-fp4"]
    fp = ms.fprop
    no_occ = dataclasses.replace(fp, a=dataclasses.replace(fp.a, clamp_quantile=None))
    no_dge = dataclasses.replace(fp, b=dataclasses.replace(fp.b, dge_k=None))
    direct = dataclasses.replace(no_occ, b=dataclasses.replace(fp.b, dge_k=None))
    # DGE's factor f'(u) = (1/k) u^(1/k - 1), clipped at 3, averaged over u uniform in [0, 1]:
    # 3 c + 1 - c^(1/k) with c = (3k)^(-k/(k-1)); 0.5935 for k = 5
    k = fp.b.dge_k
    c = (3 * k) ** (-k / (k - 1))
    dge_mean = round(3 * c + 1 - c ** (1 / k), 4)
    mean_only = dataclasses.replace(no_occ, b=dataclasses.replace(fp.b, dge_k=None,
                                                                  dge_const=dge_mean))
    # the paper's one-sided ablations (Fig. 6): the other operand in 8 bits. Deviation: the
    # 8-bit operand is MXFP8 E4M3 (32-blocks along K), not a per-tensor FP8 cast
    e4 = OperandSpec("mxfp8_e4m3")
    w8a4 = dataclasses.replace(direct, b=e4)
    w8a4_occ = dataclasses.replace(w8a4, a=fp.a)
    w4a8 = dataclasses.replace(direct, a=e4)
    w4a8_dge = dataclasses.replace(w4a8, b=fp.b)
    fa = RECIPES["fp4-activations"]
    out = [
        ms.replace(name="ms-w8a4", fprop=w8a4,
                   description="ms-fp4 one-sided: x E2M1 vector-wise (direct, no OCC), W MXFP8 "
                               "E4M3 (the paper's W8A4 direct cast, which diverged there)."),
        ms.replace(name="ms-w8a4-occ", fprop=w8a4_occ,
                   description="ms-w8a4 with OCC (q = 0.99, bf16 residual) on x."),
        ms.replace(name="ms-w4a8", fprop=w4a8,
                   description="ms-fp4 one-sided: W E2M1 vector-wise (no DGE), x MXFP8 E4M3 "
                               "(the paper's W4A8)."),
        ms.replace(name="ms-w4a8-dge", fprop=w4a8_dge,
                   description="ms-w4a8 with DGE (k = 5) on W."),
        ms.replace(name="ms-fp4-no-occ", fprop=no_occ,
                   description="ms-fp4 without Outlier Clamping and Compensation (OCC)."),
        ms.replace(name="ms-fp4-no-dge", fprop=no_dge,
                   description="ms-fp4 without the Differentiable Gradient Estimator (DGE)."),
        ms.replace(name="ms-fp4-direct", fprop=direct,
                   description="ms-fp4 without DGE and OCC: direct W4A4 vector-wise cast."),
        ms.replace(name="ms-fp4-dge-mean", fprop=mean_only,
                   description=f"control: ms-fp4-no-occ with DGE's per-element factor replaced "
                               f"by its mean over an interval ({dge_mean}): DGE's scale without "
                               f"its shape."),
        _decomp_variant("decomp-outlier", outlier_only=True,
                        description="decomp-fixed with the outlier fallback only (no macro-block "
                                    "scales)."),
        _decomp_variant("decomp-macro", outlier_only=False,
                        description="decomp-fixed with macro-block scaling only (no outlier "
                                    "fallback)."),
        _one_word("mxfp4-fdw-sr"),
        _one_word("nvfp4-te"),
        fa.replace(name="mxfp8-fdw", save_activations=None,
                   description="fp4-activations without FP4 activation storage: every GEMM in "
                               "MXFP8 E4M3, saved activations in bf16 (the memory baseline)."),
    ]
    return {r.name: r for r in out}


VARIANTS = _variants()
