"""Verified-only benchmark leaderboard: records, the submit rule, the regression gate, the site."""
from .schema import SCHEMA, SUITES

__all__ = ["SCHEMA", "SUITES"]
