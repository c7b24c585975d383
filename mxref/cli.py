"""`mxref` command line. Human tables on stdout, `--json` for machines, errors on stderr.

Exit codes: 0 success; 1 the command ran and found differences where the caller asked to
fail on them (`compare --fail-on-diff`); 2 usage or input errors (click's convention).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import numpy as np

from . import __version__
from .errors import MXRefError
from .formats import FORMATS
from .backends.base import GOLDEN_OPS
from .profiles import PROFILES, get_profile

SAMPLE = Path(__file__).parent / "data" / "sample_activations_bf16.npy"


def _fail(msg: str, code: int = 2):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mxref")
def main():
    """mxref: the bit-exact reference for OCP MX formats (MXFP8/6/4, MXINT8) and NVFP4.

    Which bits must a microscaling quantization produce? mxref answers per named profile
    (ocp, rceil, torchao_*, te_*, triton_kernels_*, microxcaling, ...).
    """


@main.command("formats")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def formats_cmd(as_json):
    """List block formats and their derived facts."""
    rows = []
    for f in FORMATS.values():
        el = f.element
        rows.append({
            "name": f.name, "element": el.name, "bits": el.bits, "block_size": f.block_size,
            "scale": f.scale.name, "max_normal": float(el.max_normal), "emax_elem": el.emax,
            "min_subnormal": float(el.min_subnormal),
            "nan": el.nan, "inf": el.inf_code is not None, "tensor_scale": f.tensor_scale,
        })
    if as_json:
        click.echo(json.dumps({"schema": "mxref-formats/1", "formats": rows}, indent=2))
        return
    click.echo(f"{'format':<12}{'element':<8}{'bits':>5}{'block':>6}  {'scale':<6}"
               f"{'max':>10}{'emax':>6}{'min_sub':>12}  nan")
    for r in rows:
        click.echo(f"{r['name']:<12}{r['element']:<8}{r['bits']:>5}{r['block_size']:>6}  "
                   f"{r['scale']:<6}{r['max_normal']:>10g}{r['emax_elem']:>6}"
                   f"{r['min_subnormal']:>12g}  {r['nan']}")


@main.command("profiles")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def profiles_cmd(name, as_json):
    """List the named semantic profiles, or show every knob of one."""
    try:
        selected = [get_profile(name)] if name else list(PROFILES.values())
    except MXRefError as e:
        _fail(str(e))
    if as_json:
        click.echo(json.dumps({"schema": "mxref-profiles/1",
                               "profiles": [p.knobs() for p in selected]}, indent=2))
        return
    if name:
        for k, v in selected[0].knobs().items():
            click.echo(f"{k:<22}{v}")
        return
    for p in selected:
        click.echo(f"{p.name:<26}{p.scale_rule:<11}{p.rounding:<10}{p.description[:70]}")


def _load_input(path: str | None, source_dtype: str | None):
    if path is None:
        return np.load(SAMPLE, allow_pickle=False), "bfloat16", str(SAMPLE.name)
    p = Path(path)
    if p.suffix != ".npy":
        _fail(f"{path}: only .npy files are read (no pickle); got suffix {p.suffix!r}")
    try:
        arr = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        _fail(f"{path}: cannot read as .npy: {e}")
    return arr, source_dtype, p.name


@main.command("quantize")
@click.argument("input_path", required=False, metavar="INPUT.npy")
@click.option("-f", "--format", "fmt", required=True, type=click.Choice(list(FORMATS)))
@click.option("-p", "--profile", default="ocp", show_default=True)
@click.option("--axis", default=-1, show_default=True, type=int)
@click.option("--source-dtype", type=click.Choice(["float32", "float16", "bfloat16"]),
              help="For raw uint16/uint32 bit-pattern inputs.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), required=True,
              help="Output .npz with codes, scales, packed bytes (and tensor_scale).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def quantize_cmd(input_path, fmt, profile, axis, source_dtype, out, force, as_json):
    """Quantize INPUT.npy (default: the bundled sample) and write codes and scales."""
    from .quantize import quantize

    if Path(out).exists() and not force:
        _fail(f"{out} exists; pass --force to overwrite it")
    arr, src, label = _load_input(input_path, source_dtype)
    try:
        mx = quantize(arr, fmt, profile, axis=axis, source_dtype=src)
    except MXRefError as e:
        _fail(str(e))
    payload = {"codes": mx.codes, "scales": mx.scales, "packed": mx.packed()}
    if mx.tensor_scale is not None:
        payload["tensor_scale"] = np.asarray(mx.tensor_scale, dtype=np.float32)
    np.savez(out, **payload)
    summary = {"schema": "mxref-quantize/1", "input": label, "shape": list(arr.shape),
               "format": fmt, "profile": mx.profile.name, "axis": mx.axis,
               "blocks": int(mx.scales.size), "nan_blocks": int(_nan_blocks(mx).sum()),
               "out": out}
    click.echo(json.dumps(summary, indent=2) if as_json else
               f"{label} {tuple(arr.shape)} -> {fmt}/{mx.profile.name}: "
               f"{summary['blocks']} blocks written to {out}")


def _nan_blocks(mx):
    return mx.scales == (0x7F if mx.fmt.is_nvfp4 else 0xFF)


@main.command("compare")
@click.argument("input_path", required=False, metavar="INPUT.npy")
@click.option("-f", "--format", "fmts", multiple=True, type=click.Choice(list(FORMATS)),
              help="Formats to compare (default: all).")
@click.option("-p", "--profile", "profiles", multiple=True,
              help="Profiles to compare against the baseline (default: all that apply).")
@click.option("--baseline", default="ocp", show_default=True)
@click.option("--axis", default=-1, show_default=True, type=int)
@click.option("--source-dtype", type=click.Choice(["float32", "float16", "bfloat16"]))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--fail-on-diff", is_flag=True, help="Exit 1 if any profile differs.")
def compare_cmd(input_path, fmts, profiles, baseline, axis, source_dtype, as_json, fail_on_diff):
    """Quantize one tensor under several profiles and count how their bits differ.

    This is the question every stack answers differently: for each format, the fraction of
    scale bytes and of element codes (in blocks both call finite) that differ from the
    baseline profile.
    """
    from .quantize import quantize

    arr, src, label = _load_input(input_path, source_dtype)
    fmts = fmts or tuple(FORMATS)
    try:
        base_prof = get_profile(baseline)
        profs = [get_profile(p) for p in profiles] if profiles else list(PROFILES.values())
    except MXRefError as e:
        _fail(str(e))
    rows = []
    with click.progressbar(length=len(fmts) * len(profs), label="quantizing",
                           file=sys.stderr) as bar:
        for f in fmts:
            try:
                base = quantize(arr, f, base_prof, axis=axis, source_dtype=src)
            except MXRefError as e:
                _fail(str(e))
            for p in profs:
                bar.update(1)
                if p.name == base_prof.name:
                    continue
                try:
                    got = quantize(arr, f, p, axis=axis, source_dtype=src)
                except MXRefError:
                    continue  # knob/format combination the profile does not define
                rows.append(_diff_row(f, p.name, base, got))
    any_diff = any(r["scale_diff"] or r["code_diff"] for r in rows)
    doc = {"schema": "mxref-compare/1", "input": label, "shape": list(arr.shape),
           "baseline": base_prof.name, "rows": rows, "any_difference": any_diff}
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(f"input {label} {tuple(arr.shape)}, baseline profile {base_prof.name}")
        click.echo(f"{'format':<12}{'profile':<27}{'scales differ':>15}{'codes differ':>15}")
        for r in rows:
            click.echo(f"{r['format']:<12}{r['profile']:<27}{r['scale_diff_frac']:>14.3%} "
                       f"{r['code_diff_frac']:>14.3%}")
    sys.exit(1 if (fail_on_diff and any_diff) else 0)


def _diff_row(fmt, name, base, got):
    sd = base.scales != got.scales
    bs = base.block_size
    ok = np.repeat(~(_nan_blocks(base) | _nan_blocks(got)), bs, axis=base.axis)
    ok = np.take(ok, np.arange(base.codes.shape[base.axis]), axis=base.axis)
    cd = (base.codes != got.codes) & ok
    return {"format": fmt, "profile": name, "scale_diff": int(sd.sum()),
            "scale_diff_frac": float(sd.mean()) if sd.size else 0.0,
            "code_diff": int(cd.sum()), "code_diff_frac": float(cd.mean()) if cd.size else 0.0}


@main.command("warmup")
def warmup_cmd():
    """Compile every Numba kernel now (otherwise the first call compiles)."""
    import time

    from . import warmup

    t = time.perf_counter()
    warmup()
    click.echo(f"compiled mxref kernels in {time.perf_counter() - t:.1f} s", err=True)


# ---- golden corpus ------------------------------------------------------------------------
EXIT_INTEGRITY = 3


def _integrity_exit(problems, as_json=False, what="golden check"):
    if as_json:
        click.echo(json.dumps({"schema": "mxref-golden-check/1", "ok": not problems,
                               "problems": [{"file": p.path, "check": p.check, "detail": p.detail}
                                            for p in problems]}, indent=2))
    for p in problems:
        click.echo(f"FAIL {p.path}: {p.check}: {p.detail}", err=True)
    if problems:
        click.echo(f"{what}: {len(problems)} problem(s)", err=True)
        sys.exit(EXIT_INTEGRITY)
    if not as_json:
        click.echo(f"{what}: ok")


@main.command("generate")
@click.option("--suite", "ops", multiple=True,
              type=click.Choice(list(GOLDEN_OPS)),
              help="Ops to generate (default: all).")
@click.option("--level", "levels", multiple=True, type=click.IntRange(0, 3), default=(0, 1),
              show_default=True, help="TestFloat-style levels: 0 smoke, 1 CI, 2 nightly, 3 exhaustive.")
@click.option("--out", "root", type=click.Path(file_okay=False), default="golden", show_default=True)
@click.option("--check", is_flag=True,
              help="Regenerate in memory and compare with the manifest instead of writing (exit 3 on drift).")
@click.option("--json", "as_json", is_flag=True)
def generate_cmd(ops, levels, root, check, as_json):
    """Generate golden files (Arrow IPC) and MANIFEST.json, or --check them against a regeneration.

    Levels 0 and 1 are committed under golden/; levels 2 and 3 are generated on demand into
    another --out directory and never committed.
    """
    from .golden.manifest import generate, regenerate_check
    from .golden.suites import file_specs

    ops = ops or None
    if check:
        _integrity_exit(regenerate_check(Path(root), levels, ops), as_json, "generate --check")
        return
    if not check and {2, 3} & set(levels) and Path(root).resolve() == Path("golden").resolve():
        _fail("levels 2 and 3 are never committed: pass --out DIR outside golden/")
    total = len([s for lv in levels for s in file_specs(lv, ops)])
    show = sys.stderr.isatty() and os.environ.get("CI") != "true"
    with click.progressbar(length=total, label="generating", file=sys.stderr,
                           hidden=not show) as bar:
        entries = generate(Path(root), levels, ops, progress=lambda spec: bar.update(1))
    size = sum(e["bytes"] for e in entries.values())
    rows = sum(e["rows"] for e in entries.values())
    summary = {"schema": "mxref-generate/1", "root": root, "files": len(entries), "rows": rows,
               "bytes": size}
    click.echo(json.dumps(summary, indent=2) if as_json else
               f"wrote {len(entries)} files, {rows} rows, {size / 1e6:.1f} MB to {root}/")


@main.group("golden")
def golden_group():
    """Integrity of the golden corpus."""


@golden_group.command("check")
@click.argument("root", required=False, default="golden", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def golden_check_cmd(root, as_json):
    """Check hashes, format version, manifest membership and the generator-source hash.

    Exit 3 names the file and the check that failed.
    """
    from .golden.manifest import check

    _integrity_exit(check(Path(root)), as_json)


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
    from .golden.store import column_numpy

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


@main.command("inspect")
@click.argument("path", type=click.Path())
@click.option("-n", "--rows", "nrows", default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def inspect_cmd(path, nrows, as_json):
    """Show a golden file's schema, metadata, class histogram and a few decoded rows."""
    from .golden.store import GoldenIntegrityError, column_numpy, read_golden, schema_meta

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


