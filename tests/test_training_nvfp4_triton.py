"""nvfp4-te on the triton backend: NVFP4 stochastic rounding through
``torch.ops.mxkernels.quantize_nvfp4_sr`` (the seeded in-kernel Philox stream) and the Wgrad
16-point Hadamard through ``triton_rotate.rotate`` (``quantize_rotated``, fused, for the RNE
operand x^T), run by the Triton interpreter on CPU.

Expected values come from mxref (Numba: mxref.quantize with the same seed or with the words of
mxref.random_bits, mxref.rotate), never from mxkernels.training; the in-run validation must pass
on the real path and fail on planted bugs (a stream one word off, a wrong seed, a wrong sign).
"""
import numpy as np
import pytest
import torch

import mxref
from mxkernels import torch_emu
from mxkernels.training import MXLinear, OperandSpec, capture_next, check_capture
from mxkernels.training import quant as Q
from mxkernels.training.mxlinear import _resolve_backend
from mxref.quantize import random_bits
from mxref.rotate import sign_vector

NV_SR = OperandSpec(fmt="nvfp4", profile="te_nvfp4", rounding="sr")
SR_PROFILE = mxref.get_profile("te_nvfp4").replace(name="te_nvfp4+sr", rounding="stochastic")


def _data(shape, seed):
    """Normal values over a wide exponent range, exact zeros and one negative zero."""
    g = np.random.default_rng(seed)
    x = (g.standard_normal(shape) * np.exp2(g.integers(-12, 6, shape))).astype(np.float32)
    x[0, :5] = 0.0
    x[0, 5] = -0.0
    x[1, :16] = 0.0                                  # an all-zero block
    return x


def _u8(t):
    return np.asarray(t.cpu().numpy(), dtype=np.uint8)


@pytest.fixture(scope="module", autouse=True)
def _ops():
    _resolve_backend("triton", torch.device("cpu"))      # registers torch.ops.mxkernels.*


# ---- (b) the quantizer: same codes / scales as mxref for the same words -----------------------

def _assert_operand_is(q, ref):
    """A QOperand equals mxref's NVFP4 result bit for bit: codes, scales, tensor scale, and the
    GEMM values (e2m1 x e4m3, the tensor scale left for the epilogue)."""
    assert np.array_equal(_u8(q.codes), ref.codes)
    assert np.array_equal(_u8(q.scales), ref.scales)
    assert np.float32(q.tensor_scale).view(np.uint32) == \
        np.float32(ref.tensor_scale).view(np.uint32)
    unit = mxref.dequantize(codes=ref.codes, scales=ref.scales, fmt="nvfp4", axis=-1,
                            tensor_scale=np.float32(1.0)).astype(np.float32)
    assert np.array_equal(q.values.numpy().view(np.uint32), unit.view(np.uint32))

@pytest.mark.parametrize("shape,seed", [((8, 64), 12345), ((5, 40), 2**62 + 977)])
def test_triton_nvfp4_sr_operand_equals_mxref_for_the_same_words(shape, seed):
    """quantize_operand(backend='triton') on an SR NVFP4 spec against mxref.quantize with the
    explicit words mxref.random_bits(shape, seed, 0) and with the seed: codes, scales, tensor
    scale byte for byte (a ragged row of 40 included; a 63-bit seed, both key halves used)."""
    x = _data(shape, 7)
    words = random_bits(shape, seed, 0)
    ref_w = mxref.quantize(x, "nvfp4", SR_PROFILE, axis=-1, rbits=words)
    ref_s = mxref.quantize(x, "nvfp4", SR_PROFILE, axis=-1, seed=seed)
    assert np.array_equal(ref_w.codes, ref_s.codes)          # the stream is the words
    q = Q.quantize_operand(torch.from_numpy(x), NV_SR, "triton", sr_seed=seed)
    _assert_operand_is(q, ref_w)


def test_sr_actually_uses_the_words():
    """The same input under another seed rounds differently (so the tests above would see a
    stream from the wrong seed), while RNE ignores the seed."""
    x = _data((8, 64), 3)
    a = Q.quantize_operand(torch.from_numpy(x), NV_SR, "triton", sr_seed=1)
    b = Q.quantize_operand(torch.from_numpy(x), NV_SR, "triton", sr_seed=2)
    assert not torch.equal(a.codes, b.codes)
    assert torch.equal(a.scales, b.scales)        # block scales do not depend on the rounding
    rne = mxref.quantize(x, "nvfp4", "te_nvfp4", axis=-1)
    assert int((_u8(a.codes) != rne.codes).sum()) > 0


def test_triton_and_torch_backends_agree_on_sr_nvfp4():
    """The torch backend (torch_emu with host words from sr_bits) and the triton backend
    (in-kernel Philox) give the same bytes for the same seed."""
    x = torch.from_numpy(_data((6, 48), 11))
    a = Q.quantize_operand(x, NV_SR, "triton", sr_seed=99)
    b = Q.quantize_operand(x, NV_SR, "torch", sr_seed=99)
    assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)
    assert torch.equal(a.tensor_scale.view(torch.int32), b.tensor_scale.view(torch.int32))
    assert torch.equal(a.values.view(torch.int32), b.values.view(torch.int32))


