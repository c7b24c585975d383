"""The error arms of the RL loop: fake-quantized linear layers whose GEMM operands carry
exactly one chosen error.

Every quantized arm quantizes both operands of each decoder-layer linear's forward GEMM (the
weight [out, in] and the activation [tokens, in], MXFP4 blocks of 32 along ``in``, the
contraction axis), under mxref's ``ocp`` profile (E8M0 floor scale, RNE, saturate). The
backward is straight-through: ``y = x_q @ w_q^T`` with ``x_q = x + (Q(x) - x).detach()``, so
dgrad uses ``w_q`` and wgrad uses ``x_q`` (the quantized operands), and the incoming gradient
is not quantized. The ``bf16`` arm rounds both operands to bf16 (RNE) the same way.

Component-isolated arms (mxref.decompose's exact three-way split, module doc there)::

    Q_s(x) - x = e_scale + e_dead + e_grid      (exactly)
    scale-only:  x + e_scale = Q_s(x) - e_dead - e_grid
    dead-only:   x + e_dead  = Q_s(x) - e_scale - e_grid   (deadzone elements -> 0, else x)
    grid-only:   x + e_grid  = Q_s(x) - e_scale - e_dead   (Q_{s*}(x) off the deadzone, else x)

:func:`components` computes the components in torch on any device with the same float64
operations as ``mxref.decompose.decompose_quantized`` (``M_odd * component``, M_odd = 3 for
E2M1, each an exact float64 value: mxref's docs/decompose.md proof), from
``mxkernels.torch_fast.quantize_mx`` (bit-exact with mxref.quantize) and the ideal codes
``R(|v| M / A)``: ``|v| * 6`` is exact in float64 and the one float64 division by ``A`` lands
on an E2M1 rounding boundary (a multiple of 1/4) only when the true quotient is one (its
distance to a boundary is >= 2^-26 relative otherwise), so RNE on the float64 quotient gives
the exact rounding. tests/test_rl.py checks every exact_* array equal to mxref.decompose's,
bit for bit. The isolated operand is ``(M_odd x + exact_c) / M_odd`` rounded once to fp64,
then to fp32 (the GEMM's operand dtype): no approximation beyond that final rounding.

Corrections: macro-block scaling (mxref.corrections.quantize_macroblock, macro 128, float32
S_M; torch_fast.macro_scales), outlier fallback (quantize_outlier_fallback, rule 'block',
tau 10, rho 8: a flagged block stays bf16), both (flags on x, the rest macro-block scaled),
and AQN (mxref.corrections.aqn_sigma / aqn_apply on the RMSNorm weights, see loop.py).
tests/test_rl.py checks the torch corrections equal mxref's dequantized values.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mxkernels.torch_fast import flag_blocks, macro_scales, quantize_mx
from mxref.profiles import get_profile

FMT = "mxfp4"
BLOCK = 32
M_ODD = 3            # E2M1 max 6 = 3 * 2^1
E_M = 1
MACRO = 128
TAU, RHO = 10.0, 8

# arm -> (operand quantizer, AQN on?)
ARMS = {
    "bf16": ("bf16", False),
    "mxfp4": ("mxfp4", False),
    "scale-only": ("scale", False),
    "dead-only": ("dead", False),
    "grid-only": ("grid", False),
    "macro": ("macro", False),
    "outlier": ("outlier", False),
    "aqn": ("mxfp4", True),
    "all3": ("macro+outlier", True),
}
ARM_NOTES = {
    "bf16": "operands rounded to bf16 (the baseline)",
    "mxfp4": "plain MXFP4 (ocp, floor scale, RNE) on weights and activations",
    "scale-only": "x + e_scale: MXFP4 with the exact deadzone and grid errors added back",
    "dead-only": "x + e_dead: only the deadzone truncation (|x| < A/24 -> 0)",
    "grid-only": "x + e_grid: the ideal-scale quantizer's rounding off the deadzone",
    "macro": "MXFP4 with macro-block scaling (macro 128, fp32 S_M)",
    "outlier": "MXFP4 with outlier fallback (block rule, tau 10, rho 8 -> bf16)",
    "aqn": "plain MXFP4 + AQN noise on the RMSNorm weights (QeRL schedule)",
    "all3": "macro-block + outlier fallback + AQN",
}
_PROF = None


def profile():
    global _PROF
    if _PROF is None:
        _PROF = get_profile("ocp")
    return _PROF


def _pad_blocks(t: torch.Tensor):
    nb = -(-t.shape[1] // BLOCK)
    pad = nb * BLOCK - t.shape[1]
    return (torch.nn.functional.pad(t, (0, pad)) if pad else t), nb, pad


def mx_values(t: torch.Tensor) -> torch.Tensor:
    """Q_s(t): MXFP4 dequantized values (fp32, exact) of the 2-D fp32 ``t`` along its last
    axis: torch_fast.quantize_mx, or torch_emu (the integer emulator) outside its domain."""
    r = quantize_mx(t, FMT, profile())
    if r is not None:
        return r[2]
    # outside the fast path's domain (tiny / non-finite blocks): mxref itself, on the host
    from mxref.quantize import quantize

    v = quantize(t.detach().cpu().numpy(), FMT, "ocp", axis=-1).dequantize()
    return torch.from_numpy(v.astype("float32")).to(t.device)


def block_amax(t: torch.Tensor) -> torch.Tensor:
    """[R, C] fp32: each element's block amax (finite elements only)."""
    x, nb, _ = _pad_blocks(t)
    a = torch.where(torch.isfinite(x), x.abs(), torch.zeros((), dtype=x.dtype, device=x.device))
    am = a.reshape(x.shape[0], nb, BLOCK).amax(-1, keepdim=True)
    return am.expand(-1, -1, BLOCK).reshape(x.shape[0], -1)[:, :t.shape[1]]


