"""Backends: kernel stacks ``mxref verify`` holds to the golden corpus (protocol in base.py)."""
from .base import Backend, BackendUnavailable, UnknownBackendError, Unsupported  # noqa: F401
from .registry import BUILTIN, get_backend, list_backends  # noqa: F401
