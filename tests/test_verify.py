"""`mxref verify`: planted bugs are caught and named, bad backends never pass, exit codes hold."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mxref.backends import BackendUnavailable, Unsupported, get_backend
from mxref.backends.numba_backend import NumbaBackend
from mxref.backends.planted import (EmaxOffByOne, Float32Log2Scale, NanNotPoisoned,
                                    SwappedNibbles, TiesAway, ZeroScaleIsZero)
from mxref.cli import main
from mxref.ops import OP_NAMES
from mxref.golden.manifest import load_manifest
from mxref.golden.store import column_numpy, read_golden
from mxref.verify import detect_profile, verify
from mxref.verify.select import default_golden_root
from mxref.verify.expectations import ExpectationsError, load_expectations

ROOT = default_golden_root()


def _mismatched_classes(rep) -> dict:
    return {c: v["mismatched"] for c, v in rep.doc["summary"]["by_class"].items() if v["mismatched"]}


# ---- the reference passes its own corpus ---------------------------------------------------
def test_numba_self_check_level0():
    rep = verify(NumbaBackend(), levels=(0,))
    s = rep.doc["summary"]
    assert rep.exit_code == 0 and rep.doc["status"] == "pass"
    n_l0 = sum(1 for e in load_manifest(ROOT)["files"].values() if e["level"] == 0)
    assert s["cases"] > 3000 and s["passed_cases"] == s["cases"] and s["files"] == n_l0
    assert set(f["op"] for f in rep.doc["files"]) == set(OP_NAMES)


# ---- planted bugs: each exits 1 and names the right class ------------------------------------
@pytest.mark.parametrize("backend, ops, fmts, must_name, must_not_fail", [
    (TiesAway, ["quantize_mx"], None, {"E2"}, set()),
    (Float32Log2Scale, ["quantize_mx"], None, {"S2"}, {"E2", "E7", "S6"}),
    (SwappedNibbles, ["pack"], None, {"L3"}, set()),
    (NanNotPoisoned, ["quantize_mx"], None, {"S7", "E9"}, {"E2", "S1", "S2"}),
    (ZeroScaleIsZero, ["dequantize"], None, {"D1"}, set()),
    (EmaxOffByOne, ["quantize_mx"], ["mxfp8_e4m3"], {"S1", "S4"}, set()),
])
def test_planted_bug_is_caught(backend, ops, fmts, must_name, must_not_fail):
    rep = verify(backend(), profiles=["ocp"], ops=ops, formats=fmts, max_errors=5)
    bad = _mismatched_classes(rep)
    assert rep.exit_code == 1 and rep.doc["status"] == "fail"
    assert must_name <= set(bad), bad
    assert not (must_not_fail & set(bad)), bad
    assert rep.doc["mismatches"] and all(m["class"] in bad for m in rep.doc["mismatches"])
    assert rep.doc["summary"]["passed_cases"] > 0   # the bug is local, not a broken harness


def test_planted_record_has_bits_values_and_fields():
    rep = verify(TiesAway(), profiles=["ocp"], ops=["quantize_mx"], formats=["mxfp4"],
                 src_dtypes=["bfloat16"], classes=["E2"], max_errors=1)
    m = rep.doc["mismatches"][0]
    assert m["class"] == "E2" and m["field"] == "elems" and m["file"].endswith(".arrow")
    # ties-away moves a tie one code up: code distance 1, expected even code
    assert m["code_distance"] == 1
    assert int(m["expected"]["code"], 16) % 2 == 0 and int(m["actual"]["code"], 16) % 2 == 1
    assert m["expected"]["fields"].startswith("S=") and m["input"]["bits"].startswith("0x")
    assert int(m["xor"], 16) == int(m["expected"]["code"], 16) ^ int(m["actual"]["code"], 16)


def test_detect_profile_names_microxcaling_for_ties_away():
    """microxcaling's C++ path is ties-away *and* writes every zero as +0: the planted TiesAway
    (which keeps -0) matches no profile; with +0 zeros too it matches microxcaling."""
    class TiesAwayPosZero(TiesAway):
        knobs = {"rounding": "ties_away", "signed_zero": "never_negative"}
    d = detect_profile(TiesAwayPosZero(), ops=["quantize_mx"], formats=["mxfp4", "mxint8"])
    assert d["matches"] == ["microxcaling"]
    ocp = next(r for r in d["profiles"] if r["profile"] == "ocp")
    assert not ocp["match"] and "E2" in ocp["differing_classes"]
    d = detect_profile(TiesAway(), ops=["quantize_mx"], formats=["mxfp4", "mxint8"])
    assert d["matches"] == []


def test_detect_profile_of_reference_as_rceil():
    class AsRceil(NumbaBackend):
        profiles = ("rceil",)
    d = detect_profile(AsRceil(), ops=["quantize_mx"], formats=["mxfp8_e4m3"],
                       src_dtypes=["bfloat16"])
    assert "rceil" in d["matches"] and "ocp" not in d["matches"]
    tk = next(r for r in d["profiles"] if r["profile"] == "triton_kernels_round_up")
    assert not tk["match"] and tk["mismatched"] < tk["ran"] / 4   # only subnormal-amax blocks (B5)
    assert d["nearest"] is not None


def test_detect_profile_no_match_for_f32_log2():
    d = detect_profile(Float32Log2Scale(), ops=["quantize_mx"], formats=["mxfp4"],
                       src_dtypes=["float32"])
    assert d["matches"] == [] and d["nearest"] == "ocp"
    near = next(r for r in d["profiles"] if r["profile"] == "ocp")
    assert "S2" in near["differing_classes"]


# ---- bad backends: never a pass, always a reason --------------------------------------------
class _Wrong(NumbaBackend):
    profiles = ("ocp",)

    def __init__(self, mode):
        super().__init__()
        self.mode, self.calls = mode, 0

    def quantize_mx(self, src, **kw):
        self.calls += 1
        s, c = super().quantize_mx(src, **kw)
        if self.mode == "shape":
            return s, c[..., :-1]
        if self.mode == "dtype":
            return s.astype(np.int16), c
        if self.mode == "list":
            return s.tolist(), c
        if self.mode == "raise_second" and self.calls == 2:
            raise RuntimeError("device lost")
        if self.mode == "unsupported":
            raise Unsupported("no such dtype here")
        return s, c


@pytest.mark.parametrize("mode, reason", [("shape", "bad output"), ("dtype", "bad output"),
                                          ("list", "bad output"),
                                          ("raise_second", "RuntimeError: device lost")])
def test_bad_backend_output_is_an_error(mode, reason):
    rep = verify(_Wrong(mode), profiles=["ocp"], ops=["quantize_mx"], formats=["mxfp4"])
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and s["error_cases"] > 0
    assert s["passed_cases"] + s["error_cases"] + s["mismatched_cases"] == s["cases"]
    assert any(reason in e["reason"] for e in rep.doc["errors"])
    if mode == "raise_second":          # only the second call's rows are errors
        assert s["passed_cases"] > 0


def test_all_unsupported_exits_4_not_0():
    rep = verify(_Wrong("unsupported"), profiles=["ocp"], ops=["quantize_mx"], formats=["mxfp4"])
    assert rep.exit_code == 4 and rep.doc["summary"]["skipped_unsupported"] == rep.doc["summary"]["cases"]


def test_declared_op_without_method_is_an_error():
    class NoMethod:
        name, version, device = "nomethod", "1", "cpu"
        ops = frozenset({"convert"})
        profiles = ("ocp",)
    rep = verify(NoMethod(), profiles=["ocp"], ops=["convert"], formats=["mxfp4"])
    assert rep.exit_code == 1 and "AttributeError" in rep.doc["errors"][0]["reason"]


def test_unclaimed_profile_is_unavailable():
    with pytest.raises(BackendUnavailable, match="claims none"):
        verify(TiesAway(), profiles=["rceil"])


# ---- CLI exit codes and outputs ---------------------------------------------------------------
def _cli(*args, env=None):
    return CliRunner().invoke(main, ["verify", *args], env=env or {"CI": "true"})


def test_cli_exit_codes():
    assert _cli("-b", "numba", "--ops", "pack").exit_code == 0
    assert _cli("-b", "mxref.backends.planted:SwappedNibbles", "--ops", "pack").exit_code == 1
    assert _cli("-b", "no-such-backend").exit_code == 2
    assert _cli("-b", "numba", "--ops", "bogus").exit_code == 2
    assert _cli().exit_code == 2
    assert _cli("-b", "rocm").exit_code == 4
    r = _cli("-b", "no_such_pkg.mod:Backend")
    assert r.exit_code == 4 and "cannot import" in r.output
    assert _cli("-b", "numba", "--classes", "ZZ9").exit_code == 5
    assert _cli("-b", "mxref.backends.planted:TiesAway", "-p", "rceil").exit_code == 4


def test_module_entry_point_has_verify():
    r = subprocess.run([sys.executable, "-m", "mxref.cli", "verify", "--list-backends"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "numba" in r.stdout.split()


def test_cli_json_is_one_document():
    r = _cli("-b", "mxref.backends.planted:SwappedNibbles", "--ops", "pack", "--json")
    doc = json.loads(r.stdout)        # the whole of stdout parses: nothing else was printed
    assert doc["schema"] == "mxref-verify/1" and doc["exit_code"] == r.exit_code == 1
    assert doc["summary"]["by_field"]["packed"] > 0 and doc["summary"]["by_class"]["L3"]["mismatched"]
    m = doc["mismatches"][0]
    for key in ("file", "case_id", "class", "field", "expected", "actual", "xor"):
        assert key in m
    r = _cli("-b", "rocm", "--json")
    assert r.exit_code == 4 and json.loads(r.stdout)["status"] == "unavailable"


def test_cli_junit_and_dump(tmp_path):
    junit, dump = tmp_path / "r.xml", tmp_path / "dump"
    r = _cli("-b", "mxref.backends.planted:TiesAway", "--ops", "quantize_mx", "-f", "mxfp4",
             "--src-dtype", "bfloat16", "-p", "ocp", "--junit-xml", str(junit),
             "--dump-mismatches", str(dump))
    assert r.exit_code == 1
    suite = ET.parse(junit).getroot()
    fails = suite.findall(".//failure")
    assert int(suite.get("failures")) == len(fails) > 0
    names = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert "quantize_mx[mxfp4-ocp-bfloat16-L1-E2]" in names
    assert "exp scale" in fails[0].text
    files = list(dump.rglob("*.arrow"))
    assert len(files) == 1
    t = read_golden(files[0])
    exp, act = column_numpy(t, "exp_codes"), column_numpy(t, "actual_codes")
    assert t.num_rows > 0 and (exp != act).any(axis=1).all()    # every dumped row differs
    assert CliRunner().invoke(main, ["inspect", str(files[0])]).exit_code == 0


def test_cli_golden_integrity_exit_3(tmp_path):
    root = tmp_path / "golden"
    shutil.copytree(ROOT / "L0" / "pack", root / "L0" / "pack")
    shutil.copy(ROOT / "MANIFEST.json", root / "MANIFEST.json")
    victim = root / "L0" / "pack" / "mxfp4__ocp__float32.arrow"
    data = bytearray(victim.read_bytes())
    data[-40] ^= 0x01
    victim.write_bytes(bytes(data))
    r = _cli("-b", "numba", "--golden", str(root), "--level", "0", "--ops", "pack", "-f", "mxfp4")
    assert r.exit_code == 3 and "sha256" in r.output
    (root / "MANIFEST.json").write_text("{not json")
    assert _cli("-b", "numba", "--golden", str(root), "--level", "0").exit_code == 3


# ---- expectations: xfail, xpass, strict ---------------------------------------------------
# SwappedNibbles' known deviation (mxfp4 L3) plus a stale entry that now passes (an xpass)
PACK_EXPECTATIONS = ('backend = "planted"\n'
                     '[[deviation]]\nop = "pack"\nformat = "mxfp4"\nclass = "L3"\n'
                     'reason = "nibble order"\nlink = "https://example.invalid/1"\n'
                     '[[deviation]]\nop = "pack"\nformat = "mxfp8_e4m3"\n'
                     'reason = "stale entry"\nlink = "https://example.invalid/2"\n')


def test_expectations_xfail_and_xpass(tmp_path):
    f = tmp_path / "exp.toml"
    f.write_text(PACK_EXPECTATIONS)
    exp = load_expectations(f)
    rep = verify(SwappedNibbles(), ops=["pack"], expectations=exp)
    s = rep.doc["summary"]
    assert rep.exit_code == 0 and s["xfail"] > 0 and s["mismatched_cases"] == 0 and s["xpass"] == 1
    assert rep.doc["xpass"][0]["expectation"]["format"] == "mxfp8_e4m3"
    strict = verify(SwappedNibbles(), ops=["pack"], expectations=exp, strict_xpass=True)
    assert strict.exit_code == 1 and strict.doc["status"] == "xpass"


def test_expectations_file_errors(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[[deviation]]\nop = "pack"\nreason = "x"\n')
    with pytest.raises(ExpectationsError, match="link"):
        load_expectations(f)
    f.write_text('[[deviation]]\nop = "pack"\nreason = "x"\nlink = "y"\ncolour = "red"\n')
    with pytest.raises(ExpectationsError, match="unknown keys"):
        load_expectations(f)
    with pytest.raises(ExpectationsError, match="not found"):
        load_expectations(tmp_path / "missing.toml")
    r = _cli("-b", "numba", "--expectations", str(f))
    assert r.exit_code == 2


# ---- registry ------------------------------------------------------------------------------
def test_entry_point_backend(monkeypatch):
    from mxref.backends import registry

    class EP:
        def load(self):
            return SwappedNibbles
    monkeypatch.setattr(registry, "_entry_points", lambda: {"acme": EP()})
    assert "acme" in registry.list_backends()
    assert get_backend("acme").name == "planted-swapped-nibbles"


def test_backend_constructor_failure_is_unavailable():
    with pytest.raises(BackendUnavailable, match="only"):
        get_backend("numba", device="cuda")


# ---- the pytest plugin ----------------------------------------------------------------------
def test_pytest_plugin_reports_record(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repo / "conformance"),
           "--mxref-backend=mxref.backends.planted:SwappedNibbles", "--mxref-ops=pack",
           "--mxref-files=L1/pack/mxfp4*", f"--junit-xml={tmp_path / 'j.xml'}"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:]
    assert "test_pack[fp32-mxfp4-ocp-L1-L3]" in r.stdout
    assert "xor 0x" in r.stdout and "1 failed" in r.stdout
    assert ("reproduce:     mxref verify -b mxref.backends.planted:SwappedNibbles --level 1 "
            "--ops pack -f mxfp4 --src-dtype float32 --classes L3") in r.stdout
    ok = subprocess.run(cmd[:-3] + ["--mxref-backend=numba", "--mxref-ops=pack"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert ok.returncode == 0 and " passed" in ok.stdout
