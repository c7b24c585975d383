"""Golden files: uncompressed Arrow IPC, bit-pattern columns, `mxref.*` metadata, hashes.

Every check that fails raises `GoldenIntegrityError` naming the file and the check (the CLI
turns it into exit code 3). Files are opened with `pa.memory_map` (zero copy) and refused above
`MAX_FILE_BYTES`. No pickle anywhere: Arrow IPC and JSON only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import MXRefError

FORMAT_VERSION = "1.0"
SUITE_VERSION = "2026.11.1"
MAX_FILE_BYTES = 256 * 1024 * 1024
META_PREFIX = "mxref."
# metadata that may legitimately differ between machines (which peers are installed)
VOLATILE_META = ("mxref.cross_checks",)


class GoldenIntegrityError(MXRefError):
    """A golden file or manifest failed an integrity check (exit code 3)."""

    def __init__(self, path, check: str, detail: str):
        self.path, self.check, self.detail = str(path), check, detail
        super().__init__(f"{path}: {check}: {detail}")


def tensor_column(name: str, arr: np.ndarray, meta: dict) -> tuple[pa.Field, pa.Array]:
    """A fixed_shape_tensor column from a [rows, *shape] array (canonical Arrow extension)."""
    arr = np.ascontiguousarray(arr)
    shape = list(arr.shape[1:])
    typ = pa.fixed_shape_tensor(pa.from_numpy_dtype(arr.dtype), shape)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), int(np.prod(shape)))
    col = pa.ExtensionArray.from_storage(typ, storage)
    return pa.field(name, typ, nullable=False, metadata=_meta(meta)), col


def plain_column(name: str, arr, meta: dict | None = None, typ=None) -> tuple[pa.Field, pa.Array]:
    col = pa.array(arr, type=typ)
    return pa.field(name, col.type, nullable=False, metadata=_meta(meta or {})), col


def dict_column(name: str, values: list[str], meta: dict | None = None):
    col = pa.array(values, type=pa.string()).dictionary_encode()
    return pa.field(name, col.type, nullable=False, metadata=_meta(meta or {})), col


def _meta(d: dict) -> dict:
    return {f"{META_PREFIX}{k}".encode(): (v if isinstance(v, str) else json.dumps(v, sort_keys=True)).encode()
            for k, v in d.items()}


def write_golden(path: Path, columns: list, schema_meta: dict) -> bytes:
    """Write one uncompressed Arrow IPC file; returns its bytes (for hashing)."""
    fields = [f for f, _ in columns]
    schema = pa.schema(fields, metadata=_meta(schema_meta))
    batch = pa.record_batch([c for _, c in columns], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=None)) as w:
        w.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return data


def read_golden(path) -> pa.Table:
    """Open a golden file zero-copy, refusing oversize, corrupt or future-major files."""
    path = Path(path)
    if not path.is_file():
        raise GoldenIntegrityError(path, "exists", "file not found")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise GoldenIntegrityError(path, "size limit",
                                   f"{size} bytes exceeds the {MAX_FILE_BYTES} byte limit")
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise GoldenIntegrityError(path, "arrow ipc", f"cannot read: {e}") from None
    meta = schema_meta(table)
    version = meta.get("format_version")
    if version is None:
        raise GoldenIntegrityError(path, "format_version", "missing mxref.format_version")
    if version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
        raise GoldenIntegrityError(path, "format_version",
                                   f"major {version} is not supported (reader {FORMAT_VERSION})")
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


def content_hash(table: pa.Table) -> str:
    """sha256 over the decoded columns (names, types, values), not the file bytes: it is
    what regeneration must reproduce exactly on any machine."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(name.encode() + b"\0" + _canonical_type(col.type).encode() + b"\0")
        if isinstance(col.type, pa.FixedShapeTensorType):
            h.update(np.ascontiguousarray(col.to_numpy_ndarray()).tobytes())
        elif pa.types.is_dictionary(col.type) or pa.types.is_list(col.type) \
                or pa.types.is_string(col.type):
            h.update(json.dumps(col.to_pylist()).encode())
        else:
            h.update(np.ascontiguousarray(col.to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


def _canonical_type(typ) -> str:
    """A type description that does not depend on pyarrow's repr of extension types."""
    if isinstance(typ, pa.FixedShapeTensorType):
        return f"fixed_shape_tensor<{typ.value_type}>{list(typ.shape)}"
    if pa.types.is_dictionary(typ):
        return f"dictionary<{typ.value_type}>"
    if pa.types.is_list(typ):
        return f"list<{typ.value_type}>"
    return str(typ)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
