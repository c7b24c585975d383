"""Comparing one golden file's rows with a backend's output, bit for bit.

The unit of work is a whole golden file (or a group of its rows sharing call parameters): one
backend call per group, so harness cost stays small next to the kernels. Every row ends in
exactly one state: pass, mismatch, error (the backend raised or returned the wrong
shape/dtype), skipped (the backend raised ``Unsupported`` or lacks the op), xfail (a mismatch
an expectations manifest lists) or relaxed (it differs only as a relaxation the backend claims,
:data:`RELAXATIONS`; counted apart from pass). Nothing that did not run is ever counted as
passed.

The per-op checks (``verify/checks/<family>.py``) use what is here: :func:`call_backend` and
:func:`as_array` around each backend call, :class:`Compare` for each field, and a *detail*
builder per field that turns the first differing element of a row into a mismatch record
(built only when a record is reported). A detail builder must read only the arrays it was
given, never variables of an enclosing loop: it runs after the loop has moved on.

A backend may claim a relaxation (attribute ``relaxations``, :func:`claimed_relaxations`): a
named, typed class of difference it accepts, e.g. ``scale_step`` for fused quantize kernels.
A check that knows the relaxation excuses exactly the blocks that fit it (``dont_care`` of
:meth:`Compare.field`) and marks the rows that differed only there with :func:`mark_relaxed`;
without the claim nothing is excused.

One check has a second mode: a GEMM backend under the ``bound`` contract is held to
|y - exact| <= the golden's proven bound (:func:`gemm_contract`, :func:`compare_gemm`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..backends.base import Unsupported
from . import records as R
from .select import GoldenFile

PASS, MISMATCH, ERROR, SKIPPED, XFAIL, RELAXED = range(6)
STATUS_NAMES = ("pass", "mismatch", "error", "skipped", "xfail", "relaxed")
# relaxations a backend may claim (attribute ``relaxations``), with what each accepts
RELAXATIONS = {"scale_step": "scale one step off, codes consistent"}
# fields whose compared elements count toward the report's element total
ELEMENT_FIELDS = ("elems", "dequant", "packed", "butterfly", "exact", "butterfly_bf16", "y",
                  "components")


# ---- results ----------------------------------------------------------------------------------
@dataclass
class FileResult:
    gf: GoldenFile
    classes: np.ndarray                 # [rows] str
    case_ids: np.ndarray                # [rows] uint64
    status: np.ndarray                  # [rows] int8 (STATUS codes)
    selected: np.ndarray                # [rows] bool (class filter)
    reasons: dict = field(default_factory=dict)       # row -> error/skip reason
    field_rows: dict = field(default_factory=dict)    # field -> bool[rows] mismatched
    field_elems: dict = field(default_factory=dict)   # field -> int mismatched elements
    elements: int = 0                   # elements compared in selected rows
    details: list = field(default_factory=list)       # (row, field, n, record builder)
    expectation_of: dict = field(default_factory=dict)  # row -> expectation index
    actual: dict = field(default_factory=dict)          # actual_* column -> [rows, ...] array
    check_mode: str = "bitexact"        # or "bound" (gemm under a backend's bound contract)
    ulp: dict | None = None             # bound mode: ulp statistics of the results in bound
    notes: list = field(default_factory=list)           # variants a backend does not support
    answered: np.ndarray | None = None  # [rows] bool: a backend call (or its failure) covered it

    def put(self, name, rows, values):
        """Keep the backend's output for rows (for --dump-mismatches)."""
        values = np.asarray(values)
        if name not in self.actual:
            self.actual[name] = np.zeros((len(self.status),) + values.shape[1:], values.dtype)
        arr = self.actual[name]
        if arr.shape[1:] == values.shape[1:]:
            arr[rows] = values
        else:                         # ragged rows: left-aligned, zero padded
            arr[tuple([rows] + [slice(0, n) for n in values.shape[1:]])] = values

    @property
    def counts(self) -> dict:
        sel = self.status[self.selected]
        return {name: int((sel == code).sum()) for code, name in enumerate(STATUS_NAMES)}


# ---- calling the backend ------------------------------------------------------------------------
class BadOutput(Exception):
    """A backend returned something of the wrong type, dtype or shape."""


