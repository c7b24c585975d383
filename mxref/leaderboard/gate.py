"""The regression gate: a new record against the stored baseline of the same entry, machine
(GPU model) and golden suite version. A median worse by more than the measured run-to-run spread
(the larger of the two records' spreads and the store's run-to-run floor of that suite and
machine, floor.py) fails; anything else passes or has no baseline."""
from __future__ import annotations

import json
from pathlib import Path

from .submit import record_files


def key(rec: dict) -> tuple:
    acc = rec["machine"].get("accelerator") or {}
    return (rec["suite"], rec["entry"], rec["machine"]["slug"], acc.get("name"),
            rec["golden"]["suite_version"])


def load_baseline(store) -> dict:
    out = {}
    for p in record_files([store]):
        try:
            rec = json.loads(p.read_text())
            out[key(rec)] = (p, rec)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def compare(new: dict, base: dict, floor: float = 0.0) -> dict:
    """Signed relative change where positive is worse, and the tolerance it is held to: the
    larger of the two spreads and the measured run-to-run floor of the suite and machine."""
    m, b = new["metric"], base["metric"]
    if m["lower_is_better"]:
        change = m["median"] / b["median"] - 1.0
    else:
        change = 1.0 - m["median"] / b["median"]
    tol = max(m["spread"], b["spread"], floor)
    return {"entry": new["entry"], "machine": new["machine"]["slug"],
            "suite_version": new["golden"]["suite_version"],
            "new_median": m["median"], "base_median": b["median"], "unit": m["unit"],
            "change": change, "tolerance": tol, "floor": floor,
            "status": "regression" if change > tol else "ok",
            "base_commit": base["git"]["commit"], "new_commit": new["git"]["commit"]}


def gate(new_paths, store, floors=None) -> list[dict]:
    """`floors`: {(suite, machine): floor}; None reads the store's run_to_run.json."""
    from .floor import FILE_NAME, floor_of, load
    base = load_baseline(store)
    if floors is None:
        floors = load(Path(store) / FILE_NAME)
    rows = []
    for p in record_files(new_paths):
        try:
            rec = json.loads(Path(p).read_text())
            k = key(rec)
        except (OSError, ValueError, KeyError, TypeError) as e:
            rows.append({"entry": str(p), "status": "error", "reason": f"unreadable: {e}"})
            continue
        hit = base.get(k)
        if hit is None:
            rows.append({"entry": rec["entry"], "machine": rec["machine"]["slug"],
                         "suite_version": rec["golden"]["suite_version"],
                         "status": "no-baseline",
                         "reason": "no stored record of this entry on this machine and suite "
                                   "version"})
            continue
        rows.append(compare(rec, hit[1], floor_of(floors, rec)))
    return rows
