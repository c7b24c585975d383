"""Helpers shared by the command modules: error exit, comma/repeat option splitting, and the
corpus lookup with its exit code (3, the golden-corpus class of failure)."""
from __future__ import annotations

import sys

import click

EXIT_USAGE = 2
EXIT_CORPUS = 3  # the golden corpus is missing or fails its integrity checks


def fail(msg: str, code: int = EXIT_USAGE):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def split_values(values) -> list[str]:
    """Options that take several values accept repetition and commas: --ops a,b --ops c."""
    return [v.strip() for val in values for v in val.split(",") if v.strip()]


def corpus_root(explicit=None):
    """The golden corpus directory (mxref.corpus lookup); exit 3 with where it looked if none."""
    from ..corpus import CorpusNotFoundError, golden_root

    try:
        return golden_root(explicit)
    except CorpusNotFoundError as e:
        fail(str(e), EXIT_CORPUS)
