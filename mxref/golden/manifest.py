"""Read, validate and check a corpus's MANIFEST.json; the lock and the atomic manifest write of
a generate run.

The read side (not a generator source: changing it does not regenerate the corpus). The three
drift checks (conformance_anchors C.4): :func:`check` compares the generator-source hash recorded
in the manifest and every committed file (bytes, decoded content, rows) with the manifest;
:func:`.regenerate.regenerate_check` regenerates files in memory and compares their content with the manifest
and with the committed files. The manifest is validated by :func:`load_manifest` before any of it
is used: every malformed part is a :class:`GoldenIntegrityError` (exit 3) naming it.
"""
from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

from .columns import generator_source_sha256
from .store import (FORMAT_VERSION, MAX_FILE_BYTES, GoldenIntegrityError, key_problem,
                    open_verified)

MANIFEST = "MANIFEST.json"
#: held (fcntl.flock) by a generate run for its whole length; removed when the run ends
LOCK = ".mxref-generate.lock"

# ---- schema: each key and what its value must be ----------------------------------------------
_HEX64, _COUNT, _CLASSES = "a lowercase sha256 hex digest", "a non-negative integer", \
    "an object of class name -> non-negative integer"
_TOP = {"schema": str, "format_version": str, "suite": str, "suite_version": str,
        "generator": str, "generator_source_sha256": _HEX64, "files": dict}
_ENTRY = {"op": str, "format": str, "profile": str, "src_dtype": str, "level": _COUNT,
          "rows": _COUNT, "bytes": _COUNT, "sha256_bytes": _HEX64, "sha256_content": _HEX64,
          "classes": _CLASSES}


def _is_count(v) -> bool:
    return type(v) is int and v >= 0


def _fits(value, kind) -> bool:
    if kind is _HEX64:
        return isinstance(value, str) and re.fullmatch("[0-9a-f]{64}", value) is not None
    if kind is _COUNT:
        return _is_count(value)
    if kind is _CLASSES:
        return isinstance(value, dict) and all(_is_count(n) for n in value.values())
    return isinstance(value, kind)


def _object_problem(where: str, obj, spec: dict) -> str | None:
    """What is wrong with one object of the manifest (its keys, each value's type), or None."""
    if not isinstance(obj, dict):
        return f"{where}: expected an object, got {json.dumps(obj)[:60]}"
    for what, keys in (("missing", spec.keys() - obj.keys()), ("unknown", obj.keys() - spec.keys())):
        if keys:
            return f"{where}: {what} key(s) {', '.join(sorted(keys))}"
    for key, kind in spec.items():
        if not _fits(obj[key], kind):
            want = kind if isinstance(kind, str) else f"a JSON {'string' if kind is str else 'object'}"
            return f"{where}.{key}: expected {want}, got {json.dumps(obj[key])[:60]}"
    return None


def manifest_problem(doc) -> str | None:
    """The first thing wrong with a parsed manifest (None when valid): the top-level keys and
    types, then every entry's key (a corpus file name) and fields."""
    why = _object_problem("manifest", doc, _TOP)
    if why:
        return why
    if doc["schema"] != "mxref-golden-manifest/1":
        return f"manifest.schema: {doc['schema']!r} is not mxref-golden-manifest/1"
    for rel, entry in doc["files"].items():
        why = key_problem(rel)
        if why:
            return f"files[{rel!r}]: {why}"
        why = _object_problem(f"files[{rel!r}]", entry, _ENTRY)
        if why:
            return why
    return None


def load_manifest(root: Path) -> dict:
    """The validated manifest of the corpus at root (GoldenIntegrityError naming the problem)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise GoldenIntegrityError(path, "manifest", "MANIFEST.json not found")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise GoldenIntegrityError(path, "size limit", f"over the {MAX_FILE_BYTES} byte limit")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise GoldenIntegrityError(path, "manifest schema", f"key {dup!r} appears twice")
        return dict(pairs)
    try:
        doc = json.loads(path.read_bytes(), object_pairs_hook=no_duplicates)
    except (ValueError, UnicodeDecodeError) as e:   # JSONDecodeError is a ValueError
        raise GoldenIntegrityError(path, "manifest", f"not valid JSON: {e}") from None
    except RecursionError:
        raise GoldenIntegrityError(path, "manifest", "not valid JSON: nested too deeply") from None
    why = manifest_problem(doc)
    if why:
        raise GoldenIntegrityError(path, "manifest schema", why)
    if doc["format_version"].split(".")[0] != FORMAT_VERSION.split(".")[0]:
        raise GoldenIntegrityError(path, "format_version",
                                   f"manifest format {doc['format_version']} unsupported")
    return doc


def check(root: Path, sources=True) -> list[GoldenIntegrityError]:
    """Integrity of a committed suite: every problem found, each naming file and check."""
    root = Path(root)
    try:
        doc = load_manifest(root)
    except GoldenIntegrityError as e:
        return [e]
    problems = []
    if sources and doc["generator_source_sha256"] != generator_source_sha256():
        problems.append(GoldenIntegrityError(
            root / MANIFEST, "generator source hash",
            "mxref's generator sources changed since these goldens were generated; run "
            "'mxref generate --level 0 --level 1' and commit the result"))
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*.arrow")}
    for rel in sorted(on_disk - set(doc["files"])):
        problems.append(GoldenIntegrityError(root / rel, "manifest", "file is not in MANIFEST.json"))
    for rel, entry in sorted(doc["files"].items()):
        try:
            open_verified(root, rel, entry)
        except GoldenIntegrityError as e:
            problems.append(e)
    return problems


@contextmanager
def generation_lock(root: Path):
    """Hold ``root/.mxref-generate.lock`` for a generate run: an exclusive, non-blocking
    ``fcntl.flock`` (POSIX), the holder's pid written in it. A second run into the same folder
    gets GoldenIntegrityError "lock" naming that pid (exit 3) instead of overwriting the other's
    manifest. The file is removed while still held, and a run that locked a file already removed
    that way tries again, so two runs never hold two different lock files."""
    import fcntl

    path = root / LOCK
    while True:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:        # a symlink planted there, a read-only folder, ...
            raise GoldenIntegrityError(path, "lock", f"cannot open the lock file: {e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise GoldenIntegrityError(
                path, "lock", f"another 'mxref generate' (pid {holder}) is writing {root}; "
                "wait for it to finish") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.unlink(path)
        os.close(fd)


def write_manifest(root: Path, text: str) -> None:
    """Replace root/MANIFEST.json atomically (a temporary file, then os.replace)."""
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, root / MANIFEST)
