"""AMD's host model of the gfx950 scaled conversions as a verify backend (no GPU needed).

``amd_hip_ocp_host.hpp`` (namespace ``fcbx``) is the C++ that HIP compiles in place of the
gfx950 builtins when the target is not gfx950 (``amd_hip_ocp_fp.hpp``: without
``__gfx950__``, ``__amd_cvt_floatx2_to_fp4x2_scale`` calls ``fcbx::from_float<float,
Encoding::E2M1, true>`` where gfx950 runs ``v_cvt_scalef32_pk_fp4_f32``; the FP6 packers call
``fcbx::from_float<.., Encoding::E2M3 / E3M2, true>``). It is AMD's own statement of what the
instructions compute; this backend runs it over the corpus. It is a model: nothing here has run
on AMD hardware.

The header is not shipped with mxref. It is looked for, first found: ``$MXREF_AMD_OCP_HOST``
(the header file or a folder holding it), ``$ROCM_PATH/include/hip/amd_detail``,
``/opt/rocm/include/hip/amd_detail``, and the ``triton`` wheel's
``backends/amd/include/hip/amd_detail`` (Triton vendors it in
``third_party/amd/backend/include/hip/amd_detail``; wheels up to 3.9.0 do not ship it). Its
companion ``amd_hip_ocp_types.h`` accepts only hipcc or GCC >= 14, so the header is copied into
a private build folder next to a stand-in (:data:`TYPES_STANDIN`: the ``static`` function macro
and the storage typedefs the host code names). :file:`amd_host_shim.cpp` wraps
``fcbx::from_float`` / ``fcbx::to_float`` with C linkage; it is compiled with
``g++ -std=c++20 -O1 -shared -fPIC`` (``$CXX`` if set; C++20 because the header's
``using other_type = std::conditional<..>::type`` omits ``typename``) into
``$XDG_CACHE_HOME/mxref/amd_host-<sha256>.so`` (hash over shim, header, stand-in and compiler
path) and loaded with ctypes. Anything missing is a :class:`BackendUnavailable` naming it
(``mxref verify`` exit 4).

``amd-host`` (claims ``amd_gfx950``; formats mxfp4, mxfp6_e2m3, mxfp6_e3m2)
    ``convert``: ``fcbx::from_float<float, E, true>(x, 0)``. ``quantize_mx``: the scale byte
    is AITER's ``_mxfp4_scale_op`` (ROCm/aiter ``aiter/ops/triton/_triton_kernels/quant/
    quant.py`` @04bbef5c) ported to integers: amax = NaN-ignoring max of ``|x|`` (Triton's
    ``tl.max`` lowers to maxnum), ``(bits(amax) + 2^(22 - mbits)) & 0xFF800000`` (AITER's
    ``+ 0x200000`` for FP4's one mantissa bit; the element's width for FP6, as Quark EVEN),
    exponent - emax_elem, clamped to [-127, 127]; an Inf or an all-NaN amax ends at 127
    (byte 0xFE) as ``tl.clamp(floor(log2(inf)) - 2)`` does. Each element is then
    ``fcbx::from_float<float, E, true>(x, byte - 127)`` (int8 scale exponent; the header
    subtracts it from the exponent exactly). bfloat16/float16 sources are widened to float32
    (exact) and take the float path.

FP8 is not claimed: the host model's scaled FP8 conversions use ``Encoding::E4M3`` /
``E5M2``, whose ``MxScale`` is false, so the scale argument is ignored on the host.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import numpy as np

from ._shim import cached_library, compiler
from .base import Backend, BackendUnavailable, Unsupported
from .peers import _check_src, _fmt

SHIM = Path(__file__).with_name("amd_host_shim.cpp")
HEADER = "amd_hip_ocp_host.hpp"
ENV_HEADER = "MXREF_AMD_OCP_HOST"
ROCM = Path("/opt/rocm")
_FMT_CODE = {"mxfp4": 0, "mxfp6_e2m3": 1, "mxfp6_e3m2": 2}
_LIB = None

TYPES_STANDIN = """\
// mxref stand-in for amd_hip_ocp_types.h on a host compiler (the real one needs hipcc or
// GCC >= 14): the function macro and the storage types amd_hip_ocp_host.hpp names. Only
// float sources are converted through it; the bf16 type is named, never converted.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>
#define __OCP_FP_HOST_DEVICE_STATIC__ static
typedef uint8_t __amd_fp8_storage_t;
typedef _Float16 __amd_fp16_storage_t;
struct __mxref_bf16_stub { uint16_t bits; };
typedef __mxref_bf16_stub __amd_bf16_storage_t;
typedef int8_t __amd_scale_t;
typedef float __attribute__((vector_size(128))) __amd_floatx32_storage_t;
typedef _Float16 __attribute__((vector_size(64))) __amd_fp16x32_storage_t;
typedef uint16_t __attribute__((vector_size(64))) __amd_bf16x32_storage_t;
typedef uint32_t __attribute__((vector_size(32))) __amd_fp6x32_storage_t;
"""


def header_candidates() -> list[Path]:
    """Where the header is looked for, in order."""
    out = []
    env = os.environ.get(ENV_HEADER)
    if env:
        p = Path(env)
        out.append(p if p.suffix == ".hpp" else p / HEADER)
    rocm = os.environ.get("ROCM_PATH") or os.environ.get("HIP_PATH")
    if rocm:
        out.append(Path(rocm) / "include" / "hip" / "amd_detail" / HEADER)
    out.append(ROCM / "include" / "hip" / "amd_detail" / HEADER)
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        out.append(Path(spec.origin).parent / "backends" / "amd" / "include" / "hip"
                   / "amd_detail" / HEADER)
    return out


def find_header() -> Path:
    cands = header_candidates()
    found = next((p for p in cands if p.is_file()), None)
    if found is None:
        raise BackendUnavailable(
            f"amd-host needs AMD's {HEADER} (HIP, namespace fcbx); not found in "
            + ", ".join(map(str, cands)) + f" (install ROCm/HIP, or set {ENV_HEADER} to the "
            "header, e.g. a triton-lang/triton checkout's third_party/amd/backend/include/"
            "hip/amd_detail)")
    return found


def load_shim():
    """The compiled shim (built at first use, then cached per source/header/compiler hash)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    cxx = compiler("amd-host", "C++20")
    hdr = find_header()

    def command(build, out):
        shutil.copyfile(hdr, build / HEADER)
        (build / "amd_hip_ocp_types.h").write_text(TYPES_STANDIN)
        return [cxx, "-std=c++20", "-O1", "-shared", "-fPIC", f"-I{build}", str(SHIM),
                "-o", str(out)]
    lib = cached_library("amd_host", cxx,
                         [SHIM.read_bytes(), hdr.read_bytes(), TYPES_STANDIN.encode()],
                         command, f"header {hdr}")
    i64, p = ctypes.c_int64, ctypes.c_void_p
    for fn in (lib.mxref_amd_from_float, lib.mxref_amd_to_float):
        fn.argtypes = [ctypes.c_int, p, p, p, i64]
        fn.restype = ctypes.c_int
    _LIB = lib
    return lib


