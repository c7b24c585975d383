"""What every golden file shares: its coordinates (:class:`FileSpec`), case ids, the leading
columns, the schema metadata (one writer for every op family), coverage counts, source-dtype
conversions, and the generator-source hash.

The per-family writers in :mod:`.suites` build their rows with these helpers; the driver
(:mod:`.generate`) writes the files and the manifest.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..formats import FORMATS
from ..ops import OPS, family_ops
from ..profiles import PROFILES
from . import cases as C
from .cases.base import f32_bits  # noqa: F401  (re-exported for the writers)
from .writer import FORMAT_VERSION, SUITE_VERSION, dict_column, plain_column, tensor_column

#: numpy bit-pattern dtype of each source dtype
SRC_NP = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}
SPEC = "OCP-MX-1.0 + NVFP4"
#: the MX block formats (every format but NVFP4)
MX_FORMATS = tuple(f for f in FORMATS if not FORMATS[f].is_nvfp4)

# ---- generator-source hash ------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
# Sources whose bytes decide the goldens (the transitive generator; WebGPU CTS hashes.json idea),
# relative to mxref/: the reference modules the builders call, the kernels under them, the op
# table, and the write side of the golden package (cases, suites, columns, the driver, the
# cross-checks recorded in the files, the Arrow writer and content hash). The read side
# (golden/store.py, golden/manifest.py: opening, validating and checking a corpus) is left out,
# so a change to a check does not regenerate the corpus. Globs, so that splitting a module into
# a package keeps it covered; a named module that does not exist is skipped.
GENERATOR_SOURCES = ("_kernels.py", "_kernels/*.py", "formats.py", "profiles.py", "ops.py",
                     "quantize.py", "inputs.py", "layouts.py", "rotate.py", "gemm.py",
                     "_gemm_kernels.py", "rotated_gemm.py", "fp8fp4.py", "decompose.py",
                     "corrections.py", "golden/cases/**/*.py", "golden/suites/**/*.py",
                     "golden/columns.py", "golden/generate.py", "golden/crosscheck.py",
                     "golden/writer.py")


def generator_source_files() -> list[str]:
    """The files :func:`generator_source_sha256` hashes: sorted posix paths relative to mxref/."""
    found = set()
    for pattern in GENERATOR_SOURCES:
        found.update(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern) if p.is_file())
    return sorted(found)


def generator_source_sha256() -> str:
    h = hashlib.sha256()
    for rel in generator_source_files():
        h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()


# ---- file coordinates -----------------------------------------------------------------------
@dataclass(frozen=True)
class FileSpec:
    op: str
    fmt: str
    profile: str
    src_dtype: str
    level: int

    @property
    def relpath(self) -> str:
        return f"L{self.level}/{self.op}/{self.fmt}__{self.profile}__{self.src_dtype}.arrow"


def applies(fmt: str, profile, src_dtype: str | None = None) -> bool:
    """Whether a profile (name or Profile) defines every knob this format needs and, when
    ``src_dtype`` is given, that source dtype (``Profile.source_dtypes``)."""
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    try:
        prof.check_format(FORMATS[fmt])
        if src_dtype is not None:
            prof.check_source_dtype(src_dtype)
        return True
    except Exception:  # a knob/format combination the profile does not define
        return False


# ---- columns --------------------------------------------------------------------------------
def case_ids(spec: FileSpec, classes, srcs, extra=None) -> np.ndarray:
    """Content-addressed stable ids: hash(op, format, dtype, class, input bytes). The profile is
    left out on purpose: the same input case has the same id in every profile's file, so
    `mxref diff` between two profiles shows exactly which cases they disagree on."""
    ids = np.empty(len(classes), dtype=np.uint64)
    for i, (c, s) in enumerate(zip(classes, srcs)):
        h = hashlib.sha256(f"{spec.op}|{spec.fmt}|{spec.src_dtype}|{c}|".encode())
        h.update(np.ascontiguousarray(s).tobytes())
        if extra is not None:
            h.update(str(extra[i]).encode())
        ids[i] = int.from_bytes(h.digest()[:8], "little")
    return ids


def head_columns(spec: FileSpec, classes, inputs, *, tags, extra=None, check=None) -> list:
    """The columns every golden file starts with (:data:`mxref.ops.COMMON_COLUMNS`):
    case_id, class, tags, check."""
    return [plain_column("case_id", case_ids(spec, classes, inputs, extra)),
            dict_column("class", classes),
            plain_column("tags", tags),
            dict_column("check", check if check is not None else ["bitexact"] * len(classes))]


def src_field(spec: FileSpec, src: np.ndarray, logical):
    """The ``src_bits`` input column of a file whose rows are source bit patterns."""
    return tensor_column("src_bits", src, {
        "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
        "logical_shape": list(logical)})


def check_columns(op: str, cols: list) -> None:
    """The built columns are the op's row layout in :data:`mxref.ops.OPS`, in file order."""
    names = tuple(f.name for f, _ in cols)
    if names != OPS[op].columns:
        raise AssertionError(f"{op}: built columns {names} are not the row layout "
                             f"{OPS[op].columns} of mxref.ops.OPS")


