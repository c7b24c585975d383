"""`mxref verify`: hold a backend to the golden corpus bit for bit (see run.verify)."""
from .engine import SelectionError, default_golden_root, select_files  # noqa: F401
from .expectations import ExpectationsError, load_expectations  # noqa: F401
from .run import (EXIT_EMPTY, EXIT_FAIL, EXIT_INTEGRITY, EXIT_OK, EXIT_UNAVAILABLE,  # noqa: F401
                  EXIT_USAGE, VerifyReport, detect_profile, verify)