def test_triton_rotation_equals_mxref_rotate():
    """rotate(backend='triton') against mxref.rotate (butterfly), fp32 bits, with TE's
    16-entry sign vector and a random one; subnormal and signed-zero inputs included."""
    x = _data((6, 64), 5)
    x[2, :16] = np.array([1e-45, -1e-45, 3e-39, -2e-40] * 4, np.float32)
    for signs in (sign_vector("te16", 16), sign_vector("random", 32, seed=4, step=9,
                                                         tensor_id=3)):
        n = signs.shape[0]
        want = mxref.rotate(x, n, axis=-1, signs=signs)
        got = Q.rotate(torch.from_numpy(x), n, signs, backend="triton")
        assert got.dtype == torch.float32
        assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
        tor = Q.rotate(torch.from_numpy(x), n, torch.from_numpy(signs.astype(np.float32)))
        assert np.array_equal(tor.numpy().view(np.uint32), want.view(np.uint32))


def test_fused_rotate_quantize_equals_mxref():
    """The fused Wgrad x^T path (plain NVFP4 RNE: rotate + quantize in one kernel) against
    mxref.quantize(mxref.rotate(x)): codes, scales, tensor scale, GEMM values; SR and
    corrected specs are refused (typed)."""
    x = _data((6, 64), 8)
    signs = sign_vector("te16", 16)
    spec = OperandSpec(fmt="nvfp4", profile="te_nvfp4")
    assert Q.fused_rotation_ok(spec) and not Q.fused_rotation_ok(NV_SR)
    ref = mxref.quantize(mxref.rotate(x, 16, axis=-1, signs=signs), "nvfp4", "te_nvfp4",
                         axis=-1)
    q = Q.quantize_rotated_operand(torch.from_numpy(x), spec, 16, signs)
    _assert_operand_is(q, ref)
    with pytest.raises(ValueError):
        Q.quantize_rotated_operand(torch.from_numpy(x), NV_SR, 16, signs)


def test_triton_rotation_refuses_device_signs_and_bad_signs():
    x = torch.zeros(2, 16)
    with pytest.raises(TypeError):
        Q.rotate(x, 16, torch.ones(16, device="meta"), backend="triton")
    # the interpreted module copy's own class (the canonical module is not imported here)
    with pytest.raises(Q._triton_rotate(x.device).KernelUnsupported):
        Q.rotate(x, 16, np.full(16, 2, np.int8), backend="triton")


# ---- (a) a layer / a tiny run on the triton backend passes its in-run checks ------------------
def _layer_run(backend="triton", seed=3, tokens=32, k=32, n=48):
    torch.manual_seed(seed)
    m = MXLinear.from_linear(torch.nn.Linear(k, n), "nvfp4-te", backend=backend)
    m.name = "blk.0.mlp"
    m.step = 5
    capture_next(m)
    x = torch.randn(tokens, k).requires_grad_(True)
    y = m(x)
    (y * torch.linspace(-1, 1, n)).sum().backward()
    return m


def _sr_records(recs):
    return [r for r in recs if r.profile == "te_nvfp4+sr"]


@pytest.fixture
def generic_path():
    """The generic MXLinear path (nvfp4-te otherwise takes the fused fast path on triton)."""
    from mxkernels.training import mxlinear as M
    M.FAST_PATH[0] = False
    yield
    M.FAST_PATH[0] = True


@pytest.mark.usefixtures("generic_path")
def test_nvfp4_te_layer_on_triton_runs_no_torch_emulation(monkeypatch):
    """Every nvfp4-te operand on the triton backend comes from the Triton ops: torch_emu's
    NVFP4 quantizer and the torch butterfly are never called (planted to raise), and the
    in-run validation passes on all six operands and three GEMM outputs, the two SR
    operands (dgrad dy, wgrad dy^T) and the rotated Wgrad pair included (dy^T rotated, then
    SR-quantized; x^T rotated and quantized by one fused kernel). This is the generic path
    (the fast path, one fused launch per tensor, is tested in test_training_fastpath)."""
    def boom(*a, **k):
        raise AssertionError("torch emulation on the triton backend")
    monkeypatch.setattr(torch_emu, "quantize_nvfp4", boom)
    monkeypatch.setattr(Q, "_butterfly", boom)
    monkeypatch.setattr(Q, "sr_bits", boom)
    fused = []
    real_fused = Q.quantize_rotated_operand
    monkeypatch.setattr(Q, "quantize_rotated_operand",
                        lambda *a, **k: fused.append(a[1]) or real_fused(*a, **k))
    m = _layer_run()
    assert [sp.rounding for sp in fused] == ["rne"]          # wgrad x^T: rotate + quantize
    cap = m._capture_done
    assert cap["wgrad"]["hadamard_n"] == 16 and "signs" in cap["wgrad"]
    assert cap["dgrad"]["a"]["sr_seed"] is not None and cap["wgrad"]["a"]["sr_seed"] is not None
    recs = check_capture(m, gemm_check="bound")
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    assert len(_sr_records(recs)) == 2


