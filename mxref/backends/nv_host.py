"""NVIDIA's conversion functions as a verify backend, compiled as host code (no GPU needed).

``cuda_fp4.h`` / ``cuda_fp6.h`` / ``cuda_fp8.h`` declare their conversions ``__host__
__device__``; on the host they run the headers' portable C++ path (on a GPU the same functions
emit ``cvt`` instructions). :file:`nv_host_shim.cpp` wraps them with C linkage; at first use this
module compiles it with ``g++ -O1 -std=c++17 -shared -fPIC`` (``$CXX`` if set) into
``$XDG_CACHE_HOME/mxref/nv_host-<sha256>.so`` (``~/.cache`` by default; the hash covers the shim
source, the headers and the compiler path, so a changed header rebuilds) and loads it with
ctypes. Headers come from a CUDA toolkit (``$CUDA_HOME/include``), the triton wheel
(``triton/backends/nvidia/include``) or ``/usr/local/cuda/include``, first found; ``<nv/target>``,
which ``cuda_fp16.h`` includes, from ``$CUDA_HOME``, the ``nvidia-cuda-cccl-cu12`` wheel
(``nvidia/cuda_cccl/include``) or ``/usr/local/cuda``. Anything missing is a
:class:`BackendUnavailable` naming it (``mxref verify`` exit 4).

Backends:

``nv-host`` (claims ``ocp``)
    ``convert``: ``__nv_cvt_{float,bfloat16raw,halfraw}_to_fp4/fp6`` with ``cudaRoundNearest``
    and ``__nv_cvt_*_to_fp8`` with ``__NV_SATFINITE`` (FP4/FP6 always saturate), called on the
    source bits as given. ``quantize_mx`` (golden ops ``quantize_mx`` and
    ``quantize_mx_tensor``): the scale byte is ``__nv_cvt_double_to_e8m0(amax / 2^emax,
    __NV_SATFINITE, cudaRoundZero)``, i.e. the OCP rule floor(log2 amax) - emax with NVIDIA's
    rounding, clipping and special values; each element is ``__nv_cvt_double_to_fpX(x / X)``
    (``X = 2^(byte - 127)``; ``x / X`` is exact in float64).
``nv-host-rceil`` (claims ``rceil``)
    ``quantize_mx`` with the cuBLAS/TransformerEngine recipe ``__nv_cvt_double_to_e8m0(amax /
    max_normal, __NV_SATFINITE, cudaRoundPosInf)``. The quotient is formed in float64: with a
    24-bit amax over a 4-bit max_normal, one above a power of two stays above it, and the
    header narrows it to fp32 with a sticky bit, so the round-up sees the exact quotient's side.

The block ``amax`` is the adapter's: the largest ``|x|`` of the block, NaN if any element is NaN
(float64, exact). Whatever the e8m0 conversion makes of it (Inf -> 2^127 under satfinite, NaN ->
0xFF) is NVIDIA's. MXINT8 has no NVIDIA conversion: Unsupported.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path

import numpy as np

from ._shim import cached_library, compiler
from .base import Backend, BackendUnavailable, Unsupported
from .peers import _check_src, _fmt

SHIM = Path(__file__).with_name("nv_host_shim.cpp")
HEADERS = ("cuda_fp4.h", "cuda_fp4.hpp", "cuda_fp6.h", "cuda_fp6.hpp", "cuda_fp8.h",
           "cuda_fp8.hpp", "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp")
_FMT_CODE = {"mxfp4": 0, "nvfp4": 0, "mxfp6_e2m3": 1, "mxfp6_e3m2": 2, "mxfp8_e4m3": 3,
             "mxfp8_e5m2": 4}
_SRC_CODE = {"float32": 0, "bfloat16": 1, "float16": 2}
ROUND_ZERO, ROUND_POS_INF = 0, 1
TOOLKIT = Path("/usr/local/cuda")     # the default CUDA toolkit location, searched last
_LIB = None


def _cuda_include_dirs() -> tuple[Path, Path]:
    """(directory with cuda_fp4.h, directory with nv/target), or BackendUnavailable naming
    what is missing and where it was looked for."""
    fp_dirs, nv_dirs = [], []
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        fp_dirs.append(Path(home) / "include")
        nv_dirs.append(Path(home) / "include")
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        fp_dirs.append(Path(spec.origin).parent / "backends" / "nvidia" / "include")
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec is not None else []:
        nv_dirs.append(Path(base) / "cuda_cccl" / "include")
    fp_dirs.append(TOOLKIT / "include")
    nv_dirs.append(TOOLKIT / "include")
    fp = next((d for d in fp_dirs if all((d / h).is_file() for h in HEADERS)), None)
    nv = next((d for d in nv_dirs if (d / "nv" / "target").is_file()), None)
    if fp is None:
        raise BackendUnavailable(
            "nv-host needs NVIDIA's cuda_fp4.h/cuda_fp6.h/cuda_fp8.h (with their .hpp, cuda_fp16 "
            "and cuda_bf16 headers); not found in " + ", ".join(map(str, fp_dirs))
            + " (pip install triton, or set CUDA_HOME to a CUDA toolkit)")
    if nv is None:
        raise BackendUnavailable(
            "nv-host needs the header <nv/target> (CCCL); not found in "
            + ", ".join(map(str, nv_dirs)) + " (pip install nvidia-cuda-cccl-cu12, or set "
            "CUDA_HOME to a CUDA toolkit)")
    return fp, nv


def load_shim():
    """The compiled shim (built at first use, then cached per source/header/compiler hash)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    cxx = compiler("nv-host", "C++17")
    fp, nv = _cuda_include_dirs()
    inputs = [SHIM.read_bytes(), *((fp / n).read_bytes() for n in HEADERS),
              (nv / "nv" / "target").read_bytes()]
    lib = cached_library(
        "nv_host", cxx, inputs,
        lambda build, out: [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{fp}", f"-I{nv}",
                            str(SHIM), "-o", str(out)],
        f"headers {fp}, {nv}")
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.mxref_nv_convert.argtypes = [ctypes.c_int, ctypes.c_int, p, p, i64]
    lib.mxref_nv_e8m0.argtypes = [p, p, i64, ctypes.c_int, ctypes.c_int]
    lib.mxref_nv_e8m0_f32.argtypes = [p, p, i64, ctypes.c_int, ctypes.c_int]
    for fn in (lib.mxref_nv_convert, lib.mxref_nv_e8m0, lib.mxref_nv_e8m0_f32):
        fn.restype = ctypes.c_int
    _LIB = lib
    return lib


