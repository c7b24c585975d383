"""Clocks under load (mxref.leaderboard.clocks): nvidia-smi parsing under both field names,
reason bits, the reduction, NVML / nvidia-smi / no tool, the sampling thread, the record field
in the schema, ingest, and reproduce showing the clocks of both runs. No GPU: fakes throughout;
expected values written by hand."""
import importlib.util
import json
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.leaderboard import clocks
from mxref.leaderboard import reproduce as rp
from mxref.leaderboard.cli import reproduce_table
from mxref.leaderboard.record import REPO, machine, make_record
from mxref.leaderboard.runners import combine_processes, ingest_gpu
from mxref.leaderboard.schema import schema_problems
from mxref.leaderboard.submit import store_path


@pytest.fixture(autouse=True)
def fake_suites_may_run(monkeypatch):
    """The fake re-run here is not an allow-listed command; the seal and schema are still
    checked. test_leaderboard_sealed.py tests the whole gate."""
    from mxref.leaderboard import reproduce as _rp
    monkeypatch.setattr(_rp, "command_problems", lambda cmd, repo=None: [])

EVENTS, THROTTLE = clocks.REASON_FIELDS


# ---- parsing ----------------------------------------------------------------------------------
def test_parse_smi_line():
    assert clocks.parse_smi_line("1980, 2619, 652.31, 61, 0x0000000000000004") == {
        "sm_mhz": 1980.0, "mem_mhz": 2619.0, "power_w": 652.31, "temp_c": 61.0, "reasons": 4}
    # [N/A] fields are null, the rest stay
    assert clocks.parse_smi_line("[N/A], 2619, [N/A], 40, [N/A]") == {
        "sm_mhz": None, "mem_mhz": 2619.0, "power_w": None, "temp_c": 40.0, "reasons": None}
    assert clocks.parse_smi_line(" 1755 MHz, 2619 MHz, 699.90 W, 70, 0x44") == {   # with units
        "sm_mhz": 1755.0, "mem_mhz": 2619.0, "power_w": 699.9, "temp_c": 70.0, "reasons": 0x44}
    for junk in ('Field "clocks_event_reasons.active" is not a valid field to query.',
                 "", "1980, 2619, 650", "1980, 2619, 650, 60, 0x0, 7",
                 "a, b, c, d, e", "[N/A], [N/A], [N/A], [N/A], [N/A]",
                 "No devices were found"):
        assert clocks.parse_smi_line(junk) is None, junk
    out = "WARNING: something\n\n1410, 1593, 300.5, 45, 0x0000000000000001\n1, 2, 3, 4, 0x0\n"
    assert clocks.parse_smi_output(out) == {"sm_mhz": 1410.0, "mem_mhz": 1593.0,
                                            "power_w": 300.5, "temp_c": 45.0, "reasons": 1}
    assert clocks.parse_smi_output("garbage\nmore garbage") is None


def test_decode_reasons():
    assert clocks.decode_reasons(0) == [] and clocks.decode_reasons(None) == []
    assert clocks.decode_reasons(0x4) == ["sw_power_cap"]
    assert clocks.decode_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap",
                                                      "hw_thermal_slowdown"]
    assert clocks.decode_reasons(0x8 | 0x20 | 0x80) == ["hw_slowdown", "sw_thermal_slowdown",
                                                       "hw_power_brake_slowdown"]
    assert clocks.decode_reasons(0x1008) == ["hw_slowdown", "unknown_0x1000"]


def test_gpu_id():
    assert clocks.gpu_id({}) == "0"
    assert clocks.gpu_id({"CUDA_VISIBLE_DEVICES": "3,1"}) == "3"
    assert clocks.gpu_id({"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd"}) == "GPU-ab12"


# ---- sources ----------------------------------------------------------------------------------
class FakeSmi:
    """subprocess.run for nvidia-smi: `fields` are the reason fields this driver knows."""

    def __init__(self, fields=(EVENTS,), line="1980, 2619, 690.5, 64, 0x0000000000000004"):
        self.fields, self.line, self.calls = fields, line, []

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        query = next(a for a in argv if a.startswith("--query-gpu="))
        field = query.split(",")[-1]
        if field not in self.fields:
            return subprocess.CompletedProcess(argv, 2, f'Field "{field}" is not a valid field '
                                               "to query.\n\n", "")
        return subprocess.CompletedProcess(argv, 0, self.line + "\n", "")


