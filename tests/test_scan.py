"""mxref scan: layouts, anomaly checks, scale-rule fingerprint, exit codes (docs/scan.md).

Checkpoints are written into tmp dirs by real quantizers (torchao ``to_mx`` in every
ScaleCalculationMode, torchao ``nvfp4_quantize``, mxref profiles) and the safetensors library's
own writer; each anomaly is planted into an otherwise clean file whose clean twin exits 0.
"""
import json
import struct

import numpy as np
import pytest
from click.testing import CliRunner

import mxref
from mxref.cli.scan import scan_cmd
from mxref.profiles import PROFILES
from mxref.scan import fingerprint as F
from mxref.scan import rule_table, scan
from mxref.scan.io import ScanFileError

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")

# ---- hand-derived block-max sets (OCP MX v1.0 section 6.3 and the element tables) ----------
# E2M1 values 0, .5, 1, 1.5, 2, 3, 4, 6 (codes 0x0-0x7); emax 2. With amax = m * 2^e, m in [1, 2):
#   floor (6.3): X = 2^(e-2), amax/X in [4, 8): 4 -> 0x6, (4, 5] -> 4 (5 ties to even 4), (5, 8) -> 6
#   even: m >= 1.75 rounds to 2 first, X doubles: [3.5, 4) -> 4; so also {0x6, 0x7}
#   rceil: X = 2^ceil(log2(amax/6)): amax/X in (3, 6]: (3, 3.5) -> 3 (0x5), then 4, 6
#   ceil: X = 2^(ceil(log2 amax) - 2): amax/X in (2, 4]: (2, 2.5) -> 2 (0x4), 3, 4
#   round_down: X = 2^floor(log2(amax/6)): amax/X in [6, 12) saturates to 6
# E4M3 (emax 8, max 448 = 0x7E; spacing 16 in [128, 256), 32 in [256, 448]):
#   floor/even: [256, 512) -> 0x78 (256) .. 0x7E (448, saturating); even's [248, 256) -> 256
#   rceil: (224, 448] -> 0x76 (224, from (224, 232)) .. 0x7E
#   ceil: (128, 256] -> 0x70 (128) .. 0x78 (256)
#   round_down: [448, 896) -> 0x7E
HAND = {
    "mxfp4": {"floor": {6, 7}, "even": {6, 7}, "rceil": {5, 6, 7}, "ceil": {4, 5, 6},
              "round_down": {7}},
    "mxfp8_e4m3": {"floor": set(range(0x78, 0x7F)), "even": set(range(0x78, 0x7F)),
                   "rceil": set(range(0x76, 0x7F)), "ceil": set(range(0x70, 0x79)),
                   "round_down": {0x7E}},
}


@pytest.mark.parametrize("fmt", list(HAND))
def test_rule_sets_match_hand_derivation(fmt):
    profs = F.applicable_profiles(fmt)
    assert {p.scale_rule for p in profs} >= {"floor", "rceil"}
    for p in profs:
        assert set(rule_table(p, fmt)["support"]) == HAND[fmt][p.scale_rule], p.name


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp6_e3m2", "mxint8"])
def test_rule_sets_hold_in_other_binades(fmt):
    """The table is derived in [1, 2); blocks at the edges of the interior scale range
    (E8M0 bytes near 0x02 and 0xFD) and random significands leave maxima inside it."""
    rng = np.random.default_rng(1)
    el = mxref.FORMATS[fmt].element
    for p in F.applicable_profiles(fmt):
        sup = set(rule_table(p, fmt)["support"])
        lo, hi = -124 + el.emax, min(127, 124 + el.emax)  # scale bytes ~0x03 and ~0xFC
        e = np.concatenate([rng.integers(-100, 100, 2000), [lo] * 200, [hi] * 200])
        m = rng.integers(0, 2**23, e.size)
        bits = ((e + 127) << 23 | m).astype(np.uint32)
        x = np.zeros((e.size, 32), np.float32)
        x[:, 0] = bits.view(np.float32)
        q = mxref.quantize(x, fmt, p)
        assert F.interior_scale_mask(fmt)[q.scales[:, 0]].all()
        mags = set(F.magnitude_table(fmt)[q.codes[:, 0]].tolist())
        assert mags <= sup, (p.name, mags - sup)


