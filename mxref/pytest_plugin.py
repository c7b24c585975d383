"""pytest plugin (entry point ``pytest11: mxref``): gate a kernel repository's CI on the corpus.

    pytest --pyargs mxref.conformance --mxref-backend=triton --mxref-level=1
    pytest --pyargs mxref.conformance --mxref-backend=mypkg.mx:Backend -m "mx_conformance and not exhaustive"

One test per (golden file, coverage class), with ids like
``test_quantize_mx[bf16-mxfp4-ocp-L1-E2]``; a failure prints the same mismatch record as
``mxref verify``. Known deviations from ``--mxref-expectations`` become xfail.
"""
from __future__ import annotations

import fnmatch

import pytest

MARKERS = {
    "mx_conformance": "a golden-corpus conformance case (mxref)",
    "gpu": "needs a GPU; skipped where none is present",
    "exhaustive": "long exhaustive sweep; opt in with -m exhaustive",
}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def pytest_addoption(parser):
    g = parser.getgroup("mxref", "mxref golden-corpus conformance")
    g.addoption("--mxref-backend", default=None, metavar="B",
                help="backend to verify (numba, torch, triton, ..., or package.module:object)")
    g.addoption("--mxref-device", default=None, help="device for backends that take one")
    g.addoption("--mxref-level", default="1", help="golden levels, comma separated (default 1)")
    g.addoption("--mxref-profile", action="append", default=None,
                help="profiles (repeatable; default: those the backend claims)")
    g.addoption("--mxref-ops", default=None, help="golden ops, comma separated")
    g.addoption("--mxref-files", default=None,
                help="only golden files whose relpath matches one of these globs (comma separated)")
    g.addoption("--mxref-golden", default=None, help="golden corpus directory")
    g.addoption("--mxref-expectations", default=None, help="TOML manifest of known deviations")


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


class _Session:
    """The backend, the planned files, and one verify run per golden file (cached)."""

    def __init__(self, config):
        from .backends import get_backend
        from .verify.engine import default_golden_root, select_files
        from .verify.expectations import load_expectations
        from .verify.run import check_backend, plan_files
        from pathlib import Path

        opt = config.getoption
        self.root = Path(opt("--mxref-golden")) if opt("--mxref-golden") else default_golden_root()
        self.ops = [o for o in (opt("--mxref-ops") or "").split(",") if o] or None
        self.profiles = opt("--mxref-profile")
        self.error = None
        self.files = []
        try:
            try:
                self.levels = tuple(int(v) for v in opt("--mxref-level").split(","))
            except ValueError:
                raise ValueError(f"--mxref-level takes comma-separated integers, got "
                                 f"{opt('--mxref-level')!r}") from None
            self.expectations = load_expectations(opt("--mxref-expectations")) \
                if opt("--mxref-expectations") else None
            self.backend = get_backend(opt("--mxref-backend"), device=opt("--mxref-device"))
            check_backend(self.backend)
            _, files = select_files(self.root, levels=self.levels, ops=self.ops,
                                    profiles=self.profiles)
            files, _ = plan_files(self.backend, files, ops=self.ops, profiles=self.profiles,
                                  name=getattr(self.backend, "name", "?"),
                                  claimed_names=list(getattr(self.backend, "profiles", ())))
        except Exception as e:  # noqa: BLE001 - reported as one failing test, never a crash
            self.error = f"{type(e).__name__}: {e}"
            return
        globs = [g for g in (opt("--mxref-files") or "").split(",") if g]
        self.files = [f for f in files if not globs or any(fnmatch.fnmatch(f.relpath, g) for g in globs)]
        self._cache = {}

    def result(self, gf, cls):
        from .verify.run import verify
        if gf.relpath not in self._cache:
            from .formats import FORMATS
            from .verify.engine import PROFILE_FREE_OPS
            rep = verify(self.backend, root=self.root, levels=(gf.level,), ops=[gf.op],
                         profiles=None if gf.op in PROFILE_FREE_OPS else [gf.profile],
                         formats=[f for f in gf.fmt.split("+") if f in FORMATS] or None,
                         src_dtypes=[gf.src_dtype], max_errors=1,
                         expectations=self.expectations, only={gf.relpath})
            self._cache = {gf.relpath: rep.cases_by_test}   # keep one file's results alive
        return self._cache[gf.relpath].get((gf.relpath, cls))


def _session(config):
    if not hasattr(config, "_mxref_session"):
        config._mxref_session = _Session(config)
    return config._mxref_session


def pytest_generate_tests(metafunc):
    if "mx_golden_case" not in metafunc.fixturenames:
        return
    op = getattr(metafunc.function, "mx_op", None)
    config = metafunc.config
    if not config.getoption("--mxref-backend"):
        metafunc.parametrize("mx_golden_case", [pytest.param(
            None, marks=pytest.mark.skip(reason="no --mxref-backend given"))], ids=["no-backend"])
        return
    s = _session(config)
    if s.error:
        metafunc.parametrize("mx_golden_case", [("error", s.error)], ids=["mxref-setup-error"])
        return
    params = []
    for gf in s.files:
        if op and gf.op != op:
            continue
        for cls in sorted(gf.classes):
            params.append(pytest.param(
                (gf, cls), id=f"{SHORT.get(gf.src_dtype, gf.src_dtype)}-{gf.fmt}-{gf.profile}-"
                              f"L{gf.level}-{cls}", marks=[pytest.mark.mx_conformance]))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(
            reason=f"nothing selected for op {op} with this backend"))]
    metafunc.parametrize("mx_golden_case", params)


def check_case(request, case):
    """Body of every conformance test: look the case up in the file's verify run."""
    from .verify.report import record_text
    if isinstance(case, tuple) and case[0] == "error":
        pytest.fail(f"mxref conformance cannot run: {case[1]}", pytrace=False)
    gf, cls = case
    t = _session(request.config).result(gf, cls)
    if t is None:
        pytest.fail(f"no verify result for {gf.relpath} class {cls}", pytrace=False)
    if t["status"] == "fail":
        rec = t.get("record")
        pytest.fail(f"{t['mismatched']} of {t['cases']} cases mismatched in {gf.relpath} "
                    f"class {cls}\n" + (record_text(rec) if rec else ""), pytrace=False)
    if t["status"] == "error":
        pytest.fail(f"backend error in {gf.relpath} class {cls}: {t.get('reason')}", pytrace=False)
    if t["status"] == "skipped":
        pytest.skip(t.get("reason", "unsupported"))
    if t["status"] == "xfail":
        pytest.xfail(t.get("reason", "known deviation"))
    assert t["status"] == "pass" and t["mismatched"] == 0 and t["errors"] == 0
