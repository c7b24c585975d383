"""The static leaderboard site: LEADERBOARD.md, index.html (sortable tables), leaderboard.csv and
PNG plots, all from records that already passed the gate.

One column description per suite kind drives both the Markdown and the HTML tables: a column is a
title, a function of the record giving (display text, raw sort value), and whether it sorts as a
number. The HTML page is self-contained (inline CSS and JS, no external request); its tables sort
on a header click, and ``index.html#sort=table-gpu-kernels:4:desc`` applies a sort on load
(column index from 0; several specs separated by commas).
"""
from __future__ import annotations

import csv
import html
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .schema import SUITES

MISSING = "–"
SUITE_TITLES = {"cpu-emulator": "CPU emulator", "gpu-kernels": "GPU kernels",
                "training": "Training", "stacks": "Stacks, ranked per workload"}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


# ---- small pure formatters --------------------------------------------------------------------
def _get(d, *keys):
    """d[k0][k1]... or None where any level is missing or null."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def fmt_num(x: float) -> str:
    """About four significant digits, no exponent for ordinary magnitudes ('123.4', '12,345')."""
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 10:
        return f"{x:.2f}"
    if a >= 1:
        return f"{x:.3f}"
    return "0" if a == 0 else f"{x:.4g}"


def seconds(value: float, unit: str) -> float | None:
    """`value` in `unit` as seconds, or None when `unit` is not a time unit."""
    scale = _TIME_UNITS.get(unit)
    return None if scale is None else value * scale


def fmt_time(value: float, unit: str) -> str:
    """A duration in the largest unit that keeps it >= 1 ('123.4 us', '2.500 ms', '1.203 s')."""
    s = seconds(value, unit)
    if s is None:
        return f"{fmt_num(value)} {unit}"
    for name, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{fmt_num(s / scale)} {name}"
    return f"{fmt_num(s / 1e-9)} ns"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}" if x >= 0.095 else f"{x:.2g}"


def fmt_count(n: float) -> str:
    """Token counts: '524,288', '1.05M', '2.10B'."""
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    return f"{n:,.0f}"


# A record's ``metric.spread`` is the full range of its repeats over their median,
# (max - min) / median. It is shown as that ("8.0%" under a "range (max-min)/median" header),
# never as a "±" (which reads as a half-width and doubles it); the page, the CSV
# (range_over_median) and `mxref leaderboard reproduce` all name it so.
SPREAD_NAME = "range (max-min)/median"
CSV_SPREAD = "range_over_median"


def fmt_spread(x: float) -> str:
    """The relative range (max - min) / median of the repeats, in percent: '8.0%'."""
    return f"{x * 100:.1f}%"


def machine_label(m: dict) -> str:
    """The accelerator, its runtime and driver; or the CPU and its core count."""
    acc = m.get("accelerator")
    if acc:
        parts = [acc["name"], acc["runtime"]]
        if acc.get("driver"):
            parts.append(f"driver {acc['driver']}")
        return ", ".join(parts)
    return f"{m['cpu']}, {m['cores']} cores"


def sort_key(rec: dict):
    suite = SUITES.index(rec["suite"]) if rec["suite"] in SUITES else len(SUITES)
    return (suite, rec["machine"]["slug"], rec["group"], rec["entry"], rec["impl"],
            rec["record_sha256"])


# ---- columns ----------------------------------------------------------------------------------
Cell = tuple  # (text or None for missing, raw sort value or None)


@dataclass(frozen=True)
class Column:
    title: str
    cell: Callable[[dict], Cell]
    numeric: bool = False
    css: str = ""           # HTML cell class: "wide" / "narrow" text columns wrap at a width


def _text(*keys):
    return lambda r: (_get(r, *keys), None)


def _median(r):
    m = r["metric"]
    raw = seconds(m["median"], m["unit"])
    return fmt_time(m["median"], m["unit"]), m["median"] if raw is None else raw


def _spread(r):
    return fmt_spread(r["metric"]["spread"]), r["metric"]["spread"]


def _rate(r):
    rate = _get(r, "metric", "rate")
    if rate is None:
        return None, None
    unit = _get(r, "metric", "rate_unit")
    return (f"{fmt_num(rate)} {unit}" if unit else fmt_num(rate)), rate


def _roofline(r):
    ratio = _get(r, "roofline", "ratio")
    if ratio is None:
        return None, None
    return f"{fmt_ratio(ratio)} {r['roofline']['ratio_label']}", ratio


def best_peer(r) -> dict | None:
    """The strongest peer measured in the same run: highest ratio (throughput against the same
    roofline, higher is better); among peers without a ratio, the shortest median."""
    peers = r.get("peers") or []
    rated = [p for p in peers if p.get("ratio") is not None]
    if rated:
        return max(rated, key=lambda p: p["ratio"])
    timed = [p for p in peers if seconds(p["median"], p["unit"]) is not None]
    return min(timed, key=lambda p: seconds(p["median"], p["unit"])) if timed else None


def _peer(r):
    p = best_peer(r)
    if p is None:
        return None, None
    if p.get("ratio") is not None:
        label = p.get("ratio_label") or ""
        return f"{p['name']} ({fmt_ratio(p['ratio'])} {label})".replace(" )", ")"), p["ratio"]
    return f"{p['name']} ({fmt_time(p['median'], p['unit'])})", None


def _verify(r):
    v = r["verify"]
    parts = [v["status"]]
    if v.get("cases") is not None:
        parts.append(f"{v['cases']:,} cases")
    parts.append(v["sha256"][:8])
    return " · ".join(parts), None


def _commit(r):
    g = r["git"]
    return g["commit"][:7] + ("-dirty" if g.get("dirty") else ""), None


def _op(r):
    return f"{r['op']} / {r['format']} / {r['profile']}", None


def _machine(r):
    return r["machine"]["slug"], None


def _tokens(r):
    n = _get(r, "params", "tokens")
    return (None, None) if n is None else (fmt_count(n), n)


def _step_time(r):
    text, raw = _median(r)
    return f"{text}, range {fmt_spread(r['metric']['spread'])}", raw


def _quality(key, fmt):
    def cell(r):
        x = _get(r, "quality", key)
        return (None, None) if x is None else (fmt(x), x)
    return cell


def _validation(r):
    v = r["verify"]
    n = v.get("cases")
    if n is None and isinstance(_get(r, "quality", "checks"), list):
        n = len(r["quality"]["checks"])
    return (v["status"] if n is None else f"{v['status']} ({n} checks)"), None


KERNEL_COLUMNS = (
    Column("machine", _machine, css="narrow"),
    Column("entry", _text("entry"), css="wide"),
    Column("impl", _text("impl"), css="narrow"),
    Column("op / format / profile", _op, css="narrow"),
    Column("median", _median, numeric=True),
    Column(SPREAD_NAME, _spread, numeric=True),
    Column("rate", _rate, numeric=True),
    Column("roofline ratio", _roofline, numeric=True),
    Column("best peer", _peer, numeric=True, css="narrow"),
    Column("verify", _verify, css="narrow"),
    Column("commit", _commit),
)

TRAINING_COLUMNS = (
    Column("machine", _machine),
    Column("entry", _text("entry")),
    Column("recipe", _text("params", "recipe")),
    Column("model", _text("params", "model")),
    Column("tokens", _tokens, numeric=True),
    Column(f"step time, {SPREAD_NAME}", _step_time, numeric=True),
    Column("tokens/s", _rate, numeric=True),
    Column("ratio vs bf16", _roofline, numeric=True),
    Column("dL vs bf16", _quality("dl_vs_bf16", lambda x: f"{x:+.4f}"), numeric=True),
    Column("final loss", _quality("final_loss", lambda x: f"{x:.4f}"), numeric=True),
    Column("quant share", _quality("quant_share", lambda x: f"{x * 100:.1f}%"), numeric=True),
    Column("peak mem", _quality("peak_mem_gib", lambda x: f"{x:.1f} GiB"), numeric=True),
    Column("validation", _validation),
    Column("commit", _commit),
)

COLUMNS = {"cpu-emulator": KERNEL_COLUMNS, "gpu-kernels": KERNEL_COLUMNS,
           "training": TRAINING_COLUMNS, "stacks": KERNEL_COLUMNS}
# the HTML tables add, before the verify column, each entry's trend over the stored commits
TREND_TITLE = "trend over commits"

CSV_FIELDS = ("suite", "machine", "accelerator", "entry", "impl", "op", "format", "profile",
              "group", "metric_name", "unit", "median", CSV_SPREAD, "rate", "rate_unit",
              "roofline_name", "roofline_ratio", "ratio_label", "verify_kind", "verify_status",
              "verify_sha256", "commit", "dirty", "suite_version", "created", "record_sha256")


def csv_row(r: dict) -> dict:
    return {
        "suite": r["suite"], "machine": r["machine"]["slug"],
        "accelerator": _get(r, "machine", "accelerator", "name"),
        "entry": r["entry"], "impl": r["impl"], "op": r["op"], "format": r["format"],
        "profile": r["profile"], "group": r["group"],
        "metric_name": r["metric"]["name"], "unit": r["metric"]["unit"],
        "median": r["metric"]["median"], CSV_SPREAD: r["metric"]["spread"],
        "rate": _get(r, "metric", "rate"), "rate_unit": _get(r, "metric", "rate_unit"),
        "roofline_name": _get(r, "roofline", "name"),
        "roofline_ratio": _get(r, "roofline", "ratio"),
        "ratio_label": _get(r, "roofline", "ratio_label"),
        "verify_kind": r["verify"]["kind"], "verify_status": r["verify"]["status"],
        "verify_sha256": r["verify"]["sha256"], "commit": r["git"]["commit"],
        "dirty": "true" if r["git"]["dirty"] else "false",
        "suite_version": r["golden"]["suite_version"], "created": r["created"],
        "record_sha256": r["record_sha256"],
    }


# ---- grouping ---------------------------------------------------------------------------------
def by_suite(records):
    """{suite: [records sorted by machine, group, entry]} for the suites that have records."""
    out = {}
    for r in sorted(records, key=sort_key):
        out.setdefault(r["suite"], []).append(r)
    return out


def machines_of(records) -> dict:
    """{slug: label} in slug order (the first record of a slug describes it)."""
    out = {}
    for r in sorted(records, key=sort_key):
        out.setdefault(r["machine"]["slug"], machine_label(r["machine"]))
    return dict(sorted(out.items()))


def _suite_order(suites):
    return [s for s in SUITES if s in suites] + sorted(s for s in suites if s not in SUITES)


def _summary(records, rejected, built):
    n, k = len(records), len(rejected)
    text = (f"{n} record{'s' if n != 1 else ''}, built {built} (UTC). Only verified records are "
            "shown: a record is published only when the verify report of its own run, matched "
            "by SHA-256, passed.")
    if k:
        text += f" {k} record{'s' if k != 1 else ''} turned away: see Rejected records."
    return text


# ---- links, trends and the stacks ranking -----------------------------------------------------
@dataclass
class SiteContext:
    """What the HTML adds to the records: links to each record's JSON and verify report (copied
    beside the page) and each entry's trend (inline SVG) over the stored commits."""
    record_href: dict = field(default_factory=dict)     # record_sha256 -> relative href
    verify_href: dict = field(default_factory=dict)     # record_sha256 -> relative href
    trends: dict = field(default_factory=dict)          # record_sha256 -> inline <svg>
    roster_href: dict = field(default_factory=dict)     # evidence rel -> relative href


