"""Read a suite's MANIFEST.json and check the committed files against it.

The read side only: the corpus is written (and regenerated for the content check) by
:mod:`mxref.golden.generate`. Of the three drift checks (conformance_anchors C.4), :func:`check`
does two: the generator-source hash recorded in the manifest and the byte hashes of the files.
"""
from __future__ import annotations

import json
from pathlib import Path

from .columns import generator_source_sha256
from .store import FORMAT_VERSION, GoldenIntegrityError, read_golden, sha256_bytes

MANIFEST = "MANIFEST.json"


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
