"""The MXLinear fast path (one fake-quantization launch per tensor, bf16 GEMMs): which recipes
take it, bit-identity with the generic path, its in-run validation against mxref (and that the
validation fails when the fast path's values are wrong), the shared-input cache, autocast.
Runs the Triton kernels through the interpreter on CPU. Expected values come from mxref or
from the generic path (itself tested against mxref in test_training_mxlinear.py)."""
import dataclasses

import pytest
import torch

from mxkernels.training import MXLinear, capture_next, check_capture, get_recipe
from mxkernels.training import mxlinear as M
from mxkernels.training.recipes import RECIPES


def _pair(recipe="mxfp4-fdw", K=64, N=32, bias=True, seed=3):
    torch.manual_seed(seed)
    ref = torch.nn.Linear(K, N, bias=bias)
    m = MXLinear.from_linear(torch.nn.Linear(K, N, bias=bias), recipe, backend="triton")
    with torch.no_grad():
        m.weight.copy_(ref.weight)
        if bias:
            m.bias.copy_(ref.bias)
    m.name = "blk.0.proj"
    return m


def _fwd_bwd(m, x0, fast=True):
    M.FAST_PATH[0] = fast
    try:
        m.weight.grad = None
        if m.bias is not None:
            m.bias.grad = None
        x = x0.clone().requires_grad_(True)
        y = m(x)
        (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        return y.detach(), x.grad, m.weight.grad.clone(), \
            None if m.bias is None else m.bias.grad.clone()
    finally:
        M.FAST_PATH[0] = True


def test_plan_covers_exactly_the_plain_rotated_and_sr_mx_recipes():
    took = {name for name, r in RECIPES.items() if M.fast_plan(r) is not None}
    assert took == {"mxfp4-f", "mxfp4-fd", "mxfp4-fdw", "mxfp4-fdw-h16", "mxfp4-fdw-rht",
                    "mxfp4-fdw-sr", "fp4-activations", "quartet", "nvfp4-te",
                    "mxfp4-fdw-fp8"}, took
    # a custom all-MXFP8 recipe qualifies, so do SR and a 16-point rotation; a 64-point
    # rotation, a rotation with a bf16 operand, or a forward copy does not
    base = get_recipe("mxfp4-fdw")
    f8 = dataclasses.replace(base.fprop.a, fmt="mxfp8_e4m3")
    r8 = base.replace(name="f8", fprop=base.fprop.__class__(f8, f8),
                      dgrad=base.dgrad.__class__(f8, f8), wgrad=base.wgrad.__class__(f8, f8))
    assert M.fast_plan(r8) is not None
    sr = base.replace(name="sr", dgrad=dataclasses.replace(
        base.dgrad, a=dataclasses.replace(base.dgrad.a, rounding="sr")))
    assert M.fast_plan(sr)["dy"][0].fused and not M.fast_plan(sr)["dy"][1].fused
    h = base.replace(name="h", wgrad=dataclasses.replace(base.wgrad, hadamard="deterministic",
                                                         hadamard_n=16))
    assert M.fast_plan(h)["rotates"] and M.fast_plan(h)["x"][1].n == 16
    assert M.fast_plan(h)["x"][0].n == 0
    h64 = base.replace(name="h64", wgrad=dataclasses.replace(base.wgrad, hadamard="random",
                                                             hadamard_n=64))
    assert M.fast_plan(h64) is None
    fd = get_recipe("mxfp4-fd")
    hb = fd.replace(name="hb", wgrad=dataclasses.replace(fd.wgrad, hadamard="random",
                                                         hadamard_n=16))
    assert M.fast_plan(hb) is None            # wgrad rotates bf16 operands: generic
    # an unquantized operand re-used from the forward (source "fwd") stays generic
    fwd = fd.replace(name="fwd", wgrad=dataclasses.replace(
        base.wgrad, b=dataclasses.replace(fd.wgrad.b, source="fwd")))
    assert fwd.wgrad.b.fmt is None and M.fast_plan(fwd) is None
    assert M.fast_plan(get_recipe("bf16")) is None           # nothing quantized: F.linear


def _specs(plan):
    return {k: tuple(None if o is None else o.spec for o in plan[k]) for k in ("x", "w", "dy")}


def test_plan_marks_the_unquantized_orientations():
    f4 = get_recipe("mxfp4-fdw").fprop.a
    assert _specs(M.fast_plan(get_recipe("mxfp4-f"))) == {"x": (f4, None), "w": (f4, None),
                                                          "dy": (None, None)}
    assert _specs(M.fast_plan(get_recipe("mxfp4-fd"))) == {"x": (f4, None), "w": (f4, f4),
                                                           "dy": (f4, None)}
    assert _specs(M.fast_plan(get_recipe("mxfp4-fdw"))) == {"x": (f4, f4), "w": (f4, f4),
                                                            "dy": (f4, f4)}


def test_plan_records_gemm_side_and_rotation_of_each_orientation():
    p = M.fast_plan(get_recipe("mxfp4-fdw-rht"))
    # x: fprop A, wgrad B; W: fprop B, dgrad B; dy: dgrad A, wgrad A
    assert [(o.gemm, o.side, o.hadamard, o.n) for k in ("x", "w", "dy") for o in p[k]] == [
        (0, 0, "random", 16), (2, 1, "random", 16), (0, 1, "random", 16),
        (1, 1, "random", 16), (1, 0, "random", 16), (2, 0, "random", 16)]
    p = M.fast_plan(get_recipe("mxfp4-fdw-sr"))
    assert [o.spec.rounding for k in ("x", "w", "dy") for o in p[k]] == \
        ["rne"] * 4 + ["sr"] * 2


@pytest.mark.parametrize("recipe,want", [
    ("mxfp4-f", [(True, False), (True, False)]),
    ("mxfp4-fd", [(True, False), (True, True), (True, False)]),
    ("mxfp4-fdw", [(True, True), (True, True), (True, True)])])
def test_one_launch_per_tensor_with_a_quantized_orientation(monkeypatch, recipe, want):
    """(rows, cols) of every quantize_dequantize launch of a forward + backward: x, W, dy in
    that order, none for a tensor whose orientations are all unquantized."""
    tf = M._triton_fast(torch.device("cpu"))
    real = tf.quantize_dequantize
    calls = []

    def counting(t, fmt, profile="ocp", *, rows=True, cols=False, **kw):
        calls.append((rows, cols))
        return real(t, fmt, profile, rows=rows, cols=cols, **kw)

    monkeypatch.setattr(tf, "quantize_dequantize", counting)
    M._X_CACHE.clear()
    _fwd_bwd(_pair(recipe), torch.randn(40, 64))
    assert calls == want


@pytest.mark.parametrize("recipe", ["mxfp4-f", "mxfp4-fd", "mxfp4-fdw", "mxfp4-fdw-h16",
                                    "mxfp4-fdw-rht", "mxfp4-fdw-sr", "fp4-activations",
                                    "quartet", "nvfp4-te"])
@pytest.mark.parametrize("bias", [True, False])
def test_fast_path_is_bit_identical_to_the_generic_path_in_fp32(recipe, bias):
    m = _pair(recipe, bias=bias)
    m.layer_id, m.step = 2, 7             # the random signs and SR streams depend on both
    x0 = torch.randn(2, 48, 64)           # T = 96: the rotated recipes (n 16, 32) run fast
    fast = _fwd_bwd(m, x0, True)
    slow = _fwd_bwd(m, x0, False)
    for a, b in zip(fast, slow):
        if a is not None:
            assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("recipe,same", [("mxfp4-f", ("dx", "dW")), ("mxfp4-fd", ("dW",))])
def test_unquantized_gemms_under_autocast_are_nn_linear_bit_for_bit(recipe, same):
    """Under bf16 autocast a GEMM whose operands are both unquantized is nn.Linear's: the
    upstream gradient of (y.float() * c).sum() is c in bf16 whatever y is, so dx (mxfp4-f) and
    dW (both) must equal nn.Linear's bit for bit, while the quantized ones must not."""
    m = _pair(recipe, bias=False)
    ref = torch.nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        ref.weight.copy_(m.weight)
    x0 = torch.randn(3, 40, 64)
    got = {}
    for name, mod in (("mx", m), ("ref", ref)):
        x = x0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = mod(x)
        (y.float() * torch.linspace(-1, 1, 32)).sum().backward()
        got[name] = {"y": y.detach(), "dx": x.grad, "dW": mod.weight.grad.clone()}
    for k in ("y", "dx", "dW"):
        a, b = got["mx"][k], got["ref"][k]
        assert a.dtype == b.dtype
        assert torch.equal(a, b) == (k in same), k


def _autocast_fwd_bwd(m, x0):
    x = x0.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()


# the unquantized operands per recipe (GEMM, operand name)
_UNQ = {"mxfp4-f": {("dgrad", "dy"), ("dgrad", "W^T"), ("wgrad", "dy^T"), ("wgrad", "x^T")},
        "mxfp4-fd": {("wgrad", "dy^T"), ("wgrad", "x^T")}, "mxfp4-fdw": set()}


def _captured_checks(m, autocast, T=48):
    """One captured forward and backward of layer `m` (bf16 autocast or not), checked."""
    capture_next(m)
    x0 = torch.randn(T, 64)
    if autocast:
        _autocast_fwd_bwd(m, x0)
    else:
        _fwd_bwd(m, x0)
    return check_capture(m, gemm_check="bound")


@pytest.mark.parametrize("recipe", ["mxfp4-f", "mxfp4-fd", "mxfp4-fdw"])
@pytest.mark.parametrize("autocast", [False, True])
def test_fast_path_capture_passes_against_mxref_and_records_the_values(recipe, autocast):
    m = _pair(recipe)
    recs = _captured_checks(m, autocast)
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    ops = [r for r in recs if r.operand != "out"]
    assert all("values" in r.detail for r in ops), [r.detail for r in ops]
    unq = {(r.gemm, r.operand) for r in ops if r.profile == "cast"}
    assert unq == _UNQ[recipe]
    want = "bf16" if autocast else "fp32"
    assert all(r.fmt == want and "unquantized" in r.detail for r in ops if r.profile == "cast")
    assert all(r.fmt == "mxfp4" for r in ops if r.profile != "cast")
    assert m._capture is None and m._capture_done["complete"]


def test_fast_path_capture_passes_mxref_check_gemm():
    m = _pair()
    capture_next(m)
    _fwd_bwd(m, torch.randn(48, 64))
    recs = check_capture(m)
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    assert [r.profile for r in recs if r.operand == "out"] == ["mxref.check_gemm"] * 3


def _bf16_leak(t, bf16):
    """Planted bug: an unquantized operand cast to bf16 whatever the autocast state."""
    return t.to(torch.bfloat16).contiguous()


def _fp32_leak(t, bf16):
    """Planted bug: an unquantized operand left in fp32 under bf16 autocast."""
    return t.to(torch.float32).contiguous()


def _quantized_leak(t, bf16):
    """Planted bug: an unquantized operand quantized (MXFP4 along its rows) after all."""
    tf = M._triton_fast(t.device)
    v = tf.quantize_dequantize(t.contiguous(), "mxfp4", "ocp", rows=True)[0]
    return v if bf16 else v.float()


@pytest.mark.parametrize("bug,autocast,says", [
    (_fp32_leak, True, "multiplied as float32, not bfloat16"),
    (_bf16_leak, False, "multiplied as bfloat16, not float32"),
    (_quantized_leak, True, "differ from mxref"),
    (_quantized_leak, False, "differ from mxref")])
def test_validation_fails_on_a_wrongly_handled_unquantized_operand(monkeypatch, bug, autocast,
                                                                   says):
    monkeypatch.setattr(M, "_hp", bug)
    m = _pair("mxfp4-f")
    recs = _captured_checks(m, autocast)
    bad = {(r.gemm, r.operand) for r in recs if not r.ok and r.operand != "out"}
    assert bad == _UNQ["mxfp4-f"], [r for r in recs if not r.ok]
    assert all(says in r.detail for r in recs if not r.ok and r.operand != "out")
    # the quantized forward operands are untouched by the bug and still pass
    assert all(r.ok for r in recs if r.gemm == "fprop")


def test_validation_bound_fails_on_a_wrong_unquantized_gemm_output(monkeypatch):
    """A GEMM with unquantized operands whose recorded output is off by 2^-8 relative (far
    outside (C + 2) u |A||B|^T) fails the bound check; the operand checks still pass."""
    real = M._mm_out

    def off(a, b):
        out = real(a, b)
        return out * (1 + 2.0 ** -8) if a.dtype == torch.bfloat16 and \
            b.dtype == torch.bfloat16 and out.shape == (48, 64) else out

    monkeypatch.setattr(M, "_mm_out", off)
    m = _pair("mxfp4-f")
    capture_next(m)
    _autocast_fwd_bwd(m, torch.randn(48, 64))
    recs = check_capture(m, gemm_check="bound")
    bad = [(r.gemm, r.operand) for r in recs if not r.ok]
    assert bad == [("dgrad", "out")], [r for r in recs if not r.ok]


@pytest.mark.parametrize("recipe", ["mxfp4-fdw", "nvfp4-te"])
def test_fast_path_validation_fails_on_a_wrong_value(monkeypatch, recipe):
    """A planted bug in the fake-quantized values (one element's sign flipped in the row
    orientation) must fail the in-run check, naming the operand (NVFP4: the e2m1 x e4m3
    values)."""
    real = M._qdq

    def bad(t, specs, want_q, *rest):
        r, c, q, ts = real(t, specs, want_q, *rest)
        r = r.clone()
        r.view(-1)[5] = -r.view(-1)[5] if r.view(-1)[5] != 0 else 1.0
        return r, c, q, ts

    monkeypatch.setattr(M, "_qdq", bad)
    m = _pair(recipe)
    capture_next(m)
    _fwd_bwd(m, torch.randn(48, 64))
    recs = check_capture(m)
    bad_recs = [r for r in recs if not r.ok]
    assert bad_recs and {r.gemm for r in bad_recs} >= {"fprop"}
    assert any("values" in r.detail for r in bad_recs)


def test_shared_input_is_quantized_once_and_recomputed_after_an_inplace_edit(monkeypatch):
    calls = []
    real = M._qdq

    def counting(t, specs, want_q, *rest):
        calls.append(tuple(t.shape))
        return real(t, specs, want_q, *rest)

    monkeypatch.setattr(M, "_qdq", counting)
    q, k = _pair(seed=1), _pair(seed=2)
    x = torch.randn(40, 64)       # (the weights are [32, 64])
    yq, yk = q(x), k(x)           # like q_proj and k_proj reading one hidden state
    assert calls.count((40, 64)) == 1, calls
    with torch.no_grad():
        x.mul_(2.0)               # version counter moves: the cache must not be used
    yk2 = k(x)
    assert calls.count((40, 64)) == 2, calls
    M.FAST_PATH[0] = False
    try:
        want = k(x)
    finally:
        M.FAST_PATH[0] = True
    assert torch.equal(yk2, want) and not torch.equal(yk2, yk)
    del yq


def test_fast_path_under_autocast_returns_the_autocast_dtype():
    m = _pair()
    x = torch.randn(16, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and m.weight.grad.dtype == torch.float32
    assert torch.isfinite(x.grad).all() and m.weight.grad.abs().sum() > 0


_FUSED = ["mxfp4-fdw-h16", "mxfp4-fdw-rht", "mxfp4-fdw-sr"]


def _fused_calls(monkeypatch):
    """Record (rows, cols, rot_n, row_sr is set, col_sr is set) of every triton_train.qdq."""
    tt = M.Q.triton_module("triton_train", torch.device("cpu"))
    real = tt.qdq
    calls = []

    def counting(t, fmt, profile="ocp", **kw):
        calls.append((kw["rows"], kw["cols"], kw["rot_n"], kw.get("row_sr") is not None,
                      kw.get("col_sr") is not None))
        return real(t, fmt, profile, **kw)

    monkeypatch.setattr(tt, "qdq", counting)
    return calls


@pytest.mark.parametrize("recipe,want", [
    ("mxfp4-fdw-h16", [(True, True, 16, False, False)] * 3),
    # x and W round to nearest: triton_fast's plain launch; dy: one fused SR launch
    ("mxfp4-fdw-sr", [(True, True, 0, True, True)])])
def test_rotated_and_sr_recipes_take_one_fused_launch_per_tensor(monkeypatch, recipe, want):
    calls = _fused_calls(monkeypatch)
    M._X_CACHE.clear()
    _fwd_bwd(_pair(recipe), torch.randn(48, 64))
    assert calls == want


def test_a_rotated_axis_off_the_hadamard_size_falls_back_to_the_generic_path(monkeypatch):
    """T = 40 is not a multiple of 16: the generic path pads the rotation blocks, so the fast
    path must not run (no fused launch), and the result is the generic path's."""
    calls = _fused_calls(monkeypatch)
    m = _pair("mxfp4-fdw-h16")
    x0 = torch.randn(40, 64)
    fast = _fwd_bwd(m, x0, True)
    assert calls == []
    slow = _fwd_bwd(m, x0, False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow) if a is not None)


def test_a_fallback_inside_a_cuda_graph_capture_is_a_typed_error(monkeypatch):
    """Under --cuda-graph a layer whose shapes miss the fast path must not fall back to the
    generic path (host signs and syncs: the capture would fail with CUDA's own error)."""
    from mxkernels.training.errors import TrainingConfigError
    monkeypatch.setattr(M, "_capturing", lambda x: True)
    m = _pair("mxfp4-fdw-h16")
    with pytest.raises(TrainingConfigError, match=r"\(40, 64\).*mxfp4-fdw-h16.*--cuda-graph"):
        m(torch.randn(40, 64))
    m(torch.randn(48, 64))                # shapes that fit still run inside a capture


@pytest.mark.parametrize("recipe", _FUSED)
@pytest.mark.parametrize("autocast", [False, True])
def test_fused_recipes_capture_passes_against_mxref(recipe, autocast):
    m = _pair(recipe)
    m.layer_id, m.step = 1, 4
    recs = _captured_checks(m, autocast)
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    assert all("values" in r.detail for r in recs if r.operand != "out")
    cap = m._capture_done
    if recipe == "mxfp4-fdw-sr":
        seeds = [cap[g][s]["sr_seed"] for g in ("dgrad", "wgrad") for s in ("a", "b")]
        assert seeds[0] is not None and seeds[2] is not None and seeds[0] != seeds[2]
        assert seeds[1] is None and seeds[3] is None
    else:
        assert all(cap[g]["hadamard_n"] == 16 for g in ("fprop", "dgrad", "wgrad"))


@pytest.mark.parametrize("recipe,plant", [
    ("mxfp4-fdw-rht", "step"),       # the kernel draws last step's signs
    ("mxfp4-fdw-sr", "seed"),        # the kernel rounds dy with another layer's SR stream
    ("mxfp4-fdw-h16", "unrotated")])  # the kernel forgets to rotate the columns
def test_fused_validation_fails_on_a_planted_bug(monkeypatch, recipe, plant):
    real_args = M._launch_args
    tt = M.Q.triton_module("triton_train", torch.device("cpu"))
    real_qdq = tt.qdq
    if plant == "step":
        def args(o, layer):
            s, seed = real_args(o, layer)
            return (("random", s[1], s[2] + 1, s[3]) if s and s[0] == "random" else s), seed
        monkeypatch.setattr(M, "_launch_args", args)
    elif plant == "seed":            # the record keeps the right seed
        def qdq(t, fmt, profile="ocp", **kw):
            for k in ("row_sr", "col_sr"):
                if kw.get(k) is not None:
                    kw[k] += 1
            return real_qdq(t, fmt, profile, **kw)
        monkeypatch.setattr(tt, "qdq", qdq)
    else:
        def qdq(t, fmt, profile="ocp", **kw):
            kw["col_rot"] = False
            return real_qdq(t, fmt, profile, **kw)
        monkeypatch.setattr(tt, "qdq", qdq)
    m = _pair(recipe)
    m.layer_id, m.step = 1, 4
    recs = _captured_checks(m, False)
    bad = {(r.gemm, r.operand) for r in recs if not r.ok and r.operand != "out"}
    want = {"step": {("fprop", "x"), ("fprop", "W"), ("dgrad", "dy"), ("dgrad", "W^T"),
                     ("wgrad", "dy^T"), ("wgrad", "x^T")},
            "seed": {("dgrad", "dy"), ("wgrad", "dy^T")},
            "unrotated": {("dgrad", "W^T"), ("wgrad", "dy^T"), ("wgrad", "x^T")}}[plant]
    assert bad == want, [r for r in recs if not r.ok]


@pytest.fixture
def device_step():
    """The fused launches read the step from a (CPU) tensor, as under a CUDA graph."""
    st = M.use_device_step(torch.device("cpu"))
    yield st
    M.use_device_step(None)


@pytest.mark.parametrize("recipe", ["mxfp4-fdw-rht", "mxfp4-fdw-sr"])
def test_device_step_launches_are_bit_identical_to_the_generic_path(device_step, recipe):
    m = _pair(recipe)
    m.layer_id = 2
    M.set_step(m, 7)
    assert int(device_step[0]) == 7
    x0 = torch.randn(48, 64)
    fast = _fwd_bwd(m, x0, True)
    slow = _fwd_bwd(m, x0, False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow) if a is not None)
    # the kernels follow the tensor, not the argument: a stale tensor changes the result
    device_step.fill_(6)
    stale = _fwd_bwd(m, x0, True)
    assert not torch.equal(stale[2], slow[2])


