"""Random classes R1 (log-uniform exponents over the whole source range) and R2 (realistic,
LLM-like values: Gaussian, heavy-tailed, outlier channels), from raw PCG64 words."""
from __future__ import annotations

from .base import _R1_N, _R2_N, _CtxBase, _Rng, _to_src


class _RandomClasses(_CtxBase):
    """The generators of classes R1 and R2."""

    # ---- random classes ---------------------------------------------------------------------
    def r1_table(self) -> list:
        s, el = self.s, self.el
        t = [s.min_exp, s.min_exp + 1, s.emin - 1, s.emin, s.emin + 1, -64, -1, 0, 1, 64,
             s.emax - 1, s.emax, el.emax - 127, el.emax - 128, el.emax, el.emax + 1]
        return [e for e in t if s.min_exp <= e <= s.emax]

    def r1_values(self, r: _Rng, base: int, n: int) -> list:
        s = self.s
        mb, mm = s.mbits, s.mmask
        out = []
        for _ in range(n):
            u = r.uniform(1)[0]
            e = base - (r.int(0, 4) if u < 0.8 else r.int(0, 24))
            kind, a, b = r.int(0, 10), r.int(0, mb), r.int(0, mb)
            m = (mm, 0, 1 << a, (1 << a) | (1 << b), (1 << a) - 1, mm ^ ((1 << a) - 1),
                 ((1 << a) - 1 + (mm ^ ((1 << b) - 1))) & mm)[kind] if kind < 7 else \
                int(r.raw(1)[0]) & mm
            v = 0 if r.int(0, 20) == 0 else s.native(e, m)
            out.append(v | (s.sign if r.int(0, 2) else 0))
        return out

    def gen_R1(self, n=None) -> list:
        s, B = self.s, self.B
        table = self.r1_table()
        if n is None:
            n = _R1_N if self.level <= 1 else 10 * _R1_N
        out = []
        for i in range(n):
            r = self.rng("R1", i)
            if r.int(0, 5) < 3:
                base = table[r.int(0, len(table))]
            else:
                base = r.int(s.min_exp, s.emax + 1)
            vals = self.r1_values(r, base, B)
            if r.int(0, 20) == 0:
                vals[r.int(0, B)] = (s.inf, s.inf | s.sign, *s.nans)[r.int(0, 2 + len(s.nans))]
            out.append(self.case("R1", (f"base={base}",), vals))
        return out

    def r2_values(self, r: _Rng, n: int, dist: int, outliers=()) -> list:
        """Realistic values rounded to the source: gaussian / student-t(3) / outlier channels,
        magnitude (1+u) * 2^[-10, 10)."""
        scale = (1.0 + r.uniform(1)[0]) * 2.0 ** r.int(-10, 10)
        x = r.student_t3(n) if dist == 1 else r.normal(n)
        x = x * scale
        for p in outliers:
            x[p] *= 50.0
        return _to_src(x, self.s)

    def gen_R2(self, n=None) -> list:
        if n is None:
            n = _R2_N if self.level <= 1 else 10 * _R2_N
        out, B = [], self.B
        labels = ("gaussian", "student_t3", "outlier_channels")
        for i in range(n):
            r = self.rng("R2", i)
            dist = i % 3
            chans = ()
            if dist == 2:
                rc = self.rng("R2", "channels", i // 9)
                chans = tuple(sorted(set(rc.ints(0, B, 3))))
            out.append(self.case("R2", (labels[dist],), self.r2_values(r, B, dist, chans)))
        return out
