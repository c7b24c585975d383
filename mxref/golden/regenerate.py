"""`mxref generate --check`: regenerate a corpus's files in memory and compare them with its
manifest (content, rows, class counts) and with the committed files.

The read side of a regeneration, kept out of the generator-source hash (golden/columns.py): it
imports the driver (:mod:`.generate`) and the manifest checks (:mod:`.manifest`), neither of
which imports it.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .generate import build_file, file_specs
from .manifest import load_manifest
from .store import GoldenIntegrityError, content_hash, open_verified


def regenerate_check(root: Path, levels, ops=None) -> list[GoldenIntegrityError]:
    """Regenerate every file of the given levels (and ops) in memory and compare its decoded
    content, rows and class counts with the manifest; every committed file of those levels is
    checked against the manifest too (bytes, content, rows), so regenerated and committed
    content agree through it."""
    root = Path(root)
    try:
        doc = load_manifest(root)
    except GoldenIntegrityError as e:
        return [e]
    problems = []
    want = {rel: e for rel, e in doc["files"].items() if e["level"] in set(levels)
            and (ops is None or e["op"] in ops)}
    seen = set()
    for spec in (s for lv in levels for s in file_specs(lv, ops)):
        res = build_file(spec, None, cross_check=False)
        if res is None:
            continue
        seen.add(spec.relpath)
        data, rows, cov = res
        path, entry = root / spec.relpath, want.get(spec.relpath)
        if entry is None:
            problems.append(GoldenIntegrityError(
                path, "manifest", "the generator produces this file; the manifest lacks it"))
            continue
        if content_hash(pa.ipc.open_file(pa.BufferReader(data)).read_all()) != entry["sha256_content"]:
            problems.append(GoldenIntegrityError(path, "sha256 content",
                                                 "regenerated content differs from MANIFEST.json"))
        if rows != entry["rows"]:
            problems.append(GoldenIntegrityError(
                path, "rows", f"regenerated {rows} rows, MANIFEST.json says {entry['rows']}"))
        for cls, n in entry["classes"].items():
            if cov.get(cls, 0) < n:
                problems.append(GoldenIntegrityError(
                    path, "coverage", f"class {cls} shrank from {n} to {cov.get(cls, 0)} rows"))
        try:
            open_verified(root, spec.relpath, entry)
        except GoldenIntegrityError as e:
            problems.append(e)
    for rel in sorted(set(want) - seen):
        problems.append(GoldenIntegrityError(root / rel, "generator",
                                             "in MANIFEST.json but no longer generated"))
    return problems