def as_array(x, what, shape, dtype):
    """`x` as the numpy array the protocol promises, or BadOutput naming what came back.

    Outputs are data: what is compared is always a fresh base-class ``np.ndarray`` of the
    declared dtype and shape, copied out of the backend's buffer. An ndarray subclass is read
    through ``np.ndarray``'s own methods, never its overrides (its ``__eq__``/``__ne__``,
    ``dtype``, ``shape`` or ``view`` could lie), so it cannot vote on its own comparison. An
    object array, another dtype or another shape is refused with a reason, never converted."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor slipped through: be kind
        x = x.detach().cpu().numpy()
    if not issubclass(type(x), np.ndarray):       # type(), not isinstance: __class__ can lie
        raise BadOutput(f"{what}: returned {type(x).__name__}, expected a numpy {np.dtype(dtype)} "
                        f"array of shape {tuple(shape)}")
    base = np.ndarray.view(x, np.ndarray)          # the data, without the subclass's methods
    got_dtype, got_shape = base.dtype, tuple(base.shape)
    if got_dtype.hasobject:
        raise BadOutput(f"{what}: returned an array of Python objects ({got_dtype}), expected "
                        f"numpy {np.dtype(dtype)} data of shape {tuple(shape)}")
    if got_dtype != np.dtype(dtype) or got_shape != tuple(shape):
        raise BadOutput(f"{what}: returned {got_dtype} {got_shape}, expected "
                        f"{np.dtype(dtype)} {tuple(shape)}")
    out = np.array(base, dtype=np.dtype(dtype), copy=True, order="C", subok=False)
    if type(out) is not np.ndarray:                # cannot happen: belt and braces
        raise BadOutput(f"{what}: could not be read as a plain numpy array")
    return out


def call_backend(res: FileResult, rows: np.ndarray, fn):
    """Run one backend call for `rows`; on failure mark them and return None. The rows count
    as answered whatever happens (run_file turns a selected row no call covered into an error,
    so a check that forgets a row can never pass it)."""
    if res.answered is None:
        res.answered = np.zeros(len(res.status), bool)
    res.answered[rows] = True
    try:
        return fn()
    except Unsupported as e:
        for r in rows:
            res.status[r] = SKIPPED
            res.reasons[int(r)] = f"unsupported: {e}"
    except BadOutput as e:
        for r in rows:
            res.status[r] = ERROR
            res.reasons[int(r)] = f"bad output: {e}"
    except KeyboardInterrupt:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a per-case result, not a crash or a pass
        kind = getattr(e, "remote_type", type(e).__name__)
        msg = f"the backend called sys.exit({e.code!r})" if isinstance(e, SystemExit) else e
        for r in rows:
            res.status[r] = ERROR
            res.reasons[int(r)] = f"backend raised {kind}: {msg}"
    return None


_SKIP = object()


def soft_call(res, rows, fn, skipped_variants, name):
    """Like call_backend, but a variant the backend does not support is noted, not fatal."""
    def guarded():
        try:
            return fn()
        except Unsupported as e:
            skipped_variants.add(f"{name}: {e}")
            return _SKIP
    out = call_backend(res, rows, guarded)
    return None if out is _SKIP else out


def finish_soft(res, rows, checked_any, skipped_variants):
    """After soft calls: note the skipped variants; rows no variant checked are skipped."""
    if skipped_variants:
        res.notes = sorted(set(res.notes) | skipped_variants)
    if not checked_any:
        for r in rows:
            if res.status[r] == PASS:
                res.status[r] = SKIPPED
                res.reasons[int(r)] = "unsupported: " + "; ".join(sorted(skipped_variants))


def groups(keys):
    """Row indices grouped by a hashable key, in first-seen order."""
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [(k, np.array(v)) for k, v in out.items()]


def logical_shape(t, name):
    """The logical shape a golden column's metadata records (its rows are stored flat)."""
    meta = t.schema.field(name).metadata or {}
    return tuple(json.loads(meta[b"mxref.logical_shape"]))


# ---- comparing --------------------------------------------------------------------------------
def _nan32(b):
    a = b & np.uint32(0x7FFFFFFF)
    return a > np.uint32(0x7F800000)


