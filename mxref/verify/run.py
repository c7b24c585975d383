"""`mxref verify` as a library call: select, run, compare, apply expectations, summarize.

One loop: the selected files (``select.py``) are opened, each through its op's check
(``checks/<family>.py``, found through :mod:`mxref.ops`), the results (``compare.py``) are
summed into one report.

:func:`verify` returns a :class:`VerifyReport` whose ``to_json()`` is the ``mxref-verify/1``
document and whose ``exit_code`` is what the CLI exits with:

0 every selected case bit-exact (xfails allowed, and cases relaxed under a relaxation the
backend claims: status ``relaxed``, counted in ``relaxed_cases``); 1 mismatches, backend errors, or XPASS under
``strict_xpass``; 3 golden integrity; 4 backend unavailable or nothing it could run; 5 nothing
selected. (2, usage, is the CLI's.)
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..backends.base import BackendUnavailable
from ..golden.store import column_numpy
from ..ops import FAMILIES, PROFILE_FREE_OPS, family_ops
from ..profiles import PROFILES
from ..provenance import git_state
from .compare import (ERROR, MISMATCH, PASS, RELAXED, SKIPPED, XFAIL, FileResult,
                      claimed_relaxations, NoRelaxations, refuse_relaxations)
from .select import (GoldenFile, default_golden_root, open_checked, plan_files, select_files,
                     shard_of)

SCHEMA = "mxref-verify/1"
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTEGRITY, EXIT_UNAVAILABLE, EXIT_EMPTY = 0, 1, 2, 3, 4, 5


@dataclass
class VerifyReport:
    doc: dict
    exit_code: int
    # (relpath, class) -> {"status": ..., "cases": n, "mismatched": n, "record"|"reason": ...}
    cases_by_test: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return self.doc


def _env() -> dict:
    env = {"python": platform.python_version(), "numpy": np.__version__,
           "platform": platform.platform(), "machine": platform.machine()}
    if "torch" in sys.modules:
        env["torch"] = sys.modules["torch"].__version__
    if "triton" in sys.modules:
        env["triton"] = getattr(sys.modules["triton"], "__version__", "?")
    env.update(_git())
    return env


@functools.lru_cache(maxsize=1)
def _git() -> dict:
    """The commit verified (the leaderboard binds a record to the verify run of its build)."""
    g = git_state()
    return {"commit": g["commit"], "dirty": g["dirty"]}


def _describe(backend) -> dict:
    try:
        d = dict(backend.describe()) if hasattr(backend, "describe") else {}
    except Exception as e:  # noqa: BLE001 - describing must not sink the run
        d = {"describe_error": f"{type(e).__name__}: {e}"}
    d.setdefault("name", getattr(backend, "name", "?"))
    d.setdefault("version", str(getattr(backend, "version", "?")))
    d.setdefault("device", str(getattr(backend, "device", "?")))
    d["ops"] = sorted(getattr(backend, "ops", ()))
    d["profiles_claimed"] = list(getattr(backend, "profiles", ()))
    d["relaxations_claimed"] = sorted(claimed_relaxations(backend))
    if isinstance(backend, NoRelaxations):      # --no-relax: the claim is recorded, not honoured
        d["relaxations_refused"] = sorted(claimed_relaxations(backend.inner))
    return d


def check_backend(backend) -> None:
    """Raise BackendUnavailable when the backend says it cannot run here."""
    chk = getattr(backend, "check_available", None)
    if chk is None:
        return
    try:
        chk()
    except BackendUnavailable:
        raise
    except Exception as e:  # noqa: BLE001
        raise BackendUnavailable(f"check_available raised {type(e).__name__}: {e}") from None


# ---- one golden file --------------------------------------------------------------------------
def _runners() -> dict:
    """op -> runner, from each family's checks module (``verify/checks/<family>.py``)."""
    table = {}
    for family in FAMILIES:
        mod = importlib.import_module(f"{__package__}.checks.{family}")
        if set(mod.RUNNERS) != set(family_ops(family)):
            raise RuntimeError(f"{mod.__name__}.RUNNERS covers {sorted(mod.RUNNERS)}, but "
                               f"mxref.ops lists {sorted(family_ops(family))} for {family!r}")
        table.update(mod.RUNNERS)
    return table


_RUNNERS = _runners()


