"""One test per (golden file, coverage class) and op; parametrized by mxref.pytest_plugin."""
import pytest

from mxref.pytest_plugin import check_case

pytestmark = pytest.mark.mx_conformance


def _op(name):
    def deco(fn):
        fn.mx_op = name
        return fn
    return deco


@_op("quantize_mx")
def test_quantize_mx(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_mx_tensor")
def test_quantize_mx_tensor(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_nvfp4")
def test_quantize_nvfp4(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("convert")
def test_convert(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("dequantize")
def test_dequantize(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("pack")
def test_pack(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("rotate")
def test_rotate(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_rotated")
def test_quantize_rotated(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("gemm")
def test_gemm(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("rotated_gemm")
def test_rotated_gemm(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_mx_sr")
def test_quantize_mx_sr(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_nvfp4_sr")
def test_quantize_nvfp4_sr(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("mxfp4_to_fp8")
def test_mxfp4_to_fp8(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("fp8_to_mxfp4")
def test_fp8_to_mxfp4(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("reblock")
def test_reblock(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("decompose")
def test_decompose(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("macroblock")
def test_macroblock(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("outlier_fallback")
def test_outlier_fallback(request, mx_golden_case):
    check_case(request, mx_golden_case)


@_op("quantize_4over6")
def test_quantize_4over6(request, mx_golden_case):
    check_case(request, mx_golden_case)