def test_smi_source_takes_either_field_name():
    new = clocks.SmiSource("0", FakeSmi((EVENTS, THROTTLE)))
    assert new.probe()["sm_mhz"] == 1980.0 and new.field == EVENTS
    old_run = FakeSmi((THROTTLE,))
    old = clocks.SmiSource("2", old_run)
    assert old.probe()["reasons"] == 4 and old.field == THROTTLE
    assert old()["power_w"] == 690.5
    argv = old_run.calls[-1]
    assert argv[:3] == ["nvidia-smi", "-i", "2"] and argv[-1] == "--format=csv,noheader,nounits"
    assert argv[3] == ("--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                       "clocks_throttle_reasons.active")
    with pytest.raises(clocks.Unavailable, match="not a valid field"):
        clocks.SmiSource("0", FakeSmi(())).probe()
    with pytest.raises(clocks.Unavailable, match="exit 0"):       # runs, prints garbage
        clocks.SmiSource("0", FakeSmi(line="No devices were found")).probe()


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    def __init__(self, power_error=False):
        self.power_error, self.inited = power_error, False

    def nvmlInit(self):
        self.inited = True

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetClockInfo(self, h, which):
        return {1: 1755, 2: 2619}[which]

    def nvmlDeviceGetPowerUsage(self, h):
        if self.power_error:
            raise self.NVMLError("Not Supported")
        return 699_500                                    # mW

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 71

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):   # an older pynvml: no Event name
        return 0x4 | 0x40


def test_nvml_source_and_fallbacks():
    src, why = clocks.open_source("0", nvml=FakeNvml(), run=FakeSmi())
    assert why is None and src.name == "nvml" and src.handle == ("h", 0)
    assert src() == {"sm_mhz": 1755, "mem_mhz": 2619, "power_w": 699.5, "temp_c": 71,
                     "reasons": 0x44}
    assert clocks.NvmlSource("0", FakeNvml(power_error=True))()["power_w"] is None

    class NoNvml:                       # as `import pynvml` failing would leave it
        def nvmlInit(self):
            raise ImportError("No module named 'pynvml'")
    src, why = clocks.open_source("0", nvml=NoNvml(), run=FakeSmi((THROTTLE,)))
    assert why is None and src.name == "nvidia-smi" and src.field == THROTTLE

    def missing(argv, **kw):
        raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")
    src, why = clocks.open_source("0", nvml=NoNvml(), run=missing)
    assert src is None
    assert "pynvml: ImportError: No module named 'pynvml'" in why
    assert "No such file or directory" in why


def test_the_no_tool_path_never_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)          # `import pynvml` fails
    src, why = clocks.open_source(exe="no-such-nvidia-smi")    # the real subprocess.run
    assert src is None
    assert why.startswith("pynvml: ModuleNotFoundError")
    assert "; nvidia-smi: FileNotFoundError: " in why and "no-such-nvidia-smi" in why
    with clocks.under_load(src, why) as box:
        pass
    assert box["clocks"] == {
        "source": None, "samples": 0, "sm_mhz_median": None, "sm_mhz_min": None,
        "sm_mhz_max": None, "mem_mhz_median": None, "power_w_median": None, "temp_c_max": None,
        "reasons": [], "reason_samples": {}, "error": why}


# ---- the reduction ----------------------------------------------------------------------------
def S(sm, mem, power, temp, reasons):
    return {"sm_mhz": sm, "mem_mhz": mem, "power_w": power, "temp_c": temp, "reasons": reasons}


