"""Stacks on the leaderboard: other kernel stacks (and ours) timed on the same workloads, each
only after a passing verify of that stack, in the same job.

``mxref leaderboard run gpu --backend X [--backend Y ...]`` runs :func:`run_stacks` for the named
backends (any spec ``mxref verify -b`` takes). Per backend:

1. ``mxref verify -b X --ops quantize_mx`` of the formats timed and the profiles it claims
   (its report is the evidence every record of X names, by SHA-256);
2. per workload (quantize bf16 ``[size, size]`` -> fmt, blocks along ``axis``; the workloads of
   our fast kernels in bench/gpu_kernels.py) and claimed profile: when the verify of that
   op / format / profile passed and the backend has a timing entry (``timed_quantize_mx``,
   mxref/backends/base.py), the entry's ``run()`` is checked bit for bit against mxref on the
   timed input, then timed: ``repeats`` medians of the timer, the record's median their median.
   Anything else is "not timed" with the reason, never a number.

The timer: on a GPU ``triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")``,
as bench/gpu_kernels.py times our kernels (CUDA events, L2 flushed before each repetition); on
the CPU (``--device cpu``, for tests and laptops) a wall-clock median of calls, and the records
say so: ``machine.accelerator`` is null, ``params.device`` is ``cpu`` and the metric is named
"CPU wall clock". A test may pass its own timer (:class:`Timer`).

The copy roofline (``y.copy_(x)`` of the bf16 input, read + write) is timed in the same process
with the same timer; a record's ratio is its rate (compulsory bytes: the bf16 input read once,
the packed codes and the E8M0 scales written once) over the copy's.

Besides the records the run writes ``OUT/stacks/<machine>.json`` (schema
``mxref-leaderboard-stacks/1``): every backend asked for, its verify evidence and each
workload's status (timed, with the record; or not timed / unavailable, with the reason). The
site's per-workload ranking lists the stacks that were not timed from it.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailable, MXRefError, UnknownBackendError, Unsupported
from .record import git_state, make_record, run_env, slug
from .schema import STACKS_SCHEMA

OP = "quantize_mx"
FORMATS = ("mxfp4", "mxfp8_e4m3")
AXES = (-1, 0)
# profiles timed for a backend that claims every profile ("*") or more than these
DEFAULT_PROFILES = ("ocp", "rceil")
_CODE_BYTES = {"mxfp4": 0.5, "mxfp8_e4m3": 1.0, "mxfp8_e5m2": 1.0, "mxfp6_e2m3": 0.75,
               "mxfp6_e3m2": 0.75, "mxint8": 1.0}


# ---- timers -----------------------------------------------------------------------------------
class Timer:
    """One median of `fn()` in milliseconds per call. ``name`` goes into the record's params,
    ``metric`` is the record's metric name (it says what clock measured it)."""

    name = "timer"
    metric = "kernel time"

    def __call__(self, fn) -> float:  # pragma: no cover - interface
        raise NotImplementedError


class DoBenchTimer(Timer):
    """triton.testing.do_bench, exactly as bench/gpu_kernels.py times our kernels."""

    name = "triton.testing.do_bench(warmup=25, rep=200, median)"
    metric = "kernel time (CUDA events, do_bench median, L2 flushed)"

    def __init__(self, warmup: int = 25, rep: int = 200):
        self.warmup, self.rep = warmup, rep

    def __call__(self, fn) -> float:
        import triton.testing
        return float(triton.testing.do_bench(fn, warmup=self.warmup, rep=self.rep,
                                             return_mode="median"))


class WallTimer(Timer):
    """The CPU: the median of `calls` wall-clock calls after `warmup` calls. Not a GPU number;
    the records it makes say CPU wall clock."""

    name = "CPU wall clock (time.perf_counter median)"
    metric = "kernel time (CPU wall clock, median of calls)"

    def __init__(self, calls: int = 15, warmup: int = 2):
        self.calls, self.warmup = calls, warmup

    def __call__(self, fn) -> float:
        for _ in range(self.warmup):
            fn()
        ts = []
        for _ in range(self.calls):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3


