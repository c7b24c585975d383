"""Stacks on the leaderboard (mxref.leaderboard.stacks; issue 31, "the leaderboard ranks stacks,
not only ours"), all on the CPU:

* the timing entry of the backend protocol (base.timing_entry): a backend without one is
  verified but "not timed", never given a number;
* the verified-only rule per stack: a stack whose verify of a profile fails gets no record for
  it, and a record whose verify failed is refused by submit;
* a fake timed backend goes through `leaderboard run gpu --device cpu --backend ...` -> submit
  -> build and is ranked on its workload's table (CPU numbers recorded as CPU numbers);
* the page: every record links its JSON and verify report, trends over commits, one legend
  entry per series in the loss plot, and the page fits 1400 px in Chromium without cutting the
  verify and commit columns;
* the real timing entries on the CPU: Triton (interpreter) and torch.compile(torchao to_mx)
  RCEIL, their device outputs bit-exact against mxref.

The fake backends live in this module so `mxref verify -b test_leaderboard_stacks:FakeTimed`
(a worker process) imports them with this directory on PYTHONPATH.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent


# ---- fake stacks ------------------------------------------------------------------------------
class _Fake:
    """quantize_mx through mxref's numba backend (verified against the goldens); the timing
    entry through mxref.quantize on the same device tensor (the CPU)."""

    version = "0.0-test"
    ops = frozenset({"quantize_mx"})
    profiles = ("ocp",)
    relaxations = ()

    def __init__(self, device=None):
        if device not in (None, "cpu"):
            from mxref.errors import BackendUnavailable
            raise BackendUnavailable(f"{self.name} runs on the CPU only")
        self.device = "cpu"

    def check_available(self):
        pass

    def describe(self):
        return {"name": self.name, "version": self.version, "device": self.device}

    def claims(self, profile):
        return profile in self.profiles

    @property
    def native_profile(self):
        return self.profiles[0]

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        from mxref.backends.numba_backend import NumbaBackend
        return NumbaBackend().quantize_mx(src, src_dtype=src_dtype, fmt=fmt, profile=profile,
                                          axis=axis)


def _device_quantize(x, fmt, profile, axis):
    import torch

    import mxref
    mx = mxref.quantize(x, fmt, profile, axis=axis)
    return torch.from_numpy(np.ascontiguousarray(mx.scales)), \
        torch.from_numpy(np.ascontiguousarray(mx.codes))


class FakeTimed(_Fake):
    name = "fake-timed"

    def timed_quantize_mx(self, x, *, fmt, profile, axis):
        return lambda: _device_quantize(x, fmt, profile, axis)


class FakeUntimed(_Fake):
    """Verified, but no timing entry: listed "not timed"."""
    name = "fake-untimed"


class FakeLying(FakeTimed):
    """Claims ocp, but its codes are off by one bit in the last element of every array: its
    verify fails, so it must never be timed (its timing entry is correct, which would pass the
    in-run check: only the verify keeps it out)."""
    name = "fake-lying"

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        s, c = super().quantize_mx(src, src_dtype=src_dtype, fmt=fmt, profile=profile,
                                   axis=axis)
        c = c.copy()
        if c.size:
            c.reshape(-1)[-1] ^= 1
        return s, c


class FakeWrongTimed(FakeTimed):
    """Verified (numpy path right) but its timing entry returns other bits: the in-run check
    keeps it out."""
    name = "fake-wrong-timed"

    def timed_quantize_mx(self, x, *, fmt, profile, axis):
        def run():
            s, c = _device_quantize(x, fmt, profile, axis)
            c = c.clone()
            c.view(-1)[0] ^= 1
            return s, c
        return run


# ---- helpers ----------------------------------------------------------------------------------
class CountingTimer:
    """A deterministic timer: 1.0 ms, then 1.1, 1.2, ... per call; counts calls by function."""
    name = "test timer"
    metric = "kernel time (test timer)"

    def __init__(self):
        self.calls = 0

    def __call__(self, fn):
        fn()
        self.calls += 1
        return 1.0 + 0.1 * (self.calls % 3)


def _fake_report(name, status="pass", profile="ocp", formats=("mxfp4", "mxfp8_e4m3")):
    files = [{"path": f"L0/quantize_mx/{f}__{profile}__bfloat16.arrow", "op": "quantize_mx",
              "format": f, "profile": profile, "run_as": profile, "status": status,
              "pass": 21 if status == "pass" else 20, "mismatch": 0 if status == "pass" else 1,
              "error": 0} for f in formats]
    return {"schema": "mxref-verify/1", "status": status, "backend": {"name": name},
            "summary": {"passed_cases": sum(f["pass"] for f in files)}, "files": files}


@pytest.fixture
def fake_verify(monkeypatch, tmp_path):
    """run_stacks with a stubbed verify (no subprocess): FakeLying's report fails."""
    from mxref.leaderboard import stacks

    def verify(out, spec, device, formats, profiles, levels, log, jobs):
        name = spec.rsplit(":", 1)[-1]
        status = "fail" if name == "FakeLying" else "pass"
        rep = _fake_report(name, status, profiles[0], formats)
        p = out / f"v-{name}.json"
        p.write_text(json.dumps(rep))
        from mxref.leaderboard.runners import _store_evidence
        rel, sha = _store_evidence(out, p, "json")
        return rep, rel, sha
    monkeypatch.setattr(stacks, "_verify_stack", verify)
    return verify


