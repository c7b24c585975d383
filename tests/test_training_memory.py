"""Saved-for-backward accounting (mxkernels.training.memory) and FP4 activation storage size.

Expected sizes come from the formats, not from the code: an MXFP4 layer input of T x K keeps
T*K/2 bytes of packed codes and T*K/32 bytes of E8M0 scales; the same layer storing its
input unquantized keeps the T x K fp32 tensor (4*T*K bytes)."""
import pytest
import torch

from mxkernels.training import mxlinear as mxl
from mxkernels.training.memory import count_saved, saved_bytes
from mxkernels.training.mxlinear import MXLinear
from mxkernels.training.recipes import get_recipe

T, K, N = 64, 96, 32


def _layer(recipe):
    torch.manual_seed(0)
    return MXLinear(K, N, bias=False, recipe=recipe, backend="torch")


def _x():
    return torch.randn(T, K, generator=torch.Generator().manual_seed(1))


def test_fp4_stored_input_is_packed_codes_and_scales():
    lay = _layer("fp4-activations")
    x = _x()
    r = count_saved(lambda: lay(x), exclude=[lay.weight])
    assert r["by_dtype"] == {"uint8": T * K // 2 + T * K // 32}


def test_unstored_input_is_the_fp32_tensor():
    rec = get_recipe("fp4-activations").replace(name="no-store", save_activations=None)
    lay = _layer(rec)
    x = _x()
    r = count_saved(lambda: lay(x), exclude=[lay.weight])
    assert r["by_dtype"] == {"float32": 4 * T * K}


def test_unpacked_codes_would_be_caught(monkeypatch):
    """Plant the bug the size check is for: codes kept one per byte instead of packed."""
    real = mxl._store_activation

    def unpacked(x2, fmt, backend):
        st = real(x2, fmt, backend)
        from mxkernels import torch_emu as te
        return {**st, "codes": te.unpack(st["codes"], fmt, st["k"]), "packed": False}
    monkeypatch.setattr(mxl, "_store_activation", unpacked)
    lay = _layer("fp4-activations")
    x = _x()
    r = count_saved(lambda: lay(x), exclude=[lay.weight])
    assert r["by_dtype"]["uint8"] != T * K // 2 + T * K // 32
    # and the backward still runs from the unpacked store (the planted bug is size only)
    lay(x).sum().backward()


def test_stored_activation_backward_unchanged_by_save_path():
    """dW from the FP4 store equals dW of the same recipe without storage fed mxref's MXFP4
    (OCP, RNE, blocks along K) dequantization of x: the store is exactly that tensor."""
    import mxref
    x = _x()
    dy = torch.randn(T, N, generator=torch.Generator().manual_seed(2))
    lay = _layer("fp4-activations")
    lay(x).backward(dy)
    xq = torch.from_numpy(mxref.dequantize(mxref.quantize(x.numpy(), "mxfp4", "ocp", axis=-1))
                          .astype("float32"))
    ref = _layer(get_recipe("fp4-activations").replace(name="no-store", save_activations=None))
    ref(xq).backward(dy)
    assert torch.equal(lay.weight.grad, ref.weight.grad)
    assert not torch.equal(xq, x)   # the store is lossy, so the comparison can fail


def test_saved_bytes_counts_a_storage_once_and_skips_parameters():
    lin = torch.nn.Linear(K, N, bias=False)
    x = _x().requires_grad_(True)
    r = count_saved(lambda: (lin(x), lin(x)), exclude=list(lin.parameters()))
    assert r["total_bytes"] == 4 * T * K and r["n_storages"] == 1


@pytest.mark.slow
def test_model_level_fp4_storage_saves_per_token_bytes():
    from mxkernels.training.models import build_model
    from mxkernels.training.mxlinear import swap_linears
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    out = {}
    for name in ("fp4-activations", "no-store"):
        rec = get_recipe("fp4-activations")
        if name == "no-store":
            rec = rec.replace(name="no-store", save_activations=None)
        m = build_model("qwen3-moe-tiny", 256, seed=0, max_seq_len=64)
        swap_linears(m, rec, backend="torch")
        out[name] = saved_bytes(m, ids, autocast_dtype=None)
    assert out["fp4-activations"]["total_bytes"] < out["no-store"]["total_bytes"]
    assert out["fp4-activations"]["by_dtype"].get("uint8", 0) > 0