def test_nvfp4_amax_rules_leave_six():
    for p in F.applicable_profiles("nvfp4"):
        assert rule_table(p, "nvfp4")["support"] == [7], p.name


# ---- checkpoint builders ---------------------------------------------------------------------
def weights(rows=64, cols=1024, seed=0):
    """Heavy-tailed (student-t, 3 dof) rows with per-row spread, as trained weights have."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=(rows, cols)) * np.exp(rng.normal(0, 1, (rows, 1)))
    return x.astype(np.float32)


def torchao_mx(x, mode, elem="fp4"):
    """(E8M0 scale bytes [rows, n/32], codes bytes) from torchao 0.18 to_mx."""
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    dt = torch.float4_e2m1fn_x2 if elem == "fp4" else torch.float8_e4m3fn
    s, d = to_mx(torch.from_numpy(x), dt, 32, getattr(ScaleCalculationMode, mode))
    return (s.view(torch.uint8).reshape(x.shape[0], -1),
            d.contiguous().view(torch.uint8).reshape(x.shape[0], -1))


def gptoss(path, scales, packed, extra=None):
    rows, nb = scales.shape
    d = {"model.layers.0.mlp.experts.down_proj.blocks": packed.reshape(rows, nb, 16),
         "model.layers.0.mlp.experts.down_proj.scales": scales,
         "model.norm.weight": torch.ones(8, dtype=torch.bfloat16)}
    d.update(extra or {})
    st.save_file({k: torch.as_tensor(v).contiguous() for k, v in d.items()}, str(path))
    return path


def nvfp4_torchao(path, x, pad=None, t2=None):
    """ModelOpt-style export of torchao nvfp4_quantize: weight (packed U8), weight_scale
    (F8_E4M3, optionally padded to `pad`), weight_scale_2 and input_scale (F32)."""
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        nvfp4_quantize,
        per_tensor_amax_to_scale,
    )
    xt = torch.from_numpy(x)
    t = per_tensor_amax_to_scale(xt.abs().max())
    s, d = nvfp4_quantize(xt, 16, t)
    s = s.reshape(x.shape[0], -1)
    if pad is not None:
        big = torch.zeros(pad, dtype=torch.uint8)
        big[:s.shape[0], :s.shape[1]] = s.view(torch.uint8)
        s = big.view(torch.float8_e4m3fn)
    st.save_file({"layer.weight": d.reshape(x.shape[0], -1).contiguous(), "layer.weight_scale": s,
                  "layer.weight_scale_2": (t if t2 is None else torch.tensor(t2)).reshape(1),
                  "layer.input_scale": torch.tensor([0.02])}, str(path))
    return path


def patch_header(path, fn):
    """Rewrite a safetensors header through fn(dict) (the data bytes are kept)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    fn(h)
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])


def run(*args):
    r = CliRunner().invoke(scan_cmd, [str(a) for a in args])
    return r.exit_code, r.output


def run_json(*args):
    code, out = run("--json", *args)
    return code, json.loads(out)


def kinds(doc):
    return {a["kind"] for t in doc["tensors"] for a in t["anomalies"]}


@pytest.fixture(scope="module")
def x():
    return weights()


# ---- fingerprints of real quantizers ---------------------------------------------------------
MODES = {"FLOOR": "torchao_floor", "RCEIL": "torchao_rceil", "CEIL": "torchao_ceil",
         "EVEN": "torchao_even"}


