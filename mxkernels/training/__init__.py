"""End-to-end MX training: recipes (per-GEMM quantization choices), the quantized linear
layer, and in-run validation against mxref. See docs/recipes.md.

The names below are loaded on first use, so importing a light submodule (``.cli``,
``.errors``, ``.compare``) does not import torch.
"""
import importlib

_HOMES = {
    "recipes": ("GEMMS", "RECIPES", "GemmSpec", "OperandSpec", "Recipe", "get_recipe",
                "recipe_from_dict"),
    "mxlinear": ("BACKENDS", "DEFAULT_SKIP", "MXLinear", "QuantTimer", "quant_timer", "set_step",
                 "swap_linears"),
    "validate": ("CaptureError", "CheckRecord", "ValidationError", "capture_next",
                 "check_capture", "raise_if_failed"),
}
_WHERE = {name: mod for mod, names in _HOMES.items() for name in names}

__all__ = ["OperandSpec", "GemmSpec", "Recipe", "RECIPES", "get_recipe", "recipe_from_dict",
           "GEMMS", "MXLinear", "swap_linears", "set_step", "quant_timer", "QuantTimer",
           "BACKENDS", "DEFAULT_SKIP", "capture_next", "check_capture", "CheckRecord",
           "ValidationError", "CaptureError", "raise_if_failed"]


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
