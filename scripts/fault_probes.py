"""Fault probes (issue 27, "Measure"): run each known fault against mxref and count the verdicts.

Every probe plants one fault in a fresh temporary directory (a tampered corpus copy, a bad
expectations file, a leaderboard record whose command would write a marker, a faulty backend...),
runs one subprocess (``python -m mxref ...`` or ``python -c SNIPPET``; argv built here, never read
from a file) under a timeout, and is classified into exactly one verdict:

  correct            the expected exit code, the reason named (where a failure is due), no traceback
  typed error        refused with a one-line message, but not the expected exit code or reason
  silent wrong       exit 0 (or a success-looking result) where a failure was due, or a wrong result
  crash              a Python traceback, a death by signal, or a non-zero exit with no message
  hang               the timeout expired
  data loss          a file the user wrote (a victim, hashed before and after) changed, or a
                     report / manifest entry was lost
  command execution  a marker file that only a command or pickle from a file could create exists

The goal of issue 27 is zero silent wrong, crash, hang, data loss and command execution; the
script exits 1 while any remains (a CI gate), 0 otherwise. It writes ``fault_probes.md`` and
``fault_probes.json`` under ``--out``.

    python scripts/fault_probes.py                      # every probe, 2 workers
    python scripts/fault_probes.py --category golden --category api --json
    python scripts/fault_probes.py --probe cli_faulty_hang --out /tmp/fp
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import hashlib
import importlib.util
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))          # setups seal leaderboard records with mxref itself
PY = sys.executable
CATEGORIES = ("api", "cli", "golden", "expectations", "leaderboard", "training", "concurrency")
VERDICTS = ("correct", "typed error", "silent wrong", "crash", "hang", "data loss",
            "command execution", "n/a")
BAD = frozenset({"silent wrong", "crash", "hang", "data loss", "command execution"})
TIMEOUT = 120.0
HANG_TIMEOUT = 60.0          # a hang probe: verify gets --timeout 5 when it has that option
VICTIM_TEXT = "ORIGINAL: written by the user, must survive\n"
MARKER = "MARKER"            # created only if a command/pickle from a file ran
TRACEBACK = "Traceback (most recent call last)"
TARGET = "L0/quantize_mx/mxfp4__ocp__float32.arrow"      # the corpus file the golden probes edit


# ---- the probe and its result ------------------------------------------------------------------
@dataclass
class Run:
    """What a probe's subprocess did, as the classifier sees it."""
    rc: int | None                    # None: timed out
    out: str = ""
    err: str = ""
    seconds: float = 0.0
    marker: bool = False              # the command-execution canary exists
    changed: list[str] = field(default_factory=list)    # victims whose bytes changed
    lost: str | None = None           # probe-specific data loss (a report or entries gone)
    wrong: str | None = None          # probe-specific wrong result (bad JSON, wrong step...)
    note: str | None = None           # what a check saw that shows a success was right


@dataclass
class Probe:
    id: str
    category: str
    description: str
    argv: Callable[[Path], list[str]]       # the command, given the probe's temp dir
    expect: tuple[int, ...]                 # exit codes that are correct
    reason: str | None = None               # regex the output must match when a failure is due
    setup: Callable[[Path], None] | None = None
    check: Callable[[Path, Run], None] | None = None    # sets run.lost / .wrong / .note
    victims: tuple[str, ...] = ()           # files (relative to the temp dir) that must not change
    timeout: float = TIMEOUT
    needs: str | None = None                # a module that must import ("torch"), else n/a


def classify(p_expect, reason, run: Run) -> tuple[str, str]:
    """One verdict and a one-line detail for `run` of a probe expecting exit codes `p_expect`
    (and, where a failure is due, output matching `reason`). The order is by severity: a marker
    or a changed victim outweighs whatever the exit code says."""
    text = run.err + "\n" + run.out
    if run.marker:
        return "command execution", f"{MARKER} was created: a command or pickle from a file ran"
    if run.changed or run.lost:
        what = run.lost or f"changed: {', '.join(run.changed)}"
        return "data loss", what
    if run.rc is None:
        return "hang", f"no exit within {run.seconds:.0f} s"
    if TRACEBACK in text:
        return "crash", "traceback: " + _last_line(_traceback_tail(text))
    if run.rc < 0:
        try:
            name = signal.Signals(-run.rc).name
        except ValueError:
            name = str(-run.rc)
        return "crash", f"killed by {name}"
    line = _message(run)
    if run.wrong:
        return "silent wrong", f"exit {run.rc}: {run.wrong}"
    named = _matching_line(reason, text) if reason and run.rc != 0 else None
    if run.rc in p_expect and (named or not reason or run.rc == 0):
        return "correct", named or run.note or line or f"exit {run.rc}"
    if run.rc == 0:                     # not correct, so a failure was due
        return "silent wrong", f"exit 0 where a failure was due{': ' + line if line else ''}"
    if line:
        return "typed error", line
    return "crash", f"exit {run.rc} with no message"


def _matching_line(pattern: str, text: str) -> str | None:
    """Where `pattern` first matches `text` (case-insensitive): its line, cut to ~200
    characters around the match; None when it does not match."""
    for x in text.splitlines():
        m = re.search(pattern, x, re.IGNORECASE)
        if m:
            lo = max(0, m.start() - 40)
            return ("..." if lo else "") + x[lo:lo + 220].strip()
    return None


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1][:200] if lines else ""


def _traceback_tail(text: str) -> str:
    return text[text.rindex(TRACEBACK):]


def _message(run: Run) -> str:
    """The refusal line: the first `error`/`FAIL`/`refused` line, else the last line of stderr
    (then stdout)."""
    return (_matching_line(r"\berror\b|\w+Error\b|^\s*FAIL\b|refused", run.err + "\n" + run.out)
            or _last_line(run.err) or _last_line(run.out))


# ---- helpers used by setups and checks ---------------------------------------------------------
def mxref(*args) -> list[str]:
    return [PY, "-m", "mxref", *map(str, args)]


def snippet(code: str, *args) -> list[str]:
    return [PY, "-c", code, *map(str, args)]


