"""Backend isolation: the backend runs in a worker process; mxref (the judge) stays in this one.

``mxref verify`` and the pytest plugin do not import the backend under test. They start
``python -m mxref.verify.isolate`` (a worker that imports and builds the backend) and talk to
it through :class:`IsolatedBackend`, a proxy with the backend's attributes whose methods send
their arguments to the worker and wait for the answer. Comparison, expectations and reporting
never run in the backend's process, so nothing the backend does to its own process - exit,
``os._exit``, a signal, a segfault, a hang, monkeypatching mxref - can produce a pass:

- a call that kills the worker (``sys.exit`` is caught in the worker and is an error too)
  raises :class:`BackendFault` naming the exit status or signal; the rows of that call are
  errors in the report and the run exits 1. The next call starts a fresh worker (at most
  :data:`MAX_RESTARTS` times, then every remaining call is an error without a worker).
- a call that takes longer than ``timeout`` seconds kills the worker: the same, with the reason
  ``exceeded --timeout``.
- the backend's stdout is the worker's stderr: whatever it prints never reaches ``--json``.
- only data crosses: arrays are sent as dtype, shape and raw bytes (numeric dtypes only; an
  object array or anything that is not plain data is refused with a reason), so an array
  subclass cannot bring its own ``__ne__`` into the comparison.

The wire format is ours, not pickle: a frame is an 8-byte little-endian length, then a
4-byte header length, a JSON header, and the arrays' bytes. The worker never executes anything
it reads; it only looks up the backend method the header names among those it advertised.
"""
from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

import numpy as np

from ..errors import BackendUnavailable, MXRefError, UnknownBackendError, Unsupported

DEFAULT_TIMEOUT = 600.0        # seconds per backend call (a cold JIT compile fits); 0 = none
START_TIMEOUT = 600.0          # import + construct + describe
MAX_RESTARTS = 3
_LEN = struct.Struct("<Q")
_HLEN = struct.Struct("<I")
_MAX_FRAME = 1 << 36


class BackendFault(MXRefError):
    """The backend's worker process died, exited or exceeded the timeout during a call."""


class RemoteBackendError(MXRefError):
    """The backend raised an exception in its worker; ``remote_type`` is its class name."""

    def __init__(self, remote_type: str, message: str):
        self.remote_type = remote_type
        super().__init__(message)


class _BadOutputRemote(MXRefError):
    """The backend returned something that is not plain data (raised as BadOutput here)."""


# ---- the wire format --------------------------------------------------------------------------
def _encode(value, bufs: list):
    """A JSON-able tree; an array becomes {"__nd__": k}, its bytes the k-th of bufs."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.hasobject or a.dtype.kind not in "biuf":
            raise _BadOutputRemote(f"an array of dtype {a.dtype} (only bool, integer and float "
                                   "arrays are data)")
        a = a if a.flags.c_contiguous else a.copy(order="C")   # (ascontiguousarray makes 0-d 1-d)
        bufs.append(a.view(np.ndarray))
        return {"__nd__": len(bufs) - 1}
    if type(value) is tuple:
        return {"__tuple__": [_encode(v, bufs) for v in value]}
    if type(value) is list:
        return [_encode(v, bufs) for v in value]
    if isinstance(value, (set, frozenset)) and all(isinstance(v, str) for v in value):
        return sorted(value)
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, bufs) for k, v in value.items()}}
    raise _BadOutputRemote(f"an object of type {type(value).__module__}.{type(value).__qualname__}"
                           " (return numpy arrays)")


def _decode(tree, arrays: list):
    if isinstance(tree, list):
        return [_decode(v, arrays) for v in tree]
    if isinstance(tree, dict):
        if "__nd__" in tree:
            return arrays[tree["__nd__"]]
        if "__tuple__" in tree:
            return tuple(_decode(v, arrays) for v in tree["__tuple__"])
        return {k: _decode(v, arrays) for k, v in tree["__dict__"].items()}
    return tree


def _frame(header: dict, bufs: list) -> list:
    """The pieces of one frame; the arrays' memory is sent as it is, not copied."""
    header["arrays"] = [[a.dtype.str, list(a.shape)] for a in bufs]
    h = json.dumps(header).encode()
    views = [memoryview(a.reshape(-1).view(np.uint8)) for a in bufs]
    total = _HLEN.size + len(h) + sum(v.nbytes for v in views)
    return [_LEN.pack(total), _HLEN.pack(len(h)), h, *views]


