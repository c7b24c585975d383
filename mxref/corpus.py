"""Where the golden corpus and the bundled expectations files are.

Lookup order, first hit wins:

1. an explicit path (``--golden DIR``, ``--mxref-golden DIR``, ``golden check DIR``);
2. the ``MXREF_GOLDEN`` environment variable;
3. the corpus installed with mxref (``mxref/_corpus`` inside the wheel: pyproject.toml maps the
   data package onto the repository's ``golden/``, so there is one copy of the corpus);
4. the repository checkout's ``golden/`` (a source tree or an editable install).

An explicit path or ``MXREF_GOLDEN`` that holds no ``MANIFEST.json`` is an error, not a cue to
fall through: the caller asked for that corpus. Nothing found raises
:class:`CorpusNotFoundError`, whose message lists every place looked at and how to point at one.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import MXRefError

MANIFEST = "MANIFEST.json"
ENV = "MXREF_GOLDEN"
_HERE = Path(__file__).resolve().parent


class CorpusNotFoundError(MXRefError, FileNotFoundError):
    """No golden corpus where mxref looked (the message lists where, and how to point at one)."""


def _package_dir(name: str) -> Path | None:
    """The folder of data package ``mxref.<name>``: in the wheel, or as an editable install
    maps it (onto the repository's folder); None when neither exists."""
    here = _HERE / name
    if here.is_dir():
        return here
    try:
        from importlib.util import find_spec

        spec = find_spec(f"mxref.{name}")
    except (ImportError, ValueError):
        return None
    locs = list(getattr(spec, "submodule_search_locations", None) or []) if spec else []
    return Path(locs[0]) if locs else None


def _candidates(explicit=None):
    if explicit is not None:
        yield "the path given", Path(explicit)
        return
    env = os.environ.get(ENV)
    if env:
        yield ENV, Path(env)
        return
    installed = _package_dir("_corpus")
    if installed is not None:
        yield "the corpus installed with mxref", installed
    else:
        yield "the corpus installed with mxref", _HERE / "_corpus"
    yield "the repository checkout", _HERE.parent / "golden"


def golden_root(explicit=None) -> Path:
    """The corpus directory (the one holding MANIFEST.json); raises CorpusNotFoundError."""
    return locate(explicit)[0]


def locate(explicit=None) -> tuple[Path, str]:
    """``(corpus directory, which lookup step found it)``; raises CorpusNotFoundError."""
    looked = []
    for what, path in _candidates(explicit):
        if (path / MANIFEST).is_file():
            return path, what
        looked.append(f"{path} ({what})")
    raise CorpusNotFoundError(
        "no golden corpus found; looked in: " + "; ".join(looked)
        + f". Pass --golden DIR (pytest: --mxref-golden DIR) or set {ENV}=DIR, where DIR holds "
        "MANIFEST.json (a clone of the mxref repository has one in golden/)")


def expectations_dir() -> Path | None:
    """The bundled known-deviation manifests (``<stack>.toml``): installed, else the checkout's
    conformance/expectations/; None when neither exists."""
    for path in (_package_dir("_expectations"), _HERE.parent / "conformance" / "expectations"):
        if path is not None and path.is_dir() and any(path.glob("*.toml")):
            return path
    return None


def expectations_file(name: str) -> Path | None:
    """A bundled expectations file by stack name (``torchao`` -> torchao.toml), or None."""
    d = expectations_dir()
    if d is None:
        return None
    p = d / (name if name.endswith(".toml") else f"{name}.toml")
    return p if p.is_file() else None
