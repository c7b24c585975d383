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

Every entry is validated when loaded: an unknown key, a value of the wrong type (``classes =
"E2"`` instead of a list), or an op, class, format, profile or src_dtype that does not exist is
an :class:`ExpectationsError` naming the entry (``deviation #N``), the key and the value - the
CLI exits 2 - never an entry that silently matches nothing.

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
STRING_KEYS = ("op", "format", "profile", "src_dtype", "class", "field", "reason", "link")
# every coverage class the corpus generators write (tests/test_expectations_validation.py checks
# that this covers the installed corpus, so a new class cannot be refused by mistake)
KNOWN_CLASSES = frozenset(
    [f"E{i}" for i in range(1, 12)] + [f"S{i}" for i in range(1, 10)]
    + ["B1", "B2", "B3", "D1", "O1", "R1", "R2"] + [f"C{i}" for i in range(1, 8)]
    + [f"G{i}" for i in range(1, 10)] + [f"H{i}" for i in range(1, 7)]
    + [f"L{i}" for i in range(1, 6)] + ["RG1", "RG2", "RG3"] + ["SR1", "SR2", "SR3", "SR4"])
KNOWN_SRC_DTYPES = ("float32", "bfloat16", "float16", "e4m3")
NON_ELEMENT_FORMATS = ("hadamard",)      # the rotate op's "format" is its transform


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
    if not isinstance(doc.get("backend", ""), str):
        raise ExpectationsError(f"{path}: 'backend' must be a string, got "
                                f"{type(doc['backend']).__name__} {doc['backend']!r}")
    devs = doc.get("deviation", [])
    if not isinstance(devs, list):
        raise ExpectationsError(f"{path}: 'deviation' must be an array of tables ([[deviation]]), "
                                f"got {type(devs).__name__}")
    return [_entry(i, d, f"{path}: deviation #{i + 1}") for i, d in enumerate(devs)]


def _entry(i: int, d, where: str) -> Deviation:
    """One [[deviation]] table, validated: every key known, every value of its type and naming
    something that exists; else ExpectationsError naming the entry, the key and the value."""
    from ..formats import FORMATS
    from ..profiles import PROFILES

    if not isinstance(d, dict):
        raise ExpectationsError(f"{where}: must be a table, got {type(d).__name__} {d!r}")
    bad = set(d) - KNOWN_KEYS
    if bad:
        raise ExpectationsError(f"{where}: unknown keys {sorted(bad)}; known {sorted(KNOWN_KEYS)}")
    for req in ("op", "reason", "link"):
        if req not in d:
            raise ExpectationsError(f"{where}: {req!r} is required (a non-empty string)")
    for key in STRING_KEYS:
        if key in d and (not isinstance(d[key], str) or not d[key].strip()):
            raise ExpectationsError(f"{where}: {key} = {d[key]!r} must be a non-empty string, "
                                    f"got {type(d[key]).__name__}")
    if d["op"] not in OP_NAMES:
        raise ExpectationsError(f"{where}: unknown op {d['op']!r}; known: {', '.join(OP_NAMES)}")
    fmt = d.get("format")
    if fmt is not None and fmt not in NON_ELEMENT_FORMATS and not all(
            part in FORMATS for part in fmt.split("+")):
        raise ExpectationsError(f"{where}: unknown format {fmt!r}; known: {', '.join(FORMATS)} "
                                f"(GEMM pairs as A+B, rotate: {', '.join(NON_ELEMENT_FORMATS)})")
    if d.get("profile") is not None and d["profile"] not in PROFILES:
        raise ExpectationsError(f"{where}: unknown profile {d['profile']!r}; known: "
                                f"{', '.join(PROFILES)}")
    if d.get("src_dtype") is not None and d["src_dtype"] not in KNOWN_SRC_DTYPES:
        raise ExpectationsError(f"{where}: unknown src_dtype {d['src_dtype']!r}; known: "
                                f"{', '.join(KNOWN_SRC_DTYPES)}")
    if "class" in d and "classes" in d:
        raise ExpectationsError(f"{where}: give 'class' or 'classes', not both")
    classes = None
    if "classes" in d:
        classes = d["classes"]
        if not isinstance(classes, list) or not classes or not all(
                isinstance(c, str) for c in classes):
            raise ExpectationsError(f"{where}: classes = {classes!r} must be a non-empty list of "
                                    f"class ids, e.g. [\"E2\", \"S7\"] (one class: class = \"E2\")")
    elif "class" in d:
        classes = [d["class"]]
    for c in classes or ():
        if c not in KNOWN_CLASSES:
            raise ExpectationsError(f"{where}: unknown class {c!r}; known: "
                                    f"{', '.join(sorted(KNOWN_CLASSES))}")
    cid = d.get("case_id")
    if cid is not None:
        try:
            ok = not isinstance(cid, bool) and isinstance(cid, (int, str))
            cid = (int(cid, 16) if isinstance(cid, str) else int(cid)) if ok else -1
        except ValueError:
            cid = -1
        if not 0 <= cid < 1 << 64:
            raise ExpectationsError(f"{where}: case_id = {d['case_id']!r} is not a 64-bit case id "
                                    "(an integer or a hex string like \"0x1f...\")") from None
    return Deviation(i, d["op"], d["reason"], d["link"], fmt, d.get("profile"),
                     d.get("src_dtype"), tuple(classes) if classes else None, cid,
                     d.get("field"))