def _unframe(payload: bytearray) -> tuple[dict, list]:
    (hl,) = _HLEN.unpack_from(payload, 0)
    header = json.loads(bytes(payload[_HLEN.size:_HLEN.size + hl]))
    pos, arrays = _HLEN.size + hl, []
    for dt, shape in header.get("arrays", ()):
        dt = np.dtype(dt)
        if dt.hasobject or dt.kind not in "biuf":
            raise ValueError(f"frame names dtype {dt}")
        count = int(np.prod(shape, dtype=np.int64))
        arrays.append(np.frombuffer(payload, dt, count=count, offset=pos).reshape(shape))
        pos += count * dt.itemsize
    if pos != len(payload):
        raise ValueError(f"frame of {len(payload)} bytes holds {pos}")
    return header, arrays


def _read_all(fd: int, n: int) -> bytearray | None:
    """n bytes from a blocking fd, or None at end of file."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if not k:
            return None
        got += k
    return buf


def _write_all(fd: int, pieces: list) -> None:
    for piece in pieces:
        mv = memoryview(piece).cast("B")
        while len(mv):
            mv = mv[os.write(fd, mv):]


# ---- the worker -------------------------------------------------------------------------------
def _public_members(backend) -> tuple[dict, list]:
    """Plain attributes (sent once) and callables (called remotely) of the backend."""
    attrs, methods = {}, []
    for name in dir(backend):
        if name.startswith("_"):
            continue
        try:
            v = getattr(backend, name)
        except Exception:  # noqa: BLE001 - a property that raises is simply not advertised
            continue
        if callable(v):
            methods.append(name)
            continue
        bufs: list = []
        try:
            _encode(v, bufs)
        except _BadOutputRemote:
            continue
        if not bufs:
            attrs[name] = v
    return attrs, methods


def _error_reply(e: BaseException) -> dict:
    kind = ("unsupported" if isinstance(e, Unsupported) else
            "unavailable" if isinstance(e, BackendUnavailable) else
            "unknown" if isinstance(e, UnknownBackendError) else
            "bad_output" if isinstance(e, _BadOutputRemote) else "error")
    msg = (f"the backend called sys.exit({e.code!r})" if isinstance(e, SystemExit) else str(e))
    return {"error": {"kind": kind, "type": type(e).__name__, "message": msg,
                      "traceback": "".join(traceback.format_exception(e))[-4000:]}}


def _serve(spec: str, device) -> int:  # pragma: no cover - runs in the worker process
    fd_in, fd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)                       # the backend's stdout is our stderr
    sys.stdout = sys.stderr

    def send(header, bufs=()):
        _write_all(fd_out, _frame(header, list(bufs)))

    def reply(value):
        bufs: list = []
        try:
            tree = _encode(value, bufs)
        except _BadOutputRemote as e:
            send(_error_reply(e))
            return
        send({"value": tree}, bufs)

    from ..backends import get_backend
    try:
        backend = get_backend(spec, device=device)
        attrs, methods = _public_members(backend)
    except BaseException as e:  # noqa: BLE001 - every failure to start is reported
        if not isinstance(e, (BackendUnavailable, UnknownBackendError)):
            e = BackendUnavailable(f"backend {spec!r} failed to load: {type(e).__name__}: {e}")
        send(_error_reply(e))
        return 0
    reply({"attrs": attrs, "methods": methods, "pid": os.getpid()})
    while True:
        head = _read_all(fd_in, _LEN.size)
        if head is None:
            return 0
        payload = _read_all(fd_in, _LEN.unpack(head)[0])
        if payload is None:
            return 0
        header, arrays = _unframe(payload)
        method = header.get("method")
        if method not in methods:
            send(_error_reply(UnknownBackendError(f"the backend has no method {method!r}")))
            continue
        args, kwargs = _decode(header["value"], arrays)
        try:
            out = getattr(backend, method)(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - sys.exit and KeyboardInterrupt included
            send(_error_reply(e))
            continue
        reply(out)


# ---- the proxy --------------------------------------------------------------------------------
class IsolatedBackend:
    """A backend in a worker process. Attributes are the backend's (read once at start);
    methods are remote calls bounded by ``timeout`` seconds (0 or None: no limit).

    Raises, at construction, what :func:`mxref.backends.get_backend` raises for the spec
    (UnknownBackendError, BackendUnavailable - a module that raises anything at import is
    unavailable, named with its exception)."""

    def __init__(self, spec: str, device=None, *, timeout: float | None = DEFAULT_TIMEOUT,
                 env: dict | None = None):
        self._spec, self._device = spec, device
        self._timeout = timeout or None
        self._env = env
        self._proc = None
        self._restarts = 0
        self._dead_reason = None
        info = self._start()
        self._attrs = info["attrs"]
        self._methods = set(info["methods"])
        for k, v in self._attrs.items():
            object.__setattr__(self, k, tuple(v) if isinstance(v, list) else v)

    # -- process management
    def _start(self) -> dict:
        env = dict(os.environ if self._env is None else self._env, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "mxref.verify.isolate", self._spec,
             "" if self._device is None else str(self._device)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env,
            start_new_session=True)     # Ctrl-C goes to mxref, which then stops the worker
        os.set_blocking(self._proc.stdin.fileno(), False)
        try:
            return self._receive("start", max(START_TIMEOUT, self._timeout or 0))
        except BackendFault as e:
            raise BackendUnavailable(f"backend {self._spec!r}: {e}") from None

    def close(self) -> None:
        p, self._proc = self._proc, None
        if p is None:
            return
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill(p)
        p.stdout.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    @staticmethod
    def _kill(p) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait()

    def _death(self, what: str, timed_out=False) -> BackendFault:
        p, self._proc = self._proc, None
        if timed_out:
            self._kill(p)
            why = f"exceeded --timeout {self._timeout:g} s"
        else:
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill(p)
                rc = p.returncode
            if rc is not None and rc < 0:
                try:
                    sig = signal.Signals(-rc).name
                except ValueError:
                    sig = f"signal {-rc}"
                why = f"the backend's worker process was killed by {sig}"
            else:
                why = (f"the backend's worker process exited with status {rc} "
                       "(os._exit or a crash inside the backend)")
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass
        return BackendFault(f"{why} during {what}")

    # -- one call
    def _send(self, pieces: list, what: str, deadline) -> None:
        fd = self._proc.stdin.fileno()
        for piece in pieces:
            mv = memoryview(piece).cast("B")
            while len(mv):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise self._death(what, timed_out=True)
                _, w, _ = select.select([], [fd], [], left)
                if not w:
                    continue
                try:
                    k = os.write(fd, mv)
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError):
                    raise self._death(what) from None
                mv = mv[k:]

    def _read_exact(self, n: int, what: str, deadline) -> bytearray:
        fd = self._proc.stdout.fileno()
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._death(what, timed_out=True)
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            k = os.readv(fd, [view[got:]])
            if not k:
                raise self._death(what)
            got += k
        return buf

    def _receive(self, what: str, timeout):
        deadline = None if not timeout else time.monotonic() + timeout
        (n,) = _LEN.unpack(self._read_exact(_LEN.size, what, deadline))
        if n > _MAX_FRAME:
            self._kill(self._proc)
            self._proc = None
            raise BackendFault(f"the backend's worker sent a frame of {n} bytes during {what}")
        header, arrays = _unframe(self._read_exact(n, what, deadline))
        if "error" in header:
            err = header["error"]
            kind, msg = err["kind"], err["message"]
            if kind == "unsupported":
                raise Unsupported(msg)
            if kind == "unavailable":
                raise BackendUnavailable(msg)
            if kind == "unknown":
                raise UnknownBackendError(msg)
            if kind == "bad_output":
                from .compare import BadOutput
                raise BadOutput(f"{what} returned {msg}")
            raise RemoteBackendError(err["type"], msg)
        return _decode(header["value"], arrays)

    def _call(self, method: str, args: tuple, kwargs: dict):
        if self._proc is None:
            if self._restarts >= MAX_RESTARTS:
                raise BackendFault(f"not run: the backend's worker died {self._restarts + 1} "
                                   f"times; last: {self._dead_reason}")
            self._restarts += 1
            self._start()
        deadline = None if not self._timeout else time.monotonic() + self._timeout
        bufs: list = []
        pieces = _frame({"method": method, "value": _encode([list(args), dict(kwargs)], bufs)},
                        bufs)
        try:
            self._send(pieces, method, deadline)
            return self._receive(method, self._timeout)
        except BackendFault as e:
            self._dead_reason = str(e)
            raise

    def __getattr__(self, name):
        methods = self.__dict__.get("_methods", ())
        if name in methods:
            def remote(*args, **kwargs):
                return self._call(name, args, kwargs)
            remote.__name__ = name
            return remote
        raise AttributeError(name)

    def __repr__(self):
        return f"IsolatedBackend({self._spec!r}, pid={getattr(self._proc, 'pid', None)})"


if __name__ == "__main__":  # pragma: no cover - the worker entry point
    sys.exit(_serve(sys.argv[1], sys.argv[2] or None))