@pytest.mark.parametrize("mode", list(MODES))
def test_torchao_modes_fingerprint(tmp_path, x, mode):
    s, d = torchao_mx(x, mode)
    code, doc = run_json(gptoss(tmp_path / "m.safetensors", s, d))
    assert code == 0, doc["summary"]
    t, = doc["tensors"]
    assert (t["layout"], t["format"], t["shape"]) == ("gpt-oss", "mxfp4", [64, 1024])
    fp = t["fingerprint"]
    assert fp["verdict"] == "confident" and MODES[mode] in fp["call"], fp
    rule = PROFILES[MODES[mode]].scale_rule
    assert {PROFILES[p].scale_rule for p in fp["call"]} <= {rule, {"floor": "even", "even": "floor"}
                                                            .get(rule, rule)}
    code, _ = run("--against", MODES[mode], tmp_path / "m.safetensors")
    assert code == 0
    wrong = "torchao_ceil" if mode != "CEIL" else "torchao_floor"
    code, out = run("--against", wrong, tmp_path / "m.safetensors")
    assert code == 1 and "against_mismatch" in out


def test_few_blocks_are_ambiguous(tmp_path, x):
    """8 FLOOR blocks: RCEIL's extra maximum 0x5 (22% of amax significands) is absent with
    chance 0.78^8 = 0.14, too likely to rule RCEIL out: no call yet."""
    s, d = torchao_mx(x[:1, :256], "FLOOR")
    fp = scan([gptoss(tmp_path / "a.safetensors", s, d)])["tensors"][0]["fingerprint"]
    assert fp["blocks"] == 8 and fp["verdict"] == "ambiguous" and fp["confidence"] is None
    assert {"ocp", "rceil"} <= set(fp["call"])


def test_clamped_scales_are_not_evidence(tmp_path, x):
    """Rows of amax ~2^-135 get scale 0x00 and all-zero codes (a block max no rule leaves on
    an interior scale); they must not turn a FLOOR tensor into not_amax_rule."""
    y = x.copy()
    y[::2] *= np.float32(2.0**-135)
    s, d = torchao_mx(y, "FLOOR")
    doc = scan([gptoss(tmp_path / "t.safetensors", s, d)])
    t = doc["tensors"][0]
    assert t["scale_histogram"]["0x00"] > 0 and t["zero_blocks"] > 0
    assert t["fingerprint"]["verdict"] == "confident" and "torchao_floor" in t["fingerprint"]["call"]


def test_nvfp4_subnormal_block_scales_exclude_torchao(tmp_path, x):
    """Blocks 2^-10 below the rest get subnormal E4M3 scales under te_nvfp4; torchao
    clamps block scales to 2^-6, so it is excluded."""
    y = x.copy()
    y[::2] *= np.float32(2.0**-10)
    q = mxref.quantize(y, "nvfp4", "te_nvfp4")
    st.save_file({"l.weight": torch.from_numpy(q.packed()),
                  "l.weight_scale": torch.from_numpy(q.scales).view(torch.float8_e4m3fn),
                  "l.weight_scale_2": torch.tensor([float(q.tensor_scale)])},
                 str(tmp_path / "s.safetensors"))
    fp = scan([tmp_path / "s.safetensors"])["tensors"][0]["fingerprint"]
    st_ = {r["profile"]: r["status"] for r in fp["profiles"]}
    assert fp["subnormal_block_scales"] > 0
    assert st_["torchao_nvfp4"] == "excluded" and st_["te_nvfp4"] == "consistent"


def test_torchao_mxfp8_unpacked_layout(tmp_path, x):
    s, d = torchao_mx(x, "RCEIL", "fp8")
    p = tmp_path / "f8.safetensors"
    st.save_file({"w": d.view(torch.float8_e4m3fn), "w_scale": s.view(torch.float8_e8m0fnu)},
                 str(p))
    code, doc = run_json(p)
    t, = doc["tensors"]
    assert code == 0 and (t["layout"], t["format"]) == ("mx", "mxfp8_e4m3")
    assert t["fingerprint"]["verdict"] == "confident"
    assert "torchao_rceil" in t["fingerprint"]["call"]


