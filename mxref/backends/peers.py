"""Third-party stacks as verify backends: ml_dtypes, torchao (four scale modes), TransformerEngine.

Each adapter wraps one fixed behaviour of a stack that mxref does not control, so ``profiles``
names what the stack natively does and ``verify`` (or ``--detect-profile``) finds where it
deviates. The ``profile`` argument of every method is ignored: a stack cannot change its
behaviour to follow one of our profiles. Third-party packages are imported lazily, inside
``check_available`` and the methods, so ``import mxref.backends.peers`` never fails.

What each adapter calls (see the class docstrings for the details and known divergences):

==================  ===========================================================  ================
backend             stack entry points                                           native profiles
==================  ===========================================================  ================
``ml_dtypes``       ``ndarray.astype(ml_dtypes.float8_e4m3fn ...)``, e8m0 decode  ``ocp``
``torchao``         ``mx_tensor.to_mx(..., ScaleCalculationMode.FLOOR)``,         ``torchao_floor``
                    ``mx_tensor.to_dtype``, ``nvfp4_tensor.nvfp4_quantize``       ``torchao_nvfp4``
``torchao-rceil``   ``to_mx(..., RCEIL)``                                         ``torchao_rceil``
``torchao-ceil``    ``to_mx(..., CEIL)``                                          ``torchao_ceil``
``torchao-even``    ``to_mx(..., EVEN)``                                          ``torchao_even``
``transformer_      ``transformer_engine.pytorch.tensor.mxfp8_tensor.             ``te_mxfp8``
engine``            MXFP8Quantizer`` (needs CUDA; untested here)
==================  ===========================================================  ================
"""
from __future__ import annotations

import numpy as np

from ..errors import MXRefError
from ..formats import get_format
from .base import Backend, BackendUnavailable, Unsupported

_SRC_BITS = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}


def _check_src(src: np.ndarray, src_dtype: str) -> np.ndarray:
    if src_dtype not in _SRC_BITS:
        raise Unsupported(f"source dtype {src_dtype!r} is not one of {', '.join(_SRC_BITS)}")
    src = np.asarray(src)
    if src.dtype != _SRC_BITS[src_dtype]:
        raise Unsupported(f"{src_dtype} sources are passed as {np.dtype(_SRC_BITS[src_dtype])} "
                          f"bit patterns, got {src.dtype}")
    return src


def _fmt(fmt: str):
    try:
        return get_format(fmt)
    except MXRefError as e:
        raise Unsupported(str(e)) from None


def _pad_last(a: np.ndarray, mult: int) -> np.ndarray:
    """Zero-pad the last axis to a multiple of ``mult`` (+0 bits; an amax is unchanged)."""
    n = a.shape[-1]
    m = -(-n // mult) * mult
    if m == n:
        return np.ascontiguousarray(a)
    out = np.zeros(a.shape[:-1] + (m,), dtype=a.dtype)
    out[..., :n] = a
    return out


def _unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """Two E2M1 codes per byte, element 0 in the low nibble -> one code per byte."""
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


def _pack_fp4(codes: np.ndarray) -> np.ndarray:
    codes = _pad_last(codes, 2)
    return np.ascontiguousarray((codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4))


# ---------------------------------------------------------------------------------------------
# ml_dtypes
# ---------------------------------------------------------------------------------------------

_ML_ELEM = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2",
            "mxfp6_e2m3": "float6_e2m3fn", "mxfp6_e3m2": "float6_e3m2fn",
            "mxfp4": "float4_e2m1fn", "nvfp4": "float4_e2m1fn"}


