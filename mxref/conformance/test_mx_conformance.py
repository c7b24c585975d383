"""One test per golden op (``test_<op>``, from :data:`mxref.ops.OP_NAMES`), parametrized by
mxref.pytest_plugin over (golden file, coverage class)."""
import pytest

from mxref.ops import OP_NAMES
from mxref.pytest_plugin import check_case

pytestmark = pytest.mark.mx_conformance


def _conformance_test(op):
    def test(request, mx_golden_case):
        check_case(request, mx_golden_case)
    test.__name__ = test.__qualname__ = f"test_{op}"
    test.__doc__ = f"The golden files of op {op}, one case per (file, coverage class)."
    test.mx_op = op
    return test


for _op in OP_NAMES:
    globals()[f"test_{_op}"] = _conformance_test(_op)
del _op
