"""Coverage-class case generators for the golden corpus (conformance_anchors Part B).

Each generator returns a list of :class:`Case`: one block of source bit patterns (uint32 for
float32, uint16 for bfloat16 / float16) with a primary class id and tags. Everything here is
a pure, deterministic function of its arguments:

* values are built exactly (``fractions.Fraction`` and integer bit arithmetic) and encoded
  straight into the source format's bit pattern; a value the source cannot hold exactly is
  dropped (never rounded), except in R2, whose inputs are rounded to the source once by a
  fixed, correctly rounded conversion (float64 -> float32 -> source);
* random classes draw raw 64-bit words from ``np.random.PCG64`` (the bit generator behind
  ``np.random.default_rng``) seeded by sha256 of ``element|src_dtype|class|key``; distributions
  are built only from integer ops and IEEE ``+ - * / sqrt`` (no libm), so the bytes are the
  same on every machine. The seed does not include the level and every block has its own key,
  so each level's cases are a superset of the level below (level 0 is the first case of each
  class at level 1).

Element classes (E*) fix the shared scale with an ANCHOR element ``max_normal * 2^k`` (so the
canonical floor rule gives ``X = 2^k``) and put the element values under test, times ``2^k``,
in the other positions. Block classes (S*) are about the block amax itself.
"""
from __future__ import annotations

from .base import (  # noqa: F401
                   CLASS_IDS,
                   ELEMENTS,
                   GENERATOR_VERSION,
                   SRC_DTYPES,
                   Case,
                   _Rng,
                   class_description,
)
from .mx import _Ctx, block_cases, classes_for  # noqa: F401
from .nvfp4 import nvfp4_cases, te_4over6_order_cases
from .rotation import HAD_SIZES, ROW, rotation_rows  # noqa: F401

__all__ = ["Case", "SRC_DTYPES", "GENERATOR_VERSION", "ELEMENTS", "CLASS_IDS", "block_cases",
           "nvfp4_cases", "te_4over6_order_cases", "class_description", "classes_for", "rotation_rows", "ROW",
           "HAD_SIZES"]