SPEC = "test_leaderboard_stacks:{}"


# ---- the timing entry --------------------------------------------------------------------------
def test_timing_entry_lookup():
    from mxref.backends.base import timing_entry
    assert timing_entry(FakeTimed()) is not None
    assert timing_entry(FakeUntimed()) is None
    assert timing_entry(FakeTimed(), "gemm") is None          # no entry defined for that op


def test_backend_without_timing_entry_is_not_timed(tmp_path, fake_verify):
    from mxref.leaderboard.stacks import run_stacks
    timer = CountingTimer()
    paths = run_stacks(tmp_path / "out", [SPEC.format("FakeUntimed")], size=64, repeats=2,
                       levels=(0,), command=["x"], device="cpu", timer=timer)
    assert paths == []
    assert timer.calls == 2                   # the copy roofline only; the stack never ran
    (roster,) = (tmp_path / "out" / "stacks").glob("*.json")
    doc = json.loads(roster.read_text())
    (st,) = doc["stacks"]
    assert st["timing_entry"] is False and len(st["rows"]) == 4     # 2 formats x 2 axes
    for row in st["rows"]:
        assert row["verified"] is True and row["status"] == "not timed"
        assert "no timing entry" in row["reason"] and "median_ms" not in row


def test_unverified_stack_is_never_timed(tmp_path, fake_verify):
    """FakeLying's timing entry is correct (the in-run check would pass): only its failing
    verify keeps it off the board."""
    from mxref.leaderboard.stacks import run_stacks
    timer = CountingTimer()
    paths = run_stacks(tmp_path / "out", [SPEC.format("FakeLying"), SPEC.format("FakeTimed")],
                       size=64, repeats=2, levels=(0,), command=["x"], device="cpu",
                       timer=timer)
    recs = [json.loads(p.read_text()) for p in paths]
    assert {r["params"]["stack"] for r in recs} == {"fake-timed"} and len(recs) == 4
    doc = json.loads(next((tmp_path / "out" / "stacks").glob("*.json")).read_text())
    lying = next(s for s in doc["stacks"] if s["name"] == "fake-lying")
    assert all(r["status"] == "not timed" and not r["verified"] and
               r["reason"].startswith("not verified") for r in lying["rows"])


def test_in_run_bit_check_keeps_a_wrong_timing_entry_out(tmp_path, fake_verify):
    from mxref.leaderboard.stacks import run_stacks
    paths = run_stacks(tmp_path / "out", [SPEC.format("FakeWrongTimed")], size=64, repeats=2,
                       levels=(0,), command=["x"], device="cpu", timer=CountingTimer())
    assert paths == []
    doc = json.loads(next((tmp_path / "out" / "stacks").glob("*.json")).read_text())
    assert all("in-run bit check failed" in r["reason"] for r in doc["stacks"][0]["rows"])


