"""Issue 27 items 2 and 4: a backend's outputs are data compared by mxref (an ndarray subclass
cannot vote on its own comparison), and verify's outputs are never lost (paths checked before
the run, reports written atomically, a backend's prints kept off ``--json``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from mxref.backends.numba_backend import NumbaBackend
from mxref.cli import main
from mxref.cli.common import OutputPathError, prepare_output, write_atomic
from mxref.verify import verify
from mxref.verify.compare import BadOutput, as_array


# ---- outputs are data -----------------------------------------------------------------------
class LyingArray(np.ndarray):
    """Says "equal" to everything, whatever its data."""

    def __ne__(self, other):
        return np.zeros(np.broadcast_shapes(self.shape, np.shape(other)), bool)

    def __eq__(self, other):
        return np.ones(np.broadcast_shapes(self.shape, np.shape(other)), bool)


class DtypeLiar(np.ndarray):
    """uint16 data that claims to be uint8."""

    @property
    def dtype(self):
        return np.dtype(np.uint8)


class _Out(NumbaBackend):
    profiles = ("ocp",)

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def quantize_mx(self, src, **kw):
        s, c = super().quantize_mx(src, **kw)
        if self.mode == "lying_zeros":
            return s.view(LyingArray), np.zeros_like(c).view(LyingArray)
        if self.mode == "subclass_true":        # a subclass carrying the right data is fine
            return s.view(LyingArray), c.view(LyingArray)
        if self.mode == "object":
            return s, c.astype(object)
        if self.mode == "dtype_liar":
            return s, c.astype(np.uint16).view(DtypeLiar)
        return s, c


def _l0(mode):
    return verify(_Out(mode), levels=(0,), profiles=["ocp"], ops=["quantize_mx"])


def test_lying_subclass_with_zero_codes_fails_level0():
    rep = _l0("lying_zeros")
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and rep.doc["status"] == "fail"
    assert s["mismatched_cases"] > 0 and s["by_field"].get("elems", 0) > 0


def test_subclass_with_true_data_passes_level0():
    rep = _l0("subclass_true")
    assert rep.exit_code == 0 and rep.doc["summary"]["passed_cases"] == rep.doc["summary"]["cases"]


@pytest.mark.parametrize("mode, words", [("object", "Python objects"),
                                         ("dtype_liar", "uint16")])
def test_object_or_disguised_dtype_is_an_error_with_reason(mode, words):
    rep = _l0(mode)
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and s["error_cases"] == s["cases"] > 0 and s["passed_cases"] == 0
    assert all("bad output" in e["reason"] and words in e["reason"] for e in rep.doc["errors"])


def test_as_array_returns_a_fresh_base_array():
    src = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out = as_array(src.view(LyingArray), "x", (2, 3), np.uint8)
    assert type(out) is np.ndarray and not np.shares_memory(out, src)
    assert (out == src).all()
    with pytest.raises(BadOutput, match="expected uint8 \\(2, 3\\)"):
        as_array(src.reshape(3, 2), "x", (2, 3), np.uint8)
    with pytest.raises(BadOutput, match="list"):
        as_array(src.tolist(), "x", (2, 3), np.uint8)


# ---- output paths, checked before the run ---------------------------------------------------
def _cli(*args):
    return CliRunner().invoke(main, ["verify", *args], env={"CI": "true"})


PACK = ("-b", "mxref.backends.planted:SwappedNibbles", "--level", "0", "--ops", "pack",
        "-f", "mxfp4")


def test_missing_directories_are_created_and_reports_written(tmp_path):
    j, x, d = tmp_path / "a" / "b" / "r.json", tmp_path / "c" / "r.xml", tmp_path / "e" / "f"
    r = _cli("-b", "mxref.backends.planted:TiesAway", "--level", "0", "--ops", "quantize_mx",
             "-f", "mxfp4", "-p", "ocp", "--json-out", str(j), "--junit-xml", str(x),
             "--dump-mismatches", str(d))
    assert r.exit_code == 1, r.output
    assert json.loads(j.read_text())["exit_code"] == 1
    assert x.read_bytes().startswith(b"<?xml")
    assert list(d.rglob("*.arrow"))
    leftovers = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name or "probe" in p.name]
    assert not leftovers


def _boom(*a, **k):
    raise AssertionError("the run started although an output path is unusable")


@pytest.mark.parametrize("opt", ["--json-out", "--junit-xml", "--dump-mismatches"])
def test_unwritable_output_refused_before_the_run(tmp_path, monkeypatch, opt):
    import mxref.verify as V
    monkeypatch.setattr(V, "verify", _boom)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = _cli(*PACK, opt, str(blocker / "sub" / "r.out"), "--json")
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "usage" and opt in doc["error"] and str(blocker) in doc["error"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root POSIX user")
def test_read_only_directory_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OutputPathError, match="cannot write"):
            prepare_output(ro / "r.json", "--json-out")
        r = _cli(*PACK, "--json-out", str(ro / "r.json"))
        assert r.exit_code == 2 and "--json-out" in r.output
    finally:
        ro.chmod(0o700)


def test_directory_given_for_a_file_is_refused(tmp_path):
    with pytest.raises(OutputPathError, match="is a directory"):
        prepare_output(tmp_path, "--junit-xml")


def test_write_atomic_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "r.json"
    write_atomic(p, b"old")

    real_replace = os.replace

    def failing_replace(a, b):
        raise OSError("disk full")
    os.replace = failing_replace
    try:
        with pytest.raises(OSError):
            write_atomic(p, b"new")
    finally:
        os.replace = real_replace
    assert p.read_bytes() == b"old" and [q.name for q in tmp_path.iterdir()] == ["r.json"]


# ---- a backend's prints never reach --json ---------------------------------------------------
NOISY = textwrap.dedent('''
    import os, sys
    from mxref.backends.planted import SwappedNibbles
    print("import-time chatter")
    class Noisy(SwappedNibbles):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            print("constructor chatter")
        def pack(self, *a, **k):
            print("python print")
            sys.stdout.flush()
            os.write(1, b"raw fd 1 write\\n")
            return super().pack(*a, **k)
''')


def test_backend_stdout_does_not_corrupt_json(tmp_path):
    (tmp_path / "noisy_backend.py").write_text(NOISY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path)] + sys.path), "CI": "true"}
    r = subprocess.run([sys.executable, "-m", "mxref.cli", "verify", "-b", "noisy_backend:Noisy",
                        "--level", "0", "--ops", "pack", "-f", "mxfp4", "--json"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    doc = json.loads(r.stdout)                 # all of stdout is the one JSON document
    assert doc["schema"] == "mxref-verify/1" and doc["exit_code"] == r.returncode == 1
    for chatter in ("import-time chatter", "constructor chatter", "python print",
                    "raw fd 1 write"):
        assert chatter in r.stderr


def test_two_reports_into_one_file_are_refused_before_the_run(tmp_path):
    """Planted (fault probe cli_same_report_path): --json-out and --junit-xml name one file; the
    run used to exit 0 with the JUnit XML silently overwritten by the JSON."""
    from click.testing import CliRunner

    from mxref.cli import main
    same = tmp_path / "same.out"
    for other in ("--junit-xml", "--dump-mismatches"):
        r = CliRunner().invoke(main, ["verify", "-b", "numba", "--level", "0", "--ops", "convert",
                                      "--json-out", str(same), other, str(same)])
        assert r.exit_code == 2 and "the same path as --json-out" in r.output, r.output
        assert not same.exists()
