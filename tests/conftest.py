"""Test-suite hooks.

``corpus_twin``: a kernel test that feeds golden files to the same kernel calls, with the same
arguments, as ``scripts/conformance.sh``'s Triton run (interpreter, L0 and L1) does through the
``triton`` verify backend. ``scripts/test.sh`` runs that gate right after pytest and sets
MXREF_CONFORMANCE_FOLLOWS=1 for its pytest run: the CPU (interpreter) items of these tests are
then deselected, since the gate repeats them file for file. Their CUDA items always run, and a
plain ``pytest`` (or ``scripts/test.sh ARGS``) runs everything.
"""
from __future__ import annotations

import os


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MXREF_CONFORMANCE_FOLLOWS") != "1":
        return
    keep, twins = [], []
    for item in items:
        if item.get_closest_marker("corpus_twin") is not None and "cuda" not in item.name:
            twins.append(item)
        else:
            keep.append(item)
    if twins:
        config.hook.pytest_deselected(items=twins)
        items[:] = keep
