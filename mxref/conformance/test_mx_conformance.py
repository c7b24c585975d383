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