def test_cpu_records_say_cpu(tmp_path, fake_verify):
    from mxref.leaderboard.stacks import run_stacks
    paths = run_stacks(tmp_path / "out", [SPEC.format("FakeTimed")], size=64, repeats=3,
                       levels=(0,), command=["x"], device="cpu")      # the default CPU timer
    rec = json.loads(paths[0].read_text())
    assert rec["suite"] == "stacks" and rec["machine"]["accelerator"] is None
    assert rec["params"]["device"] == "cpu" and "CPU wall clock" in rec["metric"]["name"]
    assert rec["roofline"]["name"].endswith("cpu") and rec["roofline"]["ratio_label"] == "of copy"
    assert 0 < rec["roofline"]["ratio"] < 1          # slower than a plain copy of its input
    assert len(rec["metric"]["repeats"]) == 3


# ---- verified-only rule at submit ----------------------------------------------------------------
def test_submit_refuses_a_stack_record_whose_verify_failed(tmp_path, fake_verify):
    """A record sealed by hand against FakeLying's failing verify report (the planted record)
    is refused; the same record against a passing report is accepted."""
    from mxref.leaderboard.record import make_record, run_env
    from mxref.leaderboard.runners import _store_evidence, _write
    from mxref.leaderboard.submit import check_record
    out = tmp_path / "out"
    out.mkdir()
    env = run_env()

    def rec(name, status):
        p = tmp_path / f"{name}.json"
        rep = _fake_report(name, status)
        rep["golden"] = {k: env["golden"][k] for k in ("suite_version", "manifest_sha256")}
        p.write_text(json.dumps(rep))
        rel, sha = _store_evidence(out, p, "json")
        return _write(out, make_record(
            suite="stacks", entry=f"{name} ocp | quantize bf16->mxfp4 axis=-1 64x64",
            group="quantize", impl=name, op="quantize_mx", fmt="mxfp4", profile="ocp",
            params={"workload": "quantize bf16->mxfp4 axis=-1 64x64", "stack": name},
            metric={"name": "t", "unit": "ms", "lower_is_better": True, "repeats": [1.0]},
            command=["x"], env=env,
            verify={"kind": "mxref-verify", "report": rel, "sha256": sha, "status": "pass",
                    "backend": name, "cases": 1}))
    good = check_record(rec("fake-timed", "pass"), allow_dirty=True, current_golden=False)
    bad = check_record(rec("fake-lying", "fail"), allow_dirty=True, current_golden=False)
    assert good.ok, good.problems
    assert not bad.ok, "a record whose verify failed was accepted"
    assert any("not 'pass'" in p or "verify failed" in p for p in bad.problems), bad.problems


# ---- the page ---------------------------------------------------------------------------------
def _training(env, recipe, base_shift):
    from mxref.leaderboard.record import make_record
    curve = [[1000 * (i + 1), 5.0 - 0.1 * i] for i in range(10)]
    base = [[t, l - 0.05 + base_shift] for t, l in curve]
    return make_record(
        suite="training", entry=f"llama-tiny {recipe}", group="train", impl="MXLinear",
        op="train-step", fmt=recipe, profile="recipe",
        params={"recipe": recipe, "model": "llama-tiny", "tokens": 10_000},
        metric={"name": "step time", "unit": "s", "lower_is_better": True,
                "repeats": [0.4, 0.41]},
        roofline={"name": "bf16", "median": 0.2, "unit": "s", "ratio": 2.0,
                  "ratio_label": "x bf16 step time"},
        quality={"loss_curve": curve, "baseline_curve": base}, command=["x"], env=env,
        verify={"kind": "in-run-validation", "report": "verify/x.jsonl", "sha256": "0" * 64,
                "status": "pass", "backend": "MXLinear", "cases": 2})


