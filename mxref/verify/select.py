"""Which golden files a verify run reads: the corpus, the manifest filters, the backend's plan,
the shards of a parallel run, and the integrity check on opening a file.

Every name of an op comes from :mod:`mxref.ops`; a filter that names something the corpus does
not have is a usage error (:class:`SelectionError`, exit 2); a file whose bytes differ from the
manifest (bytes, decoded content, rows), or outside the corpus, is an integrity error (exit 3).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..backends.base import BackendUnavailable
from ..corpus import golden_root
from ..errors import MXRefError
from ..formats import FORMATS
from ..golden.manifest import load_manifest
from ..golden.store import GoldenIntegrityError, open_verified
from ..ops import OP_NAMES, PROFILE_FREE_OPS
from ..profiles import PROFILES


class SelectionError(MXRefError, ValueError):
    """A filter that names something the corpus does not have (usage error, exit 2)."""


def default_golden_root(explicit=None) -> Path:
    """The corpus directory (see :func:`mxref.corpus.golden_root`: an explicit path,
    ``MXREF_GOLDEN``, or the corpus shipped with mxref); raises CorpusNotFoundError."""
    return golden_root(explicit)


# ---- selection --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GoldenFile:
    relpath: str
    op: str
    fmt: str
    profile: str
    src_dtype: str
    level: int
    rows: int
    sha256: str
    classes: dict
    sha256_content: str
    nbytes: int


def select_files(root: Path, *, levels=(1,), ops=None, profiles=None, formats=None,
                 src_dtypes=None, classes=None, suite=None):
    """Files of the manifest matching every filter, in manifest order; returns (doc, files)."""
    doc = _manifest(Path(root))
    if suite:
        name, _, version = suite.partition("@")
        if name != doc.get("suite"):
            raise SelectionError(f"unknown suite {name!r}; this corpus is {doc.get('suite')!r}")
        if version and version != doc.get("suite_version"):
            raise GoldenIntegrityError(Path(root) / "MANIFEST.json", "suite version",
                                       f"asked for {version}, corpus is {doc.get('suite_version')}")
    # a format is known when mxref defines it or the corpus names it (the rotate op's files
    # are format "hadamard")
    corpus_formats = {f for e in doc["files"].values() for f in e["format"].split("+")}
    for what, given, known in (("op", ops, OP_NAMES), ("profile", profiles, PROFILES),
                               ("format", formats, sorted(set(FORMATS) | corpus_formats))):
        bad = sorted(set(given or ()) - set(known))
        if bad:
            raise SelectionError(f"unknown {what}(s): {', '.join(bad)}; known: {', '.join(known)}")
    out = []
    for rel, e in doc["files"].items():
        if e["level"] not in levels or (ops and e["op"] not in ops):
            continue
        if formats and not set(e["format"].split("+")) & set(formats):
            continue
        if src_dtypes and e["src_dtype"] not in src_dtypes:
            continue
        if profiles and e["profile"] not in profiles and e["op"] not in PROFILE_FREE_OPS:
            continue
        if classes and not set(classes) & set(e["classes"]):
            continue
        out.append(GoldenFile(rel, e["op"], e["format"], e["profile"], e["src_dtype"],
                              e["level"], e["rows"], e["sha256_bytes"], e["classes"],
                              e["sha256_content"], e["bytes"]))
    return doc, out


_MANIFESTS: dict = {}


def _manifest(root: Path) -> dict:
    """load_manifest, memoized on (path, mtime, size): the pytest plugin asks once per file."""
    p = root / "MANIFEST.json"
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return load_manifest(root)      # raises the integrity error naming the file
    if key not in _MANIFESTS:
        _MANIFESTS.clear()
        _MANIFESTS[key] = load_manifest(root)
    return _MANIFESTS[key]


def open_checked(root: Path, gf: GoldenFile):
    """Read a golden file checked against its manifest entry: inside the corpus, size before
    reading, bytes, decoded content and rows (:func:`mxref.golden.store.open_verified`; exit 3)."""
    return open_verified(root, gf.relpath, {"bytes": gf.nbytes, "sha256_bytes": gf.sha256,
                                            "sha256_content": gf.sha256_content, "rows": gf.rows})


# ---- the backend's plan -------------------------------------------------------------------------
def claims(backend, profile) -> bool:
    """Whether the backend claims `profile` (``"*"`` claims every profile)."""
    claimed = tuple(getattr(backend, "profiles", ()))
    return "*" in claimed or profile in claimed


def plan_files(backend, files, *, ops=None, profiles=None, run_as=None, name="?", claimed_names=()):
    """Which selected files a backend is run on: its claimed profiles (profile-free ops always),
    and only ops it implements unless ops were asked for explicitly (then they count as
    skipped). Returns (files, notes)."""
    notes = []
    backend_ops = set(getattr(backend, "ops", ()))
    if run_as is not None:
        return files, notes
    asked = set(profiles or PROFILES)
    claimed = {p for p in asked if claims(backend, p)}
    unclaimed = sorted(asked - claimed) if profiles else []
    if profiles and not claimed:
        raise BackendUnavailable(
            f"backend {name!r} claims none of the requested profiles ({', '.join(sorted(asked))}); "
            f"it claims {', '.join(claimed_names) or 'none'}")
    if unclaimed:
        notes.append(f"not claimed by the backend, not run: {', '.join(unclaimed)}")
    files = [f for f in files if f.op in PROFILE_FREE_OPS or f.profile in claimed]
    not_impl = sorted({f.op for f in files} - backend_ops)
    if not_impl and not ops:
        notes.append(f"ops the backend does not implement, not run: {', '.join(not_impl)}")
        files = [f for f in files if f.op in backend_ops]
    return files, notes


def shard_of(files, shard: int, nshards: int) -> list:
    """The files of shard `shard` (0-based) of `nshards`: a deterministic partition of `files`
    that every process computes alike from the same selection.

    Files are grouped by (op, format), so that one process compiles each kernel family once;
    while there are fewer groups than shards the largest splits in two; then the groups go,
    largest first (rows + 256 per file), to the least-loaded shard. Each shard keeps the
    manifest order."""
    if not 0 <= shard < nshards:
        raise ValueError(f"shard {shard + 1} is not in 1..{nshards}")
    order = {f.relpath: i for i, f in enumerate(files)}
    groups: dict = {}
    for f in files:
        groups.setdefault((f.op, f.fmt), []).append(f)
    units = [g for _, g in sorted(groups.items())]

    def weight(u):
        return sum(f.rows + 256 for f in u)
    while len(units) < nshards:
        big = max(range(len(units)), key=lambda i: (len(units[i]) > 1, weight(units[i]), -i),
                  default=None)
        if big is None or len(units[big]) < 2:
            break
        u = units.pop(big)
        units[big:big] = [u[:len(u) // 2], u[len(u) // 2:]]
    load = [0] * nshards
    mine = []
    for u in sorted(units, key=lambda u: (-weight(u), order[u[0].relpath])):
        k = min(range(nshards), key=lambda i: (load[i], i))
        load[k] += weight(u)
        if k == shard:
            mine.extend(u)
    return sorted(mine, key=lambda f: order[f.relpath])