def torchao_blocks(src, src_dtype, fmt, axis, bs, run, device=None):
    """Blocks of ``src`` along ``axis`` through a torchao ``to_mx``-like ``run(t) -> (scales,
    data)`` on rows padded to whole blocks (moved to ``device`` when given), back as numpy
    ``(scales, codes)`` shaped like the input with the block axis where it was."""
    import torch
    if src_dtype == "float16":
        raise Unsupported("torchao to_mx accepts bfloat16 and float32 only, not float16")
    if src.ndim == 0:
        raise Unsupported("cannot block a 0-d input")
    x = np.moveaxis(src, axis, -1)
    lead, n = x.shape[:-1], x.shape[-1]
    nb = -(-n // bs)
    rows = int(np.prod(lead, dtype=np.int64))
    if rows == 0 or n == 0:
        scales = np.zeros(lead + (nb,), np.uint8)
        codes = np.zeros(lead + (n,), np.uint8)
    else:
        t = _to_torch(_pad_last(x.reshape(rows, n), bs), src_dtype)
        s, d = run(t if device is None else t.to(device))
        scales = s.view(torch.uint8).cpu().numpy().reshape(rows, nb)
        c = d.contiguous().view(torch.uint8).cpu().numpy()
        if fmt == "mxfp4":
            c = _unpack_fp4(c.reshape(rows, -1))
        codes = c.reshape(rows, nb * bs)[:, :n]
        scales, codes = scales.reshape(lead + (nb,)), codes.reshape(lead + (n,))
    return (np.ascontiguousarray(np.moveaxis(scales, -1, axis)),
            np.ascontiguousarray(np.moveaxis(codes, -1, axis)))


class _CpuPeer(Backend):
    """A third-party stack run on the CPU: refuses any other device and reports the installed
    distribution's version (``dist``; "unavailable" when it is missing: check_available then
    says why it cannot run)."""

    device = "cpu"
    dist = ""

    def __init__(self, device: str | None = None):
        if device not in (None, "cpu"):
            raise BackendUnavailable(f"{self.name} runs on the CPU only, not {device!r}")
        try:
            from importlib.metadata import version
            self.version = version(self.dist)
        except Exception:  # noqa: BLE001 - not installed (or broken metadata)
            self.version = "unavailable"


class MlDtypesBackend(_CpuPeer):
    """ml_dtypes element casts (``convert``) and decodes (``dequantize``).

    ``convert``: the source bit patterns are viewed as ``np.float32`` / ``ml_dtypes.bfloat16`` /
    ``np.float16`` and cast with ``astype`` to the ml_dtypes element type; the result's bytes are
    the codes. ml_dtypes rounds to nearest even, but its FP8 casts do **not** saturate: finite
    values past the E4M3 rounding boundary become NaN (0x7F/0xFF) and past the E5M2 boundary
    become Inf (0x7C/0xFC), and Inf inputs stay NaN (E4M3) / Inf (E5M2), where ``ocp`` saturates
    to the max normal. Its FP6/FP4 casts saturate (also Inf) and map NaN to the negative-zero
    code. ``mxint8`` has no ml_dtypes type: Unsupported.

    ``dequantize``: codes decode through ml_dtypes to float64 (exact), the E8M0 byte through
    ``ml_dtypes.float8_e8m0fnu`` (0xFF -> NaN) to float64 (exact), the product is formed in
    float64 (exact: at most 4 significant bits times a power of two, magnitudes within
    [2^-136, 2^143]) and rounded once to fp32 by ``astype(np.float32)`` (RNE, with fp32
    subnormals and overflow to Inf). So the result is the single rounding the goldens define,
    decided by ml_dtypes' own decoders.
    """

    name = dist = "ml_dtypes"
    ops = frozenset({"convert", "dequantize"})
    profiles = ("ocp",)

    def check_available(self) -> None:
        try:
            import ml_dtypes  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
            raise BackendUnavailable(f"ml_dtypes is not importable: {e}") from None

    def describe(self) -> dict:
        return {**super().describe(), "runtime": f"numpy {np.__version__}"}

    @staticmethod
    def _elem_type(fmt: str):
        import ml_dtypes
        f = _fmt(fmt)
        if fmt not in _ML_ELEM:
            raise Unsupported(f"ml_dtypes has no element type for {f.name} "
                              f"({f.element.name})")
        return getattr(ml_dtypes, _ML_ELEM[fmt])

    def convert(self, src, *, src_dtype, fmt, profile=None):
        import ml_dtypes
        src = _check_src(src, src_dtype)
        dt = self._elem_type(fmt)
        view = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16,
                "float16": np.float16}[src_dtype]
        with np.errstate(all="ignore"):
            out = np.ascontiguousarray(src).view(view).astype(dt)
        return np.ascontiguousarray(out.view(np.uint8)).reshape(src.shape)

    def dequantize(self, scales, codes, *, fmt, profile=None):
        import ml_dtypes
        f = _fmt(fmt)
        if f.is_nvfp4:
            raise Unsupported("nvfp4 dequantize needs the E4M3 block scale and the tensor scale; "
                              "the golden dequantize op is E8M0 only")
        dt = self._elem_type(fmt)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        scales = np.ascontiguousarray(scales, dtype=np.uint8)
        block = f.block_size
        if codes.shape[-1] != scales.shape[-1] * block:
            raise Unsupported(f"codes last axis {codes.shape[-1]} != {scales.shape[-1]} blocks "
                              f"x {block}")
        mask = (1 << f.element.bits) - 1
        if np.any(codes & ~np.uint8(mask)):
            raise Unsupported(f"codes have bits above the {f.element.bits}-bit element")
        vals = codes.view(dt).astype(np.float64)
        s = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
        prod = vals * np.repeat(s, block, axis=-1)            # exact in float64
        with np.errstate(all="ignore"):
            return np.ascontiguousarray(prod.astype(np.float32)).view(np.uint32)


