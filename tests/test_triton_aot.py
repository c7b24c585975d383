"""Ahead-of-time compilation of every Triton kernel in mxkernels/triton_quant.py for AMD
gfx942 / gfx950 (HSACO) and NVIDIA sm_90 (cubin), without a GPU: this is how CI catches a
kernel that no longer builds for ROCm or CUDA. A few representative constexpr combinations per
kernel (integer-only paths, the int64 division paths, each source dtype), each in a fresh
Triton cache so that the compiler really runs (about a second per kernel and target).

API notes (Triton >= 3.2, checked with 3.6 and 3.9): ``ASTSource(fn, signature, constexprs)``
takes ``signature`` as a dict of *every* argument name -> type string ("*i32", "*u8", "i32";
"constexpr" for constexpr parameters) and ``constexprs`` as a dict name -> value; targets are
``GPUTarget(backend, arch, warp_size)`` with arch "gfx942" (str) for HIP and 90 (int) for CUDA.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("torch")

try:
    from triton.backends import backends as _BACKENDS
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError as e:  # pragma: no cover - very old triton
    pytest.skip(f"triton {triton.__version__} lacks the ASTSource/GPUTarget AOT API: {e}",
                allow_module_level=True)

if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
    pytest.skip("TRITON_INTERPRET=1: triton.language's own @jit helpers are interpreted in this "
                "process and cannot be compiled; run the AOT test without it",
                allow_module_level=True)

# the kernels do no floating-point arithmetic, so Triton 3.9's FP-fusion default is moot
pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")

TARGETS = {
    "gfx942": ("amd", ("hip", "gfx942", 64)),
    "gfx950": ("amd", ("hip", "gfx950", 64)),
    "sm_90": ("nvidia", ("cuda", 90, 32)),
}

# (kernel, format, profile, source dtype): the integer-only fast paths, the int64 division
# paths (torchao_rceil's float32-log2 rule, NVFP4's exact and fp32-op-order paths), every
# source dtype, the fixed-point element path and the nonstandard knobs
COMBOS = [
    ("mx_quantize", "mxfp4", "ocp", "bfloat16"),
    ("mx_quantize", "mxfp8_e4m3", "torchao_rceil", "float32"),
    ("mx_quantize", "mxint8", "microxcaling", "float16"),
    ("mx_quantize", "mxfp8_e5m2", "te_mxfp8", "float32"),
    ("mx_dequantize", "mxfp8_e5m2", "ocp", "float32"),
    ("mx_dequantize", "mxint8", "ocp", "float32"),
    ("mx_convert", "mxfp6_e3m2", "ocp", "float32"),
    ("nvfp4_amax", "nvfp4", "ocp", "float32"),
    ("nvfp4_tensor_scale", "nvfp4", "te_nvfp4", "float32"),
    ("nvfp4_quantize", "nvfp4", "ocp", "float16"),
    ("nvfp4_quantize", "nvfp4", "te_nvfp4", "bfloat16"),
    ("nvfp4_quantize", "nvfp4", "torchao_nvfp4", "float32"),
]


def _missing(vendor: str) -> str | None:
    """Why the installed triton cannot build for ``vendor`` (None when it can)."""
    if vendor not in _BACKENDS:
        return f"triton {triton.__version__} has no {vendor!r} backend compiler " \
               f"(installed: {', '.join(sorted(_BACKENDS))})"
    if vendor == "nvidia":
        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        if not (os.environ.get("TRITON_PTXAS_PATH") or bundled.exists()
                or shutil.which("ptxas")):
            return "no ptxas (neither bundled with triton, TRITON_PTXAS_PATH nor on PATH)"
    return None


@pytest.fixture(scope="module")
def tq():
    """Kernels decorated for the compiler (a private copy if the canonical module was
    imported under TRITON_INTERPRET=1)."""
    from mxkernels.loader import load_kernels
    mod = load_kernels(False)
    assert type(mod.mx_quantize_kernel).__name__ == "JITFunction"
    return mod


@pytest.fixture(scope="module", autouse=True)
def fresh_cache(tmp_path_factory):
    """A Triton cache that is empty when the pytest session starts, so every distinct build
    really compiles. Under pytest-xdist the workers share one, in the session's base temporary
    directory (each worker's is a subdirectory of it): a build that two tests need (the
    dot_scaled spec for both AMD targets, the first block_sequential spec for sm_90) then runs
    once, not once per worker."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        cache = base.parent / "triton_aot_cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("triton_cache")
    prev = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    yield
    if prev is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = prev


