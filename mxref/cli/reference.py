"""Reference commands: formats, profiles, quantize, compare, warmup (numpy at import; the
Numba kernels load inside the commands that quantize)."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import click
import numpy as np

from ..errors import MXRefError
from ..formats import FORMATS
from ..profiles import PROFILES, get_profile
from .common import OutputPathError, fail, prepare_output, write_atomic

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_activations_bf16.npy"


@click.command("formats")
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


@click.command("profiles")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def profiles_cmd(name, as_json):
    """List the named semantic profiles, or show every knob of one."""
    try:
        selected = [get_profile(name)] if name else list(PROFILES.values())
    except MXRefError as e:
        fail(str(e))
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
        fail(f"{path}: only .npy files are read (no pickle); got suffix {p.suffix!r}")
    try:
        arr = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read as .npy: {e}")
    return arr, source_dtype, p.name


@click.command("quantize")
@click.argument("input_path", required=False, metavar="INPUT.npy")
@click.option("-f", "--format", "fmt", required=True, type=click.Choice(list(FORMATS)))
@click.option("-p", "--profile", default="ocp", show_default=True)
@click.option("--axis", default=-1, show_default=True, type=int)
@click.option("--source-dtype", type=click.Choice(["float32", "float16", "bfloat16"]),
              help="For raw uint16/uint32 bit-pattern inputs.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), required=True,
              help="Output .npz with codes, scales, packed bytes (and tensor_scale), written "
                   "to exactly this path; missing directories are created.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def quantize_cmd(input_path, fmt, profile, axis, source_dtype, out, force, as_json):
    """Quantize INPUT.npy (default: the bundled sample) and write codes and scales."""
    from ..quantize import quantize

    if Path(out).exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    try:
        prepare_output(out, "--out")
    except OutputPathError as e:
        fail(str(e))
    arr, src, label = _load_input(input_path, source_dtype)
    try:
        mx = quantize(arr, fmt, profile, axis=axis, source_dtype=src)
    except MXRefError as e:
        fail(str(e))
    payload = {"codes": mx.codes, "scales": mx.scales, "packed": mx.packed()}
    if mx.tensor_scale is not None:
        payload["tensor_scale"] = np.asarray(mx.tensor_scale, dtype=np.float32)
    buf = io.BytesIO()
    np.savez(buf, **payload)       # to a buffer: np.savez(path) would append .npz to the name
    try:
        write_atomic(out, buf.getvalue())
    except OSError as e:
        fail(f"--out {out}: cannot write: {e}")
    summary = {"schema": "mxref-quantize/1", "input": label, "shape": list(arr.shape),
               "format": fmt, "profile": mx.profile.name, "axis": mx.axis,
               "blocks": int(mx.scales.size), "nan_blocks": int(_nan_blocks(mx).sum()),
               "out": out}
    click.echo(json.dumps(summary, indent=2) if as_json else
               f"{label} {tuple(arr.shape)} -> {fmt}/{mx.profile.name}: "
               f"{summary['blocks']} blocks written to {out}")


def _nan_blocks(mx):
    return mx.scales == (0x7F if mx.fmt.is_nvfp4 else 0xFF)


@click.command("compare")
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
    from ..quantize import quantize

    arr, src, label = _load_input(input_path, source_dtype)
    fmts = fmts or tuple(FORMATS)
    try:
        base_prof = get_profile(baseline)
        profs = [get_profile(p) for p in profiles] if profiles else list(PROFILES.values())
    except MXRefError as e:
        fail(str(e))
    rows = []
    with click.progressbar(length=len(fmts) * len(profs), label="quantizing",
                           file=sys.stderr) as bar:
        for f in fmts:
            try:
                base = quantize(arr, f, base_prof, axis=axis, source_dtype=src)
            except MXRefError as e:
                fail(str(e))
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


@click.command("warmup")
def warmup_cmd():
    """Compile the core Numba kernels now: quantize and dequantize for every format, and SR.
    GEMM, rotation, conversion and correction kernels still compile on first use."""
    import time

    from .. import warmup

    t = time.perf_counter()
    warmup()
    click.echo(f"compiled mxref kernels in {time.perf_counter() - t:.1f} s", err=True)
