"""Loading the Triton kernel modules compiled or interpreted, as one :class:`KernelSet`.

Triton decides interpreter vs compiler when a kernel is *decorated*, i.e. when the kernel module
is imported, not when triton itself is imported. :func:`load_kernels` therefore checks which kind
of kernel the imported modules hold and, if it is the wrong kind for this run (a module was
imported earlier with another ``TRITON_INTERPRET`` setting), loads private copies of the modules
under the right setting. The kernels call only Triton's core builtins, never the @jit helpers of
``triton.language.standard`` (``tl.max`` and friends are decorated when *triton* is imported), so
setting ``TRITON_INTERPRET=1`` in ``os.environ`` before the kernels are loaded is enough, whatever
was imported before (checked by tests/test_triton_backend.py, which imports triton first).
Setting it in the environment before Python starts works too, of course.

Users: the verify adapters (:mod:`mxkernels.backends`), the torch ops (:mod:`mxkernels.ops`) and
the kernel tests. Importing this module imports neither torch nor triton.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading

from mxref.errors import BackendUnavailable

# every kernel module, dependencies first (a later module imports @jit helpers from an earlier
# one with ``from mxkernels.triton_common import ...``; a private copy resolves those imports to
# the private copies, see _private_copy). A module that is not installed is left out.
KERNEL_MODULES = ("mxkernels.triton_common", "mxkernels.triton_quant", "mxkernels.triton_fast",
                  "mxkernels.triton_sr", "mxkernels.triton_rotate", "mxkernels.triton_train",
                  "mxkernels.triton_train_nvfp4", "mxkernels.triton_corrections",
                  "mxkernels.triton_convert", "mxkernels.triton_carrier",
                  "mxkernels.triton_gemm")
_TRUE = ("1", "true", "on", "yes")
_LOCK = threading.Lock()
_PRIVATE: dict = {}
_LOADED: dict = {}     # (interpret, TRITON_INTERPRET set) -> KernelSet, once loaded


def interpret_requested() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for the Triton interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


class KernelSet:
    """The kernel modules of one kind (all compiled or all interpreted), as one namespace:
    ``ks.mx_quantize`` is looked up in each module in KERNEL_MODULES order; ``ks.modules``
    maps the short module name ("triton_quant", "triton_gemm", ...) to the module."""

    def __init__(self, modules: dict):
        self.modules = modules

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        for mod in self.modules.values():
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(f"no kernel module defines {name!r}")

    def __getitem__(self, short: str):
        return self.modules[short]


def present_modules(names=KERNEL_MODULES) -> tuple:
    """The kernel modules installed here, in KERNEL_MODULES order."""
    return tuple(n for n in names if importlib.util.find_spec(n) is not None)


def load_kernels(interpret: bool) -> KernelSet:
    """Every kernel module with kernels decorated for ``interpret``, as a :class:`KernelSet`.

    Compiled kernels come from the canonical ``mxkernels.triton_*`` modules unless one was
    imported under TRITON_INTERPRET=1; interpreted kernels come from the canonical modules
    only if all were imported that way. Otherwise private copies of the modules are executed
    under the right setting (and kept), so the canonical modules are never turned into
    interpreted kernels behind the back of other code in the process.
    """
    key = (interpret, interpret_requested())
    hit = _LOADED.get(key)
    if hit is not None:         # every op launch asks: the module scan below took ~125 us
        return hit
    with _LOCK:
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise BackendUnavailable(f"triton is not importable: {e}") from None
        try:
            names = present_modules()
            mods = {n: sys.modules.get(n) for n in names}
            if not interpret and not interpret_requested():
                mods = {n: m if m is not None else importlib.import_module(n)
                        for n, m in mods.items()}
            if all(m is not None and _is_interpreted(m) == interpret for m in mods.values()):
                _LOADED[key] = KernelSet({n.rsplit(".", 1)[1]: m for n, m in mods.items()})
                return _LOADED[key]
            if interpret not in _PRIVATE:
                _PRIVATE[interpret] = _private_copy(interpret, names)
            _LOADED[key] = _PRIVATE[interpret]
            return _LOADED[key]
        except BackendUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
            raise BackendUnavailable(f"cannot load the kernel modules: {type(e).__name__}: {e}") \
                from None


@contextlib.contextmanager
def interpret_env(interpret: bool, names=(), swap=None):
    """While the block runs: TRITON_INTERPRET = 1 / 0 (Triton reads it when @triton.jit
    decorates a function, so it must hold while a module body runs) and sys.modules[n] = m
    for each (n, m) of ``swap``; after it, the setting and the sys.modules entries of ``names``
    and of ``swap`` as they were (an entry that was absent is removed)."""
    swap = swap or {}
    prev = os.environ.get("TRITON_INTERPRET")
    saved = {n: sys.modules.get(n) for n in (*names, *swap)}
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        sys.modules.update(swap)
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev


def exec_copy(name: str, path, alias: str | None = None):
    """A fresh module ``name`` executed from the file ``path`` (registered in sys.modules as
    ``name``, and as ``alias`` too when given, so that later imports of alias bind it); on an
    error nothing stays registered under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    if alias is not None:
        sys.modules[alias] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _private_copy(interpret: bool, names) -> KernelSet:
    """Execute the kernel modules afresh under TRITON_INTERPRET=1/0 (Triton reads the setting
    when @triton.jit decorates a function, so it must hold while the module bodies run). While
    a copy executes, the canonical names in sys.modules point at the copies made so far, so
    ``from mxkernels.triton_common import _helper`` in a later module binds the copy's helper."""
    copies = {}
    with interpret_env(interpret, names):
        for name in names:
            priv = f"{name}__{'interpreted' if interpret else 'compiled'}"
            copies[name.rsplit(".", 1)[1]] = exec_copy(priv, importlib.util.find_spec(name).origin,
                                                       alias=name)
    for mod in copies.values():
        if not _kind_fits(mod, interpret):
            raise BackendUnavailable(
                "this triton version does not read TRITON_INTERPRET when kernels are decorated; "
                "set TRITON_INTERPRET=1 in the environment before starting Python")
    return KernelSet(copies)


def _kernel_kinds(mod) -> set:
    """The kinds of the @triton.jit functions the module itself defines."""
    return {type(v).__name__ for v in vars(mod).values()
            if type(v).__name__ in ("JITFunction", "InterpretedFunction")
            and getattr(getattr(v, "fn", None), "__module__", None) == mod.__name__}


def _is_interpreted(mod) -> bool:
    """Whether the module's @triton.jit kernels were decorated for the interpreter."""
    return _kernel_kinds(mod) == {"InterpretedFunction"}


def _kind_fits(mod, interpret: bool) -> bool:
    """The module's kernels are of the kind asked for (a module without kernels of its own
    fits both: a private copy's imports were bound to the copies made before it)."""
    kinds = _kernel_kinds(mod)
    return not kinds or (kinds == {"InterpretedFunction"}) == interpret
