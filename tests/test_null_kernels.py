"""bench/null_kernels.py: the null kernels (each quantizer's traffic with no encoding), without
a GPU.

* Launches: each plan's launches are the real launcher's on a GPU (kernel, grid, tile
  constexprs, num_warps, num_stages, fp fusion), recorded by calling the real launcher (the
  compiled modules, whose tile choices are the GPU ones) with its kernels replaced by
  recorders, and its outputs have the real launcher's shapes and dtypes.
* Outputs (Triton interpreter, per test: ``null_kernels.load(True)`` decorates a private copy
  under TRITON_INTERPRET=1 and restores the environment): every output element is written, in
  two runs whose outputs were pre-filled with two different sentinels, and equals the documented
  cheap function of the input element(s) it stands for, so every input element was read (the
  amax passes fold every element into the tensor scale). A plan whose launch skips a tile
  (one program fewer; for the NVFP4 qdq amax pass, whose programs loop over the tiles, one tile
  row fewer) fails that check.
* Compilation: every launch compiles for sm_90 (``triton.compile`` with ``GPUTarget``) and its
  PTX keeps the global loads and the stores or atomics (a planted kernel whose load is dead
  fails that check).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import null_kernels as nk  # noqa: E402

INTERP = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")

# the null kernels do no floating-point arithmetic, so Triton 3.9's FP-fusion default is moot
pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")

S2, S3, ST = (48, 384), (1, 48, 384), (2, 24, 384)       # ragged against every GPU tile
BIG = {S2: (512, 2048), S3: (1, 512, 2048), ST: (2, 256, 2048)}


def _tf(ks):
    return ks.modules["triton_fast"]


# (id, plan builder (shape, src), real launcher (kernel set, x), shape, source dtype)
CASES = [
    ("fast-mxfp4-rows-packed", lambda s, d: nk.fast_plan(s, "mxfp4", -1, True, d),
     lambda ks, x: _tf(ks).quantize_fast(x, "mxfp4", "ocp", axis=-1, packed=True), S2,
     "bfloat16"),
    ("fast-mxfp4-cols-packed", lambda s, d: nk.fast_plan(s, "mxfp4", 0, True, d),
     lambda ks, x: _tf(ks).quantize_fast(x, "mxfp4", "rceil", axis=0, packed=True), S2,
     "bfloat16"),
    ("fast-mxfp8-rows", lambda s, d: nk.fast_plan(s, "mxfp8_e4m3", -1, False, d),
     lambda ks, x: _tf(ks).quantize_fast(x, "mxfp8_e4m3", "ocp", axis=-1), S2, "bfloat16"),
    ("fast-mxfp8-cols", lambda s, d: nk.fast_plan(s, "mxfp8_e4m3", 0, False, d),
     lambda ks, x: _tf(ks).quantize_fast(x, "mxfp8_e4m3", "ocp", axis=0), S2, "bfloat16"),
    ("dual-mxfp4-packed", lambda s, d: nk.dual_plan(s, "mxfp4", True, d),
     lambda ks, x: _tf(ks).quantize_dual(x, "mxfp4", "ocp", packed=True), S2, "bfloat16"),
    ("dual-mxfp8", lambda s, d: nk.dual_plan(s, "mxfp8_e4m3", False, d),
     lambda ks, x: _tf(ks).quantize_dual(x, "mxfp8_e4m3", "ocp"), S2, "bfloat16"),
    ("generic-mxfp4", lambda s, d: nk.generic_plan(s, d),
     lambda ks, x: ks.modules["triton_quant"].mx_quantize(x, "mxfp4", "ocp", axis=-1), S2,
     "bfloat16"),
    ("sr-mxfp4", lambda s, d: nk.sr_plan(s, d),
     lambda ks, x: ks.modules["triton_sr"].quantize_sr(x, "mxfp4", "ocp", axis=-1, seed=1234),
     S2, "bfloat16"),
    ("nvfp4", lambda s, d: nk.nvfp4_plan(s, src=d, device="cpu"),
     lambda ks, x: ks.modules["triton_quant"].nvfp4_quantize(x, "te_nvfp4"), S3, "bfloat16"),
    ("nvfp4-fp32-T2", lambda s, d: nk.nvfp4_plan(s, src=d, device="cpu"),
     lambda ks, x: ks.modules["triton_quant"].nvfp4_quantize(x, "ocp"), ST, "float32"),
    ("nvfp4-sr", lambda s, d: nk.nvfp4_plan(s, sr=True, src=d),
     lambda ks, x: ks.modules["triton_sr"].quantize_nvfp4_sr(x, "ocp", seed=1234), S3,
     "bfloat16"),
    ("rot32-mxfp4-packed", lambda s, d: nk.rotated_plan(s, "mxfp4", 32, True, src=d),
     lambda ks, x: ks.modules["triton_rotate"].quantize_rotated(x, "mxfp4", "ocp", 32,
                                                                signs="none", packed=True),
     S2, "bfloat16"),
    ("rot128-mxfp4-packed", lambda s, d: nk.rotated_plan(s, "mxfp4", 128, True, src=d),
     lambda ks, x: ks.modules["triton_rotate"].quantize_rotated(x, "mxfp4", "ocp", 128,
                                                                signs="none", packed=True),
     S2, "bfloat16"),
    ("rot16-nvfp4-te16", lambda s, d: nk.rotated_plan(s, "nvfp4", 16, signs="te16", src=d),
     lambda ks, x: ks.modules["triton_rotate"].quantize_rotated(x, "nvfp4", "te_nvfp4", 16,
                                                                signs="te16"), S3, "bfloat16"),
    ("rot16-nvfp4-te16-fp32-T2",
     lambda s, d: nk.rotated_plan(s, "nvfp4", 16, signs="te16", src=d),
     lambda ks, x: ks.modules["triton_rotate"].quantize_rotated(x, "nvfp4", "te_nvfp4", 16,
                                                                signs="te16"), ST, "float32"),
    ("qdq-mx", lambda s, d: nk.qdq_plan(s, src=d),
     lambda ks, x: ks.modules["triton_train"].qdq(x, "mxfp4", "ocp", rows=True, cols=True),
     S2, "bfloat16"),
    ("qdq-mx-sr", lambda s, d: nk.qdq_plan(s, src=d),
     lambda ks, x: ks.modules["triton_train"].qdq(x, "mxfp4", "ocp", rows=True, cols=True,
                                                  row_sr=11, col_sr=12), S2, "bfloat16"),
    ("qdq-mx-cols", lambda s, d: nk.qdq_plan(s, rows=False, src=d),
     lambda ks, x: ks.modules["triton_train"].qdq(x, "mxfp8_e4m3", "ocp", rows=False,
                                                  cols=True), S2, "bfloat16"),
    ("qdq-nvfp4", lambda s, d: nk.qdq_nvfp4_plan(s, src=d, device="cpu"),
     lambda ks, x: ks.modules["triton_train_nvfp4"].qdq(x, "te_nvfp4", rows=True, cols=True),
     S2, "bfloat16"),
    ("qdq-nvfp4-sr", lambda s, d: nk.qdq_nvfp4_plan(s, sr=True, src=d, device="cpu"),
     lambda ks, x: ks.modules["triton_train_nvfp4"].qdq(x, "te_nvfp4", rows=True, cols=True,
                                                        row_sr=11, col_sr=12), S2, "bfloat16"),
    ("qdq-nvfp4-rows-fp32", lambda s, d: nk.qdq_nvfp4_plan(s, cols=False, src=d,
                                                            device="cpu"),
     lambda ks, x: ks.modules["triton_train_nvfp4"].qdq(x, "te_nvfp4", rows=True, cols=False),
     S2, "float32"),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module", autouse=True)
def numpy_xor_reduce():
    """The interpreter reduces with a custom combine function one Python call per lane; tl.sum,
    tl.min and tl.max go through numpy. The null kernels' XOR reduction (``_xor_combine``,
    associative and commutative) gets the same numpy path here: ``np.bitwise_xor.reduce``
    gives the same bits in any order. Only the interpreter's reduction changes; the kernels
    are the ones timed on the GPU. Where this triton's interpreter is laid out differently the
    slow path stays."""
    try:
        from triton.runtime.interpreter import ReduceOps
    except ImportError:
        yield
        return
    orig = ReduceOps.apply_impl

    def apply_impl(self, input):
        fn = getattr(self.combine_fn, "fn", self.combine_fn)
        if getattr(fn, "__name__", "") == "_xor_combine" and len(input) == 1:
            t = input[0]
            data = np.bitwise_xor.reduce(t.handle.data, axis=self.axis, keepdims=self.keep_dims)
            return self.to_tensor(data, t.dtype)
        return orig(self, input)
    ReduceOps.apply_impl = apply_impl
    try:
        yield
    finally:
        ReduceOps.apply_impl = orig


def _x(shape, src, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    return x.to(torch.bfloat16 if src == "bfloat16" else torch.float32)


# ---- the real launchers, recorded ------------------------------------------------------------
class _Recorder:
    """Stands in for a @triton.jit kernel: ``kernel[grid](*args, **kw)`` logs (name, grid,
    kw) and launches nothing."""

    def __init__(self, fn, log):
        self.name = getattr(fn, "fn", fn).__name__
        self.log = log

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.log.append((self.name, tuple(grid), kw))
        return launch


PATCHED = {"triton_fast": ("mx_fast_kernel", "mx_dual_kernel"),
           "triton_quant": ("mx_quantize_kernel", "nvfp4_amax_kernel",
                            "nvfp4_tensor_scale_kernel", "nvfp4_quantize_kernel"),
           "triton_sr": ("mx_quantize_sr_kernel", "nvfp4_quantize_sr_kernel"),
           "triton_rotate": ("rotate_mx_quantize_kernel", "rotate_nvfp4_amax_kernel",
                             "nvfp4_tensor_scale_kernel", "rotate_nvfp4_quantize_kernel")}


@pytest.fixture
def recorded(monkeypatch):
    """(compiled kernel set with every quantizer kernel replaced by a recorder, the log)."""
    from mxkernels.loader import load_kernels
    ks = load_kernels(False)
    assert not _tf(ks).INTERPRETED, "the compiled modules choose the GPU tiles"
    log = []
    for short, names in PATCHED.items():
        for n in names:
            monkeypatch.setattr(ks.modules[short], n, _Recorder(getattr(ks.modules[short], n),
                                                                log))

    def cached(kernel, grid, ce, nw, args, n_ptr, **opts):
        log.append((kernel.fn.__name__, (grid,), {**ce[0], "num_warps": nw, **opts}))
    for short in ("triton_train", "triton_train_nvfp4"):
        monkeypatch.setattr(ks.modules[short], "launch_cached", cached)
    return ks, log


def _launch_problems(plan, log) -> list:
    """Where the plan's launches differ from the recorded real ones."""
    if [n for n, _, _ in log] != [ln.mirrors for ln in plan.launches]:
        return [f"kernels {[n for n, _, _ in log]} vs {[ln.mirrors for ln in plan.launches]}"]
    out = []
    for ln, (name, grid, kw) in zip(plan.launches, log):
        if tuple(grid) != tuple(ln.grid):
            out.append(f"{name}: grid {grid} vs {ln.grid}")
        for k, v in ln.tile.items():
            if kw.get(k) != v:
                out.append(f"{name}: {k}={kw.get(k)} vs {v}")
        for k, v in (("num_warps", ln.num_warps), ("num_stages", ln.num_stages),
                     ("enable_fp_fusion", ln.fp_fusion)):
            if kw.get(k) != v:
                out.append(f"{name}: {k}={kw.get(k)} vs {v}")
    return out