# ---------------------------------------------------------------------------------------------
# torchao
# ---------------------------------------------------------------------------------------------

_TORCHAO_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4")


def _torchao_elem_dtype(fmt: str):
    import torch
    return {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2,
            "mxfp4": torch.float4_e2m1fn_x2, "mxfp6_e2m3": "fp6_e2m3",
            "mxfp6_e3m2": "fp6_e3m2"}[fmt]


def _to_torch(a: np.ndarray, src_dtype: str):
    """Bit patterns -> a CPU torch tensor of the source dtype (a copy, contiguous)."""
    import torch
    a = np.array(a, copy=True, order="C")
    if src_dtype == "float32":
        return torch.from_numpy(a.view(np.float32))
    if src_dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a.view(np.float16))


class _Torchao(Backend):
    """torchao ``prototype.mx_formats`` (CPU eager): ``to_mx`` with one ScaleCalculationMode.

    ``quantize_mx`` (golden ops ``quantize_mx`` and ``quantize_mx_tensor``): the block axis is
    moved last, the array is zero-padded to a multiple of 32 along it (torchao asserts the last
    dimension is divisible by the block size; the adapter pads, and +0 padding does not change a
    block's amax), passed as one contiguous 2-D tensor to ``to_mx(x, elem_dtype, 32, mode)``,
    and the result trimmed and moved back. Scale bytes are the ``float8_e8m0fnu`` bytes; FP8
    codes the bytes of the fp8 tensor; FP6 codes the unpacked uint8 torchao returns; FP4 codes
    the ``pack_uint4`` nibbles unpacked (element 0 in the low nibble). float16 sources are
    Unsupported (``to_mx`` asserts bfloat16/float32); ``mxint8`` is Unsupported (not in
    torchao's MX element dtypes).

    ``quantize_nvfp4`` (only the FLOOR adapter ``torchao`` lists it; it claims ``torchao_nvfp4``,
    the profile written for this path): per tensor, ``per_tensor_scale =
    per_tensor_amax_to_scale(torch.max(torch.abs(x)))`` (amax / (448 * 6)), then
    ``nvfp4_quantize(x, 16, per_tensor_scale)``; ``tensor_scale`` is that per_tensor_scale
    (decode: e2m1 * e4m3 * per_tensor_scale, as ``NVFP4Tensor.get_hp_scales``). torchao 0.18
    does NOT match the torchao_nvfp4 goldens everywhere, and verify reports it: (a) it scales
    elements by ``x * fl(fl(1 / T) / s)`` where the profile divides by ``fl(T * s)``, which flips
    the E2M1 rounding of values at or within an ulp of a midpoint (300 with s = 240, T = 1 ->
    code 0x3, profile 0x2); (b) where ``fl(1 / T) / s`` overflows (subnormal T, s = 2^-6) the
    elements become ``x * Inf`` -> +-6 or NaN; (c) a NaN/Inf in the tensor makes T NaN/Inf and
    an all-zero tensor makes T = 0, poisoning every block of the tensor (NaN scale bytes).

    ``dequantize``: ``mx_tensor.to_dtype(codes, scale_e8m0, elem_dtype, 32, torch.float32)``
    fed the raw scale bytes (as ``float8_e8m0fnu``) and codes (FP4 packed with ``pack_uint4``
    order). torchao decodes a scale byte as ``pow(2.0, byte - 127)`` in fp32 (0x00 -> 2^-127, an
    fp32 subnormal, not zero) and 0xFF -> NaN, then multiplies in fp32 (one rounding).
    """

    device = "cpu"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor", "dequantize"})
    mode = "FLOOR"
    profiles: tuple = ()
    block_size = 32

    def __init__(self, device: str | None = None):
        if device not in (None, "cpu"):
            # to_mx's eager path is device-agnostic, but this adapter moves data through numpy
            # and is only exercised on the CPU; a GPU run would need torch.compile paths too.
            raise BackendUnavailable(f"the torchao adapter runs torchao's eager path on the "
                                     f"CPU only, not {device!r}")
        try:
            from importlib.metadata import version
            self.version = version("torchao")
        except ImportError:
            self.version = "unavailable"

    def check_available(self) -> None:
        try:
            import torch  # noqa: F401
            from torchao.prototype.mx_formats import mx_tensor  # noqa: F401
            from torchao.prototype.mx_formats.config import ScaleCalculationMode
        except Exception as e:  # noqa: BLE001 - torchao's import can fail in many ways
            raise BackendUnavailable(f"torchao is not importable: {type(e).__name__}: {e}") \
                from None
        if not hasattr(ScaleCalculationMode, self.mode):
            raise BackendUnavailable(f"torchao {self.version} has no ScaleCalculationMode."
                                     f"{self.mode}")

    def describe(self) -> dict:
        try:
            import torch
            runtime = f"torch {torch.__version__}"
        except ImportError:
            runtime = "torch unavailable"
        return {**super().describe(), "runtime": runtime,
                "scale_mode": f"ScaleCalculationMode.{self.mode}", "path": "eager, CPU",
                "ragged": "adapter zero-pads the block axis to a multiple of 32"}

    def _mx_check(self, fmt: str):
        f = _fmt(fmt)
        if fmt not in _TORCHAO_FORMATS:
            raise Unsupported(f"torchao to_mx has no element dtype for {f.name}")
        return f

    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        src = _check_src(src, src_dtype)
        self._mx_check(fmt)
        bs, mode = self.block_size, getattr(ScaleCalculationMode, self.mode)
        return torchao_blocks(src, src_dtype, fmt, axis, bs,
                              lambda t: to_mx(t, _torchao_elem_dtype(fmt), bs, mode))

    def dequantize(self, scales, codes, *, fmt, profile=None):
        import torch
        from torchao.prototype.mx_formats.mx_tensor import to_dtype
        self._mx_check(fmt)
        bs = self.block_size
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        scales = np.ascontiguousarray(scales, dtype=np.uint8)
        if codes.shape[-1] != scales.shape[-1] * bs:
            raise Unsupported(f"codes last axis {codes.shape[-1]} != {scales.shape[-1]} blocks "
                              f"x {bs}")
        shape = codes.shape
        if codes.size == 0:
            return np.zeros(shape, np.uint32)
        c2 = codes.reshape(-1, shape[-1])
        if fmt == "mxfp4":
            lp = torch.from_numpy(_pack_fp4(c2))          # torchao keeps fp4 packed as uint8
        elif fmt in ("mxfp6_e2m3", "mxfp6_e3m2"):
            lp = torch.from_numpy(c2.copy())              # unpacked uint8, as to_mx returns
        else:
            lp = torch.from_numpy(c2.copy()).view(_torchao_elem_dtype(fmt))
        se = torch.from_numpy(scales.reshape(-1).copy()).view(torch.float8_e8m0fnu)
        out = to_dtype(lp, se, _torchao_elem_dtype(fmt), bs, torch.float32)
        return np.ascontiguousarray(out.numpy().view(np.uint32)).reshape(shape)

    def quantize_nvfp4(self, src, *, src_dtype, profile=None):
        import torch
        from torchao.prototype.mx_formats.nvfp4_tensor import (
            nvfp4_quantize,
            per_tensor_amax_to_scale,
        )
        src = _check_src(src, src_dtype)
        if src_dtype == "float16":
            raise Unsupported("torchao nvfp4_quantize accepts bfloat16 and float32 only")
        if src.ndim != 3 or src.shape[-1] % 16:
            raise Unsupported(f"quantize_nvfp4 takes [T, R, C] with C % 16 == 0, got "
                              f"{src.shape}")
        T, R, C = src.shape
        scales = np.zeros((T, R, C // 16), np.uint8)
        codes = np.zeros((T, R, C), np.uint8)
        ts = np.zeros(T, np.uint32)
        if R == 0 or C == 0:
            return scales, codes, ts
        for i in range(T):
            x = _to_torch(src[i], src_dtype)
            pts = per_tensor_amax_to_scale(torch.max(torch.abs(x)))
            s, d = nvfp4_quantize(x, 16, pts)
            scales[i] = s.view(torch.uint8).numpy().reshape(R, C // 16)
            codes[i] = _unpack_fp4(d.contiguous().view(torch.uint8).numpy().reshape(R, C // 2))
            ts[i] = np.float32(pts.to(torch.float32).item()).view(np.uint32)
        return scales, codes, ts


class TorchaoFloor(_Torchao):
    name = "torchao"
    mode = "FLOOR"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor", "dequantize", "quantize_nvfp4"})
    profiles = ("torchao_floor", "torchao_nvfp4")


class TorchaoRceil(_Torchao):
    name = "torchao-rceil"
    mode = "RCEIL"
    profiles = ("torchao_rceil",)


class TorchaoCeil(_Torchao):
    name = "torchao-ceil"
    mode = "CEIL"
    profiles = ("torchao_ceil",)


class TorchaoEven(_Torchao):
    name = "torchao-even"
    mode = "EVEN"
    profiles = ("torchao_even",)


# ---------------------------------------------------------------------------------------------
# TransformerEngine
# ---------------------------------------------------------------------------------------------


class TransformerEngineBackend(Backend):
    """NVIDIA TransformerEngine MXFP8 cast: ``MXFP8Quantizer`` (rowwise, compact scales).

    NOT RUN HERE: TransformerEngine is not installable on this machine (no CUDA), so this
    adapter is written from TE's source (``transformer_engine/pytorch/tensor/mxfp8_tensor.py``
    in NVIDIA/TransformerEngine, looked up with the code search) and has never executed. It is
    kept small on purpose: one op, ``quantize_mx`` for mxfp8_e4m3 / mxfp8_e5m2.

    The block axis is moved last; the array is viewed as 2-D ``[rows, n]`` and zero-padded to
    ``rows % 32 == 0`` and ``n % 32 == 0`` (``MXFP8Quantizer.is_quantizable`` asks for both);
    ``quantizer(x)`` returns an ``MXFP8Tensor`` whose ``_rowwise_data`` (uint8 codes) and
    ``_rowwise_scale_inv`` (uint8 E8M0, padded to ``[roundup(rows, 128), roundup(n/32, 4)]``)
    are trimmed back. GEMM-swizzled scales are turned off (``optimize_for_gemm = False``).
    """

    name = "transformer_engine"
    device = "cuda"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor"})
    profiles = ("te_mxfp8",)
    version = "unavailable"

    def __init__(self, device: str | None = None):
        self.device = device or "cuda"
        try:
            import transformer_engine
            self.version = getattr(transformer_engine, "__version__", "unknown")
        except Exception:  # noqa: BLE001, S110 - check_available reports why it cannot run
            pass

    def check_available(self) -> None:
        try:
            import torch
        except ImportError as e:
            raise BackendUnavailable(f"torch is not importable: {e}") from None
        try:
            import transformer_engine.pytorch as te
            import transformer_engine_torch  # noqa: F401
            from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer  # noqa: F401
        except Exception as e:  # noqa: BLE001 - TE also fails at import without its CUDA libs
            raise BackendUnavailable(f"transformer_engine is not importable: "
                                     f"{type(e).__name__}: {e}") from None
        if not torch.cuda.is_available():
            raise BackendUnavailable("transformer_engine MXFP8 needs a CUDA device; none found")
        check = getattr(te, "is_mxfp8_available", None)
        if check is not None:
            ok, reason = check(return_reason=True)
            if not ok:
                raise BackendUnavailable(f"transformer_engine MXFP8 is not available: {reason}")

    def describe(self) -> dict:
        d = super().describe()
        try:
            import torch
            if torch.cuda.is_available():
                major, minor = torch.cuda.get_device_capability()
                d["arch"] = f"sm_{major}{minor}"
                d["runtime"] = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
        except Exception:  # noqa: BLE001, S110 - describing must not fail a run
            pass
        return d

    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        import torch
        import transformer_engine_torch as tex
        from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
        src = _check_src(src, src_dtype)
        if fmt not in ("mxfp8_e4m3", "mxfp8_e5m2"):
            raise Unsupported(f"TransformerEngine MXFP8Quantizer has no {fmt}")
        if src.ndim == 0:
            raise Unsupported("cannot block a 0-d input")
        x = np.moveaxis(src, axis, -1)
        lead, n = x.shape[:-1], x.shape[-1]
        rows, nb = int(np.prod(lead, dtype=np.int64)), -(-n // 32)
        if rows == 0 or n == 0:
            return (np.ascontiguousarray(np.moveaxis(np.zeros(lead + (nb,), np.uint8), -1, axis)),
                    np.ascontiguousarray(np.moveaxis(np.zeros(lead + (n,), np.uint8), -1, axis)))
        xp = _pad_last(x.reshape(rows, n), 32)
        rp = -(-rows // 32) * 32
        if rp != rows:
            xp = np.concatenate([xp, np.zeros((rp - rows, xp.shape[1]), xp.dtype)])
        t = _to_torch(xp, src_dtype).to(self.device)
        q = MXFP8Quantizer(tex.DType.kFloat8E4M3 if fmt == "mxfp8_e4m3"
                           else tex.DType.kFloat8E5M2, rowwise=True, columnwise=False)
        if hasattr(q, "optimize_for_gemm"):
            q.optimize_for_gemm = False
        out = q(t)
        data = out._rowwise_data.view(torch.uint8).cpu().numpy()[:rows, :n]
        sc = out._rowwise_scale_inv.view(torch.uint8).cpu().numpy()[:rows, :nb]
        return (np.ascontiguousarray(np.moveaxis(sc.reshape(lead + (nb,)), -1, axis)),
                np.ascontiguousarray(np.moveaxis(data.reshape(lead + (n,)), -1, axis)))