def test_random_init_model_and_mxref_profiles(tmp_path):
    """A torch.nn random-init MLP's weights quantized by mxref under each mxfp4 profile: the
    call always contains the profile that made the data."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 256))
    w = {n: p.detach().numpy() for n, p in net.named_parameters() if p.ndim == 2}
    for prof in F.applicable_profiles("mxfp4"):
        d = {}
        for n, a in w.items():
            q = mxref.quantize(a, "mxfp4", prof)
            d[n + "_scale"] = torch.from_numpy(q.scales).view(torch.float8_e8m0fnu)
            d[n] = torch.from_numpy(q.packed())
        p = tmp_path / f"{prof.name}.safetensors"
        st.save_file(d, str(p))
        doc = scan([p])
        for t in doc["tensors"]:
            assert t["format"] == "mxfp4" and prof.name not in {
                r["profile"] for r in t["fingerprint"]["profiles"] if r["status"] == "excluded"}
        assert prof.name in doc["summary"]["consensus"]["mxfp4"]


def test_block_size_mismatch_is_not_an_amax_rule(tmp_path, x):
    """Scales taken over 64 elements but stored per 32 (the second half of each pair of blocks
    has a smaller amax than its scale assumes) leave maxima no amax rule leaves."""
    q = mxref.quantize(x, "mxfp4", "ocp", block_size=64)
    scales = np.repeat(q.scales, 2, axis=1)
    doc = scan([gptoss(tmp_path / "g.safetensors", torch.from_numpy(scales),
                       torch.from_numpy(q.packed()))])
    assert doc["tensors"][0]["fingerprint"]["verdict"] == "not_amax_rule"


def test_mse_search_picker_reads_as_floor(tmp_path, x):
    """Documented limit (docs/scan.md): a per-block MSE search between the floor and the
    next larger E8M0 scale takes the larger one only where floor saturates, so every block max
    stays 0x6/0x7 and the data is floor-consistent."""
    a, b = mxref.quantize(x, "mxfp4", "ocp"), mxref.quantize(x, "mxfp4", "torchao_ceil")
    err = [((m.dequantize() - x) ** 2).reshape(64, -1, 32).sum(-1) for m in (a, b)]
    pick = err[1] < err[0]
    assert pick.any()
    codes = np.where(np.repeat(pick, 32, axis=1), b.codes, a.codes)
    q = mxref.MXTensor(codes, np.where(pick, b.scales, a.scales), a.fmt, a.profile, 1, 32)
    doc = scan([gptoss(tmp_path / "g.safetensors", torch.from_numpy(q.scales),
                       torch.from_numpy(q.packed()))])
    fp = doc["tensors"][0]["fingerprint"]
    assert fp["verdict"] == "confident" and "ocp" in fp["call"]


def test_nvfp4_torchao_and_four_over_six(tmp_path, x):
    code, doc = run_json(nvfp4_torchao(tmp_path / "n.safetensors", x))
    t, = doc["tensors"]
    assert code == 0 and (t["layout"], t["format"]) == ("nvfp4", "nvfp4"), doc
    fp = t["fingerprint"]
    assert fp["verdict"] == "confident" and "torchao_nvfp4" in fp["call"]
    assert fp["tensor_scale_from_amax"] and t["input_scale"]["values"] == [pytest.approx(0.02)]
    from mxref.corrections import quantize_nvfp4_4over6
    q = quantize_nvfp4_4over6(x, "te_nvfp4")
    st.save_file({"l.weight": torch.from_numpy(q.packed()),
                  "l.weight_scale": torch.from_numpy(q.scales).view(torch.float8_e4m3fn),
                  "l.weight_scale_2": torch.tensor([float(q.tensor_scale)])},
                 str(tmp_path / "46.safetensors"))
    doc = scan([tmp_path / "46.safetensors"])
    assert doc["tensors"][0]["fingerprint"]["verdict"] == "not_amax_rule"


# ---- planted anomalies: each with its clean twin -----------------------------------------------
@pytest.fixture(scope="module")
def floor_mx(x):
    return torchao_mx(x, "FLOOR")


def test_clean_file_exits_zero_with_no_anomalies(tmp_path, floor_mx):
    code, doc = run_json(gptoss(tmp_path / "c.safetensors", *floor_mx))
    assert code == 0 and not kinds(doc) and doc["schema"] == "mxref-scan/1"
    assert doc["unquantized"] == ["c.safetensors:model.norm.weight"]


def test_nan_scale_byte(tmp_path, floor_mx):
    s = floor_mx[0].clone()
    s[3, 5] = 0xFF
    code, doc = run_json(gptoss(tmp_path / "n.safetensors", s, floor_mx[1]))
    assert code == 1 and kinds(doc) == {"invalid_scale_bytes"}


def test_nvfp4_nan_negative_scales_and_bad_tensor_scales(tmp_path, x):
    p = nvfp4_torchao(tmp_path / "n.safetensors", x, t2=float("nan"))
    code, doc = run_json(p)
    assert code == 1 and kinds(doc) == {"invalid_tensor_scale"}
    p = nvfp4_torchao(tmp_path / "m.safetensors", x)
    raw = bytearray(p.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    b = 8 + n + h["layer.weight_scale"]["data_offsets"][0]
    raw[b], raw[b + 1] = 0x7F, 0xB0             # NaN, and -0.5 (sign bit set)
    i = 8 + n + h["layer.input_scale"]["data_offsets"][0]
    raw[i:i + 4] = struct.pack("<f", -1.0)
    p.write_bytes(bytes(raw))
    code, doc = run_json(p)
    assert code == 1 and kinds(doc) == {"invalid_scale_bytes", "negative_scales",
                                        "invalid_input_scale"}


def test_padding_clean_and_dirty(tmp_path, x):
    code, doc = run_json(nvfp4_torchao(tmp_path / "c.safetensors", x, pad=(128, 64)))
    t, = doc["tensors"]
    assert code == 0 and t["padding"] == {"stored": [128, 64], "used": [64, 64],
                                          "bytes": 64 * 64, "nonzero": 0}
    p = nvfp4_torchao(tmp_path / "d.safetensors", x, pad=(128, 64))
    raw = bytearray(p.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    off = 8 + n + h["layer.weight_scale"]["data_offsets"][0]
    raw[off + 100 * 64 + 7] = 0x38              # garbage in a padded row
    p.write_bytes(bytes(raw))
    code, doc = run_json(p)
    assert code == 1 and kinds(doc) == {"dirty_padding"}
    assert doc["tensors"][0]["padding"]["nonzero"] == 1


def test_mislabelled_scale_dtype(tmp_path, floor_mx):
    s, d = floor_mx
    p = tmp_path / "m.safetensors"
    st.save_file({"w": d.contiguous(), "w_scale": s.view(torch.float8_e4m3fn)}, str(p))
    code, doc = run_json(p)
    t, = doc["tensors"]
    assert code == 1 and kinds(doc) == {"scale_dtype_mislabelled"} and t["format"] == "mxfp4"
    st.save_file({"w": d.contiguous(), "w_scale": s.view(torch.float8_e8m0fnu)}, str(p))
    assert run(p)[0] == 0


def test_invalid_unpacked_codes_and_declared_layout(tmp_path, x):
    q = mxref.quantize(x, "mxfp4", "ocp")
    codes = q.codes.copy()
    p = tmp_path / "u.safetensors"
    st.save_file({"w": torch.from_numpy(codes), "w_scale": torch.from_numpy(q.scales)}, str(p))
    code, out = run(p)
    assert code == 2 and "w (U8 [64, 1024])" in out and "--layout" in out
    assert run("--layout", "mx", "--format", "mxfp4", p)[0] == 0
    codes[1, 2] = 0x13
    st.save_file({"w": torch.from_numpy(codes), "w_scale": torch.from_numpy(q.scales)}, str(p))
    code, doc = run_json("--layout", "mx", "--format", "mxfp4", p)
    assert code == 1 and kinds(doc) == {"invalid_codes"}


def test_all_zero_and_constant_scales(tmp_path, floor_mx):
    s, d = floor_mx
    code, doc = run_json(gptoss(tmp_path / "z.safetensors", torch.zeros_like(s), d))
    assert code == 1 and kinds(doc) == {"all_zero_scales"}
    code, doc = run_json(gptoss(tmp_path / "k.safetensors", torch.full_like(s, 0x7F), d))
    assert code == 1 and kinds(doc) == {"constant_scales"}


# ---- corrupt files: exit 3, the tensor named, nothing written ---------------------------------
CORRUPT = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-100]), "truncated"),
    "size_lie": (lambda p: patch_header(p, lambda h: h["model.layers.0.mlp.experts.down_proj"
                                                      ".scales"].update(shape=[64, 33])),
                 "offsets span"),
    "dtype_lie": (lambda p: patch_header(p, lambda h: h["model.layers.0.mlp.experts.down_proj"
                                                        ".scales"].update(dtype="F32")), "offsets span"),
    "offset_past_end": (lambda p: patch_header(p, lambda h: h["model.norm.weight"].update(
        data_offsets=[10**9, 10**9 + 16])), "truncated"),
    "shape_mismatch": (lambda p: patch_header(p, lambda h: (
        h["model.layers.0.mlp.experts.down_proj.scales"].update(shape=[32, 64]))),
        "cannot hold"),
    "unknown_dtype": (lambda p: patch_header(p, lambda h: h["model.norm.weight"].update(
        dtype="Q4")), "unknown dtype"),
    "overlap": (lambda p: patch_header(p, lambda h: h["model.norm.weight"].update(
        data_offsets=[h["model.layers.0.mlp.experts.down_proj.scales"]["data_offsets"][0],
                      h["model.layers.0.mlp.experts.down_proj.scales"]["data_offsets"][0] + 16])),
        "overlap"),
    "header_len": (lambda p: p.write_bytes(struct.pack("<Q", 10**12) + p.read_bytes()[8:]),
                   "header length"),
}


@pytest.mark.parametrize("fault", list(CORRUPT))
def test_corrupt_files_exit_3(tmp_path, floor_mx, fault):
    p = gptoss(tmp_path / "c.safetensors", *floor_mx)
    plant, word = CORRUPT[fault]
    plant(p)
    plot = tmp_path / "out" / "p.png"
    code, out = run("--plot", plot, p)
    assert code == 3 and word in out and "c.safetensors" in out, out
    assert "Traceback" not in out and not plot.parent.exists()
    with pytest.raises(ScanFileError):
        scan([p])


# ---- CLI surface ------------------------------------------------------------------------------
def test_index_directory_json_and_plot(tmp_path, floor_mx, x):
    gptoss(tmp_path / "a.safetensors", *floor_mx)
    nvfp4_torchao(tmp_path / "b.safetensors", x)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}))
    plot = tmp_path / "figs" / "scan.png"
    code, doc = run_json("--plot", plot, tmp_path)
    assert code == 0 and len(doc["files"]) == 2 and len(doc["tensors"]) == 2
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out = run(tmp_path)
    assert code == 0 and "confident" in out and "nvfp4 (nvfp4)" in out


@pytest.mark.parametrize("args, word", [
    (["--against", "nope"], "unknown profile"),
    (["--format", "mxfp9"], "unknown format"),
    (["--layout", "awq"], "Invalid value"),
])
def test_usage_errors_exit_2(tmp_path, floor_mx, args, word):
    p = gptoss(tmp_path / "c.safetensors", *floor_mx)
    code, out = run(*args, p)
    assert code == 2 and word in out


def test_missing_file_is_exit_3(tmp_path):
    code, out = run(tmp_path / "nope.safetensors")
    assert code == 3 and "no such file" in out
