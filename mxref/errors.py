"""Typed errors. Every refusal names the problem; none is a bare ValueError."""


class MXRefError(Exception):
    """Base class of every error mxref raises on purpose."""


class UnknownFormatError(MXRefError, KeyError):
    """A format name that is not in :data:`mxref.FORMATS`."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnknownProfileError(MXRefError, KeyError):
    """A profile name that is not in :data:`mxref.PROFILES`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsupportedDtypeError(MXRefError, TypeError):
    """An input dtype the reference does not accept (or accepts only with an explicit choice)."""


class AmbiguousInputError(MXRefError, TypeError):
    """Raw integer bit patterns passed without saying which float format they encode."""


class AxisError(MXRefError, ValueError):
    """A block axis outside the input's dimensions."""


class BlockSizeError(MXRefError, ValueError):
    """A block size the format does not allow, or a ragged block the profile refuses."""


class ProfileConflictError(MXRefError, ValueError):
    """Profile knobs that contradict each other or the format they are used with."""


class ShapeError(MXRefError, ValueError):
    """Arrays whose shapes do not fit together (codes vs scales, layouts)."""


class CodeRangeError(MXRefError, ValueError):
    """Unpacked element codes above the format's code range (FP4 > 0x0F, FP6 > 0x3F)."""


class ScaleValueError(MXRefError, ValueError):
    """An NVFP4 tensor scale or global amax that is NaN, infinite or negative, or a tensor
    scale given for a format that has none."""


class GeneratorArgumentError(MXRefError, ValueError):
    """A random-generator argument (seed, offset, step, tensor_id) that is not an integer (bool
    and float included), or below the minimum its generator takes (numpy seeds are >= 0)."""


# --- backends (the protocol of mxref/backends/base.py) --------------------------------------

class BackendUnavailable(MXRefError):
    """The backend cannot run here (import failure, no device); verify exits 4."""


class UnknownBackendError(MXRefError, KeyError):
    """A backend name that is neither built in, an entry point, nor importable module:object."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Unsupported(MXRefError):
    """Raised by a backend method for a call it does not implement (counted as skipped)."""