def test_device_step_capture_passes_and_a_stale_step_fails(device_step):
    """In-run validation recomputes the seeds from the layer's step on the host: a device
    step left behind (no set_step) must fail the SR operands."""
    m = _pair("mxfp4-fdw-sr")
    m.layer_id = 1
    M.set_step(m, 4)
    recs = _captured_checks(m, False)
    assert all(r.ok for r in recs), [r for r in recs if not r.ok]
    m.step = 5                                   # the host moved on, the device did not
    recs = _captured_checks(m, False)
    bad = {(r.gemm, r.operand) for r in recs if not r.ok and r.operand != "out"}
    assert bad == {("dgrad", "dy"), ("wgrad", "dy^T")}, bad


def test_fp4_activations_saves_the_fp4_copy_not_the_wgrad_operand():
    """The forward keeps x as packed MXFP4 codes + scales for the backward (and W's Dgrad
    values), not a bf16 copy of x's Wgrad orientation."""
    m = _pair("fp4-activations", bias=False)
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t
    x = torch.randn(48, 64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
    y.sum().backward()
    assert (torch.uint8, (48, 32)) in saved and (torch.uint8, (48, 2)) in saved
    assert not any(sh == (48, 64) for _, sh in saved), saved


def test_fp4_activations_capture_checks_the_stored_copy_and_fails_on_a_planted_bug(monkeypatch):
    m = _pair("fp4-activations")
    recs = _captured_checks(m, True)
    assert len(recs) == 10 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    assert any(r.operand == "x^T (stored activation)" for r in recs)
    tf = M._triton_fast(torch.device("cpu"))
    real = tf.quantize_fast

    def rceil(t, fmt, profile="ocp", axis=-1, **kw):      # the copy under another scale rule
        return real(t, fmt, "rceil" if fmt == "mxfp4" else profile, axis, **kw)
    monkeypatch.setattr(tf, "quantize_fast", rceil)
    M._X_CACHE.clear()
    m = _pair("fp4-activations")
    recs = _captured_checks(m, False)
    bad = [r.operand for r in recs if not r.ok]
    assert "x^T (stored activation)" in bad, [r for r in recs if not r.ok]


def test_fp4_activations_with_an_odd_k_falls_back_to_the_generic_path():
    torch.manual_seed(0)
    m = MXLinear.from_linear(torch.nn.Linear(63, 32), "fp4-activations", backend="triton")
    x0 = torch.randn(48, 63)
    fast = _fwd_bwd(m, x0, True)
    slow = _fwd_bwd(m, x0, False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow) if a is not None)


