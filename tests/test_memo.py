"""The launch-time constexpr caches: a cached table is never shared between callers, and
unhashable arguments still work (uncached)."""
from mxkernels._memo import memo, memo_dict


def test_memo_dict_copies_and_caches():
    calls = []

    @memo_dict
    def table(fmt, profile="ocp", *, rows=32):
        calls.append((fmt, profile, rows))
        return {"FMT": fmt, "ROWS": rows}

    a = table("mxfp4", rows=64)
    a["BLOCK_ROWS"] = 1                      # a caller adds a launch key
    b = table("mxfp4", rows=64)
    assert b == {"FMT": "mxfp4", "ROWS": 64} and b is not a
    assert calls == [("mxfp4", "ocp", 64)]   # computed once
    table(["unhashable"])                    # falls back to a plain call
    table(["unhashable"])
    assert len(calls) == 3


def test_memo_bool_and_errors_not_cached():
    calls = []

    @memo
    def ok(x):
        calls.append(x)
        if x < 0:
            raise ValueError("negative")
        return x > 1

    assert ok(2) and ok(2) and calls == [2]
    for _ in range(2):
        try:
            ok(-1)
        except ValueError:
            pass
    assert calls == [2, -1, -1]


def test_kernel_tables_are_cached_copies():
    from mxkernels.triton_quant import mx_constexprs
    a = mx_constexprs("mx_quantize", "mxfp4", "ocp", "bfloat16")
    a["BLOCK_ROWS"] = -1
    assert mx_constexprs("mx_quantize", "mxfp4", "ocp", "bfloat16").get("BLOCK_ROWS") != -1
