"""`mxref decompose`: the exact scale / deadzone / grid error decomposition from the shell.

Human table on stdout, ``--json`` one document (schema ``mxref-decompose/1``), errors on
stderr with exit 2 (usage errors and bad input alike), ``--plot`` a PNG, ``--per-block`` a
CSV with one row per block and rule. Inputs: .npy (no pickle), .safetensors, Arrow IPC
(.arrow / .feather: fixed-shape-tensor or float columns), or ``--synthetic DIST``.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import click
import numpy as np

from ..errors import MXRefError
from ..formats import get_format
from ..profiles import get_profile
from .common import OutputPathError, fail, prepare_output, write_atomic

SCHEMA = "mxref-decompose/1"
MAX_PLOT_SECTIONS = 4
#: shown in --help without importing mxref.decompose (Numba); a test holds this equal to
#: mxref.decompose.DISTRIBUTIONS, and decompose() itself rejects unknown names
DISTRIBUTION_NAMES = ("gaussian", "laplace", "student-t3", "uniform", "outlier")


def _parse_shape(text: str) -> tuple:
    try:
        shape = tuple(int(t) for t in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise click.BadParameter(f"{text!r} is not a shape like 1024x1024", param_hint="--shape")
    return shape


def _parse_rules(text: str | None, is_nvfp4: bool) -> list[str]:
    from ..decompose import SCALE_RULE_CHOICES

    choices = ("profile",) + SCALE_RULE_CHOICES
    if text is None:
        return ["profile", "ideal"] if is_nvfp4 else ["floor", "rceil", "even", "ideal"]
    rules = [r.strip() for r in text.split(",") if r.strip()]
    bad = [r for r in rules if r not in choices]
    if not rules or bad:
        raise click.BadParameter(f"unknown rule(s) {', '.join(bad) or text!r}; choose from "
                                 f"{', '.join(choices)}", param_hint="--rules")
    return rules


# ---- inputs --------------------------------------------------------------------------------
def _load_npy(p: Path, tensor):
    if tensor is not None:
        fail("--tensor selects a tensor of a .safetensors file or a column of an Arrow file; "
             f"{p.name} is a single .npy array")
    try:
        return [(p.name, None, np.load(p, allow_pickle=False))]
    except (OSError, ValueError) as e:
        fail(f"{p}: cannot read as .npy: {e}")


def _load_safetensors(p: Path, tensor):
    try:
        from safetensors import safe_open
    except ImportError:
        fail(f"{p.name}: reading .safetensors needs the safetensors package: "
             "pip install safetensors (or 'mxref[train]')")

    try:
        with safe_open(str(p), framework="numpy") as f:
            names = list(f.keys())
            if tensor is not None and tensor not in names:
                fail(f"{p.name}: no tensor {tensor!r}; it holds {', '.join(names) or 'none'}")
            pick = [tensor] if tensor is not None else names
            if not pick:
                fail(f"{p.name}: the file holds no tensors")
            return [(f"{p.name}:{n}", n, f.get_tensor(n)) for n in pick]
    except (OSError, ValueError, TypeError) as e:
        fail(f"{p}: cannot read as .safetensors: {e}")
    except Exception as e:   # safetensors raises its own SafetensorError for corrupt files
        if type(e).__name__ != "SafetensorError":
            raise
        fail(f"{p}: cannot read as .safetensors: {e}")


def _arrow_array(col):
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return arr.to_numpy_ndarray()
    if pa.types.is_floating(arr.type):
        return arr.to_numpy(zero_copy_only=False)     # nulls read as NaN (special elements)
    return None


def _load_arrow(p: Path, tensor):
    import pyarrow as pa
    from pyarrow import ipc

    try:
        try:
            table = ipc.open_file(str(p)).read_all()
        except pa.ArrowInvalid:
            table = ipc.open_stream(str(p)).read_all()
    except (OSError, pa.ArrowInvalid) as e:
        fail(f"{p}: cannot read as Arrow IPC: {e}")
    names = table.column_names
    if tensor is not None and tensor not in names:
        fail(f"{p.name}: no column {tensor!r}; it has {', '.join(names) or 'none'}")
    out = []
    for n in ([tensor] if tensor is not None else names):
        arr = _arrow_array(table.column(n))
        if arr is None:
            if tensor is not None:
                fail(f"{p.name}: column {n!r} has type {table.column(n).type}; need a float "
                     "column or a fixed-shape tensor")
            continue
        out.append((f"{p.name}:{n}", n, arr))
    if not out:
        fail(f"{p.name}: no float or fixed-shape-tensor column among {', '.join(names)}")
    return out


def load_sections(path: str, tensor: str | None) -> list[tuple]:
    """[(label, tensor name or None, numpy array)] for each tensor to decompose."""
    p = Path(path)
    if not p.is_file():
        fail(f"{path}: no such file")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return _load_npy(p, tensor)
    if suffix == ".safetensors":
        return _load_safetensors(p, tensor)
    if suffix in (".arrow", ".feather", ".ipc"):
        return _load_arrow(p, tensor)
    fail(f"{path}: unknown file type {suffix!r}; use .npy, .safetensors, .arrow or .feather")


# ---- outputs -------------------------------------------------------------------------------
def _json_clean(v):
    if isinstance(v, dict):
        return {k: _json_clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_clean(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _pct(v, width=8, digits=2):
    return f"{'n/a':>{width}}" if not math.isfinite(v) else f"{100 * v:>{width}.{digits}f}"


def _num(v, width=9, digits=5):
    return f"{'n/a':>{width}}" if not math.isfinite(v) else f"{v:>{width}.{digits}f}"


def _table(section) -> list[str]:
    lines = [f"{section['input']}  shape {tuple(section['shape'])}  {section['source_dtype']}  "
             f"-> {section['format']} / {section['profile']}, axis {section['axis']}, "
             f"{section['n_blocks']} blocks, {section['n_special']} special elements",
             f"{'rule':<12}{'scale%':>8}{'dead%':>8}{'grid%':>8}{'cross%':>9}{'err/sig%':>10}"
             f"{'gain':>9}{'zeroed%':>9}{'satur%':>8}{'s/s*':>8}"]
    for rule, st in section["results"].items():
        sh = st["energy_share"]
        lines.append(f"{rule:<12}{_pct(sh['scale'])}{_pct(sh['dead'])}{_pct(sh['grid'])}"
                     f"{_pct(sh['cross'], 9)}{_pct(st['error_to_signal'], 10, 3)}"
                     f"{_num(st['gain'])}{_pct(st['zeroed_fraction'], 9)}"
                     f"{_pct(st['saturated_fraction'])}{_num(st['mean_s_ratio'], 8, 4)}")
    lines.append("shares of ||e||^2; cross = 2<e_scale, e_dead + e_grid>: the four add to 100%")
    return lines


BLOCK_COLUMNS = ("s", "s_ideal", "s_ratio", "n_elements", "n_special", "n_zeroed", "n_deadzone",
                 "n_saturated", "energy_scale", "energy_dead", "energy_grid", "energy_cross",
                 "energy_error", "energy_signal")


def _blocks_csv(rows_by_section) -> bytes:
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    w.writerow(("input", "rule", "block") + BLOCK_COLUMNS)
    for label, rule, bst in rows_by_section:
        cols = [np.asarray(bst[c]).reshape(-1) for c in BLOCK_COLUMNS]
        for i in range(cols[0].size):
            w.writerow([label, rule, i] + [repr(float(c[i])) if c.dtype.kind == "f"
                                           else int(c[i]) for c in cols])
    return fh.getvalue().encode()


def _plot_format(path) -> str:
    """The image format --plot writes (its suffix, PNG without one), checked before the work:
    matplotlib installed and the format one its Agg canvas writes."""
    try:
        import matplotlib
    except ImportError:
        fail("--plot needs matplotlib: pip install 'mxref[plot]'")
    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    kind = Path(path).suffix[1:].lower() or "png"
    if kind not in FigureCanvasAgg.get_supported_filetypes():
        fail(f"--plot {path}: matplotlib cannot write .{kind} images; use .png, .svg or .pdf")
    return kind


def _plot(sections, ratios, kind: str) -> bytes:
    import matplotlib.pyplot as plt

    shown = sections[:MAX_PLOT_SECTIONS]
    fig, axes = plt.subplots(len(shown), 2, figsize=(12, 4.8 * len(shown)), squeeze=False)
    colors = {"scale": "#d62728", "dead": "#1f77b4", "grid": "#7f7f7f", "cross": "#ff9896"}
    for row, sec in zip(axes, shown):
        ax_bar, ax_hist = row
        rules = list(sec["results"])
        pos = np.arange(len(rules))
        width = 0.2
        for k, c in enumerate(("scale", "dead", "grid", "cross")):
            vals = [100 * r["energy_share"][c] * r["error_to_signal"] for r in
                    sec["results"].values()]
            ax_bar.bar(pos + (k - 1.5) * width, vals, width, color=colors[c],
                       hatch="//" if c == "cross" else None,
                       label="2<e_scale, e_dead+e_grid>" if c == "cross" else f"e_{c}")
        tot = [100 * r["error_to_signal"] for r in sec["results"].values()]
        ax_bar.plot(pos, tot, "k_", markersize=40, markeredgewidth=2.5,
                    label="total error (= sum of the four)")
        ax_bar.axhline(0, color="black", linewidth=0.8)
        ax_bar.set_xticks(pos, rules)
        ax_bar.set_ylabel("energy / signal energy (%)")
        ax_bar.set_title(f"{sec['input']} - {sec['format']} / {sec['profile']}\n"
                         "error energy by component and scale rule", fontsize=10)
        ax_bar.legend(fontsize=7, markerscale=0.3, loc="upper center", ncol=3,
                      bbox_to_anchor=(0.5, -0.08))
        for rule in rules:
            v = ratios[(sec["input"], rule)]
            v = v[np.isfinite(v)]
            if rule == "ideal" or not v.size:
                continue
            ax_hist.hist(v, bins=75, range=(0.0, 2.5), histtype="step", linewidth=1.5,
                         label=f"{rule} (mean {v.mean():.3f})")
        ax_hist.axvline(1.0, color="black", linestyle="--", linewidth=1, label="ideal s = s*")
        ax_hist.set_xlabel("s / s*  (actual block scale / ideal scale amax / M)")
        ax_hist.set_ylabel("blocks")
        ax_hist.set_title("block scale overshoot s / s*", fontsize=10)
        ax_hist.legend(fontsize=7)
    if len(sections) > len(shown):
        fig.suptitle(f"first {len(shown)} of {len(sections)} tensors", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=kind, dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _write_output(path, option: str, make) -> None:
    """Write ``make()``'s bytes to ``path`` atomically; exit 2 naming the option if it fails."""
    try:
        write_atomic(path, make())
    except OSError as e:
        fail(f"{option} {path}: cannot write: {e}")


