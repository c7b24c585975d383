"""Finding a backend by name: built-ins, the ``mxref.backends`` entry-point group, or
``package.module:object`` (a Backend instance, a class, or a factory taking ``device``).

The built-ins are mxref's own backends (the reference itself and the peer libraries it is
compared with). Every kernel stack under test, our own included, registers through the
entry-point group, e.g. in its pyproject.toml::

    [project.entry-points."mxref.backends"]
    mystack = "mystack.verify:MyBackend"
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .base import BackendUnavailable, UnknownBackendError

# name -> "module:factory"; modules are imported only when the backend is asked for
BUILTIN = {
    "numba": "mxref.backends.numba_backend:NumbaBackend",
    "ml_dtypes": "mxref.backends.peers:MlDtypesBackend",
    "torchao": "mxref.backends.peers:TorchaoFloor",
    "torchao-rceil": "mxref.backends.peers:TorchaoRceil",
    "torchao-ceil": "mxref.backends.peers:TorchaoCeil",
    "torchao-even": "mxref.backends.peers:TorchaoEven",
    "transformer_engine": "mxref.backends.peers:TransformerEngineBackend",
    "torchao-compiled": "mxref.backends.peers_torchao_compiled:TorchaoCompiledFloor",
    "torchao-compiled-rceil": "mxref.backends.peers_torchao_compiled:TorchaoCompiledRceil",
    "torchao-compiled-ceil": "mxref.backends.peers_torchao_compiled:TorchaoCompiledCeil",
    "torchao-compiled-even": "mxref.backends.peers_torchao_compiled:TorchaoCompiledEven",
    "gfloat": "mxref.backends.peers_gfloat:GfloatBackend",
    "fouroversix": "mxref.backends.peers_fouroversix:FouroversixBackend",
    "nv-host": "mxref.backends.nv_host:NvHostBackend",
    "nv-host-rceil": "mxref.backends.nv_host:NvHostRceilBackend",
    "amd-host": "mxref.backends.amd_host:AmdHostBackend",
}
ENTRY_POINT_GROUP = "mxref.backends"


def _entry_points() -> dict:
    try:
        return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # a broken third-party distribution must not break the built-ins
        return {}


def list_backends() -> list[str]:
    return sorted(set(BUILTIN) | set(_entry_points()))


def _load_target(target: str, what: str):
    mod_name, _, attr = target.partition(":")
    if not mod_name or not attr:
        raise UnknownBackendError(f"{what}: expected package.module:object, got {target!r}")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise BackendUnavailable(f"{what}: cannot import {mod_name!r}: {e}") from None
    except Exception as e:  # a module that fails while it is imported cannot run here
        raise BackendUnavailable(f"{what}: importing {mod_name!r} raised "
                                 f"{type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownBackendError(f"{what}: module {mod_name!r} has no {attr!r}") from None
    return obj


def get_backend(spec: str, device: str | None = None):
    """Resolve and instantiate a backend; raises UnknownBackendError or BackendUnavailable."""
    if spec in BUILTIN:
        obj = _load_target(BUILTIN[spec], f"backend {spec!r}")
    elif ":" in spec:
        obj = _load_target(spec, f"backend {spec!r}")
    else:
        eps = _entry_points()
        if spec not in eps:
            raise UnknownBackendError(
                f"unknown backend {spec!r}; known: {', '.join(list_backends())}, or "
                f"package.module:object (a backend from another package is found once that "
                f"package is installed and registers it under the {ENTRY_POINT_GROUP!r} "
                "entry-point group)")
        try:
            obj = eps[spec].load()
        except Exception as e:
            raise BackendUnavailable(f"backend {spec!r}: entry point failed to load: {e}") from None
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "ops")):
        try:
            try:
                obj = obj(device=device)
            except TypeError:
                if device is not None:
                    raise BackendUnavailable(f"backend {spec!r} does not take a device") from None
                obj = obj()
        except (BackendUnavailable, UnknownBackendError):
            raise
        except Exception as e:  # a factory that fails is a backend that cannot run here
            raise BackendUnavailable(f"backend {spec!r}: constructor failed: "
                                     f"{type(e).__name__}: {e}") from None
    for attr in ("name", "ops", "profiles"):
        if not hasattr(obj, attr):
            raise UnknownBackendError(f"backend {spec!r}: object has no {attr!r} attribute; "
                                      "see mxref/backends/base.py for the protocol")
    return obj
