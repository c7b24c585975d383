"""The ``scale_step`` relaxation (issue 28 item 5): typed, claimed, reported apart, never tolerant.

A backend that moves some E8M0 scales one step and re-encodes the elements consistently is a
mismatch (exit 1) without the claim and ``relaxed`` (exit 0, counted apart, status "relaxed")
with it. With the claim, stale codes, two steps, or a poisoned block given a scale are still
mismatches. Each of those checks of the judge is proven by planting its absence
(monkeypatching the judge) and watching the test's assertion flip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mxref import _kernels as K
from mxref.backends.numba_backend import NumbaBackend, _view
from mxref.formats import get_format
from mxref.golden.store import column_numpy, read_golden
from mxref.inputs import as_f32_bits
from mxref.profiles import get_profile
from mxref.verify import detect_profile, verify
from mxref.verify.checks import quantize as Q
from mxref.verify.compare import claimed_relaxations
from mxref.verify.report import junit_xml, text_report
from mxref.verify.run import merge_reports
from mxref.verify.select import default_golden_root

ROOT = default_golden_root()
FMTS = ["mxfp4", "mxint8"]
SEL = dict(levels=(0,), profiles=["ocp"], formats=FMTS, max_errors=0)
CLAIM = ("scale_step",)


# ---- planted backends ------------------------------------------------------------------------
class _Moved(NumbaBackend):
    """The reference with `move` applied to block scales; codes re-encoded at the new scale
    (with mxref's element encoder) unless `stale`."""

    profiles = ("ocp",)
    stale = False

    def move(self, s, amax):
        raise NotImplementedError

    def quantize_mx(self, src, *, src_dtype, fmt, profile, axis):
        scales, codes = super().quantize_mx(src, src_dtype=src_dtype, fmt=fmt, profile=profile,
                                            axis=axis)
        f = get_format(fmt)
        bs = f.block_size
        x, sd = _view(src, src_dtype)
        b = np.moveaxis(as_f32_bits(x, source_dtype=sd)[0], axis, -1).reshape(-1, src.shape[axis])
        n = b.shape[1]
        nb = -(-n // bs)
        blocks = np.zeros((b.shape[0], nb * bs), np.uint32)
        blocks[:, :n] = b
        blocks = blocks.reshape(-1, bs)
        amax = (blocks & np.uint32(0x7FFFFFFF)).max(axis=1)
        s_moved = np.moveaxis(scales, axis, -1).copy()
        s_ref = s_moved.reshape(-1).astype(np.int64)
        s_new = self.move(s_ref, amax)
        c_moved = np.moveaxis(codes, axis, -1).copy()
        rows = c_moved.reshape(-1, n)
        fp, pp = f.element.kernel_params(), get_profile(profile).kernel_params()
        out = np.empty(bs, np.uint8)
        for k in np.nonzero(s_new != s_ref)[0]:
            if not self.stale:
                K.encode_elements(np.ascontiguousarray(blocks[k]), int(s_new[k]) - 127, fp, pp, out)
                r, j = divmod(int(k), nb)
                hi = min(n, (j + 1) * bs)
                rows[r, j * bs:hi] = out[:hi - j * bs]
        s_moved.reshape(-1)[:] = s_new
        return (np.ascontiguousarray(np.moveaxis(s_moved, -1, axis)),
                np.ascontiguousarray(np.moveaxis(c_moved, -1, axis)))


def _some(s, amax, step):
    """Blocks of finite, non-zero amax with a scale from the amax (not clamped at 0), about
    every other one (a hash bit of the amax, so bf16/fp16 sources are picked too), whose moved
    scale stays a finite E8M0 byte."""
    pick = ((amax.astype(np.uint64) * np.uint64(2654435761)) >> np.uint64(20)) & np.uint64(1)
    return (s >= 1) & (s + step <= 254) & (amax != 0) & (amax < 0x7F800000) & (pick == 1)


class StepUp(_Moved):
    name, step = "planted-scale-step-up", 1

    def move(self, s, amax):
        return np.where(_some(s, amax, self.step), s + self.step, s)


class StepUpClaimed(StepUp):
    relaxations = CLAIM


class StaleCodesClaimed(StepUpClaimed):
    """Scale one step up, codes left as the reference encoded them at the golden scale."""
    stale = True


class TwoStepsClaimed(StepUpClaimed):
    step = 2


class PoisonStepClaimed(_Moved):
    """Poisoned blocks (0xFF) given scale 0xFE, one byte away, codes encoded at it."""
    relaxations = CLAIM

    def move(self, s, amax):
        return np.where(s == 0xFF, 0xFE, s)


class MistypedClaim(StepUp):
    relaxations = "scale_step"          # a string, not a tuple: claims nothing


# ---- the expected counts, from the golden files, not from the judge -----------------------------
def _affected(backend, op, src_dtypes=("bfloat16", "float16", "float32")):
    """Cases of the L0 ocp files of FMTS whose scales the backend moved off the golden."""
    n = 0
    for fmt, sd in ((f, d) for f in FMTS for d in src_dtypes):
        t = read_golden(ROOT / f"L0/{op}/{fmt}__ocp__{sd}.arrow")
        src = column_numpy(t, "src_bits")
        if op == "quantize_mx":
            nv = column_numpy(t, "n_valid")
            es = column_numpy(t, "exp_scale")
            for r in range(len(es)):
                s, _ = backend.quantize_mx(np.ascontiguousarray(src[r:r + 1, :nv[r]]),
                                           src_dtype=sd, fmt=fmt, profile="ocp", axis=1)
                n += int(s[0, 0] != es[r])
        else:
            moved = np.zeros(len(src), bool)
            for ax in (0, 1):
                s, _ = backend.quantize_mx(np.ascontiguousarray(src), src_dtype=sd, fmt=fmt,
                                           profile="ocp", axis=ax + 1)
                es = column_numpy(t, f"exp_scales_axis{ax}")
                moved |= (s != es).reshape(len(src), -1).any(axis=1)
            n += int(moved.sum())
    return n


OPS = ["quantize_mx", "quantize_mx_tensor"]


# ---- the consistency encoder is the profile's encoding (checked against the committed corpus) ----
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"])
def test_consistency_encoder_reproduces_the_golden_codes(fmt):
    """Read the golden backwards: its codes are the profile's encoding at its own scale, so a
    "golden" one step above with the real golden as the backend's output is relaxed on every
    finite block, and one flipped code makes that block inconsistent. Every profile, every
    source dtype of level 0."""
    checked = 0
    for path in sorted((ROOT / "L0/quantize_mx").glob(f"{fmt}__*.arrow")):
        _, prof, sd = path.stem.split("__")
        t = read_golden(path)
        src, nv = column_numpy(t, "src_bits"), column_numpy(t, "n_valid")
        es, ec = column_numpy(t, "exp_scale"), column_numpy(t, "exp_codes")
        gf = SimpleNamespace(fmt=fmt, profile=prof, src_dtype=sd)
        for r in np.nonzero(es < 0xFE)[0]:
            x, c = src[r:r + 1, :nv[r]], ec[r:r + 1, :nv[r]].copy()
            s = es[r:r + 1, None]
            assert Q._scale_step_blocks(StepUpClaimed(), gf, x, s + 1, s, c, 1).all(), (path, r)
            c[0, 0] ^= 1
            assert not Q._scale_step_blocks(StepUpClaimed(), gf, x, s + 1, s, c, 1).any()
            checked += 1
    assert checked > 100


def test_only_a_collection_of_known_names_is_a_claim():
    class Raising:
        @property
        def relaxations(self):
            raise RuntimeError("planted")
    assert claimed_relaxations(StepUpClaimed()) == {"scale_step"}
    assert claimed_relaxations(MistypedClaim()) == frozenset()          # a bare string
    assert claimed_relaxations(SimpleNamespace(relaxations=["scale_step", "bound"])) == \
        {"scale_step"}                                                   # unknown names dropped
    assert claimed_relaxations(Raising()) == claimed_relaxations(NumbaBackend()) == frozenset()


# ---- without the claim: a mismatch, as before ----------------------------------------------------
def test_without_the_claim_a_consistent_step_is_a_mismatch():
    for backend in (StepUp(), MistypedClaim()):
        rep = verify(backend, ops=OPS, **SEL)
        s = rep.doc["summary"]
        assert rep.exit_code == 1 and rep.doc["status"] == "fail"
        assert s["relaxed_cases"] == 0
        assert s["mismatched_cases"] == _affected(backend, "quantize_mx") + \
            _affected(backend, "quantize_mx_tensor") > 0
        assert rep.doc["backend"]["relaxations_claimed"] == []


# ---- with the claim: relaxed, exit 0, counted apart, in every rendering --------------------------
def test_with_the_claim_a_consistent_step_is_relaxed_and_exits_0(tmp_path):
    b = StepUpClaimed()
    rep = verify(b, ops=OPS, **SEL)
    doc, s = rep.doc, rep.doc["summary"]
    n_mx, n_t = _affected(b, "quantize_mx"), _affected(b, "quantize_mx_tensor")
    assert n_mx > 0 and n_t > 0
    assert rep.exit_code == 0 and doc["status"] == "relaxed", s
    assert s["relaxed_cases"] == n_mx + n_t and s["mismatched_cases"] == 0
    assert s["passed_cases"] == s["cases"] - s["relaxed_cases"]     # relaxed is not a pass
    assert s["by_check"]["bitexact"]["relaxed"] == n_mx + n_t
    assert s["by_check"]["bitexact"]["passed"] == s["passed_cases"]
    assert sum(c["relaxed"] for c in s["by_class"].values()) == n_mx + n_t
    assert doc["mismatches"] == [] and doc["backend"]["relaxations_claimed"] == ["scale_step"]
    per_op = {op: sum(f["relaxed"] for f in doc["files"] if f["op"] == op) for op in OPS}
    assert per_op == {"quantize_mx": n_mx, "quantize_mx_tensor": n_t}
    text = text_report(doc)
    what = "relaxed (scale one step off, codes consistent)"
    assert f"RELAXED ({n_mx} {what})" in text and f"RELAXED ({n_t} {what})" in text
    assert f"; {n_mx + n_t} {what}" in text.splitlines()[-1]
    suite = ET.fromstring(junit_xml(doc, rep.cases_by_test))
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    props = [int(p.get("value")) for p in suite.iter("property") if p.get("name") == "mxref.relaxed"]
    assert sum(props) == n_mx + n_t
    assert all("not bit-exact" in so.text for so in suite.iter("system-out"))


def test_detect_profile_never_calls_a_relaxed_profile_a_match():
    d = detect_profile(StepUpClaimed(), levels=(0,), ops=["quantize_mx"], formats=["mxfp4"],
                       src_dtypes=["float32"])
    ocp = next(r for r in d["profiles"] if r["profile"] == "ocp")
    assert ocp["relaxed"] > 0 and ocp["mismatched"] == 0 and not ocp["match"]
    assert "ocp" not in d["matches"]


def test_shards_merge_to_the_one_process_relaxed_report():
    """--jobs / --shard: relaxed_cases and the relaxed status survive merge_reports."""
    one = verify(StepUpClaimed(), ops=OPS, **SEL).doc
    docs = [verify(StepUpClaimed(), ops=OPS, shard=(k, 2), **SEL).doc for k in range(2)]
    merged = merge_reports(docs, max_errors=0, file_order=[f["path"] for f in one["files"]])
    assert merged["status"] == "relaxed" and merged["exit_code"] == 0
    assert merged["summary"] == one["summary"] and merged["files"] == one["files"]


# ---- with the claim, what the relaxation does not cover stays a mismatch -----------------------
@pytest.mark.parametrize("backend, why", [
    (StaleCodesClaimed, "the profile's encoding at the backend's scale"),
    (TwoStepsClaimed, "the scale is 2 steps off"),
    (PoisonStepClaimed, "a 0xFF (NaN) scale must match exactly"),
], ids=["stale-codes", "two-steps", "poisoned-block"])
def test_claim_never_covers_more_than_one_consistent_step(backend, why):
    b = backend()
    rep = verify(b, ops=["quantize_mx"], **SEL)
    s = rep.doc["summary"]
    n = _affected(b, "quantize_mx")
    assert n > 0
    assert rep.exit_code == 1 and rep.doc["status"] == "fail"
    assert s["relaxed_cases"] == 0 and s["mismatched_cases"] == n
    notes = [m["relaxation"] for m in rep.doc["mismatches"] if m["field"] == "scale"]
    assert len(notes) == n and all(x.startswith("scale_step claimed, but") and why in x
                                   for x in notes), notes
    assert "    scale_step claimed, but" in text_report(rep.doc)


def test_a_real_difference_outranks_a_relaxed_axis():
    """quantize_mx_tensor: axis 0 relaxed, axis 1 two steps off: the case is a mismatch."""
    class Mixed(StepUpClaimed):
        def quantize_mx(self, src, *, axis, **kw):
            self.step = 1 if axis == 1 else 2
            return super().quantize_mx(src, axis=axis, **kw)
    rep = verify(Mixed(), ops=["quantize_mx_tensor"], **SEL)
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and s["relaxed_cases"] == 0
    assert s["mismatched_cases"] == _affected(Mixed(), "quantize_mx_tensor") == len(FMTS) * 3
    assert {m["axis"] for m in rep.doc["mismatches"]} == {1}     # axis 0 was relaxed


def test_each_axis_of_a_tensor_case_gets_its_own_record():
    """Two axes, one row, the same field: two records (the second was the first's copy)."""
    rep = verify(StepUp(), ops=["quantize_mx_tensor"], **SEL)
    recs = [json.dumps(m, sort_keys=True) for m in rep.doc["mismatches"]]
    assert len(recs) > len(FMTS) * 3 and len(set(recs)) == len(recs)
    assert {m["axis"] for m in rep.doc["mismatches"] if m["field"] == "scale"} == {0, 1}


# ---- each check of the judge, planted away, lets its fault through -------------------------------
def _lax_step(es, s):
    return (es != s) & (es != 0xFF) & (s != 0xFF)


@pytest.mark.parametrize("backend, plant", [
    (StaleCodesClaimed, "no_consistency"),
    (TwoStepsClaimed, "any_step"),
    (PoisonStepClaimed, "poison_ok"),
])
def test_each_check_fails_when_its_rule_is_planted_away(backend, plant, monkeypatch):
    """The judge with one rule removed relaxes the fault the rule is there for: proof that the
    tests above fail without it (and that they are not passing for another reason)."""
    real = Q._scale_step_blocks

    def planted(bk, gf, src, es, s, c, axis):
        if plant == "no_consistency":        # every candidate block, codes unchecked
            return (np.abs(es.astype(int) - s.astype(int)) == 1) & (es != 0xFF) & (s != 0xFF)
        if plant == "any_step":               # consistency checked at any distance
            s1 = np.where(_lax_step(es, s), s.astype(int) - np.sign(s.astype(int) - es), es)
            return real(bk, gf, src, s1.astype(np.uint8), s, c, axis) & _lax_step(es, s)
        fake = np.where(es == 0xFF, s.astype(int) - 1, es).astype(np.uint8)  # 0xFF rule gone
        return real(bk, gf, src, fake, s, c, axis)
    monkeypatch.setattr(Q, "_scale_step_blocks", planted)
    rep = verify(backend(), ops=["quantize_mx"], **SEL)
    assert rep.exit_code == 0 and rep.doc["summary"]["relaxed_cases"] > 0


# ---- the CLI, isolated by default: the claim crosses to the judge -------------------------------
def test_cli_claim_reaches_the_judge_through_isolation():
    env = dict(os.environ, CI="true", PYTHONPATH=str(Path(__file__).parent) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, "-m", "mxref", "verify", "--level", "0", "--ops", "quantize_mx",
            "-f", ",".join(FMTS), "-p", "ocp", "--no-progress", "--json"]
    runs = {}
    for name in ("StepUp", "StepUpClaimed"):
        r = subprocess.run(args + ["-b", f"test_relaxation:{name}"], capture_output=True,
                           text=True, env=env, timeout=600)
        runs[name] = (r.returncode, json.loads(r.stdout))
    n = _affected(StepUp(), "quantize_mx")
    code, doc = runs["StepUp"]
    assert code == 1 and doc["summary"]["mismatched_cases"] == n
    code, doc = runs["StepUpClaimed"]
    assert code == 0 and doc["status"] == "relaxed" and doc["summary"]["relaxed_cases"] == n
    assert doc["backend"]["relaxations_claimed"] == ["scale_step"]


def test_pytest_plugin_warns_on_relaxed_cases():
    """Under the plugin a relaxed class passes (the backend claims it) but is never silent: an
    MXRelaxedWarning names it. Planted: without the warning the run would read as bit-exact."""
    env = dict(os.environ, CI="true", PYTHONPATH=str(Path(__file__).parent) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--pyargs", "mxref.conformance", "--mxref-backend=test_relaxation:"
                        "StepUpClaimed", "--mxref-level=0", "--mxref-ops=quantize_mx",
                        "--mxref-format=mxfp4", "--mxref-src-dtype=float32",
                        "--mxref-profile=ocp", "-W", "error::mxref.pytest_plugin.MXRelaxedWarning"],
                       capture_output=True, text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "MXRelaxedWarning" in out and "not bit-exact" in out, out[-3000:]


# ---- --no-relax: bit-exact or nothing, whatever the backend claims ----------------------------
def test_no_relax_turns_a_claimed_step_back_into_mismatches():
    b = StepUpClaimed()
    rep = verify(b, ops=OPS, no_relax=True, **SEL)
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and rep.doc["status"] == "fail"
    assert s["relaxed_cases"] == 0
    assert s["mismatched_cases"] == _affected(b, "quantize_mx") + \
        _affected(b, "quantize_mx_tensor") > 0
    assert rep.doc["backend"]["relaxations_claimed"] == []
    assert rep.doc["backend"]["relaxations_refused"] == ["scale_step"]


def test_cli_and_plugin_no_relax_fail_a_claimed_step():
    """verify --no-relax (through -j 2 shard workers, so the option crosses to them) and the
    plugin's --mxref-no-relax: the claimed step fails. Without the option both pass (above)."""
    env = dict(os.environ, CI="true", PYTHONPATH=str(Path(__file__).parent) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "mxref", "verify", "--level", "0", "--ops",
                        "quantize_mx", "-f", ",".join(FMTS), "-p", "ocp", "--no-progress",
                        "--json", "-j", "2", "--no-relax", "-b", "test_relaxation:StepUpClaimed"],
                       capture_output=True, text=True, env=env, timeout=600)
    doc = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr[-2000:]
    assert doc["summary"]["relaxed_cases"] == 0
    assert doc["summary"]["mismatched_cases"] == _affected(StepUp(), "quantize_mx") > 0
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--pyargs", "mxref.conformance", "--mxref-backend=test_relaxation:"
                        "StepUpClaimed", "--mxref-level=0", "--mxref-ops=quantize_mx",
                        "--mxref-format=mxfp4", "--mxref-src-dtype=float32",
                        "--mxref-profile=ocp", "--mxref-no-relax"],
                       capture_output=True, text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "failed" in out and "MXRelaxedWarning" not in out, out[-3000:]
