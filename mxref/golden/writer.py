"""Golden files, the write side: Arrow columns, uncompressed Arrow IPC, the content hash.

Everything here decides the bytes of a golden file or of its manifest entry, so this module is
one of the generator sources (:data:`mxref.golden.columns.GENERATOR_SOURCES`); the read side
(opening and checking files, :mod:`.store`) is not, and can change without regenerating the
corpus. No pickle anywhere: Arrow IPC and JSON only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

FORMAT_VERSION = "1.0"
SUITE_VERSION = "2026.11.1"
META_PREFIX = "mxref."


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