def test_combos_cover_every_kernel(tq):
    assert {c[0] for c in COMBOS} == set(tq.modules["triton_quant"].KERNELS)


def _module_specs():
    """(module, spec id, jitfn, signature, constexprs) of every other kernel module's
    ``aot_specs()``; each module must cover each of its KERNELS."""
    from mxkernels.loader import KERNEL_MODULES, load_kernels
    ks = load_kernels(False)
    out = []
    for full in KERNEL_MODULES:
        short = full.rsplit(".", 1)[1]
        mod = ks.modules.get(short)
        if mod is None or short in ("triton_common", "triton_quant"):
            continue
        for spec_id, fn, sig, ce in mod.aot_specs():
            out.append((short, spec_id, fn, sig, ce))
    return out


try:
    SPECS = _module_specs()
except Exception as e:  # noqa: BLE001 - reported by test_module_specs_load
    SPECS, SPECS_ERROR = [], e
else:
    SPECS_ERROR = None


def test_module_specs_cover_every_kernel(tq):
    assert SPECS_ERROR is None, f"aot_specs() failed: {SPECS_ERROR!r}"
    for short, mod in tq.modules.items():
        if short in ("triton_common", "triton_quant"):
            continue
        covered = {fn for s, _, fn, _, _ in SPECS if s == short}
        missing = [k for k, fn in mod.KERNELS.items() if fn not in covered]
        assert not missing, f"{short}: aot_specs() compiles none of {missing}"


def _build(spec_target, fn, sig, ce):
    vendor, spec = TARGETS[spec_target]
    why = _missing(vendor)
    if why:
        pytest.skip(why)
    # as the launchers run them: no FMA contraction
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=ce),
                              target=GPUTarget(*spec), options={"enable_fp_fusion": False})
    asm = compiled.asm
    if vendor == "amd":
        blob = asm["hsaco"]
        assert isinstance(blob, bytes) and blob[:4] == b"\x7fELF" and len(blob) > 1000
        assert re.search(r'\.amdgcn_target\s+"[^"]*' + spec_target + '"', asm["amdgcn"])
    else:
        blob = asm["cubin"]
        assert isinstance(blob, bytes) and blob[:4] == b"\x7fELF" and len(blob) > 1000
        ptx = asm["ptx"]
        assert ".target sm_90" in ptx
        # fp32 arithmetic keeps subnormals (the contracts round them) and is not contracted
        assert "add.ftz.f32" not in ptx and "mul.ftz.f32" not in ptx
        assert "fma.rn.f32" not in ptx
    return asm


def _target_matrix(specs):
    """(target, spec) pairs: each kernel's first spec for all three targets, and every other
    spec for one AMD target, gfx942 and gfx950 in turn. Every kernel then builds for every
    target and every constexpr combination for ROCm, which has no hardware here: this build is
    its only check. The other specs build for sm_90 wherever the GPU tests run (206 builds
    instead of the full product's 313, 2026-11-28). MXREF_AOT_ALL_TARGETS=1: the full
    product."""
    full = os.environ.get("MXREF_AOT_ALL_TARGETS") == "1"
    seen, turn, out = set(), 0, []
    for spec in specs:
        first = (spec[0], spec[2]) not in seen
        seen.add((spec[0], spec[2]))
        if full or first:
            out += [(t, spec) for t in TARGETS]
        else:
            out.append((("gfx942", "gfx950")[turn % 2], spec))
            turn += 1
    return out


@pytest.mark.parametrize("target, spec", _target_matrix(SPECS),
                         ids=lambda v: v if isinstance(v, str) else f"{v[0]}-{v[1]}")
def test_module_kernels_compile(target, spec):
    short, _, fn, sig, ce = spec
    _build(target, fn, sig, ce)


