"""Making leaderboard records: statistics, the environment they were measured in, content hashes."""
from __future__ import annotations

import hashlib
import json
import statistics
import time

from ..corpus import golden_root
from ..provenance import (GIT_TIMEOUT_S, PACKAGES, REPO, git_output, git_state,  # noqa: F401
                          machine, packages, slug, tree_hash)
from .schema import SCHEMA


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


def golden_state(root=None) -> dict:
    root = golden_root(root)
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
