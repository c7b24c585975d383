"""The static leaderboard site (mxref.leaderboard.build) on records made with make_record: the
Markdown, CSV and HTML carry the right numbers, record text is escaped, the plots are real PNGs,
and the page renders and sorts in headless Chromium (required where CI=true)."""
import csv
import hashlib
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from mxref.leaderboard.build import CSV_FIELDS, build_site
from mxref.leaderboard.record import make_record, run_env
from mxref.leaderboard.schema import SUITES, schema_problems

H100 = {"name": "NVIDIA H100 80GB HBM3", "runtime": "CUDA 12.8", "driver": "570.1",
        "clocks": None, "sms": 132, "memory_gib": 79.1}
H100_SLUG = "nvidia-h100-80gb-hbm3"
XSS = "gemm mxfp8 <script>alert(1)</script>"
MEDIAN_COL = 4  # machine, entry, impl, op/format/profile, median, ...


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _verify(status="pass", cases=1000, kind="mxref-verify", backend="triton"):
    return {"kind": kind, "report": f"reports/{status}-{cases}.json", "sha256": _sha(f"{cases}"),
            "status": status, "backend": backend, "cases": cases}


def _kernel(env, entry, group, repeats, *, suite="gpu-kernels", rate=None, rate_unit=None,
            roofline=None, peers=(), unit="ms", impl="triton fast"):
    metric = {"name": "time", "unit": unit, "lower_is_better": True, "repeats": repeats}
    if rate is not None:
        metric.update(rate=rate, rate_unit=rate_unit)
    return make_record(suite=suite, entry=entry, group=group, impl=impl, op=group,
                       fmt="mxfp4", profile="ocp", params={"size": 8192}, metric=metric,
                       command=["python", "bench/gpu_kernels.py"], verify=_verify(),
                       roofline=roofline, peers=peers, env=env)


def _curve(start, slope, n=20):
    return [[1000 * (i + 1), start - slope * i] for i in range(n)]


def _training(env, recipe, repeats, quality, ratio):
    return make_record(
        suite="training", entry=f"llama-tiny {recipe}", group="train", impl="mxkernels MXLinear",
        op="mxlinear", fmt="mxfp4", profile="ocp",
        params={"recipe": recipe, "model": "llama-tiny", "tokens": 1_048_576},
        metric={"name": "step_time", "unit": "s", "lower_is_better": True, "repeats": repeats,
                "rate": 2.5e6, "rate_unit": "tokens/s"},
        roofline={"name": "bf16 step", "median": 0.3, "unit": "s", "ratio": ratio,
                  "ratio_label": "x bf16 speed"},
        quality=quality, command=["mxref", "train"],
        verify=_verify(cases=4, kind="in-run-validation", backend="torch"), env=env)


@pytest.fixture(scope="module")
def records():
    cpu_env, gpu_env = run_env(), run_env(H100)
    copy = {"name": "device copy bf16", "median": 1.0, "unit": "ms"}
    recs = {
        "cpu": _kernel(cpu_env, "quantize mxfp4 numba", "quantize", [0.0121, 0.0125, 0.0123],
                       suite="cpu-emulator", unit="s", impl="mxref numba", rate=1397.0,
                       rate_unit="M elem/s",
                       roofline={"name": "numpy copy", "median": 0.004, "unit": "s",
                                 "ratio": 0.33, "ratio_label": "of copy"}),
        # medians 2.5 ms, 12 ms and 12.3 us: their numeric order is not their string order
        "gpu_fast": _kernel(gpu_env, "quantize mxfp4 triton", "quantize", [2.4, 2.5, 2.6],
                            rate=1800.0, rate_unit="GB/s",
                            roofline={**copy, "ratio": 0.58, "ratio_label": "of copy"},
                            peers=[{"name": "torch-eager emulation", "median": 9.0,
                                    "unit": "ms", "ratio": 0.12, "ratio_label": "of copy"},
                                   {"name": "numpy", "median": 90.0, "unit": "ms",
                                    "ratio": 0.012, "ratio_label": "of copy"}]),
        "gpu_xss": _kernel(gpu_env, XSS, "gemm", [11.5, 12.0, 12.5], rate=950.0,
                           rate_unit="TFLOP/s",
                           roofline={"name": "cuBLAS BF16", "median": 14.0, "unit": "ms",
                                     "ratio": 1.23, "ratio_label": "x cuBLAS BF16"}),
        "gpu_small": _kernel(gpu_env, "dequantize mxfp8 small", "dequantize", [0.0123] * 3),
        "train_a": _training(gpu_env, "mxfp4-fdw", [0.41, 0.42, 0.43], {
            "dl_vs_bf16": 0.0123, "final_loss": 3.2101, "quant_share": 0.23,
            "peak_mem_gib": 12.3, "loss_curve": _curve(5.0, 0.09),
            "baseline_curve": _curve(4.95, 0.09)}, 0.72),
        "train_b": _training(gpu_env, "mxfp8-f", [0.35, 0.36, 0.36], {
            "dl_vs_bf16": -0.002, "final_loss": 3.1801, "loss_curve": _curve(4.97, 0.09),
            "baseline_curve": _curve(4.95, 0.09)}, 0.85),
    }
    for r in recs.values():
        assert schema_problems(r) == []
    return recs