def test_target_matrix_covers_every_kernel_and_spec():
    pairs = _target_matrix(SPECS)
    for spec in SPECS:
        assert {t for t, s in pairs if s is spec} & {"gfx942", "gfx950"}, spec[:2]
    for short, fn in {(s[0], s[2]) for s in SPECS}:
        assert {t for t, s in pairs if s[0] == short and s[2] is fn} == set(TARGETS), short


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(c))
@pytest.mark.parametrize("target", list(TARGETS))
def test_compiles(tq, target, combo):
    vendor, spec = TARGETS[target]
    why = _missing(vendor)
    if why:
        pytest.skip(why)
    kernel, fmt, profile, sd = combo
    ce = tq.mx_constexprs(kernel, fmt, profile, sd)
    sig, ce = tq.kernel_signature(kernel, sd, ce)
    src = ASTSource(fn=tq.KERNELS[kernel], signature=sig, constexprs=ce)
    compiled = triton.compile(src, target=GPUTarget(*spec))
    asm = compiled.asm
    if vendor == "amd":
        blob = asm["hsaco"]
        assert isinstance(blob, bytes) and blob[:4] == b"\x7fELF" and len(blob) > 1000
        assert re.search(r'\.amdgcn_target\s+"[^"]*' + target + '"', asm["amdgcn"])
    else:
        blob = asm["cubin"]
        assert isinstance(blob, bytes) and blob[:4] == b"\x7fELF" and len(blob) > 1000
        assert ".target sm_90" in asm["ptx"]


def test_dot_scaled_uses_native_scaled_mfma_on_gfx950():
    """Where the kernels use tl.dot_scaled (the benchmark peer), gfx950 (MI355X) must get the
    native scaled MFMA (v_mfma_scale_f32_*_f8f6f4), not a bf16 upcast; gfx942 has none, so the
    same kernel decomposes there."""
    spec = next((s for s in SPECS if s[0] == "triton_gemm" and s[1].startswith("dot_scaled")),
                None)
    if spec is None:
        pytest.skip("no dot_scaled kernel in triton_gemm.aot_specs()")
    _, _, fn, sig, ce = spec
    asm950 = _build("gfx950", fn, sig, ce)["amdgcn"]
    assert re.search(r"v_mfma_scale_f32_\w+_f8f6f4", asm950), "no scaled MFMA on gfx950"
    asm942 = _build("gfx942", fn, sig, ce)["amdgcn"]
    assert not re.search(r"v_mfma_scale_", asm942)


def _dot_accumulators(ir: str):
    """For every dot of a TTIR/TTGIR module: is its accumulator operand a zero constant?"""
    zeros = set(re.findall(r"(%[\w.]+) = arith\.constant dense<0\.000000e\+00>", ir))
    zeros |= set(re.findall(r"(%[\w.]+) = arith\.constant 0\.000000e\+00", ir))
    out = []
    for m in re.finditer(r"= (?:tt\.dot|ttng\.warp_group_dot|triton_nvidia_gpu\.warp_group_dot)"
                         r"\s+(%[\w.]+),\s*(%[\w.]+),\s*(%[\w.]+)", ir):
        out.append(m.group(3) in zeros)
    return out


@pytest.mark.parametrize("spec_id", ["block_sequential-nvfp4-nvfp4",
                                     "block_sequential-mxfp4-mxfp4",
                                     "block_sequential-mxfp6_e3m2-mxint8"])
def test_block_sequential_dots_start_from_zero(spec_id):
    """The bit-exact GEMMs need each block's tensor-core dot to start from a zero accumulator
    (the cross-block adds are CUDA-core fp32 adds). Triton's combine pass turns
    ``acc + dot(a, b, 0)`` into ``dot(a, b, acc)``; the NVFP4 kernel once did exactly that and
    was a few ulp off on an H200. Checked on the compiled IR for sm_90."""
    spec = next((s for s in SPECS if s[0] == "triton_gemm" and s[1] == spec_id), None)
    if spec is None:
        pytest.skip(f"no {spec_id} in triton_gemm.aot_specs()")
    asm = _build("sm_90", spec[2], spec[3], spec[4])
    for stage in ("ttir", "ttgir"):
        acc = _dot_accumulators(asm[stage])
        assert acc, f"no dot found in {stage}"
        assert all(acc), f"{stage}: a dot accumulates into a non-zero value: {acc}"


def test_dot_accumulator_check_can_fail():
    """The IR check above does catch a folded accumulator (a planted kernel that adds the dot
    straight into the running sum)."""
    import triton.language as tl

    @triton.jit
    def folded(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
        r = tl.arange(0, 16)
        acc = tl.full((16, 16), 0.0, tl.float32)
        for j in range(N):
            a = tl.load(a_ptr + r[:, None] * 16 + r[None, :] + j)
            b = tl.load(b_ptr + r[:, None] * 16 + r[None, :] + j)
            acc = acc + tl.dot(a, b)
        tl.store(out_ptr + r[:, None] * 16 + r[None, :], acc)

    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "out_ptr": "*fp32", "N": "constexpr"}
    asm = _build("sm_90", folded, sig, {"N": 4})
    assert not all(_dot_accumulators(asm["ttgir"]))
