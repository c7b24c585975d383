"""The verified-only rule: a record enters the store only if it is well-formed, untampered, and
backed by a passing verify of the same op / format / profile from the same run.

Checks (each failure is one reason in the rejection):

1. the JSON Schema (``schema.RECORD_SCHEMA``);
2. ``record_sha256`` is the hash of the record's canonical JSON (an edited field breaks it);
3. the metric is consistent: ``median`` is the median of ``repeats``, ``spread`` is their
   (max - min) / median, and the roofline ratio follows from the medians or rates; where the
   metric or the roofline carries ``samples`` and ``blocks``, each repeat is the median of its
   block of samples (and a roofline's median the median of its repeats);
4. the verify evidence exists beside the record, hashes to ``verify.sha256`` and passed:
   an ``mxref-verify/1`` report with status ``pass`` whose backend is the record's, whose golden
   manifest hash and suite version are the record's, and that ran at least one passing case of the
   record's op, format and profile (``in-run-validation``: a checks.jsonl with at least one check,
   every one ok);
5. the record's golden suite is the store's (the repository's golden/MANIFEST.json), and the
   build was a clean checkout (``git.dirty`` false) unless the caller allows dirty builds;
6. ``git.tree`` (the tree hash of the files the run had on disk) is the tree of ``git.commit``
   in the store's repository: a wrong commit (a stale ``.git`` on a device, a wrong
   MXREF_COMMIT) or files that differ from it while ``git.dirty`` says clean are caught here.
   A commit this repository does not hold cannot be checked and is rejected. A dirty record's
   tree is not compared (the dirty rule speaks for it). A record without a tree is rejected by
   the schema (``git.tree`` is required since 2026-11-22; the records made before trees were
   recorded were re-measured).
7. every path read or written stays inside the store (`inside`: relative, no ``..``, not
   absolute, no symlink out; ``verify.report`` included), and `accept` refuses a record that
   would overwrite another entry's file or collide with one in letter case (`collision`),
   writing nothing (StorePathError).

These checks catch edits, missing or foreign evidence and inconsistent numbers. They cannot stop a
forger who re-runs the hashing by hand; `mxref leaderboard reproduce` re-runs the recorded command,
which is the final word on a number.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import MXRefError
from .record import (
    REPO,
    file_sha256,
    git_output,
    golden_state,
    medians_of_blocks,
    record_hash,
    slug,
)
from .schema import SCHEMA, schema_problems

VERIFY_SCHEMA = "mxref-verify/1"
REL = 1e-9


class StorePathError(MXRefError):
    """A path a record names (its evidence report, or where it would be stored) escapes the
    store (absolute, ``..``, a symlink out) or collides with another record's file."""


def unsafe_rel(rel) -> str | None:
    """Why `rel` is not a plain relative path (None when it is): not a non-empty string,
    absolute (POSIX or Windows), a drive, a backslash, or a ``..`` part."""
    if not isinstance(rel, str) or not rel.strip():
        return f"{rel!r} is not a non-empty relative path"
    if "\\" in rel or "\0" in rel:
        return f"{rel!r} holds a backslash or NUL"
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or \
            PureWindowsPath(rel).drive:
        return f"{rel!r} is an absolute path"
    if ".." in rel.split("/"):
        return f"{rel!r} climbs out with '..'"
    return None


def inside(base, rel) -> Path:
    """`base`/`rel` resolved, refused (StorePathError naming the path) unless `rel` is a plain
    relative path (`unsafe_rel`) and the result, symlinks followed, lies inside `base`."""
    why = unsafe_rel(rel)
    if why:
        raise StorePathError(f"refused path {rel!r} under {base}: {why}")
    root = Path(base).resolve()
    p = (root / rel).resolve()
    if not p.is_relative_to(root):
        raise StorePathError(f"refused path {rel!r}: it resolves to {p}, outside {root} "
                             "(a symlink out?)")
    return p


@dataclass
class Verdict:
    path: str
    record: dict | None
    problems: list[str] = field(default_factory=list)
    evidence: Path | None = None
    warnings: list[str] = field(default_factory=list)     # accepted, but worth saying

    @property
    def ok(self) -> bool:
        return not self.problems