def test_loss_plot_has_one_legend_entry_per_series():
    """Five recipes, each run with its own (slightly different) bf16 baseline curve: one legend
    entry per label, "bf16 baseline" once, and every recipe a colour of its own."""
    from mxref.leaderboard.build import _pyplot, legend_labels, loss_figure
    from mxref.leaderboard.record import run_env
    env = run_env()
    rows = [_training(env, f"recipe-{i}", 0.001 * i) for i in range(5)]
    fig = loss_figure(rows)
    try:
        labels = legend_labels(fig)
        colours = [tuple(line.get_color()) if not isinstance(line.get_color(), str)
                   else line.get_color() for line in fig.axes[0].get_lines()
                   if not line.get_label().startswith("_") and line.get_linestyle() == "-"]
    finally:
        _pyplot().close(fig)
    assert labels.count("bf16 baseline") == 1, labels
    assert len(labels) == len(set(labels)) == 6, labels
    assert len(colours) == 5 and len(set(colours)) == 5, colours


def _chromium():
    import shutil
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI") == "true":
        pytest.fail("Chromium is not on PATH (apt-get install -y chromium)")
    pytest.skip("Chromium is not on PATH")


_LAYOUT_PROBE = """<script>
window.addEventListener("load", function () {
  var W = window.innerWidth, bad = [], heads = [];
  document.querySelectorAll("table.lb").forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.right > W + 0.5) bad.push(t.id + " ends at " + Math.round(r.right));
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th) {
      var txt = th.textContent.trim();
      if (txt === "verify" || txt === "commit" || txt === "verified") {
        var b = th.getBoundingClientRect();
        heads.push(t.id + ":" + txt);
        if (b.right > W + 0.5 || b.width < 20) bad.push(t.id + ":" + txt + " cut");
      }
    });
    t.querySelectorAll("td").forEach(function (td) {
      if (td.scrollWidth > td.clientWidth + 1)
        bad.push(t.id + " cell overflows: " + td.textContent.trim().slice(0, 40));
    });
  });
  if (document.documentElement.scrollWidth > W) bad.push("page scrolls sideways");
  document.body.setAttribute("data-width", String(W));
  document.body.setAttribute("data-heads", heads.join("|"));
  document.body.setAttribute("data-bad", bad.join("|"));
});
</script></body>"""


def layout_problems(html_path: Path, tmp_path: Path, width: int = 1400):
    """(problems, headers checked, window width) of the page in headless Chromium at `width`
    px: a table past the right edge, a verify/commit header cut or squeezed, a cell whose
    content overflows it, a sideways scroll."""
    probe = html_path.parent / "layout_probe.html"
    probe.write_text(html_path.read_text().replace("</body>", _LAYOUT_PROBE))
    res = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--window-size={width},1600",
         "--virtual-time-budget=2000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=90, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body[^>]*>", res.stdout).group(0)

    def attr(name):
        import html
        m = re.search(fr'{name}="([^"]*)"', body)
        return html.unescape(m.group(1)) if m else None
    bad = attr("data-bad")
    return ([x for x in bad.split("|") if x] if bad else []), attr("data-heads"), \
        attr("data-width")


# ---- end to end, for real (verify subprocesses, the CLI) ----------------------------------------
@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """`leaderboard run gpu --device cpu` with three fake stacks (timed, untimed, lying), then
    submit and build, through the CLI, with the real `mxref verify` of each."""
    from click.testing import CliRunner

    from mxref.cli import main
    tmp = tmp_path_factory.mktemp("stacks")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(HERE) + (os.pathsep + old if old else "")
    try:
        lb, store, site = tmp / "lb", tmp / "store", tmp / "site"
        args = ["leaderboard", "run", "gpu", "--out", str(lb), "--device", "cpu",
                "--size", "256", "--repeats", "2", "--level", "0", "--jobs", "1",
                "--stack-profile", "ocp", "--json"]
        for name in ("FakeTimed", "FakeUntimed", "FakeLying"):
            args += ["--backend", SPEC.format(name)]
        r = CliRunner().invoke(main, args, catch_exceptions=False)
        run = (r.exit_code, r.stdout, r.output)
        r = CliRunner().invoke(main, ["leaderboard", "submit", str(lb), "--store", str(store),
                                      "--allow-dirty", "--json"], catch_exceptions=False)
        sub = (r.exit_code, r.stdout, r.output)
        r = CliRunner().invoke(main, ["leaderboard", "build", str(store), "--out", str(site),
                                      "--json"], catch_exceptions=False)
        build = (r.exit_code, r.stdout, r.output)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return {"lb": lb, "store": store, "site": site, "run": run, "submit": sub, "build": build}


