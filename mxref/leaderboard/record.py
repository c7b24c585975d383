"""Making leaderboard records: statistics, the environment they were measured in, content hashes."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
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


def git_state(root: Path = REPO) -> dict:
    """The commit (MXREF_COMMIT wins: a device machine's copy of .git can be stale) and whether
    tracked files differ from it."""
    env = os.environ.get("MXREF_COMMIT")
    try:
        commit = env or subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                       capture_output=True, text=True, timeout=20,
                                       check=False).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                     "--untracked-files=no"], capture_output=True, text=True,
                                    timeout=20, check=False).stdout.strip()) if not env else \
            os.environ.get("MXREF_DIRTY", "0") == "1"
    except (OSError, subprocess.SubprocessError):
        commit, dirty = env or "", True
    return {"commit": commit.lower() if re.fullmatch(r"[0-9a-fA-F]{7,40}", commit or "") else
            "0000000", "dirty": dirty}


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
    optionally samples_per_repeat and either rate / rate_unit or ``work`` (units per call: the
    rate is work / median). Its median and spread are computed here, and so is the roofline's
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
