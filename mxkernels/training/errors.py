"""Training errors: refusals of ``mxref train`` (models, data, recipes, run directories).

They subclass :class:`mxref.errors.MXRefError`, so a caller catching mxref's errors catches
these too; they live here because only the training code raises them.
"""
from __future__ import annotations

from mxref.errors import MXRefError

__all__ = ["UnknownModelError", "DataError", "TrainingConfigError", "RunDirError",
           "CheckpointError", "NonFiniteLossError", "TrainingCheckError", "UnknownRecipeError",
           "RecipeError"]


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