# ---- schema metadata ------------------------------------------------------------------------
def coverage(classes) -> dict:
    """Rows per class id, sorted by class id."""
    out = {}
    for c in classes:
        out[c] = out.get(c, 0) + 1
    return dict(sorted(out.items()))


def file_meta(spec: FileSpec, cov: dict, extra: dict) -> dict:
    """The schema metadata of one golden file (``mxref.*`` keys), for every op family.

    Files of the ``quantize`` family also describe their block format, the oracle and the
    input RNG (they hold source blocks of one format); the other families state their
    contract (a docs page) in ``extra``. Keys keep the order the files have always had."""
    prof = PROFILES.get(spec.profile)
    core = spec.op in family_ops("quantize")
    meta = {"format_version": FORMAT_VERSION, "suite": "mx-core", "suite_version": SUITE_VERSION,
            "spec": SPEC, "op": spec.op, "format": spec.fmt}
    if core:
        fmt = FORMATS[spec.fmt]
        meta.update({"elem_format": fmt.element.name, "scale_format": fmt.scale.name,
                     "block_size": fmt.block_size})
    meta.update({"src_dtype": spec.src_dtype, "level": str(spec.level), "profile": spec.profile,
                 "profile_params": prof.knobs() if prof is not None else {},
                 "generator": f"mxref-golden/{C.GENERATOR_VERSION}",
                 "generator_source_sha256": generator_source_sha256()})
    if core:
        meta["oracle"] = {"kind": "integer-domain numba kernels, differentially tested against "
                                  "the fractions.Fraction oracle in tests/oracle.py"}
    meta["coverage"] = cov
    if core:
        meta["rng"] = {"bitgen": "PCG64 raw 64-bit words", "seed": "sha256 of (element, dtype, "
                       "class, block key) per block", "note": "provenance only: every input is "
                       "stored"}
    return {**meta, **extra}


# ---- source dtypes --------------------------------------------------------------------------
def src_view(src: np.ndarray, src_dtype: str):
    """(array, source_dtype) that mxref's functions accept for these source bit patterns:
    float32 bits as a float32 view, 16-bit patterns as they are with their dtype name."""
    if src_dtype == "float32":
        return src.view(np.float32), None
    return src, src_dtype


def to_src(bits32: np.ndarray, src_dtype: str) -> np.ndarray:
    """fp32 bits -> source bits (RNE narrowing by ml_dtypes / numpy; NaN stays NaN)."""
    if src_dtype == "float32":
        return bits32.astype(np.uint32)
    if src_dtype == "bfloat16":
        import ml_dtypes
        return bits32.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    with np.errstate(over="ignore"):
        return bits32.view(np.float32).astype(np.float16).view(np.uint16)


def bits_to_f32(bits16: np.ndarray, sd: str) -> np.ndarray:
    """16-bit source patterns -> float32 values (exact widening)."""
    from ..inputs import as_f32_bits
    return as_f32_bits(bits16, source_dtype=sd)[0].view(np.float32)