def trend_key(rec: dict) -> tuple:
    return (rec["suite"], rec["machine"]["slug"], rec["entry"])


def trend_points(rec: dict, history: dict) -> list[tuple]:
    """(created, commit, median in the record's unit) of every stored version of `rec`'s entry
    (`history`, from load_history) and `rec` itself, oldest first, one per record hash."""
    seen, pts = set(), []
    for h in list(history.get(trend_key(rec), ())) + [rec]:
        if h["record_sha256"] in seen or h["metric"]["unit"] != rec["metric"]["unit"]:
            continue
        seen.add(h["record_sha256"])
        pts.append((h["created"], h["git"]["commit"][:7], float(h["metric"]["median"])))
    return sorted(pts)


def trend_svg(points, unit: str, width: int = 96, height: int = 24) -> str | None:
    """A sparkline of the medians (lower is drawn lower), one dot per stored record, the last
    one filled; its tooltip lists commit and median of each. None for no points."""
    if not points:
        return None
    ys = [p[2] for p in points]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    n = len(points)
    xy = [(3 + (width - 6) * (i / (n - 1) if n > 1 else 0.5),
           height - 3 - (height - 6) * ((y - lo) / span if hi > lo else 0.5))
          for i, y in enumerate(ys)]
    tip = "; ".join(f"{c} {fmt_time(m, unit)}" for _, c, m in points)
    # inline SVG in HTML needs no xmlns (the page names no external address at all)
    parts = [(f'<svg width="{width}" height="{height}" '
              f'viewBox="0 0 {width} {height}" role="img" class="spark" '
              f'aria-label="median over {n} stored record(s)"><title>{_e(tip)}</title>')]
    if n > 1:
        parts.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="' +
                     " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>')
    for i, (x, y) in enumerate(xy):
        fill = "#1f77b4" if i == n - 1 else "#fff"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{fill}" '
                     'stroke="#1f77b4"/>')
    parts.append("</svg>")
    return "".join(parts)


