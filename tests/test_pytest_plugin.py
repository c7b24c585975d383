"""The pytest plugin (mxref.pytest_plugin): free unless used, honest markers, verify's filters,
and a failure that names the ``mxref verify`` commands to run next."""
from __future__ import annotations

import re
import shlex
from importlib.metadata import entry_points

import pytest
from click.testing import CliRunner

import mxref.backends.numba_backend  # noqa: F401
import mxref.backends.planted  # noqa: F401
import mxref.verify.run  # noqa: F401
from mxref.verify.select import default_golden_root, select_files

# In-process pytester runs restore sys.modules afterwards; what the inner runs load (Numba and
# the kernels) is imported here first, so that it is loaded once and never half-unloaded.
pytest_plugins = ["pytester"]

#: modules an unrelated pytest run must not pay for
HEAVY = ("numba", "llvmlite", "torch", "triton", "pyarrow", "mxref.verify", "mxref.backends",
         "mxref._kernels", "mxref.formats")


def _plugin_args() -> list:
    """Load the plugin: through its pytest11 entry point when installed, else with -p."""
    installed = any(ep.value == "mxref.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "mxref.pytest_plugin"]


def _ids(result) -> list:
    return [ln.strip() for ln in result.outlines if "::" in ln]


# ---- costs nothing unless used --------------------------------------------------------------
def test_plugin_imports_nothing_heavy_in_an_unrelated_run(pytester):
    pytester.makepyfile(test_unrelated=f"""
        import sys

        def test_light():
            assert "mxref.pytest_plugin" in sys.modules
            heavy = [m for m in {HEAVY!r} if m in sys.modules]
            assert not heavy, heavy
        """)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", *_plugin_args())
    r.assert_outcomes(passed=1)


def test_plugin_imports_nothing_heavy_without_a_backend(pytester):
    """The conformance tests collected with no --mxref-backend skip without loading anything."""
    pytester.makepyfile(test_conf="""
        import sys
        from mxref.conformance.test_mx_conformance import test_quantize_mx  # noqa: F401

        def test_zz_after():
            heavy = [m for m in ("numba", "torch", "mxref.verify", "mxref.backends")
                     if m in sys.modules]
            assert not heavy, heavy
        """)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", *_plugin_args())
    r.assert_outcomes(passed=1, skipped=1)


# ---- markers ------------------------------------------------------------------------------------
def test_plugin_registers_only_the_marker_it_implements(pytester):
    r = pytester.runpytest_subprocess("--markers", "-p", "no:cacheprovider", *_plugin_args())
    out = r.stdout.str()
    assert "@pytest.mark.mx_conformance" in out
    assert "@pytest.mark.gpu" not in out and "@pytest.mark.exhaustive" not in out


def test_mx_conformance_marker_selects_the_cases(pytester):
    args = ["--pyargs", "mxref.conformance", "--mxref-backend=numba", "--mxref-level=0",
            "--mxref-ops=convert", "--mxref-format=mxfp4", "--mxref-src-dtype=float32",
            "--mxref-profile=ocp", "--collect-only", "-q", "-p", "no:cacheprovider"]
    every = _ids(pytester.runpytest(*args))
    marked = _ids(pytester.runpytest(*args, "-m", "mx_conformance"))
    assert marked and marked == [i for i in every if "[" in i and "no-backend" not in i]
    assert not _ids(pytester.runpytest(*args, "-m", "not mx_conformance"))


# ---- filters like verify's ------------------------------------------------------------------
@pytest.mark.parametrize("opts, kw", [
    (["--mxref-format=mxfp4", "--mxref-src-dtype=bfloat16", "--mxref-classes=E2,S1"],
     {"formats": ["mxfp4"], "src_dtypes": ["bfloat16"], "classes": ["E2", "S1"]}),
    (["--mxref-format=mxfp4,mxint8", "--mxref-src-dtype=float32", "--mxref-src-dtype=float16",
      "--mxref-classes=E7"],
     {"formats": ["mxfp4", "mxint8"], "src_dtypes": ["float32", "float16"], "classes": ["E7"]}),
])
def test_filters_select_what_verify_selects(pytester, opts, kw):
    r = pytester.runpytest("--pyargs", "mxref.conformance", "--mxref-backend=numba",
                           "--mxref-level=0", "--mxref-ops=quantize_mx,convert", *opts,
                           "--collect-only", "-q", "-p", "no:cacheprovider")
    got = sorted(i.split("::")[1] for i in _ids(r) if "[" in i and "[None]" not in i)
    _, files = select_files(default_golden_root(), levels=(0,), ops=["quantize_mx", "convert"],
                            **kw)
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    want = sorted(f"test_{f.op}[{short[f.src_dtype]}-{f.fmt}-{f.profile}-L0-{c}]"
                  for f in files for c in f.classes if c in kw["classes"])
    assert want and got == want


def test_filters_run_and_pass_for_the_reference(pytester):
    r = pytester.runpytest("--pyargs", "mxref.conformance", "--mxref-backend=numba",
                           "--mxref-level=0", "--mxref-ops=quantize_mx", "--mxref-format=mxfp4",
                           "--mxref-src-dtype=bfloat16", "--mxref-classes=E2",
                           "--mxref-profile=ocp", "-p", "no:cacheprovider")
    outcomes = r.parseoutcomes()
    assert r.ret == 0 and outcomes["passed"] == 1, r.stdout.str()[-2000:]


# ---- a failure names the commands to run ------------------------------------------------------
def test_failure_names_the_detect_profile_command(pytester):
    spec = "mxref.backends.planted:TiesAway"
    r = pytester.runpytest("--pyargs", "mxref.conformance", f"--mxref-backend={spec}",
                           "--mxref-level=0", "--mxref-ops=quantize_mx", "--mxref-format=mxfp4",
                           "--mxref-src-dtype=float32", "--mxref-classes=E2",
                           "-p", "no:cacheprovider")
    assert r.ret == 1
    sel = "--level 0 --ops quantize_mx -f mxfp4 --src-dtype float32 --classes E2"
    out = r.stdout.str()
    assert f"reproduce:     mxref verify -b {spec} -p ocp {sel}" in out
    detect = f"mxref verify -b {spec} --detect-profile {sel}"
    assert f"which profile: {detect}" in out
    # the command runs and says what the planted bug is: ties away, not the OCP profile
    from mxref.cli import main
    res = CliRunner().invoke(main, shlex.split(detect)[1:])
    assert res.exit_code == 0, res.output
    assert re.search(r"nearest non-matching: ocp \(differs in E2\)", res.output)
    again = CliRunner().invoke(main, shlex.split(f"mxref verify -b {spec} -p ocp {sel}")[1:])
    assert again.exit_code == 1 and "1 mismatched (E2:1)" in again.output


def test_failure_of_a_profile_free_op_has_no_detect_command(pytester):
    r = pytester.runpytest("--pyargs", "mxref.conformance",
                           "--mxref-backend=mxref.backends.planted:SwappedNibbles",
                           "--mxref-level=0", "--mxref-ops=pack", "--mxref-format=mxfp4",
                           "-p", "no:cacheprovider")
    out = r.stdout.str()
    assert r.ret == 1 and "reproduce:     mxref verify -b mxref.backends.planted:SwappedNibbles" \
        " --level 0 --ops pack -f mxfp4" in out
    assert "--detect-profile" not in out and "do not depend on a profile" in out


# ---- isolation: a backend that ends its process fails its cases, never the session's verdict --
def test_backend_that_exits_fails_its_cases(pytester):
    """Planted: os._exit(0) inside quantize_mx. In pytest's own process it would end the session
    with status 0 (--mxref-in-process, run in a subprocess to survive it); isolated (the
    default), each case fails with the worker's exit named."""
    sel = ["--pyargs", "mxref.conformance", "--mxref-backend=mxref.backends.faulty:OsExitZero",
           "--mxref-level=0", "--mxref-ops=quantize_mx", "--mxref-format=mxfp4",
           "--mxref-src-dtype=float32", "--mxref-classes=E2,E3", "-p", "no:cacheprovider"]
    r = pytester.runpytest(*sel)
    assert r.ret == 1 and r.parseoutcomes()["failed"] == 2, r.stdout.str()[-2000:]
    assert "exited with status 0" in r.stdout.str()
    r = pytester.runpytest_subprocess(*sel, "--mxref-in-process")
    assert r.ret == 0      # the false pass that isolation prevents