def test_tiny_nvfp4_te_training_run_on_triton_passes_in_run_validation(tmp_path):
    """Two steps of llama-tiny under nvfp4-te with backend='triton' on CPU (interpreter),
    in-run validation on every step: every check record passes and both steps checked an SR
    operand and the Hadamard-rotated Wgrad."""
    import json

    from mxkernels.training.trainer import TrainConfig, train
    run = tmp_path / "r"
    s = train(TrainConfig(out=str(run), model="llama-tiny", seq_len=16, batch_size=2,
                          precision="fp32", threads=1, eval_tokens=32, progress=False,
                          lr=3e-3, recipe="nvfp4-te", backend="triton", tokens=32 * 2,
                          validate_every=1))
    assert s["status"] == "complete"
    checks = [json.loads(x) for x in (run / "checks.jsonl").read_text().splitlines()]
    assert checks and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    assert {c["step"] for c in checks} == {0, 1}
    for step in (0, 1):
        ops = {(c["gemm"], c["operand"], c["profile"]) for c in checks if c["step"] == step}
        assert sum(1 for o in ops if o[2] == "te_nvfp4+sr") == 2, ops
        assert sum(1 for o in ops if o[0] == "wgrad") == 3, ops


# ---- (c) planted bugs are caught ------------------------------------------------------------
def _planted_op(monkeypatch, **override):
    real = torch.ops.mxkernels.quantize_nvfp4_sr

    def planted(x, profile, seed, offset, words=1):
        kw = dict(seed=seed, offset=offset)
        kw.update({k: f(kw[k]) for k, f in override.items()})
        return real(x, profile, kw["seed"], kw["offset"], words)
    monkeypatch.setattr(torch.ops.mxkernels, "quantize_nvfp4_sr", planted)


@pytest.mark.parametrize("override", [dict(offset=lambda o: o + 1),
                                      dict(seed=lambda s: s ^ 1)],
                         ids=["stream-one-word-off", "wrong-seed"])
@pytest.mark.usefixtures("generic_path")
def test_planted_sr_stream_bug_is_caught(monkeypatch, override):
    """The SR op given the right seed with offset 1 (every element takes its neighbour's word)
    or a seed one bit off: the in-run check fails exactly the two SR operands, on their codes
    (the block scales do not depend on the words), and passes the RNE operands."""
    _planted_op(monkeypatch, **override)
    m = _layer_run()
    recs = check_capture(m, gemm_check="bound")
    bad = [r for r in recs if not r.ok and r.operand != "out"]
    assert {(r.gemm, r.profile) for r in bad} == {("dgrad", "te_nvfp4+sr"),
                                                 ("wgrad", "te_nvfp4+sr")}
    for r in bad:
        assert r.detail.startswith("codes:") and r.mismatches > 0 and "scales:" not in r.detail
    assert all(r.ok for r in recs if r.operand != "out" and r.profile == "te_nvfp4")


@pytest.mark.usefixtures("generic_path")
def test_planted_wrong_rotation_sign_is_caught(monkeypatch):
    """The Triton rotation given the sign vector with one entry flipped: the in-run check
    (mxref.rotate with the recorded signs) fails both Wgrad operands and nothing else."""
    real = Q._host_signs

    def flipped(signs):
        s = real(signs).clone()
        s[3] = -s[3]
        return s
    monkeypatch.setattr(Q, "_host_signs", flipped)
    m = _layer_run()
    recs = check_capture(m, gemm_check="bound")
    bad = {(r.gemm, r.operand) for r in recs if not r.ok and r.operand != "out"}
    assert bad and {g for g, _ in bad} == {"wgrad"} and len(bad) == 2, bad


@pytest.mark.parametrize("recipe", ["mxfp4-fdw-h16", "mxfp4-fdw-rht", "quartet", "nvfp4-te"])
def test_rotated_recipes_triton_equal_torch_backend(recipe):
    """Every recipe with a Hadamard now rotates through triton_rotate on the triton backend:
    forward output and both gradients equal the torch backend's (torch butterfly, torch_emu)
    bit for bit, and the triton run's in-run checks pass."""
    out = {}
    for backend in ("torch", "triton"):
        torch.manual_seed(3)
        m = MXLinear.from_linear(torch.nn.Linear(64, 32), recipe, backend=backend)
        m.name, m.step = backend, 7
        capture_next(m)
        x = torch.randn(48, 64).requires_grad_(True)
        y = m(x)
        (y * torch.linspace(-1, 1, 32)).sum().backward()
        recs = check_capture(m, gemm_check="bound")
        assert recs and all(r.ok for r in recs), [r for r in recs if not r.ok]
        out[backend] = (y.detach(), x.grad, m.weight.grad)
    for a, b in zip(out["torch"], out["triton"]):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