# ---- workloads --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    fmt: str
    axis: int
    size: int
    src_dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        """The ranking table's key: op, source, format, block axis, shape (no profile: stacks of
        different profiles race on the same workload, each producing its own profile's bits)."""
        return f"quantize bf16->{self.fmt} axis={self.axis} {self.size}x{self.size}"

    @property
    def nbytes(self) -> float:
        n = self.size * self.size
        return 2 * n + _CODE_BYTES.get(self.fmt, 1.0) * n + n / 32


def make_input(size: int, device: str, seed: int = 1):
    """bench/gpu_kernels.py's activations(): Gaussian with outlier columns (x20), bf16."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(size, size, device=device, generator=g)
    idx = torch.randint(0, size, (max(1, size // 256),), device=device, generator=g)
    x[:, idx] *= 20.0
    return x.to(torch.bfloat16)


def check_output(out, x_host, fmt: str, profile: str, axis: int, cache=None) -> tuple[bool, str]:
    """(ok, why): a timing entry's (scales, codes) device tensors against mxref for `profile`
    on the same input, bit for bit; codes unpacked or packed like the pack op. `cache` (a dict)
    keeps mxref's results between calls on the same input."""
    import numpy as np
    import torch

    import mxref
    try:
        scales, codes = out
    except (TypeError, ValueError):
        return False, f"run() returned {type(out).__name__}, not (scales, codes)"
    if not (isinstance(scales, torch.Tensor) and isinstance(codes, torch.Tensor)):
        return False, "run() must return device tensors (torch), not host arrays"
    cache = {} if cache is None else cache
    key = (fmt, profile, axis)
    if key not in cache:
        cache[key] = mxref.quantize(x_host, fmt, profile, axis=axis)
    mx = cache[key]

    def host(t):
        return np.ascontiguousarray(t.detach().contiguous().cpu().view(torch.uint8).numpy())
    s, c = host(scales), host(codes)
    rs = np.asarray(mx.scales)
    if s.size != rs.size:
        return False, f"{s.size} scale bytes, mxref has {rs.size}"
    if c.shape == mx.codes.shape:
        rc = np.asarray(mx.codes)
    else:
        rc = np.asarray(mx.packed())
        if c.shape != rc.shape:
            return False, f"codes shape {c.shape}: neither {mx.codes.shape} nor packed {rc.shape}"
    ds = int((s.reshape(rs.shape) != rs).sum())
    dc = int((c != rc).sum())
    return ds == 0 and dc == 0, f"{ds} scale and {dc} code mismatches of {rs.size}/{rc.size}"


# ---- the run ----------------------------------------------------------------------------------
def _accelerator(device: str):
    if not str(device).startswith("cuda"):
        return None
    import torch
    p = torch.cuda.get_device_properties(torch.device(device))
    return {"name": p.name, "runtime": f"CUDA {torch.version.cuda}" if torch.version.cuda else
            f"ROCm {torch.version.hip}", "driver": None, "clocks": None,
            "sms": p.multi_processor_count, "memory_gib": round(p.total_memory / 2**30, 1)}


def profiles_for(backend, fmt: str, wanted=()) -> list[str]:
    """The profiles of `backend` timed on `fmt`: those it claims (every one for "*") that take
    `fmt`; restricted to `wanted` when given, else to DEFAULT_PROFILES for a backend that claims
    them (ours), else all it claims."""
    from ..formats import FORMATS as FMT
    from ..profiles import PROFILES, get_profile
    claimed = list(PROFILES) if "*" in backend.profiles else list(backend.profiles)
    if wanted:
        cand = [p for p in wanted if p in claimed]
    else:
        cand = [p for p in DEFAULT_PROFILES if p in claimed] or claimed
    out = []
    for p in cand:
        try:
            get_profile(p).check_format(FMT[fmt])
        except (MXRefError, KeyError):
            continue
        out.append(p)
    return out


