"""Renderings of a verify report: human text, JUnit XML, and an Arrow dump of failing rows."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa

from .compare import RELAXATIONS


def _relaxed_what(doc: dict) -> str:
    """What the relaxed cases of a report differ by: the backend's claimed relaxations."""
    claimed = doc["backend"].get("relaxations_claimed") or []
    return "; ".join(RELAXATIONS.get(n, n) for n in claimed) or "a claimed relaxation"


def _side(d: dict | None) -> str:
    if not d:
        return "-"
    if "byte" in d:
        return d["byte"]
    parts = []
    if "scale_bits" in d:
        parts.append(f"scale {d['scale_bits']} ({d['scale']})")
    if "code" in d:
        parts.append(f"code {d['code']} ({d['decoded']} {d['fields']})")
    if "bits" in d and "code" not in d:
        parts.append(f"{d['bits']} ({d['value']}{' ' + d['fields'] if 'fields' in d else ''})")
    return "  ".join(parts)


def record_text(r: dict) -> str:
    """A mismatch record in the TestFloat-like text form (used by the CLI and by pytest)."""
    where = []
    if r.get("axis") is not None:
        where.append(f"axis {r['axis']}")
    if r.get("block") is not None:
        where.append(f"blk {r['block']}")
    if r.get("elem") is not None:
        where.append(f"elem {r['elem']}")
    if r.get("index"):
        where.append(f"index {r['index']}")
    head = (f"[{r['class']}{'|' + ','.join(r['tags'][:4]) if r.get('tags') else ''}] "
            f"{r['file']} case {r['case_id']} row {r['row']} {' '.join(where)}  "
            f"field {r['field']} ({r['mismatched_in_case']} differ in this case)")
    lines = [head]
    inp = r.get("input")
    if inp or r.get("block_amax"):
        s = "    in  " + (_side(inp) if inp and "code" in inp else
                         f"{inp['bits']} ({inp['value']})" if inp else "-")
        if r.get("block_amax"):
            s += f"   block amax {r['block_amax']['bits']} ({r['block_amax']['value']})"
        lines.append(s)
    lines.append(f"    exp {_side(r.get('expected'))}")
    tail = f"  xor {r['xor']}" + (f"  distance {r['code_distance']}"
                                  if r.get("code_distance") is not None else "")
    lines.append(f"    act {_side(r.get('actual'))}{tail}")
    if r.get("relaxation"):
        lines.append(f"    {r['relaxation']}")
    if r.get("expectation"):
        lines.append(f"    expected deviation: {r['expectation']}")
    return "\n".join(lines)


def text_report(doc: dict) -> str:
    b, g, s = doc["backend"], doc["golden"], doc["summary"]
    out = [f"mxref verify: backend={b['name']} {b.get('version', '')} ({b.get('device', '?')})  "
           f"suite={g['suite']}@{g['suite_version']}  levels={','.join(map(str, g['levels']))}"]
    for n in doc.get("notes", []):
        out.append(f"note: {n}")
    relaxed = f"relaxed ({_relaxed_what(doc)})"
    agg = {}
    for f in doc["files"]:
        a = agg.setdefault(f["op"], dict(files=0, cases=0, mismatch=0, error=0, skipped=0, xfail=0,
                                         relaxed=0))
        a["files"] += 1
        for k in ("cases", "mismatch", "error", "skipped", "xfail", "relaxed"):
            a[k] += f.get(k, 0)
    for op, a in agg.items():
        verdict = ("FAIL" if a["mismatch"] or a["error"] else
                   "SKIP" if a["skipped"] == a["cases"] else "RELAXED" if a["relaxed"] else "ok")
        extra = ", ".join(f"{a[k]} {relaxed if k == 'relaxed' else k}"
                          for k in ("mismatch", "error", "skipped", "xfail", "relaxed") if a[k])
        out.append(f"{op:<20} {a['files']:>4} files {a['cases']:>7} cases  {verdict}"
                   + (f" ({extra})" if extra else ""))
    for mode, c in s.get("by_check", {}).items():
        if mode == "bitexact" and len(s["by_check"]) == 1 and not c.get("relaxed"):
            break                          # the common case: say nothing extra
        line = (f"check {mode:<9} {c['cases']:>7} cases: {c['passed']} pass, {c['failed']} fail"
                + (f", {c['relaxed']} {relaxed}" if c.get("relaxed") else "")
                + (f", {c['skipped']} skipped" if c["skipped"] else ""))
        if c.get("ulp"):
            hist = " ".join(f"{k}:{v}" for k, v in c["ulp"]["hist"].items() if v)
            line += f"; within bound: max {c['ulp']['max_ulp']:.3g} ulp [{hist}]"
        out.append(line)
    for f in doc["files"]:
        for n in f.get("notes", []):
            out.append(f"  note {f['path']}: variant not supported: {n}")
        if f["status"] in ("fail", "error"):
            out.append(f"  {f['status'].upper():<5} {f['path']}: {f['mismatch']} mismatched, "
                       f"{f['error']} errors of {f['cases']}")
        elif f["status"] == "relaxed":
            out.append(f"  RELAXED {f['path']}: {f['relaxed']} {relaxed} of {f['cases']}")
    for e in doc["errors"]:
        out.append(f"  ERROR {e['file']}: {e['cases']} cases ({', '.join(e['classes'])}): {e['reason']}")
    for r in doc["mismatches"]:
        out.append(record_text(r))
    if doc["truncated"]:
        out.append(f"  ... more mismatches not shown (max-errors {doc['max_errors']}; use "
                   "--max-errors 0 or --json-out for all)")
    for x in doc.get("xpass", []):
        out.append(f"XPASS {x['expectation']} ({x['matched']} cases now pass)")
    cls = ", ".join(f"{c}:{v['mismatched'] + v['errors']}" for c, v in s["by_class"].items()
                    if v["mismatched"] + v["errors"])
    fields = ", ".join(f"{k}:{v}" for k, v in s["by_field"].items())
    out.append(f"Summary: {s['cases']} cases in {s['files']} files, {s['elements']} elements; "
               f"{s['mismatched_cases']} mismatched" + (f" ({cls})" if cls else "")
               + (f"; {s['relaxed_cases']} {relaxed}" if s.get("relaxed_cases") else "")
               + (f" [differing elements, xfail included: {fields}]" if fields else "")
               + f"; {s['error_cases']} errors; {s['xfail']} xfail; {s['xpass']} xpass; "
               f"{s['skipped_unsupported']} skipped; exit {doc['exit_code']}")
    return "\n".join(out)


