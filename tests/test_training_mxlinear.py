"""MXLinear: exactness against nn.Linear and mxref, Hadamard, in-run validation (and that the
validation fails on planted bugs), timing hooks. Expected values come from mxref (Numba) or
exact float64 arithmetic, never from mxkernels.training."""
import dataclasses
import json
import time

import numpy as np
import pytest
import torch

import mxref
from mxkernels import torch_emu
from mxkernels.training import (GemmSpec, MXLinear, OperandSpec, Recipe, ValidationError,
                                capture_next, check_capture, get_recipe, quant_timer,
                                raise_if_failed, set_step, swap_linears)
from mxkernels.training import quant as Q
from mxkernels.training.validate import CaptureError

T, K, N = 48, 64, 96


def _layer(recipe, seed=0, bias=True):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(K, N, bias=bias)
    m = MXLinear.from_linear(lin, recipe, backend="torch")
    m.name = "blk.0.proj"
    return lin, m


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, T // 2, K, generator=g)
    gy = torch.randn(2, T // 2, N, generator=g)
    return x, gy


def _run(m, x, gy):
    x = x.clone().requires_grad_(True)
    y = m(x)
    (y * gy).sum().backward()
    return y.detach(), x.grad


def test_bf16_recipe_is_nn_linear_exactly():
    lin, m = _layer("bf16")
    ref = torch.nn.Linear(K, N)
    ref.load_state_dict(lin.state_dict())
    x, gy = _inputs()
    y, dx = _run(m, x, gy)
    y0, dx0 = _run(ref, x, gy)
    assert torch.equal(y, y0) and torch.equal(dx, dx0)
    assert torch.equal(lin.weight.grad, ref.weight.grad)
    assert torch.equal(lin.bias.grad, ref.bias.grad)


def _deq(a, axis):
    return mxref.dequantize(mxref.quantize(a, "mxfp4", "ocp", axis=axis)).astype(np.float64)


def _close(got, exp64, absprod, k):
    bound = (k + 2) * 2.0 ** -24 * absprod + 4 * 2.0 ** -24 * np.abs(exp64)
    assert np.all(np.abs(got.astype(np.float64) - exp64) <= bound + 1e-30)


def test_mxfp4_fdw_matches_independent_mxref_computation():
    lin, m = _layer("mxfp4-fdw", bias=False)
    x, gy = _inputs()
    y, dx = _run(m, x, gy)
    x2 = x.reshape(T, K).numpy()
    g2 = gy.reshape(T, N).numpy()
    w = lin.weight.detach().numpy()
    # fprop: blocks along K for x and W
    xa, wa = _deq(x2, -1), _deq(w, -1)
    _close(y.reshape(T, N).numpy(), xa @ wa.T, np.abs(xa) @ np.abs(wa).T, K)
    # dgrad: dy along N, W along N (axis 0)
    ga, wb = _deq(g2, -1), _deq(w, 0)
    _close(dx.reshape(T, K).numpy(), ga @ wb, np.abs(ga) @ np.abs(wb), N)
    # wgrad: dy and x along T (axis 0)
    gt, xt = _deq(g2, 0), _deq(x2, 0)
    _close(lin.weight.grad.numpy(), gt.T @ xt, np.abs(gt).T @ np.abs(xt), T)
    # and it is not the unquantized product
    assert not np.allclose(y.reshape(T, N).numpy(), x2 @ w.T, rtol=1e-3)


@pytest.mark.parametrize("name", ["mxfp4-f", "mxfp4-fd", "mxfp4-fdw", "mxfp4-fdw-h16",
                                  "mxfp4-fdw-sr", "mxfp4-fdw-rht", "quartet", "nvfp4-te",
                                  "ms-fp4", "decomp-fixed", "fp4-activations"])
def test_every_recipe_trains_gradients_flow_and_point_the_right_way(name):
    lin, m = _layer(name)
    ref = torch.nn.Linear(K, N)
    ref.load_state_dict(lin.state_dict())
    x, gy = _inputs()
    y, dx = _run(m, x, gy)
    y0, dx0 = _run(ref, x, gy)
    # DGE multiplies dW by f'(W_scaled) in [0.2, 3] (mean 0.59 per interval with the clip at
    # 3; tests/test_training_dge.py): a deliberately
    # different direction (cosine ~0.67 here)
    dw_min = 0.5 if name == "ms-fp4" else 0.9
    for got, exp, lo in ((y, y0, 0.9), (dx, dx0, 0.9), (lin.weight.grad, ref.weight.grad, dw_min),
                         (lin.bias.grad, ref.bias.grad, 0.9)):
        assert torch.isfinite(got).all()
        cos = torch.nn.functional.cosine_similarity(got.flatten(), exp.flatten(), dim=0)
        assert cos > lo, (name, float(cos))


def test_torch_rotation_is_mxref_rotate_bit_exactly():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 256, generator=g) * torch.exp2(torch.randint(-140, 120, (6, 256),
                                                                     generator=g).float())
    x[0, :8] = torch.tensor([0.0, -0.0, 1e-45, -3e-39, 3.0e38, -3.4e38, 1.0, 2.0 ** -126])
    for n in (16, 32, 64, 128, 256):
        for kind in ("none", "random"):
            d = mxref.sign_vector(kind, n, seed=5, step=2, tensor_id=1)
            got = Q.rotate(x, n, torch.from_numpy(d.astype(np.float32)))
            exp = mxref.rotate(x.numpy(), n, signs=d)
            assert np.array_equal(got.numpy().view(np.uint32), exp.view(np.uint32)), (n, kind)
    y = torch.randn(4, 128, generator=g)
    d = mxref.sign_vector("random", 32, seed=1)
    ds = torch.from_numpy(d.astype(np.float32))
    assert torch.allclose(Q.unrotate(Q.rotate(y, 32, ds), 32, ds), y, rtol=1e-5, atol=1e-6)


