"""`mxref scan`: audit MX / NVFP4 safetensors checkpoints (docs/scan.md).

Exit codes: 0 clean; 1 anomalies found (or --against excluded); 2 usage (bad option, unknown
layout or profile, unwritable --plot path); 3 a file is unreadable or corrupt (nothing written).
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import MXRefError
from .common import EXIT_USAGE, OutputPathError, fail, prepare_output, write_atomic

EXIT_ANOMALY = 1
EXIT_CORRUPT = 3


def _table(doc) -> str:
    rows = [("tensor", "format", "shape", "blocks", "scales", "fingerprint", "anomalies")]
    for t in doc["tensors"]:
        fp = t["fingerprint"]
        hist = t["scale_histogram"]
        sc = f"{min(hist)}..{max(hist)}" if hist else "-"
        call = fp["verdict"]
        if fp["verdict"] in ("confident", "ambiguous"):
            call += ": " + ",".join(fp["call"][:4]) + ("..." if len(fp["call"]) > 4 else "")
        if fp["confidence"] is not None:
            call += f" ({fp['confidence']:.4f})"
        rows.append((t["name"], f"{t['format']} ({t['layout']})",
                     "x".join(map(str, t["shape"])), str(t["blocks"]), sc, call,
                     ",".join(a["kind"] for a in t["anomalies"]) or "-"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    for t in doc["tensors"]:
        lines += [f"  {t['name']}: {a['message']}" for a in t["anomalies"]]
    s = doc["summary"]
    lines.append(f"{s['tensors']} quantized tensor(s), {s['blocks']} blocks, "
                 f"{len(doc['unquantized'])} unquantized; {s['anomalies']} anomaly(ies)")
    for fmt, profs in s["consensus"].items():
        lines.append(f"consistent with every {fmt} tensor: {', '.join(profs) or 'none'}")
    return "\n".join(lines)


@click.command("scan")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--layout", type=click.Choice(["auto", "gpt-oss", "mx", "nvfp4"]), default="auto",
              show_default=True, help="Read every quantized tensor in this layout.")
@click.option("--format", "fmt", default=None,
              help="MX format of unpacked uint8 codes (mxfp4, mxfp6_e2m3, mxfp6_e3m2, ...).")
@click.option("--against", default=None, metavar="PROFILE",
              help="Also check each tensor is consistent with this profile (exit 1 if not).")
@click.option("--json", "as_json", is_flag=True, help="Print one mxref-scan/1 JSON document.")
@click.option("--plot", "plot_path", default=None, type=click.Path(),
              help="Write scale histograms and fingerprint evidence to this PNG (matplotlib).")
def scan_cmd(paths, layout, fmt, against, as_json, plot_path):
    """Audit MX / NVFP4 .safetensors checkpoints (files, or directories with an index):
    format and layout of each tensor, invalid scale bytes and codes, padding, and which scale
    rule (profile) produced them."""
    from ..formats import get_format
    from ..profiles import get_profile
    from ..scan import ScanFileError, plan, scan

    try:
        if fmt is not None:
            get_format(fmt)
        if against is not None:
            get_profile(against)
        if plot_path is not None:
            from ..scan.plot import check_matplotlib
            check_matplotlib()
        planned = plan(paths, layout, fmt)        # every header checked before any write
        if plot_path is not None:
            prepare_output(plot_path, "--plot")
    except ScanFileError as e:
        fail(str(e), EXIT_CORRUPT)
    except (MXRefError, OutputPathError) as e:
        fail(str(e), EXIT_USAGE)
    total = sum(q.codes.nbytes for _, qs, _ in planned for q in qs)
    bar = None
    if sys.stderr.isatty() and total:
        bar = click.progressbar(length=total, label="scanning", file=sys.stderr)
        bar.__enter__()
    try:
        doc = scan(paths, layout, fmt, against, progress=bar.update if bar else None,
                   planned=planned)
    except ScanFileError as e:
        fail(str(e), EXIT_CORRUPT)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if plot_path is not None:
        from ..scan.plot import render
        write_atomic(plot_path, render(doc))
    click.echo(json.dumps(doc, indent=1) if as_json else _table(doc))
    sys.exit(EXIT_ANOMALY if doc["exit"] else 0)
