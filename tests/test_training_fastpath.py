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


def test_plan_covers_exactly_the_plain_mx_recipes():
    took = {name for name, r in RECIPES.items() if M.fast_plan(r) is not None}
    assert took == {"mxfp4-fdw"}, took
    # a custom all-MXFP8 recipe qualifies; SR, a rotation or one bf16 operand does not
    base = get_recipe("mxfp4-fdw")
    f8 = dataclasses.replace(base.fprop.a, fmt="mxfp8_e4m3")
    r8 = base.replace(name="f8", fprop=base.fprop.__class__(f8, f8),
                      dgrad=base.dgrad.__class__(f8, f8), wgrad=base.wgrad.__class__(f8, f8))
    assert M.fast_plan(r8) is not None
    sr = base.replace(name="sr", dgrad=dataclasses.replace(
        base.dgrad, a=dataclasses.replace(base.dgrad.a, rounding="sr")))
    assert M.fast_plan(sr) is None
    h = base.replace(name="h", wgrad=dataclasses.replace(base.wgrad, hadamard="deterministic",
                                                         hadamard_n=16))
    assert M.fast_plan(h) is None
    assert M.fast_plan(get_recipe("mxfp4-fd")) is None      # bf16 wgrad operands


@pytest.mark.parametrize("bias", [True, False])
def test_fast_path_is_bit_identical_to_the_generic_path_in_fp32(bias):
    m = _pair(bias=bias)
    x0 = torch.randn(3, 40, 64)
    fast = _fwd_bwd(m, x0, True)
    slow = _fwd_bwd(m, x0, False)
    for a, b in zip(fast, slow):
        if a is not None:
            assert a.dtype == b.dtype and torch.equal(a, b)


def test_fast_path_capture_passes_against_mxref_and_records_the_values():
    m = _pair()
    capture_next(m)
    _fwd_bwd(m, torch.randn(48, 64))
    recs = check_capture(m)
    assert len(recs) == 9 and all(r.ok for r in recs), [r for r in recs if not r.ok]
    quant = [r for r in recs if r.operand != "out"]
    assert all("values" in r.detail for r in quant), [r.detail for r in quant]
    assert m._capture is None and m._capture_done["complete"]


def test_fast_path_validation_fails_on_a_wrong_value(monkeypatch):
    """A planted bug in the fake-quantized values (one element's sign flipped in the row
    orientation) must fail the in-run check, naming the operand."""
    real = M._qdq

    def bad(t, specs, want_q):
        r, c, q = real(t, specs, want_q)
        r = r.clone()
        r.view(-1)[5] = -r.view(-1)[5] if r.view(-1)[5] != 0 else 1.0
        return r, c, q

    monkeypatch.setattr(M, "_qdq", bad)
    m = _pair()
    capture_next(m)
    _fwd_bwd(m, torch.randn(48, 64))
    recs = check_capture(m)
    bad_recs = [r for r in recs if not r.ok]
    assert bad_recs and {r.gemm for r in bad_recs} >= {"fprop"}
    assert any("values" in r.detail for r in bad_recs)


def test_shared_input_is_quantized_once_and_recomputed_after_an_inplace_edit(monkeypatch):
    calls = []
    real = M._qdq

    def counting(t, specs, want_q):
        calls.append(tuple(t.shape))
        return real(t, specs, want_q)

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
