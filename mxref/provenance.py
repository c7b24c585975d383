"""Where a result came from: this machine, the installed packages, the git state of the files.

Shared by ``verify`` (the commit a report verified) and the leaderboard (the environment a record
was measured in); both read it from here so neither imports the other.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("numpy", "numba", "torch", "triton", "pyarrow", "ml_dtypes", "torchao",
            "transformers", "pytest-benchmark")


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    return s or "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(accelerator: dict | None = None) -> dict:
    """This machine, and the accelerator the caller measured on (None for CPU suites)."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem = None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = _cpu_name()
    name = accelerator["name"] if accelerator else f"cpu-{cores}c-{cpu}"
    return {"slug": slug(name), "cpu": cpu, "cores": int(cores or 1),
            "memory_gib": round(mem, 1) if mem else None, "os": platform.platform(),
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "accelerator": accelerator}


def packages() -> dict:
    from . import __version__
    out = {"python": platform.python_version(), "mxref": __version__}   # also when not installed
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            continue
    return out


GIT_TIMEOUT_S = 60
_HEX40 = re.compile(r"[0-9a-f]{40}")


def git_output(root, *args, env=None) -> str | None:
    """The stripped stdout of ``git -C ROOT ARGS``, or None when git fails (or is missing)."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def tree_hash(root=REPO) -> str | None:
    """The git tree hash of the working files as they are on disk: tracked and untracked files
    that .gitignore does not exclude, with their executable bits. It equals
    ``git rev-parse <commit>^{tree}`` exactly when the files on disk are that commit's.

    Computed with a throwaway index and object directory (the repository's objects are read as
    alternates), so the repository's own index and objects are untouched; a stale ``.git`` (a
    device's copy) gives the right answer too. Files a run writes inside the checkout enter the
    hash unless ignored (__pycache__, *.egg-info, .pytest_cache, runs/ are), so take it before
    the run writes anything (`git_state` caches it per process). None on any git failure."""
    where = git_output(root, "rev-parse", "--show-toplevel", "--git-path", "objects")
    lines = where.splitlines() if where else []
    if len(lines) != 2:
        return None
    top, objects = Path(lines[0]), Path(lines[1])
    if not objects.is_absolute():                    # --git-path is relative to ROOT
        objects = Path(root) / objects
    try:
        with tempfile.TemporaryDirectory(prefix="mxref-tree-") as tmp:
            (Path(tmp) / "objects").mkdir()
            alt = os.environ.get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
            env = dict(os.environ, GIT_INDEX_FILE=str(Path(tmp) / "index"),   # not created yet
                       GIT_OBJECT_DIRECTORY=str(Path(tmp) / "objects"),
                       GIT_ALTERNATE_OBJECT_DIRECTORIES=os.pathsep.join(
                           [str(objects.resolve())] + ([alt] if alt else [])))
            if git_output(top, "add", "--all", "--", ".", env=env) is None:
                return None
            tree = git_output(top, "write-tree", env=env)
    except OSError:
        return None
    return tree if tree and _HEX40.fullmatch(tree) else None


def git_state(root: Path = REPO) -> dict:
    """The commit (MXREF_COMMIT wins: a device machine's copy of .git can be stale), whether the
    files differ from it (MXREF_DIRTY when MXREF_COMMIT is given) and `tree_hash` of the files.

    Taken once per process (per root and MXREF_COMMIT / MXREF_DIRTY): the first call fixes it, so
    a run that calls this at its start is not changed by the outputs it later writes."""
    key = (str(Path(root).resolve()), os.environ.get("MXREF_COMMIT"),
           os.environ.get("MXREF_DIRTY"))
    return dict(_git_state(*key))


@functools.cache
def _git_state(root: str, env_commit: str | None, env_dirty: str | None) -> dict:
    tree = tree_hash(root)
    if env_commit:
        commit, dirty = env_commit, env_dirty == "1"
    else:
        commit = git_output(root, "rev-parse", "HEAD") or ""
        status = git_output(root, "status", "--porcelain", "--untracked-files=no")
        head_tree = git_output(root, "rev-parse", "--verify", "-q", "HEAD^{tree}")
        # dirty: tracked files modified, or (by the tree) untracked files not ignored
        dirty = status is None or bool(status) or (tree is not None and tree != head_tree)
    return {"commit": commit.lower() if re.fullmatch(r"[0-9a-fA-F]{7,40}", commit) else
            "0000000", "dirty": dirty, "tree": tree}
