"""Clocks under load: the GPU's SM clock, memory clock, power, temperature and clock-event
(throttle) reasons, sampled from a background thread while a kernel is timed.

The one ``nvidia-smi`` string a GPU record carried (``machine.accelerator.clocks``) is taken at
the start of a run, idle; it says nothing about the clocks a kernel ran at. ``bench/gpu_kernels.py``
wraps each timing in `under_load`, and each kernel row gets a `reduce_samples` dict
(``clocks_under_load``): SM MHz median / min / max, memory MHz median, power median, temperature
max, the active clock-event reasons by name, and how many samples there were.

CPU-only, like the rest of mxref: no torch, no triton, no CUDA call. The samples come from NVML
through ``pynvml`` (package nvidia-ml-py) where it imports and answers, else from
``nvidia-smi --query-gpu`` (``clocks_event_reasons.active``, or ``clocks_throttle_reasons.active``
on drivers older than the rename); where neither answers, each kernel's dict has no numbers and
says why (``error``). The sampling thread only calls NVML or runs nvidia-smi; the timed GPU work
is not touched.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import threading

INTERVAL_S = 0.05            # between samples (nvidia-smi itself takes some tens of ms a call)
SMI_TIMEOUT_S = 5

# NVML's nvmlClocksEventReasons (formerly nvmlClocksThrottleReasons) bits; nvidia-smi prints
# the same mask as clocks_event_reasons.active
REASON_BITS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
               (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
               (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
               (0x100, "display_clock_setting"))
_KNOWN = sum(b for b, _ in REASON_BITS)

SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")
REASON_FIELDS = ("clocks_event_reasons.active",       # drivers from 535 on
                 "clocks_throttle_reasons.active")    # older drivers
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}


class Unavailable(Exception):
    """Neither NVML nor nvidia-smi gave a sample."""


def decode_reasons(mask: int | None) -> list[str]:
    """The names of the set bits of a clock-event reason mask, in bit order; bits NVML does not
    name here come last as one ``unknown_0x...``."""
    if not mask:
        return []
    names = [n for b, n in REASON_BITS if mask & b]
    if mask & ~_KNOWN:
        names.append(f"unknown_0x{mask & ~_KNOWN:x}")
    return names


def _field(text: str, parse):
    """`parse` of one nvidia-smi field; None for [N/A] and the like, or what does not parse."""
    t = text.strip()
    if t.lower() in _NA:
        return None
    try:
        return parse(t)
    except (ValueError, IndexError):
        return None


def _number(t: str) -> float:
    return float(t.split()[0])                 # "1980" (nounits), or "1980 MHz" without it


def _mask(t: str) -> int:
    return int(t, 16) if t.lower().startswith("0x") else int(t)


def parse_smi_line(line: str) -> dict | None:
    """One line of ``nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,
    <reasons> --format=csv,noheader,nounits`` as a sample; None for a line that is not one
    (another field count, or no field readable)."""
    parts = line.split(",")
    if len(parts) != len(SMI_FIELDS) + 1:
        return None
    sm, mem, power, temp = (_field(p, _number) for p in parts[:4])
    reasons = _field(parts[4], _mask)
    if sm is None and mem is None and power is None and temp is None and reasons is None:
        return None
    return {"sm_mhz": sm, "mem_mhz": mem, "power_w": power, "temp_c": temp, "reasons": reasons}


def parse_smi_output(text: str) -> dict | None:
    """The first line of `text` that is a sample (nvidia-smi is asked for one GPU)."""
    for line in text.splitlines():
        s = parse_smi_line(line)
        if s is not None:
            return s
    return None


def gpu_id(env=None) -> str:
    """The GPU that CUDA calls device 0, as nvidia-smi / NVML name it: the first entry of
    CUDA_VISIBLE_DEVICES (an index or a UUID), else "0"."""
    v = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    first = v.split(",")[0].strip()
    return first or "0"


class SmiSource:
    """Samples by running nvidia-smi once per call. `run` is subprocess.run (tests: a fake)."""
    name = "nvidia-smi"

    def __init__(self, gpu: str = "0", run=subprocess.run, exe: str = "nvidia-smi"):
        self.gpu, self.run, self.exe = gpu, run, exe
        self.field = None

    def _query(self, field):
        p = self.run([self.exe, "-i", self.gpu,
                      "--query-gpu=" + ",".join(SMI_FIELDS + (field,)),
                      "--format=csv,noheader,nounits"],
                     capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        s = parse_smi_output(p.stdout) if p.returncode == 0 else None
        if s is None:
            why = (p.stderr or p.stdout or "").strip().splitlines()
            raise Unavailable(f"nvidia-smi {field}: exit {p.returncode}"
                              + (f": {why[0][:120]}" if why else ""))
        return s

    def probe(self) -> dict:
        """The first sample, trying the event-reasons field and then the older throttle one."""
        errors = []
        for field in REASON_FIELDS:
            try:
                s = self._query(field)
            except (OSError, subprocess.SubprocessError, Unavailable) as e:
                errors.append(str(e) if isinstance(e, Unavailable) else
                              f"nvidia-smi: {type(e).__name__}: {e}")
                if isinstance(e, OSError):           # no nvidia-smi at all
                    break
                continue
            self.field = field
            return s
        raise Unavailable("; ".join(errors))

    def __call__(self) -> dict:
        return self._query(self.field or REASON_FIELDS[0])


class NvmlSource:
    """Samples through pynvml (`nvml`: the module, or a fake with the same functions)."""
    name = "nvml"

    def __init__(self, gpu: str = "0", nvml=None):
        if nvml is None:
            import pynvml as nvml                      # nvidia-ml-py; absent on most machines
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle = (nvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit() else
                       nvml.nvmlDeviceGetHandleByUUID(gpu))
        self.reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or
                           nvml.nvmlDeviceGetCurrentClocksThrottleReasons)

    def _get(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except Exception:  # noqa: BLE001 -- NVMLError_NotSupported and kin: that field is null
            return None

    def __call__(self) -> dict:
        n = self.nvml
        power = self._get(n.nvmlDeviceGetPowerUsage)              # mW
        return {"sm_mhz": self._get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
                "mem_mhz": self._get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
                "power_w": None if power is None else power / 1000.0,
                "temp_c": self._get(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
                "reasons": self._get(self.reasons_fn)}

    def probe(self) -> dict:
        s = self()
        if s["sm_mhz"] is None:
            raise Unavailable("NVML gave no SM clock")
        return s


def open_source(gpu: str | None = None, *, nvml=None, run=subprocess.run,
                exe: str = "nvidia-smi"):
    """(source, None) for the first of NVML and nvidia-smi that gives a sample, else
    (None, why). Never raises."""
    gpu = gpu if gpu is not None else gpu_id()
    why = []
    try:
        src = NvmlSource(gpu, nvml)
        src.probe()
        return src, None
    except Exception as e:  # noqa: BLE001 -- ImportError, NVMLError, ...: fall back
        why.append(f"pynvml: {type(e).__name__}: {e}"[:200])
    try:
        src = SmiSource(gpu, run, exe)
        src.probe()
        return src, None
    except Exception as e:  # noqa: BLE001
        why.append(f"{e}"[:300] if isinstance(e, Unavailable) else
                   f"nvidia-smi: {type(e).__name__}: {e}"[:300])
    return None, "; ".join(why)


def _median(xs):
    return statistics.median(xs) if xs else None


def reduce_samples(samples, *, source: str | None, errors: int = 0,
                   error: str | None = None) -> dict:
    """The per-kernel dict of a list of samples (each as `parse_smi_line` gives; None entries
    are skipped). ``error`` is set when there is no sample at all, or a sample call failed."""
    ss = [s for s in samples if s]

    def vals(k):
        return [s[k] for s in ss if s.get(k) is not None]
    sm = vals("sm_mhz")
    power = _median(vals("power_w"))
    counts = {}
    for s in ss:
        for name in decode_reasons(s.get("reasons")):
            counts[name] = counts.get(name, 0) + 1
    order = [n for _, n in REASON_BITS]
    reasons = sorted(counts, key=lambda n: order.index(n) if n in order else len(order))
    out = {"source": source, "samples": len(ss),
           "sm_mhz_median": _median(sm), "sm_mhz_min": min(sm) if sm else None,
           "sm_mhz_max": max(sm) if sm else None, "mem_mhz_median": _median(vals("mem_mhz")),
           "power_w_median": None if power is None else round(power, 1),
           "temp_c_max": max(vals("temp_c")) if vals("temp_c") else None,
           "reasons": reasons, "reason_samples": {n: counts[n] for n in reasons}}
    if errors:
        out["errors"] = errors
    if errors or not ss:
        out["error"] = error or "no samples"
    return out


def unavailable(why: str) -> dict:
    """The per-kernel dict where no source answered: no numbers, and the reason."""
    return reduce_samples([], source=None, error=why or "no clock source")


class ClockSampler:
    """Calls `sample()` on a daemon thread, first at `start()` and then every `interval`
    seconds until `stop()`, which waits for the call under way and returns `reduce_samples`.
    A failing call is counted (``errors``), never raised."""

    def __init__(self, sample, interval: float = INTERVAL_S, source: str | None = None):
        self.sample, self.interval = sample, interval
        self.source = source if source is not None else getattr(sample, "name", None)
        self.samples, self.errors, self.error = [], 0, None
        self._stop = threading.Event()
        self._thread = None

    def _loop(self):
        while True:
            try:
                self.samples.append(self.sample())
            except Exception as e:  # noqa: BLE001
                self.errors += 1
                self.error = f"{type(e).__name__}: {e}"[:300]
            if self._stop.wait(self.interval):
                return

    def start(self) -> "ClockSampler":
        self._thread = threading.Thread(target=self._loop, name="mxref-clocks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SMI_TIMEOUT_S)
        return reduce_samples(list(self.samples), source=self.source, errors=self.errors,
                              error=self.error)


@contextlib.contextmanager
def under_load(source, why: str | None = None, interval: float = INTERVAL_S):
    """``with under_load(src, why) as box: <timed work>``; afterwards ``box["clocks"]`` is the
    reduced dict of the samples taken meanwhile (`unavailable(why)` where `source` is None)."""
    box = {}
    if source is None:
        try:
            yield box
        finally:
            box["clocks"] = unavailable(why)
        return
    s = ClockSampler(source, interval).start()
    try:
        yield box
    finally:
        box["clocks"] = s.stop()


# ---- reading them: a record's list (one dict per process) and a reproduce note ---------------
def summary(per_process) -> dict | None:
    """Over a record's ``metric.clocks_under_load`` (one dict per process): the median of the
    processes' SM medians, the lowest SM sample, the median power, the highest temperature and
    the union of the reasons. None where no process has an SM clock."""
    ds = [d for d in per_process or [] if d and d.get("sm_mhz_median") is not None]
    if not ds:
        return None
    power = [d["power_w_median"] for d in ds if d.get("power_w_median") is not None]
    temp = [d["temp_c_max"] for d in ds if d.get("temp_c_max") is not None]
    reasons = []
    for d in ds:
        reasons += [r for r in d.get("reasons") or [] if r not in reasons]
    return {"sm_mhz": statistics.median(d["sm_mhz_median"] for d in ds),
            "sm_mhz_min": min(d["sm_mhz_min"] for d in ds if d.get("sm_mhz_min") is not None),
            "power_w": _median(power), "temp_c_max": max(temp) if temp else None,
            "reasons": reasons, "processes": len(ds)}


def compare(recorded, new) -> dict | None:
    """Recorded and new `summary`, and a one-line note (``SM 1755->1980 MHz ...``); None unless
    both sides have clocks under load."""
    a, b = summary(recorded), summary(new)
    if a is None or b is None:
        return None
    note = (f"SM {a['sm_mhz']:.0f}->{b['sm_mhz']:.0f} MHz "
            f"(min {a['sm_mhz_min']:.0f}->{b['sm_mhz_min']:.0f})")
    if a["power_w"] is not None and b["power_w"] is not None:
        note += f", power {a['power_w']:.0f}->{b['power_w']:.0f} W"
    ra = ",".join(r for r in a["reasons"] if r != "gpu_idle") or "none"
    rb = ",".join(r for r in b["reasons"] if r != "gpu_idle") or "none"
    note += f", reasons {ra} -> {rb}"
    return {"recorded": a, "new": b, "sm_change": b["sm_mhz"] / a["sm_mhz"] - 1.0, "note": note}