# ---- Quartet: the backward quantizes the forward's copies ----------------------------------
def test_quartet_plan_quantizes_the_forward_copies_in_the_backward():
    p = M.fast_plan(get_recipe("quartet"))
    assert p["x"][1] is None and p["w"][1] is None        # no high-precision Wgrad / Dgrad copy
    assert (p["fx"].gemm, p["fx"].side, p["fx"].hadamard, p["fx"].n) == (2, 1, "random", 32)
    assert (p["fw"].gemm, p["fw"].side, p["fw"].hadamard, p["fw"].n) == (1, 1, "random", 32)
    assert p["unrot"] == {"fx": 32, "fw": 32} and p["unrot_signs"] is None   # H32 signs all +1
    # a forward copy under random forward signs, or one quantized with a correction, is left
    # to the generic path
    q = get_recipe("quartet")
    assert M.fast_plan(q.replace(name="qr", fprop=dataclasses.replace(
        q.fprop, hadamard="random"))) is None
    assert M.fast_plan(q.replace(name="qo", dgrad=dataclasses.replace(
        q.dgrad, b=dataclasses.replace(q.dgrad.b, outlier="block")))) is None


def test_quartet_takes_one_fused_launch_per_tensor_and_copy(monkeypatch):
    """x and W rotated along K in the forward; dy both orientations in one launch; the
    forward copies of W and x their column orientation each (rows, cols, rot_n, SR, SR)."""
    calls = _fused_calls(monkeypatch)
    M._X_CACHE.clear()
    _fwd_bwd(_pair("quartet"), torch.randn(64, 64))
    assert calls == [(True, False, 32, False, False), (True, False, 32, False, False),
                     (True, True, 32, False, False), (False, True, 32, False, False),
                     (False, True, 32, False, False)]


