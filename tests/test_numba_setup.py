"""mxref._numba_setup: the threading layer mxref chooses, and that a user's choice wins.

Every case runs in a fresh interpreter: numba picks its threading layer once per process.
No timings here (bench/neighbour.py measures the effect on a torch workload).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Import mxref's kernels (which call configure()), launch one parallel kernel - mxref's own
# (slow: JIT) or a tiny one - then report what numba ended up with.
_TINY = """
@numba.njit(parallel=True)
def _tiny(a):
    for i in numba.prange(a.size):
        a[i] += 1
_tiny(np.zeros(8))
"""
_MXREF = "mxref.quantize(np.ones((64, 64), np.float32), 'mxfp4')"
_PROBE = """
import json, os, sys
import numpy as np
{before}
import mxref
import mxref._kernels
from mxref import _numba_setup
import numba
from numba.np.ufunc import parallel
launched_by_import = parallel._is_initialized
first = _numba_setup.configure()
second = _numba_setup.configure()
{call}
print(json.dumps(dict(first=first, second=second, layer=numba.threading_layer(),
                      launched_by_import=launched_by_import,
                      config=str(numba.config.THREADING_LAYER))))
"""


def _probe(env_extra=None, before="", call=_TINY):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY")}
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(before=before, call=call)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_configure_selects_workqueue_in_a_fresh_process():
    r = _probe(call=_MXREF)
    assert r["layer"] == "workqueue" and r["config"] == "workqueue"
    assert r["first"] == r["second"] == "workqueue"   # idempotent


def test_an_explicit_numba_threading_layer_wins():
    r = _probe({"NUMBA_THREADING_LAYER": "omp"})
    assert r["layer"] == "omp"
    assert r["first"] == r["second"] == "user: NUMBA_THREADING_LAYER=omp"


def test_numba_threading_layer_default_keeps_numbas_own_pick():
    r = _probe({"NUMBA_THREADING_LAYER": "default"})
    assert r["config"] == "default" and r["layer"] in ("tbb", "omp")
    assert r["first"].startswith("user: NUMBA_THREADING_LAYER")


def test_an_explicit_omp_wait_policy_leaves_numba_alone():
    r = _probe({"OMP_WAIT_POLICY": "PASSIVE"})
    assert r["config"] == "default" and r["first"] == "user: OMP_WAIT_POLICY=PASSIVE"


def test_numba_config_set_in_code_wins():
    r = _probe(before="import numba; numba.config.THREADING_LAYER = 'omp'")
    assert r["layer"] == "omp" and r["first"] == "user: numba.config.THREADING_LAYER=omp"


def test_too_late_after_a_parallel_launch_changes_nothing():
    r = _probe(before="import numba" + _TINY)
    assert r["layer"] in ("tbb", "omp") and r["first"].startswith("too late")


def test_plain_import_starts_no_numba_threads():
    r = _probe()   # launched_by_import is read after importing mxref and its kernels
    assert r["launched_by_import"] is False   # numba's pool starts at the first parallel call


def test_configure_in_process_is_idempotent():
    from mxref import _numba_setup

    first = _numba_setup.configure()
    assert _numba_setup.configure() == first == _numba_setup.decision()


@pytest.mark.parametrize("var", ["NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY"])
def test_user_variables_are_the_documented_ones(var):
    from mxref import _numba_setup

    assert var in _numba_setup.USER_VARIABLES and var in _numba_setup.__doc__