def ideal_magnitude(t: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """R(|t| * 6 / A) on the E2M1 grid, RNE (float64 values 0, 0.5, ..., 6; 0 where A = 0)."""
    a64 = amax.double()
    q = t.double().abs() * 6.0 / torch.where(a64 > 0, a64, torch.ones_like(a64))
    quantum = torch.where(q < 2, 0.5, torch.where(q < 4, 1.0, 2.0))
    r = torch.clamp(torch.round(q / quantum) * quantum, max=6.0)
    return torch.where(a64 > 0, r, torch.zeros_like(r))


@dataclass
class Components:
    """M_odd-scaled exact components (float64), as mxref.decompose's exact_* fields."""

    dx: torch.Tensor          # M_odd * x
    dq: torch.Tensor          # M_odd * Q_s(x)
    exact_scale: torch.Tensor
    exact_dead: torch.Tensor
    exact_grid: torch.Tensor
    deadzone: torch.Tensor
    q: torch.Tensor           # Q_s(x), fp32

    def isolated(self, which: str) -> torch.Tensor:
        """x + e_which as fp32 (``(M_odd x + exact_which) / M_odd`` rounded once, then fp32)."""
        ex = {"scale": self.exact_scale, "dead": self.exact_dead, "grid": self.exact_grid}[which]
        return ((self.dx + ex) / M_ODD).to(torch.float32)


def components(t: torch.Tensor) -> Components:
    """The exact decomposition of MXFP4(ocp) quantization of the finite 2-D fp32 ``t``."""
    q = mx_values(t)
    amax = block_amax(t)
    r = ideal_magnitude(t, amax)
    # M_odd * Q_{s*}(x) = A * R * 2^-e_m (mxref.decompose.ideal_scaled): exact in float64
    dqs = amax.double() * (r * 2.0 ** -E_M)
    dqs = torch.where(torch.signbit(t), -dqs, dqs)
    dx = t.double() * M_ODD
    dq = q.double() * M_ODD
    dead = (t != 0) & (r == 0)
    ex_scale = dq - dqs
    ex_dead = torch.where(dead, -dx, torch.zeros_like(dx))
    ex_grid = torch.where(dead, torch.zeros_like(dx), dqs - dx)
    return Components(dx, dq, ex_scale, ex_dead, ex_grid, dead, q)


def outlier_flags(t: torch.Tensor) -> torch.Tensor:
    """[R, C] passthrough mask of mxref.corrections.quantize_outlier_fallback(rule='block',
    tau=10, rho=8): a block is flagged when it is all finite with amax > 0 and (amax >
    fl64(tau * lower median |x|) or more than rho nonzero elements in the ideal deadzone)."""
    _, flagged = flag_blocks(t, BLOCK, TAU)
    r = ideal_magnitude(t, block_amax(t))
    x, nb, _ = _pad_blocks(((t != 0) & (r == 0)).to(torch.int32))
    n_dead = x.reshape(t.shape[0], nb, BLOCK).sum(-1)
    a3 = _pad_blocks(t)[0].reshape(t.shape[0], nb, BLOCK)
    amax = a3.abs().amax(-1)
    finite = torch.isfinite(a3).all(-1)
    flagged = flagged | ((n_dead > RHO) & finite & (amax > 0))
    return flagged.unsqueeze(-1).expand(-1, -1, BLOCK).reshape(t.shape[0], -1)[:, :t.shape[1]]


def macro_values(t: torch.Tensor) -> torch.Tensor:
    """mxref.corrections.quantize_macroblock(macro=128, float32).dequantize(): S_M * Q(x/S_M)."""
    C = t.shape[1]
    m = MACRO if C >= MACRO and C % MACRO == 0 else C      # 'row' when C is not a multiple
    s = macro_scales(t, m, M_ODD, 24)
    srep = s.repeat_interleave(m, dim=1)[:, :C]
    return mx_values(t / srep) * srep


def outlier_values(t: torch.Tensor, inner=mx_values) -> torch.Tensor:
    """quantize_outlier_fallback(rule='block', tau=10, rho=8).dequantize(): flagged blocks bf16
    (RNE), the others ``inner`` (MXFP4; for 'block' the rest of a flagged block is empty)."""
    pt = outlier_flags(t)
    return torch.where(pt, t.to(torch.bfloat16).to(torch.float32), inner(t))


def operand_values(t: torch.Tensor, kind: str) -> torch.Tensor:
    """The value the GEMM multiplies for a 2-D fp32 operand under quantizer ``kind``."""
    if kind == "none":
        return t
    if kind == "bf16":
        return t.to(torch.bfloat16).to(torch.float32)
    if kind == "mxfp4":
        return mx_values(t)
    if kind in ("scale", "dead", "grid"):
        return components(t).isolated(kind)
    if kind == "macro":
        return macro_values(t)
    if kind == "outlier":
        return outlier_values(t)
    if kind == "macro+outlier":
        return outlier_values(t, inner=macro_values)
    raise ValueError(f"unknown operand quantizer {kind!r}")


class QuantState:
    """Shared switch of all FakeQuantLinear layers of one model: the quantizer in force
    (``kind``), the weight cache used while weights are frozen (rollouts), and the capture of
    operands for the decomposition log."""

    def __init__(self):
        self.kind = "none"
        self.cache_weights = False
        self.capture: dict | None = None


class FakeQuantLinear(nn.Module):
    """nn.Linear (no bias) whose forward GEMM multiplies quantized operands (STE backward)."""

    def __init__(self, linear: nn.Linear, state: QuantState, name: str):
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.state = state
        self.qname = name
        self._wcache = None

    def _wq(self):
        st = self.state
        if st.cache_weights and self._wcache is not None and self._wcache[0] == st.kind:
            return self._wcache[1]
        w = self.weight
        wq = w + (operand_values(w.detach(), st.kind) - w).detach() if st.kind != "none" else w
        if st.cache_weights:
            self._wcache = (st.kind, wq.detach())
        else:
            self._wcache = None
        return wq

    def forward(self, x):
        st = self.state
        shp = x.shape
        x2 = x.reshape(-1, shp[-1])
        if st.capture is not None and self.qname in st.capture.get("names", ()):
            st.capture[self.qname] = (x2.detach()[:256].float().cpu(),
                                      self.weight.detach().float().cpu())
        if st.kind != "none":
            x2 = x2 + (operand_values(x2.detach().float(), st.kind) - x2).detach()
        y = torch.nn.functional.linear(x2, self._wq(), self.bias)
        return y.reshape(*shp[:-1], y.shape[-1])


def swap_linears(model: nn.Module, state: QuantState) -> list[str]:
    """Replace the decoder-layer nn.Linear modules (q, k, v, o, gate, up, down) by
    FakeQuantLinear sharing ``state``; embeddings and lm_head stay full precision."""
    from mxkernels.training.models import quantizable_linear_filter

    names = [n for n, m in model.named_modules() if quantizable_linear_filter(n, m)]
    for n in names:
        parent, _, leaf = n.rpartition(".")
        pm = model.get_submodule(parent)
        setattr(pm, leaf, FakeQuantLinear(getattr(pm, leaf), state, n))
    return names