@pytest.mark.parametrize("autocast", [False, True])
def test_quartet_capture_passes_against_mxref_including_the_forward_copies(autocast):
    m = _pair("quartet")
    m.layer_id, m.step = 1, 4
    recs = _captured_checks(m, autocast, T=64)
    assert all(r.ok for r in recs), [r for r in recs if not r.ok]
    copies = [r for r in recs if "forward copy" in r.operand]
    assert {(r.gemm, r.operand) for r in copies} == {("dgrad", "W^T (forward copy)"),
                                                     ("wgrad", "x^T (forward copy)")}
    assert len(recs) == 11


def test_quartet_validation_fails_when_the_backward_reads_the_unquantized_tensor(monkeypatch):
    """Plant: the backward quantizes the high-precision W instead of the forward's copy (the
    forward saves W's bf16 value): the forward-copy check and Dgrad's W^T must fail."""
    real = M._MXLinearFastFn.forward

    def forward(ctx, x, weight, bias, layer, plan):
        out = real(ctx, x, weight, bias, layer, plan)
        xr = M._qdq(x.reshape(-1, x.shape[-1]), plan["x"], False, layer)[0]   # as saved
        ctx.save_for_backward(xr, weight.detach().to(torch.bfloat16), None, None)
        return out
    monkeypatch.setattr(M._MXLinearFastFn, "forward", staticmethod(forward))
    m = _pair("quartet")
    recs = _captured_checks(m, False, T=64)
    bad = {(r.gemm, r.operand) for r in recs if not r.ok}
    assert ("dgrad", "W^T (forward copy)") in bad, bad


