"""Host-model shims (``nv-host``, ``amd-host``): a vendor's conversion header compiled with the
system C++ compiler into a small shared library, built at first use and cached in
``$XDG_CACHE_HOME/mxref`` (``~/.cache/mxref``) under a hash of everything that went into it."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import BackendUnavailable


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mxref"


def compiler(who: str, std: str) -> str:
    """The C++ compiler (``$CXX``, default g++), or BackendUnavailable naming what is missing."""
    name = os.environ.get("CXX", "g++")
    cxx = shutil.which(name)
    if cxx is None:
        raise BackendUnavailable(f"{who} needs a {std} compiler: {name!r} is not on PATH "
                                 "(install g++ or set CXX)")
    return cxx


def cached_library(who: str, cxx: str, inputs: Iterable[bytes],
                   command: Callable[[Path, Path], list[str]], context: str) -> ctypes.CDLL:
    """Load ``<cache>/<who>-<hash>.so``, building it first when missing: ``command(build_dir,
    out)`` gives the compiler command line that writes ``out`` (a file in ``build_dir``, a fresh
    temporary directory beside the cache, so concurrent builds never see a half-written
    library). ``inputs`` (sources, headers) and the compiler's path make the hash."""
    h = hashlib.sha256(cxx.encode())
    for b in inputs:
        h.update(hashlib.sha256(b).digest())
    so = cache_dir() / f"{who}-{h.hexdigest()[:16]}.so"
    if not so.is_file():
        so.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=so.parent) as build:
            out = Path(build) / "shim.so"
            r = subprocess.run(command(Path(build), out), capture_output=True, text=True,
                               timeout=300, check=False)
            if r.returncode != 0:
                raise BackendUnavailable(f"{who}: compiling the shim failed ({cxx}, {context}): "
                                         f"{r.stderr.strip()[-800:]}")
            os.replace(out, so)
    return ctypes.CDLL(str(so))
