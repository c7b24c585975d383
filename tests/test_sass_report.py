"""bench/sass_report.py: the SASS parser, the opcode classes and the loop finder, checked on
planted kernels whose op mix is known from their source (compiled for sm_90 without a GPU,
a few seconds each)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import sass_report as sr  # noqa: E402

SYNTHETIC = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_3:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LOP3.LUT R5, R4, 0x7fffffff, RZ, 0xc0, !PT ;
        /*0030*/                   IMAD.MOV.U32 R6, RZ, RZ, R5 ;
        /*0040*/                   FFMA R7, R6, R6, R7 ;
        /*0050*/               @P0 BRA `(.L_x_3) ;
        /*0060*/                   NOP ;
        /*0070*/                   STG.E.U8 desc[UR4][R2.64], R7 ;
        /*0080*/                   EXIT ;
.L_x_4:
        /*0090*/                   BRA `(.L_x_4);
"""


def test_classes_of_known_opcodes():
    # classes as the GH100 pipes are documented (FMA-heavy runs IMAD, the ALU logic / shifts /
    # integer compare, XU the conversions), written here by hand
    want = {"LOP3.LUT": "logic_shift_prmt", "SHF.R.U32.HI": "logic_shift_prmt",
            "PRMT": "logic_shift_prmt", "IMAD.MOV.U32": "imad", "IMAD.SHL.U32": "imad",
            "VIMNMX.U32": "int_alu", "ISETP.GE.U32.AND": "int_alu", "FADD": "fp32",
            "FFMA": "fp32", "F2I.FTZ.U32.TRUNC.NTZ": "conv_xu", "I2F.RP": "conv_xu",
            "MUFU.RCP": "conv_xu", "HGMMA.64x128x16.F32.BF16": "tensor",
            "QGMMA.64x128x32.F32.E4M3.E4M3": "tensor", "SHFL.BFLY": "shuffle_reduce",
            "LDG.E.128": "mem_global", "STG.E.U8": "mem_global", "LDS.U8": "mem_shared",
            "STL": "mem_local", "LDL.LU": "mem_local", "UIADD3": "uniform", "BRA": "control"}
    got = {op: sr.classify(op)[0] for op in want}
    assert got == want
    assert sr.classify("IMAD")[1] == "fma_heavy" and sr.classify("LOP3.LUT")[1] == "alu"
    assert sr.classify("FMUL")[1] == "fma" and sr.classify("F2F.F16.F32")[1] == "xu"


def test_parser_loop_and_counts_on_synthetic_sass():
    insns = sr.parse_sass(SYNTHETIC)
    assert [i["opcode"] for i in insns][:3] == ["LDC", "LDG.E.128", "LOP3.LUT"]
    lp = sr.loops(insns)
    # the backward branch at 0x50 closes the loop from .L_x_3 (0x10); the self-branch after
    # EXIT is a loop of one instruction
    assert (1, 5) in lp
    body = insns[1:6]
    c = sr.count(body)
    assert c["total"] == 5
    assert c["by_class"] == {"mem_global": 1, "logic_shift_prmt": 1, "imad": 1, "fp32": 1,
                             "control": 1}
    where, whole = sr.region(insns, want_tensor=False)
    # the whole kernel up to its EXIT, NOP left out by count()
    assert sr.count(whole)["total"] == 8
    with pytest.raises(RuntimeError):
        sr.region(insns, want_tensor=True)           # no tensor op in any loop


triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
    pytest.skip("TRITON_INTERPRET=1: kernels cannot be compiled", allow_module_level=True)
try:
    sr.nv_bin("nvdisasm")
except FileNotFoundError as e:  # pragma: no cover
    pytest.skip(str(e), allow_module_level=True)

import triton.language as tl  # noqa: E402


@triton.jit
def _planted(x_ptr, y_ptr, n, TWO: tl.constexpr):
    """Per loop iteration and thread (128 lanes, 4 warps: one element each): one int32 load,
    one int->float conversion, one fp32 multiply (two with TWO), one xor."""
    offs = tl.arange(0, 128)
    acc = tl.full((128,), 1.0, tl.float32)
    h = tl.zeros((128,), tl.int32)
    for i in range(n):
        v = tl.load(x_ptr + i * 128 + offs)
        f = v.to(tl.float32)
        acc = acc * f
        if TWO:
            acc = acc * (f + 0.5)
        h = h ^ v
    tl.store(y_ptr + offs, acc + h.to(tl.float32, bitcast=True))


def _loop_counts(two):
    sig = {"x_ptr": "*i32", "y_ptr": "*fp32", "n": "i32", "TWO": "constexpr"}
    cubin, _ = sr.compile_sm90(_planted, sig, {"TWO": two}, num_warps=4, num_stages=1,
                               fp_fusion=False)
    text, usage = sr.disassemble(cubin)
    insns = sr.parse_sass(text)
    lp = [r for r in sr.loops(insns) if r[1] > r[0]]
    assert lp, "no loop found in the planted kernel"
    a, b = lp[0]
    return sr.count(insns[a:b + 1]), usage


@pytest.mark.parametrize("two", [False, True])
def test_planted_kernel_op_mix(two):
    c, usage = _loop_counts(two)
    ops = c["by_opcode"]
    assert c["total"] > 0 and usage["regs"] and usage["regs"] > 0
    assert sum(v for k, v in ops.items() if k.startswith("LDG")) == 1
    assert sum(v for k, v in ops.items() if k.startswith("FMUL")) == (2 if two else 1)
    conv = c["by_class"].get("conv_xu", 0) + c["by_class"].get("conv_alu", 0)
    assert conv == 1
    assert c["by_class"].get("logic_shift_prmt", 0) >= 1           # the xor (LOP3)
    assert c["by_class"].get("tensor", 0) == 0 and c["by_class"].get("mem_local", 0) == 0
    assert any(k.startswith("BRA") for k in ops)                 # the backward branch