class Compare:
    """Field-by-field comparison of one group of rows; records which rows and elements differ."""

    def __init__(self, res: FileResult, rows: np.ndarray):
        self.res, self.rows = res, rows

    def field(self, name, exp, act, dont_care=None, nan_any=False, detail=None):
        """exp/act: [n_rows_called, ...] for self.rows. detail(row_local, flat_index) builds a
        record for the first differing element of a row, later, when one is reported: it must
        not read variables an enclosing loop rebinds."""
        diff = exp != act
        if nan_any:
            diff &= ~(_nan32(exp) & _nan32(act))
        if dont_care is not None:
            diff &= ~dont_care
        n_el = int(np.prod(exp.shape[1:])) if exp.ndim > 1 else 1
        flat = diff.reshape(len(self.rows), -1)
        row_bad = flat.any(axis=1)
        res = self.res
        fr = res.field_rows.setdefault(name, np.zeros(len(res.status), bool))
        fr[self.rows[row_bad]] = True
        res.field_elems[name] = res.field_elems.get(name, 0) + int(flat.sum())
        res.elements += len(self.rows) * n_el if name in ELEMENT_FIELDS else 0
        for i in np.nonzero(row_bad)[0]:
            r = int(self.rows[i])
            if res.status[r] in (PASS, RELAXED):     # a real difference outranks a relaxed one
                res.status[r] = MISMATCH
            j = int(np.argmax(flat[i]))
            n = int(flat[i].sum())
            res.details.append((r, name, n, _bind(detail, int(i), j)))
        return row_bad


def claimed_relaxations(backend) -> frozenset:
    """The known relaxations the backend claims: its ``relaxations`` attribute, a tuple (list,
    set) of names from :data:`RELAXATIONS`. Anything else (a bare string, an unknown name)
    claims nothing, so a mistyped claim can only make the check stricter."""
    try:
        claim = getattr(backend, "relaxations", ())
    except Exception:  # noqa: BLE001 - an attribute that raises claims nothing
        return frozenset()
    if not isinstance(claim, (tuple, list, set, frozenset)):
        return frozenset()
    return frozenset(n for n in claim if isinstance(n, str) and n in RELAXATIONS)


class NoRelaxations:
    """A backend seen without its relaxation claims (``verify --no-relax``, the plugin's
    ``--mxref-no-relax``): every call goes to the backend unchanged, but
    :func:`claimed_relaxations` finds nothing, so a block that fits a claimed relaxation is a
    mismatch like any other difference. What it claimed stays in the report
    (``relaxations_refused``)."""

    relaxations = ()

    def __init__(self, inner):
        self._inner = inner

    @property
    def inner(self):
        return self._inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


def refuse_relaxations(backend, refuse: bool):
    """``backend`` itself, or wrapped in :class:`NoRelaxations` when ``refuse``."""
    return NoRelaxations(backend) if refuse and not isinstance(backend, NoRelaxations) else backend


def mark_relaxed(res, rows, excused):
    """Rows (of `rows`) with an excused block (`excused`: bool [len(rows), ...]) that still
    pass after every field was compared become RELAXED; a later real difference in the row
    (another field, the other axis) makes it a mismatch (:meth:`Compare.field`)."""
    hit = excused.reshape(len(rows), -1).any(axis=1)
    for r in rows[hit]:
        if res.status[r] == PASS:
            res.status[r] = RELAXED


def _bind(detail, i, j):
    return None if detail is None else (lambda: detail(i, j))


def bits_detail(exp, act, width=8):
    """A detail builder showing raw bits: width 8 -> fp32 records, 16 -> fp64, 2 -> bytes."""
    def detail(i, j):
        e, a = int(exp[i].reshape(-1)[j]), int(act[i].reshape(-1)[j])
        rec = (R.f32_record if width == 8 else
               (lambda b: {"bits": f"0x{b:016x}", "value": repr(float(np.uint64(b).view(np.float64)))})
               if width == 16 else (lambda b: {"byte": f"0x{b:02x}"}))
        return {"block": None, "elem": j, "index": [j], "input": None, "block_amax": None,
                "expected": rec(e), "actual": rec(a), "xor": f"0x{e ^ a:0{width}x}",
                "code_distance": None}
    return detail


def check_fields(res, rows, pairs):
    """Compare (name, expected, actual) triples bit for bit, with raw-bits records."""
    cmp = Compare(res, rows)
    for name, exp, act in pairs:
        e, a = exp.reshape(len(rows), -1), act.reshape(len(rows), -1)
        w = {1: 2, 2: 4}.get(e.dtype.itemsize, 8)
        cmp.field(name, e, a, detail=bits_detail(e, a, w))


