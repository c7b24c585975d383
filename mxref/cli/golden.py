"""Golden-corpus commands: generate, golden check / golden path, inspect, diff.

Exit 3 is the corpus class of failure: not found (the message says where mxref looked and how
to point at one) or failing an integrity check (the message names the file and the check).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import numpy as np

from ..ops import OP_NAMES
from .common import EXIT_CORPUS, corpus_root, fail


def _integrity_exit(problems, as_json=False, what="golden check"):
    if as_json:
        click.echo(json.dumps({"schema": "mxref-golden-check/1", "ok": not problems,
                               "problems": [{"file": p.path, "check": p.check, "detail": p.detail}
                                            for p in problems]}, indent=2))
    for p in problems:
        click.echo(f"FAIL {p.path}: {p.check}: {p.detail}", err=True)
    if problems:
        click.echo(f"{what}: {len(problems)} problem(s)", err=True)
        sys.exit(EXIT_CORPUS)
    if not as_json:
        click.echo(f"{what}: ok")


@click.command("generate")
@click.option("--suite", "ops", multiple=True,
              type=click.Choice(list(OP_NAMES)),
              help="Ops to generate (default: all).")
@click.option("--level", "levels", multiple=True, type=click.IntRange(0, 3), default=(0, 1),
              show_default=True, help="TestFloat-style levels: 0 smoke, 1 CI, 2 nightly, 3 exhaustive.")
@click.option("--out", "root", type=click.Path(file_okay=False), default=None,
              help="Where to write (default: ./golden). With --check: the corpus to check "
                   "(default: the corpus lookup, as for `mxref golden path`).")
@click.option("--check", is_flag=True,
              help="Regenerate every level asked in memory and compare content, rows and classes "
                   "with the manifest and the committed files, instead of writing (exit 3 on drift).")
@click.option("--json", "as_json", is_flag=True)
def generate_cmd(ops, levels, root, check, as_json):
    """Generate golden files (Arrow IPC) and MANIFEST.json, or --check them against a regeneration.

    Levels 0 and 1 are committed under golden/; levels 2 and 3 are generated on demand into
    another --out directory and never committed. A run holds the lock file
    OUT/.mxref-generate.lock until it ends (and then removes it): a second generate into the same
    folder exits 3 naming the holder's pid, and the manifest is rewritten atomically.
    """
    from ..golden.generate import file_specs, generate
    from ..golden.regenerate import regenerate_check
    from ..golden.store import GoldenIntegrityError

    ops = ops or None
    try:
        if check:
            _integrity_exit(regenerate_check(corpus_root(root), levels, ops), as_json,
                            "generate --check")
            return
        root = root or "golden"
        if {2, 3} & set(levels) and Path(root).resolve() == Path("golden").resolve():
            fail("levels 2 and 3 are never committed: pass --out DIR outside golden/")
        total = len([s for lv in levels for s in file_specs(lv, ops)])
        show = sys.stderr.isatty() and os.environ.get("CI") != "true"
        with click.progressbar(length=total, label="generating", file=sys.stderr,
                               hidden=not show) as bar:
            entries = generate(Path(root), levels, ops, progress=lambda spec: bar.update(1))
    except GoldenIntegrityError as e:        # the folder is locked, or its manifest is invalid
        _integrity_exit([e], as_json, "generate")
    except ModuleNotFoundError as e:
        if e.name != "ml_dtypes":
            raise
        fail("generating the corpus needs ml_dtypes (bfloat16 inputs are rounded by it): "
             "pip install ml_dtypes, or the extra 'mxref[test]'")
    size = sum(e["bytes"] for e in entries.values())
    rows = sum(e["rows"] for e in entries.values())
    summary = {"schema": "mxref-generate/1", "root": root, "files": len(entries), "rows": rows,
               "bytes": size}
    click.echo(json.dumps(summary, indent=2) if as_json else
               f"wrote {len(entries)} files, {rows} rows, {size / 1e6:.1f} MB to {root}/")


@click.group("golden")
def golden_group():
    """The golden corpus: where it is, and its integrity.

    Lookup order: --golden / the ROOT argument, $MXREF_GOLDEN, the corpus installed with mxref,
    the repository checkout's golden/.
    """


@golden_group.command("check")
@click.argument("root", required=False, default=None, type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def golden_check_cmd(root, as_json):
    """Check the manifest (schema, keys), every file (inside the corpus, size, byte and content
    hashes, rows, format version), manifest membership and the generator-source hash.

    ROOT defaults to the corpus lookup (see `mxref golden path`). Exit 3 names the file and the
    check that failed, or says where no corpus was found.
    """
    from ..golden.manifest import check

    _integrity_exit(check(corpus_root(root)), as_json)


@golden_group.command("path")
@click.option("--golden", "root", type=click.Path(file_okay=False), default=None,
              help="An explicit corpus directory (checked, then printed).")
@click.option("--json", "as_json", is_flag=True,
              help="Also say which lookup step found it, and the bundled expectations folder.")
def golden_path_cmd(root, as_json):
    """Print the golden corpus directory (exit 3 when none is found)."""
    from ..corpus import CorpusNotFoundError, expectations_dir, locate

    try:
        path, what = locate(root)
    except CorpusNotFoundError as e:
        fail(str(e), EXIT_CORPUS)
    if as_json:
        exp = expectations_dir()
        click.echo(json.dumps({"schema": "mxref-golden-path/1", "golden": str(path),
                               "found_by": what,
                               "expectations": str(exp) if exp else None}, indent=2))
    else:
        click.echo(str(path))


def _decoded(table, name, v):
    """Float values of an ieee754-bits tensor cell (fp32, bf16 or fp16 patterns)."""
    meta = {k.decode(): v.decode() for k, v in (table.schema.field(name).metadata or {}).items()}
    if meta.get("mxref.encoding") != "ieee754-bits":
        return None
    dt = meta.get("mxref.dtype", "").strip('"')
    flat = np.ascontiguousarray(v.reshape(-1)[:8])
    if dt == "float32":
        return flat.view(np.float32)
    if dt == "float16":
        return flat.view(np.float16)
    if dt == "bfloat16":
        return (flat.astype(np.uint32) << 16).view(np.float32)
    return None


def _fmt_row(table, i, names):
    from ..golden.store import column_numpy

    parts = []
    for n in names:
        v = column_numpy(table, n)[i]
        if isinstance(v, np.ndarray):
            shown = " ".join(f"{int(b):0{v.dtype.itemsize * 2}x}" for b in v.reshape(-1)[:8])
            parts.append(f"{n}=[{shown}{' ...' if v.size > 8 else ''}]")
            vals = _decoded(table, n, v)
            if vals is not None:
                parts.append("  (= " + " ".join(f"{float(x):.6g}" for x in vals)
                             + (" ..." if v.size > 8 else "") + ")")
        else:
            parts.append(f"{n}={v}")
    return "  ".join(parts)


@click.command("inspect")
@click.argument("path", type=click.Path())
@click.option("-n", "--rows", "nrows", default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def inspect_cmd(path, nrows, as_json):
    """Show a golden file's schema, metadata, class histogram and a few decoded rows."""
    from ..golden.store import GoldenIntegrityError, column_numpy, read_golden, schema_meta

    try:
        t = read_golden(path)
    except GoldenIntegrityError as e:
        _integrity_exit([e])
    meta = schema_meta(t)
    classes = column_numpy(t, "class")
    hist = {str(c): int((classes == c).sum()) for c in sorted(set(classes.tolist()))}
    if as_json:
        click.echo(json.dumps({"schema": "mxref-inspect/1", "file": path, "rows": t.num_rows,
                               "metadata": meta, "classes": hist,
                               "fields": [{"name": f.name, "type": str(f.type),
                                           "metadata": {k.decode(): v.decode() for k, v in
                                                        (f.metadata or {}).items()}}
                                          for f in t.schema]}, indent=2))
        return
    click.echo(f"{path}: {t.num_rows} rows")
    for k in ("op", "format", "profile", "src_dtype", "level", "format_version", "suite_version",
              "generator"):
        if k in meta:
            click.echo(f"  {k:<16}{meta[k]}")
    click.echo("fields:")
    for f in t.schema:
        fm = {k.decode().removeprefix("mxref."): v.decode() for k, v in (f.metadata or {}).items()}
        click.echo(f"  {f.name:<18}{str(f.type)[:48]:<50}{json.dumps(fm)[:80]}")
    click.echo("classes: " + ", ".join(f"{k}={v}" for k, v in hist.items()))
    if meta.get("cross_checks") not in (None, "[]"):
        click.echo("cross_checks: " + meta["cross_checks"][:300])
    shown = [n for n in t.column_names if n not in ("tags",)]
    for i in range(min(nrows, t.num_rows)):
        click.echo(f"row {i}: " + _fmt_row(t, i, shown))