def test_rotated_gemm_preserves_the_product():
    rot_only = Recipe("rot", "H32 without quantization", "test",
                      fprop=GemmSpec(hadamard="random", hadamard_n=32),
                      dgrad=GemmSpec(hadamard="deterministic", hadamard_n=16),
                      wgrad=GemmSpec(hadamard="fixed_sign", hadamard_n=16))
    lin, m = _layer(rot_only)
    ref = torch.nn.Linear(K, N)
    ref.load_state_dict(lin.state_dict())
    x, gy = _inputs()
    y, dx = _run(m, x, gy)
    y0, dx0 = _run(ref, x, gy)
    assert torch.allclose(y, y0, rtol=1e-4, atol=1e-5)
    assert torch.allclose(dx, dx0, rtol=1e-4, atol=1e-5)
    assert torch.allclose(lin.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
    # quantized and rotated: within the MXFP4 error of the plain product
    lin, m = _layer("mxfp4-fdw-h16")
    y, _ = _run(m, x, gy)
    assert float((y - y0).norm() / y0.norm()) < 0.3


def test_random_signs_change_with_step_deterministic_ones_do_not():
    x, gy = _inputs()
    outs = {}
    for name in ("mxfp4-fdw-rht", "mxfp4-fdw-h16"):
        lin, m = _layer(name)
        ys = []
        for step in (0, 1, 0):
            set_step(m, step)
            ys.append(m(x).detach())
        outs[name] = ys
    a = outs["mxfp4-fdw-rht"]
    assert not torch.equal(a[0], a[1]) and torch.equal(a[0], a[2])
    b = outs["mxfp4-fdw-h16"]
    assert torch.equal(b[0], b[1])


HONEST = ["mxfp4-fdw", "mxfp4-fdw-sr", "mxfp4-fdw-rht", "quartet", "nvfp4-te", "ms-fp4",
          "decomp-fixed", "fp4-activations"]


def _capture(name, step=3):
    lin, m = _layer(name)
    m.step = step
    x, gy = _inputs()
    x[0, :, 5] *= 40.0          # outlier channel: blocks the outlier fallback flags
    capture_next(m)
    _run(m, x, gy)
    return m


def test_validation_passes_on_honest_layers():
    for name in HONEST:
        recs = check_capture(_capture(name), gemm_check="bound")
        bad = [r for r in recs if not r.ok]
        assert not bad, (name, bad)
        quantized = sum(op.quantized for _, g in get_recipe(name).gemms() for op in (g.a, g.b))
        assert len([r for r in recs if r.operand != "out" and "copy" not in r.operand
                    and "stored" not in r.operand]) == quantized
        json.dumps([r.to_dict() for r in recs])
    raise_if_failed(recs)


def test_validation_exact_gemm_check_with_mxref_check_gemm():
    recs = check_capture(_capture("mxfp4-fdw"), gemm_check="mxref")
    outs = [r for r in recs if r.operand == "out"]
    assert len(outs) == 3 and all(r.ok and r.profile == "mxref.check_gemm" for r in outs)


def test_fast_path_off_gives_the_same_bits(monkeypatch):
    lin, m = _layer("mxfp4-fdw-sr")
    x, gy = _inputs()
    y1, dx1 = _run(m, x, gy)
    monkeypatch.setattr(Q, "_fast_ok", lambda *a: False)
    y2, dx2 = _run(m, x, gy)
    assert torch.equal(y1, y2) and torch.equal(dx1, dx2)


def test_validation_needs_a_capture():
    _, m = _layer("mxfp4-fdw")
    with pytest.raises(CaptureError):
        check_capture(m)


def _flip_one_code(monkeypatch):
    real = Q._mx_block

    def bad(*a, **kw):
        s, c, v, ts = real(*a, **kw)
        c = c.clone()
        c.view(-1)[5] ^= 1
        return s, c, v, ts
    monkeypatch.setattr(Q, "_mx_block", bad)


def _flip_one_code_emu(monkeypatch):
    monkeypatch.setattr(Q, "_fast_ok", lambda *a: False)
    real = torch_emu.quantize_mx

    def bad(*a, **kw):
        s, c = real(*a, **kw)
        c = c.clone()
        c.view(-1)[5] ^= 1
        return s, c
    monkeypatch.setattr(Q.te, "quantize_mx", bad)


def _wrong_profile(monkeypatch):
    real = Q._profile
    monkeypatch.setattr(Q, "_profile", lambda spec: mxref.get_profile("rceil")
                        if spec.profile == "ocp" else real(spec))


def _wrong_sr_seed(monkeypatch):
    real = Q.sr_bits
    monkeypatch.setattr(Q, "sr_bits", lambda shape, seed, device, words=1:
                        real(shape, seed + 1, device, words))


def _drop_outliers(monkeypatch):
    monkeypatch.setattr(Q, "_outlier_mask", lambda t, *a: torch.zeros_like(t, dtype=torch.bool))


def _wrong_signs(monkeypatch):
    real = Q.rotate
    monkeypatch.setattr(Q, "rotate", lambda t, n, s: real(t, n, -s))


def _off_by_one_macro(monkeypatch):
    real = Q._macro_scales
    monkeypatch.setattr(Q, "_macro_scales", lambda *a: real(*a) * (1 + 2.0 ** -7))


@pytest.mark.parametrize("recipe, plant, gemm", [
    ("mxfp4-fdw", _flip_one_code, "fprop"),
    ("mxfp4-fdw", _flip_one_code_emu, "fprop"),
    ("mxfp4-fdw", _wrong_profile, "fprop"),
    ("mxfp4-fdw-sr", _wrong_sr_seed, "dgrad"),
    ("decomp-fixed", _drop_outliers, None),
    ("decomp-fixed", _off_by_one_macro, "fprop"),
    ("mxfp4-fdw-rht", _wrong_signs, "fprop"),
])
def test_validation_fails_on_planted_bugs(monkeypatch, recipe, plant, gemm):
    plant(monkeypatch)
    recs = check_capture(_capture(recipe), gemm_check="bound")
    bad = [r for r in recs if not r.ok]
    assert bad
    if gemm is not None:
        assert bad[0].gemm == gemm and bad[0].first_index is not None
    with pytest.raises(ValidationError) as ei:
        raise_if_failed(recs)
    assert "blk.0.proj" in str(ei.value) and bad[0].operand in str(ei.value)


def test_validation_fails_on_a_corrupted_gemm_output():
    m = _capture("nvfp4-te")
    m._capture_done["wgrad"]["out"][3, 4] *= 1.001
    recs = check_capture(m, gemm_check="bound")
    bad = [r for r in recs if not r.ok]
    assert [(r.gemm, r.operand, r.first_index) for r in bad] == [("wgrad", "out", [3, 4])]


def test_validation_fails_on_a_wrong_stored_activation(monkeypatch):
    real = Q.quantize_operand

    def bad(t, spec, backend, **kw):
        if spec.fmt == "mxfp4":       # only the FP4 activation storage uses mxfp4 here
            spec = dataclasses.replace(spec, profile="rceil")
        return real(t, spec, backend, **kw)
    monkeypatch.setattr(Q, "quantize_operand", bad)
    recs = check_capture(_capture("fp4-activations"), gemm_check="bound")
    bad_recs = [r for r in recs if not r.ok]
    assert bad_recs and "stored" in bad_recs[0].operand


def test_quant_timer_accumulates_only_when_active():
    lin, m = _layer("mxfp4-fdw")
    x, gy = _inputs()
    with quant_timer() as t:
        _run(m, x, gy)
    assert t.calls == 6 and t.seconds() > 0
    calls = t.calls
    _run(m, x, gy)
    assert t.calls == calls


def test_small_model_trains_fast_on_cpu():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # the shared 2-core CI box: oversubscribed threads cost 10x
    try:
        _train_small()
    finally:
        torch.set_num_threads(threads)


def _train_small():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                                      torch.nn.Linear(512, 256))
                                  for _ in range(4)])          # ~1.05M parameters
    names = swap_linears(model, "mxfp4-fdw", backend="torch")
    assert len(names) == 8
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 256)
    target = torch.randn(256, 256)
    t0 = time.perf_counter()
    losses = []
    for step in range(10):
        set_step(model, step)
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    dt = time.perf_counter() - t0
    assert losses[-1] < losses[0]
    assert dt < 30, dt