@main.command("diff")
@click.argument("old", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def diff_cmd(old, new, as_json):
    """Compare two golden files case by case: per-class changes and the first differing case.

    Exit 0 when identical in content, 1 when they differ, 3 when a file is unreadable.
    """
    from .golden.store import GoldenIntegrityError, column_numpy, read_golden

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



# ---- verify ----------------------------------------------------------------------------------
def _split(values) -> list[str]:
    """Options that take several values accept repetition and commas: --ops a,b --ops c."""
    return [v.strip() for val in values for v in val.split(",") if v.strip()]


def _verify_exit(code: int, msg: str, as_json: bool, status: str):
    from .verify.run import SCHEMA
    if as_json:
        click.echo(json.dumps({"schema": SCHEMA, "status": status, "exit_code": code,
                               "error": msg}, indent=2))
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


@main.command("verify")
@click.option("-b", "--backend", "backend_spec", metavar="B",
              help="numba, torch, triton, rocm, ml_dtypes, torchao[-rceil|-ceil|-even], "
                   "transformer_engine, an entry point of group mxref.backends, or "
                   "package.module:object.")
@click.option("--device", default=None, help="Device for backends that take one (torch: cuda, cuda:1, ...).")
@click.option("--golden", "root", type=click.Path(file_okay=False), default=None,
              help="Golden corpus directory (default: the bundled golden/).")
@click.option("--suite", default=None, metavar="S[@VERSION]", help="Require this suite (mx-core).")
@click.option("-p", "--profile", "profiles", multiple=True, metavar="P",
              help="Profiles to verify (default: every profile the backend claims).")
@click.option("--ops", multiple=True, metavar="OP[,OP]",
              help="Golden ops (default: every op the backend implements): the core ops "
                   "quantize_mx, quantize_mx_tensor, quantize_nvfp4, convert, dequantize, pack; "
                   "rotate, quantize_rotated, gemm, rotated_gemm, quantize_mx_sr, "
                   "quantize_nvfp4_sr, mxfp4_to_fp8, fp8_to_mxfp4, reblock, decompose, "
                   "macroblock, outlier_fallback, quantize_4over6.")
@click.option("--classes", multiple=True, metavar="C[,C]", help="Coverage classes, e.g. E2,S7.")
@click.option("-f", "--format", "formats", multiple=True, metavar="F[,F]")
@click.option("--src-dtype", "src_dtypes", multiple=True, metavar="D[,D]",
              help="float32, bfloat16, float16.")
@click.option("--level", "levels", multiple=True, type=click.IntRange(0, 3), default=(1,),
              show_default=True)
@click.option("--max-errors", default=20, show_default=True, type=click.IntRange(0),
              help="Mismatch records listed (0 = all); the counters always cover everything.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document (mxref-verify/1).")
@click.option("--json-out", type=click.Path(dir_okay=False), help="Also write the JSON report here.")
@click.option("--junit-xml", type=click.Path(dir_okay=False),
              help="JUnit XML, one testcase per (golden file, class).")
@click.option("--expectations", "expectations_path", type=click.Path(dir_okay=False),
              help="TOML manifest of known deviations (reported as XFAIL).")
@click.option("--strict-xpass", is_flag=True, help="Fail (exit 1) when a known deviation now passes.")
@click.option("--detect-profile", is_flag=True,
              help="Compare the backend's native behaviour with every profile's goldens.")
@click.option("--dump-mismatches", type=click.Path(), metavar="F.arrow|DIR",
              help="Write failing rows with actual_* columns in the golden schema.")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1),
              help="Worker processes: the selection is split into this many shards, each "
                   "verified by its own process; one merged report.")
