"""The backend protocol: what a kernel stack implements to be held to the golden corpus.

A backend is any object with the attributes and methods of :class:`Backend` (subclassing it is
optional; duck typing is enough). Every method takes and returns **numpy arrays of bit
patterns**, C-contiguous, so no float conversion can hide a difference:

========================  ===================================================================
source dtype              array dtype
========================  ===================================================================
``float32``               ``uint32`` (IEEE-754 binary32 bits)
``bfloat16``/``float16``  ``uint16``
element / scale codes     ``uint8`` (one code per byte, unpacked; E8M0 or E4M3 scale bytes)
fp32 results              ``uint32`` bits
========================  ===================================================================

Methods (a backend implements those of the golden ops it lists in ``ops``, names from
:data:`mxref.ops.OP_NAMES`, the op table; ``verify`` calls
whole files at once, never one row at a time, except ``pack``/``scale_layout`` whose rows
have different shapes):

``quantize_mx(src, *, src_dtype, fmt, profile, axis) -> (scales, codes)``
    golden ops ``quantize_mx`` and ``quantize_mx_tensor``. ``src`` has any rank; blocks of
    ``FORMATS[fmt].block_size`` run along ``axis`` (a ragged last block is handled as the
    profile says). ``scales``: uint8, ``src.shape`` with ``axis`` reduced to
    ``ceil(n / block)``; ``codes``: uint8, ``src.shape``.
``quantize_nvfp4(src, *, src_dtype, profile) -> (scales, codes, tensor_scale)``
    ``src`` is ``[T, R, C]``: T independent tensors, each with its own global amax, blocks
    of 16 along the last axis. ``scales`` uint8 ``[T, R, C/16]`` (E4M3 codes), ``codes``
    uint8 ``[T, R, C]``, ``tensor_scale`` uint32 ``[T]`` (fp32 bits of the decode-side tensor
    scale: value = e2m1 * e4m3 * tensor_scale). Under a profile with
    ``nvfp4_amax_scope='row'`` each row of each tensor has its own scale: ``tensor_scale``
    is uint32 ``[T, R]``. Under ``nvfp4_tile_2d`` the block scale covers a 16x16 tile of
    ``[R, C]`` (zero-padded when ragged) and ``scales`` repeats it for each of the tile's rows.
    A backend that does not implement such a knob raises Unsupported.
``convert(src, *, src_dtype, fmt, profile) -> codes``
    element conversion alone at scale 2^0; ``codes`` has ``src.shape``.
``dequantize(scales, codes, *, fmt, profile) -> bits``
    ``scales`` uint8 ``[..., nb]``, ``codes`` uint8 ``[..., nb * block]`` (blocks along the
    last axis); returns uint32 fp32 bits shaped like ``codes``.
``pack(codes, *, fmt) -> packed``
    uint8 ``[n]`` -> uint8 ``[ceil(n * bits / 8)]`` (FP4 element 0 in the low nibble, FP6 four
    per three bytes little-endian, FP8/INT8 unchanged).
``scale_layout(scales, *, layout) -> bytes``
    uint8 ``[R, C]`` -> uint8 1-D in ``cublas`` (128x4 tiles) or ``amd`` (e8m0_shuffle) order.
    Part of golden op ``pack``.

The other op families (rotate, gemm, sr, fp8fp4, decompose in :data:`mxref.ops.FAMILIES`; row
layouts in golden/README.md, contracts in docs/):

``rotate(src, *, src_dtype, n, signs, method, round_to) -> uint32 bits``
    block Hadamard along the last axis (``signs`` int8 [n]; ``method`` "butterfly" or
    "exact"; ``round_to`` "float32" or "bfloat16"). A variant the backend lacks may raise
    Unsupported (noted, the others still checked). Optional ``random_signs(n, *, seed, step,
    tensor_id) -> int8 [n]``.
``quantize_rotated(src, *, src_dtype, fmt, profile, n, signs, round_to) -> (scales, codes)``
    (NVFP4: ``(scales, codes, tensor_scale)``, each row its own tensor).
``gemm(a_scales, a_codes, b_scales, b_codes, *, fmt_a, fmt_b, a_tensor_scale=None,
b_tensor_scale=None) -> uint32 [M, N]``
    with the attribute ``gemm_contract``: "exact" or "block_sequential" (bit-exact against
    that golden column) or "bound" (default; within the proven bound of the exact result), or
    a callable ``(fmt_a, fmt_b) -> contract`` when it depends on the format pair.
``rotated_gemm(x, w, *, src_dtype, fmt_x, fmt_w, profile, n, signs, round_to) -> uint32``
``quantize_mx_sr(src, rbits, *, src_dtype, fmt, profile, axis) -> (scales, codes)``
    the profile with stochastic rounding and the given uint32 words; optional
    ``random_bits(n, *, seed, offset) -> uint32 [n]`` (checked against tl.randint's stream).
``quantize_nvfp4_sr(src, rbits, *, src_dtype, profile) -> (scales, codes, tensor_scale)``
    NVFP4 as ``quantize_nvfp4`` (``src`` ``[T, R, C]``, each tensor its own global amax), the
    profile with stochastic rounding and one uint32 word per element (``rbits`` uint32, shaped
    like ``src``); ``random_bits`` as above.
``mxfp4_to_fp8(scales, codes, *, group) -> (group_scales, fp8_codes, exact)``,
``fp8_to_mxfp4(group_scales, codes, *, group, profile) -> (scales, codes)``,
``reblock(scales, codes, *, fmt, profile, axis) -> (scales, codes)``
``decompose(src, *, src_dtype, fmt, profile) -> (components uint64 [R, 3, L], flags uint8)``
    float64 bits of denominator x (scale, dead, grid) and the flag bits of golden/README.md.
``macroblock(src, *, src_dtype, fmt, profile, macro, macro_scale_dtype) -> (macro_scale_bits
uint32 [R, M], scales, codes)``, ``outlier_fallback(src, *, src_dtype, fmt, profile, rule) ->
(flagged uint8 [R, nb], scales, codes, residual uint16 bf16 bits)``,
``quantize_4over6(src[T, R, C], *, src_dtype, profile) -> (scales, codes, tensor_scale,
choice uint8 [T, R, C/16])``: the corrections of mxref.corrections (macro 0 = the row).

``profile`` is the name of a profile in :data:`mxref.PROFILES`. A backend that implements one
fixed behaviour (a third-party stack) may ignore it: ``verify`` only asks a backend for the
profiles it claims, and ``--detect-profile`` compares the backend's native behaviour with every
profile's goldens.

A backend may claim *relaxations* in the attribute ``relaxations`` (a tuple of names; default
none): typed classes of difference it accepts for itself, each reported apart from bit-exact
(case status ``relaxed``, summary ``relaxed_cases``) and never accepted without the claim.

``"scale_step"``
    for ``quantize_mx`` / ``quantize_mx_tensor`` (E8M0 scales; not NVFP4): a block's scale byte
    may be exactly one step from the golden's (2x or 0.5x; neither byte 0xFF, so a poisoned
    block is still 0xFF exactly), provided every element code of the block is what the
    golden's profile encodes at the backend's scale (mxref's own element encoder on the source
    bits). Fused kernels that derive the scale from an amax computed another way (TE vs ROCm
    TE) differ like this. Two steps, or one step with one inconsistent code, is a mismatch.

The timing entry (optional; ``mxref leaderboard run gpu --backend X`` times only backends that
have it, and lists the others as "not timed", never with a number):

``timed_quantize_mx(x, *, fmt, profile, axis) -> run``
    ``x`` is a **device tensor** (torch, on the backend's device, of the source dtype, e.g.
    ``torch.bfloat16`` ``[R, C]``), never a numpy array. The method does everything that must
    not be timed (compilation, allocation, layout choice) and returns a zero-argument callable
    ``run``; ``run()`` quantizes ``x`` on the device and returns ``(scales, codes)`` as **device
    tensors**, with no host copy, no host synchronisation and no numpy inside. The leaderboard
    times ``run()`` alone (the same timer and median rule as our kernels: ``do_bench`` medians
    with the L2 flushed on a GPU) and, before timing, checks its output bit for bit against
    mxref for ``profile`` on the same input: ``scales`` one E8M0 byte per block (any shape with
    the reference's element count), ``codes`` either unpacked (one per byte, ``x``'s shape) or
    packed like the ``pack`` op (FP4: two per byte along the block axis, element 2i in the low
    nibble). A backend claims only what its numpy ``quantize_mx`` is verified for: that method
    must run the same device code as ``run`` (the leaderboard verifies the backend in the same
    job and refuses a number without a passing verify of that backend, op, format and profile).
    It may raise :class:`Unsupported` for a workload it cannot take (e.g. an axis): that
    workload is listed "not timed" with the reason.

:func:`timing_entry` finds the entry of an op (None where the backend has none).

A method may raise :class:`Unsupported` for a call it cannot make (a dtype its stack lacks);
those cases are counted as skipped, never as passed. Any other exception is recorded per case
as an error. The errors a backend raises (:class:`Unsupported`, :class:`BackendUnavailable`)
live in :mod:`mxref.errors`, so a backend that duck-types :class:`Backend` needs no import
from this package.
"""
from __future__ import annotations