def test_quartet_without_the_rotation_back_differs_from_the_generic_path(monkeypatch):
    """Plant: dx and dW left in the forward's rotated basis. The in-run check holds the
    GEMM's own output (before the rotation back, as the generic path records it), so the
    bit-identity with the generic path is what catches this."""
    m = _pair("quartet")
    x0 = torch.randn(64, 64)
    slow = _fwd_bwd(m, x0, False)
    monkeypatch.setattr(M, "_gemm", lambda a, b, dtype, ac, alpha=None, n=0, signs=None,
                        carried=False: M._mm(a, b, dtype, ac))
    fast = _fwd_bwd(m, x0, True)
    assert torch.equal(fast[0], slow[0])
    assert not torch.equal(fast[1], slow[1]) and not torch.equal(fast[2], slow[2])


# ---- NVFP4 (nvfp4-te): two-level scales, the tensor scale in the GEMM epilogue ------------
def _nvfp4_calls(monkeypatch, plant=None):
    """Record (rows, cols, rot_n, col_rot, row SR, col SR) of every triton_train_nvfp4.qdq;
    ``plant`` may rewrite a launch's results."""
    tn = M.Q.triton_module("triton_train_nvfp4", torch.device("cpu"))
    real = tn.qdq
    calls = []

    def counting(t, profile="te_nvfp4", **kw):
        calls.append((kw["rows"], kw["cols"], kw["rot_n"], kw["col_rot"],
                      kw.get("row_sr") is not None, kw.get("col_sr") is not None))
        out = real(t, profile, **kw)
        return out if plant is None else plant(out)

    monkeypatch.setattr(tn, "qdq", counting)
    return calls


