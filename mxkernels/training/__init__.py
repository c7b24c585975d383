"""End-to-end MX training: recipes (per-GEMM quantization choices), the quantized linear
layer, and in-run validation against mxref. See docs/recipes.md."""
from .recipes import (GEMMS, RECIPES, GemmSpec, OperandSpec, Recipe, get_recipe,
                      recipe_from_dict)
from .mxlinear import (BACKENDS, DEFAULT_SKIP, MXLinear, QuantTimer, quant_timer, set_step,
                       swap_linears)
from .validate import (CaptureError, CheckRecord, ValidationError, capture_next, check_capture,
                       raise_if_failed)

__all__ = ["OperandSpec", "GemmSpec", "Recipe", "RECIPES", "get_recipe", "recipe_from_dict",
           "GEMMS", "MXLinear", "swap_linears", "set_step", "quant_timer", "QuantTimer",
           "BACKENDS", "DEFAULT_SKIP", "capture_next", "check_capture", "CheckRecord",
           "ValidationError", "CaptureError", "raise_if_failed"]
