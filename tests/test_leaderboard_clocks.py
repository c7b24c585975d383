"""Clocks under load (mxref.leaderboard.clocks): nvidia-smi parsing under both field names,
reason bits, the reduction, NVML / nvidia-smi / no tool, the sampling thread. No GPU: fakes
throughout; expected values written by hand."""
import subprocess
import sys
import threading

import pytest

from mxref.leaderboard import clocks

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
