"""SASS instruction counts of the production kernel configurations for sm_90 (H100), without a GPU,
and the throughput ceilings they imply.

    python bench/sass_report.py [--out bench/results/sass_sm90.json] [--only NAME,...]

For each kernel configuration that bench/gpu_kernels.py times (same constexprs, tiles,
num_warps / num_stages, the launcher's fp-fusion option, and Triton's divisibility-by-16
specialization of pointers and of the 8192-sized integer arguments) the kernel is compiled for
sm_90 with ``triton.compile(ASTSource(...), GPUTarget("cuda", 90, 32))``, the cubin is
disassembled with the ``nvdisasm`` bundled with Triton, and the instructions are counted by class
(the quantizers' null kernels of bench/null_kernels.py, rows ``null: ...``, too: the same tiles
and stores with no encoding, so the difference is the encoding's instructions):

* loop-free kernels (one tile per program: the quantizers): the whole kernel, per element of the
  tile (every thread runs every instruction once; predicated-off instructions still issue);
* GEMMs: the innermost loop holding the tensor-core op (one K step), per K step and per output.

Ceilings (an upper bound from instruction issue alone, assuming perfect latency hiding): an H100
SXM SM has 4 sub-partitions (SMSPs), each issuing 1 warp-instruction per clock; per SMSP the
integer/logic ALU pipe and the IMAD-capable FMA-heavy pipe take a warp-instruction every 2 clocks
(16 lanes), FP32 FADD/FMUL/FFMA one per clock (heavy + lite), the XU (conversions F2F/F2I/I2F,
MUFU) one per 8 clocks (16 lanes per SM), SHFL one per 4 clocks (32 per SM). Sources: the CUDA C++
Programming Guide throughput table for compute capability 9.0 (32-bit int add / compare / logic /
shift 64 per SM per clock, fp32 128, conversions 16, shuffles 32) and NVIDIA's description of
the GH100 pipes (FMA-heavy: IMAD + FP32, FMA-lite: FP32, ALU: other integer, logic and data
movement). Assumption, flagged in the report: VIADD / VIMNMX / I2FP are counted on the ALU pipe.
The kernel then needs, per warp, max(issue, ALU / 0.5, IMAD / 0.5, FP32 + IMAD, XU / 0.125,
SHFL / 0.25) clocks on its SMSP; 132 SMs x 4 SMSPs x clock turns that into elements/s, and
bytes/element x elements/s over the measured copy bandwidth into the highest fraction of copy
the issue limits allow. Clocks: 1.755 GHz (the sustained clock under load) and 1.98 GHz (max
boost, what the H100 runs read after the runs).

Writes the JSON and a Markdown table next to it. SASS depends on the Triton / ptxas version: the
committed results were made with Triton 3.6.0 (the H100 runs' version; installed beside the
default one with ``pip install --no-deps --target DIR triton==3.6.0`` and ``PYTHONPATH=DIR``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = "mxkernels-sass-report/1"

# H100 SXM figures used for the ceilings
SMS = 132
SMSP_PER_SM = 4
CLOCKS_GHZ = {"sustained": 1.755, "max_boost": 1.98}
# measured on the H100 (bench/results/gpu_kernels_h100.md): copy bf16 read+write, cuBLAS BF16
COPY_GBPS = 2852.0
CUBLAS_BF16_TFLOPS = 737.0
# dense tensor-core MACs per SM per clock (989.4 TFLOP/s BF16, 1979 FP8 at 1.83 GHz, 132 SMs)
TENSOR_MACS_PER_CLK = {"bf16": 2048, "fp8": 4096}
# warp-instructions per SMSP per clock
PIPE_RATE = {"issue": 1.0, "alu": 0.5, "fma_heavy": 0.5, "fma": 1.0, "xu": 0.125, "shfl": 0.25}

# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------
CLASSES = [
    # (class, pipe or None, opcode bases)
    ("int_alu", "alu", {"IADD3", "IADD", "IADD32I", "VIADD", "IMNMX", "VIMNMX", "VIMNMX3", "IABS",
                        "ISETP", "SEL", "LEA", "SGXT", "FLO", "POPC", "BREV", "BMSK", "ISCADD",
                        "VIADDMNMX", "ICMP", "IDP", "IDP4A"}),
    ("logic_shift_prmt", "alu", {"LOP3", "LOP", "LOP32I", "SHF", "SHL", "SHR", "PRMT", "BFE",
                                 "BFI"}),
    ("imad", "fma_heavy", {"IMAD", "IMUL", "IMAD32I", "IMUL32I"}),
    ("fp32", "fma", {"FADD", "FMUL", "FFMA", "FADD32I", "FMUL32I", "FFMA32I"}),
    ("fp32_cmp", "alu", {"FMNMX", "FSETP", "FSEL", "FSET", "FCHK"}),
    ("fp16x2", "fma", {"HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2"}),
    ("conv_xu", "xu", {"F2F", "F2I", "I2F", "MUFU", "FRND", "F2FP", "I2I"}),
    ("conv_alu", "alu", {"I2FP", "F2IP"}),
    ("mem_global", None, {"LDG", "STG", "RED", "ATOM", "ATOMG", "LDGSTS", "UTMALDG", "UTMASTG",
                          "UBLKCP", "LDGDEPBAR", "UTMAPF", "UTMACCTL"}),
    ("mem_shared", None, {"LDS", "STS", "LDSM", "STSM", "ATOMS"}),
    ("mem_local", None, {"LDL", "STL"}),
    ("const_load", None, {"LDC", "ULDC"}),
    ("shuffle_reduce", "shfl", {"SHFL", "REDUX", "VOTE", "MATCH"}),
    ("tensor", None, {"HGMMA", "QGMMA", "IGMMA", "BGMMA", "HMMA", "IMMA", "DMMA",
                      "WARPGROUP", "WARPSYNC"}),
    ("move", "alu", {"MOV", "MOV32I", "CS2R", "S2R", "P2R", "R2P", "S2UR", "R2UR", "MOVM"}),
    ("predicate", "alu", {"PLOP3", "PSETP"}),
    ("control", None, {"BRA", "EXIT", "BAR", "BSSY", "BSYNC", "NOP", "DEPBAR", "RET", "CALL",
                       "JMP", "BPT", "YIELD", "ERRBAR", "MEMBAR", "FENCE", "SYNCS", "CCTL",
                       "ELECT", "ACQBULK", "ENDCOLLECTIVE", "UCGABAR_ARV", "UCGABAR_WAIT",
                       "BMOV", "WARPSYNC", "NANOSLEEP", "BREAK"}),
]
_OP_CLASS = {}
for _cls, _pipe, _ops in CLASSES:
    for _op in _ops:
        _OP_CLASS.setdefault(_op, (_cls, _pipe))

_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def classify(opcode: str) -> tuple[str, str | None]:
    """(class, pipe) of a SASS opcode with its modifiers (``LOP3.LUT``, ``IMAD.WIDE.U32``).
    Uniform-datapath instructions (``U...``: scalar per warp) are class ``uniform``, no vector
    pipe; ``IMAD.MOV`` / ``IMAD.SHL`` / ``IMAD.IADD`` stay IMAD (they run on the FMA-heavy pipe,
    which is why ptxas uses them to take work off the ALU)."""
    base = opcode.split(".")[0]
    if base in _OP_CLASS:
        return _OP_CLASS[base]
    if base.startswith("U") and base[1:] in _OP_CLASS or base in ("UMOV", "USEL", "ULEA",
                                                                  "USHF", "UPRMT", "UP2UR"):
        return "uniform", None
    if base.startswith("U"):
        return "uniform", None
    return "other", "alu"


def parse_sass(text: str) -> list[dict]:
    """Instructions of nvdisasm output in address order: {addr, pred, opcode, operands,
    label (if a label points here), target (branch label)}."""
    out = []
    pending = []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.match(line)
        if not m:
            continue
        body = m.group(2).strip()
        pred = None
        if body.startswith("@"):
            pred, body = body.split(None, 1)
        parts = body.split(None, 1)
        opcode = parts[0]
        t = _TARGET.search(body)
        out.append({"addr": int(m.group(1), 16), "pred": pred, "opcode": opcode,
                    "operands": parts[1] if len(parts) > 1 else "", "labels": pending,
                    "target": t.group(1) if t else None})
        pending = []
    return out


def loops(insns: list[dict]) -> list[tuple[int, int]]:
    """(first index, last index) of each backward branch's range, innermost first."""
    where = {}
    for i, ins in enumerate(insns):
        for lab in ins["labels"]:
            where[lab] = i
    out = []
    for i, ins in enumerate(insns):
        if ins["opcode"].startswith("BRA") and ins["target"] in where:
            j = where[ins["target"]]
            if j < i:
                out.append((j, i))
    return sorted(out, key=lambda r: r[1] - r[0])