# ---- the bound check (gemm, rotated_gemm) -------------------------------------------------------
def gemm_within(act: np.ndarray, exp: np.ndarray, bound: np.ndarray):
    """(ok mask, ulp distance) of fp32 results against the exact fp32 value and the bound."""
    a = act.view(np.float32).astype(np.float64)
    e = exp.view(np.float32).astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    inf_b = np.isinf(bound)
    # NaN exactly where the exact result is NaN; where partial sums may overflow (bound = Inf)
    # any result is accepted, NaN included (Inf - Inf in some order is legitimate)
    ok = np.where(nan_e, nan_a, ~nan_a | inf_b)
    fin = ok & ~nan_e & ~inf_b
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a - e)
    same = (a == e)                                    # also covers equal infinities
    ok_fin = same | (np.isfinite(d) & (d <= bound))
    # at the boundary, decide exactly (float64 subtraction of two fp32 values can round); an
    # infinite d or bound is decided above (inf - inf here is a NaN that compares False)
    with np.errstate(invalid="ignore"):
        near = fin & ~same & np.isfinite(d) & (np.abs(d - bound) <= 2.0 ** -40 * bound)
    for i in zip(*np.nonzero(near)):
        ok_fin[i] = abs(Fraction(float(a[i])) - Fraction(float(e[i]))) <= Fraction(float(bound[i]))
    ok = np.where(fin, ok_fin, ok)
    ulp = np.zeros(a.shape, np.float64)
    ef = fin & np.isfinite(e)
    if ef.any():
        sp = np.abs(np.spacing(e[ef].astype(np.float32))).astype(np.float64)
        ulp[ef] = np.where(np.isfinite(d[ef]), d[ef] / sp, np.inf)
    return ok, ulp


def gemm_contract(backend, res) -> str:
    """The backend's declared GEMM contract (default and fallback: bound); sets the check mode.

    ``gemm_contract`` is a string for every format pair, or a callable ``(fmt_a, fmt_b) ->
    str`` when the contract depends on the pair (a kernel bit-exact for MXFP4 x MXFP4 only):
    ``exact`` / ``block_sequential`` are compared bit for bit with that golden column,
    ``bound`` holds |y - exact| <= the golden's proven bound, NaN exactly where the exact
    result is NaN, and reports ulp statistics."""
    contract = getattr(backend, "gemm_contract", "bound")
    if callable(contract):
        fa, fb = res.gf.fmt.split("+")
        contract = contract(fa, fb)
    if contract not in ("exact", "block_sequential", "bound"):
        contract = "bound"
    res.check_mode = "bound" if contract == "bound" else "bitexact"
    return contract


def compare_gemm(res, r, y, exact, seq, bound, contract, ulps):
    """Row r: bit-exact against the contract's column, or within the bound of exact."""
    cmp = Compare(res, np.array([r]))
    if contract != "bound":
        exp = (exact if contract == "exact" else seq).reshape(1, -1)
        cmp.field("y", exp, y.reshape(1, -1), nan_any=True,
                  detail=bits_detail(exp, y.reshape(1, -1)))
        return
    ok, ulp = gemm_within(y, exact, bound)
    ulps.append(ulp[ok].reshape(-1))
    ex1, y1 = exact.reshape(1, -1), y.reshape(1, -1)

    def detail(i, j):
        d = bits_detail(ex1, y1)(i, j)
        d["bound"] = float(bound.reshape(-1)[j])
        return d
    # "y" mismatches where the result is outside the bound (or NaN-ness differs)
    cmp.field("y", np.zeros((1, ok.size), np.uint8), (~ok).reshape(1, -1).astype(np.uint8),
              detail=detail)


def ulp_stats(res, ulps):
    """The bound mode's ulp statistics (max, mean, histogram) of the results within bound."""
    if ulps:
        u = np.concatenate(ulps)
        u = u[np.isfinite(u)]
        edges = [0, 1, 2, 3, 4, 8, 16]
        hist = {}
        for lo, hi in zip(edges, edges[1:] + [np.inf]):
            label = f"{lo}" if hi == lo + 1 else (f"{lo}+" if hi == np.inf else f"{lo}-{hi - 1}")
            hist[label] = int(((u >= lo) & (u < hi)).sum()) if u.size else 0
        res.ulp = {"max_ulp": float(u.max()) if u.size else 0.0,
                   "mean_ulp": float(u.mean()) if u.size else 0.0, "hist": hist}