def run_file(backend, table, gf: GoldenFile, *, profile: str, classes=None) -> FileResult:
    """Run one golden file through the backend as `profile` and compare every field."""
    cls = column_numpy(table, "class")
    n = len(cls)
    sel = np.ones(n, bool) if not classes else np.isin(cls, list(classes))
    res = FileResult(gf=gf, classes=cls, case_ids=column_numpy(table, "case_id"),
                     status=np.zeros(n, np.int8), selected=sel)
    rows = np.nonzero(sel)[0]
    if not len(rows):
        return res
    if gf.op not in getattr(backend, "ops", ()):
        res.status[rows] = SKIPPED
        for r in rows:
            res.reasons[int(r)] = f"backend does not implement op {gf.op}"
        return res
    _RUNNERS[gf.op](backend, table, res, rows, profile)
    answered = res.answered if res.answered is not None else np.zeros(n, bool)
    for r in np.nonzero(sel & ~answered & (res.status == PASS))[0]:
        res.status[r] = ERROR
        res.reasons[int(r)] = "no backend result covered this case (it is never counted as passed)"
    return res


class _Run:
    """Accumulates file results into summary counters and capped mismatch records."""

    def __init__(self, max_errors: int, expectations):
        self.max_errors = max_errors
        self.expectations = expectations or []
        self.exp_state = {d.index: {"matched": 0, "mismatched": 0} for d in self.expectations}
        self.files, self.records, self.errors = [], [], []
        self.by_class, self.by_field, self.by_check = {}, {}, {}
        self.totals = dict(cases=0, elements=0, passed_cases=0, mismatched_cases=0,
                           error_cases=0, mismatched_elements=0, xfail=0, skipped_unsupported=0,
                           relaxed_cases=0)
        self.tests = {}
        self.truncated = False

    def _apply_expectations(self, res: FileResult):
        for d in self.expectations:
            if not d.matches_file(res.gf):
                continue
            hit = res.selected & np.isin(res.status, (PASS, MISMATCH))
            if d.classes:
                hit &= np.isin(res.classes, list(d.classes))
            if d.case_id is not None:
                hit &= res.case_ids == np.uint64(d.case_id)
            bad = hit & (res.status == MISMATCH)
            if d.field is not None:
                bad &= res.field_rows.get(d.field, np.zeros_like(bad))
            st = self.exp_state[d.index]
            st["matched"] += int(hit.sum())
            st["mismatched"] += int(bad.sum())
            for r in np.nonzero(bad)[0]:
                res.status[r] = XFAIL
                res.expectation_of.setdefault(int(r), d.index)

    def _record(self, res: FileResult, table, row, fld, n, build):
        gf = res.gf
        rec = {"file": gf.relpath, "op": gf.op, "format": gf.fmt, "profile": gf.profile,
               "src_dtype": gf.src_dtype, "case_id": f"0x{int(res.case_ids[row]):016x}",
               "row": int(row), "class": str(res.classes[row]),
               "tags": list(table.column("tags")[row].as_py() or []) if "tags" in table.column_names else [],
               "field": fld, "mismatched_in_case": n}
        if build is not None:
            rec.update(build())
        rec["expectation"] = None
        return rec

    def add(self, res: FileResult, table, profile_asked: str):
        self._apply_expectations(res)
        gf = res.gf
        sel = res.selected
        st = res.status
        counts = res.counts
        t = self.totals
        t["cases"] += int(sel.sum())
        t["elements"] += res.elements
        t["passed_cases"] += counts["pass"]
        t["mismatched_cases"] += counts["mismatch"]
        t["error_cases"] += counts["error"]
        t["xfail"] += counts["xfail"]
        t["skipped_unsupported"] += counts["skipped"]
        t["relaxed_cases"] += counts["relaxed"]
        for fld, fr in res.field_rows.items():
            n_el = res.field_elems.get(fld, 0)
            if n_el:
                self.by_field[fld] = self.by_field.get(fld, 0) + n_el
                t["mismatched_elements"] += n_el
        uniq, inv = np.unique(res.classes, return_inverse=True)
        per = {code: np.bincount(inv[sel], weights=(st[sel] == code), minlength=len(uniq)).astype(int)
               for code in (PASS, MISMATCH, ERROR, SKIPPED, XFAIL, RELAXED)}
        n_cls = np.bincount(inv[sel], minlength=len(uniq))
        for k, cls in enumerate(uniq):
            if not n_cls[k]:
                continue
            c = self.by_class.setdefault(str(cls), dict(cases=0, mismatched=0, errors=0,
                                                        skipped=0, xfail=0, relaxed=0))
            c["cases"] += int(n_cls[k])
            c["mismatched"] += int(per[MISMATCH][k])
            c["errors"] += int(per[ERROR][k])
            c["skipped"] += int(per[SKIPPED][k])
            c["xfail"] += int(per[XFAIL][k])
            c["relaxed"] += int(per[RELAXED][k])
        status = ("error" if counts["error"] else "fail" if counts["mismatch"] else
                  "skipped" if counts["skipped"] == int(sel.sum()) else
                  "relaxed" if counts["relaxed"] else "pass")
        self.files.append({"path": gf.relpath, "op": gf.op, "format": gf.fmt,
                           "profile": gf.profile, "run_as": profile_asked,
                           "src_dtype": gf.src_dtype, "level": gf.level, "status": status,
                           "check": res.check_mode, "cases": int(sel.sum()),
                           **{k: v for k, v in counts.items()},
                           **({"ulp": res.ulp} if res.ulp else {}),
                           **({"notes": res.notes} if res.notes else {})})
        bc = self.by_check.setdefault(res.check_mode, dict(cases=0, passed=0, failed=0,
                                                          skipped=0, xfail=0, relaxed=0))
        bc["cases"] += int(sel.sum())
        bc["passed"] += counts["pass"]
        bc["failed"] += counts["mismatch"] + counts["error"]
        bc["skipped"] += counts["skipped"]
        bc["xfail"] += counts["xfail"]
        bc["relaxed"] += counts["relaxed"]
        if res.ulp:
            u = bc.setdefault("ulp", {"max_ulp": 0.0, "hist": {}})
            u["max_ulp"] = max(u["max_ulp"], res.ulp["max_ulp"])
            for k, v in res.ulp["hist"].items():
                u["hist"][k] = u["hist"].get(k, 0) + v
        # errors, grouped by reason
        by_reason = {}
        for r, why in res.reasons.items():
            if st[r] == ERROR:
                by_reason.setdefault(why, []).append(r)
        for why, rows in by_reason.items():
            self.errors.append({"file": gf.relpath, "reason": why, "cases": len(rows),
                                "classes": sorted({str(res.classes[r]) for r in rows}),
                                "first_case_id": f"0x{int(res.case_ids[rows[0]]):016x}"})
        # one test per (file, class), as the pytest suite and JUnit see them
        first, first_of = {}, {}
        details = sorted(res.details, key=lambda d: (d[0], d[1]))
        for k, (row, fld, n, build) in enumerate(details):
            if st[row] != MISMATCH:
                continue
            cls = str(res.classes[row])
            if cls not in first:
                first[cls], first_of[cls] = self._record(res, table, row, fld, n, build), k
            if self.max_errors == 0 or len(self.records) < self.max_errors:
                # (one row may hold two details of a field: quantize_mx_tensor's two axes)
                self.records.append(first[cls] if first_of[cls] == k else
                                    self._record(res, table, row, fld, n, build))
            else:
                self.truncated = True
        for k, cls in enumerate(uniq):
            if not n_cls[k]:
                continue
            key = (gf.relpath, str(cls))
            entry = {"op": gf.op, "format": gf.fmt, "profile": gf.profile,
                     "src_dtype": gf.src_dtype, "level": gf.level, "class": str(cls),
                     "cases": int(n_cls[k]), "mismatched": int(per[MISMATCH][k]),
                     "errors": int(per[ERROR][k]), "xfail": int(per[XFAIL][k]),
                     "skipped": int(per[SKIPPED][k]), "relaxed": int(per[RELAXED][k])}
            if entry["errors"] or entry["skipped"] == entry["cases"] or entry["xfail"]:
                m = sel & (inv == k)
            if entry["errors"]:
                entry["status"] = "error"
                rows = np.nonzero(m & (st == ERROR))[0]
                entry["reason"] = res.reasons.get(int(rows[0]), "error")
            elif entry["mismatched"]:
                entry["status"] = "fail"
                entry["record"] = first.get(str(cls))
            elif entry["skipped"] == entry["cases"]:
                entry["status"] = "skipped"
                rows = np.nonzero(m)[0]
                entry["reason"] = res.reasons.get(int(rows[0]), "skipped")
            elif entry["xfail"]:
                entry["status"] = "xfail"
                d = self.expectations[res.expectation_of[int(np.nonzero(m & (st == XFAIL))[0][0])]]
                entry["reason"] = f"{d.reason} ({d.link})"
            else:
                entry["status"] = "pass"
            self.tests[key] = entry


