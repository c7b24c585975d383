"""Helpers shared by the command modules: error exit, comma/repeat option splitting, the
corpus lookup with its exit code (3, the golden-corpus class of failure), output paths checked
before a run and written atomically, and keeping stdout clean for ``--json``."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import click

from ..errors import MXRefError

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


# ---- output paths: checked before a run, written atomically -----------------------------------
class OutputPathError(MXRefError):
    """An output path (a report, a dump) that cannot be written; refused before any work."""


def prepare_output(path, option: str, *, directory: bool = False) -> Path:
    """Make sure `path` can be written before a long run, so no report is lost at its end.

    Missing parent directories (and, with ``directory``, the directory itself) are created;
    a path that names an existing directory where a file is wanted (or a file where a directory
    is wanted), a parent that is a file, or a directory we may not write into is refused with
    :class:`OutputPathError` naming the option and the path (the CLI exits 2)."""
    p = Path(path)
    target_dir = p if directory else p.parent
    if directory and p.exists() and not p.is_dir():
        raise OutputPathError(f"{option} {path}: exists and is not a directory")
    if not directory and p.is_dir():
        raise OutputPathError(f"{option} {path}: is a directory, expected a file path")
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{option} {path}: cannot create directory {target_dir}: "
                              f"{e.strerror or e}") from None
    try:                                 # the real test of writability (ACLs, read-only mounts)
        fd, probe = tempfile.mkstemp(prefix=".mxref-probe-", dir=target_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputPathError(f"{option} {path}: cannot write into {target_dir}: "
                              f"{e.strerror or e}") from None
    if not directory and p.exists() and not os.access(p, os.W_OK):
        raise OutputPathError(f"{option} {path}: exists and is not writable")
    return p


def distinct_outputs(named: list[tuple[str, Path]]) -> None:
    """Refuse two options naming one path: one report would silently overwrite the other.
    `named`: (option, prepared path) pairs."""
    seen = {}
    for option, path in named:
        key = Path(os.path.realpath(path))
        for other, okey in seen.items():
            if key == okey:
                raise OutputPathError(f"{option} {path}: the same path as {other}; each "
                                      "report needs its own file")
        seen[option] = key


def write_atomic(path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and os.replace:
    a reader sees the old file or the whole new one, never a torn report."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def stdout_to_stderr(on: bool = True):
    """While on, everything written to stdout - ``sys.stdout`` and file descriptor 1, so also
    C code and child processes - goes to stderr instead (a backend's prints must not corrupt
    ``--json``). Restored, and C stdio flushed, on the way out."""
    if not on:
        yield
        return
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):   # a closed or odd stream: nothing to flush
            s.flush()
    saved_fd = os.dup(1)
    saved = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        with contextlib.suppress(Exception):   # printf output buffered in libc: to stderr too
            import ctypes  # (no libc, e.g. Windows: nothing buffered there)
            ctypes.CDLL(None).fflush(None)
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved
