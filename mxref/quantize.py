"""Public quantize / dequantize API and the MXTensor result."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _kernels as K
from .errors import (
    AxisError,
    BlockSizeError,
    GeneratorArgumentError,
    ProfileConflictError,
    ScaleValueError,
    ShapeError,
    UnsupportedDtypeError,
)
from .formats import E4M3, FP32, BlockFormat, get_format
from .inputs import (
    as_code_array,
    as_f32_bits,
    as_shape,
    check_code_range,
    check_int,
    f32_scale_bits,
)
from .layouts import pack_codes, to_amd_shuffle, to_cublas_blocked
from .profiles import Profile, get_profile

__all__ = ["MXTensor", "quantize", "dequantize", "random_bits"]

_F32P = FP32.kernel_params()
_E4M3P = E4M3.kernel_params()
_NV_ORDERS = {"exact": K.NV_EXACT, "te": K.NV_TE, "torchao": K.NV_TORCHAO,
              "triton_kernels": K.NV_TRITON_KERNELS}


@dataclass
class MXTensor:
    """Result of :func:`quantize`.

    ``codes`` holds one unpacked element code per input element (same shape as the input);
    ``scales`` holds one scale byte per block (E8M0, or E4M3 for NVFP4) with the block axis
    reduced to ``ceil(n / block_size)``; ``tensor_scale`` is NVFP4's fp32 decode-side tensor
    scale (``dequant = e2m1 * e4m3 * tensor_scale``), None for MX formats; under
    ``nvfp4_amax_scope='row'`` a float32 array, one per row (the input's shape without the
    block axis).
    """

    codes: np.ndarray
    scales: np.ndarray
    fmt: BlockFormat
    profile: Profile
    axis: int
    block_size: int
    tensor_scale: np.float32 | None = None
    source_dtype: str = "float32"
    meta: dict = field(default_factory=dict)

    @property
    def shape(self):
        return self.codes.shape

    def packed(self) -> np.ndarray:
        """Element bytes as hardware consumes them, packed along the block axis.

        FP4: two per byte, element 0 in the low nibble. FP6: four per three bytes,
        little-endian 24-bit words. FP8/INT8: one per byte. The packed axis is moved back to
        ``axis``; see mxref.layouts for the exact conventions.
        """
        check_code_range("codes", self.codes, self.fmt.element.bits, self.fmt.name)
        moved = np.moveaxis(self.codes, self.axis, -1)
        packed = pack_codes(moved, self.fmt.element.bits)
        return np.ascontiguousarray(np.moveaxis(packed, -1, self.axis))

    def scales_layout(self, layout: str = "row_major") -> np.ndarray:
        """Scales in ``row_major`` (canonical), ``cublas`` (128x4 swizzle) or ``amd`` layout.

        The swizzled layouts take the scales as [rows, blocks] with the block axis last.
        """
        s2 = np.moveaxis(self.scales, self.axis, -1)
        if layout == "row_major":
            return np.ascontiguousarray(self.scales)
        s2 = s2.reshape(-1, s2.shape[-1]) if s2.ndim != 2 else s2
        if layout == "cublas":
            return to_cublas_blocked(s2)
        if layout == "amd":
            return to_amd_shuffle(s2)
        raise ShapeError(f"unknown scale layout {layout!r}; use row_major, cublas or amd")

    def dequantize(self) -> np.ndarray:
        return dequantize(self)


def _normalize_axis(axis: int, ndim: int) -> int:
    if ndim == 0:
        raise AxisError("cannot block a 0-d input; pass at least a 1-d array")
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise AxisError(f"axis {axis!r} is out of range for an input with {ndim} dimensions")
    return int(axis) % ndim


def _to_rows(a: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(a, axis, -1)
    rows = int(np.prod(moved.shape[:-1], dtype=np.int64))
    return np.ascontiguousarray(moved).reshape(rows, moved.shape[-1])


def _from_rows(a2: np.ndarray, moved_shape, axis: int) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a2.reshape(moved_shape), -1, axis))


def random_bits(shape, seed: int, offset: int = 0, words: int = 1) -> np.ndarray:
    """The documented stochastic-rounding streams, over the elements in C order.

    ``words=1`` (the default, and the corpus's stream): element ``i`` gets the first word of
    Philox4x32-10 with counter ``((offset + i) mod 2^32, 0, 0, 0)`` and key
    ``(seed_lo, seed_hi)``, the same as ``triton.language.randint(seed, offset + i)``.

    ``words=4``: element ``i`` gets word ``i mod 4`` of Philox4x32-10 with counter
    ``((offset + i div 4) mod 2^32, 0, 0, 0)``, i.e.
    ``triton.language.randint4x(seed, offset + i // 4)[i % 4]``: one evaluation serves four
    elements, so a kernel drawing the words in place does a quarter of the Philox work.

    Any integer seed / offset works (taken mod 2^64 / 2^32); floats and bools are refused."""
    shape = as_shape(shape)
    seed = check_int("seed", seed)
    offset = check_int("offset", offset)
    words = check_words(words)
    out = np.empty(int(np.prod(shape)), dtype=np.uint32)
    stream = K.philox_stream if words == 1 else K.philox_stream4
    stream(np.uint64(seed & (2**64 - 1)), np.int64(offset % 2**32), out)
    return out.reshape(shape)


def check_words(words) -> int:
    """The words-per-counter of an SR stream: 1 or 4 (see :func:`random_bits`)."""
    words = check_int("rng_words", words)
    if words not in (1, 4):
        raise GeneratorArgumentError(f"rng_words={words!r}: the stochastic-rounding stream "
                                     "takes 1 or 4 words per Philox counter")
    return words


def sr_stream_rows(prof: Profile, rbits, seed, rng_offset: int, shape, axis: int,
                   rng_words: int = 1) -> np.ndarray:
    """The stochastic-rounding words as [rows, n] along ``axis`` (a dummy [1, 1] when the
    profile does not round stochastically); refuses rbits/seed the profile cannot use."""
    rng_offset = check_int("rng_offset", rng_offset)
    rng_words = check_words(rng_words)
    if rng_words != 1 and seed is None:
        raise ProfileConflictError("rng_words applies to the stream drawn from seed; pass seed "
                                   "(rbits are taken as given)")
    if rbits is not None and seed is not None:
        raise ProfileConflictError("pass rbits or seed, not both (seed would be ignored)")
    stochastic = prof.rounding == "stochastic"
    if (rbits is not None or seed is not None) and not stochastic:
        raise ProfileConflictError(
            f"rbits/seed given but profile {prof.name!r} rounds with {prof.rounding!r}")
    if not stochastic:
        return np.zeros((1, 1), dtype=np.uint32)
    if rbits is None and seed is None:
        raise ProfileConflictError("rounding='stochastic' needs rbits (uint32 per element) or seed")
    if rbits is None:
        rbits = random_bits(shape, seed, rng_offset, rng_words)
    rbits = np.asarray(rbits)
    if rbits.dtype != np.uint32 or rbits.shape != tuple(shape):
        raise ShapeError(f"rbits must be uint32 of shape {tuple(shape)}, got "
                         f"{rbits.dtype} {rbits.shape}")
    return _to_rows(rbits, axis)


def quantize(x, fmt, profile="ocp", axis: int | None = None, *, block_size: int | None = None,
             source_dtype: str | None = None, from_float64: str | None = None,
             rbits=None, seed: int | None = None, rng_offset: int = 0, rng_words: int = 1,
             global_amax=None) -> MXTensor:
    """Quantize ``x`` to the block format ``fmt`` under ``profile``.

    x: numpy float32/float16, ml_dtypes.bfloat16, a torch tensor (fp32/bf16/fp16, any
    device), raw uint16/uint32 bit patterns with ``source_dtype``, or float64 with
    ``from_float64='rne'``.
    axis: the block axis (default: the profile's, normally -1).
    rbits / seed: the random stream for ``rounding='stochastic'`` (uint32 per element, or a
    Philox seed, see :func:`random_bits`); rng_offset / rng_words: the stream's offset and
    words per counter (1 or 4) with ``seed``.
    global_amax: NVFP4 only: the fp32 amax the tensor scale is derived from (default: the
    amax of x over finite values).
    """
    fmt = get_format(fmt)
    prof = get_profile(profile)
    prof.check_format(fmt)
    bits, src = as_f32_bits(x, source_dtype=source_dtype, from_float64=from_float64)
    prof.check_source_dtype(src)
    ax = _normalize_axis(prof.block_axis if axis is None else axis, bits.ndim)
    bs = block_size if block_size is not None else prof.block_size or fmt.block_size
    if block_size and prof.block_size and block_size != prof.block_size:
        raise ProfileConflictError(
            f"block_size={block_size} contradicts profile {prof.name!r} block_size={prof.block_size}")
    if not fmt.allowed_block_size(bs):
        raise BlockSizeError(
            f"block size {bs!r} is not allowed for {fmt.name} "
            f"({'must be 16' if fmt.is_nvfp4 else 'a power of two in [2, 1024], OCP uses 32'})")
    n = bits.shape[ax]
    if n % bs and prof.ragged == "error":
        raise BlockSizeError(
            f"length {n} along axis {ax} is not a multiple of block size {bs} and profile "
            f"{prof.name!r} refuses ragged blocks")
    rb2 = sr_stream_rows(prof, rbits, seed, rng_offset, bits.shape, ax, rng_words)

    moved_shape = np.moveaxis(bits, ax, -1).shape
    bits2 = _to_rows(bits, ax)
    nblk = -(-n // bs)
    codes2 = np.empty(bits2.shape, dtype=np.uint8)
    scales2 = np.empty((bits2.shape[0], nblk), dtype=np.uint8)
    fp = fmt.element.kernel_params()
    pp = prof.kernel_params()
    tensor_scale = None
    meta = {}
    if bits2.size:
        if fmt.is_nvfp4 and prof.nvfp4_amax_scope == "row":
            if global_amax is not None:
                raise ProfileConflictError(
                    f"global_amax given but profile {prof.name!r} (nvfp4_amax_scope='row') "
                    "takes each row's own amax")
            gb, tb = _quantize_nvfp4_rows(bits2, bs, prof, fp, pp, rb2, codes2, scales2)
            tensor_scale = tb.view(np.float32).reshape(moved_shape[:-1])
            meta["global_amax_bits"] = gb.reshape(moved_shape[:-1])
        elif fmt.is_nvfp4:
            gbits = _global_amax_bits(bits2, prof, global_amax)
            order = _NV_ORDERS[prof.nvfp4_order]
            t, s_enc, sc6 = K.nvfp4_tensor_constants(gbits, order, prof.nvfp4_tensor_scale, _F32P)
            if prof.nvfp4_tile_2d:
                _quantize_nvfp4_tiles(bits2, t, s_enc, sc6, order, prof, fp, pp, rb2, codes2,
                                      scales2)
            else:
                K.quantize_nvfp4(bits2, bs, t, s_enc, sc6, order, prof.nvfp4_tensor_scale, fp,
                                 _E4M3P, _F32P, pp, rb2, codes2, scales2)
            tensor_scale = np.uint32(t).view(np.float32)
            meta["global_amax_bits"] = int(gbits)
        else:
            el = fmt.element
            mids, ge = el.midpoint_bits, el.tie_goes_up(prof.rounding)
            if n % bs == 0 and K.flat_ok(pp):
                # whole blocks end to end: one flat pass (views, no copies)
                K.quantize_mx_flat(bits2.reshape(-1), bs, fp, pp, mids, ge, codes2.reshape(-1),
                                   scales2.reshape(-1))
            else:
                K.quantize_mx(bits2, bs, fp, pp, rb2, mids, ge, codes2, scales2)
    elif fmt.is_nvfp4:
        tensor_scale = (np.ones(moved_shape[:-1], np.float32)
                        if prof.nvfp4_amax_scope == "row" else np.float32(1.0))
    scale_shape = moved_shape[:-1] + (nblk,)
    return MXTensor(
        codes=_from_rows(codes2, moved_shape, ax),
        scales=_from_rows(scales2, scale_shape, ax),
        fmt=fmt, profile=prof, axis=ax, block_size=bs, tensor_scale=tensor_scale,
        source_dtype=src, meta=meta)


def _row_amax_bits(bits2: np.ndarray, prof: Profile) -> np.ndarray:
    """Each row's amax (fp32 magnitude bits) under the same rule as :func:`_global_amax_bits`."""
    a = bits2 & np.uint32(0x7FFFFFFF)
    keep = a < np.uint32(0x7F800000) if prof.inf_in_block == "poison" else a <= np.uint32(0x7F800000)
    if prof.flush_fp32_subnormals:
        keep &= a >= np.uint32(0x800000)
    return np.where(keep, a, np.uint32(0)).max(axis=1).astype(np.uint32)


def _quantize_nvfp4_rows(bits2, bs, prof, fp, pp, rb2, codes2, scales2):
    """nvfp4_amax_scope='row' (TE row-scaled NVFP4): every row of the [rows, n] view along
    the block axis is quantized as its own tensor, with the tensor constants of its own amax.
    Rows with equal amax share one kernel call. Returns (row amax bits, row T bits)."""
    order = _NV_ORDERS[prof.nvfp4_order]
    gb = _row_amax_bits(bits2, prof)
    tb = np.empty(gb.shape, np.uint32)
    stochastic = prof.rounding == "stochastic"
    for g in np.unique(gb):
        idx = np.nonzero(gb == g)[0]
        t, s_enc, sc6 = K.nvfp4_tensor_constants(int(g), order, prof.nvfp4_tensor_scale, _F32P)
        sub = np.ascontiguousarray(bits2[idx])
        c = np.empty(sub.shape, np.uint8)
        sc = np.empty((len(idx), scales2.shape[1]), np.uint8)
        rb = np.ascontiguousarray(rb2[idx]) if stochastic else rb2
        K.quantize_nvfp4(sub, bs, t, s_enc, sc6, order, prof.nvfp4_tensor_scale, fp, _E4M3P,
                         _F32P, pp, rb, c, sc)
        codes2[idx] = c
        scales2[idx] = sc
        tb[idx] = t
    return gb, tb


def _quantize_nvfp4_tiles(bits2, t, s_enc, sc6, order, prof, fp, pp, rb2, codes2, scales2):
    """nvfp4_tile_2d (TE 2D block scaling): the [rows, n] view is zero-padded to multiples of
    16 both ways (TE _pad_tensor), each 16x16 tile is quantized as one block of 256 (its amax
    is the tile amax, its elements are encoded with the tile scale), codes are scattered back
    and the tile scale is stored for each of the tile's rows (TE repeat_interleave)."""
    R, n = bits2.shape
    R16, N16 = -(-R // 16) * 16, -(-n // 16) * 16
    tr, tc = R16 // 16, N16 // 16

    def to_tiles(a):
        pad = np.zeros((R16, N16), a.dtype)
        pad[:R, :n] = a
        return np.ascontiguousarray(pad.reshape(tr, 16, tc, 16).transpose(0, 2, 1, 3)
                                    .reshape(tr * tc, 256))
    tiles = to_tiles(bits2)
    rb = to_tiles(rb2) if prof.rounding == "stochastic" else rb2
    ct = np.empty(tiles.shape, np.uint8)
    st = np.empty((tr * tc, 1), np.uint8)
    K.quantize_nvfp4(tiles, 256, t, s_enc, sc6, order, prof.nvfp4_tensor_scale, fp, _E4M3P,
                     _F32P, pp, rb, ct, st)
    codes2[:] = ct.reshape(tr, tc, 16, 16).transpose(0, 2, 1, 3).reshape(R16, N16)[:R, :n]
    scales2[:] = np.repeat(st.reshape(tr, tc), 16, axis=0)[:R]


def _global_amax_bits(bits2: np.ndarray, prof: Profile, global_amax) -> int:
    if global_amax is not None:
        return f32_scale_bits(
            "global_amax", global_amax, inf_ok=prof.nvfp4_order == "te",
            why_inf=f": under profile {prof.name!r} (nvfp4_order={prof.nvfp4_order!r}) the "
                    "tensor scale amax/2688 would be Inf and every block zero; only "
                    "nvfp4_order='te' defines an infinite amax (S_enc falls back to 1)")
    a = bits2.reshape(-1) & np.uint32(0x7FFFFFFF)
    keep = a < np.uint32(0x7F800000) if prof.inf_in_block == "poison" else a <= np.uint32(0x7F800000)
    a = a[keep]
    if prof.flush_fp32_subnormals:
        a = a[a >= np.uint32(0x800000)]
    return int(a.max()) if a.size else 0


def dequantize(mx: MXTensor | None = None, *, codes=None, scales=None, fmt=None, axis: int = -1,
               block_size: int | None = None, tensor_scale=None) -> np.ndarray:
    """Decode to float32: ``code value * scale`` rounded once (exact for every MX format;
    overflow -> Inf, scale 0xFF or an E4M3 NaN block scale -> NaN).

    Either an MXTensor or ``codes`` (unpacked, one uint8 code per element, within the format's
    code range) with ``scales`` (uint8, the block axis reduced to ceil(n / block_size)).
    ``tensor_scale`` is NVFP4's decode-side T (``e2m1 * e4m3 * T``): a finite fp32 >= 0 (0 is
    what torchao's order gives an all-zero tensor and decodes to zeros; NaN, Inf and negative
    T are refused); None means 1 (single-level NVFP4). Other formats have no tensor scale.
    """
    if mx is not None:
        if not isinstance(mx, MXTensor):
            raise UnsupportedDtypeError(
                f"dequantize takes an MXTensor or codes=/scales=/fmt=, got {type(mx).__name__}")
        codes, scales, fmt, axis = mx.codes, mx.scales, mx.fmt, mx.axis
        block_size, tensor_scale = mx.block_size, mx.tensor_scale
    fmt = get_format(fmt)
    codes = as_code_array("codes", codes)
    scales = as_code_array("scales", scales)
    ax = _normalize_axis(axis, codes.ndim)
    # a decode takes any block length (FP8 group scales of mxref.fp8fp4 use 1..n); 0 is not
    # "the default" and is refused, as are non-integers
    bs = fmt.block_size if block_size is None else check_int("block_size", block_size, minimum=1,
                                                               error=BlockSizeError)
    if tensor_scale is not None and not fmt.is_nvfp4:
        raise ScaleValueError(f"tensor_scale is NVFP4's; {fmt.name} has no tensor scale")
    row_ts = None
    if tensor_scale is not None and isinstance(tensor_scale, np.ndarray) and tensor_scale.size != 1:
        row_ts = _row_tensor_scales(tensor_scale, codes.shape, _normalize_axis(axis, codes.ndim))
        tbits = 0
    else:
        tbits = 0x3F800000 if tensor_scale is None else f32_scale_bits(
            "tensor_scale", tensor_scale, inf_ok=False,
            why_inf=" (decode is e2m1 * e4m3 * tensor_scale: it must be finite)")
    n = codes.shape[ax]
    expect = list(codes.shape)
    expect[ax] = -(-n // bs)
    if list(scales.shape) != expect:
        raise ShapeError(f"scales shape {scales.shape} does not match codes {codes.shape} "
                         f"with block {bs} along axis {ax} (expected {tuple(expect)})")
    check_code_range("codes", codes, fmt.element.bits, fmt.name)
    moved_shape = np.moveaxis(codes, ax, -1).shape
    c2 = _to_rows(codes, ax)
    s2 = _to_rows(scales, ax)
    out = np.empty(c2.shape, dtype=np.uint32)
    if c2.size:
        if fmt.is_nvfp4 and row_ts is not None:
            for tv in np.unique(row_ts):          # one tensor scale per row (te_nvfp4_row)
                idx = np.nonzero(row_ts == tv)[0]
                o = np.empty((len(idx), c2.shape[1]), np.uint32)
                K.dequantize_nvfp4(np.ascontiguousarray(c2[idx]), np.ascontiguousarray(s2[idx]),
                                   bs, int(tv), fmt.element.kernel_params(), _E4M3P, _F32P, o)
                out[idx] = o
        elif fmt.is_nvfp4:
            K.dequantize_nvfp4(c2, s2, bs, tbits, fmt.element.kernel_params(), _E4M3P, _F32P, out)
        else:
            K.dequantize_mx(c2, s2, bs, fmt.element.kernel_params(), _F32P, out)
    return _from_rows(out, moved_shape, ax).view(np.float32)


def _row_tensor_scales(ts: np.ndarray, codes_shape, ax: int) -> np.ndarray:
    """A per-row NVFP4 tensor scale (nvfp4_amax_scope='row'): float32 shaped like the codes
    with the block axis removed, each finite and >= 0; returns the fp32 bits, one per row of
    the [rows, n] view along the block axis."""
    expect = tuple(d for i, d in enumerate(codes_shape) if i != ax)
    if ts.dtype != np.float32 or ts.shape != expect:
        raise ShapeError(f"a per-row tensor_scale must be float32 of shape {expect} (the codes "
                         f"without the block axis), got {ts.dtype} {ts.shape}")
    b = np.ascontiguousarray(ts).view(np.uint32).reshape(-1)
    mag = b & np.uint32(0x7FFFFFFF)
    if (mag > 0x7F800000).any():
        raise ScaleValueError("tensor_scale has a NaN row")
    if (mag == 0x7F800000).any():
        raise ScaleValueError("tensor_scale has an infinite row (decode is e2m1 * e4m3 * "
                              "tensor_scale: it must be finite)")
    if ((b >> 31).astype(bool) & (mag != 0)).any():
        raise ScaleValueError("tensor_scale has a negative row")
    return mag
