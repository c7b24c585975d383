"""Every mismatch record verify prints describes the element it names.

For each planted backend (and every coverage class its bug reaches, ragged blocks included),
each record is checked against the golden file and the backend's own output (the
``--dump-mismatches`` columns): the expected side is the golden value at the record's row and
index, the actual side is what the backend returned there, the two differ, the index lies
inside the row's (valid) data and its block, and every decoded value and field split matches
its bits. A record builder that read another row's arrays (a closure bound late in a loop)
printed "exp 0x07 act 0x07 xor 0x00" for L1 rows; this file catches that class of bug.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mxref.backends.planted import (EmaxOffByOne, Float32Log2Scale, GemmZeroScale,
                                    NanNotPoisoned, RotateFloat64, SRStrict, SwappedNibbles,
                                    TiesAway, ZeroScaleIsZero)
from mxref.formats import FORMATS
from mxref.golden.store import column_numpy, read_golden
from mxref.verify import records as R
from mxref.verify import verify
from mxref.verify.report import record_text


class NvTiesAway(TiesAway):
    """TiesAway for NVFP4 as well (the planted one plants it in the MX paths only)."""

    def quantize_nvfp4(self, src, *, src_dtype, profile):
        return super().quantize_nvfp4(src, src_dtype=src_dtype, profile=self._prof(profile))


CASES = [
    (TiesAway, ["quantize_mx", "quantize_mx_tensor", "convert"], ["mxfp4", "mxint8"]),
    (NvTiesAway, ["quantize_nvfp4"], ["nvfp4"]),
    (NanNotPoisoned, ["quantize_mx", "quantize_mx_tensor"], ["mxfp8_e4m3"]),
    (Float32Log2Scale, ["quantize_mx", "quantize_mx_tensor"], ["mxfp4"]),
    (EmaxOffByOne, ["quantize_mx", "quantize_mx_tensor"], ["mxfp8_e4m3"]),
    (SwappedNibbles, ["pack"], ["mxfp4"]),
    (ZeroScaleIsZero, ["dequantize"], ["mxfp4", "mxfp8_e5m2"]),
    (GemmZeroScale, ["gemm"], ["mxfp8_e4m3"]),
    (RotateFloat64, ["rotate"], None),
    (SRStrict, ["quantize_mx_sr", "quantize_nvfp4_sr"], ["mxfp4", "nvfp4"]),
]

# op -> field -> golden column of the expected value (raw-bits records)
BITS_COLUMNS = {
    "rotate": {"butterfly": "exp_butterfly", "exact": "exp_exact",
               "butterfly_bf16": "exp_butterfly_bf16"},
    "gemm": {"y": "exp_exact"},
    "quantize_mx_sr": {"scale": "exp_scale", "elems": "exp_codes"},
    "quantize_nvfp4_sr": {"scale": "exp_scales", "elems": "exp_codes",
                          "tensor_scale": "exp_tensor_scale"},
}


def _int(s: str) -> int:
    return int(s, 16)


def _row(table, name, row):
    """One row of a column as a flat numpy array (fixed-shape or list columns)."""
    try:
        return np.asarray(column_numpy(table, name)[row]).reshape(-1)
    except Exception:  # noqa: BLE001 - variable-length list column
        return np.asarray(table.column(name)[row].as_py()).reshape(-1)


def _amax_bits(block, src_dtype):
    """The bits of the block element of largest magnitude, NaNs skipped."""
    b = block.astype(np.uint64)
    mag = b & (0x7FFFFFFF if src_dtype == "float32" else 0x7FFF)
    nan = mag > {"float32": 0x7F800000, "bfloat16": 0x7F80, "float16": 0x7C00}[src_dtype]
    return int(b[int(np.argmax(np.where(nan, 0, mag)))])


def _check_decoding(rec, el, sf, src_dtype):
    """Every decoded value and field split in the record matches its bits."""
    for side in (rec.get("expected"), rec.get("actual"), rec.get("input")):
        if not side:
            continue
        if "code" in side:
            assert (side["decoded"], side["fields"]) == R.element_decode(el, _int(side["code"]))
        if "scale_bits" in side:
            assert side["scale"] == R.scale_decode(sf, _int(side["scale_bits"]))
        if "bits" in side and "fields" in side:                    # an fp32 value
            assert side == R.f32_record(_int(side["bits"]))
        elif "bits" in side and len(side["bits"]) == 18:           # an fp64 value
            assert side["value"] == repr(float(np.uint64(_int(side["bits"])).view(np.float64)))
        elif "bits" in side:                                       # a source value
            assert side == R.src_record(_int(side["bits"]), src_dtype)
    if rec.get("block_amax"):
        assert rec["block_amax"] == R.src_record(_int(rec["block_amax"]["bits"]), src_dtype)


def _value(side) -> int:
    for k in ("code", "bits", "byte", "scale_bits"):
        if k in side:
            return _int(side[k])
    raise AssertionError(f"no value in {side}")


def _check_quantize(rec, table, actual, gf):
    """Records with codes, scales, inputs and the block's amax (quantize family)."""
    op, fld, row = gf["op"], rec["field"], rec["row"]
    fmt = FORMATS[gf["format"]]
    bs = fmt.block_size
    src_dtype = gf["src_dtype"]
    exp, act = rec["expected"], rec["actual"]
    if op == "quantize_mx":
        nv = int(column_numpy(table, "n_valid")[row])
        src = column_numpy(table, "src_bits")[row, :nv]
        assert rec["block"] == 0
        assert _int(rec["block_amax"]["bits"]) == _amax_bits(src, src_dtype)
        assert _int(exp["scale_bits"]) == int(column_numpy(table, "exp_scale")[row])
        assert _int(act["scale_bits"]) == int(actual["actual_scale"])
        if fld == "elems":
            (j,) = rec["index"]
            assert 0 <= j < nv and rec["elem"] == j
            assert _int(rec["input"]["bits"]) == int(src[j])
            assert _int(exp["code"]) == int(column_numpy(table, "exp_codes")[row, j])
            assert _int(act["code"]) == int(actual["actual_codes"][j])
        return
    if op == "quantize_mx_tensor":
        ax = rec["axis"]
        src = column_numpy(table, "src_bits")[row]
        es = column_numpy(table, f"exp_scales_axis{ax}")[row]
        blk = tuple(rec["block"])
        assert _int(exp["scale_bits"]) == int(es[blk])
        assert _int(act["scale_bits"]) == int(actual[f"actual_scales_axis{ax}"][blk])
        line = src[blk[0] * bs:(blk[0] + 1) * bs, blk[1]] if ax == 0 else \
            src[blk[0], blk[1] * bs:(blk[1] + 1) * bs]
        assert _int(rec["block_amax"]["bits"]) == _amax_bits(line, src_dtype)
        if fld == "elems":
            r, c = rec["index"]
            assert 0 <= r < src.shape[0] and 0 <= c < src.shape[1]
            assert list(blk) == ([r // bs, c] if ax == 0 else [r, c // bs])
            assert rec["elem"] == (r if ax == 0 else c) % bs
            assert _int(rec["input"]["bits"]) == int(src[r, c])
            assert _int(exp["code"]) == int(column_numpy(table, f"exp_codes_axis{ax}")[row, r, c])
            assert _int(act["code"]) == int(actual[f"actual_codes_axis{ax}"][r, c])
        return
    if op == "quantize_nvfp4":
        src = _row(table, "src_bits", row)
        es, ec = _row(table, "exp_scales", row), _row(table, "exp_codes", row)
        if fld == "tensor_scale":
            assert _int(exp["bits"]) == int(column_numpy(table, "exp_tensor_scale")[row])
            assert _int(act["bits"]) == int(actual["actual_tensor_scale"])
            return
        r, b = rec["block"]
        M, C = json.loads(table.schema.field("src_bits").metadata[b"mxref.logical_shape"])
        k = r * (C // 16) + b
        assert _int(exp["scale_bits"]) == int(es[k])
        assert _int(act["scale_bits"]) == int(actual["actual_scales"][k])
        blk = src[r * C + b * 16: r * C + b * 16 + 16]
        assert _int(rec["block_amax"]["bits"]) == _amax_bits(blk, src_dtype)
        if fld == "elems":
            rr, c = rec["index"]
            assert rr == r and c // 16 == b and rec["elem"] == c % 16
            assert _int(rec["input"]["bits"]) == int(src[r * C + c])
            assert _int(exp["code"]) == int(ec[r * C + c])
            assert _int(act["code"]) == int(actual["actual_codes"][r * C + c])
        return
    if op == "convert":
        (j,) = rec["index"]
        src = column_numpy(table, "src_bits")[row]
        assert 0 <= j < len(src)
        assert _int(rec["input"]["bits"]) == int(src[j])
        assert _int(exp["code"]) == int(column_numpy(table, "exp_codes")[row, j])
        assert _int(act["code"]) == int(actual["actual_codes"][j])
        return
    if op == "dequantize":
        (j,) = rec["index"]
        codes = column_numpy(table, "codes")[row]
        assert 0 <= j < len(codes) and rec["elem"] == j
        assert _int(rec["input"]["code"]) == int(codes[j])
        assert _int(rec["input"]["scale_bits"]) == int(column_numpy(table, "scale")[row])
        assert _int(exp["bits"]) == int(column_numpy(table, "exp_dequant")[row, j])
        assert _int(act["bits"]) == int(actual["actual_dequant"][j])
        return
    if op == "pack":
        (j,) = rec["index"]
        col = _row(table, "exp_" + fld, row)
        assert 0 <= j < len(col)
        assert _int(exp["byte"]) == int(col[j])
        return
    raise AssertionError(f"no check for {op}")


def _check_bits(rec, table, actual, gf):
    """Raw-bits records (rotate, gemm, sr): the expected value is the golden column's at index."""
    col = BITS_COLUMNS[gf["op"]][rec["field"]]
    flat = _row(table, col, rec["row"])
    (j,) = rec["index"]
    assert 0 <= j < len(flat) and rec["elem"] == j
    assert _value(rec["expected"]) == int(flat[j])
    act_col = "actual_" + col[len("exp_"):]
    if act_col in actual:
        assert _value(rec["actual"]) == int(np.asarray(actual[act_col]).reshape(-1)[j])


def _check_records(rep, dumps):
    by_file = {f["path"]: f for f in rep.doc["files"]}
    dumped = {rel: (table, rows, act) for rel, table, rows, act in dumps}
    seen = set()
    for rec in rep.doc["mismatches"]:
        gf = by_file[rec["file"]]
        if rec["file"] in dumped:
            table, rows, act = dumped[rec["file"]]
            pos = int(np.nonzero(rows == rec["row"])[0][0])
            actual = {k: v[pos] for k, v in act.items()}
        else:                        # an op that keeps no actual columns (pack, gemm)
            table, actual = read_golden(Path(rep.doc["golden"]["root"]) / rec["file"]), {}
        text = record_text(rec)
        assert str(column_numpy(table, "class")[rec["row"]]) == rec["class"], text
        assert f"0x{int(column_numpy(table, 'case_id')[rec['row']]):016x}" == rec["case_id"], text
        assert _int(rec["xor"]) != 0 and rec["expected"] != rec["actual"], text
        assert _int(rec["xor"]) == _value(rec["expected"]) ^ _value(rec["actual"]), text
        el = FORMATS[gf["format"]].element if gf["format"] in FORMATS else None
        sf = R.scale_format_name(gf["format"]) if gf["format"] in FORMATS else None
        try:
            _check_decoding(rec, el, sf, gf["src_dtype"])
            (_check_bits if gf["op"] in BITS_COLUMNS else _check_quantize)(rec, table, actual, gf)
        except AssertionError as e:
            raise AssertionError(f"{e}\nrecord:\n{text}") from None
        seen.add(rec["class"])
    return seen


@pytest.mark.parametrize("backend, ops, formats", CASES, ids=[c[0].__name__ for c in CASES])
def test_every_record_describes_its_element(backend, ops, formats):
    dumps = []
    rep = verify(backend(), levels=(1,), ops=ops, formats=formats, profiles=["ocp"],
                 max_errors=0, dump=dumps)
    assert rep.exit_code == 1 and rep.doc["mismatches"]
    seen = _check_records(rep, dumps)
    # every class with a mismatch printed at least one record, and all of them were checked
    failing = {c for c, v in rep.doc["summary"]["by_class"].items() if v["mismatched"]}
    assert seen == failing
    assert len(rep.doc["mismatches"]) >= rep.doc["summary"]["mismatched_cases"]
    if backend is TiesAway:
        assert "L1" in seen                  # the ragged blocks
