"""Which tensors of a checkpoint form one quantized tensor, and in which layout.

Three layouts are recognised by name, dtype and shape (``--layout`` restricts to one):

* ``gpt-oss``: ``X.blocks`` uint8 ``[..., n_blocks, 16]`` (32 E2M1 codes per block, two per
  byte, low nibble = even element) with ``X.scales`` uint8 E8M0 ``[..., n_blocks]``.
* ``mx``: codes ``X`` (F8_E4M3 / F8_E5M2 -> MXFP8, I8 -> MXINT8, F4 -> packed MXFP4, U8 ->
  packed FP4 or, with ``--format``, one unpacked code per byte) with E8M0 scales ``X_scale``
  (or ``X.scale``, ``X_scale_inv``, ``X_scales``), one per 32 elements of the last axis.
* ``nvfp4`` (ModelOpt / TE export): packed E2M1 ``X`` (U8 or F4), ``X_scale`` F8_E4M3 per 16
  elements, ``X_scale_2`` fp32 per tensor, and ``<prefix>.input_scale`` for ``<prefix>.weight``.

A scale tensor larger than its codes need (rows or columns padded, e.g. to 128 x 4 tiles) is
read row-major; the extra region is padding and must be zero bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MXRefError
from ..formats import get_format
from .io import ScanFileError, TensorInfo

__all__ = ["LAYOUTS", "QTensor", "UnknownLayoutError", "recognise"]

LAYOUTS = ("auto", "gpt-oss", "mx", "nvfp4")
_SCALE_SUFFIXES = ("_scale", ".scale", "_scale_inv", "_scales", ".scales")
_QUANT_DTYPES = {"U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4"}
_MX_BY_DTYPE = {"F8_E4M3": "mxfp8_e4m3", "F8_E5M2": "mxfp8_e5m2", "I8": "mxint8", "F4": "mxfp4"}
_DECLARE = ("declare one with --layout gpt-oss|mx|nvfp4 (and --format for unpacked uint8 "
            "codes); see docs/scan.md")


class UnknownLayoutError(MXRefError, ValueError):
    """Quantized-looking tensors (uint8/int8/fp8/fp4) that no layout explains (exit 2)."""


@dataclass
class QTensor:
    """One quantized tensor: its parts and how to read them."""

    name: str
    layout: str
    fmt: str
    codes: TensorInfo
    scales: TensorInfo
    packed: bool                       # two FP4 codes per byte
    rows: int                          # product of the leading dims
    n: int                             # elements along the block axis (last)
    tensor_scale: TensorInfo | None = None
    input_scale: TensorInfo | None = None
    notes: list = field(default_factory=list)   # layout-level anomalies: (kind, message)

    @property
    def block_size(self) -> int:
        return get_format(self.fmt).block_size

    @property
    def nblk(self) -> int:
        return -(-self.n // self.block_size)

    @property
    def shape(self) -> list:
        lead = list(self.codes.shape[:-2] if self.layout == "gpt-oss" else self.codes.shape[:-1])
        return lead + [self.n]


def _rows(shape) -> int:
    r = 1
    for d in shape:
        r *= d
    return r


def _scale_grid(q: QTensor):
    """Check the scale tensor can hold [rows, nblk] (padding allowed), else a typed error."""
    s = q.scales
    want = (q.rows, q.nblk)
    have = (_rows(s.shape[:-1]), s.shape[-1]) if s.shape else (1, 1)
    if q.layout == "gpt-oss":
        ok = tuple(s.shape) == tuple(q.codes.shape[:-1])
    else:
        ok = len(s.shape) == len(q.codes.shape) and have[0] >= want[0] and have[1] >= want[1] \
            and (have[0] == want[0] or len(s.shape) == 2)
    if not ok:
        raise ScanFileError(f"{s.file}: scale tensor {s.name!r} has shape {list(s.shape)}, which "
                            f"cannot hold the {want[0]} x {want[1]} scales of {q.codes.name!r} "
                            f"{q.codes.dtype} {list(q.codes.shape)} ({q.fmt}, block "
                            f"{q.block_size})")


def _scale_dtype_note(q: QTensor, ok: set):
    if q.scales.dtype not in ok:
        want = "E4M3" if q.fmt == "nvfp4" else "E8M0"
        msg = (f"scale tensor {q.scales.name!r} is labelled {q.scales.dtype}; {q.fmt} block "
               f"scales are {want} bytes (read as such)")
        q.notes.append(("scale_dtype_mislabelled", msg))


def _gptoss(t: dict, claimed: set) -> list:
    out = []
    for name, c in t.items():
        if not name.endswith(".blocks") or name[:-7] + ".scales" not in t:
            continue
        base = name[:-7]
        s = t[base + ".scales"]
        if c.dtype != "U8" or len(c.shape) < 2 or c.shape[-1] != 16:
            raise ScanFileError(f"{c.file}: {name!r} is {c.dtype} {list(c.shape)}; gpt-oss "
                                "MXFP4 blocks are uint8 [..., n_blocks, 16]")
        q = QTensor(base, "gpt-oss", "mxfp4", c, s, True, _rows(c.shape[:-2]),
                    c.shape[-2] * 32)
        _scale_grid(q)
        _scale_dtype_note(q, {"U8", "F8_E8M0"})
        claimed.update((name, s.name))
        out.append(q)
    return out


def _scale_of(t: dict, name: str):
    return next((t[name + suf] for suf in _SCALE_SUFFIXES if name + suf in t), None)


def _pair(t: dict, claimed: set, layout: str, fmt_opt) -> list:
    out = []
    for name, c in t.items():
        if name in claimed or c.dtype not in _QUANT_DTYPES - {"F8_E8M0"} or not c.shape:
            continue
        s = _scale_of(t, name)
        if s is None or s.name in claimed:
            continue
        has_t2 = name + "_scale_2" in t
        packable = c.dtype in ("U8", "F4")
        per = c.shape[-1] * (1 if c.dtype == "F4" else 2) if packable else None
        # NVFP4: a tensor scale, or E4M3 scales wide enough for one per 16 elements
        nv = packable and (layout == "nvfp4" or layout == "auto" and (
            has_t2 or s.dtype == "F8_E4M3" and s.shape and s.shape[-1] >= -(-per // 16)))
        if nv and layout in ("auto", "nvfp4"):
            n = per
            q = QTensor(name, "nvfp4", "nvfp4", c, s, True, _rows(c.shape[:-1]), n)
            if has_t2:
                q.tensor_scale = t[name + "_scale_2"]
            if name.endswith(".weight") and name[:-7] + ".input_scale" in t:
                q.input_scale = t[name[:-7] + ".input_scale"]
            _scale_dtype_note(q, {"F8_E4M3", "U8"})
        elif layout in ("auto", "mx"):
            fmt = _MX_BY_DTYPE.get(c.dtype)
            packed = c.dtype == "F4"
            n = c.shape[-1] * (2 if packed else 1)
            if c.dtype == "U8":
                if fmt_opt is None and s.shape and s.shape[-1] == -(-2 * c.shape[-1] // 32):
                    fmt, packed, n = "mxfp4", True, 2 * c.shape[-1]   # packed FP4
                elif fmt_opt is None:
                    continue                                          # left to the error
                else:
                    fmt = fmt_opt
                    packed = fmt == "mxfp4" and s.shape and s.shape[-1] == -(-2 * n // 32)
                    n = 2 * n if packed else n
            elif fmt_opt is not None and fmt_opt != fmt:
                raise UnknownLayoutError(f"{name!r} is {c.dtype}, which is {fmt}, not --format "
                                         f"{fmt_opt}")
            q = QTensor(name, "mx", fmt, c, s, packed, _rows(c.shape[:-1]), n)
            _scale_dtype_note(q, {"F8_E8M0", "U8"})
        else:
            continue
        _scale_grid(q)
        claimed.update(x.name for x in (c, s, q.tensor_scale, q.input_scale) if x is not None)
        out.append(q)
    return out


def recognise(tensors: dict, layout: str = "auto", fmt: str | None = None) -> tuple[list, list]:
    """(quantized tensors, names of the unquantized tensors left alone). Quantized-looking
    tensors that no layout claims raise :class:`UnknownLayoutError` naming them."""
    if layout not in LAYOUTS:
        raise UnknownLayoutError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")
    if fmt is not None and get_format(fmt).is_nvfp4:
        raise UnknownLayoutError("--format names an MX format; NVFP4 is --layout nvfp4")
    claimed: set = set()
    found = _gptoss(tensors, claimed) if layout in ("auto", "gpt-oss") else []
    if layout != "gpt-oss":
        found += _pair(tensors, claimed, layout, fmt)
    left = sorted(n for n, t in tensors.items() if n not in claimed)
    unknown = [n for n in left if tensors[n].dtype in _QUANT_DTYPES]
    if unknown:
        show = ", ".join(f"{n} ({tensors[n].dtype} {list(tensors[n].shape)})" for n in unknown[:8])
        more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        raise UnknownLayoutError(
            f"no {'known' if layout == 'auto' else layout} layout explains {len(unknown)} "
            f"quantized-looking tensor(s): {show}{more}; {_DECLARE}")
    return found, left