def _outcome(t: dict, xpass: list, strict_xpass: bool) -> tuple[int, str]:
    ran = t["cases"] - t["skipped_unsupported"]
    if t["cases"] == 0:
        return EXIT_EMPTY, "empty"
    if ran == 0:
        return EXIT_UNAVAILABLE, "unsupported"
    if t["mismatched_cases"] or t["error_cases"]:
        return EXIT_FAIL, "fail"
    if xpass and strict_xpass:
        return EXIT_FAIL, "xpass"
    # relaxed cases exist only where the backend claims the relaxation: exit 0, but never "pass"
    return EXIT_OK, "relaxed" if t.get("relaxed_cases") else "pass"


def merge_reports(docs: list, *, max_errors: int, strict_xpass: bool = False,
                  file_order=None) -> dict:
    """One ``mxref-verify/1`` document from the reports of the shards of one selection (see
    `shard_of`): counters summed, files in `file_order` (relpaths; manifest order), mismatch
    records capped at `max_errors` as one run caps them, expectations' states and the status
    recomputed from the summed counts. The header (golden, backend, env, selection) is the
    first shard's; ``parallel`` says how many shards there were."""
    if not docs:
        raise ValueError("no shard reports to merge")
    first = docs[0]
    keys = ("cases", "elements", "passed_cases", "mismatched_cases", "error_cases",
            "mismatched_elements", "xfail", "skipped_unsupported", "relaxed_cases")
    t = {k: sum(int(d["summary"][k]) for d in docs) for k in keys}
    by_class: dict = {}
    by_field: dict = {}
    by_check: dict = {}
    for d in docs:
        s = d["summary"]
        for cls, c in s["by_class"].items():
            acc = by_class.setdefault(cls, {k: 0 for k in c})
            for k, v in c.items():
                acc[k] = acc.get(k, 0) + v
        for fld, n in s["by_field"].items():
            by_field[fld] = by_field.get(fld, 0) + n
        for mode, c in s["by_check"].items():
            acc = by_check.setdefault(mode, {k: 0 for k in c if k != "ulp"})
            for k, v in c.items():
                if k == "ulp":
                    u = acc.setdefault("ulp", {"max_ulp": 0.0, "hist": {}})
                    u["max_ulp"] = max(u["max_ulp"], v["max_ulp"])
                    for h, n in v["hist"].items():
                        u["hist"][h] = u["hist"].get(h, 0) + n
                else:
                    acc[k] = acc.get(k, 0) + v
    rank = {r: i for i, r in enumerate(file_order or ())}
    files = sorted((f for d in docs for f in d["files"]),
                   key=lambda f: rank.get(f["path"], len(rank)))
    pos = {f["path"]: i for i, f in enumerate(files)}
    records = sorted((r for d in docs for r in d["mismatches"]),
                     key=lambda r: (pos.get(r["file"], len(pos)), r["row"]))
    truncated = any(d.get("truncated") for d in docs)
    if max_errors and len(records) > max_errors:
        records, truncated = records[:max_errors], True
    errors = sorted((e for d in docs for e in d["errors"]),
                    key=lambda e: pos.get(e["file"], len(pos)))[:max(max_errors, 1) * 5]
    exps = []
    for i, e in enumerate(first["expectations"]):
        m = sum(d["expectations"][i]["matched"] for d in docs)
        mm = sum(d["expectations"][i]["mismatched"] for d in docs)
        exps.append({"expectation": e["expectation"], "matched": m, "mismatched": mm,
                     "state": "xpass" if m and not mm else "xfail" if mm else "unmatched"})
    xpass = [{"expectation": e["expectation"], "matched": e["matched"],
              "mismatched": e["mismatched"]} for e in exps if e["state"] == "xpass"]
    code, status = _outcome(t, xpass, strict_xpass)
    notes = list(dict.fromkeys(n for d in docs for n in d["notes"]))
    summary = {**t, "xpass": len(xpass), "files": sum(int(d["summary"]["files"]) for d in docs),
               "by_class": dict(sorted(by_class.items())),
               "by_field": dict(sorted(by_field.items())),
               "by_check": dict(sorted(by_check.items()))}
    head = {k: first[k] for k in ("schema", "mxref_version", "golden", "backend", "env",
                                  "selection")}
    return {**head, "parallel": {"shards": len(docs)}, "status": status, "exit_code": code,
            "summary": summary, "files": files, "truncated": truncated,
            "max_errors": max_errors, "mismatches": records, "errors": errors,
            "expectations": exps, "xpass": xpass, "notes": notes}