def test_nvfp4_te_takes_one_nvfp4_launch_per_tensor(monkeypatch):
    """x: rows (Fprop) + columns with TE's RHT16 (Wgrad); W: rows + columns; dy: rows with SR
    (Dgrad) + columns with RHT16 and SR (Wgrad)."""
    calls = _nvfp4_calls(monkeypatch)
    M._X_CACHE.clear()
    _fwd_bwd(_pair("nvfp4-te"), torch.randn(64, 64))
    assert calls == [(True, True, 16, True, False, False), (True, True, 0, False, False, False),
                     (True, True, 16, True, True, True)]


@pytest.mark.parametrize("autocast", [False, True])
def test_nvfp4_te_capture_passes_against_mxref_with_the_tensor_scales(autocast):
    m = _pair("nvfp4-te")
    m.layer_id, m.step = 1, 4
    recs = _captured_checks(m, autocast, T=64)
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    assert all("tensor_scale" in r.detail and "values" in r.detail
               for r in recs if r.operand != "out")
    cap = m._capture_done
    assert cap["wgrad"]["hadamard_n"] == 16 and cap["fprop"].get("signs") is None
    # the rotated Wgrad operands have their own tensor scale, not the unrotated tensor's
    assert cap["wgrad"]["b"]["tensor_scale"] != cap["fprop"]["a"]["tensor_scale"]