@click.command("decompose")
@click.argument("file", required=False, metavar="FILE")
@click.option("--synthetic", "dist", metavar="DIST",
              help=f"Decompose synthetic data instead of FILE: {', '.join(DISTRIBUTION_NAMES)}.")
@click.option("-f", "--format", "fmt", required=True, help="Block format (mxfp4, nvfp4, ...).")
@click.option("-p", "--profile", default="ocp", show_default=True)
@click.option("--rules", default=None, metavar="R[,R]",
              help="Scale rules to compare: floor, rceil, ceil, even, round_down, ideal, profile "
                   "[default: floor,rceil,even,ideal; nvfp4: profile,ideal].")
@click.option("--axis", default=-1, show_default=True, type=int)
@click.option("--shape", default="1024x1024", show_default=True, help="Synthetic shape, AxB.")
@click.option("--seed", default=0, show_default=True, type=int, help="Synthetic seed.")
@click.option("--tensor", "tensor", default=None, help="Tensor (safetensors) or column (Arrow).")
@click.option("--source-dtype", type=click.Choice(["float32", "float16", "bfloat16"]),
              help="For raw uint16/uint32 bit-pattern arrays.")
@click.option("--from-float64", type=click.Choice(["rne"]),
              help="Accept float64 input, rounded to fp32 (RNE).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG here.")