def count(insns: list[dict]) -> dict:
    """Counts by opcode (with modifiers), by class and by pipe; NOPs are left out."""
    by_op, by_class, by_pipe = {}, {}, {}
    n = 0
    for ins in insns:
        op = ins["opcode"]
        if op == "NOP":
            continue
        cls, pipe = classify(op)
        n += 1
        by_op[op] = by_op.get(op, 0) + 1
        by_class[cls] = by_class.get(cls, 0) + 1
        if pipe:
            by_pipe[pipe] = by_pipe.get(pipe, 0) + 1
    return {"total": n, "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
            "by_pipe": by_pipe, "by_opcode": dict(sorted(by_op.items(), key=lambda kv: -kv[1]))}


def region(insns: list[dict], want_tensor: bool) -> tuple[str, list[dict]]:
    """The counted region: the innermost loop holding a tensor-core op (want_tensor), else the
    whole kernel up to its last EXIT (a loop-free kernel; the trailing self-branch is left out)."""
    if want_tensor:
        for a, b in loops(insns):
            body = insns[a:b + 1]
            if any(classify(i["opcode"])[0] == "tensor" and "GMMA" in i["opcode"] or
                   i["opcode"].startswith("HMMA") for i in body):
                return f"loop {insns[a]['addr']:#x}..{insns[b]['addr']:#x}", body
        raise RuntimeError("no loop with a tensor-core op found")
    last = max(i for i, ins in enumerate(insns) if ins["opcode"] == "EXIT")
    return "whole kernel", insns[:last + 1]