def test_nvfp4_validation_fails_when_the_columns_take_the_rows_tensor_scale(monkeypatch):
    """Plant: every launch reports the rows' T for the columns (the amax of the unrotated
    tensor for the rotated Wgrad operands): their tensor_scale checks and the Wgrad output
    must fail; Fprop must still pass."""
    def plant(out):
        rv, cv, q, ts = out
        return rv, cv, q, torch.stack((ts[0], ts[0]))
    _nvfp4_calls(monkeypatch, plant)
    m = _pair("nvfp4-te")
    recs = _captured_checks(m, False, T=64)
    bad = {(r.gemm, r.operand) for r in recs if not r.ok}
    assert {("wgrad", "dy^T"), ("wgrad", "x^T"), ("wgrad", "out")} <= bad, bad
    assert not any(g == "fprop" for g, _ in bad), bad


def test_nvfp4_with_k_off_the_block_size_falls_back_to_the_generic_path(monkeypatch):
    calls = _nvfp4_calls(monkeypatch)
    m = _pair("nvfp4-te", K=40)
    x0 = torch.randn(64, 40)
    fast = _fwd_bwd(m, x0, True)
    assert calls == []
    slow = _fwd_bwd(m, x0, False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow) if a is not None)


def test_a_forward_copy_under_fixed_signs_is_rotated_back_with_them():
    """Quartet with TE's fixed-sign H16 in the forward (signs with -1s): the rotation back
    applies them (plan["unrot_signs"]), bit-identical to the generic path."""
    q = get_recipe("quartet")
    r = q.replace(name="q-te16", fprop=dataclasses.replace(q.fprop, hadamard="fixed_sign",
                                                            hadamard_n=16))
    p = M.fast_plan(r)
    assert p["unrot"] == {"fx": 16, "fw": 16} and (p["unrot_signs"] < 0).any()
    m = _pair(r)
    m.layer_id, m.step = 1, 3
    x0 = torch.randn(64, 64)
    fast = _fwd_bwd(m, x0, True)
    slow = _fwd_bwd(m, x0, False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow) if a is not None)