def test_reduce_samples():
    samples = [S(1980, 2619, 650.0, 60, 0x0), S(1755, 2619, 700.0, 62, 0x4), None,
               S(1980, 2619, 690.0, 61, 0x4 | 0x1), S(1900, 2619, None, 63, None)]
    assert clocks.reduce_samples(samples, source="nvidia-smi") == {
        "source": "nvidia-smi", "samples": 4,
        "sm_mhz_median": 1940.0, "sm_mhz_min": 1755, "sm_mhz_max": 1980,
        "mem_mhz_median": 2619, "power_w_median": 690.0, "temp_c_max": 63,
        "reasons": ["gpu_idle", "sw_power_cap"],
        "reason_samples": {"gpu_idle": 1, "sw_power_cap": 2}}
    r = clocks.reduce_samples([S(1410, None, 300.04, None, 0x40)], source="nvml", errors=2,
                              error="TimeoutExpired: 5 s")
    assert r["power_w_median"] == 300.0 and r["mem_mhz_median"] is None
    assert r["temp_c_max"] is None and r["reasons"] == ["hw_thermal_slowdown"]
    assert r["errors"] == 2 and r["error"] == "TimeoutExpired: 5 s"
    empty = clocks.reduce_samples([], source="nvml")
    assert empty["samples"] == 0 and empty["error"] == "no samples"
    assert empty["sm_mhz_median"] is None


# ---- the thread -------------------------------------------------------------------------------
def test_sampler_thread_starts_and_stops():
    calls, enough = [], threading.Event()

    def sample():
        calls.append(1)
        if len(calls) >= 3:
            enough.set()
        return S(1980 - 10 * len(calls), 2619, 600.0, 50 + len(calls), 0x4)
    s = clocks.ClockSampler(sample, interval=0.001, source="fake").start()
    assert enough.wait(10)
    r = s.stop()
    assert not s._thread.is_alive()
    n = len(calls)
    assert r["samples"] == n >= 3 and r["source"] == "fake" and "error" not in r
    assert r["sm_mhz_max"] == 1970 and r["sm_mhz_min"] == 1980 - 10 * n
    assert r["temp_c_max"] == 50 + n and r["reasons"] == ["sw_power_cap"]
    assert len(calls) == n                  # nothing samples after stop


def test_sampler_takes_one_sample_at_once_and_counts_failures():
    # a long interval: stop() right away still has the sample taken at start
    s = clocks.ClockSampler(lambda: S(1980, 2619, 600.0, 50, 0), interval=60).start()
    r = s.stop()
    assert r["samples"] == 1 and r["sm_mhz_median"] == 1980

    def broken():
        raise RuntimeError("nvidia-smi hung")
    r = clocks.ClockSampler(broken, interval=60, source="nvidia-smi").start().stop()
    assert r["samples"] == 0 and r["errors"] == 1
    assert r["error"] == "RuntimeError: nvidia-smi hung"


def test_under_load_with_a_source():
    src = clocks.SmiSource("0", FakeSmi())
    with clocks.under_load(src, interval=60) as box:
        assert box == {}                    # filled on exit
    c = box["clocks"]
    assert c["source"] == "nvidia-smi" and c["samples"] == 1
    assert c["sm_mhz_median"] == 1980.0 and c["reasons"] == ["sw_power_cap"]


# ---- records ----------------------------------------------------------------------------------
ENV = {"machine": machine({"name": "Fake GPU 80GB", "runtime": "CUDA 13.0"}),
       "packages": {"python": "3.12", "mxref": "0"},
       "golden": {"suite": "s", "suite_version": "1", "manifest_sha256": "0" * 64},
       "git": {"commit": "a" * 40, "dirty": False, "tree": "b" * 40},
       "created": "2026-11-22T08:00:00Z"}


def C(sm, smin, power, reasons=(), source="nvidia-smi"):
    """One process's clocks dict as reduce_samples writes it."""
    return {"source": source, "samples": 20, "sm_mhz_median": sm, "sm_mhz_min": smin,
            "sm_mhz_max": sm, "mem_mhz_median": 2619, "power_w_median": power,
            "temp_c_max": 70, "reasons": list(reasons),
            "reason_samples": {r: 5 for r in reasons}}


def rec(median, clocks_under_load=None, command=("python3", "x", "--out", "X")):
    metric = {"name": "kernel time", "unit": "ms", "lower_is_better": True,
              "repeats": [median * 0.999, median, median * 1.001], "processes": 3}
    if clocks_under_load is not None:
        metric["clocks_under_load"] = clocks_under_load
    return make_record(suite="gpu-kernels", entry="MXFP4 GEMM 8192^3 block_sequential",
                       group="gemm", impl="triton", op="gemm", fmt="mxfp4+mxfp4",
                       profile="ocp", params={}, metric=metric, command=list(command),
                       verify={"kind": "mxref-verify", "report": "verify/x",
                               "sha256": "0" * 64, "status": "pass", "backend": "triton"},
                       env=ENV)