def clocks_per_warp(c: dict) -> dict:
    """Lower bound on SMSP clocks for one warp to run the counted instructions, per limit."""
    p = c["by_pipe"]
    fp32 = p.get("fma", 0)
    imad = p.get("fma_heavy", 0)
    lim = {"issue": c["total"] / PIPE_RATE["issue"],
           "alu": p.get("alu", 0) / PIPE_RATE["alu"],
           "fma_heavy (IMAD)": imad / PIPE_RATE["fma_heavy"],
           "fma (FP32 + IMAD)": (fp32 + imad) / PIPE_RATE["fma"],
           "xu (conversions)": p.get("xu", 0) / PIPE_RATE["xu"],
           "shfl": p.get("shfl", 0) / PIPE_RATE["shfl"]}
    return lim


# ---------------------------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------------------------
def nv_bin(tool: str) -> str:
    import triton
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool
    if not p.exists():
        raise FileNotFoundError(f"{p}: Triton's bundled {tool} is missing")
    return str(p)


def compile_sm90(fn, signature: dict, constexprs: dict, *, num_warps=4, num_stages=3,
                 fp_fusion=True, divisible=None):
    """(cubin bytes, metadata) of fn for sm_90. divisible: the runtime argument names Triton
    marks divisible by 16 when launched (default: every runtime argument; true for the 16-byte
    aligned torch allocations and the 8192-sized integers of the benchmark)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(signature)
    div = [k for k in names if signature[k] != "constexpr"] if divisible is None else divisible
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in div}
    opts = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": fp_fusion}
    c = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=opts)
    return c.asm["cubin"], c


def disassemble(cubin: bytes) -> tuple[str, dict]:
    """(nvdisasm text, resource usage {regs, stack, shared, local}) of a cubin."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        text = subprocess.run([nv_bin("nvdisasm"), "-c", str(p)], capture_output=True, text=True,
                              check=True).stdout
        res = subprocess.run([nv_bin("cuobjdump"), "-res-usage", str(p)], capture_output=True,
                             text=True, check=True).stdout
    usage = {}
    for key, name in (("REG", "regs"), ("STACK", "stack"), ("SHARED", "shared"),
                      ("LOCAL", "local")):
        m = re.search(rf"\b{key}:(\d+)", res)
        usage[name] = int(m.group(1)) if m else None
    return text, usage


