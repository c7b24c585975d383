"""NVFP4 tensor cases: 4 blocks of 16 (64 elements), E2M1 elements, E4M3 block scales,
fp32 tensor scale T = global_amax / 2688."""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from .base import _SRCS, Case, _elem, _ilog2, _p2
from .mx import _check_args, _Ctx

_NV_B, _NV_N = 16, 64


def _rne_codes(mags: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Index of the RNE (ties to the even index), saturating rounding of v >= 0 onto the
    sorted float64 grid mags (every value involved is exact in float64)."""
    i = np.clip(np.searchsorted(mags, v, side="right") - 1, 0, len(mags) - 2)
    d1, d2 = v - mags[i], mags[i + 1] - v
    up = (d2 < d1) | ((d1 == d2) & (i % 2 == 1))
    return np.where(v >= mags[-1], len(mags) - 1, i + up)


@lru_cache(maxsize=None)
def _op_order_pairs(src_dtype: str) -> tuple:
    """(global_amax, block_amaxes) source bit patterns for which the exact, TE and torchao
    NVFP4 block-scale op orders (docs/semantics.md) give different E4M3 block scales.
    All arithmetic is single IEEE operations (fp32 where the orders use fp32; float64 for the
    exact quotient, whose rounding cannot move it across an E4M3 tie)."""
    s = _SRCS[src_dtype]
    e4 = np.array([float(m) for m in _elem("e4m3").mags])
    f32 = np.float32
    out = []
    for g in (29.5, 3.0, 100.0, 1000.0, 0.3125, 13.0, 0.01171875, 40000.0):
        gb = s.enc(Fraction(g))
        if gb is None:
            continue
        T = f32(g) / f32(2688)
        c6 = f32(f32(f32(2688) / f32(g)) * (f32(1) / f32(6)))
        e = _ilog2(Fraction(g))
        b = np.concatenate([(128 + np.arange(128)) * 2.0 ** (eb - 7) for eb in range(e - 5, e + 1)])
        b = b[b <= g]
        if s.name == "float16":
            b = b[(b.astype(np.float16).astype(np.float64) == b) & (b >= 2.0 ** -14)]
        b32 = b.astype(np.float32)
        ex = _rne_codes(e4, b / (6.0 * float(T)))
        te = _rne_codes(e4, (b32 * c6).astype(np.float64))
        tao = _rne_codes(e4, np.clip(((b32 / f32(6)) / T).astype(np.float64), 2.0 ** -6, 448.0))
        d_te, d_tao = ex != te, (ex != tao) & (ex == te)
        pick = list(np.flatnonzero(d_te)[:2]) + list(np.flatnonzero(d_tao)[:1])
        if pick:
            out.append((gb, tuple(s.enc(Fraction(float(b[i]))) for i in pick)))
    return tuple(out)


def te_4over6_order_cases(src_dtype: str, level: int) -> list:
    """[S3] A Four-over-Six tensor on which TE's candidate-scale order (quantize_4over6_nvfp4.cuh
    compute_scale_pair: fl(fl(b/6) * S_enc), then fl(that * 1.5)) and the plain NVFP4 order
    fl(b * fl(S_enc * fl(1/6))) pick different E4M3 bytes (issue 28's worked block: g =
    0x42ad2085, b = 0x3b754369, S_enc = 6 * 256 / g = 17.744196; TE's map-to-4 byte is 0x08, an
    exact E4M3 tie, where the plain order gives 0x09). Row 1 holds b and elements
    k * 2^-6 * fl(1/S_enc), k = 0.5, 1, 2: exact at map-to-4's scale 2^-6 (codes 1, 2, 4), off
    the grid at map-to-6's, so select='mse' picks map-to-4 and the byte shows the order.
    fp32 only (the bits are fp32 values); L1."""
    if src_dtype != "float32" or level < 1:
        return []
    f32 = np.float32
    g, b = np.uint32(0x42AD2085).view(f32), np.uint32(0x3B754369).view(f32)
    inv = f32(1) / f32(f32(1536) / g)
    elems = [f32(k * 2.0 ** -6) * inv for k in (0.5, 1.0, 2.0) * 5]
    x = np.zeros((4, 16), f32)
    x[0, 0], x[1, 0], x[1, 1:] = g, b, elems
    return [Case("S3", ("te_4over6_order",), x.reshape(-1).view(np.uint32), _NV_N)]


class _NvCtx(_Ctx):
    def __init__(self, src: str, level: int):
        super().__init__("e2m1", src, level, _NV_B)
        self.element = "nvfp4"
        self.e4 = _elem("e4m3")

    def tcase(self, cls, tags, blocks) -> Case:
        vals = [v for b in blocks for v in b]
        arr = np.array(vals, dtype=self.s.dtype)
        assert arr.shape == (_NV_N,), (cls, arr.shape)
        return Case(cls, tuple(tags), arr, _NV_N)

    def js(self) -> list:
        return [0, -8] if self.s.name == "float16" else [0, -20, 40]

    def scaled_block(self, S: Fraction, T: Fraction, vals: list, pos: int):
        """Anchor 6*S*T plus vals (element values times S*T), 16 elements; None if the source
        cannot hold one of them."""
        s = self.s
        a = s.enc(6 * S * T)
        if a is None:
            return None
        body = []
        for m, neg in vals:
            b = s.enc(m * S * T, neg)
            if b is None:
                return None
            body.append(b)
        body = [body[i % len(body)] for i in range(_NV_B - 1)]
        pos %= _NV_B
        return body[:pos] + [a] + body[pos:]

    def code_tensors(self, cls, vals, s_sets) -> list:
        out = []
        for j in self.js():
            T = _p2(j)
            for si, S3 in enumerate(s_sets):
                blocks = []
                for bi, S in enumerate((Fraction(448),) + S3):
                    blk = self.scaled_block(S, T, vals, bi * 5 + si)
                    if blk is None:
                        break
                    blocks.append(blk)
                if len(blocks) == 4:
                    out.append(self.tcase(cls, (f"T=2^{j}", "S=" + ",".join(
                        str(x) for x in S3)), blocks))
        return out

    def s_sets(self) -> list:
        F = Fraction
        sets = [(F(1), F(9, 8), F(1, 64)), (F(3, 512), F(240), F(13, 16))]
        if self.level >= 2:
            r = self.rng("nv", "ssets")
            mags = self.e4.mags
            for _ in range(12):
                sets.append(tuple(mags[i] for i in r.ints(1, len(mags), 3)))
        return sets

    def gen_E1(self):
        vals = [(m, n) for m in self.el.mags for n in (False, True) if (m, n) != (self.el.M, False)]
        return self.code_tensors("E1", vals, self.s_sets())

    def gen_E2(self):
        vals = [(m, n) for m in self.el.mids for n in (False, True)] + [(self.el.M, True)]
        return [Case(c.cls, ("tie",) + c.tags, c.src, c.n_valid)
                for c in self.code_tensors("E2", vals, self.s_sets())]

    def gen_S5(self):
        """Tiny block amax: E4M3 subnormal block scales, the 2^-6 (0.09375 * T) boundary,
        block scales rounding to 0."""
        s, F = self.s, Fraction
        tiny = [F(1, 64), None, F(7, 512), F(1, 512), F(1, 1024), F(3, 2048), F(1, 2048),
                F(3, 1024), F(5, 512)]
        out = []
        for j in self.js()[:2] if self.level <= 1 else self.js():
            T = _p2(j)
            amaxes = []
            for t in tiny:
                if t is None:      # just below 0.09375 * T
                    b = s.below(6 * F(1, 64) * T)
                else:
                    b = s.enc(6 * t * T)
                if b is not None and b not in amaxes:
                    amaxes.append(b)
            head = self.scaled_block(F(448), T, [(m, n) for m in self.el.mags
                                                 for n in (False, True)][1:], 0)
            if head is None:
                continue
            for gi in range(0, len(amaxes), 3):
                blocks = [head]
                for bi, a in enumerate(amaxes[gi:gi + 3]):
                    am = s.dec(a)
                    body = [s.grid(am * m / 6, "floor") if m else 0 for m in self.el.mags]
                    body = [(b or 0) | (s.sign if i % 2 else 0) for i, b in enumerate(body)]
                    body = [body[i % len(body)] for i in range(_NV_B - 1)]
                    p = (bi * 7 + 3) % _NV_B
                    blocks.append(body[:p] + [a] + body[p:])
                while len(blocks) < 4:
                    blocks.append(blocks[-1])
                out.append(self.tcase("S5", ("tiny_block_amax", f"T=2^{j}"), blocks))
        return out

    def gen_S3(self):
        """Op-order vectors: the canonical global_amax 29.5 / block_amax 11.0625 (exact
        0x72 vs TE 0x73) and searched (global, block) pairs where the orders differ."""
        s, F = self.s, Fraction
        out = []
        r = self.rng("nv", "oporder")
        g, b = s.enc(F(59, 2)), s.enc(F(177, 16))
        sm = [s.enc(F(1, 2))] * (_NV_B - 1)
        blocks = [[g] + self.fill(r, 2, _NV_B - 1), [b] + sm,
                  self.fill(r, 1, _NV_B), self.fill(r, -3, _NV_B)]
        out.append(self.tcase("S3", ("op_order", "g=29.5", "b=11.0625"), blocks))
        pairs = _op_order_pairs(self.s.name) if self.level >= 1 else ()
        lim = 6 if self.level <= 1 else len(pairs)
        for gb, bs in pairs[:lim]:
            blocks = [self.with_amax(gb, 0, self.fill(r, s.exp_of(gb), _NV_B - 1))]
            for bb in bs:
                blocks.append(self.with_amax(bb, r.int(0, _NV_B),
                                             self.fill(r, s.exp_of(bb), _NV_B - 1)))
            while len(blocks) < 4:
                blocks.append(self.fill(r, s.exp_of(gb) - 6, _NV_B))
            out.append(self.tcase("S3", ("op_order", "searched"), blocks))
        return out

    def gen_S6(self):
        s = self.s
        r = self.rng("nv", "zeros")
        z, nz = [0] * _NV_B, [s.sign] * _NV_B
        some = self.fill(r, 3, _NV_B, zero_frac=0)
        return [self.tcase("S6", ("all_pos_zero",), [z] * 4),
                self.tcase("S6", ("all_neg_zero",), [nz] * 4),
                self.tcase("S6", ("mixed_zero",),
                           [z, nz, [s.sign * (i % 2) for i in range(_NV_B)], z]),
                self.tcase("S6", ("one_zero_block",), [some, z, self.fill(r, 0, _NV_B, zero_frac=0),
                                                        nz])]

    def gen_S7(self):
        s = self.s
        out = []
        for sp, lab in ((s.nans[0], "nan"), (s.inf, "+inf"), (s.inf | s.sign, "-inf"),
                        (s.nans[2], "snan")):
            for pos in (0, _NV_B + 7, _NV_N - 1):
                if lab == "snan" and pos != 2 * _NV_B and pos != 0:
                    continue
                r = self.rng("nv", "S7", lab, pos)
                vals = [v for bi in range(4) for v in self.fill(r, 4 - 3 * bi, _NV_B)]
                vals[pos] = sp
                out.append(self.tcase("S7", (lab, f"pos={pos}"),
                                      [vals[i:i + _NV_B] for i in range(0, _NV_N, _NV_B)]))
        return out

    def gen_R1(self):
        s = self.s
        n = 16 if self.level <= 1 else 160
        table = [e for e in (s.min_exp + 20, s.emin, s.emin + 10, -64, -1, 0, 1, 8, 64,
                             s.emax - 1, s.emax) if s.min_exp <= e <= s.emax]
        out = []
        for i in range(n):
            r = self.rng("nv", "R1", i)
            b0 = table[r.int(0, len(table))] if r.int(0, 5) < 3 else r.int(s.min_exp, s.emax + 1)
            blocks = [self.r1_values(r, b0 if bi == 0 else b0 - r.int(0, 24), _NV_B)
                      for bi in range(4)]
            if r.int(0, 20) == 0:
                blocks[r.int(0, 4)][r.int(0, _NV_B)] = (s.inf, *s.nans)[r.int(0, 1 + len(s.nans))]
            out.append(self.tcase("R1", (f"base={b0}",), blocks))
        return out

    def gen_R2(self):
        n = 8 if self.level <= 1 else 80
        labels = ("gaussian", "student_t3", "outlier_channels")
        out = []
        for i in range(n):
            r = self.rng("nv", "R2", i)
            dist = i % 3
            chans = tuple(sorted(set(r.ints(0, _NV_B, 2)))) if dist == 2 else ()
            blocks = [self.r2_values(r, _NV_B, dist, chans) for _ in range(4)]
            out.append(self.tcase("R2", (labels[dist],), blocks))
        return out


_NV_ORDER = ("E1", "E2", "S3", "S5", "S6", "S7", "R1", "R2")


def nvfp4_cases(src_dtype: str, level: int) -> list:
    """NVFP4 tensor cases: each Case.src is 64 elements (4 blocks of 16), n_valid = 64."""
    _check_args(src_dtype, level)
    ctx = _NvCtx(src_dtype, int(level))
    out = []
    for c in _NV_ORDER:
        got = getattr(ctx, f"gen_{c}")()
        out += got[:1] if level == 0 else got
    return out
