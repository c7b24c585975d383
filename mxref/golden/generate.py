"""The corpus driver: for every op of :data:`mxref.ops.OPS`, its family's writer gives the files
of a level (``specs``) and their columns (``build``); this module writes them with their
manifest, under a lock on the output folder. The checks of a corpus (the generator-source hash,
the committed files) are in :mod:`.manifest`, a regeneration (``generate --check``) in
:mod:`.regenerate`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from ..ops import FAMILIES, OP_NAMES, family_ops
from . import cases as C
from .columns import FileSpec, check_columns, coverage, file_meta, generator_source_sha256
from .manifest import MANIFEST, generation_lock, load_manifest, write_manifest
from .suites import decompose, fp8fp4, gemm, quantize, rotate, sr
from .writer import FORMAT_VERSION, SUITE_VERSION, content_hash, sha256_bytes, write_golden

_FAMILY_MODULES = {"quantize": quantize, "rotate": rotate, "gemm": gemm, "sr": sr,
                   "fp8fp4": fp8fp4, "decompose": decompose}


def _writers() -> dict:
    """op -> (specs, build), in the op table's order; each family module writes exactly the
    ops the table gives its family."""
    out = {}
    for family in FAMILIES:
        table = _FAMILY_MODULES[family].WRITERS
        if tuple(table) != family_ops(family):
            raise AssertionError(f"golden/suites/{family}.py writes {tuple(table)}; mxref.ops "
                                 f"gives the family {family_ops(family)}")
        out.update(table)
    return {op: out[op] for op in OP_NAMES}


WRITERS = _writers()


def file_specs(level: int, ops=None) -> list[FileSpec]:
    """The files of one level, for the given ops (default: every op), op by op."""
    specs = []
    for op in ops or OP_NAMES:
        if op not in WRITERS:
            raise KeyError(f"unknown golden op {op!r}; known: {', '.join(OP_NAMES)}")
        specs += WRITERS[op][0](level)
    return specs


def build_file(spec: FileSpec, out_root: Path | None, cross_check=True):
    """Build one golden file; returns (bytes, rows, coverage) or None if it has no rows."""
    res = WRITERS[spec.op][1](spec, cross_check)
    if res is None:
        return None
    cols, classes, extra = res
    check_columns(spec.op, cols)
    cov = coverage(classes)
    data = write_golden(None if out_root is None else out_root / spec.relpath, cols,
                        file_meta(spec, cov, extra))
    return data, len(classes), cov


def manifest_entry(spec: FileSpec, data: bytes, rows: int, cov: dict, content: str) -> dict:
    return {"op": spec.op, "format": spec.fmt, "profile": spec.profile,
            "src_dtype": spec.src_dtype, "level": spec.level, "rows": rows, "bytes": len(data),
            "sha256_bytes": sha256_bytes(data), "sha256_content": content,
            "classes": cov}


def dumps_manifest(entries: dict) -> str:
    doc = {"schema": "mxref-golden-manifest/1", "format_version": FORMAT_VERSION,
           "suite": "mx-core", "suite_version": SUITE_VERSION,
           "generator": f"mxref-golden/{C.GENERATOR_VERSION}",
           "generator_source_sha256": generator_source_sha256(),
           "files": dict(sorted(entries.items()))}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def generate(root: Path, levels, ops=None, progress=None, cross_check=True) -> dict:
    """Write every file of the given levels (and ops) under root, and root/MANIFEST.json.

    The whole run holds root's generation lock (a second run into root is refused, naming this
    one's pid), so the manifest's read-modify-write cannot lose another run's entries; the
    manifest is replaced atomically. Entries of an existing manifest outside this run's levels
    and ops are kept as they are (their files are not rewritten), so ``--suite OP`` adds or
    refreshes one op's files; the manifest's generator hash is the current one. Returns the
    entries written by this run."""
    root = Path(root)
    specs = [s for lv in levels for s in file_specs(lv, ops)]
    with generation_lock(root):
        kept = {}
        if (root / MANIFEST).is_file():
            kept = {rel: e for rel, e in load_manifest(root)["files"].items()
                    if e["level"] not in set(levels) or (ops is not None and e["op"] not in ops)}
        entries = {}
        for spec in specs:
            res = build_file(spec, root, cross_check=cross_check)
            if progress:
                progress(spec)
            if res is None:
                continue
            data, rows, cov = res
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            entries[spec.relpath] = manifest_entry(spec, data, rows, cov, content_hash(table))
        write_manifest(root, dumps_manifest({**kept, **entries}))
    return entries