def test_e2e_run_submit_build_ranks_the_fake_stack(e2e):
    code, out, log = e2e["run"]
    assert code == 0, log
    recs = [json.loads(Path(p).read_text()) for p in json.loads(out)["records"]]
    assert len(recs) == 4 and {r["params"]["stack"] for r in recs} == {"fake-timed"}
    assert all(r["machine"]["accelerator"] is None and r["params"]["device"] == "cpu"
               for r in recs)
    code, out, log = e2e["submit"]
    doc = json.loads(out)
    assert code == 0 and doc["accepted"] == 4 and doc["rejected"] == 0, log
    assert [r["accepted"] for r in doc["rosters"]] == [True]
    code, out, log = e2e["build"]
    assert code == 0, log
    md = (e2e["site"] / "LEADERBOARD.md").read_text()
    html = (e2e["site"] / "index.html").read_text()
    for w in ("quantize bf16->mxfp4 axis=-1 256x256", "quantize bf16->mxfp8_e4m3 axis=0 256x256"):
        sec = md[md.index(f"### {w}"):]
        sec = sec[:sec.index("\n\n", sec.index("| rank"))]
        rows = [x for x in sec.splitlines() if x.startswith("| ") and "rank" not in x]
        assert rows[0].startswith("| 1 | fake-timed | ocp | yes |"), rows
        untimed = next(x for x in rows if "fake-untimed" in x)
        lying = next(x for x in rows if "fake-lying" in x)
        assert "| not timed |" in untimed and "no timing entry" in untimed
        assert "| no | not timed |" in lying and "not verified" in lying
        # no number for a stack that was not timed
        for x in (untimed, lying):
            assert not re.search(r"\d+(\.\d+)? (ms|us|ns|s) \|", x), x
    # every ranked record links its JSON and its verify report, and both are beside the page
    for href in re.findall(r"<a href=\"([^\"#]+)\">", html):
        assert (e2e["site"] / href).is_file(), href
    table = html[html.index('data-workload="quantize bf16-&gt;mxfp4 axis=-1 256x256"'):]
    table = table[:table.index("</table>")]
    assert re.search(r'<a href="records/stacks/[^"]+\.json">json</a>', table)
    assert re.search(r'<a href="verify/[0-9a-f]{64}\.json">yes</a>', table)
    # the lying stack's failing report is linked from its "no"
    assert re.search(r'class="verified-no"><a href="verify/[0-9a-f]{64}\.json">no</a>', table)


def test_e2e_page_fits_1400px(e2e, tmp_path):
    bad, heads, width = layout_problems(e2e["site"] / "index.html", tmp_path)
    assert width == "1400"
    assert "verify" in heads and "verified" in heads and "commit" in heads, heads
    assert bad == [], bad


def test_committed_store_fits_1400px(tmp_path):
    """The committed store, built with its git history (each kernel's trend), fits too."""
    from mxref.leaderboard.build import build_site, load_history
    from mxref.leaderboard.submit import check_record, record_files
    store = HERE.parent / "bench/results/leaderboard"
    vs = [check_record(p, current_golden=False, allow_dirty=True) for p in record_files([store])]
    good = [v for v in vs if v.ok]
    site = build_site([v.record for v in good], tmp_path / "site",
                      history=load_history(store),
                      evidence={v.record["record_sha256"]: v.evidence for v in good})
    html = site["html"].read_text()
    assert html.count('class="spark"') == len(good)          # a trend for every kernel
    assert html.count("<polyline") > 0                       # and a line where there is history
    bad, heads, _ = layout_problems(site["html"], tmp_path)
    assert "table-gpu-kernels:verify" in heads and "table-gpu-kernels:commit" in heads
    assert bad == [], bad


