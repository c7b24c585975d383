"""`mxref verify --jobs N`: the selection split into N shards (`select.shard_of`), each verified by
its own worker process, and the shard reports merged into one ``mxref-verify/1`` document
(`run.merge_reports`) equal, counters, files, records and status, to a one-process run's.

A worker is ``python -m mxref.verify.parallel SPEC.json K`` : it builds its own backend from the
spec (a GPU backend's state is per process), verifies shard K and writes its report as JSON; it
prints one line per finished golden file on stdout, which the parent turns into progress.
The parent checks the selection and the backend before it starts anyone, so usage, integrity and
availability errors come out exactly as in a one-process run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..errors import MXRefError

_TAG = "mxref-verify-file "


class VerifyWorkerError(MXRefError):
    """A verify worker process died or wrote no report."""


def _threads_per_job(jobs: int) -> str:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return str(max(1, (n or 1) // jobs))


def verify_parallel(spec: dict, jobs: int, *, progress=None, planned=None) -> dict:
    """Run the verify described by `spec` (backend, device, root, levels, ops, profiles,
    formats, src_dtypes, classes, suite, max_errors, expectations_path, strict_xpass) in `jobs`
    worker processes and return the merged document. `planned`: the relpaths the one-process
    run would verify, in order (for the merged file order and the progress total);
    `progress(relpath, done, total)` is called as files finish."""
    from .run import merge_reports

    total = len(planned or ())
    done = [0]
    lock = threading.Lock()
    threads_env = _threads_per_job(jobs)
    with tempfile.TemporaryDirectory(prefix="mxref-verify-") as tmp:
        sp = Path(tmp) / "spec.json"
        sp.write_text(json.dumps({**spec, "jobs": jobs}))
        procs = []
        for k in range(jobs):
            env = dict(os.environ, NUMBA_NUM_THREADS=threads_env, OMP_NUM_THREADS=threads_env,
                       PYTHONUNBUFFERED="1")
            err = open(Path(tmp) / f"worker-{k}.log", "w")
            p = subprocess.Popen([sys.executable, "-m", "mxref.verify.parallel", str(sp),
                                  str(k)], stdout=subprocess.PIPE, stderr=err, text=True,
                                 env=env)
            procs.append((p, err))

        def pump(p):
            for line in p.stdout:
                if line.startswith(_TAG):
                    with lock:
                        done[0] += 1
                        if progress:
                            progress(line[len(_TAG):].strip(), done[0], total)

        pumps = [threading.Thread(target=pump, args=(p,), daemon=True) for p, _ in procs]
        for t in pumps:
            t.start()
        try:
            for p, _ in procs:
                p.wait()
        except BaseException:
            for p, _ in procs:
                p.kill()
            raise
        finally:
            for t in pumps:
                t.join(timeout=5)
            for _, err in procs:
                err.close()
        docs = []
        for k, (p, _) in enumerate(procs):
            out = Path(tmp) / f"shard-{k}.json"
            if not out.is_file():
                tail = (Path(tmp) / f"worker-{k}.log").read_text()[-2000:]
                raise VerifyWorkerError(f"verify worker {k + 1}/{jobs} exited {p.returncode} "
                                        f"without a report; its output ends:\n{tail}")
            doc = json.loads(out.read_text())
            if "error" in doc:
                raise VerifyWorkerError(f"verify worker {k + 1}/{jobs}: {doc['error']}")
            docs.append(doc)
    return merge_reports(docs, max_errors=spec.get("max_errors", 20),
                         strict_xpass=bool(spec.get("strict_xpass")), file_order=planned)


def _worker(spec_path: str, k: int) -> int:
    from ..backends import get_backend
    from .expectations import load_expectations
    from .run import verify

    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec_path).parent / f"shard-{k}.json"
    try:
        exps = (load_expectations(spec["expectations_path"])
                if spec.get("expectations_path") else None)
        if spec.get("isolate", True):
            from .isolate import IsolatedBackend
            backend = IsolatedBackend(spec["backend"], spec.get("device"),
                                      timeout=spec.get("timeout"))
        else:
            backend = get_backend(spec["backend"], device=spec.get("device"))

        def progress(gf, i, n):
            print(_TAG + gf.relpath, flush=True)
        rep = verify(backend, root=spec.get("root"), levels=tuple(spec.get("levels") or (1,)),
                     ops=spec.get("ops"), profiles=spec.get("profiles"),
                     formats=spec.get("formats"), src_dtypes=spec.get("src_dtypes"),
                     classes=spec.get("classes"), suite=spec.get("suite"),
                     max_errors=spec.get("max_errors", 20), expectations=exps,
                     strict_xpass=bool(spec.get("strict_xpass")), progress=progress,
                     shard=(k, int(spec["jobs"])), no_relax=bool(spec.get("no_relax")))
        out.write_text(json.dumps(rep.doc))
        return 0
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises
        out.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1


if __name__ == "__main__":  # pragma: no cover - the worker entry point
    sys.exit(_worker(sys.argv[1], int(sys.argv[2])))