@pytest.fixture(scope="module")
def site(records, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    rejected = [("records/bad.json", "verify report sha256 does not match <b>")]
    return build_site(list(records.values()), out, rejected=rejected)


def _md_row(md, entry):
    rows = [line for line in md.splitlines() if line.startswith("| ") and f" {entry} |" in line]
    assert len(rows) == 1, (entry, rows)
    return [c.strip() for c in rows[0].strip("|").split(" | ")]


def test_markdown_tables(site, records):
    md = site["markdown"].read_text()
    assert site["records"] == 6
    assert "6 records, built " in md and "Only verified records are shown" in md
    assert "1 record turned away: see Rejected records." in md
    for suite in ("cpu-emulator", "gpu-kernels", "training"):
        assert f"(`{suite}`)" in md
    assert f"- `{H100_SLUG}`: NVIDIA H100 80GB HBM3, CUDA 12.8, driver 570.1" in md
    cpu_machine = records["cpu"]["machine"]
    assert f"- `{cpu_machine['slug']}`: {cpu_machine['cpu']}, {cpu_machine['cores']} cores" in md

    fast = _md_row(md, "quantize mxfp4 triton")
    git = records["gpu_fast"]["git"]
    commit = git["commit"][:7] + ("-dirty" if git["dirty"] else "")
    assert fast[3:] == ["quantize / mxfp4 / ocp", "2.500 ms", "8.0%", "1,800 GB/s",
                        "0.58 of copy", "torch-eager emulation (0.12 of copy)",
                        "pass · 1,000 cases · " + _sha("1000")[:8], commit]
    small = _md_row(md, "dequantize mxfp8 small")
    assert small[4:9] == ["12.30 us", "0.0%", "–", "–", "–"]
    cpu = _md_row(md, "quantize mxfp4 numba")
    assert cpu[4:8] == ["12.30 ms", "3.3%", "1,397 M elem/s", "0.33 of copy"]
    xss = _md_row(md, "gemm mxfp8 &lt;script>alert(1)&lt;/script>")
    assert xss[7] == "1.23 x cuBLAS BF16"

    a = _md_row(md, "llama-tiny mxfp4-fdw")
    assert a[2:13] == ["mxfp4-fdw", "llama-tiny", "1.05M", "420.0 ms, range 4.8%", "2,500,000 tokens/s",
                       "0.72 x bf16 speed", "+0.0123", "3.2101", "23.0%", "12.3 GiB",
                       "pass (4 checks)"]
    b = _md_row(md, "llama-tiny mxfp8-f")
    assert b[8:12] == ["-0.0020", "3.1801", "–", "–"]

    assert "## Rejected records" in md and "records/bad.json" in md
    assert md.index("(`cpu-emulator`)") < md.index("(`gpu-kernels`)") < md.index("(`training`)")


def test_the_spread_is_named_a_range_not_a_plus_minus(site):
    """Issue 27: a full range (max - min) / median was shown as '±x%' (up to ±3121.9%)."""
    for kind in ("markdown", "html", "csv"):
        text = site[kind].read_text()
        assert "±" not in text, kind
    assert "range (max-min)/median" in site["markdown"].read_text()
    assert "range (max-min)/median" in site["html"].read_text()
    with open(site["csv"], newline="") as f:
        assert "range_over_median" in next(csv.reader(f))


def test_csv_one_row_per_record(site, records):
    with open(site["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == CSV_FIELDS
    assert len(rows) == len(records)
    by_sha = {r["record_sha256"]: r for r in rows}
    for rec in records.values():
        row = by_sha[rec["record_sha256"]]
        assert float(row["median"]) == rec["metric"]["median"]
        assert float(row["range_over_median"]) == rec["metric"]["spread"]
        assert row["entry"] == rec["entry"] and row["suite"] == rec["suite"]
        assert row["machine"] == rec["machine"]["slug"]
    fast = by_sha[records["gpu_fast"]["record_sha256"]]
    assert (fast["accelerator"], fast["unit"], fast["roofline_ratio"], fast["ratio_label"]) == \
        ("NVIDIA H100 80GB HBM3", "ms", "0.58", "of copy")
    small = by_sha[records["gpu_small"]["record_sha256"]]
    assert small["rate"] == "" and small["roofline_ratio"] == ""
    assert [r["suite"] for r in rows] == ["cpu-emulator"] + ["gpu-kernels"] * 3 + ["training"] * 2


def test_html_escapes_and_is_self_contained(site):
    page = site["html"].read_text()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;" in page  # the rejected reason is escaped too
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    for suite in ("cpu-emulator", "gpu-kernels", "training"):
        assert f'<table class="lb" id="table-{suite}">' in page
    assert f'<img src="roofline_{H100_SLUG}.png" alt="' in page
    assert f'<img src="loss_{H100_SLUG}.png" alt="' in page
    assert 'data-sort="0.0025"' in page  # the raw median, in seconds


def test_plots_are_pngs(site, records):
    cpu_slug = records["cpu"]["machine"]["slug"]
    names = sorted(p.name for p in site["plots"])
    assert names == sorted([f"roofline_{cpu_slug}.png", f"roofline_{H100_SLUG}.png",
                            f"loss_{H100_SLUG}.png"])
    for p in site["plots"]:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, p


def test_empty_build_and_deterministic_output(records, tmp_path):
    res = build_site([], tmp_path / "empty")
    assert res["plots"] == [] and res["records"] == 0
    assert "No verified records." in res["markdown"].read_text()
    assert "Rejected records" not in res["markdown"].read_text()
    assert "<table" not in res["html"].read_text()
    recs = list(records.values())
    one = build_site(recs, tmp_path / "one")
    two = build_site(recs[::-1], tmp_path / "two")

    def strip(path):
        return [line for line in path.read_text().splitlines() if " built " not in line]

    for key in ("markdown", "html", "csv"):
        assert strip(one[key]) == strip(two[key]), key


# ---- headless Chromium ------------------------------------------------------------------------
def _chromium():
    """The Chromium binary; skipped locally without one, a failure where CI=true."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    msg = ("Chromium is not on PATH; the leaderboard page test needs it. Install it with "
           "`apt-get install -y chromium` (Debian/Ubuntu; scripts/setup.sh does this when run as "
           "root) or put a `chromium` binary on PATH.")
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def _run_chromium(tmp_path, url, *args):
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=2000",
           *args, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


class _Tables(HTMLParser):
    """Body rows (cell texts), header aria-sort values and body attributes of a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.rows, self.sorts, self.body = {}, {}, {}
        self._table = self._cell = None
        self._in_body = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "table" and a.get("id"):
            self._table = a["id"]
            self.rows[self._table], self.sorts[self._table] = [], []
        elif self._table and tag == "tbody":
            self._in_body = True
        elif self._table and tag == "th":
            self.sorts[self._table].append(a.get("aria-sort"))
        elif self._in_body and tag == "tr":
            self.rows[self._table].append([])
        elif self._in_body and tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _dom(tmp_path, url):
    p = _Tables()
    p.feed(_run_chromium(tmp_path, url, "--dump-dom"))
    return p


def _entries(dom, table="table-gpu-kernels"):
    return [row[1] for row in dom.rows[table]]


def test_chromium_screenshot(site, tmp_path):
    shot = tmp_path / "shot.png"
    _run_chromium(tmp_path, site["html"].as_uri(), f"--screenshot={shot}",
                  "--window-size=1400,2000")
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(shot)
    assert img.shape[:2] == (2000, 1400)
    assert float(np.std(img[..., :3])) > 0.01  # text and tables, not one flat colour


def test_chromium_renders_tables(site, tmp_path):
    dom = _dom(tmp_path, site["html"].as_uri())
    assert len(dom.rows["table-gpu-kernels"]) == 3
    assert len(dom.rows["table-cpu-emulator"]) == 1
    assert len(dom.rows["table-training"]) == 2
    # the build order: suite, machine, group, entry
    assert _entries(dom) == ["dequantize mxfp8 small", XSS, "quantize mxfp4 triton"]
    assert XSS in _entries(dom)  # escaped text comes back as text, never as a script element


@pytest.mark.parametrize("direction, expected", [
    ("asc", ["dequantize mxfp8 small", "quantize mxfp4 triton", XSS]),
    ("desc", [XSS, "quantize mxfp4 triton", "dequantize mxfp8 small"]),
])
def test_chromium_sorts_numerically_from_hash(site, tmp_path, direction, expected):
    url = f"{site['html'].as_uri()}#sort=table-gpu-kernels:{MEDIAN_COL}:{direction}"
    dom = _dom(tmp_path, url)
    assert _entries(dom) == expected
    sorts = dom.sorts["table-gpu-kernels"]
    assert sorts[MEDIAN_COL] == ("ascending" if direction == "asc" else "descending")
    assert set(sorts[:MEDIAN_COL] + sorts[MEDIAN_COL + 1:]) == {"none"}


def test_chromium_header_click_sorts_and_reverses(site, records, tmp_path):
    """A copy of the page that clicks the median header twice and notes the order each time."""
    probe = """<script>
document.addEventListener("DOMContentLoaded", function () {
  var t = document.getElementById("table-gpu-kernels"), th = t.tHead.rows[0].cells[%d];
  function order() {
    return Array.prototype.map.call(t.tBodies[0].rows, function (r) {
      return r.getAttribute("data-record"); }).join(",") + "/" + th.getAttribute("aria-sort");
  }
  th.click(); document.body.setAttribute("data-first", order());
  th.click(); document.body.setAttribute("data-second", order());
});
</script></body>""".replace("%d", str(MEDIAN_COL))
    page = site["html"].read_text().replace("</body>", probe)
    test_page = site["html"].parent / "click_probe.html"
    test_page.write_text(page)
    dom = _dom(tmp_path, test_page.as_uri())
    ascending = [records[k]["record_sha256"][:12] for k in ("gpu_small", "gpu_fast", "gpu_xss")]
    assert dom.body["data-first"] == ",".join(ascending) + "/ascending"
    assert dom.body["data-second"] == ",".join(ascending[::-1]) + "/descending"
    assert _entries(dom) == [XSS, "quantize mxfp4 triton", "dequantize mxfp8 small"]


def test_committed_store_renders_in_chromium(tmp_path):
    """The acceptance page: the committed store, re-checked record by record, built and rendered:
    the CPU emulator, every Triton kernel on the H100, and the training recipes are all there."""
    from mxref.leaderboard.submit import check_record, record_files

    store = Path(__file__).resolve().parents[1] / "bench/results/leaderboard"
    verdicts = [check_record(p, current_golden=False, allow_dirty=True)
                for p in record_files([store])]
    assert verdicts and all(v.ok for v in verdicts), [v.problems for v in verdicts if not v.ok]
    recs = [v.record for v in verdicts]
    site = build_site(recs, tmp_path / "site")
    shot = tmp_path / "page.png"
    _run_chromium(tmp_path, site["html"].as_uri(), f"--screenshot={shot}",
                  "--window-size=1400,2000")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = _dom(tmp_path, site["html"].as_uri())
    # the suites the committed store has always had (stack records come from a device run)
    by_suite = {s: sum(r["suite"] == s for r in recs) for s in SUITES if s != "stacks"}
    for suite, n in by_suite.items():
        assert n > 0 and len(dom.rows[f"table-{suite}"]) == n, suite
    h100 = [r for r in dom.rows["table-gpu-kernels"] if r[0] == "nvidia-h100-80gb-hbm3"]
    groups = {r["group"] for r in recs if r["suite"] == "gpu-kernels"}
    assert len(h100) == by_suite["gpu-kernels"] and groups >= {
        "quantize", "dual", "dequantize", "sr", "rotate", "convert", "gemm"}
    recipes = {r["params"]["recipe"] for r in recs if r["suite"] == "training"}
    assert {"mxfp4-fdw", "nvfp4-te"} <= recipes
