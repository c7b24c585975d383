"""CI gate: tinymx against mxref's golden corpus, one test per (golden file, coverage class).

The mxref pytest plugin (installed with mxref) parametrizes these over the corpus; the options
are in pyproject.toml (addopts). A failure prints the mismatching case, bits and fields.
"""
from mxref.conformance.test_mx_conformance import (  # noqa: F401 - collected here
    test_dequantize, test_quantize_mx, test_quantize_mx_tensor)