@click.option("--per-block", "block_path", type=click.Path(dir_okay=False),
              help="Write per-block statistics (CSV) here.")
def decompose_cmd(file, dist, fmt, profile, rules, axis, shape, seed, tensor, source_dtype,
                  from_float64, as_json, plot_path, block_path):
    """Decompose the quantization error of FILE (or --synthetic DIST) into scale bias,
    deadzone and grid noise, exactly, for each scale rule."""
    from ..decompose import decompose, synthetic

    if (file is None) == (dist is None):
        raise click.UsageError("give exactly one of FILE or --synthetic DIST")
    if dist is not None and tensor is not None:
        raise click.UsageError("--tensor selects from a FILE; it has no meaning with --synthetic")
    try:
        bf = get_format(fmt)
        prof = get_profile(profile)
    except MXRefError as e:
        fail(str(e))
    rule_list = _parse_rules(rules, bf.is_nvfp4)
    plot_kind = _plot_format(plot_path) if plot_path else None
    try:                      # before the work, so no result is lost at its end
        for path, option in ((plot_path, "--plot"), (block_path, "--per-block")):
            if path:
                prepare_output(path, option)
    except OutputPathError as e:
        fail(str(e))
    if dist is not None:
        shp = _parse_shape(shape)
        try:
            inputs = [(f"synthetic {dist} {'x'.join(map(str, shp))} seed {seed}", None,
                       synthetic(dist, shp, seed))]
        except MXRefError as e:
            fail(str(e))
    else:
        inputs = load_sections(file, tensor)
    sections, block_rows, ratios = [], [], {}
    for label, name, arr in inputs:
        results = {}
        try:
            for rule in rule_list:
                d = decompose(arr, bf, prof, axis=axis, source_dtype=source_dtype,
                              from_float64=from_float64,
                              scale_rule=None if rule == "profile" else rule)
                results[rule] = d.stats()
                if block_path or plot_path:
                    bst = d.block_stats()
                    ratios[(label, rule)] = np.asarray(bst["s_ratio"]).reshape(-1)
                    if block_path:
                        block_rows.append((label, rule, bst))
        except MXRefError as e:
            fail(f"{label}: {e}")
        first = next(iter(results.values()))
        sections.append({
            "input": label, "tensor": name, "shape": list(arr.shape),
            "source_dtype": d.source_dtype, "format": bf.name, "profile": prof.name,
            "axis": d.axis, "n_blocks": first["n_blocks"], "n_elements": first["n_elements"],
            "n_special": first["n_special"], "results": results})
    if block_path:
        _write_output(block_path, "--per-block", lambda: _blocks_csv(block_rows))
    if plot_path:
        _write_output(plot_path, "--plot", lambda: _plot(sections, ratios, plot_kind))
    if as_json:
        doc = {"schema": SCHEMA, "format": bf.name, "profile": prof.name, "rules": rule_list,
               "sections": sections}
        if plot_path:
            doc["plot"] = plot_path
        if block_path:
            doc["per_block"] = block_path
        click.echo(json.dumps(_json_clean(doc), indent=2))
        return
    for k, sec in enumerate(sections):
        if k:
            click.echo("")
        for line in _table(sec):
            click.echo(line)