def ranking(records, rosters=()) -> dict:
    """{(machine, workload): rows} of the stacks suite: the timed records, fastest first (rank
    1, 2, ...), then every stack the rosters list as not timed or unavailable for that workload
    (no rank, no number). A roster row whose record is on the page is not repeated."""
    out = {}
    shown = set()
    for r in sorted(records, key=lambda r: (r["metric"]["median"], r["entry"])):
        if r["suite"] != "stacks":
            continue
        k = (r["machine"]["slug"], _get(r, "params", "workload") or r["entry"])
        row = {"stack": _get(r, "params", "stack") or r["impl"], "profile": r["profile"],
               "verified": r["verify"]["status"] == "pass", "record": r, "reason": None,
               "verify_rel": r["verify"]["report"]}
        out.setdefault(k, []).append(row)
        shown.add((k, row["stack"], r["profile"]))
    for doc in rosters:
        m = doc.get("machine")
        for st in doc.get("stacks") or []:
            name = st.get("name") or st.get("spec")
            if st.get("status") == "unavailable":
                for w in doc.get("workloads") or []:
                    out.setdefault((m, w), []).append(
                        {"stack": name, "profile": MISSING, "verified": None, "record": None,
                         "reason": f"unavailable: {st.get('reason')}", "verify_rel": None})
                continue
            for row in st.get("rows") or []:
                k = (m, row.get("workload"))
                if (k, name, row.get("profile")) in shown:
                    continue
                reason = row.get("reason") or ("record not in the store" if
                                               row.get("status") == "timed" else None)
                out.setdefault(k, []).append(
                    {"stack": name, "profile": row.get("profile"),
                     "verified": bool(row.get("verified")), "record": None,
                     "reason": reason, "verify_rel": row.get("verify_report")})
    for k, rows in out.items():
        rank = 0
        for row in rows:
            if row["record"] is not None:
                rank += 1
                row["rank"] = rank
            else:
                row["rank"] = None
    return dict(sorted(out.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))))