def nv_convert(values: np.ndarray, fmt: str, src: str) -> np.ndarray:
    """NVIDIA's element conversion (RN, satfinite) of ``values``: bit patterns of ``src``
    (float32 / bfloat16 / float16) or float64 values (``src="float64"``)."""
    code = 3 if src == "float64" else _SRC_CODE[src]
    dt = {0: np.uint32, 1: np.uint16, 2: np.uint16, 3: np.float64}[code]
    a = np.ascontiguousarray(values, dtype=dt)
    out = np.empty(a.shape, np.uint8)
    if load_shim().mxref_nv_convert(_FMT_CODE[fmt], code, a.ctypes.data, out.ctypes.data,
                                    a.size):
        raise Unsupported(f"nv-host shim refused fmt {fmt!r} / src {src!r}")
    return out


def nv_e8m0(values: np.ndarray, rounding: int, satfinite: bool = True, *, f32=False):
    """``__nv_cvt_double_to_e8m0`` (or ``__nv_cvt_float_to_e8m0`` with ``f32``) of
    ``values`` with ``rounding`` ROUND_ZERO or ROUND_POS_INF."""
    a = np.ascontiguousarray(values, dtype=np.float32 if f32 else np.float64)
    out = np.empty(a.shape, np.uint8)
    fn = load_shim().mxref_nv_e8m0_f32 if f32 else load_shim().mxref_nv_e8m0
    if fn(a.ctypes.data, out.ctypes.data, a.size, rounding, int(satfinite)):
        raise Unsupported(f"nv-host shim refused rounding {rounding!r}")
    return out


