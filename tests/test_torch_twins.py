"""torch_fast.quantize_mx (float-domain ops) against its spec twin torch_emu.quantize_mx (int64
bit patterns): the same scale bytes and codes on the fast path's whole domain
(torch_fast.supports), at every E8M0 byte boundary of the block amax +-1 ulp, with elements on
every grid midpoint +-1 ulp; and None (fall back) outside the domain, which holds the element
knobs ``int8_min`` and ``signed_zero``: those live in torch_emu alone (``_finish_codes``),
checked against Numba's ``encode_f32`` on their edges."""
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
    assert not torch_fast.supports("mxint8", OCP.replace(name="full", int8_min="full"))
    assert not torch_fast.supports("mxfp4", get_profile("microxcaling"))
    assert not torch_fast.supports("mxfp4", OCP.replace(name="nn", signed_zero="never_negative"))
    assert not torch_fast.supports("mxfp4", get_profile("gfloat"))


def _knob_edges():
    """fp32 inputs at the int8_min and signed_zero edges (scale 2^0): +-k/64 and midpoints
    +-(k + 1/2)/64 for k in 125..129 (+-1 ulp), -2.0, -2.1, +-0.0, tiny values that round
    to zero, +-Inf, NaN."""
    ks = np.arange(125, 130, dtype=np.float64)
    rel = np.concatenate([ks, ks + 0.5]) / 64
    rel = np.concatenate([rel, -rel, [-2.0, -2.1, 0.0, -0.0, 2.0 ** -12, -(2.0 ** -12)]])
    b = rel.astype(np.float32).view(np.uint32).astype(np.int64)
    b = np.concatenate([b - 1, b, b + 1, [0x80000000, 0, 0x7F800000, 0xFF800000, 0x7FC00000]])
    return np.unique(b.astype(np.uint32))


@pytest.mark.parametrize("fmt", ["mxint8", "mxfp4", "mxfp8_e4m3"])
@pytest.mark.parametrize("name", ["ocp", "microxcaling", "gfloat", "te_nvfp4"])
def test_element_knobs_are_numba_encode_f32(fmt, name):
    """torch_emu.convert (``_finish_codes``: int8_min, signed_zero) against Numba's
    encode_f32: MXINT8 0x80 under int8_min='full' only, +0 for every zero under
    never_negative, -0.0 inputs under input_neg_zero_to_pos."""
    from mxref import _kernels as K
    prof = get_profile(name).replace(name="k", formats=None, nvfp4_order="exact")
    bits = _knob_edges()
    got = torch_emu.convert(torch.from_numpy(bits.view(np.int32)), "float32", fmt, prof).numpy()
    want = np.empty(bits.size, np.uint8)
    K.encode_elements(bits, 0, get_format(fmt).element.kernel_params(), prof.kernel_params(),
                      want)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} differ, first x bits 0x{int(bits[bad[0]]):08x}: " \
                          f"torch 0x{int(got[bad[0]]):02x} numba 0x{int(want[bad[0]]):02x}"