def victim(path: Path, text: str = VICTIM_TEXT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def sha(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def has_option(cmd: tuple[str, ...], option: str) -> bool:
    """Whether `mxref CMD --help` lists `option` (probes use new options where they exist)."""
    r = subprocess.run(mxref(*cmd, "--help"), capture_output=True, text=True, env=ENV, cwd=REPO,
                       timeout=60, check=False)
    return option in r.stdout


ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "CI": "true", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
ENV.pop("MXREF_GOLDEN", None)


class Fixtures:
    """Expensive inputs made once per harness run and copied into each probe's directory."""

    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._corpus: Path | None = None

    def corpus(self) -> Path:
        """A freshly generated L0 quantize_mx corpus (generated, so it carries whatever the
        current generator writes into a manifest)."""
        with self._lock:
            if self._corpus is None:
                out = self.root / "corpus"
                r = subprocess.run(mxref("generate", "--level", "0", "--suite", "quantize_mx",
                                         "--out", out), capture_output=True, text=True, env=ENV,
                                   cwd=self.root, timeout=600, check=False)
                if r.returncode != 0:
                    raise RuntimeError(f"corpus fixture: mxref generate exited {r.returncode}: "
                                       f"{_last_line(r.stderr)}")
                self._corpus = out
            return self._corpus


FIX: Fixtures | None = None
VERIFY_TIMEOUT: bool = False        # `mxref verify --timeout` exists


# ---- API probes ---------------------------------------------------------------------------------
API_PRELUDE = """\
import sys
import numpy as np
import mxref
from mxref.errors import MXRefError
def probe():
{body}
try:
    got = probe()
except MXRefError as e:
    sys.exit(f"error: {{type(e).__name__}}: {{e}}")
if not (isinstance(got, str) and got == "ok"):
    print("returned:", repr(got).replace("\\n", " "))
"""


def api(pid, desc, body, *, ok_result=False, needs=None):
    """An API call that must raise an MXRefError (exit 1, `error:` line); with `ok_result` the
    body may instead return "ok" after checking its own answer (anything else it returns is
    printed and the probe fails as silent wrong)."""
    code = API_PRELUDE.format(body="\n".join("    " + x for x in body.strip().splitlines()))

    def check(d, run):
        if run.rc == 0 and "returned:" in run.out:
            run.wrong = "returned " + _last_line(run.out)[len("returned: "):][:150]
    return Probe(pid, "api", desc, lambda d: snippet(code), expect=(0, 1) if ok_result else (1,),
                 reason=r"error: \w+", check=check, needs=needs)


NV = "np.full((1, 16), 0x2, np.uint8), np.full((1, 1), 0x38, np.uint8)"   # NVFP4 codes, scales
API = [
    api("api_dequant_fp4_code_ff", "dequantize unpacked MXFP4 codes 0xFF (4-bit format)",
        "return mxref.dequantize(codes=np.full((1, 32), 0xFF, np.uint8), "
        "scales=np.full((1, 1), 127, np.uint8), fmt='mxfp4')[0, :2]"),
    api("api_dequant_fp6_code_40", "dequantize MXFP6 code 0x40 (6-bit format)",
        "return mxref.dequantize(codes=np.full((1, 32), 0x40, np.uint8), "
        "scales=np.full((1, 1), 127, np.uint8), fmt='mxfp6_e2m3')[0, :2]"),
    api("api_dequant_nvfp4_tscale_neg", "dequantize NVFP4 with tensor_scale -1",
        f"c, s = {NV}\nreturn mxref.dequantize(codes=c, scales=s, fmt='nvfp4', "
        "tensor_scale=np.float32(-1))[0, :2]"),
    api("api_dequant_nvfp4_tscale_nan", "dequantize NVFP4 with tensor_scale NaN",
        f"c, s = {NV}\nreturn mxref.dequantize(codes=c, scales=s, fmt='nvfp4', "
        "tensor_scale=np.float32('nan'))[0, :2]"),
    api("api_dequant_nvfp4_tscale_inf", "dequantize NVFP4 with tensor_scale +Inf",
        f"c, s = {NV}\nreturn mxref.dequantize(codes=c, scales=s, fmt='nvfp4', "
        "tensor_scale=np.float32('inf'))[0, :2]"),
    api("api_quant_nvfp4_amax_nan", "quantize NVFP4 with global_amax NaN",
        "m = mxref.quantize(np.ones((1, 16), np.float32), 'nvfp4', global_amax=float('nan'))\n"
        "return (m.codes[0, :2], m.tensor_scale)"),
    api("api_quant_nvfp4_amax_inf", "quantize NVFP4 with global_amax +Inf",
        "m = mxref.quantize(np.ones((1, 16), np.float32), 'nvfp4', global_amax=float('inf'))\n"
        "return (m.codes[0, :2], m.tensor_scale)"),
    api("api_quant_nvfp4_amax_neg", "quantize NVFP4 with global_amax -1",
        "m = mxref.quantize(np.ones((1, 16), np.float32), 'nvfp4', global_amax=-1.0)\n"
        "return (m.codes[0, :2], m.tensor_scale)"),
    api("api_quant_float_seed", "stochastic quantize with seed=1.5",
        "p = mxref.get_profile('ocp').replace(name='sr', rounding='stochastic')\n"
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp4', p, seed=1.5).codes[0, :2]"),
    api("api_random_bits_float_seed", "random_bits with seed=2.5",
        "return mxref.random_bits((4,), 2.5)"),
    api("api_quant_empty_rows", "quantize a (0, 32) float32 tensor (empty result is right)",
        "m = mxref.quantize(np.zeros((0, 32), np.float32), 'mxfp4')\n"
        "return 'ok' if m.codes.shape == (0, 32) and m.scales.shape == (0, 1) else "
        "(m.codes.shape, m.scales.shape)", ok_result=True),
    api("api_quant_empty_axis", "quantize a (4, 0) float32 tensor (empty result is right)",
        "m = mxref.quantize(np.zeros((4, 0), np.float32), 'mxfp4')\n"
        "return 'ok' if m.codes.shape == (4, 0) and m.scales.shape == (4, 0) else "
        "(m.codes.shape, m.scales.shape)", ok_result=True),
    api("api_quant_int32", "quantize an int32 array",
        "return mxref.quantize(np.ones((1, 32), np.int32), 'mxfp4').codes[0, :2]"),
    api("api_quant_float64", "quantize float64 without from_float64",
        "return mxref.quantize(np.ones((1, 32)), 'mxfp4').codes[0, :2]"),
    api("api_quant_complex", "quantize a complex64 array",
        "return mxref.quantize(np.ones((1, 32), np.complex64), 'mxfp4').codes[0, :2]"),
    api("api_quant_object", "quantize an object array of floats",
        "return mxref.quantize(np.array([[1.0] * 32], dtype=object), 'mxfp4').codes[0, :2]"),
    api("api_quant_uint16_no_dtype", "quantize uint16 bits without source_dtype",
        "return mxref.quantize(np.ones((1, 32), np.uint16), 'mxfp4').codes[0, :2]"),
    api("api_quant_big_endian", "quantize big-endian float32 (same bits as native, or refused)",
        "x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)\n"
        "a, b = mxref.quantize(x, 'mxfp4'), mxref.quantize(x.astype('>f4'), 'mxfp4')\n"
        "same = (a.codes == b.codes).all() and (a.scales == b.scales).all()\n"
        "return 'ok' if same else 'different codes/scales from the native-order input'",
        ok_result=True),
    api("api_quant_unknown_format", "quantize to format 'mxfp3'",
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp3').codes[0, :2]"),
    api("api_quant_unknown_profile", "quantize under profile 'nope'",
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp4', 'nope').codes[0, :2]"),
    api("api_quant_bad_axis", "quantize with axis=5 on a 2-d input",
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp4', axis=5).codes[0, :2]"),
    api("api_quant_block_size_zero", "quantize with block_size=0",
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp4', block_size=0).codes[0, :2]"),
    api("api_quant_rbits_shape", "stochastic quantize with rbits of the wrong shape",
        "p = mxref.get_profile('ocp').replace(name='sr', rounding='stochastic')\n"
        "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp4', p, "
        "rbits=np.zeros(3, np.uint32)).codes[0, :2]"),
    api("api_dequant_int8_codes", "dequantize int8 (not uint8) codes",
        "return mxref.dequantize(codes=np.ones((1, 32), np.int8), "
        "scales=np.full((1, 1), 127, np.uint8), fmt='mxfp4')[0, :2]"),
    api("api_dequant_scale_shape", "dequantize with too few scales (64 codes, 1 scale)",
        "return mxref.dequantize(codes=np.ones((1, 64), np.uint8), "
        "scales=np.full((1, 1), 127, np.uint8), fmt='mxfp4')[0, -2:]"),
    api("api_torch_meta", "quantize a torch meta tensor",
        "import torch\nreturn mxref.quantize(torch.ones(1, 32, device='meta'), 'mxfp4').codes[0, :2]",
        needs="torch"),
    api("api_torch_sparse", "quantize a torch sparse COO tensor",
        "import torch\nreturn mxref.quantize(torch.ones(1, 32).to_sparse(), 'mxfp4').codes[0, :2]",
        needs="torch"),
    api("api_torch_float64", "quantize a torch float64 tensor",
        "import torch\nreturn mxref.quantize(torch.ones(1, 32, dtype=torch.float64), "
        "'mxfp4').codes[0, :2]", needs="torch"),
]


# ---- CLI / backends -----------------------------------------------------------------------------
FAST = ("--level", "0", "--ops", "quantize_mx", "--no-progress")
ONE_FILE = (*FAST, "-f", "mxfp4", "-p", "ocp", "--src-dtype", "float32")


def _verify_json(d, run):
    """Under --json stdout must be exactly one mxref-verify/1 document telling the exit's truth."""
    try:
        doc = json.loads(run.out)
    except ValueError as e:
        run.wrong = f"stdout is not one JSON document ({e.msg} at char {e.pos})"
        return
    status = doc.get("status") if isinstance(doc, dict) else None
    if (status == "pass") != (run.rc == 0):
        run.wrong = f"JSON status {status!r} but exit {run.rc}"


def faulty(pid, cls, desc, reason, *, jobs=1, hang=False, json_out=False):
    """verify with a faulty backend: any exit but 1 (naming the fault) is a defect."""
    def argv(d):
        a = mxref("verify", "-b", f"mxref.backends.faulty:{cls}", *FAST)
        if jobs > 1:
            a += ["--jobs", str(jobs)]
        if hang and VERIFY_TIMEOUT:
            a += ["--timeout", "5"]
        return a + (["--json"] if json_out else [])
    return Probe(pid, "cli", desc, argv, expect=(1,), reason=reason,
                 timeout=HANG_TIMEOUT if hang else TIMEOUT,
                 check=_verify_json if json_out else None)


def _written(rel):
    """Exit 0 promises the output file `rel`: its absence is a lost report."""
    def check(d, run):
        if run.rc == 0 and not (d / rel).is_file():
            run.lost = f"exit 0 but {rel} was not written"
    return check


def _both_reports(d, run):
    """--json-out and --junit-xml given the same path: refused, or both reports survive."""
    if run.rc == 0:
        p = d / "same.out"
        txt = p.read_text() if p.is_file() else ""
        if not (txt.lstrip().startswith("{") and "<testsuite" in txt):
            run.lost = "exit 0: the JSON and the JUnit report share one file; one was overwritten"


def _npy_pickle(d):
    """An object .npy whose pickle creates MARKER when loaded with allow_pickle."""
    import numpy as np
    arr = np.empty(1, dtype=object)
    arr[0] = _Plant(d / MARKER)
    np.save(d / "evil.npy", arr, allow_pickle=True)


class _Plant:
    """Unpickling this opens (creates) the marker file: proof that a pickle from a file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _quant_input(d):
    import numpy as np
    np.save(d / "x.npy", np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32))


def _setup_victim(name):
    def setup(d):
        victim(d / name)
    return setup


def _both(*fns):
    def setup(d):
        for f in fns:
            f(d)
    return setup


EXIT0 = r"SystemExit|exited with status 0|_exit"     # the reason, not the summary's "exit 1"
FAULTY_PROBES = [
    faulty("cli_faulty_sys_exit", "SysExitZero", "backend calls sys.exit(0) inside quantize_mx",
           EXIT0),
    faulty("cli_faulty_os_exit", "OsExitZero", "backend calls os._exit(0) inside quantize_mx",
           EXIT0),
    faulty("cli_faulty_segfault", "Segfault", "backend dies on SIGSEGV",
           r"SIGSEGV"),
    faulty("cli_faulty_hang", "Hang", "backend never returns (verify --timeout 5 when it exists)",
           r"timeout|timed out", hang=True),
    faulty("cli_faulty_keyboard_interrupt", "KeyboardInterruptInside",
           "backend raises KeyboardInterrupt", r"KeyboardInterrupt"),
    faulty("cli_faulty_lying_zeros", "LyingZeros",
           "zero codes in an ndarray subclass whose != says equal", r"[1-9]\d* mismatched"),
    faulty("cli_faulty_exit_midway", "FaultAfterFirstCall", "os._exit(0) from the second call on",
           EXIT0),
    faulty("cli_faulty_os_exit_jobs2", "OsExitZero", "os._exit(0) backend under --jobs 2",
           EXIT0, jobs=2),
    faulty("cli_faulty_segfault_jobs2", "Segfault", "SIGSEGV backend under --jobs 2",
           r"SIGSEGV", jobs=2),
    faulty("cli_faulty_hang_jobs2", "Hang", "hanging backend under --jobs 2",
           r"timeout|timed out", jobs=2, hang=True),
    faulty("cli_faulty_sys_exit_json", "SysExitZero", "sys.exit(0) backend with --json",
           EXIT0, json_out=True),
    Probe("cli_faulty_stdout_json", "cli", "backend prints to stdout (fd 1 too) under --json",
          lambda d: mxref("verify", "-b", "mxref.backends.faulty:StdoutChatter", *FAST, "--json"),
          expect=(0, 1), check=_verify_json),
    Probe("cli_faulty_import", "cli", "backend module raises RuntimeError while imported",
          lambda d: mxref("verify", "-b", "mxref.backends._faulty_import:Backend", *FAST),
          expect=(4,), reason=r"planted|RuntimeError|cannot import"),
]

PLANTED_OPS = {"ties_away": "quantize_mx", "f32_log2_scale": "quantize_mx",
               "nan_not_poisoned": "quantize_mx", "emax_off_by_one": "quantize_mx",
               "swapped_nibbles": "pack", "zero_scale_dequant": "dequantize", "gemm_zero_scale": "gemm",
               "rotate_f64": "rotate", "sr_strict": "quantize_mx_sr"}
PLANTED_CLASSES = {"ties_away": "TiesAway", "f32_log2_scale": "Float32Log2Scale",
                   "nan_not_poisoned": "NanNotPoisoned", "emax_off_by_one": "EmaxOffByOne",
                   "swapped_nibbles": "SwappedNibbles", "zero_scale_dequant": "ZeroScaleIsZero",
                   "gemm_zero_scale": "GemmZeroScale", "rotate_f64": "RotateFloat64",
                   "sr_strict": "SRStrict"}
PLANTED_PROBES = [
    Probe(f"cli_planted_{k}", "cli", f"planted wrong-bit backend {cls} on {op} (L0)",
          (lambda d, cls=cls, op=op: mxref("verify", "-b", f"mxref.backends.planted:{cls}",
                                            "--level", "0", "--ops", op, "-p", "ocp",
                                            "--no-progress")),
          expect=(1,), reason=r"[1-9]\d* mismatched")
    for k, cls in PLANTED_CLASSES.items() for op in [PLANTED_OPS[k]]]

OUTPUT_PROBES = [
    Probe("cli_out_missing_dir", "cli", "--json-out into a missing directory (created, written)",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--json-out", "a/b/r.json"),
          expect=(0,), check=_written("a/b/r.json")),
    Probe("cli_out_parent_is_file", "cli", "--json-out under a regular file (unwritable)",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--json-out", "victim.txt/r.json"),
          expect=(2,), reason=r"victim\.txt", setup=_setup_victim("victim.txt"),
          victims=("victim.txt",)),
    Probe("cli_out_is_dir", "cli", "--json-out names an existing directory",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--json-out", "adir"),
          expect=(2,), reason=r"adir", setup=lambda d: (d / "adir").mkdir()),
    Probe("cli_junit_is_dir", "cli", "--junit-xml names an existing directory",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--junit-xml", "adir"),
          expect=(2,), reason=r"adir", setup=lambda d: (d / "adir").mkdir()),
    Probe("cli_dump_parent_is_file", "cli", "--dump-mismatches under a regular file",
          lambda d: mxref("verify", "-b", "mxref.backends.planted:TiesAway", *ONE_FILE,
                          "--dump-mismatches", "victim.txt/m.arrow"),
          expect=(2,), reason=r"victim\.txt", setup=_setup_victim("victim.txt"),
          victims=("victim.txt",)),
    Probe("cli_same_report_path", "cli", "--json-out and --junit-xml name the same file",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--json-out", "same.out",
                          "--junit-xml", "same.out"),
          expect=(0, 2), reason=r"same\.out", check=_both_reports),
    Probe("cli_quantize_out_missing_dir", "cli", "quantize -o into a missing directory",
          lambda d: mxref("quantize", "x.npy", "-f", "mxfp4", "-o", "no/such/dir/q.npz"),
          expect=(0, 2), reason=r"no/such/dir", setup=_quant_input,
          check=_written("no/such/dir/q.npz")),
    Probe("cli_quantize_no_overwrite", "cli", "quantize -o onto an existing user file, no --force",
          lambda d: mxref("quantize", "x.npy", "-f", "mxfp4", "-o", "victim.npz"),
          expect=(2,), reason=r"victim\.npz|exists|force",
          setup=_both(_quant_input, _setup_victim("victim.npz")), victims=("victim.npz",)),
    Probe("cli_quantize_pickled_npy", "cli", "quantize an object .npy whose pickle makes a marker",
          lambda d: mxref("quantize", "evil.npy", "-f", "mxfp4", "-o", "q.npz"),
          expect=(2,), reason=r"evil\.npy|pickle|object", setup=_npy_pickle),
    Probe("cli_quantize_not_npy", "cli", "quantize a file that is not .npy",
          lambda d: mxref("quantize", "victim.txt", "-f", "mxfp4", "-o", "q.npz"),
          expect=(2,), reason=r"victim\.txt|npy", setup=_setup_victim("victim.txt"),
          victims=("victim.txt",)),
    Probe("cli_decompose_plot_missing_dir", "cli", "decompose --plot into a missing directory",
          lambda d: mxref("decompose", "--synthetic", "gaussian", "--shape", "64x64", "-f", "mxfp4",
                          "--plot", "no/such/dir/p.png"),
          expect=(0, 2), reason=r"no/such/dir", check=_written("no/such/dir/p.png"),
          needs="matplotlib"),
]


# ---- golden corpus ------------------------------------------------------------------------------
def _manifest(c: Path) -> dict:
    return json.loads((c / "MANIFEST.json").read_text())


def _write_manifest(c: Path, doc: dict) -> None:
    (c / "MANIFEST.json").write_text(json.dumps(doc, indent=1))


def _reseal(c: Path, doc: dict, key: str, path: Path | None = None) -> None:
    """Point entry `key`'s byte hash and size at the file as it is now (the forger's step)."""
    path = path or c / key
    doc["files"][key]["sha256_bytes"] = sha(path)
    doc["files"][key]["bytes"] = path.stat().st_size


def corpus_setup(tamper: Callable[[Path, Path], None] | None):
    """Copy the fixture corpus to d/corpus, then `tamper(d, corpus)` edits it. Where the tree's
    generator sources changed since the fixture was made (other work in progress), the copy's
    generator hash is restamped first, so that only the planted fault is measured."""
    def setup(d):
        c = d / "corpus"
        shutil.copytree(FIX.corpus(), c)
        doc = _manifest(c)
        now = subprocess.run(snippet("from mxref.golden.columns import generator_source_sha256 "
                                     "as g; print(g())"), capture_output=True, text=True, env=ENV,
                             cwd=REPO, check=False).stdout.strip()
        if now and doc.get("generator_source_sha256") != now:
            doc["generator_source_sha256"] = now
            _write_manifest(c, doc)
        if tamper:
            tamper(d, c)
    return setup


def _edit(c: Path, fn: Callable[[dict], None]) -> None:
    doc = _manifest(c)
    fn(doc)
    _write_manifest(c, doc)


def _t_content_resealed(d, c):
    import pyarrow as pa
    t = pa.ipc.open_file(pa.BufferReader((c / TARGET).read_bytes())).read_all()
    one = t.slice(0, 1)
    with pa.OSFile(str(c / TARGET), "wb") as f, pa.ipc.new_file(f, one.schema) as w:
        w.write_table(one)

    def fn(doc):
        _reseal(c, doc, TARGET)
        doc["files"][TARGET]["rows"] = 1      # sha256_content (the decoded columns) left stale
    _edit(c, fn)


def _t_outside_key(key_of):
    def tamper(d, c):
        shutil.copyfile(c / TARGET, d / "outside.arrow")
        _edit(c, lambda doc: doc["files"].__setitem__(key_of(d), dict(doc["files"][TARGET])))
    return tamper


def _t_symlink_out(d, c):
    (d / "elsewhere").mkdir()
    shutil.move(c / TARGET, d / "elsewhere" / "x.arrow")
    os.symlink(d / "elsewhere" / "x.arrow", c / TARGET)


def _t_null_entry(d, c):
    _edit(c, lambda doc: doc["files"].__setitem__(TARGET, None))


def _t_missing_key(d, c):
    _edit(c, lambda doc: doc["files"][TARGET].pop("sha256_bytes"))


def _t_malformed(d, c):
    (c / "MANIFEST.json").write_text('{"schema": "mxref-golden-manifest/1", "files": {')


def _t_truncated_resealed(d, c):
    data = (c / TARGET).read_bytes()
    (c / TARGET).write_bytes(data[: len(data) // 2])
    _edit(c, lambda doc: _reseal(c, doc, TARGET))


def _t_oversized(d, c):
    with open(c / TARGET, "r+b") as f:
        f.truncate(256 * 1024 * 1024 + 4096)        # sparse: no disk used
    _edit(c, lambda doc: _reseal(c, doc, TARGET))


def _t_missing_file(d, c):
    (c / TARGET).unlink()


def _t_extra_file(d, c):
    shutil.copyfile(c / TARGET, c / "L0" / "quantize_mx" / "unlisted.arrow")


TAMPERS = {
    # name: (tamper, description, reason regex, also run through verify)
    "content_resealed": (_t_content_resealed, ("file cut to 1 row, sha256_bytes/rows re-sealed "
                                               "(sha256_content stale)"),
                         r"sha256.content|decoded content", True),
    "dotdot_key": (_t_outside_key(lambda d: "../outside.arrow"),
                   "manifest key ../outside.arrow (a real golden file outside the corpus)",
                   r"\.\./outside\.arrow", True),
    "absolute_key": (_t_outside_key(lambda d: str(d / "outside.arrow")),
                     "manifest key is an absolute path outside the corpus", r"outside\.arrow|absolute",
                     True),
    "symlink_out": (_t_symlink_out, "a listed file is a symlink to a file outside the corpus",
                    r"symlink|outside", True),
    "null_entry": (_t_null_entry, "a manifest entry is null", r"expected an object|null|None",
                   True),
    "missing_key": (_t_missing_key, "a manifest entry lacks sha256_bytes",
                    r"sha256_bytes", True),
    "malformed_json": (_t_malformed, "MANIFEST.json cut mid-document", r"JSON", True),
    "truncated_resealed": (_t_truncated_resealed, "arrow file cut in half, byte hash re-sealed",
                           r"arrow ipc|cannot read|not an arrow", True),
    "oversized": (_t_oversized, "a listed file grown (sparse) past the 256 MiB limit, re-sealed",
                  r"size limit", True),
    "missing_file": (_t_missing_file, "a listed file is deleted", r"missing|not found", True),
    "extra_file": (_t_extra_file, "an unlisted .arrow file beside the listed ones",
                   r"unlisted|not in MANIFEST", False),
}


def _golden_probes():
    out = [Probe("golden_check_control", "golden", "unmodified corpus copy: golden check passes",
                 lambda d: mxref("golden", "check", "corpus"), expect=(0,),
                 setup=corpus_setup(None)),
           Probe("golden_verify_control", "golden", "unmodified corpus copy: verify numba passes",
                 lambda d: mxref("verify", "-b", "numba", "--golden", "corpus", *ONE_FILE),
                 expect=(0,), setup=corpus_setup(None))]
    for name, (tamper, desc, reason, with_verify) in TAMPERS.items():
        out.append(Probe(f"golden_check_{name}", "golden", f"golden check: {desc}",
                         lambda d: mxref("golden", "check", "corpus"), expect=(3,),
                         reason=reason, setup=corpus_setup(tamper)))
        if with_verify:
            out.append(Probe(f"golden_verify_{name}", "golden", f"verify --golden: {desc}",
                             lambda d: mxref("verify", "-b", "numba", "--golden", "corpus",
                                             *ONE_FILE),
                             expect=(3,), reason=reason, setup=corpus_setup(tamper)))
    return out


# ---- expectations -------------------------------------------------------------------------------
def expectations(pid, desc, toml, reason):
    def setup(d):
        (d / "exp.toml").write_text(toml)
    return Probe(pid, "expectations", desc,
                 lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--expectations", "exp.toml"),
                 expect=(2,), reason=reason, setup=setup)


DEV = '[[deviation]]\nop = "quantize_mx"\nformat = "mxfp4"\nreason = "r"\nlink = "https://x"\n'
EXPECTATION_PROBES = [
    expectations("exp_classes_string", "classes = \"E2\" (a string, not a list)",
                 DEV + 'classes = "E2"\n', r"classes"),
    expectations("exp_unknown_key", "unknown key in a deviation", DEV + 'colour = "red"\n',
                 r"colour"),
    expectations("exp_unknown_top_key", "unknown top-level key", 'colour = "red"\n' + DEV,
                 r"colour"),
    expectations("exp_unknown_op", "unknown op", DEV.replace("quantize_mx", "quantize_mxx"),
                 r"quantize_mxx"),
    expectations("exp_unknown_class", "unknown coverage class", DEV + 'classes = ["Z9"]\n',
                 r"Z9"),
    expectations("exp_unknown_profile", "unknown profile", DEV + 'profile = "nope"\n', r"nope"),
    expectations("exp_unknown_format", "unknown format", DEV.replace('"mxfp4"', '"mxfp3"'),
                 r"mxfp3"),
    expectations("exp_bad_toml", "not TOML", "[[deviation]\nop = ", r"TOML|exp\.toml"),
    expectations("exp_missing_reason", "deviation without reason",
                 DEV.replace('reason = "r"\n', ""), r"reason"),
    expectations("exp_deviation_not_table", "deviation = 3 (not an array of tables)",
                 "deviation = 3\n", r"deviation"),
    Probe("exp_missing_file", "expectations", "--expectations names a missing file",
          lambda d: mxref("verify", "-b", "numba", *ONE_FILE, "--expectations", "none.toml"),
          expect=(2,), reason=r"none\.toml"),
]


# ---- leaderboard --------------------------------------------------------------------------------
LB = REPO / "bench" / "results" / "leaderboard"
LB_RECORD = LB / "records" / "cpu-emulator" / "cpu-2c-amd-epyc" / "quantize-fp32--mxfp4-ocp-rows-numba.json"


def _seal(rec: dict) -> dict:
    from mxref.leaderboard.record import seal
    return seal(rec)


def _base_record() -> dict:
    return json.loads(LB_RECORD.read_text())


def _lb_dotdot(d):
    """The test's layout: the record's ancestor finds run/records/../victim.txt (the evidence),
    and store/../victim.txt is the user's file."""
    rec = _base_record()
    ev = LB / rec["verify"]["report"]
    (d / "run" / "records").mkdir(parents=True)
    shutil.copyfile(ev, d / "run" / "victim.txt")
    rec["verify"]["report"] = "../victim.txt"
    (d / "run" / "records" / "r.json").write_text(json.dumps(_seal(rec)))
    victim(d / "victim.txt")


def _lb_absolute(d):
    rec = _base_record()
    (d / "run").mkdir()
    victim(d / "victim.txt")
    rec["verify"]["report"] = str(d / "victim.txt")
    (d / "run" / "r.json").write_text(json.dumps(_seal(rec)))


def _no_store_records(d, run):
    if (d / "store" / "records").exists():
        run.wrong = "a refused record was written into the store"


ACCEPT = """\
import json, sys
from pathlib import Path
from mxref.errors import MXRefError
from mxref.leaderboard.submit import Verdict, accept
rec = json.loads(Path(sys.argv[1]).read_text())
try:
    dest = accept(Verdict(sys.argv[1], rec, evidence=Path(sys.argv[2])), Path(sys.argv[3]))
except MXRefError as e:
    sys.exit(f"error: {type(e).__name__}: {e}")
print("stored", dest)
"""


def _accept_setup(kind):
    """accept() handed a verdict that says ok: the store's own last line of defence."""
    def setup(d):
        from mxref.leaderboard.submit import store_path
        rec = _base_record()
        ev = d / "evidence.json"
        shutil.copyfile(LB / rec["verify"]["report"], ev)
        store = d / "store"
        store.mkdir()
        victim(d / "victim.txt")
        if kind == "dotdot":
            rec["verify"]["report"] = "../victim.txt"
        elif kind == "absolute":
            rec["verify"]["report"] = str(d / "victim.txt")
        elif kind == "symlink":
            (d / "outside").mkdir()
            os.symlink(d / "outside", store / "verify", target_is_directory=True)
            victim(d / "outside" / Path(rec["verify"]["report"]).name)
        elif kind == "case":
            first = _seal(dict(rec))
            dest = store_path(store, first)
            dest.parent.mkdir(parents=True)
            dest.write_text(json.dumps(first))
            shutil.copyfile(dest, d / "first.json")
            rec["entry"] = rec["entry"].upper()
        (d / "rec.json").write_text(json.dumps(_seal(rec)))
    return setup


def _accept_case_check(d, run):
    from mxref.leaderboard.submit import store_path
    dest = store_path(d / "store", _base_record())
    if not dest.is_file() or sha(dest) != sha(d / "first.json"):
        run.lost = f"the stored record of another entry ({dest.name}) was overwritten"


def _reproduce_setup(command, *, reseal=True, drop_seal=False):
    def setup(d):
        rec = _seal(_base_record())
        rec["command"] = command(d)
        if reseal:
            _seal(rec)
        if drop_seal:
            rec.pop("record_sha256")
        (d / "rec.json").write_text(json.dumps(rec))
    return setup


def _reproduce(*extra):
    return lambda d: mxref("leaderboard", "reproduce", "rec.json", "-q", "--json", "--no-floor",
                           "--timeout", "60", *extra)


def _touch(d):
    return ["sh", "-c", f"touch '{d / MARKER}'", "--out", "X"]


LEADERBOARD_PROBES = [
    Probe("lb_submit_dotdot", "leaderboard", "submit: evidence ../victim.txt",
          lambda d: mxref("leaderboard", "submit", "run/records/r.json", "--store", "store",
                          "--json"),
          expect=(1,), reason=r"'\.\.'", setup=_lb_dotdot, victims=("victim.txt",),
          check=_no_store_records),
    Probe("lb_submit_absolute", "leaderboard", "submit: evidence is an absolute path",
          lambda d: mxref("leaderboard", "submit", "run/r.json", "--store", "store", "--json"),
          expect=(1,), reason=r"absolute", setup=_lb_absolute, victims=("victim.txt",),
          check=_no_store_records),
    *[Probe(f"lb_accept_{k}", "leaderboard", f"accept() given an ok verdict: {desc}",
            lambda d: snippet(ACCEPT, d / "rec.json", d / "evidence.json", d / "store"),
            expect=(1,), reason=reason, setup=_accept_setup(k), victims=victims,
            check=_accept_case_check if k == "case" else None)
      for k, desc, reason, victims in (
          ("dotdot", "evidence ../victim.txt", r"\.\.", ("victim.txt",)),
          ("absolute", "evidence is an absolute path", r"absolute", ("victim.txt",)),
          ("symlink", "store/verify is a symlink out of the store", r"outside|symlink", ()),
          ("case", "an entry differing only in letter case from a stored one",
           r"case|overwrite|collide", ()))],
    Probe("lb_reproduce_sh_c", "leaderboard", "reproduce a sealed record: sh -c 'touch MARKER'",
          _reproduce(), expect=(2,), reason=r"refused|allow-command",
          setup=_reproduce_setup(_touch)),
    Probe("lb_reproduce_python_c", "leaderboard", "reproduce a sealed record: python -c writes",
          _reproduce(), expect=(2,), reason=r"refused|allow-command",
          setup=_reproduce_setup(lambda d: [PY, "-c", f"open({str(d / MARKER)!r}, 'w')",
                                            "--out", "X"])),
    Probe("lb_reproduce_broken_seal", "leaderboard",
          "reproduce --allow-command: command edited after sealing", _reproduce("--allow-command"),
          expect=(2,), reason=r"record_sha256", setup=_reproduce_setup(_touch, reseal=False)),
    Probe("lb_reproduce_unsealed", "leaderboard",
          "reproduce --allow-command: record_sha256 removed", _reproduce("--allow-command"),
          expect=(2,), reason=r"record_sha256",
          setup=_reproduce_setup(_touch, reseal=False, drop_seal=True)),
]


# ---- training -----------------------------------------------------------------------------------
STEPS = 8


def _train_args(out="run", **extra):
    a = ["train", "--model", "llama-tiny", "--seq-len", "32", "--batch-size", "4", "--precision",
         "fp32", "--threads", "1", "--eval-tokens", "256", "--lr", "0.003", "--no-progress",
         "--device", "cpu", "--tokens", str(128 * STEPS), "--out", out, "--ckpt-every", "2"]
    for k, v in extra.items():
        a += [f"--{k.replace('_', '-')}", str(v)]
    return a


def _stopped_run(d):
    """A run stopped after step 6 (checkpoints step 4 and step 6 kept)."""
    r = subprocess.run(mxref(*_train_args(stop_after=6)), capture_output=True, text=True, env=ENV,
                       cwd=d, timeout=300, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"training fixture exited {r.returncode}: {_last_line(r.stderr)}")
    return d / "run" / "checkpoints"


def _plant_pickle(ck: Path, d: Path) -> None:
    s6 = ck / "step_00000006"
    payload = pickle.dumps(_Plant(d / MARKER), protocol=2)
    (s6 / "optimizer.pt").write_bytes(payload)
    meta = json.loads((s6 / "state.json").read_text())
    meta["files"]["optimizer.pt"] = hashlib.sha256(payload).hexdigest()
    (s6 / "state.json").write_text(json.dumps(meta))


def _train_setup(kind):
    def setup(d):
        ck = _stopped_run(d)
        if kind in ("pickle_latest", "pickle_no_latest"):
            _plant_pickle(ck, d)
            (ck / "latest.json").write_text(json.dumps({"step": 6, "dir": "step_00000006"}))
        if kind == "no_intact":
            for s in ("step_00000004", "step_00000006"):
                (ck / s / "state.json").write_text("{cut")
        if kind != "pickle_latest":
            (ck / "latest.json").unlink()
    return setup


def _resumed_from(step):
    def check(d, run):
        if run.rc != 0:
            return
        try:
            got = json.loads(run.out).get("resumed_from_step")
        except ValueError:
            run.wrong = "train --json printed no JSON summary"
            return
        said = _matching_line(r"latest\.json", run.err)
        if got != step:
            run.wrong = f"resumed from step {got}, the newest intact checkpoint is step {step}"
        elif not said:
            run.wrong = f"resumed from step {step} without saying that latest.json was missing"
        else:
            run.note = said
    return check


TRAINING_PROBES = [
    Probe("train_resume_no_latest", "training", "resume after latest.json was deleted",
          lambda d: mxref(*_train_args(), "--json"), expect=(0,), setup=_train_setup("no_latest"),
          check=_resumed_from(6), needs="torch"),
    Probe("train_pickle_latest", "training", "checkpoint named by latest.json holds a pickle",
          lambda d: mxref(*_train_args(), "--json"), expect=(2,), reason=r"cannot load|checkpoint",
          setup=_train_setup("pickle_latest"), needs="torch"),
    Probe("train_pickle_no_latest", "training",
          "newest checkpoint holds a pickle, latest.json deleted (fall back to step 4)",
          lambda d: mxref(*_train_args(), "--json"), expect=(0,),
          setup=_train_setup("pickle_no_latest"), check=_resumed_from(4), needs="torch"),
    Probe("train_no_intact", "training", "every checkpoint's state.json corrupt, no latest.json",
          lambda d: mxref(*_train_args(), "--json"), expect=(2,), reason=r"no intact",
          setup=_train_setup("no_intact"), needs="torch"),
]


# ---- concurrency --------------------------------------------------------------------------------
#: run two argvs at once; exit 0 when both exit 0, 1 when one does not, their signal when one dies
TWO = """\
import json, signal, subprocess, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
procs = [subprocess.Popen(x, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for x in (a, b)]
outs = [p.communicate() for p in procs]
for p, (o, e) in zip(procs, outs):
    sys.stderr.write(e)
    print(json.dumps({"rc": p.returncode}))
for p in procs:
    if p.returncode < 0:                 # pass a death by signal on, for the classifier
        signal.signal(-p.returncode, signal.SIG_DFL)
        signal.raise_signal(-p.returncode)
sys.exit(1 if any(p.returncode for p in procs) else 0)
"""


def _two(a, b):
    return lambda d: snippet(TWO, json.dumps(a), json.dumps(b))


def _manifest_complete(want: int):
    def check(d, run):
        g = d / "g"
        try:
            listed = set(json.loads((g / "MANIFEST.json").read_text())["files"])
        except (OSError, ValueError, KeyError) as e:
            run.lost = f"MANIFEST.json unreadable after both runs: {e}"
            return
        on_disk = {p.relative_to(g).as_posix() for p in g.rglob("*.arrow")}
        if on_disk - listed:
            run.lost = (f"{len(on_disk - listed)} of {len(on_disk)} written files missing from "
                        "MANIFEST.json")
        elif run.rc == 0 and len(listed) != want:
            run.wrong = f"both exited 0 but MANIFEST.json lists {len(listed)} files, not {want}"
    return check


def _gen(suite):
    return mxref("generate", "--level", "0", "--suite", suite, "--out", "g")


def _json_report(d, run):
    try:
        json.loads((d / "r.json").read_text())
    except (OSError, ValueError) as e:
        run.lost = f"r.json is not one JSON report after both runs ({e})"


CONCURRENCY_PROBES = [
    Probe("conc_generate_two_suites", "concurrency",
          "generate --suite convert and --suite pack into one --out at once",
          _two(_gen("convert"), _gen("pack")), expect=(0, 1), check=_manifest_complete(42)),
    Probe("conc_generate_same_suite", "concurrency", "two generate --suite convert into one --out",
          _two(_gen("convert"), _gen("convert")), expect=(0, 1), check=_manifest_complete(36)),
    Probe("conc_verify_same_json_out", "concurrency", "two verify runs, one --json-out path",
          _two(*[mxref("verify", "-b", "numba", *ONE_FILE, "--json-out", "r.json")] * 2),
          expect=(0,), check=_json_report),
]


PROBES: list[Probe] = [*API, *FAULTY_PROBES, *PLANTED_PROBES, *OUTPUT_PROBES, *_golden_probes(),
                       *EXPECTATION_PROBES, *LEADERBOARD_PROBES, *TRAINING_PROBES,
                       *CONCURRENCY_PROBES]


# ---- running ------------------------------------------------------------------------------------
def run_probe(p: Probe, root: Path) -> dict:
    """Set up, run and classify one probe in its own directory under `root`."""
    row = {"id": p.id, "category": p.category, "description": p.description,
           "expected": "exit " + "/".join(map(str, p.expect)) + (f" ~ /{p.reason}/" if p.reason
                                                                 else "")}
    if p.needs and importlib.util.find_spec(p.needs) is None:
        return {**row, "verdict": "n/a", "exit": None, "seconds": 0.0,
                "detail": f"{p.needs} is not installed"}
    d = root / p.id
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        if p.setup:
            p.setup(d)
    except Exception as e:               # noqa: BLE001 - a broken fixture is reported, not fatal
        return {**row, "verdict": "n/a", "exit": None, "seconds": time.perf_counter() - t0,
                "detail": f"setup failed: {type(e).__name__}: {e}"[:200]}
    before = {v: sha(d / v) for v in p.victims}
    argv = p.argv(d)
    t1 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=d, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=p.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)     # the whole group: --jobs workers included
        out, err = proc.communicate()
        rc = None
    run = Run(rc, out, err, time.perf_counter() - t1, marker=(d / MARKER).exists(),
              changed=[v for v in p.victims if sha(d / v) != before[v]])
    if p.check and rc is not None:
        p.check(d, run)
    verdict, detail = classify(p.expect, p.reason, run)
    return {**row, "verdict": verdict, "exit": rc, "seconds": round(time.perf_counter() - t0, 1),
            "detail": detail, "argv": [a if len(a) < 120 else a[:60] + "..." for a in argv[1:]]}


def git_state() -> dict:
    def g(*a):
        r = subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, check=False)
        return r.stdout.strip()
    return {"commit": g("rev-parse", "HEAD"), "dirty": bool(g("status", "--porcelain"))}


def counts(rows, key) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(r[key], {v: 0 for v in VERDICTS})[r["verdict"]] += 1
    return out


def write_reports(rows, meta, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    per_cat = counts(rows, "category")
    total = {v: sum(c[v] for c in per_cat.values()) for v in VERDICTS}
    doc = {"schema": "mxref-fault-probes/1", **meta, "counts": {"total": total, **per_cat},
           "probes": rows}
    (out / "fault_probes.json").write_text(json.dumps(doc, indent=1) + "\n")
    cols = [v for v in VERDICTS if total[v] or v != "n/a"]
    md = ["# Fault probes (issue 27)", "",
          f"`python scripts/fault_probes.py` at commit `{meta['commit'][:12]}`"
          f"{' (working tree dirty)' if meta['dirty'] else ''}, {meta['date']}, "
          f"{meta['seconds']:.0f} s with {meta['workers']} workers; verify `--timeout` "
          f"{'used' if meta['verify_timeout'] else 'not available'}. Goal: 0 of "
          + ", ".join(sorted(BAD)) + ". Verdicts are defined in the script's docstring.", "",
          "| category | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for cat in CATEGORIES:
        if cat in per_cat:
            md.append(f"| {cat} | " + " | ".join(str(per_cat[cat][v]) for v in cols) + " |")
    md += ["| **total** | " + " | ".join(f"**{total[v]}**" for v in cols) + " |", "",
           "| probe | category | expected | exit | verdict | detail |", "|---|---|---|---:|---|---|"]
    for r in rows:
        detail = str(r["detail"]).replace("|", "\\|").replace("\n", " ")
        exp = r["expected"].replace("|", "\\|")
        md.append(f"| `{r['id']}` | {r['category']} | {exp} | "
                  f"{'-' if r['exit'] is None else r['exit']} | "
                  f"{'**' + r['verdict'] + '**' if r['verdict'] in BAD else r['verdict']} | "
                  f"{r['description']}: {detail} |")
    (out / "fault_probes.md").write_text("\n".join(md) + "\n")


def main(argv=None) -> int:
    global FIX, VERIFY_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--category", action="append", choices=CATEGORIES,
                    help="only these categories (repeatable)")
    ap.add_argument("--probe", action="append", help="also/only these probe ids (repeatable)")
    ap.add_argument("--out", type=Path, default=REPO / "conformance" / "results",
                    help="where fault_probes.md and fault_probes.json go")
    ap.add_argument("--workers", type=int, default=2, choices=(1, 2))
    ap.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    ap.add_argument("--list", action="store_true", help="list the probes and exit")
    a = ap.parse_args(argv)
    probes = [p for p in PROBES if not (a.category or a.probe)      # the union of both filters
              or p.category in (a.category or ()) or p.id in (a.probe or ())]
    if a.list:
        for p in probes:
            print(f"{p.id:40s} {p.category:13s} {p.description}")
        return 0
    if not probes:
        ap.error("no probe selected")
    VERIFY_TIMEOUT = has_option(("verify",), "--timeout")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mxref-fault-probes-") as tmp:
        FIX = Fixtures(Path(tmp) / "_fixtures")
        FIX.root.mkdir()
        rows = []
        with cf.ThreadPoolExecutor(a.workers) as ex:
            futs = {ex.submit(run_probe, p, Path(tmp)): p for p in probes}
            for f in cf.as_completed(futs):
                r = f.result()
                rows.append(r)
                print(f"{r['verdict']:18s} {r['id']:40s} {r['seconds']:6.1f}s  {r['detail'][:90]}",
                      file=sys.stderr)
    order = {p.id: i for i, p in enumerate(probes)}
    rows.sort(key=lambda r: order[r["id"]])
    meta = {**git_state(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.perf_counter() - t0, 1), "workers": a.workers,
            "verify_timeout": VERIFY_TIMEOUT, "python": sys.version.split()[0]}
    write_reports(rows, meta, a.out)
    bad = [r for r in rows if r["verdict"] in BAD]
    if a.json:
        print((a.out / "fault_probes.json").read_text(), end="")
    else:
        print((a.out / "fault_probes.md").read_text().split("\n\n| probe")[0])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
