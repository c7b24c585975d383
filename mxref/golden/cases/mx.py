"""MX block cases: every class family's generators on one context, in class order."""
from __future__ import annotations

import numpy as np

from ...formats import ELEMENT_FORMATS
from .base import _L1_NVALID, ELEMENTS, SRC_DTYPES
from .block import _BlockClasses
from .element import _ElementClasses
from .sampled import _RandomClasses


class _Ctx(_ElementClasses, _BlockClasses, _RandomClasses):
    """The MX block context: all class families' generators."""


_BLOCK_ORDER = ("E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E9", "E10", "E11",
                "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "L1", "R1", "R2")


def classes_for(element: str, src_dtype: str, level: int, block: int = 32) -> tuple:
    """Class ids block_cases produces for this combination (in output order)."""
    out = []
    for c in _BLOCK_ORDER:
        if c == "E4" and src_dtype != "float32":
            continue
        if c == "E5" and element == "int8":
            continue
        if c == "E11" and (level < 3 or src_dtype == "float32"):
            continue
        if c == "L1" and not any(1 <= n < block for n in _L1_NVALID):
            continue
        out.append(c)
    return tuple(out)


def _check_args(src_dtype, level):
    if src_dtype not in SRC_DTYPES:
        raise ValueError(f"src_dtype {src_dtype!r} is not one of {SRC_DTYPES}")
    if not isinstance(level, (int, np.integer)) or not 0 <= level <= 3:
        raise ValueError(f"level must be 0, 1, 2 or 3, got {level!r}")


def block_cases(element: str, src_dtype: str, level: int, block: int = 32) -> list:
    """MX element/block coverage cases for one element format and source dtype.

    Level 0: exactly one case per applicable class; 1: lean full enumerations; 2: level 1 plus
    10x more R1/R2, full exponent sweeps (S1, S2, S3, S9), all anchor scales and cross products
    of element classes inside one block; 3: level 2 plus the exhaustive 16-bit sweep E11.
    """
    if element not in ELEMENT_FORMATS:
        raise ValueError(f"unknown element format {element!r}; known: {', '.join(ELEMENTS)}")
    _check_args(src_dtype, level)
    if not isinstance(block, (int, np.integer)) or block < 2:
        raise ValueError(f"block must be an int >= 2, got {block!r}")
    ctx = _Ctx(element, src_dtype, int(level), int(block))
    gens = {
        "E1": lambda: ctx.gen_pool_class("E1"), "E2": lambda: ctx.gen_pool_class("E2", ("tie",)),
        "E3": lambda: ctx.gen_pool_class("E3", ("tie_neighbour",)),
        "E4": lambda: ctx.gen_pool_class("E4", ("double_rounding",)),
        "E5": lambda: ctx.gen_pool_class("E5"), "E6": lambda: ctx.gen_pool_class("E6", ("E7",)),
        "E7": ctx.gen_E7, "E8": ctx.gen_E8, "E9": ctx.gen_E9, "E10": ctx.gen_E10,
        "E11": ctx.gen_E11, "S1": ctx.gen_S1, "S2": ctx.gen_S2, "S3": ctx.gen_S3,
        "S4": ctx.gen_S4, "S5": ctx.gen_S5, "S6": ctx.gen_S6, "S7": ctx.gen_S7,
        "S8": ctx.gen_S8, "S9": ctx.gen_S9, "L1": ctx.gen_L1, "R1": ctx.gen_R1,
        "R2": ctx.gen_R2,
    }
    out = []
    for c in classes_for(element, src_dtype, level, block):
        if level == 0:
            out += _first_case(ctx, c)
            continue
        out += gens[c]()
    if level >= 2:
        out += ctx.gen_cross()
    return out


def _first_case(ctx: _Ctx, c: str) -> list:
    """Level 0: the first level-1 case of the class (cheap paths for the big generators)."""
    if c in ("R1", "R2"):
        return (ctx.gen_R1(1) if c == "R1" else ctx.gen_R2(1))[:1]
    tags = {"E2": ("tie",), "E3": ("tie_neighbour",), "E4": ("double_rounding",), "E6": ("E7",)}
    if c in ("E1", "E2", "E3", "E4", "E5", "E6"):
        got = ctx.gen_pool_class(c, tags.get(c, ()))
    else:
        got = getattr(ctx, f"gen_{c}")()
    return got[:1]

