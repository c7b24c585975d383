"""Backend isolation (issue 27 item 1): no process-level fault in a backend reads as a pass.

Each faulty backend of mxref/backends/faulty.py is run through `mxref verify` (L0,
quantize_mx): the exit code must be 1 (or 4 for a module that cannot load), the reason must be
in the report, and `--in-process` shows what the worker protects against (os._exit ends mxref
with status 0, which is why isolation is the default).
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mxref.errors import BackendUnavailable, UnknownBackendError
from mxref.verify.isolate import BackendFault, IsolatedBackend, _decode, _encode, _frame, _unframe

F = "mxref.backends.faulty:"
ARGS = ["--level", "0", "--ops", "quantize_mx", "-f", "mxfp4", "--src-dtype", "float32",
        "--no-progress"]


def _verify(*extra, timeout=300):
    return subprocess.run([sys.executable, "-m", "mxref", "verify", *extra], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("name, reason", [
    ("SysExitZero", "sys.exit(0)"),
    ("OsExitZero", "exited with status 0"),
    ("Segfault", "SIGSEGV"),
    ("KeyboardInterruptInside", "KeyboardInterrupt"),
    ("LyingZeros", None),
    ("FaultAfterFirstCall", "exited with status 0"),
])
def test_faulty_backend_is_never_a_pass(name, reason):
    args = ARGS if name != "FaultAfterFirstCall" else ARGS[:4] + ["--no-progress"]  # >1 call
    r = _verify("-b", F + name, *args, "--json")
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    doc = json.loads(r.stdout)                      # one JSON document, whatever happened
    t = doc["summary"]
    assert t["passed_cases"] < t["cases"]
    if reason is None:                              # lying zeros: compared as data, mismatches
        assert t["mismatched_cases"] > 0
    else:
        assert t["error_cases"] > 0
        assert reason in json.dumps(doc["errors"]), doc["errors"][:3]


def test_hang_is_stopped_by_the_timeout():
    r = _verify("-b", F + "Hang", *ARGS, "--timeout", "3", "--json", timeout=240)
    assert r.returncode == 1
    assert "exceeded --timeout 3 s" in json.dumps(json.loads(r.stdout)["errors"])


def test_stdout_chatter_never_reaches_json_and_the_run_passes():
    r = _verify("-b", F + "StdoutChatter", *ARGS, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["status"] == "pass"
    assert "chatter" in r.stderr


def test_module_raising_at_import_is_unavailable_not_a_traceback():
    r = _verify("-b", "mxref.backends._faulty_import:Backend", *ARGS)
    assert r.returncode == 4, r.stderr
    assert "RuntimeError: planted" in r.stderr and "Traceback" not in r.stderr
    r = _verify("-b", "mxref.backends._faulty_import:Backend", *ARGS, "--in-process")
    assert r.returncode == 4, r.stderr
    assert "RuntimeError: planted" in r.stderr and "Traceback" not in r.stderr


def test_in_process_shows_what_isolation_prevents():
    """The planted fault: in mxref's own process, os._exit(0) ends the run with status 0 and
    no report - the false pass issue 27 found. Isolated (the default), the same backend fails."""
    r = _verify("-b", F + "OsExitZero", *ARGS, "--in-process")
    assert r.returncode == 0 and "Summary" not in r.stdout
    r = _verify("-b", F + "SysExitZero", *ARGS, "--in-process")   # caught in-process too
    assert r.returncode == 1 and "sys.exit(0)" in r.stdout


def test_jobs_workers_isolate_their_backend():
    r = _verify("-b", F + "OsExitZero", *ARGS[:4], "-j", "2", "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "exited with status 0" in json.dumps(json.loads(r.stdout)["errors"])


# ---- the proxy and the wire format ---------------------------------------------------------
def test_proxy_round_trip_and_restart_after_death():
    b = IsolatedBackend(F + "FaultAfterFirstCall", timeout=60)
    x = np.arange(64, dtype=np.float32).view(np.uint32).reshape(2, 32)
    kw = dict(src_dtype="float32", fmt="mxfp4", profile="ocp", axis=1)
    s, c = b.quantize_mx(x, **kw)
    assert type(s) is np.ndarray and s.dtype == np.uint8 and c.shape == (2, 32)
    with pytest.raises(BackendFault, match="exited with status 0 .* during quantize_mx"):
        b.quantize_mx(x, **kw)
    s2, c2 = b.quantize_mx(x, **kw)                # a fresh worker answers the next call
    assert np.array_equal(s, s2) and np.array_equal(c, c2)
    assert b.name == "faulty-exit-midway" and b.profiles == ("ocp",)
    b.close()


def test_proxy_start_errors_are_typed():
    with pytest.raises(UnknownBackendError):
        IsolatedBackend("no-such-backend")
    with pytest.raises(BackendUnavailable, match="RuntimeError: planted"):
        IsolatedBackend("mxref.backends._faulty_import:Backend")


def test_wire_format_carries_data_only():
    bufs = []
    tree = _encode([(np.arange(5, dtype=">u4"), np.float32(1.5)), {"k": "v", "n": None}], bufs)
    pieces = _frame({"value": tree}, bufs)
    payload = bytearray(b"".join(bytes(p) for p in pieces[1:]))
    header, arrays = _unframe(payload)
    (a, f), d = _decode(header["value"], arrays)
    assert a.dtype == np.dtype(">u4") and list(a) == [0, 1, 2, 3, 4]
    assert f.shape == () and float(f) == 1.5 and d == {"k": "v", "n": None}
    for bad in (np.array([object()]), object(), np.zeros(2, "c16"), {1: 2}):
        with pytest.raises(Exception, match="only bool|type|numpy"):
            _encode(bad, [])


def test_unanswered_rows_are_errors(monkeypatch):
    """Planted: a check that never calls the backend for some rows. Before the guard they kept
    the initial status (pass); now every selected row no call covered is an error."""
    from mxref.backends import get_backend
    from mxref.verify import run as R

    real = R._RUNNERS["quantize_mx"]

    def forgetful(backend, table, res, rows, profile):
        real(backend, table, res, rows, profile)
        res.answered[rows[::2]] = False               # half the rows were never sent
    monkeypatch.setitem(R._RUNNERS, "quantize_mx", forgetful)
    rep = R.verify(get_backend("numba"), levels=(0,), ops=["quantize_mx"], formats=["mxfp4"],
                   src_dtypes=["float32"], profiles=["ocp"])
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and s["error_cases"] == (s["cases"] + 1) // 2
    assert "no backend result covered this case" in str(rep.doc["errors"])