def _close(a, b, rel=REL) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-300)


def blocks_problems(obj: dict, where: str) -> list[str]:
    """Whether the ``samples`` and ``blocks`` of `obj` (a record's metric or roofline) give its
    ``repeats``: the block sizes partition the samples, and each repeat is the median of its
    block (`record.medians_of_blocks`); `where` names the field in the reasons. With them,
    ``samples_per_repeat`` must be the nominal block size, samples // repeats."""
    if "samples" not in obj:
        return []
    samples, sizes, reps = obj["samples"], obj["blocks"], obj["repeats"]
    if sum(sizes) != len(samples):
        return [f"{where}.blocks {sizes!r} sum to {sum(sizes)}, but {where}.samples holds "
                f"{len(samples)} samples"]
    if len(sizes) != len(reps):
        return [f"{where}.blocks has {len(sizes)} blocks, but {where}.repeats holds "
                f"{len(reps)} repeats"]
    want = medians_of_blocks(samples, sizes)
    bad = [i for i, (r, w) in enumerate(zip(reps, want)) if not _close(r, w)]
    out = [f"{where}.repeats[{i}] {reps[i]!r} is not the median of block {i} of "
           f"{where}.samples ({want[i]!r}, by {where}.blocks)" for i in bad[:3]]
    if len(bad) > 3:
        out.append(f"... and {len(bad) - 3} more of {where}.repeats")
    spr = obj.get("samples_per_repeat")
    if spr is not None and spr != len(samples) // len(reps):
        out.append(f"{where}.samples_per_repeat {spr!r} is not samples // repeats "
                   f"({len(samples) // len(reps)})")
    return out


def metric_problems(rec: dict) -> list[str]:
    m = rec["metric"]
    out = blocks_problems(m, "metric")
    reps = m["repeats"]
    med = statistics.median(reps)
    if not _close(m["median"], med):
        out.append(f"metric.median {m['median']!r} is not the median of metric.repeats ({med!r})")
    spread = (max(reps) - min(reps)) / med
    if not _close(m["spread"], spread, 1e-6) and not (m["spread"] == 0 == spread):
        out.append(f"metric.spread {m['spread']!r} is not (max - min) / median of the repeats "
                   f"({spread!r})")
    r = rec.get("roofline")
    if r:
        out += blocks_problems(r, "roofline")
        if "samples" in r and not _close(r["median"], statistics.median(r["repeats"])):
            out.append(f"roofline.median {r['median']!r} is not the median of roofline.repeats "
                       f"({statistics.median(r['repeats'])!r})")
        basis = r.get("basis", "rate")
        if basis == "rate":
            if not (m.get("rate") and r.get("rate")):
                out.append("roofline.basis 'rate' needs metric.rate and roofline.rate")
            elif not _close(r["ratio"], m["rate"] / r["rate"], 1e-6):
                out.append(f"roofline.ratio {r['ratio']!r} is not metric.rate / roofline.rate "
                           f"({m['rate'] / r['rate']!r})")
        elif basis == "time":
            if not _close(r["ratio"], m["median"] / r["median"], 1e-6):
                out.append(f"roofline.ratio {r['ratio']!r} is not metric.median / roofline.median"
                           f" ({m['median'] / r['median']!r})")
        else:
            out.append(f"roofline.basis {basis!r} is neither 'rate' nor 'time'")
    return out


def _find_evidence(record_path: Path, rel: str, roots=()) -> Path | None:
    """The evidence file `rel` (e.g. verify/<sha>.json) under the record's store root: the first
    ancestor of the record that holds it, or one of `roots`."""
    for base in list(roots) + list(record_path.resolve().parents):
        p = Path(base) / rel
        if p.is_file():
            return inside(base, rel)        # StorePathError where it resolves out of `base`
    return None