RANK_COLUMNS = ("rank", "stack", "profile", "verified", "median", SPREAD_NAME,
                "ratio to copy roofline", "record", "commit", "note")


def _rank_cells(row) -> list:
    """(text, sort value or None, href or None) per RANK_COLUMNS."""
    r = row["record"]
    ver = {True: "yes", False: "no", None: "not run"}[row["verified"]]
    if r is None:
        return [(MISSING, None, None), (row["stack"], None, None), (row["profile"], None, None),
                (ver, None, row["verify_rel"]), ("not timed", None, None), (MISSING, None, None),
                (MISSING, None, None), (MISSING, None, None), (MISSING, None, None),
                (row["reason"] or "", None, None)]
    med = _median(r)
    ratio = _get(r, "roofline", "ratio")
    note = f"timer: {_get(r, 'params', 'timer') or r['metric']['name']}"
    return [(str(row["rank"]), row["rank"], None), (row["stack"], None, None),
            (row["profile"], None, None), (ver, None, row["verify_rel"]),
            (med[0], med[1], None), (fmt_spread(r["metric"]["spread"]), r["metric"]["spread"],
                                     None),
            ((fmt_ratio(ratio) + " of copy") if ratio else MISSING, ratio, None),
            ("json", None, "record"), (_commit(r)[0], None, None), (note, None, None)]


def _rank_md(ranked) -> list[str]:
    lines = []
    for (machine, workload), rows in ranked.items():
        lines += [f"### {_md_cell(workload)} on `{_md_cell(machine)}`", "",
                  "| " + " | ".join(RANK_COLUMNS) + " |",
                  "|" + "|".join("---" for _ in RANK_COLUMNS) + "|"]
        for row in rows:
            lines.append("| " + " | ".join(_md_cell(t) for t, _, _ in _rank_cells(row)) + " |")
        lines.append("")
    return lines


def _rank_html(ranked, ctx) -> list[str]:
    out = [('<p>Which stack is fastest at producing the bits its profile promises: each stack '
            "is verified (mxref verify of the op, format and profile it claims) in the same job "
            "as it is timed, on the same input, with the same timer; a stack without a passing "
            "verify or without a timing entry is listed, never given a number.</p>")]
    for i, ((machine, workload), rows) in enumerate(ranked.items()):
        tid = f"rank-{i}"
        out += [f"<h3>{_e(workload)} <small>on <code>{_e(machine)}</code></small></h3>",
                (f'<table class="lb rank" id="{_e(tid)}" data-workload="{_e(workload)}" '
                 f'data-machine="{_e(machine)}">'), "<thead><tr>"]
        for c in RANK_COLUMNS:
            num = c in ("rank", "median", SPREAD_NAME, "ratio to copy roofline")
            out.append(f'<th scope="col" tabindex="0" data-type="{"num" if num else "text"}" '
                       f'aria-sort="none">{_e(c)}</th>')
        out += ["</tr></thead>", "<tbody>"]
        for row in rows:
            r = row["record"]
            cells = []
            for c, (text, raw, href) in zip(RANK_COLUMNS, _rank_cells(row)):
                classes = []
                if raw is not None or c in ("rank", "median", SPREAD_NAME,
                                            "ratio to copy roofline"):
                    classes.append("num")
                if c == "verified" and row["verified"] is False:
                    classes.append("verified-no")
                attrs = f' class="{" ".join(classes)}"' if classes else ""
                if "num" in classes:
                    attrs += f' data-sort="{"" if raw is None else repr(float(raw))}"'
                if href == "record":
                    href = ctx.record_href.get(r["record_sha256"]) if r else None
                elif c == "verified":
                    href = (ctx.verify_href.get(r["record_sha256"]) if r else
                            ctx.roster_href.get(href))
                cells.append(f"<td{attrs}>{_link(href, _e(text))}</td>")
            cls = "" if r is not None else ' class="not-timed"'
            rec = f' data-record="{_e(r["record_sha256"][:12])}"' if r else ""
            out.append(f"<tr{cls}{rec}>" + "".join(cells) + "</tr>")
        out += ["</tbody>", "</table>"]
    return out


# ---- Markdown ---------------------------------------------------------------------------------
def _md_cell(text) -> str:
    if text is None:
        return MISSING
    # '<' and '&' would start raw HTML or an entity; '>' is harmless inside a table cell
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
    return " ".join(s.split())


