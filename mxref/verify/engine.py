"""Run a backend over golden files and compare bit for bit.

The unit of work is a whole golden file: one backend call per file (per ragged length for
``quantize_mx``), so harness cost stays small next to the kernels. Every row ends in exactly
one state: pass, mismatch, error (the backend raised or returned the wrong shape/dtype),
skipped (the backend raised ``Unsupported`` or lacks the op) or xfail (a mismatch an
expectations manifest lists). Nothing that did not run is ever counted as passed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import MXRefError
from ..formats import FORMATS
from ..golden.manifest import load_manifest
from ..golden.store import GoldenIntegrityError, column_numpy, read_golden, schema_meta, sha256_bytes
from ..profiles import PROFILES
from ..backends.base import GOLDEN_OPS, Unsupported
from . import records as R

PASS, MISMATCH, ERROR, SKIPPED, XFAIL = range(5)
STATUS_NAMES = ("pass", "mismatch", "error", "skipped", "xfail")
# ops whose expected bits do not depend on a profile (their files are labelled 'ocp')
PROFILE_FREE_OPS = ("dequantize", "pack", "rotate", "gemm", "mxfp4_to_fp8")
# fields whose compared elements count toward the report's element total
_ELEMENT_FIELDS = ("elems", "dequant", "packed", "butterfly", "exact", "butterfly_bf16", "y",
                   "components")


class SelectionError(MXRefError, ValueError):
    """A filter that names something the corpus does not have (usage error, exit 2)."""


def default_golden_root() -> Path:
    env = os.environ.get("MXREF_GOLDEN")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2] / "golden"
    return repo if (repo / "MANIFEST.json").is_file() else Path("golden")


# ---- selection --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GoldenFile:
    relpath: str
    op: str
    fmt: str
    profile: str
    src_dtype: str
    level: int
    rows: int
    sha256: str
    classes: dict


def select_files(root: Path, *, levels=(1,), ops=None, profiles=None, formats=None,
                 src_dtypes=None, classes=None, suite=None):
    """Files of the manifest matching every filter, in manifest order; returns (doc, files)."""
    doc = _manifest(Path(root))
    if suite:
        name, _, version = suite.partition("@")
        if name != doc.get("suite"):
            raise SelectionError(f"unknown suite {name!r}; this corpus is {doc.get('suite')!r}")
        if version and version != doc.get("suite_version"):
            raise GoldenIntegrityError(Path(root) / "MANIFEST.json", "suite version",
                                       f"asked for {version}, corpus is {doc.get('suite_version')}")
    # a format is known when mxref defines it or the corpus names it (the rotate op's files
    # are format "hadamard")
    corpus_formats = {f for e in doc["files"].values() for f in e["format"].split("+")}
    for what, given, known in (("op", ops, GOLDEN_OPS), ("profile", profiles, PROFILES),
                               ("format", formats, sorted(set(FORMATS) | corpus_formats))):
        bad = sorted(set(given or ()) - set(known))
        if bad:
            raise SelectionError(f"unknown {what}(s): {', '.join(bad)}; known: {', '.join(known)}")
    out = []
    for rel, e in doc["files"].items():
        if e["level"] not in levels or (ops and e["op"] not in ops):
            continue
        if formats and not set(e["format"].split("+")) & set(formats):
            continue
        if src_dtypes and e["src_dtype"] not in src_dtypes:
            continue
        if profiles and e["profile"] not in profiles and e["op"] not in PROFILE_FREE_OPS:
            continue
        if classes and not set(classes) & set(e["classes"]):
            continue
        out.append(GoldenFile(rel, e["op"], e["format"], e["profile"], e["src_dtype"],
                              int(e["level"]), int(e["rows"]), e["sha256_bytes"], e["classes"]))
    return doc, out


_MANIFESTS: dict = {}


def _manifest(root: Path) -> dict:
    """load_manifest, memoized on (path, mtime, size): the pytest plugin asks once per file."""
    p = root / "MANIFEST.json"
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return load_manifest(root)      # raises the integrity error naming the file
    if key not in _MANIFESTS:
        _MANIFESTS.clear()
        _MANIFESTS[key] = load_manifest(root)
    return _MANIFESTS[key]


def open_checked(root: Path, gf: GoldenFile):
    """Read a golden file after checking its bytes against the manifest (integrity, exit 3)."""
    path = Path(root) / gf.relpath
    if not path.is_file():
        raise GoldenIntegrityError(path, "exists", "listed in MANIFEST.json but missing")
    if sha256_bytes(path.read_bytes()) != gf.sha256:
        raise GoldenIntegrityError(path, "sha256 bytes", "file bytes differ from MANIFEST.json")
    return read_golden(path)


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
    details: list = field(default_factory=list)       # (row, field, record builder) in row order
    expectation_of: dict = field(default_factory=dict)  # row -> expectation index
    actual: dict = field(default_factory=dict)          # actual_* column -> [rows, ...] array
    check_mode: str = "bitexact"        # or "bound" (gemm under a backend's bound contract)
    ulp: dict | None = None             # bound mode: ulp statistics of the results in bound
    notes: list = field(default_factory=list)           # variants a backend does not support

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


class _BadOutput(Exception):
    pass


def _as_array(x, what, shape, dtype):
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor slipped through: be kind
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise _BadOutput(f"{what}: returned {type(x).__name__}, expected a numpy {np.dtype(dtype)} "
                         f"array of shape {tuple(shape)}")
    if x.dtype != np.dtype(dtype) or tuple(x.shape) != tuple(shape):
        raise _BadOutput(f"{what}: returned {x.dtype} {tuple(x.shape)}, expected "
                         f"{np.dtype(dtype)} {tuple(shape)}")
    return x


def _call(res: FileResult, rows: np.ndarray, fn):
    """Run one backend call for `rows`; on failure mark them and return None."""
    try:
        return fn()
    except Unsupported as e:
        for r in rows:
            res.status[r] = SKIPPED
            res.reasons[int(r)] = f"unsupported: {e}"
    except _BadOutput as e:
        for r in rows:
            res.status[r] = ERROR
            res.reasons[int(r)] = f"bad output: {e}"
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a backend raising is a per-case result, not a crash
        for r in rows:
            res.status[r] = ERROR
            res.reasons[int(r)] = f"backend raised {type(e).__name__}: {e}"
    return None


def _nan32(b):
    a = b & np.uint32(0x7FFFFFFF)
    return a > np.uint32(0x7F800000)


class _Compare:
    """Field-by-field comparison of one file; records which rows and elements differ."""

    def __init__(self, res: FileResult, rows: np.ndarray):
        self.res, self.rows = res, rows

    def field(self, name, exp, act, dont_care=None, nan_any=False, detail=None):
        """exp/act: [n_rows_called, ...] for self.rows. detail(row_local, flat_index, exp, act)
        builds a record for the first differing element of a row."""
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
        res.elements += len(self.rows) * n_el if name in _ELEMENT_FIELDS else 0
        for i in np.nonzero(row_bad)[0]:
            r = int(self.rows[i])
            if res.status[r] == PASS:
                res.status[r] = MISMATCH
            j = int(np.argmax(flat[i]))
            n = int(flat[i].sum())
            res.details.append((r, name, n, (lambda i=i, j=j: detail(i, j)) if detail else None))
        return row_bad


# ---- per-op runners ---------------------------------------------------------------------------
def _run_quantize_mx(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    src = column_numpy(t, "src_bits")
    nvalid = column_numpy(t, "n_valid").astype(np.int64)
    exp_s = column_numpy(t, "exp_scale")
    exp_c = column_numpy(t, "exp_codes")
    for nv in np.unique(nvalid[rows]):
        rr = rows[nvalid[rows] == nv]
        x = np.ascontiguousarray(src[rr, :nv])

        def go(x=x, rr=rr, nv=nv):
            s, c = backend.quantize_mx(x, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile, axis=1)
            return (_as_array(s, "quantize_mx scales", (len(rr), 1), np.uint8),
                    _as_array(c, "quantize_mx codes", (len(rr), nv), np.uint8))
        out = _call(res, rr, go)
        if out is None:
            continue
        s, c = out
        res.put("actual_scale", rr, s[:, 0])
        if "actual_codes" not in res.actual:
            res.actual["actual_codes"] = np.zeros(exp_c.shape, np.uint8)
        res.actual["actual_codes"][rr, :nv] = c
        cmp = _Compare(res, rr)
        es, ec = exp_s[rr], exp_c[rr, :nv]

        def amax_of(i):
            return _amax_record(src[rr[i], :nv], gf.src_dtype)

        def scale_detail(i, j):
            return {"block": 0, "elem": None, "index": [], "input": None, "block_amax": amax_of(i),
                    "expected": R.element_side(el, R.scale_format_name(gf.fmt), es[i], None),
                    "actual": R.element_side(el, R.scale_format_name(gf.fmt), s[i, 0], None),
                    "xor": f"0x{int(es[i]) ^ int(s[i, 0]):02x}", "code_distance": None}

        def elem_detail(i, j):
            return _elem_record(el, gf, src[rr[i], j], amax_of(i), es[i], s[i, 0], ec[i, j],
                                c[i, j], block=0, elem=j, index=[j])
        cmp.field("scale", es, s[:, 0], detail=scale_detail)
        cmp.field("elems", ec, c, dont_care=np.broadcast_to((es == 0xFF)[:, None], ec.shape),
                  detail=elem_detail)


def _amax_record(block_bits, src_dtype):
    """The block element of largest magnitude (NaNs skipped), as bits and value."""
    blk = block_bits.astype(np.uint64)
    mag = blk & (0x7FFFFFFF if src_dtype == "float32" else 0x7FFF)
    k = int(np.argmax(np.where(_is_nan_src(blk, src_dtype), 0, mag)))
    return R.src_record(int(blk[k]), src_dtype)


def _is_nan_src(bits, src_dtype):
    if src_dtype == "float32":
        return (bits & 0x7FFFFFFF) > 0x7F800000
    if src_dtype == "bfloat16":
        return (bits & 0x7FFF) > 0x7F80
    return (bits & 0x7FFF) > 0x7C00


def _elem_record(el, gf, src_bits, amax, exp_scale, act_scale, exp_code, act_code, **where):
    sf = R.scale_format_name(gf.fmt)
    return {**where, "input": R.src_record(int(src_bits), gf.src_dtype), "block_amax": amax,
            "expected": R.element_side(el, sf, exp_scale, exp_code),
            "actual": R.element_side(el, sf, act_scale, act_code),
            "xor": f"0x{int(exp_code) ^ int(act_code):02x}",
            "code_distance": R.code_distance(el, exp_code, act_code)}


def _run_quantize_mx_tensor(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    bs = FORMATS[gf.fmt].block_size
    src = column_numpy(t, "src_bits")[rows]
    n_r, n_c = src.shape[1:]
    for ax in (0, 1):
        es = column_numpy(t, f"exp_scales_axis{ax}")[rows]
        ec = column_numpy(t, f"exp_codes_axis{ax}")[rows]

        def go(ax=ax, es=es):
            s, c = backend.quantize_mx(np.ascontiguousarray(src), src_dtype=gf.src_dtype,
                                       fmt=gf.fmt, profile=profile, axis=ax + 1)
            return (_as_array(s, f"quantize_mx(axis={ax}) scales", es.shape, np.uint8),
                    _as_array(c, f"quantize_mx(axis={ax}) codes", src.shape, np.uint8))
        out = _call(res, rows, go)
        if out is None:
            return
        s, c = out
        res.put(f"actual_scales_axis{ax}", rows, s)
        res.put(f"actual_codes_axis{ax}", rows, c)
        es_full = np.repeat(es, bs, axis=ax + 1)[:, :n_r, :n_c]
        as_full = np.repeat(s, bs, axis=ax + 1)[:, :n_r, :n_c]

        def amax_of(i, r, col, ax=ax):
            line = src[i, :, col] if ax == 0 else src[i, r, :]
            k = (r if ax == 0 else col) // bs
            return _amax_record(line[k * bs:(k + 1) * bs], gf.src_dtype)

        def scale_detail(i, j, ax=ax, es=es, s=s):
            idx = np.unravel_index(j, es.shape[1:])
            r, col = (idx[0] * bs, idx[1]) if ax == 0 else (idx[0], idx[1] * bs)
            return {"axis": ax, "block": [int(v) for v in idx], "elem": None, "index": [],
                    "input": None, "block_amax": amax_of(i, r, col),
                    "expected": R.element_side(el, "e8m0", es[i][idx], None),
                    "actual": R.element_side(el, "e8m0", s[i][idx], None),
                    "xor": f"0x{int(es[i][idx]) ^ int(s[i][idx]):02x}", "code_distance": None}

        def elem_detail(i, j, ax=ax, ec=ec, c=c, es_full=es_full, as_full=as_full):
            r, col = divmod(j, n_c)
            blk = [r // bs, col] if ax == 0 else [r, col // bs]
            return _elem_record(el, gf, src[i, r, col], amax_of(i, r, col), es_full[i, r, col],
                                as_full[i, r, col], ec[i, r, col], c[i, r, col], axis=ax,
                                block=blk, elem=(r if ax == 0 else col) % bs, index=[r, col])
        _Compare(res, rows).field("scale", es, s, detail=scale_detail)
        _Compare(res, rows).field("elems", ec, c, dont_care=es_full == 0xFF, detail=elem_detail)


def _run_quantize_nvfp4(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS["nvfp4"].element
    shape = _logical_shape(t, "src_bits")
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), *shape)
    es = column_numpy(t, "exp_scales")[rows]
    ec = column_numpy(t, "exp_codes")[rows].reshape(src.shape)
    ets = column_numpy(t, "exp_tensor_scale")[rows]
    T, M, C = src.shape

    def go():
        s, c, ts = backend.quantize_nvfp4(src, src_dtype=gf.src_dtype, profile=profile)
        return (_as_array(s, "quantize_nvfp4 scales", (T, M, C // 16), np.uint8),
                _as_array(c, "quantize_nvfp4 codes", (T, M, C), np.uint8),
                _as_array(ts, "quantize_nvfp4 tensor_scale", (T,), np.uint32))
    out = _call(res, rows, go)
    if out is None:
        return
    s, c, ts = out
    s = s.reshape(T, M * (C // 16))
    res.put("actual_scales", rows, s)
    res.put("actual_codes", rows, c.reshape(T, -1))
    res.put("actual_tensor_scale", rows, ts)
    es = es.reshape(T, -1)
    es_full = np.repeat(es.reshape(T, M, -1), 16, axis=2)
    as_full = np.repeat(s.reshape(T, M, -1), 16, axis=2)

    def amax_of(i, r, b):
        return _amax_record(src[i, r, b * 16:(b + 1) * 16], gf.src_dtype)

    def scale_detail(i, j):
        r, b = divmod(j, C // 16)
        return {"block": [r, b], "elem": None, "index": [], "input": None,
                "block_amax": amax_of(i, r, b),
                "expected": R.element_side(el, "e4m3", es[i, j], None),
                "actual": R.element_side(el, "e4m3", s[i, j], None),
                "xor": f"0x{int(es[i, j]) ^ int(s[i, j]):02x}", "code_distance": None}

    def elem_detail(i, j):
        r, col = divmod(j, C)
        return _elem_record(el, gf, src[i, r, col], amax_of(i, r, col // 16), es_full[i, r, col],
                            as_full[i, r, col], ec[i, r, col], c[i, r, col],
                            block=[r, col // 16], elem=col % 16, index=[r, col])

    def ts_detail(i, j):
        return {"block": None, "elem": None, "index": [], "input": None, "block_amax": None,
                "expected": R.f32_record(ets[i]), "actual": R.f32_record(ts[i]),
                "xor": f"0x{int(ets[i]) ^ int(ts[i]):08x}", "code_distance": None}
    cmp = _Compare(res, rows)
    cmp.field("scale", es, s, detail=scale_detail)
    cmp.field("elems", ec, c, detail=elem_detail)
    cmp.field("tensor_scale", ets, ts, detail=ts_detail)


def _logical_shape(t, name):
    import json
    meta = t.schema.field(name).metadata or {}
    return tuple(json.loads(meta[b"mxref.logical_shape"]))


def _run_convert(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    ec = column_numpy(t, "exp_codes")[rows]

    def go():
        c = backend.convert(src, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile)
        return _as_array(c, "convert codes", src.shape, np.uint8)
    c = _call(res, rows, go)
    if c is None:
        return
    res.put("actual_codes", rows, c)

    def detail(i, j):
        return _elem_record(el, gf, src[i, j], None, None, None, ec[i, j], c[i, j],
                            block=None, elem=j, index=[j])
    _Compare(res, rows).field("elems", ec, c, detail=detail)


def _run_dequantize(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    scales = np.ascontiguousarray(column_numpy(t, "scale")[rows])
    codes = np.ascontiguousarray(column_numpy(t, "codes")[rows])
    exp = column_numpy(t, "exp_dequant")[rows]

    def go():
        d = backend.dequantize(scales[:, None].copy(), codes, fmt=gf.fmt, profile=profile)
        return _as_array(d, "dequantize", codes.shape, np.uint32)
    d = _call(res, rows, go)
    if d is None:
        return
    res.put("actual_dequant", rows, d)

    def detail(i, j):
        side = R.element_side(el, "e8m0", scales[i], codes[i, j])
        return {"block": 0, "elem": j, "index": [j], "input": side, "block_amax": None,
                "expected": R.f32_record(exp[i, j]), "actual": R.f32_record(d[i, j]),
                "xor": f"0x{int(exp[i, j]) ^ int(d[i, j]):08x}", "code_distance": None}
    _Compare(res, rows).field("dequant", exp, d, nan_any=True, detail=detail)


def _run_pack(backend, t, res, rows, profile):
    gf = res.gf
    kind = column_numpy(t, "kind")
    shape = t.column("shape").to_pylist()
    inp = t.column("input").to_pylist()
    cols = {"packed": t.column("exp_packed").to_pylist(), "cublas": t.column("exp_cublas").to_pylist(),
            "amd": t.column("exp_amd").to_pylist()}
    for r in rows:                   # rows differ in shape: one call each (tiny files)
        r = int(r)
        x = np.array(inp[r], np.uint8)
        if kind[r] == "pack":
            todo = [("packed", lambda x=x: backend.pack(x, fmt=gf.fmt))]
        else:
            x = x.reshape(shape[r])
            todo = [(lay, lambda x=x, lay=lay: backend.scale_layout(x, layout=lay))
                    for lay in ("cublas", "amd")]
        for name, fn in todo:
            exp = np.array(cols[name][r], np.uint8)

            def go(fn=fn, exp=exp, name=name):
                return _as_array(fn(), name, exp.shape, np.uint8)
            got = _call(res, np.array([r]), go)
            if got is None:
                continue

            def detail(i, j, exp=exp, got=got, name=name):
                return {"block": None, "elem": j, "index": [j], "input": None, "block_amax": None,
                        "expected": {"byte": f"0x{int(exp[j]):02x}"},
                        "actual": {"byte": f"0x{int(got[j]):02x}"},
                        "xor": f"0x{int(exp[j]) ^ int(got[j]):02x}", "code_distance": None}
            _Compare(res, np.array([r])).field(name, exp[None], got[None], detail=detail)


RUNNERS = {"quantize_mx": _run_quantize_mx, "quantize_mx_tensor": _run_quantize_mx_tensor,
           "quantize_nvfp4": _run_quantize_nvfp4, "convert": _run_convert,
           "dequantize": _run_dequantize, "pack": _run_pack}


def run_file(backend, table, gf: GoldenFile, *, profile: str, classes=None) -> FileResult:
    """Run one golden file through the backend as `profile` and compare every field."""
    cls = column_numpy(table, "class")
    n = len(cls)
    sel = np.ones(n, bool) if not classes else np.isin(cls, list(classes))
    res = FileResult(gf=gf, classes=cls, case_ids=column_numpy(table, "case_id"),
                     status=np.zeros(n, np.int8), selected=sel)
    rows = np.nonzero(sel)[0]
    if not len(rows):
        return res
    if gf.op not in getattr(backend, "ops", ()):
        res.status[rows] = SKIPPED
        for r in rows:
            res.reasons[int(r)] = f"backend does not implement op {gf.op}"
        return res
    RUNNERS[gf.op](backend, table, res, rows, profile)
    return res


def file_meta(table) -> dict:
    return schema_meta(table)


from .ext_runners import EXT_RUNNERS  # noqa: E402  (the runners import this module's helpers)
RUNNERS.update(EXT_RUNNERS)