def _covers(report: dict, rec: dict, src_dtype: str | None = None
            ) -> tuple[int, list[str]]:
    """Passing cases of the record's op/format/profile in the report, and what is wrong.

    A file the backend skipped whole (a source dtype it does not take, status "skipped": no
    case ran, none passed) is neither: it is not counted and not a failure, except a skipped
    file of the workload's own source dtype ``src_dtype`` (the stacks suite times bf16 input),
    and at least one file of that source dtype must have passed. ``src_dtype`` None: every
    file counts, a skipped one as a failure (the other suites)."""
    cases, bad, src_ok = 0, [], src_dtype is None
    for f in report.get("files", []):
        if f.get("op") != rec["op"] or f.get("format") != rec["format"]:
            continue
        if rec["profile"] not in (f.get("profile"), f.get("run_as")):
            continue
        own = src_dtype is None or f.get("src_dtype") in (None, src_dtype)
        if f.get("status") == "skipped" and not own and not f.get("mismatch", 0) and \
                not f.get("error", 0) and not int(f.get("pass", 0)):
            continue
        if f.get("status") != "pass" or f.get("mismatch", 0) or f.get("error", 0):
            bad.append(f"{f.get('path')}: {f.get('status')}")
        elif own:
            src_ok = True
        cases += int(f.get("pass", 0))
    if not bad and cases and not src_ok:
        bad.append(f"no passing file of the workload's source dtype {src_dtype}")
    return cases, bad


def evidence_problems(rec: dict, path: Path, roots=()) -> tuple[list[str], Path | None]:
    v = rec["verify"]
    why = unsafe_rel(v["report"])
    if why:
        return [f"verify.report {why}: evidence must lie inside the record store"], None
    try:
        p = _find_evidence(path, v["report"], roots)
    except StorePathError as e:
        return [f"verify.report: {e}"], None
    if p is None:
        return [f"verify evidence {v['report']} not found beside the record"], None
    got = file_sha256(p)
    if got != v["sha256"]:
        return [(f"verify evidence {v['report']} hashes to {got[:12]}..., the record says "
                 f"{v['sha256'][:12]}...")], p
    if v["status"] != "pass":
        return [f"verify.status is {v['status']!r}, not 'pass'"], p
    out = []
    if v["kind"] == "mxref-verify":
        try:
            rep = json.loads(p.read_text())
        except ValueError as e:
            return [f"verify report {p.name} is not JSON: {e}"], p
        if rep.get("schema") != VERIFY_SCHEMA:
            return [f"verify report schema is {rep.get('schema')!r}, not {VERIFY_SCHEMA}"], p
        if rep.get("status") != "pass":
            out.append(f"the verify report's status is {rep.get('status')!r}, not 'pass'")
        name = rep.get("backend", {}).get("name")
        if name != v["backend"]:
            out.append(f"the verify report is of backend {name!r}, the record claims "
                       f"{v['backend']!r}")
        g = rep.get("golden", {})
        if g.get("manifest_sha256") != rec["golden"]["manifest_sha256"] or \
                g.get("suite_version") != rec["golden"]["suite_version"]:
            out.append("the verify report ran a different golden suite "
                       f"({g.get('suite_version')}, manifest {str(g.get('manifest_sha256'))[:12]}"
                       f"...) than the record's ({rec['golden']['suite_version']}, "
                       f"{rec['golden']['manifest_sha256'][:12]}...)")
        commit = rep.get("env", {}).get("commit")
        if commit and not (commit.startswith(rec["git"]["commit"]) or
                           rec["git"]["commit"].startswith(commit)):
            out.append(f"the verify report was run at commit {commit[:10]}, the record at "
                       f"{rec['git']['commit'][:10]}")
        cases, bad = _covers(rep, rec, "bfloat16" if rec.get("suite") == "stacks" else None)
        if bad:
            out.append(f"verify failed files of {rec['op']}/{rec['format']}/{rec['profile']}: "
                       + "; ".join(bad[:3]))
        elif cases == 0:
            out.append(f"no passing verify of {rec['op']} {rec['format']} {rec['profile']} in "
                       "the report (the verified-only rule needs the same op and profile)")
    else:                                   # in-run-validation: checks.jsonl
        n, failed = 0, 0
        for line in p.read_text().splitlines():
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError:
                out.append(f"{p.name}: a line is not JSON")
                break
            n += 1
            failed += not d.get("ok", False)
        if n == 0:
            out.append("the in-run validation log holds no check")
        if failed:
            out.append(f"{failed} of {n} in-run validation checks failed")
    return out, p