from ..errors import BackendUnavailable, UnknownBackendError, Unsupported  # noqa: F401


class Backend:
    """Base class with the declared attributes; subclasses override what they implement."""

    name: str = "unnamed"
    version: str = "0"
    device: str = "cpu"
    ops: frozenset = frozenset()
    # profile names the backend claims to implement bit-exactly; ("*",) = every profile
    profiles: tuple = ()
    # relaxations the backend claims (names in mxref.verify.compare.RELAXATIONS); none = bit-exact
    relaxations: tuple = ()

    def check_available(self) -> None:
        """Raise BackendUnavailable(reason) when the backend cannot run on this machine."""

    def describe(self) -> dict:
        """Name, version, device and anything else a report should show (arch, runtime)."""
        return {"name": self.name, "version": self.version, "device": self.device}

    def claims(self, profile: str) -> bool:
        return "*" in self.profiles or profile in self.profiles

    @property
    def native_profile(self) -> str:
        """The profile a fixed-behaviour backend is run as under --detect-profile."""
        return "ocp" if "*" in self.profiles or not self.profiles else self.profiles[0]


# op -> the name of its timing entry (module docstring, "The timing entry")
TIMING_ENTRIES = {"quantize_mx": "timed_quantize_mx"}


def timing_entry(backend, op: str = "quantize_mx"):
    """The backend's timing entry for `op` (a bound method), or None where it has none: such a
    backend is verified but never timed."""
    name = TIMING_ENTRIES.get(op)
    fn = getattr(backend, name, None) if name else None
    return fn if callable(fn) else None