def test_schema_accepts_and_rejects_the_field():
    assert schema_problems(rec(11.7)) == []                       # an older record
    ok = rec(11.7, [C(1755, 1650, 699.0, ["sw_power_cap"]), None,
                    clocks.unavailable("nvidia-smi: not found")])
    assert schema_problems(ok) == []

    def bad(c):
        return schema_problems(rec(11.7, c))
    assert bad([]) and bad(C(1755, 1650, 699.0))          # not a list / an empty one
    assert any("clocks_under_load/0" in p for p in bad([dict(C(1755, 1, 1), extra=1)]))
    assert bad([dict(C(1755, 1, 1), samples=-1)])
    assert bad([dict(C(1755, 1, 1), source="dcgm")])
    assert bad([dict(C(1755, 1, 1), reasons="sw_power_cap")])
    assert bad([{"sm_mhz_median": 1755}])                 # no source / samples


def test_combine_and_ingest_carry_the_clocks(tmp_path):
    def doc(ms, c):
        row = {"kernel": "q", "group": "quantize", "status": "ok", "ms": ms, "repeats_ms": [ms],
               "gbps": 1000 / ms, "meta": dict(op="quantize_mx", format="mxfp4",
                                                profile="ocp", impl="triton fast")}
        if c is not None:
            row["clocks_under_load"] = c
        roof = {"kernel": "roofline: device copy bf16 (read+write)", "status": "ok", "ms": 0.5,
                "gbps": 2000.0, "meta": {"roofline": "copy"}}
        return {"device": {"gpu": "Fake GPU 80GB", "cuda": "13.0"}, "size": 8,
                "rows": [roof, row]}
    a, b = C(1980, 1960, 650.0), C(1755, 1700, 699.0, ["sw_power_cap"])
    both = combine_processes([doc(1.0, a), doc(1.1, None), doc(1.2, b)])
    q = next(r for r in both["rows"] if r["kernel"] == "q")
    assert q["clocks_under_load"] == [a, None, b]
    old = combine_processes([doc(1.0, None), doc(1.1, None)])
    assert "clocks_under_load" not in next(r for r in old["rows"] if r["kernel"] == "q")

    report = {"status": "pass", "summary": {"passed_cases": 1}}
    for d, want in ((both, [a, None, b]), (doc(1.0, a), [a]), (old, None)):
        (p,) = ingest_gpu(tmp_path / str(id(d)), d, report, "verify/x.json", "0" * 64,
                          ["python3", "x", "--out", "X"])
        r = json.loads(p.read_text())
        assert r["metric"].get("clocks_under_load") == want
        assert schema_problems(r) == []


# ---- reproduce --------------------------------------------------------------------------------
def test_compare_shows_the_clocks_of_both_runs():
    old = rec(11.7, [C(1755, 1650, 699.0, ["sw_power_cap"]), C(1740, 1600, 700.0,
                                                                ["gpu_idle", "sw_power_cap"]),
                     C(1770, 1700, 698.0)])
    new = rec(11.7 / 1.053, [C(1980, 1965, 640.0, ["gpu_idle"])] * 3)
    v = rp.compare(old, new)
    assert v["clocks"]["note"] == ("SM 1755->1980 MHz (min 1600->1965), power 699->640 W, "
                                   "reasons sw_power_cap -> none")
    assert v["clocks"]["recorded"] == {"sm_mhz": 1755, "sm_mhz_min": 1600, "power_w": 699.0,
                                       "temp_c_max": 70, "reasons": ["sw_power_cap", "gpu_idle"],
                                       "processes": 3}
    assert v["clocks"]["sm_change"] == pytest.approx(1980 / 1755 - 1)
    # only one side has clocks, or a side has none that answered: nothing to show
    assert "clocks" not in rp.compare(rec(11.7), new)
    assert "clocks" not in rp.compare(old, rec(11.7))
    assert "clocks" not in rp.compare(old, rec(11.7, [clocks.unavailable("no tool")]))
    lines = reproduce_table([dict(v, entry="e", unit="ms")]).splitlines()
    assert lines[2].startswith("e ") and lines[2].rstrip().endswith("not-reproduced")
    assert lines[3] == ("       clocks under load: SM 1755->1980 MHz (min 1600->1965), "
                        "power 699->640 W, reasons sw_power_cap -> none")