def tree_problems(rec: dict, repo=REPO) -> list[str]:
    """The record's ``git.tree`` against its commit's tree in `repo` (empty when they agree,
    or when it is dirty: then the tree differs by design; the schema requires a tree)."""
    g = rec["git"]
    tree, commit = g.get("tree"), g["commit"]
    if not tree:
        return []
    want = git_output(repo, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}^{{tree}}")
    if not want:
        return [(f"commit {commit} is not in this repository ({repo}): cannot check the "
                 "record's tree")]
    if want != tree and not g["dirty"]:
        return [(f"the run's files (tree {tree}) are not commit {commit}'s (tree {want}): the "
                 "record's commit is wrong or the tree was modified (edited or untracked files)")]
    return []


def store_repo(store) -> Path:
    """The git checkout a store lives in (its first existing ancestor's top level), else the
    repository this package was loaded from."""
    p = Path(store).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    top = git_output(p, "rev-parse", "--show-toplevel")
    return Path(top) if top else REPO


def check_record(path, *, roots=(), current_golden=True, allow_dirty=False,
                 golden_root=None, repo=REPO) -> Verdict:
    """Every reason `path` may not enter a store (module docstring); `repo` is the checkout the
    record's commit is looked up in."""
    path = Path(path)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return Verdict(str(path), None, [f"cannot read a JSON record: {e}"])
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
        return Verdict(str(path), None, [f"not a {SCHEMA} record (schema {got!r})"])
    v = Verdict(str(path), rec)
    v.problems += schema_problems(rec)
    if v.problems:
        return v                             # the rest reads fields the schema guarantees
    h = record_hash(rec)
    if h != rec["record_sha256"]:
        v.problems.append(f"record_sha256 does not match the content (content hashes to "
                          f"{h[:12]}...): the record was edited after it was sealed")
    v.problems += metric_problems(rec)
    probs, v.evidence = evidence_problems(rec, path, roots)
    v.problems += probs
    if current_golden:
        g = golden_state(golden_root)
        if (rec["golden"]["suite"], rec["golden"]["suite_version"],
                rec["golden"]["manifest_sha256"]) != (g["suite"], g["suite_version"],
                                                     g["manifest_sha256"]):
            v.problems.append(f"recorded against golden {rec['golden']['suite']}@"
                              f"{rec['golden']['suite_version']} (manifest "
                              f"{rec['golden']['manifest_sha256'][:12]}...); this store is on "
                              f"{g['suite']}@{g['suite_version']} ({g['manifest_sha256'][:12]}...)")
    if rec["git"]["dirty"] and not allow_dirty:
        v.problems.append("built from a dirty tree (git.dirty): not reproducible from its commit")
    v.problems += tree_problems(rec, repo)
    return v


def store_path(store: Path, rec: dict) -> Path:
    """Where `rec` is stored, inside `store` (StorePathError where a name would escape it)."""
    rel = f"records/{rec['suite']}/{rec['machine']['slug']}/{slug(rec['entry'])}.json"
    inside(store, rel)
    return Path(store) / rel


def collision(store: Path, dest: Path, rec: dict) -> str | None:
    """Why writing `rec` to `dest` would lose another record (None when it would not): a file
    whose path differs from `dest`'s only in letter case, or a record already at `dest` of
    another entry (entries that slug alike, e.g. differing only in case)."""
    root = Path(store).resolve()
    want = dest.resolve().relative_to(root).as_posix()
    base = root / "records"
    if base.is_dir():
        for q in base.rglob("*"):
            rel = q.relative_to(root).as_posix()
            if rel != want and rel.lower() == want.lower():
                return f"{dest} collides case-insensitively with the stored {q}"
    if dest.is_file():
        try:
            old = json.loads(dest.read_text())
        except (OSError, ValueError):
            return f"{dest} already holds a file that is not a readable record"
        if not isinstance(old, dict) or old.get("entry") != rec["entry"] or \
                old.get("suite") != rec["suite"]:
            got = old.get("entry") if isinstance(old, dict) else None
            return (f"{dest} already holds the record of entry {got!r}; {rec['entry']!r} "
                    "would overwrite it (entries that differ only in case or punctuation "
                    "share a file)")
    return None