def _declared(plan):
    """(shape, dtype) or None per return of the plan, from its buffers."""
    out = []
    for r in plan.returns:
        if r is None:
            out.append(None)
        elif r == "tensor_scale":
            out.append(((plan.x_shape[0],), torch.float32))
        else:
            b = plan.buf(r)
            out.append((tuple(b.shape), b.dtype))
    return out


def _shapes(outs):
    return [None if t is None else (tuple(t.shape), t.dtype) for t in outs]


@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_launches_are_the_real_launchers(recorded, case, big):
    _, build, real, shape, src = case
    ks, log = recorded
    if big:
        shape = BIG[shape]
    x = _x(shape, src)
    outs = real(ks, x)
    plan = build(shape, src)
    assert _launch_problems(plan, log) == []
    assert _shapes(outs) == _declared(plan)


def test_launch_checker_fails_on_a_wrong_tile(recorded):
    """The comparison above, shown to fail: the rows tile of mx_fast_kernel taken as 16 x 256,
    and a launch left out."""
    ks, log = recorded
    _tf(ks).quantize_fast(_x(S2, "bfloat16"), "mxfp4", "ocp", axis=-1, packed=True)
    plan = nk.fast_plan(S2, "mxfp4", -1, True)
    assert _launch_problems(plan, log) == []
    ln = plan.launches[0]
    wrong = dataclasses.replace(plan, launches=(dataclasses.replace(
        ln, tile={"BR": 16, "BC": 256}),))
    assert any("BR=8 vs 16" in p for p in _launch_problems(wrong, log))
    assert _launch_problems(dataclasses.replace(plan, launches=()), log)


