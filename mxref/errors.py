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


# --- training (mxkernels/training) ---------------------------------------------------------

class UnknownModelError(MXRefError, KeyError):
    """A model name that is not in :data:`mxkernels.training.models.MODELS`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DataError(MXRefError, ValueError):
    """A corpus or token file that cannot be used for training (missing, wrong dtype, too short)."""


class TrainingConfigError(MXRefError, ValueError):
    """Training options that are invalid or contradict each other."""


class RunDirError(MXRefError, ValueError):
    """A run directory that exists and is not a resumable run of the same configuration."""


class CheckpointError(MXRefError, ValueError):
    """A checkpoint that is corrupt, incomplete, or belongs to a different model/recipe/config."""


class NonFiniteLossError(MXRefError, ArithmeticError):
    """The training loss became NaN or infinite; the run stopped at the last good checkpoint."""


class TrainingCheckError(MXRefError, AssertionError):
    """An in-run validation check (capture/check of one MX linear layer) failed."""


class UnknownRecipeError(MXRefError, KeyError):
    """A training recipe name that is not in :data:`mxkernels.training.recipes.RECIPES`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RecipeError(MXRefError, ValueError):
    """A training recipe whose options are invalid or cannot be combined (format, profile,
    rounding, Hadamard size, operand source)."""
