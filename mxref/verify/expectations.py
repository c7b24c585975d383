"""Expectations manifests: a backend's known deviations, each with a reason and a link.

TOML (read with the standard library's ``tomllib``; ``tomli`` on Python 3.10)::

    backend = "ml_dtypes"                      # informational
    [[deviation]]
    op = "convert"                             # required
    format = "mxfp8_e4m3"                      # optional filters: format, profile, src_dtype,
    profile = "ocp"                            #   class or classes, case_id, field
    classes = ["E8", "R1"]
    reason = "ml_dtypes FP8 casts do not saturate: overflow -> NaN"   # required
    link = "https://github.com/jax-ml/ml_dtypes/..."                  # required

A mismatched case an entry matches is reported as XFAIL. An entry whose matched cases all pass
is reported as XPASS (and fails the run under ``--strict-xpass``), so the manifest cannot rot.
"""
from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:        # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import MXRefError
from ..ops import OP_NAMES

FILTER_KEYS = ("op", "format", "profile", "src_dtype", "classes", "case_id", "field")
KNOWN_KEYS = set(FILTER_KEYS) | {"class", "reason", "link"}


class ExpectationsError(MXRefError, ValueError):
    """An expectations file that cannot be read or names unknown keys (usage error)."""


@dataclass(frozen=True)
class Deviation:
    index: int
    op: str
    reason: str
    link: str
    format: str | None = None
    profile: str | None = None
    src_dtype: str | None = None
    classes: tuple | None = None
    case_id: int | None = None
    field: str | None = None

    def matches_file(self, gf) -> bool:
        return (self.op == gf.op and self.format in (None, gf.fmt)
                and self.profile in (None, gf.profile) and self.src_dtype in (None, gf.src_dtype))

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("op", "format", "profile", "src_dtype", "field",
                                             "reason", "link")}
        d["classes"] = list(self.classes) if self.classes else None
        d["case_id"] = None if self.case_id is None else f"0x{self.case_id:016x}"
        return {k: v for k, v in d.items() if v is not None}


def load_expectations(path) -> list[Deviation]:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ExpectationsError(f"{path}: expectations file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ExpectationsError(f"{path}: not valid TOML: {e}") from None
    unknown_top = set(doc) - {"backend", "deviation"}
    if unknown_top:
        raise ExpectationsError(f"{path}: unknown top-level keys {sorted(unknown_top)}")
    out = []
    for i, d in enumerate(doc.get("deviation", [])):
        where = f"{path}: deviation #{i + 1}"
        if not isinstance(d, dict):
            raise ExpectationsError(f"{where}: must be a table")
        bad = set(d) - KNOWN_KEYS
        if bad:
            raise ExpectationsError(f"{where}: unknown keys {sorted(bad)}; known {sorted(KNOWN_KEYS)}")
        for req in ("op", "reason", "link"):
            if not isinstance(d.get(req), str) or not d[req].strip():
                raise ExpectationsError(f"{where}: {req!r} is required (a non-empty string)")
        if d["op"] not in OP_NAMES:
            raise ExpectationsError(f"{where}: unknown op {d['op']!r}")
        classes = d.get("classes") or ([d["class"]] if "class" in d else None)
        cid = d.get("case_id")
        if cid is not None:
            try:
                cid = int(cid, 16) if isinstance(cid, str) else int(cid)
            except ValueError:
                raise ExpectationsError(f"{where}: case_id {cid!r} is not an integer") from None
        out.append(Deviation(i, d["op"], d["reason"], d["link"], d.get("format"),
                             d.get("profile"), d.get("src_dtype"),
                             tuple(classes) if classes else None, cid, d.get("field")))
    return out