@click.option("--shard", default=None, metavar="K/N",
              help="Verify only shard K of N (1-based; the split --jobs uses), e.g. to spread "
                   "a CI run over N machines.")
@click.option("--no-progress", is_flag=True, help="No progress bar (also off when not a TTY or CI=true).")
@click.option("--list-backends", is_flag=True, help="List known backend names and exit.")
def verify_cmd(backend_spec, device, root, suite, profiles, ops, classes, formats, src_dtypes,
               levels, max_errors, as_json, json_out, junit_xml, expectations_path, strict_xpass,
               detect_profile, dump_mismatches, jobs, shard, no_progress, list_backends):
    """Verify a kernel stack against the golden corpus, bit for bit.

    Exit codes: 0 every selected case bit-exact (expected xfails allowed); 1 mismatches or
    backend errors (or XPASS with --strict-xpass); 2 usage; 3 golden integrity; 4 backend
    unavailable (import failure, no device, or no claimed profile/op to run); 5 nothing selected.
    """
    from .backends import BackendUnavailable, UnknownBackendError, get_backend, list_backends as _lb
    from .golden.store import GoldenIntegrityError
    from .verify import (ExpectationsError, SelectionError, default_golden_root, detect_profile as
                         _detect, load_expectations, verify)
    from .verify.report import detect_text, dump_mismatches as _dump, junit_xml as _junit, text_report

    if list_backends:
        names = _lb()
        click.echo(json.dumps({"backends": names}) if as_json else "\n".join(names))
        return
    if not backend_spec:
        _verify_exit(2, "missing option --backend (see --list-backends)", as_json, "usage")
    if as_json and json_out == "-":
        _verify_exit(2, "--json already prints to stdout", as_json, "usage")
    ops, classes, formats, src_dtypes = (_split(ops) or None, _split(classes) or None,
                                         _split(formats) or None, _split(src_dtypes) or None)
    shard_kn = None
    if shard is not None:
        k, _, n = shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            _verify_exit(2, f"--shard {shard!r}: expected K/N with 1 <= K <= N, e.g. 2/4",
                         as_json, "usage")
        shard_kn = (int(k) - 1, int(n))
    if jobs > 1:
        clash = [o for o, on in (("--detect-profile", detect_profile), ("--junit-xml", junit_xml),
                                 ("--dump-mismatches", dump_mismatches), ("--shard", shard))
                 if on]
        if clash:
            _verify_exit(2, f"--jobs {jobs} cannot be combined with {', '.join(clash)} "
                            "(run those with --jobs 1)", as_json, "usage")
    root = Path(root) if root else default_golden_root()
    show = (not no_progress and sys.stderr.isatty() and os.environ.get("CI", "").lower() != "true")
    try:
        expectations = load_expectations(expectations_path) if expectations_path else None
        backend = get_backend(backend_spec, device=device)
    except (ExpectationsError, UnknownBackendError) as e:
        _verify_exit(2, str(e), as_json, "usage")
    except BackendUnavailable as e:
        _verify_exit(4, f"backend unavailable: {e}", as_json, "unavailable")
    bar = click.progressbar(length=1, label=f"verify {backend_spec}", file=sys.stderr, hidden=not show)

    def progress(gf, i, n):
        bar.length = n
        bar.update(1)
    dumps = [] if dump_mismatches else None
    try:
        with bar:
            if detect_profile:
                d = _detect(backend, root=root, levels=levels, ops=ops, formats=formats,
                            src_dtypes=src_dtypes, classes=classes,
                            native=profiles[0] if profiles else None, progress=progress)
                code = 0 if d["matches"] else 1
                d["exit_code"] = code
            elif jobs > 1:
                from .verify.parallel import verify_parallel
                from .verify.run import check_backend, plan_files
                from .verify.engine import select_files
                check_backend(backend)
                _, sel = select_files(root, levels=levels, ops=ops, profiles=list(profiles) or None,
                                      formats=formats, src_dtypes=src_dtypes, classes=classes,
                                      suite=suite)
                planned, _ = plan_files(backend, sel, ops=ops, profiles=list(profiles) or None,
                                        name=backend_spec,
                                        claimed_names=list(getattr(backend, "profiles", ())))
                bar.length = max(1, len(planned))
                d = verify_parallel(
                    {"backend": backend_spec, "device": device, "root": str(root),
                     "levels": list(levels), "ops": ops, "profiles": list(profiles) or None,
                     "formats": formats, "src_dtypes": src_dtypes, "classes": classes,
                     "suite": suite, "max_errors": max_errors,
                     "expectations_path": expectations_path, "strict_xpass": strict_xpass},
                    jobs, progress=lambda rel, i, n: bar.update(1),
                    planned=[f.relpath for f in planned])
                code = d["exit_code"]
            else:
                rep = verify(backend, root=root, levels=levels, ops=ops, profiles=list(profiles) or None,
                             formats=formats, src_dtypes=src_dtypes, classes=classes, suite=suite,
                             max_errors=max_errors, expectations=expectations,
                             strict_xpass=strict_xpass, progress=progress, dump=dumps,
                             shard=shard_kn)
                d, code = rep.doc, rep.exit_code
    except SelectionError as e:
        _verify_exit(2, str(e), as_json, "usage")
    except GoldenIntegrityError as e:
        _verify_exit(3, f"golden integrity: {e}", as_json, "integrity")
    except BackendUnavailable as e:
        _verify_exit(4, f"backend unavailable: {e}", as_json, "unavailable")
    except KeyboardInterrupt:
        _verify_exit(130, "interrupted", as_json, "interrupted")
    except MXRefError as e:             # a verify worker died (--jobs)
        _verify_exit(1, str(e), as_json, "error")
    if detect_profile:
        text = detect_text(d)
    else:
        text = text_report(d)
        if junit_xml:
            Path(junit_xml).write_bytes(_junit(d, rep.cases_by_test))
        if dumps:
            d["dumped"] = _dump(root, dumps, Path(dump_mismatches))
    if json_out:
        Path(json_out).write_text(json.dumps(d, indent=1) + "\n")
    click.echo(json.dumps(d, indent=1) if as_json else text)
    if code == 5:
        click.echo("nothing selected: no golden case matches the filters", err=True)
    elif code == 4:
        click.echo("the backend could run none of the selected cases (all unsupported)", err=True)
    sys.exit(code)


class _LazyCommand(click.Command):
    """A subcommand whose implementation is imported only when it runs (`mxref --help` and the
    other commands stay free of torch/transformers imports)."""

    def __init__(self, name: str, target: str, short_help: str):
        super().__init__(name, short_help=short_help, help=short_help, add_help_option=False)
        self._target = target

    def _load(self) -> click.Command:
        import importlib

        module, attr = self._target.split(":")
        return getattr(importlib.import_module(module), attr)

    def make_context(self, info_name, args, parent=None, **extra):
        return self._load().make_context(info_name, args, parent=parent, **extra)


def _register_extensions():
    from .decompose_cli import decompose_cmd
    main.add_command(decompose_cmd)
    from .leaderboard.cli import leaderboard_group
    main.add_command(leaderboard_group)
    main.add_command(_LazyCommand(
        "train", "mxkernels.training.cli:train_group",
        "Train Llama/Qwen models with MX recipes; compare runs; experiment grids."))


_register_extensions()

if __name__ == "__main__":  # pragma: no cover
    main()