FAKE_RERUN = """
import json, os, sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
(out / "new.json").write_text(os.environ["FAKE_NEW_RECORD"])
"""


def test_reproduce_cli_table_and_json_show_the_clocks(tmp_path, monkeypatch):
    script = tmp_path / "rerun.py"
    script.write_text(FAKE_RERUN)
    cmd = [sys.executable, str(script), "--out", "X"]
    old = rec(11.7, [C(1755, 1650, 699.0, ["sw_power_cap"])] * 3, command=cmd)
    new = rec(11.7 / 1.053, [C(1980, 1965, 640.0)] * 3, command=cmd)
    store = tmp_path / "store"
    p = store_path(store, old)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(old))
    monkeypatch.setenv("FAKE_NEW_RECORD", json.dumps(new))
    args = ["leaderboard", "reproduce", str(store), "--no-floor", "-q"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    assert ("clocks under load: SM 1755->1980 MHz (min 1650->1965), power 699->640 W, "
            "reasons sw_power_cap -> none") in r.stdout
    r = CliRunner().invoke(main, args + ["--json"])
    (row,) = json.loads(r.stdout)["rows"]
    assert row["status"] == "not-reproduced" and row["difference"] == pytest.approx(-0.05033,
                                                                                    abs=1e-4)
    assert row["clocks"]["recorded"]["sm_mhz"] == 1755 and row["clocks"]["new"]["sm_mhz"] == 1980


# ---- the bench --------------------------------------------------------------------------------
def test_bench_rows_carry_the_clocks(monkeypatch):
    """bench/gpu_kernels.py (torch and triton imported here, inside the test): a timed row gets
    the clocks sampled while it was timed, an untimed row none, and the Markdown shows them."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    spec = importlib.util.spec_from_file_location("gpu_kernels_under_test",
                                                  REPO / "bench" / "gpu_kernels.py")
    gk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gk)
    timed = []
    monkeypatch.setattr(gk, "_do_bench", lambda fn, reps: timed.append(reps) or 2.0)
    monkeypatch.setattr(gk, "CLOCKS", (clocks.SmiSource("0", FakeSmi()), None))
    monkeypatch.setattr(gk, "REPEATS", 3)
    run = gk.Run.__new__(gk.Run)
    run.rows = []
    ms, reps = gk.bench_repeats(lambda: None, reps=100)
    assert (ms, reps, timed) == (2.0, [2.0, 2.0, 2.0], [100, 100, 100])
    run.record(kernel="k", status="ok", ms=ms, repeats_ms=reps)
    run.record(kernel="k2", status="FAILED", error="1 code mismatch")
    monkeypatch.setattr(gk, "CLOCKS", (None, "nvidia-smi: not found"))
    run.record(kernel="peer: p", status="ok", ms=gk.bench(lambda: None))
    ok, failed, peer = run.rows
    assert ok["clocks_under_load"]["sm_mhz_median"] == 1980.0
    assert ok["clocks_under_load"]["reasons"] == ["sw_power_cap"]
    assert "clocks_under_load" not in failed
    assert peer["clocks_under_load"]["error"] == "nvidia-smi: not found"
    doc = {"device": {"gpu": "g", "sms": 1, "memory_gib": 1, "driver": "d", "cuda": "c",
                      "torch": "t", "triton": "t", "clocks": "idle", "commit": "0" * 10},
           "time": "now", "size": 8, "rows": run.rows, "clocks_source": "nvidia-smi",
           "clocks_error": None}
    md = gk.markdown(doc)
    assert "| k | ok | 2000.0 |  |  | SM 1980 MHz (1980-1980) |" in md
    assert "SM clock while timed (median, range): from nvidia-smi." in md
