"""The run-to-run floor: how far the median of an unchanged entry moves between separate jobs on
the same GPU model (or CPU machine), measured, and stored beside the records.

A record's ``metric.spread`` is the range of its repeats. With ``run gpu --processes P`` the
repeats come from P separate processes of one job, so the spread covers what changes from one
process to the next (allocation, code placement, JIT state). What it cannot see is what changes
from one job to the next: the physical GPU lent, its clocks and temperature when the job starts,
the host. That is measured here, from two or more complete runs of the same suite at the same
commit and tree, made in separate jobs:

    floor(suite, machine) = the `quantile` (default 0.9) of  max over run pairs |m_i / m_j - 1|
                            over the entries the runs share, rounded up to 0.01 %

``reproduce`` and ``gate`` then hold an entry to ``max(recorded spread, floor)``. An entry
noisier than the floor shows it in its own spread (the quantile leaves those out of the floor
rather than loosening every entry to the noisiest one). The file keeps every entry's medians,
so the choice can be checked and redone.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import MXRefError
from .record import now
from .submit import record_files

SCHEMA = "mxref-run-to-run/1"
FILE_NAME = "run_to_run.json"


class FloorError(MXRefError):
    """The runs cannot give a floor (unreadable, too few, different code, nothing shared)."""


def _runs(dirs) -> list[dict]:
    runs = []
    for d in dirs:
        recs = {}
        for p in record_files([d]):
            try:
                r = json.loads(p.read_text())
                k = (r["suite"], r["machine"]["slug"], r["entry"])
                r["metric"]["median"], r["git"]["commit"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise FloorError(f"{p} is not a leaderboard record: {e!r}") from None
            recs[k] = r
        if not recs:
            raise FloorError(f"{d} holds no records")
        runs.append({"dir": str(d), "records": recs})
    return runs


def _quantile(xs: list[float], q: float) -> float:
    """The nearest-rank quantile (the smallest x with at least q of the values <= x)."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def measure(dirs, *, quantile: float = 0.9) -> dict:
    """The floor document from the runs in `dirs` (each a `leaderboard run` output or a store
    of one run), grouped by suite and machine. Each run of a group must be at one commit and
    tree, the same for all runs, and not dirty (the floor is about unchanged code)."""
    if not 0 < quantile <= 1:
        raise FloorError(f"quantile {quantile} is not in (0, 1]")
    runs = _runs(dirs)
    if len(runs) < 2:
        raise FloorError("a run-to-run floor needs at least two runs made in separate jobs")
    groups = sorted({k[:2] for r in runs for k in r["records"]})
    floors = []
    for suite, machine in groups:
        members = [r for r in runs if any(k[:2] == (suite, machine) for k in r["records"])]
        if len(members) < 2:
            continue
        code = set()
        for r in members:
            for k, rec in r["records"].items():
                if k[:2] == (suite, machine):
                    g = rec["git"]
                    if g.get("dirty"):
                        raise FloorError(f"{r['dir']}: {rec['entry']} was made from a dirty "
                                         "tree; the floor needs unchanged, committed code")
                    code.add((g["commit"], g.get("tree")))
        if len(code) != 1:
            raise FloorError(f"{suite} on {machine}: the runs are at different commits or trees "
                             f"({sorted(c[0][:12] for c in code)}); the floor needs the same code")
        entries = sorted(set.intersection(*[{k[2] for k in r["records"]
                                             if k[:2] == (suite, machine)} for r in members]))
        if not entries:
            raise FloorError(f"{suite} on {machine}: the runs share no entry")
        rows = []
        for e in entries:
            recs = [r["records"][(suite, machine, e)] for r in members]
            meds = [x["metric"]["median"] for x in recs]
            diff = max(abs(a / b - 1.0) for a in meds for b in meds)
            rows.append({"entry": e, "medians": meds,
                         "spreads": [x["metric"]["spread"] for x in recs],
                         "created": [x["created"] for x in recs], "max_diff": diff})
        diffs = [x["max_diff"] for x in rows]
        # up to 0.01 % (ignoring the last bits of the division: 1.006 / 1 - 1 > 0.006)
        floor = math.ceil(_quantile(diffs, quantile) * 1e4 - 1e-6) / 1e4
        floors.append({"suite": suite, "machine": machine, "floor": floor,
                       "quantile": quantile, "entries": len(rows), "runs": len(members),
                       "max_diff": max(diffs), "median_diff": _quantile(diffs, 0.5),
                       "commit": next(iter(code))[0], "tree": next(iter(code))[1],
                       "run_dirs": [r["dir"] for r in members], "rows": rows})
    if not floors:
        raise FloorError("no suite and machine appears in two runs")
    return {"schema": SCHEMA, "created": now(), "floors": floors}


def merge(old: dict | None, new: dict) -> dict:
    """`new`'s floors replace `old`'s of the same suite and machine; the others stay."""
    keep = [f for f in (old or {}).get("floors", [])
            if (f["suite"], f["machine"]) not in {(g["suite"], g["machine"])
                                                  for g in new["floors"]}]
    return {**new, "floors": sorted(keep + new["floors"],
                                    key=lambda f: (f["suite"], f["machine"]))}


def load(path) -> dict:
    """{(suite, machine): floor} from a floor file; {} when `path` is None or absent;
    FloorError when it exists and is not one."""
    if path is None or not Path(path).is_file():
        return {}
    try:
        doc = json.loads(Path(path).read_text())
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, expected {SCHEMA!r}")
        out = {}
        for f in doc["floors"]:
            v = float(f["floor"])
            if not 0 <= v < 1:
                raise ValueError(f"floor {v} of {f['suite']}/{f['machine']} is not in [0, 1)")
            out[(f["suite"], f["machine"])] = v
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FloorError(f"{path} is not a run-to-run floor file: {e}") from None


def floor_of(floors: dict, rec: dict) -> float:
    return floors.get((rec["suite"], rec["machine"]["slug"]), 0.0)