def test_triton_backend_registers_the_kernel_ops():
    """Choosing the triton backend loads mxkernels.ops, which registers torch.ops.mxkernels.*
    (a fresh process: without the import the first quantization failed on the GPU with
    "'_OpNamespace' 'mxkernels' object has no attribute 'quantize_mx'")."""
    import subprocess
    import sys
    code = ("import torch; from mxkernels.training.mxlinear import _resolve_backend; "
            "_resolve_backend('triton', torch.device('cpu')); "
            "print(hasattr(torch.ops.mxkernels, 'quantize_mx'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


@pytest.mark.parametrize("recipe", ["mxfp4-fdw", "nvfp4-te"])
def test_triton_backend_matches_torch_backend_in_the_interpreter(recipe):
    """The kernels' path (Triton quantize + dequantize ops, run by the interpreter on CPU; the
    float-domain NVFP4 decode) gives the same forward output and gradients, bit for bit, as the
    torch_emu path on the same weights, and its in-run checks pass against mxref."""
    from mxkernels.training.validate import capture_next, check_capture
    torch.manual_seed(3)
    ref = torch.nn.Linear(64, 32)
    x0 = torch.randn(48, 64)
    out = {}
    for backend in ("torch", "triton"):
        m = MXLinear.from_linear(torch.nn.Linear(64, 32), recipe, backend=backend)
        with torch.no_grad():
            m.weight.copy_(ref.weight)
            m.bias.copy_(ref.bias)
        m.name = backend
        capture_next(m)
        x = x0.clone().requires_grad_(True)
        y = m(x)
        (y * torch.linspace(-1, 1, 32)).sum().backward()
        recs = check_capture(m)
        assert recs and all(r.ok for r in recs), [r for r in recs if not r.ok]
        out[backend] = (y.detach(), x.grad, m.weight.grad)
    for a, b in zip(out["torch"], out["triton"]):
        assert torch.equal(a, b)


def test_nvfp4_float_decode_matches_torch_emu_on_every_pair():
    """The triton backend's float-domain NVFP4 decode against torch_emu's integer decode: all 16
    codes x 256 scale bytes, plus a ragged row (40 elements: the last block has 8)."""
    from mxkernels import torch_emu as te
    from mxkernels.training.quant import nvfp4_values

    s = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(256, 1)
    c = torch.arange(16, dtype=torch.uint8).repeat(256, 1)
    one = torch.tensor(1.0)
    ragged_s = torch.tensor([[0x38, 0x40, 0x01], [0xB8, 0x7E, 0x08], [0x00, 0x30, 0xF0]],
                            dtype=torch.uint8)                # a different scale per block
    ragged_c = (torch.arange(40) % 16).to(torch.uint8).repeat(3, 1)
    for scales, codes in ((s, c), (ragged_s, ragged_c)):
        got = nvfp4_values(scales, codes)
        want = te.dequantize_nvfp4(scales, codes, one).view(torch.float32)
        assert got.shape == want.shape
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
        assert int(nan.sum()) == (32 if codes.shape[0] == 256 else 0)   # scale rows 0x7F, 0xFF


def test_vector_scale_is_a_true_division():
    """ms-fp4's row scale is fl32(amax / 6). CUDA torch computes `tensor / 6.0` as a multiply by
    the rounded reciprocal, 1 ulp off for a third of all amax; an H100 run's in-run check caught
    it. These amax values are ones where the two differ (asserted), so a reciprocal multiply
    fails here on any device."""
    from mxkernels.training import quant as Q
    amax = np.array([0x3FD187F6, 0x3F821D94, 0x3FF7B074], np.uint32).view(np.float32)
    want = amax / np.float32(6)
    assert (amax * (np.float32(1) / np.float32(6)) != want).all()
    x = np.zeros((3, 64), np.float32)
    x[:, 5] = amax
    x[:, 9] = -amax / 3
    _, s, _, _ = Q._vector(torch.from_numpy(x))
    assert s.numpy().view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_check_decomposition_records_what_each_operand_error_is_made_of():
    """check_capture(decompose=...) records, per quantized operand, the recipe's own
    error-to-signal and mxref.decompose of the same tensor under plain MX. For a plain RNE
    MX operand the two numbers come from independent code (values - x here, the exact
    component split in mxref.decompose) and must agree; the corrections must lower the error
    on the outlier channel; NVFP4 and vector-wise operands have no E8M0 decomposition."""
    out = {}
    for name in ("mxfp4-fdw", "decomp-fixed", "ms-fp4", "nvfp4-te"):
        parts = []
        recs = check_capture(_capture(name), gemm_check="bound", decompose=parts)
        assert all(r.ok for r in recs)
        quantized = sum(op.quantized for _, g in get_recipe(name).gemms() for op in (g.a, g.b))
        assert len(parts) == quantized
        json.dumps(parts)
        out[name] = {(p["gemm"], p["operand"]): p for p in parts}
    for p in out["mxfp4-fdw"].values():
        assert p["corrections"] == [] and p["plain"] is not None
        a, b = p["recipe_error_to_signal"], p["plain"]["error_to_signal"]
        assert a > 0 and abs(a - b) <= 1e-9 * b, p
        shares = p["plain"]["energy_share"]
        assert abs(sum(shares.values()) - 1.0) < 1e-9
    x_dec = out["decomp-fixed"][("fprop", "x")]
    assert x_dec["corrections"] == ["outlier", "macro"]
    assert x_dec["recipe_error_to_signal"] < 0.9 * x_dec["plain"]["error_to_signal"]
    assert out["ms-fp4"][("fprop", "x")]["plain"] is None
    assert out["ms-fp4"][("fprop", "x")]["corrections"] == ["occ", "vector"]
    assert all(p["plain"] is None for p in out["nvfp4-te"].values())


def test_one_fix_decomp_variants_differ_from_decomp_fixed_only_in_their_fix():
    from mxkernels.training.experiments import EXPERIMENTS
    from mxkernels.training.recipes import VARIANTS
    fixed = get_recipe("decomp-fixed")
    for name, gone in (("decomp-outlier", "macro"), ("decomp-macro", "outlier")):
        r = VARIANTS[name]
        for gemm, g in r.gemms():
            for op, ref in ((g.a, getattr(fixed, gemm).a), (g.b, getattr(fixed, gemm).b)):
                assert getattr(op, gone) is None
                assert dataclasses.replace(op, **{gone: getattr(ref, gone)}) == ref
        assert name in EXPERIMENTS["decomp"]["recipes"]


def _e2m1_rne_np(y: np.ndarray) -> np.ndarray:
    """E2M1 value nearest y (float64 grid search; a tie goes to the even code), saturating."""
    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    a = np.minimum(np.abs(y.astype(np.float64)), 6.0)
    d = np.abs(a[..., None] - grid)
    best = d.min(-1, keepdims=True)
    cand = d == best
    # among the nearest (one, or two at a tie), the even code index
    idx = np.where(cand.sum(-1) == 2, np.argmax(cand & (np.arange(8) % 2 == 0), -1),
                   np.argmax(cand, -1))
    return np.copysign(grid[idx], y)


def test_occ_decomposition_adds_the_compensated_residual_back():
    """ms-fp4's fprop x: the recorded recipe error-to-signal is that of what the GEMM sees,
    Q(clip(x)) + (x - clip(x)), recomputed here without validate.py: bounds by np.partition,
    row scale fl32(amax / 6), E2M1 by grid search. Planted: leaving the residual out (the
    clipped-off outliers then count as error) gives a number the record must not match."""
    m = _capture("ms-fp4")
    x, _ = _inputs()
    x[0, :, 5] *= 40.0                       # as _capture: the layer's input
    x2 = x.reshape(-1, K).numpy().astype(np.float32)
    assert np.array_equal(np.asarray(m._capture_done["fprop"]["a"]["input"]), x2)
    parts = []
    check_capture(m, gemm_check="bound", decompose=parts)
    rec = next(p for p in parts if (p["gemm"], p["operand"]) == ("fprop", "x"))
    flat = x2.reshape(-1)
    n = flat.size
    khi = int(np.ceil(0.99 * n))
    lo = np.partition(flat, n - khi)[n - khi]
    hi = np.partition(flat, khi - 1)[khi - 1]
    c = np.clip(x2, lo, hi)
    s = (np.abs(c).max(1) / np.float32(6)).astype(np.float32)
    y = (c / s[:, None]).astype(np.float32)
    q = _e2m1_rne_np(y) * s.astype(np.float64)[:, None]
    xd = x2.astype(np.float64)
    sig = float(np.sum(xd ** 2))
    with_res = float(np.sum((q + (xd - c) - xd) ** 2)) / sig
    without = float(np.sum((q - xd) ** 2)) / sig
    assert (xd != c).sum() >= 2 * (n - khi), "the clamp must bite on both sides"
    assert abs(rec["recipe_error_to_signal"] - with_res) <= 1e-9 * with_res
    assert without > 1.5 * with_res            # the planted omission is far off
    assert abs(rec["recipe_error_to_signal"] - without) > 1e-3 * without


@pytest.mark.parametrize("name", ["ms-w8a4", "ms-w8a4-occ", "ms-w4a8", "ms-w4a8-dge"])
def test_one_sided_ms_variants_pass_the_in_run_check(name):
    """The paper's W8A4 +- OCC and W4A8 +- DGE arms: every operand (the MXFP8 side included)
    byte-identical to mxref, the GEMMs within their bound; the decomposition record of the
    MXFP8 operand agrees with mxref.decompose's own error-to-signal."""
    from mxkernels.training.recipes import VARIANTS
    r = VARIANTS[name]
    parts = []
    recs = check_capture(_capture(r), gemm_check="bound", decompose=parts)
    bad = [x for x in recs if not x.ok]
    assert not bad, bad
    e4 = [p for p in parts if p["fmt"] == "mxfp8_e4m3"]
    assert len(e4) == 1 and e4[0]["plain"] is not None
    a, b = e4[0]["recipe_error_to_signal"], e4[0]["plain"]["error_to_signal"]
    assert a > 0 and abs(a - b) <= 1e-9 * b


def test_one_sided_ms_variants_differ_from_ms_fp4_only_on_the_8_bit_side():
    from mxkernels.training.experiments import EXPERIMENTS
    from mxkernels.training.recipes import VARIANTS
    ms = get_recipe("ms-fp4")
    e4 = OperandSpec("mxfp8_e4m3")
    plain_a = dataclasses.replace(ms.fprop.a, clamp_quantile=None)
    plain_b = dataclasses.replace(ms.fprop.b, dge_k=None)
    want = {"ms-w8a4": (plain_a, e4), "ms-w8a4-occ": (ms.fprop.a, e4),
            "ms-w4a8": (e4, plain_b), "ms-w4a8-dge": (e4, ms.fprop.b)}
    for name, (a, b) in want.items():
        r = VARIANTS[name]
        assert (r.fprop.a, r.fprop.b) == (a, b), name
        assert r.fprop.gemm == ms.fprop.gemm and r.fprop.hadamard == ms.fprop.hadamard
        assert (r.dgrad, r.wgrad) == (ms.dgrad, ms.wgrad), name
        assert name in EXPERIMENTS["ms-fp4"]["recipes"]
