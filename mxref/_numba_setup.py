"""Numba's threading layer, chosen before mxref's first parallel kernel runs: be a good neighbour.

mxref's kernels are ``@njit(parallel=True)``. Left to itself numba picks its threading layer at
the first parallel launch: TBB if installed, else OpenMP (``omp``), else its own ``workqueue``.
With pip wheels, numba's ``omp`` layer loads the system libgomp while torch ships its own copy,
so a process that uses both has two OpenMP runtimes, each with a worker pool sized to all cores,
and GNU OpenMP's default wait policy lets idle workers spin (GOMP_SPINCOUNT, 300000 polls)
before sleeping. On a contended machine (issue 26: load 5-8 on 2 cores, as on CI runners) the
pools spin against each other: an MXLinear forward+backward on the torch backend ran 5-9x slower
after the first mxref call, and an 8-step training run with in-run mxref checks took 12 min
against 1 min 49 s without them. On a quiet machine there was no slowdown.

What :func:`configure` does, and why this and not the alternatives:

* It selects ``workqueue``: numba's own pool of pthreads that block on a condition variable
  between launches (no spinning, no second OpenMP runtime). mxref's parallel loops are coarse
  (one task per row or chunk of blocks, milliseconds each), so OpenMP's faster wake-up and
  scheduling buy mxref little; bench/results/neighbour.md measures both.
* Not ``OMP_WAIT_POLICY=PASSIVE``: an OpenMP runtime reads it once, when it initialises. If
  torch is already imported its runtime ignores the variable (harmless but useless); if torch is
  imported *after* mxref, or shares numba's libgomp (conda), the variable would change the user's
  torch threading too. A library must not retune its host's torch, and a setting whose effect
  depends on import order is not a deliberate choice.
* Not ``tbb``: not a dependency of mxref (and not installed by it).

The price: ``workqueue`` is not thread-safe. Calling mxref's parallel kernels from several
Python threads at once (they release the GIL) makes numba abort the process with "Concurrent
access has been detected"; nested parallel launches likewise. mxref itself never does either
(its parallel verify uses processes). Such a user sets ``NUMBA_THREADING_LAYER=omp`` (or
``tbb``, ``threadsafe``). In exchange ``workqueue`` is fork-safe, where GNU OpenMP is not (a
forked child, e.g. a torch DataLoader worker, may not launch numba's omp layer again).

A user's explicit choice always wins: nothing is changed when ``NUMBA_THREADING_LAYER`` or
``OMP_WAIT_POLICY`` is set in the environment (``NUMBA_THREADING_LAYER=default`` keeps numba's own
pick), when ``numba.config.THREADING_LAYER`` was already set (in code or ``.numba_config.yaml``),
or when numba's threading layer has already been launched (too late to choose).

:func:`configure` is idempotent and cheap (one attribute read and write); ``mxref._kernels``
calls it before defining any kernel. It never starts a thread: plain ``import mxref`` launches no
numba workers; the first parallel kernel call does.
"""
from __future__ import annotations

import os

LAYER = "workqueue"
USER_VARIABLES = ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY")

_decision: str | None = None


def configure() -> str:
    """Choose numba's threading layer for mxref (once per process); return what was decided.

    The returned text says what happened: ``"workqueue"`` when mxref chose it, otherwise why it
    left numba alone (``"user: NUMBA_THREADING_LAYER=omp"``, ``"user: numba.config ..."``,
    ``"too late: ..."``). Later calls return the first call's answer.
    """
    global _decision
    if _decision is None:
        _decision = _choose()
    return _decision


def decision() -> str | None:
    """What :func:`configure` decided in this process (None before it ran)."""
    return _decision


def _choose() -> str:
    for var in USER_VARIABLES:
        if os.environ.get(var):
            return f"user: {var}={os.environ[var]}"
    from numba.core import config
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return f"too late: numba's threading layer {parallel.threading_layer()} already launched"
    current = str(config.THREADING_LAYER).lower()
    if current != "default":
        return f"user: numba.config.THREADING_LAYER={current}"
    config.THREADING_LAYER = LAYER
    return LAYER
