"""Read a ``.safetensors`` file lazily: the header is parsed and checked here, tensor bytes are
a read-only memory map (no tensor is copied into memory until a scan touches a slice of it).

The format (huggingface/safetensors): 8 bytes little-endian header length N, N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the
data buffer; offsets are relative to the buffer's start. We parse it ourselves rather than
through ``safe_open(framework="numpy")`` because numpy has no E8M0 / FP4 dtypes and because
every lie a header can tell (a size that does not match dtype x shape, an offset past the end
of a truncated file, overlapping tensors) must become a :class:`ScanFileError` naming the
tensor, never a crash.
"""
from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from itertools import pairwise
from math import prod
from pathlib import Path

import numpy as np

from ..errors import MXRefError

__all__ = ["DTYPE_BITS", "SafetensorsFile", "ScanFileError", "TensorInfo", "expand_paths"]

#: safetensors dtype -> bits per element (F4 counts elements, two per byte)
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4,
              "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "I64": 64, "U64": 64, "F64": 64}
_MAX_HEADER = 100 * 2**20          # safetensors' own limit


class ScanFileError(MXRefError):
    """A checkpoint file that cannot be read as safetensors: truncated, a header that lies about
    sizes or offsets, an unknown dtype, a dtype/shape that does not fit the bytes (exit 3)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple
    begin: int                      # absolute byte offset in the file
    nbytes: int
    file: str


def expand_paths(paths) -> list[Path]:
    """Files to scan: ``.safetensors`` files as given; a directory contributes the shards its
    ``*.safetensors.index.json`` names (or, without an index, every ``*.safetensors``)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            idx = sorted(p.glob("*.safetensors.index.json"))
            if idx:
                for ix in idx:
                    try:
                        wm = json.loads(ix.read_text())["weight_map"]
                        shards = sorted(set(wm.values()))
                    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                        raise ScanFileError(f"{ix}: not a safetensors index ({e})") from None
                    for s in shards:
                        if Path(s).is_absolute() or ".." in Path(s).parts:
                            raise ScanFileError(f"{ix}: shard {s!r} is outside the directory")
                        out.append(p / s)
            else:
                found = sorted(p.glob("*.safetensors"))
                if not found:
                    raise ScanFileError(f"{p}: no *.safetensors files and no index")
                out.extend(found)
        else:
            out.append(p)
    for f in out:
        if not f.is_file():
            raise ScanFileError(f"{f}: no such file")
    return out


class SafetensorsFile:
    """One checked safetensors file; ``array(info)`` gives a read-only view of a tensor's bytes."""

    def __init__(self, path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self._read_header(fh, size)
                # the map keeps its own handle to the file
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except OSError as e:
            raise ScanFileError(f"{self.path}: cannot read ({e.strerror or e})") from None

    def _read_header(self, fh, size):
        head = fh.read(8)
        if len(head) < 8:
            raise ScanFileError(f"{self.path}: truncated ({size} bytes, no header length)")
        n = int.from_bytes(head, "little")
        if n > min(_MAX_HEADER, size - 8):
            raise ScanFileError(f"{self.path}: header length {n} exceeds the file "
                                f"({size} bytes): truncated or not safetensors")
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ScanFileError(f"{self.path}: header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise ScanFileError(f"{self.path}: header is not a JSON object")
        meta = header.pop("__metadata__", None) or {}
        self.metadata = meta if isinstance(meta, dict) else {}
        base = 8 + n
        self.data_size = size - base
        self.tensors: dict[str, TensorInfo] = {}
        for name, h in header.items():
            self.tensors[name] = self._check(name, h, base)
        spans = sorted((t.begin, t.begin + t.nbytes, t.name) for t in self.tensors.values())
        for (_, e0, n0), (b1, _, n1) in pairwise(spans):
            if b1 < e0:
                raise ScanFileError(f"{self.path}: tensors {n0!r} and {n1!r} overlap")

    def _check(self, name, h, base) -> TensorInfo:
        where = f"{self.path}: tensor {name!r}"
        try:
            dtype, shape, (b, e) = h["dtype"], tuple(h["shape"]), h["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ScanFileError(f"{where}: header entry lacks dtype/shape/data_offsets") from None
        if dtype not in DTYPE_BITS:
            raise ScanFileError(f"{where}: unknown dtype {dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not all(
                isinstance(o, int) and o >= 0 for o in (b, e)) or e < b:
            raise ScanFileError(f"{where}: malformed shape {shape} or offsets {[b, e]}")
        bits = prod(shape) * DTYPE_BITS[dtype]
        if bits % 8 or bits // 8 != e - b:
            raise ScanFileError(f"{where}: header says {dtype} {list(shape)} "
                                f"({bits / 8:g} bytes) but its offsets span {e - b} bytes")
        if e > self.data_size:
            raise ScanFileError(f"{where}: data ends at byte {base + e} but the file has "
                                f"{base + self.data_size} bytes (truncated?)")
        return TensorInfo(name, dtype, shape, base + b, e - b, str(self.path))

    def array(self, info: TensorInfo) -> np.ndarray:
        """The tensor's raw bytes as a read-only uint8 array (a view of the memory map)."""
        if info.nbytes == 0:
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(self._mm, dtype=np.uint8, count=info.nbytes, offset=info.begin)

    def close(self):
        """Drop the map (views still alive keep it open until they go)."""
        self._mm = None