def verified(report: dict, fmt: str, profile: str) -> tuple[bool, str]:
    """(ok, why): whether `report` passed and holds passing cases of quantize_mx / fmt /
    profile and no failing file of them (the rule submit applies to a record)."""
    from .submit import _covers
    cases, bad = _covers(report, {"op": OP, "format": fmt, "profile": profile}, "bfloat16")
    if bad:
        return False, f"verify of {OP} {fmt} {profile}: " + "; ".join(bad[:2]) + \
            f" (report status {report.get('status')!r})"
    if report.get("status") != "pass":
        return False, f"the verify report's status is {report.get('status')!r}, not 'pass'"
    if cases == 0:
        return False, f"no passing verify case of {OP} {fmt} {profile}"
    return True, f"{cases} passing cases"


def _verify_stack(out: Path, spec: str, device, formats, profiles, levels, log, jobs):
    from .runners import RunnerError, _run, _store_evidence, verify_command
    raw = out / f"verify-{slug(spec)}.json"
    raw.unlink(missing_ok=True)
    cmd = verify_command(spec, [OP], formats, profiles, levels, raw, jobs, device)
    rc = _run(cmd, log)
    if not raw.is_file():
        raise RunnerError(f"mxref verify -b {spec} wrote no report (exit {rc}); see {log}")
    report = json.loads(raw.read_text())
    rel, sha = _store_evidence(out, raw, "json")
    raw.unlink()
    return report, rel, sha