def amd_from_float(bits: np.ndarray, fmt: str, scale_exp) -> np.ndarray:
    """``fcbx::from_float<float, E, true>`` of float32 bit patterns ``bits`` with the int8
    scale exponent ``scale_exp`` (broadcast to ``bits``)."""
    a = np.ascontiguousarray(bits, dtype=np.uint32)
    s = np.ascontiguousarray(np.broadcast_to(np.asarray(scale_exp, np.int8), a.shape))
    out = np.empty(a.shape, np.uint8)
    if load_shim().mxref_amd_from_float(_FMT_CODE[fmt], a.ctypes.data, s.ctypes.data,
                                        out.ctypes.data, a.size):
        raise Unsupported(f"amd-host shim refused fmt {fmt!r}")
    return out


def amd_to_float(codes: np.ndarray, fmt: str, scale_exp) -> np.ndarray:
    """``fcbx::to_float<float, E, true>``: element codes -> float32 bits."""
    c = np.ascontiguousarray(codes, dtype=np.uint8)
    s = np.ascontiguousarray(np.broadcast_to(np.asarray(scale_exp, np.int8), c.shape))
    out = np.empty(c.shape, np.uint32)
    if load_shim().mxref_amd_to_float(_FMT_CODE[fmt], c.ctypes.data, s.ctypes.data,
                                      out.ctypes.data, c.size):
        raise Unsupported(f"amd-host shim refused fmt {fmt!r}")
    return out


def _to_f32_bits(src: np.ndarray, src_dtype: str) -> np.ndarray:
    """float32 bit patterns of the source (bf16 / fp16 widened exactly)."""
    if src_dtype == "float32":
        return src.astype(np.uint32, copy=False)
    if src_dtype == "bfloat16":
        return src.astype(np.uint32) << np.uint32(16)
    with np.errstate(invalid="ignore"):
        return src.view(np.float16).astype(np.float32).view(np.uint32)