@click.command("diff")
@click.argument("old", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def diff_cmd(old, new, as_json):
    """Compare two golden files case by case: per-class changes and the first differing case.

    Exit 0 when identical in content, 1 when they differ, 3 when a file is unreadable.
    """
    from ..golden.store import GoldenIntegrityError, column_numpy, read_golden

    try:
        a, b = read_golden(old), read_golden(new)
    except GoldenIntegrityError as e:
        _integrity_exit([e])
    ida, idb = column_numpy(a, "case_id"), column_numpy(b, "case_id")
    ca, cb = column_numpy(a, "class"), column_numpy(b, "class")
    ia = {int(k): i for i, k in enumerate(ida)}
    ib = {int(k): i for i, k in enumerate(idb)}
    common = [n for n in a.column_names if n in b.column_names and n != "tags"]
    per = {}
    first = None
    for k in sorted(set(ia) | set(ib)):
        cls = str(ca[ia[k]] if k in ia else cb[ib[k]])
        d = per.setdefault(cls, {"removed": 0, "added": 0, "changed": 0, "same": 0})
        if k not in ib:
            d["removed"] += 1
        elif k not in ia:
            d["added"] += 1
        else:
            diffs = [n for n in common
                     if not np.array_equal(column_numpy(a, n)[ia[k]], column_numpy(b, n)[ib[k]])]
            if diffs:
                d["changed"] += 1
                if first is None:
                    first = {"case_id": k, "class": cls, "columns": diffs,
                             "old": _fmt_row(a, ia[k], common), "new": _fmt_row(b, ib[k], common)}
            else:
                d["same"] += 1
    differ = any(v["removed"] or v["added"] or v["changed"] for v in per.values())
    if as_json:
        click.echo(json.dumps({"schema": "mxref-diff/1", "old": old, "new": new, "differ": differ,
                               "classes": per, "first_difference": first}, indent=2))
    else:
        for cls, v in sorted(per.items()):
            click.echo(f"{cls:<6} same {v['same']:>6}  changed {v['changed']:>6}  "
                       f"added {v['added']:>6}  removed {v['removed']:>6}")
        if first:
            click.echo(f"first changed case {first['case_id']:#018x} ({first['class']}), "
                       f"columns {', '.join(first['columns'])}")
            click.echo(f"  old: {first['old']}")
            click.echo(f"  new: {first['new']}")
        click.echo("identical content" if not differ else "files differ")
    sys.exit(1 if differ else 0)