def run_stacks(out: Path, specs, *, size: int, repeats: int, levels, command,
               device: str = "cuda", timer: Timer | None = None, formats=FORMATS, axes=AXES,
               profiles=(), jobs: int = 1, seed: int = 1) -> list[Path]:
    """Verify and time each backend of `specs` (module docstring); returns the records written.
    The roster (OUT/stacks/<machine>.json) lists every (stack, workload, profile) with its
    status."""
    import torch

    from ..backends.base import timing_entry
    from ..backends.registry import get_backend
    from .runners import _write
    git_state()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "run.log"
    device = str(device)
    on_gpu = device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        from .runners import RunnerError
        raise RunnerError(f"--device {device}: torch sees no GPU (use --device cpu to run the "
                          "stacks on the CPU, recorded as CPU numbers)")
    timer = timer or (DoBenchTimer() if on_gpu else WallTimer())
    env = run_env(_accelerator(device))
    x = make_input(size, device, seed)
    x_host = x.cpu()
    if on_gpu:
        y = torch.empty_like(x)

        def copy():
            return y.copy_(x)
        what = f"device copy bf16 (read+write), {device}"
    else:
        # the CPU: numpy's single-threaded memcpy. torch's threaded copy was seen 1000x slower
        # right after numba's parallel regions (their OpenMP threads still spinning on 2
        # cores), which made a ratio "of copy" meaningless
        import numpy as np
        xs = x.view(torch.int16).numpy()
        ys = np.empty_like(xs)

        def copy():
            return np.copyto(ys, xs)
        what = "host copy bf16 (read+write, numpy.copyto), cpu"
    roof_reps = [timer(copy) for _ in range(repeats)]
    roof_ms = statistics.median(roof_reps)
    copy_bytes = 2 * x.numel() * 2
    roofline = {"name": what, "median": roof_ms,
                "unit": "ms", "rate": copy_bytes / (roof_ms * 1e-3) / 1e9, "rate_unit": "GB/s",
                "ratio_label": "of copy", "basis": "rate", "repeats": roof_reps}
    workloads = [Workload(f, a, size) for f in formats for a in axes]
    roster = {"schema": STACKS_SCHEMA, "machine": env["machine"]["slug"], "device": device,
              "timer": timer.name, "size": size, "created": env["created"], "git": env["git"],
              "golden": env["golden"], "command": [str(c) for c in command],
              "workloads": [w.name for w in workloads], "stacks": []}
    written = []
    for spec in specs:
        st = {"spec": spec, "name": spec, "timing_entry": False, "verify": None, "rows": [],
              "status": "ok", "reason": None}
        roster["stacks"].append(st)
        try:
            be = get_backend(spec, device=device)
            be.check_available()
        except (BackendUnavailable, UnknownBackendError) as e:
            st.update(status="unavailable", reason=str(e))
            continue
        st["name"] = str(be.name)
        st["version"] = str(getattr(be, "version", "?"))
        fn = timing_entry(be, OP)
        st["timing_entry"] = fn is not None
        plist = {f: profiles_for(be, f, profiles) for f in formats}
        allp = sorted({p for ps in plist.values() for p in ps})
        if not allp:
            st.update(status="unavailable", reason=(
                f"claims no profile{' of ' + ', '.join(profiles) if profiles else ''} that "
                f"takes {', '.join(formats)} (claims: {', '.join(map(str, be.profiles))})"))
            continue
        # one verify per profile: a profile that fails keeps only its own rows out
        reports = {}
        for profile in allp:
            fmts = [f for f in formats if profile in plist[f]]
            try:
                reports[profile] = _verify_stack(out, spec, device, fmts, [profile], levels,
                                                 log, jobs)
            except MXRefError as e:
                reports[profile] = e
        st["verify"] = {}
        for profile, got in reports.items():
            if isinstance(got, Exception):
                st["verify"][profile] = {"report": None, "status": "error", "reason": str(got)}
                continue
            report, rel, sha = got
            st["verify"][profile] = {
                "report": rel, "sha256": sha, "status": report.get("status"),
                "backend": (report.get("backend") or {}).get("name") or st["name"],
                "cases": int((report.get("summary") or {}).get("passed_cases", 0))}
        try:
            desc = be.describe() or {}
        except Exception:  # noqa: BLE001 - a description is decoration
            desc = {}
        cache = {}
        for w in workloads:
            for profile in plist[w.fmt]:
                row = {"workload": w.name, "format": w.fmt, "axis": w.axis, "profile": profile,
                       "verified": False, "status": "not timed", "reason": None, "record": None}
                st["rows"].append(row)
                got = reports[profile]
                if isinstance(got, Exception):
                    row["reason"] = f"not verified: {got}"
                    continue
                report, rel, sha = got
                vname = st["verify"][profile]["backend"]
                row["verify_report"] = rel
                ok, why = verified(report, w.fmt, profile)
                row["verified"] = ok
                if not ok:
                    row["reason"] = f"not verified: {why}"
                    continue
                if fn is None:
                    row["reason"] = ("no timing entry: the backend does not implement "
                                     "timed_quantize_mx (mxref/backends/base.py)")
                    continue
                try:
                    run = fn(x, fmt=w.fmt, profile=profile, axis=w.axis)
                    good, check = check_output(run(), x_host, w.fmt, profile, w.axis, cache)
                except Unsupported as e:
                    row["reason"] = f"unsupported: {e}"
                    continue
                except Exception as e:  # noqa: BLE001 - a failing stack is reported, not fatal
                    row["reason"] = f"timing entry raised {type(e).__name__}: {e}"[:400]
                    continue
                if not good:
                    row["reason"] = f"in-run bit check failed: {check}"
                    continue
                reps = [timer(run) for _ in range(repeats)]
                impl = f"{st['name']} {st['version']}".strip()
                rec = make_record(
                    suite="stacks", entry=f"{st['name']} {profile} | {w.name}",
                    group="quantize", impl=impl, op=OP, fmt=w.fmt, profile=profile,
                    params={"size": size, "axis": w.axis, "src_dtype": w.src_dtype,
                            "workload": w.name, "stack": st["name"], "backend_spec": spec,
                            "device": device, "backend_device": str(desc.get("device", "")),
                            "timer": timer.name, "bytes": w.nbytes},
                    metric={"name": timer.metric, "unit": "ms", "lower_is_better": True,
                            "repeats": reps, "work": w.nbytes / 1e9 * 1e3,
                            "rate_unit": "GB/s", "processes": 1},
                    roofline=roofline, check=check, command=command,
                    verify={"kind": "mxref-verify", "report": rel, "sha256": sha,
                            "status": report["status"], "backend": vname,
                            "cases": int(report["summary"]["passed_cases"])},
                    env=env)
                p = _write(out, rec)
                written.append(p)
                row.update(status="timed", reason=None,
                           record=p.relative_to(out).as_posix(),
                           median_ms=rec["metric"]["median"])
    rp = out / "stacks" / f"{roster['machine']}.json"
    rp.parent.mkdir(parents=True, exist_ok=True)
    rp.write_text(json.dumps(roster, indent=1, sort_keys=True) + "\n")
    return written
