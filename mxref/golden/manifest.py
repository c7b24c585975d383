"""Generate a suite into a directory with its MANIFEST.json, and check one.

Three independent drift checks (conformance_anchors C.4): the generator-source hash recorded
in the manifest, byte hashes of the committed files, and content hashes of a regeneration.
"""
from __future__ import annotations

import json
from pathlib import Path

from .store import FORMAT_VERSION, GoldenIntegrityError, content_hash, read_golden
from .suites import (build_file, dumps_manifest, file_specs, generator_source_sha256,
                     manifest_entry)
from .store import sha256_bytes
import pyarrow as pa

MANIFEST = "MANIFEST.json"


def generate(root: Path, levels, ops=None, progress=None, cross_check=True) -> dict:
    """Write every file of the given levels (and ops) under root, and root/MANIFEST.json.

    Entries of an existing manifest outside this run's levels and ops are kept as they are
    (their files are not rewritten), so ``--suite OP`` adds or refreshes one op's files; the
    manifest's generator hash is the current one. Returns the entries written by this run."""
    root = Path(root)
    specs = [s for lv in levels for s in file_specs(lv, ops)]
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
    (root / MANIFEST).write_text(dumps_manifest({**kept, **entries}))
    return entries


def load_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise GoldenIntegrityError(path, "manifest", "MANIFEST.json not found")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GoldenIntegrityError(path, "manifest", f"not valid JSON: {e}") from None
    if doc.get("schema") != "mxref-golden-manifest/1" or "files" not in doc:
        raise GoldenIntegrityError(path, "manifest", "not an mxref-golden-manifest/1 document")
    if str(doc.get("format_version", "")).split(".")[0] != FORMAT_VERSION.split(".")[0]:
        raise GoldenIntegrityError(path, "format_version",
                                   f"manifest format {doc.get('format_version')} unsupported")
    return doc


def check(root: Path, sources=True) -> list[GoldenIntegrityError]:
    """Integrity of a committed suite: every problem found, each naming file and check."""
    root = Path(root)
    problems = []
    try:
        doc = load_manifest(root)
    except GoldenIntegrityError as e:
        return [e]
    if sources and doc.get("generator_source_sha256") != generator_source_sha256():
        problems.append(GoldenIntegrityError(
            root / MANIFEST, "generator source hash",
            "mxref's generator sources changed since these goldens were generated; run "
            "'mxref generate --level 0 --level 1' and commit the result"))
    listed = set(doc["files"])
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*.arrow")}
    for rel in sorted(on_disk - listed):
        problems.append(GoldenIntegrityError(root / rel, "manifest", "file is not in MANIFEST.json"))
    for rel in sorted(listed):
        entry = doc["files"][rel]
        path = root / rel
        if not path.is_file():
            problems.append(GoldenIntegrityError(path, "exists", "listed in MANIFEST.json but missing"))
            continue
        data = path.read_bytes()
        if sha256_bytes(data) != entry["sha256_bytes"]:
            problems.append(GoldenIntegrityError(path, "sha256 bytes",
                                                 "file bytes differ from MANIFEST.json"))
            continue
        try:
            table = read_golden(path)
        except GoldenIntegrityError as e:
            problems.append(e)
            continue
        if table.num_rows != entry["rows"]:
            problems.append(GoldenIntegrityError(path, "rows",
                                                 f"{table.num_rows} rows, manifest says {entry['rows']}"))
    return problems


def regenerate_check(root: Path, levels, ops=None) -> list[GoldenIntegrityError]:
    """Regenerate in memory and compare decoded content (and class counts) with the manifest."""
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
        entry = want.get(spec.relpath)
        if entry is None:
            problems.append(GoldenIntegrityError(root / spec.relpath, "manifest",
                                                 "the generator produces this file; the manifest lacks it"))
            continue
        got = content_hash(pa.ipc.open_file(pa.BufferReader(data)).read_all())
        if got != entry["sha256_content"]:
            problems.append(GoldenIntegrityError(root / spec.relpath, "sha256 content",
                                                 "regenerated content differs from MANIFEST.json"))
        for cls, n in entry["classes"].items():
            if cov.get(cls, 0) < n:
                problems.append(GoldenIntegrityError(
                    root / spec.relpath, "coverage",
                    f"class {cls} shrank from {n} to {cov.get(cls, 0)} rows"))
    for rel in sorted(set(want) - seen):
        problems.append(GoldenIntegrityError(root / rel, "generator",
                                             "in MANIFEST.json but no longer generated"))
    return problems
