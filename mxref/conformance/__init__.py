"""The shipped conformance suite: ``pytest --pyargs mxref.conformance --mxref-backend=B``."""
