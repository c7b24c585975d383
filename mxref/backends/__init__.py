"""Backends: kernel stacks ``mxref verify`` holds to the golden corpus (protocol in base.py)."""
from .base import (CORE_OPS, EXT_OPS, GOLDEN_OPS, Backend, BackendUnavailable, Unsupported,  # noqa: F401
                   UnknownBackendError)
from .registry import BUILTIN, get_backend, list_backends  # noqa: F401
