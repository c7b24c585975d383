"""`mxref verify` costs on the full L1 corpus (target: numba backend <= 30 s on 2 cores).

Three figures, measured with pytest-benchmark and never asserted:
* cold: a fresh `mxref verify -b numba` process, Numba compiling every kernel first (no cache);
* warm: the same run in a process whose kernels are compiled;
* harness share: of the warm run, the time spent outside backend calls (reading, comparing,
  records), measured in the same run with a timing proxy around the backend.
"""
import os
import subprocess
import sys
import time

from mxref.backends.numba_backend import NumbaBackend
from mxref.verify import verify


class _Timed:
    """Forwards to a backend and adds up the seconds spent inside its methods."""

    def __init__(self, inner):
        self._inner, self.seconds = inner, 0.0
        for a in ("name", "version", "device", "ops", "profiles"):
            setattr(self, a, getattr(inner, a))

    def describe(self):
        return self._inner.describe()

    def __getattr__(self, name):
        fn = getattr(self._inner, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


def _cold():
    env = {**os.environ, "CI": "true", "MXREF_NUMBA_CACHE": "0"}
    r = subprocess.run([sys.executable, "-m", "mxref.cli", "verify", "-b", "numba"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_verify_l1_numba_cold(benchmark):
    benchmark.extra_info.update(what="verify -b numba, full L1, fresh process (JIT compile included)")
    benchmark.pedantic(_cold, rounds=1, iterations=1)


def test_verify_l1_numba_warm(benchmark):
    b = NumbaBackend()
    verify(b, levels=(1,))        # compile
    timed = _Timed(b)

    def run():
        timed.seconds = 0.0
        t0 = time.perf_counter()
        rep = verify(timed, levels=(1,))
        total = time.perf_counter() - t0
        assert rep.exit_code == 0
        return total, rep.doc["summary"]["cases"]
    total, cases = benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(
        what="verify -b numba, full L1, compiled kernels", cases=cases,
        backend_seconds_last_round=round(timed.seconds, 3),
        harness_share_last_round=round(1 - timed.seconds / total, 3))
