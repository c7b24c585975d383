"""mit-han-lab/fouroversix as a verify backend: its PyTorch reference, run on the CPU.

fouroversix 1.0.5 installs from the package index without its CUDA extension
(``SKIP_CUDA_BUILD=1 pip install --no-build-isolation fouroversix==1.0.5``; its setup.py
imports torch, hence no build isolation). Its reference quantizer,
``fouroversix.quantize.pytorch.reference.quantize_to_fp4``, is plain PyTorch and runs on the
CPU. Per tensor ``x`` ``[R, C]`` (one of the ``T`` tensors of ``src``), the adapter calls::

    quantize_to_fp4(x, fp4_format=DataType.nvfp4, scale_rule=R, round_style=nearest,
                    pack_values=True, use_blackwell_scale_layout=False)

with ``R = ScaleRule.static_6`` for ``quantize_nvfp4`` (plain NVFP4, E4M3 bound 448) and
``ScaleRule.mse`` for ``quantize_4over6`` (Four-over-Six, bound 256). Codes are its packed
nibbles unpacked (element 0 low), scales its ``float8_e4m3fn`` bytes. fouroversix returns the
tensor amax, not a decode scale; ``tensor_scale`` is the ``decode_scale`` its
``quantize_to_nvfp4`` computes from that amax, ``1 / (fl(6 * B) / amax)`` in fp32, evaluated with
the same torch expression. ``choice`` (4 or 6 per block) is read off the scale fouroversix kept:
4 where it equals the map-to-4 candidate ``quantize_to_nvfp4(..., scale_expansion_factor=1.5)``
and differs from the map-to-6 one, else 6 (equal candidates are the profile's tie, 6).

It claims ``te_nvfp4``, the profile it is nearest; conformance/expectations/fouroversix.toml
lists where it differs.
"""
from __future__ import annotations

import numpy as np

from .base import BackendUnavailable, Unsupported
from .peers import _check_src, _CpuPeer, _to_torch, _unpack_fp4


class FouroversixBackend(_CpuPeer):
    """fouroversix's PyTorch reference NVFP4 / Four-over-Six quantizer (module docstring)."""

    name = dist = "fouroversix"
    ops = frozenset({"quantize_nvfp4", "quantize_4over6"})
    profiles = ("te_nvfp4",)

    def check_available(self) -> None:
        try:
            import torch  # noqa: F401
            from fouroversix.quantize.pytorch import reference  # noqa: F401
            from fouroversix.utils import DataType, RoundStyle, ScaleRule  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
            raise BackendUnavailable(
                f"fouroversix is not importable ({type(e).__name__}: {e}); SKIP_CUDA_BUILD=1 pip "
                "install --no-build-isolation fouroversix==1.0.5") from None

    def describe(self) -> dict:
        try:
            import torch
            runtime = f"torch {torch.__version__}"
        except ImportError:
            runtime = "torch unavailable"
        return {**super().describe(), "runtime": runtime,
                "path": "fouroversix.quantize.pytorch.reference.quantize_to_fp4, CPU"}

    def _run(self, src, src_dtype, four_over_six: bool):
        import torch
        from fouroversix.quantize.pytorch.reference import (
            quantize_to_fp4,
            quantize_to_nvfp4,
        )
        from fouroversix.utils import DataType, RoundStyle, ScaleRule
        src = _check_src(src, src_dtype)
        if src.ndim != 3 or src.shape[-1] % 16:
            raise Unsupported(f"takes [T, R, C] with C % 16 == 0, got {src.shape}")
        T, R, C = src.shape
        rule = ScaleRule.mse if four_over_six else ScaleRule.static_6
        bound = 256 if four_over_six else 448
        scales = np.zeros((T, R, C // 16), np.uint8)
        codes = np.zeros((T, R, C), np.uint8)
        ts = np.zeros(T, np.uint32)
        choice = np.full((T, R, C // 16), 6, np.uint8)
        if R == 0 or C == 0:
            return scales, codes, ts, choice
        for i in range(T):
            x = _to_torch(src[i], src_dtype)
            q, s, amax = quantize_to_fp4(x, fp4_format=DataType.nvfp4, scale_rule=rule,
                                         round_style=RoundStyle.nearest, pack_values=True,
                                         use_blackwell_scale_layout=False)
            codes[i] = _unpack_fp4(q.contiguous().view(torch.uint8).numpy().reshape(R, C // 2))
            scales[i] = s.contiguous().view(torch.uint8).numpy().reshape(R, C // 16)
            decode = 1 / (torch.tensor(6 * bound, dtype=amax.dtype) / amax)
            ts[i] = np.float32(decode.to(torch.float32).item()).view(np.uint32)
            if four_over_six:
                blocks = x.reshape(-1, 16).float()
                _, s6 = quantize_to_nvfp4(blocks, amax, scale_rule=rule)
                _, s4 = quantize_to_nvfp4(blocks, amax, scale_rule=rule, scale_expansion_factor=1.5)
                s6, s4 = (a.view(torch.uint8).numpy().reshape(R, C // 16) for a in (s6, s4))
                choice[i] = np.where((scales[i] == s4) & (scales[i] != s6), 4, 6)
        return scales, codes, ts, choice

    def quantize_nvfp4(self, src, *, src_dtype, profile=None):
        return self._run(src, src_dtype, False)[:3]

    def quantize_4over6(self, src, *, src_dtype, profile=None):
        return self._run(src, src_dtype, True)