def verify(backend, *, root=None, levels=(1,), ops=None, profiles=None, formats=None,
           src_dtypes=None, classes=None, suite=None, max_errors=20, expectations=None,
           strict_xpass=False, progress=None, run_as=None, dump=None, only=None,
           shard=None, no_relax=False) -> VerifyReport:
    """Run `backend` over the selected golden files.

    no_relax: ignore the relaxations the backend claims (``verify --no-relax``): every
    difference is a mismatch, bit-exact or nothing.
    run_as: ask the backend for this profile on every file instead of the file's own profile
    (used by detect_profile; files are still compared with their own expected bits).
    only: a set of golden relpaths to restrict to (the pytest plugin runs one file at a time).
    shard: (k, n), 0-based: run only `shard_of(files, k, n)` of the planned files.
    dump: a list that receives (relpath, table, mismatched rows, actual columns) per file with
    unexpected mismatches (for --dump-mismatches).
    Raises GoldenIntegrityError (exit 3) and BackendUnavailable (exit 4); selection errors
    raise SelectionError (usage, exit 2).
    """
    root = Path(root) if root else default_golden_root()
    backend = refuse_relaxations(backend, no_relax)
    check_backend(backend)
    doc, files = select_files(root, levels=levels, ops=ops, profiles=profiles, formats=formats,
                              src_dtypes=src_dtypes, classes=classes, suite=suite)
    header = {"schema": SCHEMA, "mxref_version": __version__,
              "golden": {"root": str(root), "suite": doc.get("suite"),
                         "suite_version": doc.get("suite_version"),
                         "format_version": doc.get("format_version"),
                         "manifest_sha256": hashlib.sha256(
                             (root / "MANIFEST.json").read_bytes()).hexdigest(),
                         "levels": list(levels)},
              "backend": _describe(backend), "env": _env(),
              "selection": {"ops": list(ops or []), "profiles": list(profiles or []),
                            "formats": list(formats or []), "src_dtypes": list(src_dtypes or []),
                            "classes": list(classes or [])}}
    files, notes = plan_files(backend, files, ops=ops, profiles=profiles, run_as=run_as,
                              name=header["backend"]["name"],
                              claimed_names=header["backend"]["profiles_claimed"])
    if only is not None:
        files = [f for f in files if f.relpath in only]
    if shard is not None:
        files = shard_of(files, *shard)
    run = _Run(max_errors, expectations)
    for i, gf in enumerate(files):
        table = open_checked(root, gf)
        prof = run_as or gf.profile
        res = run_file(backend, table, gf, profile=prof, classes=classes)
        run.add(res, table, prof)
        if dump is not None:
            bad = np.nonzero(res.status == MISMATCH)[0]
            if len(bad) and res.actual:
                dump.append((gf.relpath, table, bad, {k: v[bad] for k, v in res.actual.items()}))
        if progress:
            progress(gf, i + 1, len(files))
    t = run.totals
    xpass = [{"expectation": d.to_json(), **run.exp_state[d.index]} for d in run.expectations
             if run.exp_state[d.index]["matched"] and not run.exp_state[d.index]["mismatched"]]
    code, status = _outcome(t, xpass, strict_xpass)
    summary = {**t, "xpass": len(xpass), "files": len(files),
               "by_class": dict(sorted(run.by_class.items())),
               "by_field": dict(sorted(run.by_field.items())),
               "by_check": dict(sorted(run.by_check.items()))}
    out = {**header, "status": status, "exit_code": code, "summary": summary,
           "files": run.files, "truncated": run.truncated, "max_errors": max_errors,
           "mismatches": run.records, "errors": run.errors[:max(max_errors, 1) * 5],
           "expectations": [{"expectation": d.to_json(), **run.exp_state[d.index],
                             "state": ("xpass" if run.exp_state[d.index]["matched"] and not
                                       run.exp_state[d.index]["mismatched"] else "xfail"
                                       if run.exp_state[d.index]["mismatched"] else "unmatched")}
                            for d in run.expectations],
           "xpass": xpass, "notes": notes}
    return VerifyReport(out, code, run.tests)