def _to_f64(src: np.ndarray, src_dtype: str) -> np.ndarray:
    import ml_dtypes
    view = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    with np.errstate(invalid="ignore"):
        return src.view(view[src_dtype]).astype(np.float64)


class NvHostBackend(Backend):
    """NVIDIA's host conversions: element ``convert`` and an MX ``quantize_mx`` whose scale is
    ``__nv_cvt_double_to_e8m0`` with cudaRoundZero (see the module docstring)."""

    name = "nv-host"
    device = "cpu"
    ops = frozenset({"convert", "quantize_mx", "quantize_mx_tensor"})
    profiles = ("ocp",)
    rounding = ROUND_ZERO

    def __init__(self, device: str | None = None):
        if device not in (None, "cpu"):
            raise BackendUnavailable(f"{self.name} runs NVIDIA's conversions as host code on the "
                                     f"CPU, not {device!r}")
        self.version = "unavailable"
        try:
            fp, _ = _cuda_include_dirs()
            text = (fp / "cuda_runtime_api.h").read_text(errors="replace")
            self.version = next((f"CUDART_VERSION {ln.split()[-1]}" for ln in text.splitlines()
                                 if ln.startswith("#define CUDART_VERSION")), "unknown")
        except (BackendUnavailable, OSError):
            pass                    # check_available names what is missing

    def check_available(self) -> None:
        load_shim()

    def describe(self) -> dict:
        d = super().describe()
        try:
            fp, nv = _cuda_include_dirs()
            d["headers"] = str(fp)
            d["nv_target"] = str(nv)
        except BackendUnavailable as e:
            d["headers"] = str(e)
        d["scale"] = ("e8m0(amax / 2^emax, satfinite, cudaRoundZero)" if self.rounding == ROUND_ZERO
                      else "e8m0(amax / max_normal, satfinite, cudaRoundPosInf)")
        return d

    @staticmethod
    def _elem(fmt: str):
        f = _fmt(fmt)
        if fmt not in _FMT_CODE or f.is_nvfp4:
            raise Unsupported(f"NVIDIA's cuda_fp headers have no MX element conversion for "
                              f"{f.name}")
        return f

    def convert(self, src, *, src_dtype, fmt, profile=None):
        src = _check_src(src, src_dtype)
        self._elem(fmt)
        return nv_convert(src, fmt, src_dtype).reshape(src.shape)

    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        src = _check_src(src, src_dtype)
        f = self._elem(fmt)
        if src.ndim == 0:
            raise Unsupported("cannot block a 0-d input")
        bs = f.block_size
        x = np.moveaxis(_to_f64(np.ascontiguousarray(src), src_dtype), axis, -1)
        lead, n = x.shape[:-1], x.shape[-1]
        nb = -(-n // bs)
        pad = np.zeros(lead + (nb * bs,))
        pad[..., :n] = x                                    # +0 padding: the amax is unchanged
        blocks = np.abs(pad.reshape(lead + (nb, bs)))
        amax = np.where(np.isnan(blocks).any(-1), np.nan, np.max(blocks, axis=-1, initial=0.0))
        with np.errstate(all="ignore"):
            if self.rounding == ROUND_ZERO:
                arg = amax / 2.0 ** f.element.emax              # exact: a power of two
            else:
                arg = amax / float(f.element.max_normal)
            scales = nv_e8m0(arg, self.rounding)
            X = np.where(scales == 0xFF, np.nan, np.ldexp(1.0, scales.astype(np.int64) - 127))
            q = pad / np.repeat(X, bs, axis=-1)                 # exact in float64
        codes = nv_convert(q, fmt, "float64")[..., :n]
        return (np.ascontiguousarray(np.moveaxis(scales, -1, axis)),
                np.ascontiguousarray(np.moveaxis(codes, -1, axis)))


class NvHostRceilBackend(NvHostBackend):
    """``quantize_mx`` with the cuBLAS recipe: e8m0(amax / max_normal, cudaRoundPosInf)."""

    name = "nv-host-rceil"
    ops = frozenset({"quantize_mx", "quantize_mx_tensor"})
    profiles = ("rceil",)
    rounding = ROUND_POS_INF