def render_markdown(records, title, rejected, built, rosters=()) -> str:
    lines = [f"# {_md_cell(title)}", "", _summary(records, rejected, built), ""]
    suites = by_suite(records)
    for suite in _suite_order(set(SUITES) | set(suites)):
        rows = suites.get(suite, [])
        lines += [f"## {SUITE_TITLES.get(suite, suite)} (`{suite}`)", ""]
        if suite == "stacks":
            lines += _rank_md(ranking(rows, rosters))
        if not rows:
            lines += ["No verified records.", ""]
            continue
        for slug, label in machines_of(rows).items():
            lines.append(f"- `{slug}`: {_md_cell(label)}")
        cols = COLUMNS.get(suite, KERNEL_COLUMNS)
        lines += ["", "| " + " | ".join(c.title for c in cols) + " |",
                  "|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|"]
        for r in rows:
            lines.append("| " + " | ".join(_md_cell(c.cell(r)[0]) for c in cols) + " |")
        lines.append("")
    if rejected:
        lines += ["## Rejected records", "", "| record | reason |", "|---|---|"]
        lines += [f"| {_md_cell(p)} | {_md_cell(why)} |" for p, why in rejected]
        lines.append("")
    return "\n".join(lines)


# ---- HTML -------------------------------------------------------------------------------------
# No request may leave the page: only its own inline style and script, and images beside it.
_CSP = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src 'self' data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">")

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; background: #fff; }
h1 { margin-top: 0; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table.lb { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
table.lb th, table.lb td { border: 1px solid #d0d0d0; padding: 3px 7px; vertical-align: top; }
table.lb th { background: #eef1f6; cursor: pointer; user-select: none; white-space: nowrap; }
table.lb th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.lb th[aria-sort="descending"]::after { content: " \\25BC"; }
table.lb td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.lb { max-width: 100%; }
table.lb td { overflow-wrap: anywhere; }
table.lb td.wide { min-width: 12em; max-width: 22em; }
table.lb td.narrow { max-width: 11em; }
table.lb td.num.narrow { white-space: normal; min-width: 9em; }
table.lb td.trend { padding: 1px 4px; }
table.lb td.trend svg { display: block; }
table.lb th { white-space: normal; max-width: 9em; }
table.rank td.verified-no { color: #b00020; font-weight: 600; }
table.rank tr.not-timed td { color: #666; }
h3 { margin-bottom: .2em; font-size: 15px; }
table.lb tbody tr:nth-child(even) { background: #f8f9fb; }
.missing { color: #999; }
input.lb-filter { margin: .3em 0; padding: 3px 6px; width: 22em; }
.count { color: #666; margin-left: .6em; }
figure { display: inline-block; margin: .5em 1em 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
"""

# Sorting: numeric columns compare parseFloat(data-sort); missing values stay last in both
# directions; ties keep the current order. `#sort=<table id>:<column>:<asc|desc>[,...]` on load.
_JS = """
(function () {
  "use strict";
  function key(td, numeric) {
    if (!td) return null;
    var s = td.getAttribute("data-sort");
    if (numeric) {
      if (s === null || s === "") return null;
      var v = parseFloat(s);
      return isNaN(v) ? null : v;
    }
    if (td.classList.contains("missing")) return null;
    return (s === null ? td.textContent : s).trim().toLowerCase();
  }
  function sortTable(table, col, dir) {
    var head = table.tHead.rows[0];
    var th = head.cells[col];
    if (!th) return;
    var numeric = th.getAttribute("data-type") === "num";
    var body = table.tBodies[0];
    var sign = dir === "descending" ? -1 : 1;
    var rows = Array.prototype.map.call(body.rows, function (tr, i) {
      return {tr: tr, i: i, k: key(tr.cells[col], numeric)};
    });
    rows.sort(function (a, b) {
      if (a.k === null || b.k === null) {
        if (a.k === b.k) return a.i - b.i;
        return a.k === null ? 1 : -1;
      }
      if (a.k < b.k) return -sign;
      if (a.k > b.k) return sign;
      return a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.tr); });
    Array.prototype.forEach.call(head.cells, function (c) {
      c.setAttribute("aria-sort", c === th ? dir : "none");
    });
  }
  function filterTable(table, query) {
    var q = query.trim().toLowerCase(), shown = 0, rows = table.tBodies[0].rows;
    Array.prototype.forEach.call(rows, function (tr) {
      var hit = !q || tr.textContent.toLowerCase().indexOf(q) >= 0;
      tr.hidden = !hit;
      if (hit) shown++;
    });
    var count = document.getElementById(table.id + "-count");
    if (count) count.textContent = shown + " of " + rows.length + " rows";
  }
  function applyHash() {
    var h = decodeURIComponent(location.hash.replace(/^#/, ""));
    h.split("&").forEach(function (part) {
      if (part.indexOf("sort=") !== 0) return;
      part.slice(5).split(",").forEach(function (spec) {
        var bits = spec.split(":"), table = document.getElementById(bits[0]);
        var col = parseInt(bits[1], 10);
        if (!table || isNaN(col)) return;
        sortTable(table, col, bits[2] === "desc" ? "descending" : "ascending");
      });
    });
  }
  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("table.lb"), function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
        function toggle() {
          var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
          sortTable(table, col, dir);
        }
        th.addEventListener("click", toggle);
        th.addEventListener("keydown", function (e) {
          if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); }
        });
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll("input.lb-filter"), function (box) {
      var table = document.getElementById(box.getAttribute("data-table"));
      if (!table) return;
      box.addEventListener("input", function () { filterTable(table, box.value); });
      filterTable(table, box.value);
    });
    applyHash();
    window.addEventListener("hashchange", applyHash);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _link(href, text) -> str:
    return f'<a href="{_e(href)}">{text}</a>' if href else text


def _html_table(suite, rows, ctx=None) -> list[str]:
    ctx = ctx or SiteContext()
    cols = list(COLUMNS.get(suite, KERNEL_COLUMNS))
    at = next((i for i, c in enumerate(cols) if c.title in ("verify", "validation")), len(cols))
    cols.insert(at, Column(TREND_TITLE, lambda r: (None, None), css="trend"))
    tid = f"table-{suite}"
    out = [(f'<input type="search" class="lb-filter" data-table="{_e(tid)}" '
            f'placeholder="filter rows" aria-label="filter {_e(suite)} rows">'
            f'<span class="count" id="{_e(tid)}-count"></span>'),
           f'<table class="lb" id="{_e(tid)}">', "<thead><tr>"]
    for c in cols:
        kind = "num" if c.numeric else "text"
        out.append(f'<th scope="col" tabindex="0" data-type="{kind}" aria-sort="none">'
                   f"{_e(c.title)}</th>")
    out += ["</tr></thead>", "<tbody>"]
    for r in rows:
        cells = []
        sha = r["record_sha256"]
        for c in cols:
            if c.title == TREND_TITLE:
                svg = ctx.trends.get(sha)
                cls = "trend" + ("" if svg else " missing")
                cells.append(f'<td class="{cls}">{svg or MISSING}</td>')
                continue
            text, raw = c.cell(r)
            classes = (["num"] if c.numeric else []) + ([c.css] if c.css else []) + \
                (["missing"] if text is None else [])
            attrs = f' class="{" ".join(classes)}"' if classes else ""
            if c.numeric:
                attrs += f' data-sort="{"" if raw is None else repr(float(raw))}"'
            if c.title == "machine":
                attrs += f' title="{_e(machine_label(r["machine"]))}"'
            body = MISSING if text is None else _e(text)
            if c.title == "entry" and text is not None:
                body = _link(ctx.record_href.get(sha), body)
            elif c.title in ("verify", "validation") and text is not None:
                body = _link(ctx.verify_href.get(sha), body)
            cells.append(f"<td{attrs}>{body}</td>")
        out.append(f'<tr data-record="{_e(sha[:12])}">' + "".join(cells) + "</tr>")
    out += ["</tbody>", "</table>"]
    return out


def render_html(records, title, rejected, built, plots, ctx=None, rosters=()) -> str:
    ctx = ctx or SiteContext()
    suites = by_suite(records)
    order = _suite_order(set(SUITES) | set(suites))
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           _CSP,
           '<link rel="icon" href="data:,">',  # no favicon request either
           f"<title>{_e(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
           f"<h1>{_e(title)}</h1>",
           f'<p id="summary">{_e(_summary(records, rejected, built))}</p>',
           "<nav><ul>"]
    out += [f'<li><a href="#{_e(s)}">{_e(SUITE_TITLES.get(s, s))}</a> '
            f"({len(suites.get(s, []))})</li>" for s in order]
    if plots:
        out.append('<li><a href="#plots">Plots</a></li>')
    if rejected:
        out.append(f'<li><a href="#rejected">Rejected records</a> ({len(rejected)})</li>')
    out.append("</ul></nav>")
    for suite in order:
        rows = suites.get(suite, [])
        out.append(f'<section id="{_e(suite)}">')
        out.append(f"<h2>{_e(SUITE_TITLES.get(suite, suite))} <code>{_e(suite)}</code></h2>")
        if suite == "stacks":
            ranked = ranking(rows, rosters)
            if ranked:
                out += _rank_html(ranked, ctx)
                if rows:
                    out.append("<h3>Every stack record</h3>")
        if not rows:
            out += ["<p>No verified records.</p>", "</section>"]
            continue
        out.append('<ul class="machines">')
        out += [f"<li><code>{_e(slug)}</code>: {_e(label)}</li>"
                for slug, label in machines_of(rows).items()]
        out.append("</ul>")
        out += _html_table(suite, rows, ctx)
        out.append("</section>")
    if plots:
        out += ['<section id="plots">', "<h2>Plots</h2>"]
        for path, alt in plots:
            out.append(f'<figure><img src="{_e(path.name)}" alt="{_e(alt)}">'
                       f"<figcaption>{_e(alt)}</figcaption></figure>")
        out.append("</section>")
    if rejected:
        out += ['<section id="rejected">', "<h2>Rejected records</h2>",
                '<table class="rejected"><thead><tr><th>record</th><th>reason</th></tr></thead>',
                "<tbody>"]
        out += [f"<tr><td><code>{_e(p)}</code></td><td>{_e(why)}</td></tr>"
                for p, why in rejected]
        out += ["</tbody></table>", "</section>"]
    out += [f"<script>{_JS}</script>", "</body>", "</html>", ""]
    return "\n".join(out)


# ---- plots ------------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the leaderboard figures need matplotlib: "
                          "pip install 'mxref[leaderboard]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_rooflines(records, out: Path) -> list[tuple[Path, str]]:
    """roofline_<slug>.png per machine of the kernel suites: roofline.ratio per entry, one colour
    per ratio label, a line at 1.0 (the roofline itself)."""
    per_machine = {}
    for r in sorted(records, key=sort_key):
        if r["suite"] in ("gpu-kernels", "cpu-emulator") and _get(r, "roofline", "ratio"):
            per_machine.setdefault(r["machine"]["slug"], []).append(r)
    if not per_machine:
        return []
    plt = _pyplot()
    from matplotlib.patches import Patch
    made = []
    for slug, rows in sorted(per_machine.items()):
        labels = sorted({r["roofline"]["ratio_label"] for r in rows})
        colors = {lab: plt.get_cmap("tab10")(i % 10) for i, lab in enumerate(labels)}
        fig, ax = plt.subplots(figsize=(12, max(2.4, 0.32 * len(rows) + 1.4)))
        try:
            y = range(len(rows))[::-1]  # first row at the top
            ax.barh(list(y), [r["roofline"]["ratio"] for r in rows],
                    color=[colors[r["roofline"]["ratio_label"]] for r in rows])
            ax.set_yticks(list(y), [r["entry"] for r in rows], fontsize=8)
            ax.axvline(1.0, color="k", linestyle="--", linewidth=1)
            ax.legend(handles=[Patch(color=colors[lab], label=lab) for lab in labels],
                      loc="lower right", fontsize=8)
            ax.set_xlabel("roofline ratio (1.0 = the roofline measured in the same run)")
            ax.set_title(f"Roofline ratio: {machine_label(rows[0]['machine'])}", fontsize=10)
            fig.tight_layout()
            path = out / f"roofline_{slug}.png"
            fig.savefig(path, dpi=100, bbox_inches="tight")
        finally:
            plt.close(fig)
        made.append((path, f"roofline ratio per entry on {slug}"))
    return made


def _curve(points):
    pts = [(float(t), float(l)) for t, l in points or ()]
    return [t for t, _ in pts], [l for _, l in pts]


# distinct colours for series: tab10, then the lighter half of tab20 (no black: the bf16
# baselines are black and dashed)
def series_colors(n: int) -> list:
    plt = _pyplot()
    base = [plt.get_cmap("tab10")(i) for i in range(10)]
    base += [plt.get_cmap("tab20")(2 * i + 1) for i in range(10)]
    base += [plt.get_cmap("tab20b")(i) for i in range(20)]
    return [base[i % len(base)] for i in range(n)]


def legend_labels(fig) -> list[str]:
    """Every legend entry of every axes of `fig`, in order (what a reader sees)."""
    out = []
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None:
            out += [t.get_text() for t in leg.get_texts()]
    return out


def loss_figure(rows):
    """The training-loss figure of one machine's records: one curve per record, each its own
    colour and one legend entry; the bf16 baselines (one per model; every run carries its own
    baseline curve, and those curves differ slightly from run to run) black and dashed, drawn
    all but listed once per model. Returns the matplotlib figure (the caller closes it)."""
    plt = _pyplot()
    models = {_get(r, "params", "model") for r in rows}
    fig, ax = plt.subplots(figsize=(9, 5))
    names = []
    for r in rows:
        name = _get(r, "params", "recipe") or r["entry"]
        if len(models) > 1:
            name += f" · {_get(r, 'params', 'model')}"
        names.append(name)
    uniq = list(dict.fromkeys(names))
    colors = dict(zip(uniq, series_colors(len(uniq))))
    labelled = set()
    baselines = []
    for r, name in zip(rows, names):
        ax.plot(*_curve(r["quality"]["loss_curve"]), color=colors[name], linewidth=1.3,
                label=name if name not in labelled else "_nolegend_")
        labelled.add(name)
        base = _curve(_get(r, "quality", "baseline_curve"))
        if base[0] and base not in [b for b, _ in baselines]:
            baselines.append((base, _get(r, "params", "model")))
    for base, model in baselines:
        label = "bf16 baseline" + (f" · {model}" if len(models) > 1 else "")
        ax.plot(*base, color="k", linestyle="--", linewidth=1.0, alpha=0.8,
                label=label if label not in labelled else "_nolegend_")
        labelled.add(label)
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss")
    ax.set_title(f"Training loss: {machine_label(rows[0]['machine'])}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_losses(records, out: Path) -> list[tuple[Path, str]]:
    """loss_<slug>.png per machine of the training suite (`loss_figure`)."""
    per_machine = {}
    for r in sorted(records, key=sort_key):
        if r["suite"] == "training" and _get(r, "quality", "loss_curve"):
            per_machine.setdefault(r["machine"]["slug"], []).append(r)
    if not per_machine:
        return []
    plt = _pyplot()
    made = []
    for slug, rows in sorted(per_machine.items()):
        fig = loss_figure(rows)
        try:
            path = out / f"loss_{slug}.png"
            fig.savefig(path, dpi=100)
        finally:
            plt.close(fig)
        made.append((path, f"training loss against tokens on {slug}"))
    return made


# ---- the build --------------------------------------------------------------------------------
def write_csv(records, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in sorted(records, key=sort_key):
            w.writerow({k: "" if v is None else v for k, v in csv_row(r).items()})


def load_rosters(store) -> list[dict]:
    """The stack rosters stored in `store` (stacks/<machine>.json) that pass check_roster, each
    with ``_base`` (the store) so their verify reports can be copied beside the page."""
    from .submit import check_roster, roster_files
    out = []
    for p in roster_files([store]):
        doc, probs, _ = check_roster(p)
        if doc is not None and not probs:
            out.append({**doc, "_base": str(Path(store))})
    return out


def load_history(store, repo=None) -> dict:
    """Every version of every record file under `store` that git holds (committed versions,
    from `git log` of each file in `repo`, the checkout the store lives in), by trend_key.
    Records that fail to parse are skipped; none where `store` is not in a git checkout."""
    import json
    import subprocess

    from .submit import record_files, store_repo
    repo = Path(repo) if repo else store_repo(store)
    out = {}
    for p in record_files([store]):
        try:
            rel = p.resolve().relative_to(repo.resolve()).as_posix()
        except ValueError:
            continue
        try:
            log = subprocess.run(["git", "-C", str(repo), "log", "--format=%H", "--", rel],
                                 capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        for h in log.stdout.split():
            try:
                text = subprocess.run(["git", "-C", str(repo), "show", f"{h}:{rel}"],
                                      capture_output=True, text=True, timeout=60,
                                      check=False).stdout
                rec = json.loads(text)
                out.setdefault(trend_key(rec), []).append(rec)
            except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError):
                continue
    return out


def _copy_beside(out: Path, rel: str, src) -> str | None:
    """Copy evidence `src` to out/rel (a plain relative path) and return rel; None when it
    cannot (missing file, unsafe path)."""
    import shutil

    from .submit import unsafe_rel
    if src is None or unsafe_rel(rel) or not Path(src).is_file():
        return None
    dest = out / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or dest.stat().st_size != Path(src).stat().st_size:
        shutil.copyfile(src, dest)
    return rel


def site_context(records, out: Path, *, history=None, evidence=None, rosters=()) -> SiteContext:
    """Write each record's JSON (records/<suite>/<machine>/<entry>.json, as in the store) and
    its verify report (verify/<sha>.<ext>, where `evidence` gives the file) beside the page,
    and draw each entry's trend from `history` (load_history) and the record itself."""
    import json

    from .submit import store_path
    ctx = SiteContext()
    history = history or {}
    evidence = evidence or {}
    for r in records:
        sha = r["record_sha256"]
        dest = store_path(out, r)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(r, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        ctx.record_href[sha] = dest.relative_to(out).as_posix()
        rel = _copy_beside(out, r["verify"]["report"], evidence.get(sha))
        if rel:
            ctx.verify_href[sha] = rel
        ctx.trends[sha] = trend_svg(trend_points(r, history), r["metric"]["unit"])
    for doc in rosters:
        base = doc.get("_base")
        for st in doc.get("stacks") or []:
            for v in (st.get("verify") or {}).values():
                rel = (v or {}).get("report")
                if base and rel:
                    got = _copy_beside(out, rel, Path(base) / rel)
                    if got:
                        ctx.roster_href[rel] = got
    return ctx


def build_site(records: list[dict], out: Path, *, title: str = "mxref leaderboard",
               rejected: list[tuple[str, str]] = (), rosters=(), history=None,
               evidence=None) -> dict:
    """Write LEADERBOARD.md, index.html, leaderboard.csv and the PNG plots of `records` (already
    validated and gated) into `out`, and beside them each record's JSON and verify report
    (`evidence`: record_sha256 -> the report file) for the page's links. `rosters` (stack
    rosters, load_rosters) add the stacks that were not timed to the per-workload rankings;
    `history` (load_history) gives each entry's trend over commits. Other files in `out` are
    left alone."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = sorted(records, key=sort_key)
    rejected = [(str(p), str(why)) for p, why in rejected]
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    plots = plot_rooflines(records, out) + plot_losses(records, out)
    ctx = site_context(records, out, history=history, evidence=evidence, rosters=rosters)
    paths = {"markdown": out / "LEADERBOARD.md", "html": out / "index.html",
             "csv": out / "leaderboard.csv"}
    paths["markdown"].write_text(render_markdown(records, title, rejected, built, rosters),
                                 encoding="utf-8")
    paths["html"].write_text(render_html(records, title, rejected, built, plots, ctx, rosters),
                             encoding="utf-8")
    write_csv(records, paths["csv"])
    return {**paths, "plots": [p for p, _ in plots], "records": len(records)}
