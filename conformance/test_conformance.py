"""The repository's conformance run: the shipped suite (mxref/conformance), collected here.

    pytest conformance --mxref-backend=numba
    TRITON_INTERPRET=1 pytest conformance --mxref-backend=triton --mxref-level=0

Every test function of the shipped suite (one per golden op) is re-exported.
"""
from mxref.conformance.test_mx_conformance import *  # noqa: F401,F403