# ---- the outputs, interpreted ------------------------------------------------------------------
def _fp32_bits(x) -> np.ndarray:
    """uint32 fp32 bit patterns of x's elements (what the kernels widen a source to)."""
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().astype(np.uint16).astype(np.uint32) << np.uint32(16)
    return x.view(torch.int32).numpy().view(np.uint32).copy()


def _xor(a) -> int:
    return int(np.bitwise_xor.reduce(a.ravel().astype(np.uint32))) if a.size else 0


def _codes(b, mask):
    return ((b >> np.uint32(16)) & np.uint32(mask)).astype(np.uint8)


def _pack(c, axis):
    """FP4 codes two per byte along axis (1: rows, 0: columns), element 2i low."""
    if axis == 1:
        return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def _line_scales(lines, nblk, add=None):
    """(31 line + block + add[line]) mod 256, [lines, nblk]."""
    v = 31 * np.arange(lines)[:, None] + np.arange(nblk)[None, :]
    if add is not None:
        v = v + add[:, None]
    return (v & 0xFF).astype(np.uint8)


def _orientation(b, axis, packed):
    """(scales, codes) of one orientation of the fast / generic / rotated MX nulls."""
    R, C = b.shape
    c = _codes(b, 0xF if packed else 0xFF)
    if axis == 1:
        return _line_scales(R, -(-C // 32)), _pack(c, 1) if packed else c
    return _line_scales(C, -(-R // 32)).T.copy(), _pack(c, 0) if packed else c


def _nvfp4_expected(b, sm=None):
    """(scales, codes, tensor scale bits) of the NVFP4 nulls of b [T, ..., C] (sm: the sign
    masks of the rotated kernels, by column % 16)."""
    T, C = b.shape[0], b.shape[-1]
    bt = b.reshape(T, -1, C)
    am = np.array([_xor(bt[t] ^ sm if sm is not None else bt[t]) for t in range(T)],
                  dtype=np.uint32)
    lines = bt.shape[1]
    add = np.repeat(am & 3, lines).astype(np.int64)
    sc = _line_scales(T * lines, C // 16, add).reshape(b.shape[:-1] + (C // 16,))
    return sc, _codes(b, 0xFF), am


def _expected(plan, x) -> dict:
    """The documented function (bench/null_kernels.py) of each output, by return name."""
    b = _fp32_bits(x)
    p = plan.params
    k = plan.kind
    if k == "fast":
        s, c = _orientation(b, p["axis"], p["packed"])
        return {"scales": s, "codes": c}
    if k == "dual":
        rs, rc = _orientation(b, 1, p["packed"])
        cs, cc = _orientation(b, 0, p["packed"])
        return {"row_scales": rs, "row_codes": rc, "col_scales": cs, "col_codes": cc}
    if k in ("generic", "sr", "rotated"):
        s, c = _orientation(b, 1, p.get("packed", False))
        return {"scales": s, "codes": c}
    if k in ("nvfp4", "nvfp4_sr", "rotated_nvfp4"):
        sm = None
        if k == "rotated_nvfp4" and p["signs"] == "te16":
            from mxref.rotate import TE16_SIGNS
            masks = np.array([0x80000000 if s < 0 else 0 for s in TE16_SIGNS], dtype=np.uint32)
            sm = masks[np.arange(b.shape[-1]) % 16]
        s, c, am = _nvfp4_expected(b, sm)
        return {"scales": s, "codes": c, "tensor_scale": am}
    am = _xor(b) if k == "qdq_nvfp4" else 0
    v = (((b >> np.uint32(16)) ^ np.uint32(am & 3)) & np.uint32(0xFFFF)).astype(np.uint16)
    out = {f"{o}_values": v for o in ("row", "col") if p[f"{o}s"]}
    if k == "qdq_nvfp4":
        one = np.float32(1.0).view(np.uint32)
        out["ts"] = np.array([am if p["rows"] else one, am if p["cols"] else one],
                             dtype=np.uint32)
    return out


def _np_bits(t) -> np.ndarray:
    if t.dtype == torch.uint8:
        return t.numpy()
    if t.dtype in (torch.bfloat16, torch.int16):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.view(torch.int32).numpy().view(np.uint32)


FILLS = (0xA5, 0x5A)


def _runs(plan, x):
    """The plan's returns, by name, from two runs whose empty outputs were pre-filled with the
    two sentinels (every byte)."""
    out = []
    for fill in FILLS:
        outs = nk.run(plan, x, nk.alloc(plan, x.device, fill=fill))
        out.append({r: t for r, t in zip(plan.returns, outs) if r is not None})
    return out


def _output_problems(plan, x) -> list:
    """Outputs never written (a sentinel in both runs) or not the documented function."""
    want = _expected(plan, x)
    runs = _runs(plan, x)
    problems = []
    if set(runs[0]) != set(want):
        return [f"outputs {sorted(runs[0])} vs {sorted(want)}"]
    for name, w in want.items():
        got = [_np_bits(r[name]) for r in runs]
        if got[0].shape != w.shape:
            problems.append(f"{name}: shape {got[0].shape} vs {w.shape}")
            continue
        size = got[0].dtype.itemsize
        fills = [int.from_bytes(bytes([f]) * size, "little") for f in FILLS]
        unwritten = int(((got[0] == fills[0]) & (got[1] == fills[1])).sum())
        wrong = int(((got[0] != w) | (got[1] != w)).sum())
        if unwritten or wrong:
            problems.append(f"{name}: {unwritten} of {w.size} never written, {wrong} differ "
                            "from the null function")
    return problems


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_outputs_written_read_and_shaped_as_the_real_ones(recorded, case):
    _, build, real, shape, src = case
    ks, _ = recorded
    x = _x(shape, src, seed=7)
    plan = build(shape, src)
    outs = nk.run(plan, x)
    assert _shapes(outs) == _shapes(real(ks, x))
    assert _output_problems(plan, x) == []


def _skip_a_tile(plan, i):
    """The plan with launch i skipping its last tile(s): one program fewer on grid axis 0 (the
    launch left out if it had one); the NVFP4 qdq amax pass, whose programs loop over the
    tiles, told that the tensor has one tile row fewer instead."""
    ln = plan.launches[i]
    launches = list(plan.launches)
    if ln.kernel == "tile" and ln.constexprs["AMAX"] == 1:
        args = list(ln.args)
        args[9] -= ln.constexprs["BR"]                     # n_rows
        launches[i] = dataclasses.replace(ln, args=tuple(args))
    elif ln.grid[0] > 1:
        launches[i] = dataclasses.replace(ln, grid=(ln.grid[0] - 1,) + tuple(ln.grid[1:]))
    else:
        del launches[i]
    return dataclasses.replace(plan, launches=tuple(launches))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_skipped_tile_fails_the_output_check(case):
    """Planted: each launch in turn skips its last tile (neither read nor written): the check
    above must report it."""
    _, build, _, shape, src = case
    x = _x(shape, src, seed=7)
    plan = build(shape, src)
    assert plan.launches
    for i, ln in enumerate(plan.launches):
        problems = _output_problems(_skip_a_tile(plan, i), x)
        assert problems, f"launch {i} ({ln.mirrors}) skipping a tile went unnoticed"


def test_interpreter_setting_does_not_leak():
    """load() decorates private copies with TRITON_INTERPRET set only while they execute."""
    before = os.environ.get("TRITON_INTERPRET")
    ki, kc = nk.load(True), nk.load(False)
    assert os.environ.get("TRITON_INTERPRET") == before
    assert type(ki.null_tile_kernel).__name__ == "InterpretedFunction"
    assert type(kc.null_tile_kernel).__name__ == "JITFunction" or INTERP
    assert nk.load(True) is ki and nk._interpreted(ki) is True


# ---- compiling for sm_90 -----------------------------------------------------------------------
def _no_ptxas():
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not (os.environ.get("TRITON_PTXAS_PATH") or bundled.exists() or shutil.which("ptxas")):
        return "no ptxas (neither bundled with triton, TRITON_PTXAS_PATH nor on PATH)"
    try:
        from triton.backends import backends
    except ImportError as e:  # pragma: no cover
        return f"no triton.backends: {e}"
    return None if "nvidia" in backends else "triton has no nvidia backend"


aot = pytest.mark.skipif(INTERP or bool(_no_ptxas()),
                         reason="TRITON_INTERPRET=1 or no CUDA backend / ptxas")


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    prev = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache_null"))
    yield
    if prev is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = prev


def _compile_sm90(fn, sig, ce, num_warps, fp_fusion):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    opts = {"num_warps": num_warps or 4}
    if fp_fusion is not None:
        opts["enable_fp_fusion"] = fp_fusion
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=ce),
                          target=GPUTarget("cuda", 90, 32), options=opts).asm


def _ptx_problems(ptx: str, writes: str) -> list:
    """A null kernel must keep its global loads and its stores ('store') or atomics."""
    out = []
    if "ld.global" not in ptx:
        out.append("no global load")
    if writes == "store" and "st.global" not in ptx:
        out.append("no global store")
    if writes == "atomic" and "atom.global" not in ptx and "red.global" not in ptx:
        out.append("no global atomic")
    return out


def _writes(ln) -> str:
    ce = ln.constexprs
    read_pass = ce.get("PASS") == 1 or (ce.get("AMAX") == 1 and ce.get("OUT") == 0)
    return "atomic" if read_pass else "store"


@aot
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compiles_for_sm90_and_keeps_its_memory_ops(fresh_cache, case):
    _, build, _, shape, src = case
    plan = build((1, 8192, 8192) if len(shape) == 3 else (8192, 8192), src)
    kc = nk.load(False)
    for ln in plan.launches:
        asm = _compile_sm90(kc.KERNELS[ln.kernel], nk.signature(plan, ln), ln.constexprs,
                            ln.num_warps, ln.fp_fusion)
        assert asm["cubin"][:4] == b"\x7fELF" and ".target sm_90" in asm["ptx"]
        assert _ptx_problems(asm["ptx"], _writes(ln)) == [], ln.mirrors


@triton.jit
def _dead_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Planted: the loaded value is multiplied by 0, so the compiler drops the load."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, (v * 0 + 7).to(tl.uint8), mask=offs < n)


@aot
def test_ptx_check_fails_on_a_dead_load(fresh_cache):
    sig = {"x_ptr": "*i16", "out_ptr": "*u8", "n": "i32", "BLOCK": "constexpr"}
    ptx = _compile_sm90(_dead_load_kernel, sig, {"BLOCK": 1024}, 4, None)["ptx"]
    assert _ptx_problems(ptx, "store") == ["no global load"]
    assert "no global atomic" in _ptx_problems(ptx, "atomic")


# ---- bench/sass_report.py's null rows ----------------------------------------------------------
def test_sass_report_lists_a_null_row_per_timed_null_configuration():
    import sass_report as sr
    rows = {name: (bench, build) for name, bench, kind, build in sr.configs()}
    nulls = [n for n in rows if n.startswith("null: ")]
    assert len(nulls) == 9
    for n in nulls:
        bench_row = rows[n][0]
        assert bench_row.startswith("null of ")
        assert bench_row[len("null of "):] in {b for b, _ in rows.values()}
        cfg = rows[n][1]()
        assert set(cfg["sig"]) == set(cfg["fn"].arg_names) and cfg["elems"] >= 1024
