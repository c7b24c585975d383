"""Faulty backends: the reference with one *process-level* fault each.

`planted.py` plants wrong bits; this module plants what a broken kernel stack does to the
process that calls it - it exits, dies on a signal, hangs, prints on stdout, returns an object
that lies about equality. They exist to prove that ``mxref verify`` never reads any of these as
a pass (tests and ``scripts/fault_probes.py`` run each one)::

    mxref verify -b mxref.backends.faulty:OsExitZero --level 0 --ops quantize_mx   # exit 1

Each fault fires on ``quantize_mx`` (every other op is the reference's, so the rest of a run
stays meaningful) and claims ``ocp``.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

from .numba_backend import NumbaBackend


class _Faulty(NumbaBackend):
    profiles = ("ocp",)
    fault = ""

    def describe(self) -> dict:
        return {**super().describe(), "planted_fault": self.fault}

    def quantize_mx(self, src, **kw):
        self.fire()
        return super().quantize_mx(src, **kw)

    def fire(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class SysExitZero(_Faulty):
    name, fault = "faulty-sys-exit", "quantize_mx calls sys.exit(0)"

    def fire(self):
        sys.exit(0)


class OsExitZero(_Faulty):
    name, fault = "faulty-os-exit", "quantize_mx calls os._exit(0) (no cleanup, no exception)"

    def fire(self):
        sys.stdout.flush()
        os._exit(0)


class Segfault(_Faulty):
    name, fault = "faulty-segfault", "quantize_mx dies on SIGSEGV (a kernel reading out of bounds)"

    def fire(self):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)


class Hang(_Faulty):
    name, fault = "faulty-hang", "quantize_mx never returns (a deadlocked kernel)"

    def fire(self):
        while True:
            time.sleep(3600)


class KeyboardInterruptInside(_Faulty):
    name, fault = ("faulty-keyboard-interrupt",
                   "quantize_mx raises KeyboardInterrupt (a BaseException, not an Exception)")

    def fire(self):
        raise KeyboardInterrupt


class StdoutChatter(_Faulty):
    name, fault = "faulty-stdout", "every call prints to stdout (correct results)"

    def fire(self):
        print('{"status": "pass"} chatter from the backend', flush=True)
        os.write(1, b"raw fd-1 chatter\n")


class _LyingArray(np.ndarray):
    """An array that says it equals anything."""

    def __ne__(self, other):  # noqa: D105
        return np.zeros(np.broadcast_shapes(self.shape, np.shape(other)), bool)

    def __eq__(self, other):  # noqa: D105
        return np.ones(np.broadcast_shapes(self.shape, np.shape(other)), bool)


class LyingZeros(_Faulty):
    name, fault = "faulty-lying-zeros", "returns all-zero codes in an ndarray subclass whose != says equal"

    def fire(self):
        pass

    def quantize_mx(self, src, **kw):
        s, c = super().quantize_mx(src, **kw)
        return s.view(_LyingArray), np.zeros_like(c).view(_LyingArray)


class FaultAfterFirstCall(_Faulty):
    """Answers the first call, then exits 0 on every later one: a worker that dies midway."""

    name, fault = "faulty-exit-midway", "quantize_mx exits 0 from its second call on"
    _calls = 0

    def fire(self):
        type(self)._calls += 1
        if type(self)._calls > 1:
            sys.stdout.flush()
            os._exit(0)


FAULTY = {"sys_exit": SysExitZero, "os_exit": OsExitZero, "segfault": Segfault, "hang": Hang,
          "keyboard_interrupt": KeyboardInterruptInside, "stdout": StdoutChatter,
          "lying_zeros": LyingZeros, "exit_midway": FaultAfterFirstCall}
