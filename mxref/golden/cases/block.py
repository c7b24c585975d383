"""Block classes S1-S9 (the block amax itself: exponent sweeps, scale-rule separators, scale
extremes, specials in the amax position, ...) and the ragged layout class L1."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .base import _L1_NVALID, Case, _CtxBase, _p2


class _BlockClasses(_CtxBase):
    """The generators of classes S1-S9 and L1."""

    # ---- block classes ----------------------------------------------------------------------
    def sweep(self, lo: int, hi: int, extra=()) -> list:
        full = list(range(lo, hi + 1))
        if self.level >= 2 or len(full) <= 64:
            exps = full
        else:
            s, e0 = self.s, self.el.emax - 127
            cand = set(extra)
            for c, w in ((lo, 2), (s.emin, 2), (e0, 2), (0, 2), (hi, 2)):
                cand.update(range(c - w, c + w + 1))
            cand.update(range(lo - lo % 16, hi + 1, 16))
            exps = [e for e in cand if lo <= e <= hi]
        return sorted(exps, key=lambda e: (e != 0, e))

    def gen_S1(self) -> list:
        s, out = self.s, []
        for e in self.sweep(s.min_exp, s.emax):
            r = self.rng("S1", e)
            a = s.p2(e) | (s.sign if e % 3 == 0 else 0)
            blk = self.with_amax(a, e * 7, self.fill(r, e, self.B - 1))
            out.append(self.case("S1", (f"e={e}",), blk))
        return out

    def gen_S2(self) -> list:
        s, out = self.s, []
        extra = (24,) if s.name == "float32" else ()
        for e in self.sweep(s.min_exp + 1, s.emax + 1, extra):
            r = self.rng("S2", e)
            a = (s.p2(e) - 1) | (s.sign if e % 3 == 1 else 0)
            out.append(self.case("S2", (f"e={e}",),
                                 self.with_amax(a, e * 5 + 3, self.fill(r, e - 1, self.B - 1))))
        return out

    def _amax_block(self, cls, tags, amax: int, key, pos=None, spread=12) -> Case:
        r = self.rng(cls, *key)
        e = self.s.exp_of(amax)
        pos = r.int(0, self.B) if pos is None else pos
        return self.case(cls, tags, self.with_amax(amax, pos, self.fill(r, e, self.B - 1, spread)))

    def gen_S3(self) -> list:
        s, el = self.s, self.el
        bases = (("M_elem", el.M_sig), ("one", Fraction(1)), ("one_half", Fraction(3, 2)),
                 ("even_threshold", el.t_even))
        exps = [0, el.emax - 127, s.emax, s.emin, -20, 20, -5, 5]
        if self.level >= 2:
            exps += list(range(s.min_exp - s.min_exp % 4, s.emax + 1, 4))
        seen, out, cap = [], [], self.cap("S3")
        for e in exps:
            if e in seen or not s.min_exp <= e <= s.emax:
                continue
            seen.append(e)
            group, got = [], set()
            for lab, b in bases:
                v = b * _p2(e)
                x = s.enc(v)
                cands = ((x - 1, "-ulp"), (x, ""), (x + 1, "+ulp")) if x is not None else \
                    ((s.grid(v, "floor"), "-"), (s.grid(v, "ceil"), "+"))
                for c, d in cands:
                    if c and c < s.inf and c not in got:
                        got.add(c)
                        group.append(self._amax_block("S3", (lab + d, f"e={e}"), c,
                                                      (e, c), pos=len(group) * 3))
            if cap is not None and out and len(out) + len(group) > cap:
                continue
            out += group
        return out

    def gen_S4(self) -> list:
        s, el, B = self.s, self.el, self.B
        out, cap = [], self.cap("S4")
        for gi, k in enumerate(self.ks()):
            X = _p2(k)
            M, vmid, top = el.M * X, el.vmid * X, el.top * X
            c = [s.above(vmid), s.below(top), s.grid((vmid + top) / 2, "floor"), s.above(M)]
            vals = []
            for b in c:
                if b is not None and M < s.dec(b) < top and b not in vals:
                    vals.append(b)
            if cap is not None and out and len(out) + len(vals) > cap:
                continue
            small = self.pool("E1", k)
            lo = s.p2(el.emax + k)
            for vi, a in enumerate(vals):
                r = self.rng("S4", k, vi)
                big = [lo + int(x % np.uint64(a - lo + 1)) for x in r.raw(B // 2).tolist()]
                big = [b | (s.sign if i % 3 == 2 else 0) for i, b in enumerate(big)]
                fill = big + [small[(vi + i) % len(small)] for i in range(B - 1 - len(big))]
                sg = s.sign if vi % 2 else 0
                out.append(self.case("S4", ("E8", f"k={k}"),
                                     self.with_amax(a | sg, gi + 5 * vi, fill)))
        return out

    def gen_S5(self) -> list:
        s, el = self.s, self.el
        e0 = el.emax - 127                     # floor: amax in binade e0 -> scale byte 0x00
        ms = s.enc(el.M_sig * _p2(e0))
        mt = s.enc(el.M_sig * _p2(s.emax))
        cands = [
            (1, "src_min_subnormal"), (3, "src_subnormal_3"), (s.mmask, "src_max_subnormal"),
            (s.p2(e0), "scale_0x00"), (ms, "scale_0x00_M_elem"),
            (None if ms is None else ms + 1, "scale_0x00_M_elem+ulp"),
            (s.p2(e0 - 1), "scale_clamped_-128"), (s.p2(e0 - 8), "scale_clamped_-135"),
            (s.p2(s.emin), "src_min_normal"), (s.p2(s.emax), "src_top_binade"),
            (mt, "largest_exponent_M_elem"), (None if mt is None else mt + 1,
                                               "largest_exponent_M_elem+ulp"),
            (s.inf - 1, "src_max_finite"),
        ]
        out, seen = [], set()
        for i, (a, lab) in enumerate(cands):
            if a is None or a in seen or not 0 < a < s.inf:
                continue
            seen.add(a)
            sg = s.sign if i % 3 == 2 else 0
            out.append(self._amax_block("S5", (lab,), a | sg, (a,), spread=40))
        return out[:self.cap("S5")] if self.cap("S5") else out

    def gen_S6(self) -> list:
        s, B = self.s, self.B
        pool = self.pool("E1", 0)
        half = [0] * (B // 2) + [self.anchor(0)] + pool[:B - B // 2 - 1]
        half += [0] * (B - len(half))
        blocks = [
            ("all_pos_zero", [0] * B),
            ("all_neg_zero", [s.sign] * B),
            ("alternating_zero", [s.sign * (i % 2) for i in range(B)]),
            ("one_neg_zero", [s.sign if i == B // 3 else 0 for i in range(B)]),
            ("half_zero", half[:B]),
            ("zeros_last_max", [0] * (B - 1) + [self.anchor(0)]),
            ("zeros_one_src_min_subnormal", [1 | s.sign if i == 1 else s.sign * (i % 2)
                                             for i in range(B)]),
        ]
        return [self.case("S6", (t,), b) for t, b in blocks]

    def gen_S7(self) -> list:
        s, B = self.s, self.B
        out = []
        for variant in ("anchor", "random"):
            for sp, lab in ((s.nans[0], "nan"), (s.inf, "+inf"), (s.inf | s.sign, "-inf")):
                for pos in (0, B // 2, B - 1):
                    if variant == "anchor":
                        blk, _ = self.anchored(0, self.pool("E1", 0), pos, pos)
                    else:
                        r = self.rng("S7", lab, pos)
                        blk = self.fill(r, r.int(-10, 11), B)
                    blk[pos] = sp
                    out.append(self.case("S7", (lab, f"pos={pos}", variant), blk))
        return out

    def gen_S8(self) -> list:
        s, el, B = self.s, self.el, self.B
        out = []
        ks = self.ks()
        for k in ks[:2]:
            ms = el.min_sub
            tiny = self.sv([(v, i % 2 == 1) for i, v in enumerate(
                (ms, ms / 2, 3 * ms / 4, ms / 4, 3 * ms / 2, 5 * ms / 4, 5 * ms / 8, _p2(-40),
                 _p2(-12), ms * 2))], k)
            blk, _ = self.anchored(k, tiny, 0)
            out.append(self.case("S8", ("large_plus_tiny", "E5", "E6", f"k={k}"), blk))
            r = self.rng("S8", "spread", k)
            a = self.anchor(k)
            out.append(self.case("S8", ("large_plus_spread", f"k={k}"),
                                 self.with_amax(a, B - 1, self.fill(r, s.exp_of(a) - 8, B - 1,
                                                                    spread=30))))
        singles = [(self.anchor(0), 0), (s.enc(Fraction(1), True), B - 1),
                   (s.enc(el.min_sub), B // 2), (1, 3), (s.enc(Fraction(3), True), 5)]
        for v, pos in singles:
            if v is None:
                continue
            blk = [0] * B
            blk[pos % B] = v
            out.append(self.case("S8", ("single_nonzero", f"pos={pos % B}"), blk))
        r = self.rng("S8", "mixed")
        mixed = [b & ~s.sign | (s.sign if i % 2 else 0)
                 for i, b in enumerate(self.fill(r, 3, B, 4, 0))]
        out.append(self.case("S8", ("mixed_signs",), mixed))
        r = self.rng("S8", "negamax")
        pos_vals = [b & ~s.sign for b in self.fill(r, el.emax, B - 1, 10)]
        out.append(self.case("S8", ("negative_amax",),
                             self.with_amax(self.anchor(0) | s.sign, 7, pos_vals)))
        v = s.enc(Fraction(5, 4) * _p2(min(3, s.emax)))
        out.append(self.case("S8", ("all_equal",), [v] * B))
        out.append(self.case("S8", ("all_equal_negative",), [v | s.sign] * B))
        return out

    def gen_S9(self) -> list:
        s, el = self.s, self.el
        e0 = el.emax - 127
        if self.level >= 2:
            exps = list(range(s.min_exp, s.emax + 1))
        else:
            exps = [0, e0, e0 - 1, e0 + 1, s.emin, s.emax - 1, s.emax, s.min_exp + 2]
        out, seen, cap = [], [], self.cap("S9")
        for e in exps:
            if e in seen or not s.min_exp <= e <= s.emax:
                continue
            seen.append(e)
            m = s.enc(el.M_sig * _p2(e))
            if m is None:
                m = s.grid(el.M_sig * _p2(e), "floor")
            p, p1 = s.p2(e), s.p2(e + 1)
            h = s.enc(Fraction(3, 2) * _p2(e))
            pats = [(m - 1, "M_elem-ulp"), (m, "M_elem"), (m + 1, "M_elem+ulp"), (p, "one"),
                    (p + 1, "one+ulp"), (p1 - 1, "two-ulp"), (h, "one_half")]
            group, got = [], set()
            for i, (a, lab) in enumerate(pats):
                if a is None or not 0 < a < s.inf or a in got:
                    continue
                got.add(a)
                sg = s.sign if (e + i) % 4 == 3 else 0
                group.append(self._amax_block("S9", (lab, f"e={e}"), a | sg, (e, a), pos=e + 5 * i))
            if cap is not None and out and len(out) + len(group) > cap:
                continue
            out += group
        return out

    def gen_L1(self) -> list:
        s, B = self.s, self.B
        out = []
        ks = self.ks()
        for n in _L1_NVALID:
            if not 1 <= n < B:
                continue
            # (a) anchor at the last valid position, ties before it
            ties = self.pool("E2", 0)
            va = [ties[i % len(ties)] for i in range(n - 1)] + [self.anchor(0)]
            # (b) realistic values
            vb = self.r2_values(self.rng("L1", n), n, dist=n % 3)
            # (c) negative values incl. -0 and subnormal-ish at the low anchor scale
            k = ks[1] if len(ks) > 1 else ks[0]
            e1 = [b | s.sign for b in self.pool("E1", k)]
            vc = [e1[(i * 5) % len(e1)] for i in range(n)]
            vc[n // 2] = self.anchor(k) | s.sign
            for lab, v in (("ties_anchor_last", va), ("realistic", vb), ("negative_low_scale", vc)):
                out.append(self.case("L1", (lab, f"n_valid={n}"), v + [0] * (B - n), n_valid=n))
        return out

