"""Audit MX / NVFP4 checkpoints: layout, invalid scale bytes and codes, padding, and which scale
rule produced the data (``mxref scan``; docs/scan.md)."""
from .core import SCHEMA, plan, scan
from .fingerprint import applicable_profiles, rule_table
from .io import ScanFileError
from .layouts import LAYOUTS, UnknownLayoutError

__all__ = [
           "LAYOUTS",
           "SCHEMA",
           "ScanFileError",
           "UnknownLayoutError",
           "applicable_profiles",
           "plan",
           "rule_table",
           "scan",
]