def detect_profile(backend, *, root=None, levels=(1,), ops=None, formats=None, src_dtypes=None,
                   classes=None, native=None, progress=None) -> dict:
    """Run the backend in its own behaviour against every named profile's goldens.

    Returns {"native": ..., "profiles": [{profile, cases, mismatched, errors, skipped, match,
    differing_classes}], "matches": [...], "nearest": {...} | None}.
    """
    native = native or getattr(backend, "native_profile", None) or \
        (backend.profiles[0] if getattr(backend, "profiles", ()) and backend.profiles[0] != "*" else "ocp")
    cached = _CachingBackend(backend)
    rows = []
    for p in PROFILES:
        rep = verify(cached, root=root, levels=levels, ops=[o for o in (ops or cached.ops)
                                                            if o not in PROFILE_FREE_OPS],
                     profiles=[p], formats=formats, src_dtypes=src_dtypes, classes=classes,
                     max_errors=1, run_as=native, progress=progress)
        s = rep.doc["summary"]
        ran = s["cases"] - s["skipped_unsupported"]
        diff = {c: v["mismatched"] + v["errors"] for c, v in s["by_class"].items()
                if v["mismatched"] + v["errors"]}
        rows.append({"profile": p, "files": s["files"], "cases": s["cases"], "ran": ran,
                     "mismatched": s["mismatched_cases"], "errors": s["error_cases"],
                     "skipped": s["skipped_unsupported"], "relaxed": s["relaxed_cases"],
                     "formats": sorted({f["format"] for f in rep.doc["files"]
                                        if f["cases"] > f["skipped"]}),
                     "match": ran > 0 and not s["mismatched_cases"] and not s["error_cases"]
                     and not s["relaxed_cases"],          # a match is bit for bit
                     "differing_classes": dict(sorted(diff.items())),
                     "example": (rep.doc["mismatches"] or [None])[0]})
    matches = [r["profile"] for r in rows if r["match"]]
    others = [r for r in rows if not r["match"] and r["ran"]]
    nearest = min(others, key=lambda r: ((r["mismatched"] + r["errors"]) / r["ran"], -r["ran"]),
                  default=None)
    return {"schema": "mxref-detect-profile/1", "backend": _describe(backend), "native": native,
            "levels": list(levels), "profiles": rows, "matches": matches,
            "nearest": None if nearest is None else nearest["profile"]}


