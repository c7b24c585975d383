"""The training path must not make the host wait for the GPU inside a step: a synchronizing
copy per rotated GEMM operand (a sign vector copied from pageable host memory) was 379
synchronizations in one mxfp4-fdw-h16 step on llama-30m (scripts/gpu_sync_check.py, H100).

The GPU test runs one MXLinear forward + backward per recipe under
``torch.cuda.set_sync_debug_mode("error")`` after a warm-up step (first calls may compile and
cache); CI has no GPU and runs only the DeviceConsts checks."""
import pytest
import torch

from mxkernels._memo import DeviceConsts

CUDA = torch.cuda.is_available()


def test_device_consts_returns_a_cpu_tensor_itself_without_copying():
    c = DeviceConsts(cap=2)
    a = torch.tensor([1.0, -1.0])
    assert c.get(a, "cpu") is a and c.misses == 0


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_device_consts_hits_by_content_and_bounds_its_size():
    c = DeviceConsts(cap=2)
    a = c.get(torch.tensor([1.0, -1.0]), "cuda")
    b = c.get(torch.tensor([1.0, -1.0]), "cuda")          # another host tensor, same content
    assert a is b and c.misses == 1 and a.device.type == "cuda"
    c.get(torch.tensor([-1.0, -1.0]), "cuda")
    c.get(torch.tensor([-1.0, 1.0]), "cuda")              # third entry: the table was emptied
    assert c.misses == 3 and len(c._d) == 1
    assert torch.equal(c.get(torch.tensor([-1.0, 1.0]), "cuda").cpu(), torch.tensor([-1.0, 1.0]))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("recipe", ["mxfp4-fdw-h16", "mxfp4-fdw-rht", "mxfp4-fdw-sr",
                                    "mxfp4-fdw", "nvfp4-te", "ms-fp4", "decomp-fixed"])
def test_no_host_sync_in_a_step(recipe):
    from mxkernels.training import MXLinear
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128).cuda()
    m = MXLinear.from_linear(lin, recipe, backend="triton")
    m.name = "blk.0.proj"
    x = torch.randn(512, 256, device="cuda")
    gy = torch.randn(512, 128, device="cuda")

    def step(s):
        m.step = s
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(xx)
        y.backward(gy.to(y.dtype))

    step(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step(1)                                        # random signs: a new draw (a miss)
        step(1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