def aiter_scale_exponent(amax_bits: np.ndarray, mbits: int, emax: int) -> np.ndarray:
    """AITER ``_mxfp4_scale_op`` on the float32 bits of a (NaN-ignoring) block amax, on
    integers: ``(bits + 2^(22 - mbits)) & 0xFF800000`` (AITER: ``+ 0x200000``, mbits 1), then
    floor(log2) - emax clamped to [-127, 127]; +0 (log2 -> -inf) gives -127, an Inf or NaN
    amax (log2 -> +inf) 127."""
    r = (amax_bits.astype(np.uint64) + (1 << (22 - mbits))) & 0xFF800000
    e = (r >> 23).astype(np.int64)                    # biased exponent; sign bit is clear
    s = np.where(e == 0, -127, np.where(e >= 255, 127, e - 127 - emax))
    return np.clip(s, -127, 127)


class AmdHostBackend(Backend):
    """AMD's host model of the gfx950 scaled conversions with AITER's block scale."""

    name = "amd-host"
    device = "cpu"
    ops = frozenset({"convert", "quantize_mx", "quantize_mx_tensor"})
    profiles = ("amd_gfx950",)

    def __init__(self, device: str | None = None):
        if device not in (None, "cpu"):
            raise BackendUnavailable(f"{self.name} runs AMD's host model on the CPU, not "
                                     f"{device!r}")
        self.version = "unavailable"
        try:
            hdr = find_header()
            self.version = f"{HEADER} sha256 {hashlib.sha256(hdr.read_bytes()).hexdigest()[:12]}"
        except (BackendUnavailable, OSError):
            pass                    # check_available names what is missing

    def check_available(self) -> None:
        load_shim()

    def describe(self) -> dict:
        d = super().describe()
        try:
            d["header"] = str(find_header())
        except BackendUnavailable as e:
            d["header"] = str(e)
        d["scale"] = ("AITER _mxfp4_scale_op: (bits(nan-ignoring amax) + 2^(22-mbits)) & "
                      "0xFF800000, floor(log2) - emax, clamp [-127, 127]")
        d["elements"] = "fcbx::from_float<float, E, true>(x, byte - 127)"
        d["hardware"] = "never run on AMD hardware here: AMD's host model of gfx950"
        return d

    @staticmethod
    def _elem(fmt: str):
        f = _fmt(fmt)
        if fmt not in _FMT_CODE:
            raise Unsupported(f"AMD's host model has no scaled conversion for {f.name} "
                              "(FP8: the host path ignores the scale)")
        return f

    def convert(self, src, *, src_dtype, fmt, profile=None):
        src = _check_src(src, src_dtype)
        self._elem(fmt)
        return amd_from_float(_to_f32_bits(src, src_dtype), fmt, 0).reshape(src.shape)

    def quantize_mx(self, src, *, src_dtype, fmt, profile=None, axis=-1):
        src = _check_src(src, src_dtype)
        f = self._elem(fmt)
        if src.ndim == 0:
            raise Unsupported("cannot block a 0-d input")
        bs = f.block_size
        x = np.moveaxis(_to_f32_bits(np.ascontiguousarray(src), src_dtype), axis, -1)
        lead, n = x.shape[:-1], x.shape[-1]
        nb = -(-n // bs)
        pad = np.zeros(lead + (nb * bs,), np.uint32)
        pad[..., :n] = x                                  # +0 padding: the amax is unchanged
        blocks = pad.reshape(lead + (nb, bs)) & np.uint32(0x7FFFFFFF)
        fin = np.where(blocks > 0x7F800000, np.uint32(0), blocks)   # maxnum: NaN ignored
        amax = fin.max(axis=-1, initial=0)
        all_nan = (blocks > 0x7F800000).all(axis=-1)      # maxnum of NaNs only: NaN
        amax = np.where(all_nan, np.uint32(0x7FC00000), amax)
        s = aiter_scale_exponent(amax, f.element.mbits, f.element.emax)
        scales = (s + 127).astype(np.uint8)
        sexp = np.repeat(s.astype(np.int8), bs, axis=-1)
        codes = amd_from_float(pad, fmt, sexp)[..., :n]
        return (np.ascontiguousarray(np.moveaxis(scales, -1, axis)),
                np.ascontiguousarray(np.moveaxis(codes, -1, axis)))
