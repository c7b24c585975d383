"""Making leaderboard records: statistics, the environment they were measured in, content hashes."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from importlib import metadata
from pathlib import Path

from ..verify.engine import default_golden_root
from .schema import SCHEMA

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("numpy", "numba", "torch", "triton", "pyarrow", "ml_dtypes", "torchao",
            "transformers", "pytest-benchmark")


def canonical(obj) -> bytes:
    """The bytes a record's hash is taken over: sorted keys, no whitespace, UTF-8, and every
    float written by repr (shortest round-trip), so a re-serialised record hashes the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def record_hash(record: dict) -> str:
    return hashlib.sha256(canonical({k: v for k, v in record.items()
                                     if k != "record_sha256"})).hexdigest()


def seal(record: dict) -> dict:
    record["record_sha256"] = record_hash(record)
    return record


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stats(repeats) -> dict:
    """Median and relative spread ((max - min) / median) of per-repeat medians."""
    xs = [float(x) for x in repeats]
    if not xs or any(not (x > 0) for x in xs):
        raise ValueError(f"repeats must be positive numbers, got {repeats!r}")
    med = statistics.median(xs)
    return {"median": med, "repeats": xs, "spread": (max(xs) - min(xs)) / med}


def block_sizes(n: int, blocks: int) -> list[int]:
    """The sizes of `blocks` contiguous, near-equal blocks of `n` samples: min(blocks, n) blocks
    whose sizes differ by at most one, the larger ones first (n = 11, blocks = 3: [4, 4, 3])."""
    if n < 1 or blocks < 1:
        raise ValueError(f"need at least one sample and one block, got n={n}, blocks={blocks}")
    b = min(blocks, n)
    q, r = divmod(n, b)
    return [q + 1] * r + [q] * (b - r)


def medians_of_blocks(samples, sizes) -> list[float]:
    """The median of each block of `samples` (in their order) cut into blocks of `sizes`."""
    xs = [float(x) for x in samples]
    if sum(sizes) != len(xs) or any(s < 1 for s in sizes):
        raise ValueError(f"block sizes {list(sizes)} do not partition {len(xs)} samples")
    out, i = [], 0
    for s in sizes:
        out.append(statistics.median(xs[i:i + s]))
        i += s
    return out


def block_medians(samples, blocks: int) -> list[float]:
    """Repeats from single samples: `samples` (in time order) cut into `block_sizes` blocks,
    and each block's median. A few outlier samples move a block median only when they are half
    of its block, so the spread of these medians is not decided by them."""
    return medians_of_blocks(samples, block_sizes(len(samples), blocks))


def blocked(runs, blocks: int) -> dict:
    """The repeats of a measure made of single samples: each of `runs` (the samples of one
    process, or of one run, in time order) cut into `blocks` blocks (`block_sizes`), in run
    order. Returns ``samples`` (every sample, in run order), ``blocks`` (the block sizes, so a
    reader recomputes the repeats with `medians_of_blocks`), ``repeats`` (the block medians) and
    ``samples_per_repeat`` (the nominal block size: samples // repeats)."""
    samples, sizes = [], []
    for run in runs:
        samples += [float(x) for x in run]
        sizes += block_sizes(len(run), blocks)
    repeats = medians_of_blocks(samples, sizes)
    return {"samples": samples, "blocks": sizes, "repeats": repeats,
            "samples_per_repeat": len(samples) // len(repeats)}


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
    from .. import __version__
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


def golden_state(root=None) -> dict:
    root = Path(root) if root else default_golden_root()
    man = root / "MANIFEST.json"
    doc = json.loads(man.read_text())
    return {"suite": doc["suite"], "suite_version": doc["suite_version"],
            "manifest_sha256": file_sha256(man)}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def make_record(*, suite, entry, group, impl, op, fmt, profile, params, metric, command,
                verify, roofline=None, peers=(), quality=None, check=None, accelerator=None,
                env=None) -> dict:
    """Assemble and seal one record. `metric` holds name, unit, lower_is_better, repeats and
    optionally samples_per_repeat, samples and blocks (`blocked`) and either rate / rate_unit or
    ``work`` (units per call: the rate is work / median). Its median and spread are computed here, and so is the roofline's
    ratio from its ``basis`` ('rate': metric.rate / roofline.rate; 'time': median / median).
    `env` (machine/packages/git/golden/created) is taken once per run and shared by its records."""
    env = env or run_env(accelerator)
    m = dict(metric)
    m.update(stats(m["repeats"]))
    work = m.pop("work", None)
    if work is not None:
        m["rate"] = work / m["median"]
    if roofline is not None and "basis" in roofline:     # without a basis: the caller's ratio
        roofline = dict(roofline)
        roofline["ratio"] = (m["rate"] / roofline["rate"] if roofline["basis"] == "rate"
                             else m["median"] / roofline["median"])
    rec = {"schema": SCHEMA, "suite": suite, "entry": entry, "group": group, "impl": impl,
           "op": op, "format": fmt, "profile": profile, "params": dict(params), "metric": m,
           "roofline": roofline, "peers": list(peers), "quality": quality, "check": check,
           **env, "command": [str(c) for c in command], "verify": dict(verify)}
    return seal(rec)


def run_env(accelerator=None, golden_root=None) -> dict:
    return {"machine": machine(accelerator), "packages": packages(), "git": git_state(),
            "golden": golden_state(golden_root), "created": now()}
