"""Numba runtime settings mxref chooses before its first parallel kernel runs (stub: being filled in)."""


def configure() -> None:
    """Choose numba's threading layer / wait policy before mxref's first parallel launch."""