def detect_text(d: dict) -> str:
    b = d["backend"]
    out = [f"mxref verify --detect-profile: backend={b['name']} {b.get('version', '')} "
           f"({b.get('device', '?')}), run as its native profile {d['native']!r}",
           f"{'profile':<26} {'cases':>7} {'ran':>7} {'differ':>7}  verdict"]
    for r in d["profiles"]:
        if not r["ran"]:
            verdict = "not comparable (no file it could run)"
        elif r["match"]:
            verdict = f"MATCH ({', '.join(r['formats'])})"
        else:
            verdict = "differs: " + " ".join(f"{c}({n})" for c, n in r["differing_classes"].items())
            if r.get("relaxed"):
                verdict += f" relaxed({r['relaxed']}, not bit-exact)"
        out.append(f"{r['profile']:<26} {r['cases']:>7} {r['ran']:>7} "
                   f"{r['mismatched'] + r['errors']:>7}  {verdict}")
    out.append("matches: " + (", ".join(d["matches"]) or "none"))
    if d["nearest"]:
        near = next(r for r in d["profiles"] if r["profile"] == d["nearest"])
        out.append(f"nearest non-matching: {d['nearest']} (differs in "
                   + ", ".join(near["differing_classes"]) + ")")
        if near.get("example"):
            out.append(record_text(near["example"]))
    return "\n".join(out)


def junit_xml(doc: dict, tests: dict) -> bytes:
    """One testcase per (golden file, class): ids like quantize_mx[mxfp4-ocp-bfloat16-L1-E2]."""
    suite = ET.Element("testsuite", name=f"mxref-verify[{doc['backend']['name']}]")
    n = fail = err = skip = 0
    for (path, cls), t in sorted(tests.items()):
        n += 1
        case = ET.SubElement(suite, "testcase", classname=f"mxref.{t['op']}",
                             name=f"{t['op']}[{t['format']}-{t['profile']}-{t['src_dtype']}-"
                                  f"L{t['level']}-{cls}]", file=path)
        if t["status"] == "fail":
            fail += 1
            el = ET.SubElement(case, "failure", message=f"{t['mismatched']} of {t['cases']} "
                               f"cases mismatched")
            el.text = record_text(t["record"]) if t.get("record") else ""
        elif t["status"] == "error":
            err += 1
            ET.SubElement(case, "error", message=t.get("reason", "error"))
        elif t["status"] in ("skipped", "xfail"):
            skip += 1
            ET.SubElement(case, "skipped", message=t.get("reason", t["status"]))
        elif t.get("relaxed"):              # passed, but only under the backend's claim
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="mxref.relaxed", value=str(t["relaxed"]))
            ET.SubElement(case, "system-out").text = (
                f"{t['relaxed']} of {t['cases']} cases relaxed ({_relaxed_what(doc)}), "
                "accepted under the backend's claimed relaxation; not bit-exact")
    suite.set("tests", str(n))
    suite.set("failures", str(fail))
    suite.set("errors", str(err))
    suite.set("skipped", str(skip))
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="utf-8", xml_declaration=True)


def _safe(rel: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", rel)


def dump_mismatches(root: Path, dumps: list, dest: Path) -> list[str]:
    """Write failing rows back in the golden schema, with actual_* columns.

    `dumps` holds (relpath, table, rows, actual: {column: array}) per golden file with
    mismatches. dest ending in .arrow with one file: that file; otherwise a directory that
    mirrors the golden layout. Returns the paths written.
    """
    from ..golden.writer import write_golden
    written = []
    dest = Path(dest)
    single = dest.suffix == ".arrow" and len(dumps) == 1
    for rel, table, rows, actual in dumps:
        sub = table.take(pa.array(np.asarray(rows, np.int64)))
        cols = [(sub.schema.field(i), sub.column(i).combine_chunks()) for i in range(sub.num_columns)]
        for name, arr in actual.items():
            arr = np.ascontiguousarray(arr)
            if arr.ndim > 1:
                typ = pa.fixed_shape_tensor(pa.from_numpy_dtype(arr.dtype), list(arr.shape[1:]))
                storage = pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)),
                                                            int(np.prod(arr.shape[1:])))
                col = pa.ExtensionArray.from_storage(typ, storage)
            else:
                col = pa.array(arr)
            cols.append((pa.field(name, col.type, nullable=False,
                                  metadata={b"mxref.role": b"actual"}), col))
        meta = {k.decode()[len("mxref."):]: v.decode() for k, v in (table.schema.metadata or {}).items()
                if k.decode().startswith("mxref.")}
        meta["dump_of"] = rel
        out = dest if single else (dest.with_suffix("") if dest.suffix == ".arrow" else dest) / _safe(rel)
        write_golden(out, cols, {k: _maybe_json(v) for k, v in meta.items()})
        written.append(str(out))
    return written


def _maybe_json(v: str):
    import json
    try:
        return json.loads(v)
    except (json.JSONDecodeError, ValueError):
        return v