def test_quartet_rotates_dx_and_dw_back_to_bf16_in_one_pass(monkeypatch):
    """Under bf16 autocast with a bf16 input (o_proj's and down_proj's in a llama), quartet's
    dx is rotated back and rounded to bf16 by one triton_rotate launch (out_dtype bfloat16):
    bit for bit what the fp32 rotation followed by .to(bfloat16) gave (the launcher wrapped to
    do that is the reference). dW (fp32 like the weight) keeps the fp32 rotation."""
    from mxkernels.training import quant as Q
    rot = Q.triton_module("triton_rotate", torch.device("cpu"))
    real = rot.rotate
    seen = []

    def one_pass(t, n, **kw):
        seen.append(kw.get("out_dtype"))
        return real(t, n, **kw)

    def two_pass(t, n, round_to="float32", out_dtype=torch.float32, **kw):
        return real(t, n, **kw).to(out_dtype)

    x0 = torch.randn(96, 64).to(torch.bfloat16)
    got = {}
    for name, f in (("one", one_pass), ("two", two_pass)):
        monkeypatch.setattr(rot, "rotate", f)
        m = _pair("quartet", bias=False)
        m.layer_id, m.step = 2, 7
        x = x0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(x)
        (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        got[name] = (x.grad, m.weight.grad)
    assert seen == [torch.bfloat16, None]           # dx in one pass, dW in fp32
    for a, b in zip(got["one"], got["two"]):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_orientations_with_different_sr_streams_take_separate_launches(monkeypatch):
    """dy's rows (dgrad, four words) and columns (wgrad, one word) draw different streams:
    one launch each, and the in-run checks (mxref with each operand's stream) pass."""
    import dataclasses
    from mxkernels.training.recipes import get_recipe
    r = get_recipe("mxfp4-fdw-sr")
    r = r.replace(name="sr-mixed", wgrad=dataclasses.replace(
        r.wgrad, a=dataclasses.replace(r.wgrad.a, sr_words=1)))
    tt = M.Q.triton_module("triton_train", torch.device("cpu"))
    real = tt.qdq
    words = []

    def counting(t, *a, **kw):
        if kw.get("row_sr") or kw.get("col_sr"):
            words.append((bool(kw.get("row_sr")), bool(kw.get("col_sr")), kw["sr_words"]))
        return real(t, *a, **kw)

    monkeypatch.setattr(tt, "qdq", counting)
    m = _pair(r)
    recs = _captured_checks(m, autocast=False, T=64)
    assert sorted(words) == [(False, True, 1), (True, False, 4)]
    assert recs and all(r.ok for r in recs), [r for r in recs if not r.ok]
