"""Where the golden corpus is: an explicit path, ``MXREF_GOLDEN``, or the corpus shipped with mxref.

(First version: explicit > MXREF_GOLDEN > the repository's golden/; the installed-package
lookup is being added.)
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import MXRefError

MANIFEST = "MANIFEST.json"


class CorpusNotFoundError(MXRefError, FileNotFoundError):
    """No golden corpus where mxref looked (the message lists where, and how to point at one)."""


def _candidates(explicit=None):
    if explicit is not None:
        yield "the path given", Path(explicit)
        return
    env = os.environ.get("MXREF_GOLDEN")
    if env:
        yield "MXREF_GOLDEN", Path(env)
        return
    yield "the repository checkout", Path(__file__).resolve().parents[1] / "golden"


def golden_root(explicit=None) -> Path:
    """The corpus directory (the one holding MANIFEST.json); raises CorpusNotFoundError."""
    looked = []
    for what, path in _candidates(explicit):
        if (path / MANIFEST).is_file():
            return path
        looked.append(f"{path} ({what})")
    raise CorpusNotFoundError(
        "no golden corpus found; looked in: " + "; ".join(looked)
        + ". Pass --golden DIR or set MXREF_GOLDEN to a directory holding MANIFEST.json")