class _CachingBackend:
    """Memoizes backend calls by (method, arguments, input bytes): every profile's files hold
    the same inputs, so detect_profile computes each once."""

    def __init__(self, inner):
        self._inner = inner
        self._cache = {}
        for a in ("name", "version", "device", "ops", "profiles", "native_profile"):
            if hasattr(inner, a):
                setattr(self, a, getattr(inner, a))

    def describe(self):
        return self._inner.describe() if hasattr(self._inner, "describe") else {}

    def check_available(self):
        return check_backend(self._inner)

    def __getattr__(self, name):
        fn = getattr(self._inner, name)
        if not callable(fn):
            return fn

        def wrapped(*args, **kw):
            h = hashlib.sha1(name.encode())
            for a in args:
                h.update(np.ascontiguousarray(a).tobytes() + repr(np.shape(a)).encode()
                         if isinstance(a, np.ndarray) else repr(a).encode())
            h.update(repr(sorted(kw.items())).encode())
            key = h.hexdigest()
            if key not in self._cache:
                try:
                    self._cache[key] = ("ok", fn(*args, **kw))
                except Exception as e:  # noqa: BLE001 - replayed identically for every profile
                    self._cache[key] = ("raise", e)
            kind, val = self._cache[key]
            if kind == "raise":
                raise val
            return val
        return wrapped