def occupancy(regs: int, shared: int, warps: int) -> dict:
    """Resident CTAs / warps per SM from registers (64K per SM, 256-register warp granules) and
    shared memory (228 KB per SM, 227 KB per CTA), 64 warps and 32 CTAs max."""
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = 65536 // (per_warp * warps)
    by_smem = (233472 // (shared + 1024)) if shared else 32
    ctas = max(0, min(by_regs, by_smem, 64 // warps, 32))
    return {"ctas_per_sm": ctas, "warps_per_sm": ctas * warps, "limited_by":
            "registers" if by_regs <= min(by_smem, 64 // warps) else
            ("shared memory" if by_smem < 64 // warps else "warp slots")}


# ---------------------------------------------------------------------------------------------
# the production configurations (as bench/gpu_kernels.py launches them at 8192)
# ---------------------------------------------------------------------------------------------
def configs():
    """[(name, bench row, kind, builder)]; builder() -> dict(fn, sig, ce, num_warps, num_stages,
    fp_fusion, elems, bytes_per_elem) for membound kinds or GEMM fields for 'gemm'."""
    out = []

    def fast(fmt, prof, axis, dual=False):
        def build():
            from mxkernels import triton_fast as tf
            packed = fmt == "mxfp4"
            # quantize_fast's GPU tiles (triton_fast._tiles): rows 8 x 512; cols / dual 32 x 128
            br, bc = (8, 512) if (axis == -1 and not dual) else (32, 128)
            kern = "mx_dual" if dual else "mx_fast"
            ce = tf.fast_constexprs(fmt, prof, "bfloat16", axis, packed=packed, block_rows=br,
                                    block_cols=bc, dual=dual)
            code_b = 0.5 if packed else 1.0
            bpe = 2 + 2 * (code_b + 1 / 32) if dual else 2 + code_b + 1 / 32
            return dict(fn=tf.KERNELS[kern], sig=tf.kernel_signature(kern, "bfloat16", ce),
                        ce=ce, num_warps=4, num_stages=3, fp_fusion=True, elems=br * bc,
                        bytes_per_elem=bpe, tile=f"{br}x{bc}")
        return build

    for fmt in ("mxfp4", "mxfp8_e4m3"):
        for prof in ("ocp", "rceil"):
            for axis in (-1, 0):
                out.append((f"fast {fmt} {prof} axis={axis}",
                            f"fast quantize bf16->{fmt} {prof} axis={axis}", "membound",
                            fast(fmt, prof, axis)))
        out.append((f"dual {fmt} ocp", f"dual quantize bf16->{fmt} ocp", "membound",
                    fast(fmt, "ocp", -1, dual=True)))

    def generic(fmt, prof):
        def build():
            from mxkernels import triton_quant as tq
            ce = tq.mx_constexprs("mx_quantize", fmt, prof, "bfloat16")
            ce["BLOCK_ROWS"] = tq.GPU_BLOCK_ROWS
            sig, ce = tq.kernel_signature("mx_quantize", "bfloat16", ce)
            return dict(fn=tq.KERNELS["mx_quantize"], sig=sig, ce=ce, num_warps=4,
                        num_stages=3, fp_fusion=True, elems=ce["BLOCK_ROWS"] * ce["BLOCK"],
                        bytes_per_elem=2 + 1 + 1 / 32, tile=f"{ce['BLOCK_ROWS']} blocks")
        return build

    out.append(("generic mxfp4 ocp (unpacked)", "generic quantize bf16->mxfp4 ocp (unpacked)",
                "membound", generic("mxfp4", "ocp")))

    def rotated(n):
        def build():
            from mxkernels import triton_rotate as tr
            ce = tr.rotate_constexprs("rotate_mx_quantize", n, src_dtype="bfloat16",
                                      round_to="float32", has_signs=False, fmt="mxfp4",
                                      profile="ocp", packed=True)
            sig, ce = tr.kernel_signature("rotate_mx_quantize", "bfloat16", ce)
            nw = tr._num_warps(None, ce["ROWS"], ce["W"])
            return dict(fn=tr.KERNELS["rotate_mx_quantize"], sig=sig, ce=ce, num_warps=nw,
                        num_stages=3, fp_fusion=False, elems=ce["ROWS"] * ce["W"],
                        bytes_per_elem=2 + 0.5 + 1 / 32, tile=f"{ce['ROWS']}x{ce['W']}")
        return build

    for n in (32, 128):
        out.append((f"fused Hadamard-{n} + mxfp4", f"fused Hadamard-{n} + quantize "
                    "bf16->mxfp4 ocp (packed)", "membound", rotated(n)))

    def null(label, bench_row, build, bpe):
        """The null kernel (bench/null_kernels.py) of a quantizer: its last launch (the pass
        that writes; NVFP4's amax pass comes before it), at the benchmark's 8192 x 8192."""
        def b():
            bench_dir = str(ROOT / "bench")
            if bench_dir not in sys.path:
                sys.path.insert(0, bench_dir)
            import null_kernels as nk
            plan = build(nk)
            ln = plan.launches[-1]
            ce = ln.constexprs
            tile = {"tile": f"{ce.get('BR')}x{ce.get('BC')}",
                    "blocks": f"{ce.get('BLOCK_ROWS')} blocks",
                    "chunks": f"{ce.get('ROWS')}x{ce.get('W')}"}.get(ln.kernel, "")
            return dict(fn=nk.KERNELS[ln.kernel], sig=nk.signature(plan, ln), ce=ce,
                        num_warps=ln.num_warps or 4, num_stages=ln.num_stages or 3,
                        fp_fusion=True if ln.fp_fusion is None else ln.fp_fusion,
                        elems=nk.launch_elems(ln), bytes_per_elem=bpe, tile=tile)
        out.append((f"null: {label}", f"null of {bench_row}", "membound", b))

    S = (8192, 8192)
    for fmt, code_b in (("mxfp4", 0.5), ("mxfp8_e4m3", 1.0)):
        for axis in (-1, 0):
            null(f"fast {fmt} axis={axis}", f"fast quantize bf16->{fmt} ocp axis={axis}",
                 lambda nk, fmt=fmt, axis=axis: nk.fast_plan(S, fmt, axis, True),
                 2 + code_b + 1 / 32)
        null(f"dual {fmt}", f"dual quantize bf16->{fmt} ocp",
             lambda nk, fmt=fmt: nk.dual_plan(S, fmt, True), 2 + 2 * (code_b + 1 / 32))
    null("generic (unpacked)", "generic quantize bf16->mxfp4 ocp (unpacked)",
         lambda nk: nk.generic_plan(S), 2 + 1 + 1 / 32)
    for n in (32, 128):
        null(f"fused Hadamard-{n} + mxfp4", f"fused Hadamard-{n} + quantize bf16->mxfp4 ocp "
             "(packed)", lambda nk, n=n: nk.rotated_plan(S, "mxfp4", n, True),
             2 + 0.5 + 1 / 32)

    def gemm_blockseq():
        from mxkernels import triton_gemm as tg
        ce = {**tg.gemm_kernel_params("mxfp4", "mxfp4", "block_sequential"), "BLOCK_M": 128,
              "BLOCK_N": 128, "GROUP_M": 8, "DOT_F32": False, "USE_TMA": False}
        sig = tg._sig(tg.gemm_block_sequential_kernel,
                      {**tg._GEMM_ARGS, "ra_ptr": "*i8", "rb_ptr": "*i8"}, ce)
        return dict(fn=tg.gemm_block_sequential_kernel, sig=sig, ce=ce, num_warps=4,
                    num_stages=4, fp_fusion=False, bm=128, bn=128, bk=ce["BS"], dtype="fp8",
                    tile="128x128, K step 32")

    def gemm_bf16():
        from mxkernels import triton_gemm as tg
        ce = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "DOT_F32": False}
        sig = tg._sig(tg.gemm_bf16_kernel, {"a_ptr": "*i16", "b_ptr": "*i16",
                                            "out_ptr": "*fp32", "M": "i32", "N": "i32",
                                            "K": "i32"}, ce)
        return dict(fn=tg.gemm_bf16_kernel, sig=sig, ce=ce, num_warps=8, num_stages=3,
                    fp_fusion=False, bm=128, bn=128, bk=64, dtype="bf16",
                    tile="128x128, K step 64")

    def gemm_fused():
        from mxkernels import triton_gemm as tg
        ce = {**tg.gemm_kernel_params("mxfp4", "mxfp4", "fast"), "BLOCK_M": 128, "BLOCK_N": 128,
              "BLOCK_K": 128, "GROUP_M": 8, "DOT_F32": False}
        sig = tg._sig(tg.gemm_fast_kernel, tg._GEMM_ARGS, ce)
        return dict(fn=tg.gemm_fast_kernel, sig=sig, ce=ce, num_warps=8, num_stages=3,
                    fp_fusion=False, bm=128, bn=128, bk=128, dtype="bf16",
                    tile="128x128, K step 128")

    out.append(("GEMM block_sequential MXFP4 (FP8 per-32 promotion)",
                "MXFP4 GEMM 8192^3 block_sequential", "gemm", gemm_blockseq))
    # mode="fast" was the fused kernel when the H100 files were written (0.05x): that figure is
    # the fused kernel's; the two-pass fast mode has not been timed yet
    out.append(("GEMM fast: bf16 GEMM after the mx_to_bf16 pre-pass", "(not measured yet)",
                "gemm", gemm_bf16))
    out.append(("GEMM fast_fused (decode in the K loop)", "MXFP4 GEMM 8192^3 fast", "gemm",
                gemm_fused))
    return out


def measured(names):
    """{bench row name: ratio} from the H100 result files."""
    res = {}
    for f in ("gpu_gemm_h100.json", "gpu_kernels_h100.json"):      # the newer GEMM run first
        p = ROOT / "bench" / "results" / f
        if p.exists():
            for r in json.loads(p.read_text()).get("rows", []):
                if r.get("kernel") in names and r.get("ratio") is not None:
                    res.setdefault(r["kernel"], {"ratio": r["ratio"], "us": r["ms"] * 1e3,
                                                 "file": f})
                nk = f"null of {r.get('kernel')}"         # the row's null kernel, where timed
                if nk in names and r.get("null_of_copy") is not None:
                    res.setdefault(nk, {"ratio": r["null_of_copy"], "us": r["null_us"],
                                        "file": f})
    return res


def analyse(name, kind, cfg) -> dict:
    cubin, _ = compile_sm90(cfg["fn"], cfg["sig"], cfg["ce"], num_warps=cfg["num_warps"],
                            num_stages=cfg["num_stages"], fp_fusion=cfg["fp_fusion"])
    text, usage = disassemble(cubin)
    insns = parse_sass(text)
    where, body = region(insns, kind == "gemm")
    c = count(body)
    row = {"name": name, "kind": kind, "tile": cfg["tile"], "num_warps": cfg["num_warps"],
           "num_stages": cfg["num_stages"], "fp_fusion": cfg["fp_fusion"],
           "constexprs": {k: v for k, v in cfg["ce"].items()}, "region": where,
           "kernel_insns": len([i for i in insns if i["opcode"] != "NOP"]),
           "counts": c, "resources": usage,
           "spill_insns": sum(1 for i in insns if classify(i["opcode"])[0] == "mem_local"),
           "occupancy": occupancy(usage["regs"] or 0, usage["shared"] or 0, cfg["num_warps"])}
    lim = clocks_per_warp(c)
    bound = max(lim, key=lim.get)
    row["clocks_per_warp"] = lim
    row["binding_limit"] = bound
    if kind == "membound":
        threads = 32 * cfg["num_warps"]
        epw = cfg["elems"] / cfg["num_warps"]             # elements per warp
        row["elems_per_program"] = cfg["elems"]
        row["bytes_per_elem"] = cfg["bytes_per_elem"]
        row["thread_insns_per_elem"] = c["total"] * threads / cfg["elems"]
        row["warp_insns_per_elem"] = c["total"] / epw
        row["class_per_elem"] = {k: v * threads / cfg["elems"] for k, v in c["by_class"].items()}
        row["ceiling"] = {}
        for lab, ghz in CLOCKS_GHZ.items():
            rate = SMS * SMSP_PER_SM * ghz * 1e9 * epw / lim[bound]          # elements/s
            affordable = SMS * SMSP_PER_SM * ghz * 1e9 / (COPY_GBPS * 1e9 / cfg["bytes_per_elem"])
            row["ceiling"][lab] = {
                "issue_only_fraction_of_copy": min(1.0, SMS * SMSP_PER_SM * ghz * 1e9 * epw /
                                                   lim["issue"] * cfg["bytes_per_elem"] /
                                                   (COPY_GBPS * 1e9)),
                "pipe_fraction_of_copy": min(1.0, rate * cfg["bytes_per_elem"] /
                                             (COPY_GBPS * 1e9)),
                "warp_insns_per_elem_affordable_at_copy": affordable}
    else:
        bm, bn, bk = cfg["bm"], cfg["bn"], cfg["bk"]
        macs = bm * bn * bk
        tensor_clk = macs / TENSOR_MACS_PER_CLK[cfg["dtype"]]
        # the CTA's warps share the SM's 4 SMSPs: per-SMSP clocks = per-warp clocks x warps / 4
        cuda_clk = lim[bound] * cfg["num_warps"] / SMSP_PER_SM
        tensor_ops = sum(v for k, v in c["by_opcode"].items()
                         if classify(k)[0] == "tensor" and "GMMA" in k and "ARRIVE" not in k)
        row["k_step"] = bk
        row["tensor_insns_per_k_step"] = tensor_ops
        row["non_tensor_insns_per_k_step_per_warp"] = c["total"] - c["by_class"].get("tensor", 0)
        row["non_tensor_thread_insns_per_output_per_k_step"] = \
            (c["total"] - c["by_class"].get("tensor", 0)) * 32 * cfg["num_warps"] / (bm * bn)
        row["sm_clocks_per_k_step"] = {"tensor": tensor_clk, "cuda_cores": cuda_clk}
        row["ceiling"] = {}
        for lab, ghz in CLOCKS_GHZ.items():
            overlap = max(tensor_clk, cuda_clk)
            serial = tensor_clk + cuda_clk
            tf = lambda clk: 2 * macs / clk * SMS * ghz * 1e9 / 1e12  # noqa: E731
            row["ceiling"][lab] = {"tflops_overlapped": tf(overlap), "tflops_serial": tf(serial),
                                   "x_cublas_overlapped": tf(overlap) / CUBLAS_BF16_TFLOPS,
                                   "x_cublas_serial": tf(serial) / CUBLAS_BF16_TFLOPS}
    return row


def provenance() -> dict:
    import triton
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                            "mxkernels/triton_*.py"],
                           capture_output=True, text=True).stdout.strip()
    ver = subprocess.run([nv_bin("nvdisasm"), "--version"], capture_output=True,
                         text=True).stdout.strip().splitlines()
    return {"triton": triton.__version__, "triton_path": str(Path(triton.__file__).parent),
            "nvdisasm": ver[-1] if ver else "?", "commit": commit,
            "mxkernels_dirty": bool(dirty), "target": "cuda sm_90 (warp 32)",
            "sms": SMS, "smsp_per_sm": SMSP_PER_SM, "clocks_ghz": CLOCKS_GHZ,
            "copy_gbps": COPY_GBPS, "cublas_bf16_tflops": CUBLAS_BF16_TFLOPS,
            "pipe_rate_warp_insns_per_smsp_clock": PIPE_RATE,
            "tensor_macs_per_sm_clock": TENSOR_MACS_PER_CLK}


def markdown(doc) -> str:
    p = doc["provenance"]
    L = ["# SASS instruction counts, sm_90 (H100), production configurations", "",
         f"Triton {p['triton']}, {p['nvdisasm']}, commit {p['commit'][:10]}"
         f"{' (mxkernels/ modified)' if p['mxkernels_dirty'] else ''}. Compiled without a GPU "
         "(`python bench/sass_report.py`); counts are static SASS instructions (NOPs left out). "
         "Ceilings: 132 SMs x 4 SMSPs x 1 warp-instruction/clock, ALU and IMAD pipes 1 per 2 "
         "clocks, FP32 1 per clock, XU 1 per 8, SHFL 1 per 4 (per SMSP); copy "
         f"{p['copy_gbps']:.0f} GB/s and cuBLAS BF16 {p['cublas_bf16_tflops']:.0f} TFLOP/s as "
         "measured on the H100 (bench/results/gpu_kernels_h100.md). Clock 1.755 GHz (1.98 GHz "
         "max boost in brackets).", "",
         "## Memory-bound kernels (per element of the tile)", "",
         "| kernel | tile, warps | regs | SASS / tile-thread | thread-insns/elem | warp-insns/elem "
         "| ALU / IMAD / FP32 / XU per elem | LDG, STG per thread | binding limit | ceiling "
         "(issue only) | ceiling (pipes) | measured |",
         "|---|---|---:|---:|---:|---:|---|---|---|---:|---:|---:|"]
    for r in doc["rows"]:
        if r["kind"] != "membound":
            continue
        thr = 32 * r["num_warps"] / r["elems_per_program"]
        pp = r["counts"]["by_pipe"]
        per = "/".join(f"{pp.get(k, 0) * thr:.1f}" for k in ("alu", "fma_heavy", "fma", "xu"))
        mem = r["counts"]["by_opcode"]
        ldg = sum(v for k, v in mem.items() if k.startswith("LDG"))
        stg = ", ".join(f"{v} {k.split('.', 1)[1] if '.' in k else k}"
                        for k, v in mem.items() if k.startswith("STG"))
        c1, c2 = r["ceiling"]["sustained"], r["ceiling"]["max_boost"]
        m = r.get("measured")
        L.append(f"| {r['name']} | {r['tile']}, {r['num_warps']} | {r['resources']['regs']} | "
                 f"{r['counts']['total']} | {r['thread_insns_per_elem']:.1f} | "
                 f"{r['warp_insns_per_elem']:.2f} | {per} | {ldg} LDG; {stg} | "
                 f"{r['binding_limit']} | {c1['issue_only_fraction_of_copy']:.0%} "
                 f"({c2['issue_only_fraction_of_copy']:.0%}) | "
                 f"{c1['pipe_fraction_of_copy']:.0%} ({c2['pipe_fraction_of_copy']:.0%}) | "
                 f"{'' if not m else format(m['ratio'], '.0%')} |")
    r0 = next((r for r in doc["rows"] if r["kind"] == "membound"), None)
    if r0:
        a = r0["ceiling"]["sustained"]["warp_insns_per_elem_affordable_at_copy"]
        L += ["", f"At copy speed a bf16 -> packed MXFP4 kernel moves {r0['bytes_per_elem']:.3f} "
              f"B/element, so the GPU can issue {a:.2f} warp-instructions per element "
              f"({a * 32:.1f} thread-instructions) at 1.755 GHz, or half of that if every "
              "instruction is on the ALU pipe."]
    L += ["", "## GEMMs (per K step of one CTA)", "",
          "| kernel | tile, warps, stages | regs | LDL/STL in loop / kernel | SASS per K step (warp) | "
          "tensor ops | non-tensor thread-insns per output per K step | SM clocks tensor / CUDA "
          "cores | binding | ceiling x cuBLAS BF16 overlapped / serial | measured |",
          "|---|---|---:|---:|---:|---:|---:|---|---|---|---:|"]
    for r in doc["rows"]:
        if r["kind"] != "gemm":
            continue
        c1 = r["ceiling"]["sustained"]
        m = r.get("measured")
        L.append(f"| {r['name']} | {r['tile']}, {r['num_warps']}, {r['num_stages']} | "
                 f"{r['resources']['regs']} | {r['counts']['by_class'].get('mem_local', 0)} / "
                 f"{r['spill_insns']} | {r['counts']['total']} | "
                 f"{r['tensor_insns_per_k_step']} | "
                 f"{r['non_tensor_thread_insns_per_output_per_k_step']:.2f} | "
                 f"{r['sm_clocks_per_k_step']['tensor']:.0f} / "
                 f"{r['sm_clocks_per_k_step']['cuda_cores']:.0f} | {r['binding_limit']} | "
                 f"{c1['x_cublas_overlapped']:.2f} / {c1['x_cublas_serial']:.2f} | "
                 f"{'' if not m else format(m['ratio'], '.3f') + 'x'} |")
    L += ["", "## Instruction mix (counted region, by class)", ""]
    for r in doc["rows"]:
        cls = ", ".join(f"{k} {v}" for k, v in r["counts"]["by_class"].items())
        top = ", ".join(f"{k} {v}" for k, v in list(r["counts"]["by_opcode"].items())[:12])
        L.append(f"- **{r['name']}** ({r['region']}, {r['occupancy']['warps_per_sm']} warps/SM "
                 f"by {r['occupancy']['limited_by']}): {cls}. Top opcodes: {top}.")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench/results/sass_sm90.json"))
    ap.add_argument("--only", default="", help="comma list of name substrings")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("run without TRITON_INTERPRET: the kernels must be compiled", file=sys.stderr)
        return 2
    cfgs = configs()
    if args.only:
        keys = [s.strip() for s in args.only.split(",") if s.strip()]
        cfgs = [c for c in cfgs if any(k in c[0] for k in keys)]
    meas = measured({c[1] for c in cfgs})
    rows = []
    for name, bench_row, kind, build in cfgs:
        row = analyse(name, kind, build())
        row["bench_row"] = bench_row
        row["measured"] = meas.get(bench_row)
        rows.append(row)
        print(f"{name:<58} {row['counts']['total']:5d} insns  {row['binding_limit']}", flush=True)
    doc = {"schema": SCHEMA, "provenance": provenance(), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