def test_trend_over_commits_from_git_history(tmp_path):
    """A store committed twice: the trend of its entry has both medians, oldest first."""
    from mxref.leaderboard.build import load_history, trend_points, trend_svg
    from mxref.leaderboard.record import make_record, run_env
    repo = tmp_path / "repo"
    (repo / "store/records/stacks/m").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    env = run_env()
    recs = []
    for i, med in enumerate((2.0, 1.5)):
        rec = make_record(suite="stacks", entry="s ocp | w", group="quantize", impl="s",
                          op="quantize_mx", fmt="mxfp4", profile="ocp", params={},
                          metric={"name": "t", "unit": "ms", "lower_is_better": True,
                                  "repeats": [med]}, command=["x"],
                          verify={"kind": "mxref-verify", "report": "verify/a.json",
                                  "sha256": "0" * 64, "status": "pass", "backend": "s"},
                          env={**env, "created": f"2026-11-2{i}T00:00:00Z"})
        recs.append(rec)
        (repo / "store/records/stacks/m/s.json").write_text(json.dumps(rec))
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", f"r{i}"], check=True)
    hist = load_history(repo / "store", repo)
    pts = trend_points(recs[1], hist)
    assert [p[2] for p in pts] == [2.0, 1.5]
    svg = trend_svg(pts, "ms")
    assert svg.count("<circle") == 2 and "<polyline" in svg


# ---- the real timing entries on the CPU --------------------------------------------------------
def test_triton_timing_entry_is_bit_exact_in_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from mxkernels.backends import TritonBackend
    from mxref.backends.base import timing_entry
    from mxref.leaderboard.stacks import check_output, make_input
    b = TritonBackend(device="cpu")
    x = make_input(64, "cpu")
    for fmt, axis in (("mxfp4", -1), ("mxfp8_e4m3", 0)):
        run = timing_entry(b)(x, fmt=fmt, profile="ocp", axis=axis)
        ok, why = check_output(run(), x, fmt, "ocp", axis)
        assert ok, (fmt, axis, why)
        s, c = run()
        assert s.device.type == "cpu" and c.dtype.is_floating_point is False


def test_torchao_compiled_rceil_timing_entry_on_cpu():
    """torch.compile(to_mx, RCEIL) on the CPU (inductor): its device outputs equal mxref's
    torchao_rceil bits; axis 0 is Unsupported (to_mx blocks the last axis)."""
    pytest.importorskip("torchao")
    from mxref.backends.peers_torchao_compiled import TorchaoCompiledRceil
    from mxref.errors import Unsupported
    from mxref.leaderboard.stacks import check_output, make_input
    b = TorchaoCompiledRceil(device="cpu")
    x = make_input(64, "cpu")
    run = b.timed_quantize_mx(x, fmt="mxfp8_e4m3", profile="torchao_rceil", axis=-1)
    ok, why = check_output(run(), x, "mxfp8_e4m3", "torchao_rceil", -1)
    assert ok, why
    with pytest.raises(Unsupported):
        b.timed_quantize_mx(x, fmt="mxfp8_e4m3", profile="torchao_rceil", axis=0)


# ---- skipped source dtypes ----------------------------------------------------------------------
def _file(src, status, n=21, error=0):
    return {"path": f"L0/quantize_mx/mxfp4__torchao_floor__{src}.arrow", "op": "quantize_mx",
            "format": "mxfp4", "profile": "torchao_floor", "src_dtype": src, "status": status,
            "pass": n if status == "pass" else 0, "mismatch": 0, "error": error}


@pytest.mark.parametrize("files,ok,says", [
    # torchao's backend takes no float16 source: its skipped file is not a failure
    ([_file("bfloat16", "pass"), _file("float16", "skipped"), _file("float32", "pass", 22)],
     True, "43 passing"),
    # a skipped file of the workload's own source dtype (bf16) is
    ([_file("bfloat16", "skipped"), _file("float32", "pass", 22)], False, "bfloat16"),
    # passing float32 alone does not verify a bf16 workload
    ([_file("float32", "pass", 22)], False, "source dtype bfloat16"),
    # an error stays a failure whatever its dtype
    ([_file("bfloat16", "pass"), _file("float16", "error", error=3)], False, "float16"),
    ([_file("float16", "skipped")], False, "no passing")])
def test_verified_skips_unclaimed_source_dtypes_only(files, ok, says):
    from mxref.leaderboard.stacks import verified
    rep = {"schema": "mxref-verify/1", "status": "pass", "files": files}
    got, why = verified(rep, "mxfp4", "torchao_floor")
    assert got is ok and says in why, why
