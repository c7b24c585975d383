"""Golden files, the read side: open a file zero-copy, or open a corpus file checked against its
manifest entry (where it is, its size, its bytes, its decoded content, its rows).

Every check that fails raises `GoldenIntegrityError` naming the file and the check (the CLI
turns it into exit code 3). The write side (columns, :func:`write_golden`, :func:`content_hash`)
is :mod:`.writer`, re-exported here for the callers that import it from this module; it is
hashed into the generator-source hash and this module is not. No pickle anywhere.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa

from ..errors import MXRefError
from .writer import (FORMAT_VERSION, META_PREFIX, SUITE_VERSION, content_hash,  # noqa: F401
                     dict_column, plain_column, sha256_bytes, tensor_column, write_golden)

MAX_FILE_BYTES = 256 * 1024 * 1024
# metadata that may legitimately differ between machines (which peers are installed)
VOLATILE_META = ("mxref.cross_checks",)


class GoldenIntegrityError(MXRefError):
    """A golden file or manifest failed an integrity check (exit code 3)."""

    def __init__(self, path, check: str, detail: str):
        self.path, self.check, self.detail = str(path), check, detail
        super().__init__(f"{path}: {check}: {detail}")


def key_problem(rel) -> str | None:
    """Why a manifest key is not a corpus file name (None when it is one): a relative posix path
    of plain components ending in .arrow; no '..', '.', empty part, absolute path, backslash
    or drive letter."""
    if not isinstance(rel, str) or not rel:
        return "a key must be a non-empty string"
    if "\\" in rel or ":" in rel or rel.startswith("/"):
        return "not a relative posix path (absolute, backslash or drive letter)"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' component"
    if PurePosixPath(rel).suffix != ".arrow":
        return "not an .arrow file"
    return None


def corpus_path(root, rel: str) -> Path:
    """``root/rel`` after checking the key and that it resolves inside root (a symlinked file
    or folder that leads out of the corpus is refused)."""
    root = Path(root)
    why = key_problem(rel)
    if why:
        raise GoldenIntegrityError(root / "MANIFEST.json", "manifest key", f"{rel!r}: {why}")
    path = root / rel
    if not path.resolve().is_relative_to(root.resolve()):
        raise GoldenIntegrityError(path, "outside the corpus",
                                   f"{rel!r} resolves to {path.resolve()}, outside {root.resolve()}")
    return path


def _size_checked(path: Path) -> int:
    """The file's size from stat(), refused above MAX_FILE_BYTES before a byte is read."""
    if not path.is_file():
        raise GoldenIntegrityError(path, "exists", "file not found")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise GoldenIntegrityError(path, "size limit",
                                   f"{size} bytes exceeds the {MAX_FILE_BYTES} byte limit")
    return size


def _open_ipc(path: Path, source) -> pa.Table:
    """An Arrow IPC file from `source`, refusing corrupt or future-major files."""
    try:
        table = pa.ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise GoldenIntegrityError(path, "arrow ipc", f"cannot read: {e}") from None
    version = schema_meta(table).get("format_version")
    if version is None:
        raise GoldenIntegrityError(path, "format_version", "missing mxref.format_version")
    if version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
        raise GoldenIntegrityError(path, "format_version",
                                   f"major {version} is not supported (reader {FORMAT_VERSION})")
    return table


def read_golden(path) -> pa.Table:
    """Open a golden file zero-copy, refusing oversize, corrupt or future-major files."""
    path = Path(path)
    _size_checked(path)
    return _open_ipc(path, pa.memory_map(str(path), "r"))


def open_verified(root, rel: str, entry: dict) -> pa.Table:
    """Corpus file `rel` checked against its manifest entry: inside the corpus, size (from
    stat, before reading), sha256 of the bytes, then sha256 of the decoded content and the row
    count of the table parsed from those same bytes."""
    path = corpus_path(root, rel)
    if not path.is_file():
        raise GoldenIntegrityError(path, "exists", "listed in MANIFEST.json but missing")
    size = _size_checked(path)
    if size != entry["bytes"]:
        raise GoldenIntegrityError(path, "size", f"{size} bytes, MANIFEST.json says {entry['bytes']}")
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if sha256_bytes(data) != entry["sha256_bytes"]:
        raise GoldenIntegrityError(path, "sha256 bytes", "file bytes differ from MANIFEST.json")
    table = _open_ipc(path, pa.BufferReader(data))
    if content_hash(table) != entry["sha256_content"]:
        raise GoldenIntegrityError(path, "sha256 content",
                                   "decoded content differs from MANIFEST.json")
    if table.num_rows != entry["rows"]:
        raise GoldenIntegrityError(path, "rows",
                                   f"{table.num_rows} rows, MANIFEST.json says {entry['rows']}")
    return table


def schema_meta(table: pa.Table) -> dict:
    out = {}
    for k, v in (table.schema.metadata or {}).items():
        k = k.decode()
        if k.startswith(META_PREFIX):
            out[k[len(META_PREFIX):]] = v.decode()
    return out


def column_numpy(table: pa.Table, name: str) -> np.ndarray:
    """A column as numpy: [rows, *shape] for tensor columns (zero-copy where possible)."""
    col = table.column(name).combine_chunks()
    if isinstance(col.type, pa.FixedShapeTensorType):
        return col.to_numpy_ndarray()
    if pa.types.is_dictionary(col.type):
        return np.asarray(col.dictionary.to_pylist(), dtype=object)[col.indices.to_numpy()]
    return col.to_numpy(zero_copy_only=False)
