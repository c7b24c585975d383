"""`mxref verify`: hold a backend to the golden corpus bit for bit (see run.verify).

``select`` picks the golden files, ``checks/<family>`` call the backend and compare each op's
fields (with ``compare``), ``run`` loops over the files and sums the report.
"""
from .expectations import ExpectationsError, load_expectations  # noqa: F401
from .run import (EXIT_EMPTY, EXIT_FAIL, EXIT_INTEGRITY, EXIT_OK, EXIT_UNAVAILABLE,  # noqa: F401
                  EXIT_USAGE, VerifyReport, detect_profile, verify)
from .select import SelectionError, default_golden_root, select_files  # noqa: F401
