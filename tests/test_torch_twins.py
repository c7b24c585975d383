"""torch_fast.quantize_mx (float-domain ops) against its spec twin torch_emu.quantize_mx (int64
bit patterns): the same scale bytes and codes on the fast path's whole domain
(torch_fast.supports), at every E8M0 byte boundary of the block amax +-1 ulp, with elements on
every grid midpoint +-1 ulp; and None (fall back) outside the domain."""
import numpy as np
import pytest
import torch

from mxkernels import torch_emu, torch_fast
from mxref import get_format, get_profile

FLOAT_MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"]
OCP = get_profile("ocp")
PROFILES = [OCP, get_profile("rceil"), OCP.replace(name="ta", rounding="ties_away"),
            get_profile("rceil").replace(name="rta", rounding="ties_away"),
            OCP.replace(name="sr", rounding="stochastic")]


def _ulp_neighbours(v):
    v = np.asarray(v, np.float32)
    b = v.view(np.uint32).astype(np.int64)
    return np.concatenate([b - 1, b, b + 1]).astype(np.uint32).view(np.float32)


def _blocks(fmt, rng):
    """Rows of one block each: amax at each power of two and at the element max times each
    power of two (the floor / rceil byte boundaries) +-1 ulp, binades 2^-100 .. 2^100; the
    other elements are grid points and midpoints of the element format at that scale +-1 ulp,
    with random signs and a few zeros."""
    f = get_format(fmt)
    el = f.element
    grid = np.unique(np.abs(el.value_table[np.isfinite(el.value_table)])).astype(np.float64)
    mids = (grid[1:] + grid[:-1]) / 2
    emax_val = grid.max()
    amaxes = []
    for k in range(-99, 99, 3):
        amaxes += [2.0 ** k, emax_val * 2.0 ** (k - 8)]
    amaxes = _ulp_neighbours(np.array(amaxes, np.float32))
    amaxes = amaxes[(amaxes >= 2.0 ** -100) & (amaxes <= 2.0 ** 100)]     # the fast domain
    bs = f.block_size
    rows = []
    for am in amaxes:
        scale = 2.0 ** (np.floor(np.log2(am)) - np.floor(np.log2(emax_val)))
        pts = np.concatenate([grid, mids]) * scale
        pts = _ulp_neighbours(pts.astype(np.float32))
        row = rng.choice(pts[(pts <= am) & np.isfinite(pts)], bs - 1)
        row = np.concatenate([[am], row]) * rng.choice([-1.0, 1.0], bs)
        row[rng.integers(0, bs, 2)] = 0.0
        rows.append(rng.permutation(row.astype(np.float32)))
    return torch.from_numpy(np.stack(rows))


@pytest.mark.parametrize("fmt", FLOAT_MX)
@pytest.mark.parametrize("prof", PROFILES, ids=[p.name for p in PROFILES])
def test_quantize_mx_is_torch_emu_quantize_mx(fmt, prof):
    assert torch_fast.supports(fmt, prof)
    rng = np.random.default_rng(7)
    t = _blocks(fmt, rng)
    rb = None
    if prof.rounding == "stochastic":
        rb = torch.from_numpy(rng.integers(0, 2**32, t.shape, dtype=np.int64))
    got = torch_fast.quantize_mx(t, fmt, prof, rb)
    assert got is not None
    want_s, want_c = torch_emu.quantize_mx(t, fmt=fmt, profile=prof, axis=-1, rand_bits=rb)
    torch.testing.assert_close(got[0], want_s.reshape(got[0].shape), rtol=0, atol=0)
    torch.testing.assert_close(got[1], want_c.reshape(got[1].shape), rtol=0, atol=0)


def test_outside_the_domain_falls_back():
    t = torch.ones(2, 32)
    t[0, 3] = float("nan")
    assert torch_fast.quantize_mx(t, "mxfp4", OCP) is None
    assert torch_fast.quantize_mx(torch.full((1, 32), 2.0 ** -120), "mxfp4", OCP) is None
    assert not torch_fast.supports("mxint8", OCP)
    assert not torch_fast.supports("mxfp4", get_profile("microxcaling"))
