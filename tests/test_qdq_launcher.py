"""The cached launcher of triton_fast.quantize_dequantize (the training hot path's host cost).

After the first JIT launch of a configuration, later launches call the CompiledKernel's launcher
directly. These tests replace the JIT function and the driver with recorders (no GPU needed) and
check that a cached launch passes exactly the arguments JITFunction.run would (the kernel's
parameters in order, constexprs included), and that anything Triton specializes on (pointer
alignment, the value class of the sizes, num_warps, the device, the configuration) or a launch
hook sends the call back through the JIT. Bit-exactness of the real kernel through both paths is
checked on a GPU by scripts/gpu_qdq_check.py ("/jit" and "/cached" rows)."""
import types

import pytest
import torch
import triton

from mxkernels import triton_fast as tf


class _Compiled:
    packed_metadata = "packed-metadata"
    function = "cu-function"

    def __init__(self, log):
        self.log = log

    def run(self, *a):
        self.log.append(("run", a))


class _Jit:
    arg_names = tf.mx_qdq_kernel.arg_names

    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.log.append(("jit", grid, args, kw))
            return _Compiled(self.log)
        return launch


@pytest.fixture
def fake(monkeypatch):
    log = []
    monkeypatch.setattr(tf, "mx_qdq_kernel", _Jit(log))
    monkeypatch.setattr(tf, "INTERPRETED", False)
    monkeypatch.setattr(tf, "_LAUNCH_CACHE", [True])
    monkeypatch.setattr(tf, "_LAUNCHED", {})
    dev = types.SimpleNamespace(current=0)
    drv = types.SimpleNamespace(get_current_device=lambda: dev.current,
                                get_current_stream=lambda d: 1000 + d)
    monkeypatch.setattr(tf, "_active_driver", lambda: drv)
    return log, dev


def kinds(log):
    return [e[0] for e in log]


def qdq(x, **kw):
    kw.setdefault("rows", True)
    kw.setdefault("cols", True)
    return tf.quantize_dequantize(x, "mxfp4", "ocp", **kw)


def test_cached_launch_passes_what_the_jit_passes(fake):
    log, _ = fake
    x = torch.randn(64, 96, dtype=torch.bfloat16)
    qdq(x)
    qdq(x)
    assert kinds(log) == ["jit", "run"]
    _, grid, jargs, jkw = log[0]
    ra = log[1][1]
    assert ra[:9] == (grid[0], 1, 1, 1000, "cu-function", "packed-metadata", None, None, None)
    names = tf.mx_qdq_kernel.arg_names
    assert len(ra) - 9 == len(names)
    for i, name in enumerate(names):
        want = jargs[i] if i < len(jargs) else jkw[name]
        got = ra[9 + i]
        if isinstance(want, torch.Tensor):
            # the same role: dtype and shape of the buffer in that slot (the JIT call's own
            # buffers were other allocations of the same configuration)
            assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        else:
            assert got == want, name
    assert jkw["num_warps"] == 4
    assert ra[9] is not jargs[0] and ra[9].data_ptr() == x.data_ptr()


def test_specialization_changes_go_back_to_the_jit(fake):
    log, dev = fake
    base = torch.randn(64 * 96 + 1, dtype=torch.bfloat16)
    x = base[:64 * 96].view(64, 96)
    qdq(x)                                            # jit: first of this configuration
    qdq(base[1:].view(64, 96))                        # jit: input pointer 2 bytes off 16
    qdq(x.float())                                    # jit: another source dtype
    qdq(torch.randn(65, 96, dtype=torch.bfloat16))    # jit: rows 65 (not a multiple of 16)
    qdq(torch.randn(80, 96, dtype=torch.bfloat16))    # run: 80 is in 64's class
    qdq(torch.randn(1, 96, dtype=torch.bfloat16))     # jit: rows == 1
    qdq(x, num_warps=8)                               # jit: another num_warps
    qdq(x, cols=False)                                # jit: another configuration
    qdq(x, with_codes=True)                           # jit
    dev.current = 1
    qdq(x)                                            # jit: another current device
    dev.current = 0
    qdq(x)                                            # run
    assert kinds(log) == ["jit", "jit", "jit", "jit", "run", "jit", "jit", "jit", "jit", "jit",
                          "run"]


def test_a_launch_hook_or_the_switch_sends_launches_through_the_jit(fake, monkeypatch):
    log, _ = fake
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    qdq(x)
    qdq(x)
    rt = triton.knobs.runtime
    hook = triton.knobs.HookChain()
    hook.add(lambda *a, **k: None)
    monkeypatch.setattr(rt, "launch_enter_hook", hook)
    qdq(x)
    monkeypatch.setattr(rt, "launch_enter_hook", lambda *a: None)
    qdq(x)
    monkeypatch.setattr(rt, "launch_enter_hook", None)
    qdq(x)
    monkeypatch.setattr(tf, "_LAUNCH_CACHE", [False])
    qdq(x)
    assert kinds(log) == ["jit", "run", "jit", "jit", "run", "jit"]


def test_empty_tensors_launch_nothing(fake):
    log, _ = fake
    r, c, _ = qdq(torch.empty(0, 64, dtype=torch.bfloat16))
    assert r.shape == c.shape == (0, 64) and log == []
