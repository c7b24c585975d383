"""torchao ``to_mx`` under ``torch.compile`` on a device: the torchao path production training
uses (``MXLinear`` compiles it), as verify backends with a timing entry.

``torchao-compiled`` (FLOOR, claims ``torchao_floor``), ``torchao-compiled-rceil``
(``torchao_rceil``), ``torchao-compiled-ceil`` (``torchao_ceil``), ``torchao-compiled-even``
(``torchao_even``): ``torch.compile(lambda x: to_mx(x, elem_dtype, 32, mode))`` on the backend's
device (``cuda`` by default; ``cpu`` works where inductor has a C++ compiler).

``quantize_mx`` (what ``mxref verify`` checks) runs the SAME compiled function as the timing
entry: the bit patterns go to the device as a tensor, the block axis is moved last and
zero-padded to a multiple of 32 (as the eager adapter ``mxref.backends.peers._Torchao`` does;
+0 does not change an amax), the compiled ``to_mx`` runs there, and the scale bytes / element
codes come back (FP4 unpacked from torchao's two-per-byte, element 0 in the low nibble). Each
golden file's shape is its own compile (dynamo's recompile limit is raised, so no shape falls
back to eager silently).

``timed_quantize_mx(x, fmt, profile, axis)`` (mxref/backends/base.py): ``x`` a bf16/fp32 device
tensor ``[R, C]`` with ``C % 32 == 0``, blocks along the last axis only (torchao's ``to_mx``
blocks the last dimension; a column-wise quantize would add a transpose the other stacks do not
pay, so axis 0 is Unsupported and listed "not timed"). ``run()`` returns torchao's own outputs:
``float8_e8m0fnu`` scales ``[R, C/32]`` and the element tensor (FP4 packed two per byte,
``[R, C/2]``; FP8 ``[R, C]``), untouched.
"""
from __future__ import annotations

from .base import Backend, BackendUnavailable, Unsupported
from .peers import _TORCHAO_FORMATS, _check_src, _fmt, _torchao_elem_dtype, torchao_blocks


class _TorchaoCompiled(Backend):
    mode = "FLOOR"
    ops = frozenset({"quantize_mx"})
    profiles: tuple = ()
    block_size = 32

    def __init__(self, device: str | None = None, compile: bool = True):
        self._device = device or "cuda"
        self.device = self._device
        self._compile = compile
        self._fns = {}
        try:
            from importlib.metadata import version
            self.version = version("torchao")
        except Exception:  # noqa: BLE001 - no package metadata (a copy on PYTHONPATH) or absent
            # (records made on 2026-11-27 say "unavailable" here for a metadata-less copy of
            # torchao 0.18.0 that did run: the label never meant it was missing)
            self.version = "version-unknown"

    def check_available(self) -> None:
        try:
            import torch
            from torchao.prototype.mx_formats import mx_tensor  # noqa: F401
            from torchao.prototype.mx_formats.config import ScaleCalculationMode
        except Exception as e:  # noqa: BLE001 - torchao's import can fail in many ways
            raise BackendUnavailable(f"torchao is not importable: {type(e).__name__}: {e}") \
                from None
        if not hasattr(ScaleCalculationMode, self.mode):
            raise BackendUnavailable(f"torchao {self.version} has no ScaleCalculationMode."
                                     f"{self.mode}")
        if str(self._device).startswith("cuda") and not torch.cuda.is_available():
            raise BackendUnavailable(f"{self.name}: device {self._device!r} but torch sees no "
                                     "GPU")

    def describe(self) -> dict:
        import torch
        return {**super().describe(), "runtime": f"torch {torch.__version__}",
                "scale_mode": f"ScaleCalculationMode.{self.mode}",
                "path": f"torch.compile(to_mx) on {self._device}" if self._compile else
                f"to_mx eager on {self._device} (compile off)"}

    def _fn(self, fmt: str):
        """The (compiled) to_mx of `fmt` in this backend's mode, made once."""
        if fmt not in self._fns:
            import torch
            from torchao.prototype.mx_formats.config import ScaleCalculationMode
            from torchao.prototype.mx_formats.mx_tensor import to_mx
            elem = _torchao_elem_dtype(fmt)
            mode = getattr(ScaleCalculationMode, self.mode)
            bs = self.block_size

            def q(x):
                return to_mx(x, elem, bs, mode)
            if self._compile:
                cfg = torch._dynamo.config
                for k in ("cache_size_limit", "recompile_limit"):
                    if hasattr(cfg, k):
                        setattr(cfg, k, max(getattr(cfg, k), 256))
                q = torch.compile(q, fullgraph=True)
            self._fns[fmt] = q
        return self._fns[fmt]

    def _check(self, fmt):
        f = _fmt(fmt)
        if fmt not in _TORCHAO_FORMATS:
            raise Unsupported(f"torchao to_mx has no element dtype for {f.name}")

    # ---- verify: the same compiled function, numpy in and out -------------------------------
    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        self.check_available()
        src = _check_src(src, src_dtype)
        self._check(fmt)
        return torchao_blocks(src, src_dtype, fmt, axis, self.block_size, self._fn(fmt),
                              device=self._device)

    # ---- the timing entry ----------------------------------------------------------------
    def timed_quantize_mx(self, x, *, fmt, profile=None, axis=-1):
        import torch
        self.check_available()
        self._check(fmt)
        if axis not in (-1, x.dim() - 1):
            raise Unsupported("torchao to_mx blocks the last axis only (a column-wise "
                              "quantize needs a transpose first)")
        if x.dtype not in (torch.bfloat16, torch.float32):
            raise Unsupported(f"torchao to_mx takes bfloat16 or float32, not {x.dtype}")
        if x.shape[-1] % self.block_size:
            raise Unsupported(f"last axis {x.shape[-1]} is not a multiple of "
                              f"{self.block_size}")
        fn = self._fn(fmt)
        fn(x)                               # compile outside the timed region

        def run():
            s, d = fn(x)
            return s, d
        return run


class TorchaoCompiledFloor(_TorchaoCompiled):
    name = "torchao-compiled"
    mode = "FLOOR"
    profiles = ("torchao_floor",)


class TorchaoCompiledRceil(_TorchaoCompiled):
    name = "torchao-compiled-rceil"
    mode = "RCEIL"
    profiles = ("torchao_rceil",)


class TorchaoCompiledCeil(_TorchaoCompiled):
    name = "torchao-compiled-ceil"
    mode = "CEIL"
    profiles = ("torchao_ceil",)


class TorchaoCompiledEven(_TorchaoCompiled):
    name = "torchao-compiled-even"
    mode = "EVEN"
    profiles = ("torchao_even",)