def accept(v: Verdict, store: Path) -> Path:
    """Copy an accepted record and its evidence into the store; returns the record's new path.
    StorePathError, with nothing written, where the evidence or the record would land outside
    the store or the record would overwrite another entry's."""
    assert v.ok and v.record is not None and v.evidence is not None
    store = Path(store)
    ev = inside(store, v.record["verify"]["report"])
    dest = store_path(store, v.record)
    why = collision(store, dest, v.record)
    if why:
        raise StorePathError(f"refused to store {v.path}: {why}")
    if not ev.exists() or file_sha256(ev) != v.record["verify"]["sha256"]:
        ev.parent.mkdir(parents=True, exist_ok=True)
        tmp = ev.with_suffix(ev.suffix + ".tmp")
        tmp.unlink(missing_ok=True)             # never write through a planted link
        shutil.copyfile(v.evidence, tmp)
        tmp.replace(ev)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".json.tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps(v.record, indent=1, sort_keys=True) + "\n")
    tmp.replace(dest)
    return dest


def record_files(paths) -> list[Path]:
    """Record files named by `paths` (files, or directories searched for records/**/*.json)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            base = p / "records" if (p / "records").is_dir() else p
            out += sorted(q for q in base.rglob("*.json") if q.is_file())
        else:
            out.append(p)
    return out


# ---- stack rosters (mxref.leaderboard.stacks) ----------------------------------------------------
def roster_files(paths) -> list[Path]:
    """The stack rosters (``stacks/<machine>.json``) of the run directories or stores in
    `paths`."""
    out = []
    for p in map(Path, paths):
        if p.is_dir() and (p / "stacks").is_dir():
            out += sorted(q for q in (p / "stacks").glob("*.json") if q.is_file())
    return out


def check_roster(path, roots=()) -> tuple[dict | None, list[str], list[Path]]:
    """(roster, problems, evidence files): a roster is kept only if it is one, its machine is a
    plain slug, and every verify report it names lies beside it and hashes as it says. It adds
    no number to the page (its timed rows are shown from their records, which pass
    check_record on their own); it says which stacks were asked for and why the others were not
    timed."""
    from .schema import STACKS_SCHEMA
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, [f"cannot read a JSON roster: {e}"], []
    if not isinstance(doc, dict) or doc.get("schema") != STACKS_SCHEMA:
        return None, [f"not a {STACKS_SCHEMA} roster"], []
    probs, ev = [], []
    m = doc.get("machine")
    if not isinstance(m, str) or slug(m) != m or unsafe_rel(f"stacks/{m}.json"):
        probs.append(f"machine {m!r} is not a plain slug")
    for st in doc.get("stacks") or []:
        for prof, v in (st.get("verify") or {}).items():
            rel = (v or {}).get("report")
            if rel is None:
                continue
            try:
                p = _find_evidence(path, rel, roots)
            except StorePathError as e:
                probs.append(f"{st.get('name')} {prof}: {e}")
                continue
            if p is None:
                probs.append(f"{st.get('name')} {prof}: verify evidence {rel} not found")
            elif file_sha256(p) != v.get("sha256"):
                probs.append(f"{st.get('name')} {prof}: verify evidence {rel} does not hash to "
                             "the roster's sha256")
            else:
                ev.append((rel, p))
    return doc, probs, ev


def accept_roster(doc: dict, evidence, store: Path) -> Path:
    """Copy a checked roster and its verify evidence into `store` (stacks/<machine>.json)."""
    store = Path(store)
    for rel, src in evidence:
        dest = inside(store, rel)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
    dest = inside(store, f"stacks/{doc['machine']}.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".json.tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(dest)
    return dest
