"""Element classes E1-E11: the element values under test, times 2^k, next to an ANCHOR element
``max_normal * 2^k`` that fixes the shared scale (the canonical floor rule gives ``X = 2^k``);
and, at level 2, cross products of element classes inside one block."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .base import _NAN_LABELS, _SRCS, _CtxBase, _ilog2, _p2


class _ElementClasses(_CtxBase):
    """The generators of classes E1-E11 and the level-2 cross products."""

    # ---- element value pools (values at scale 2^k, without the anchor) ----------------------
    def pool(self, cls: str, k: int) -> list:
        return list(_pool(self.el.name, self.srcname, cls, k))

    def _pool(self, cls: str, k: int) -> list:
        el, s = self.el, self.s
        X = _p2(k)
        both = (False, True)
        if cls == "E1":
            return self.sv([(m, n) for m in el.mags for n in both], k)
        if cls == "E2":
            return self.sv([(m, n) for m in el.mids for n in both], k)
        if cls == "E3":
            out = []
            for m in el.mids:
                lo, hi = s.below(m * X), s.above(m * X)
                for neg in both:
                    sg = s.sign if neg else 0
                    out += [b | sg for b in (lo, hi) if b]
            return out
        if cls == "E4":
            return self._traps(k) if s.name == "float32" else []
        if cls == "E5":
            if el.is_int:
                return []
            n = el.n_sub
            subs = el.mags[1:n]
            mids = [(el.mags[i] + el.mags[i + 1]) / 2 for i in range(1, n)]
            out = self.sv([(m, ng) for m in subs + mids for ng in both], k)
            for m in mids:
                lo, hi = s.below(m * X), s.above(m * X)
                out += [b | sg for b in (lo, hi) if b for sg in (0, s.sign)]
            return out
        if cls == "E6":
            h = el.min_sub / 2
            out = self.sv([(v, ng) for v in (h, el.min_sub / 4, 3 * el.min_sub / 4,
                                              _p2(-30), _p2(-60)) for ng in both], k)
            lo, hi = s.below(h * X), s.above(h * X)
            out += [b | sg for b in (lo, hi) if b for sg in (0, s.sign)]
            out += [1, 1 | s.sign]            # the source's min subnormal
            return out
        if cls == "E7":
            h = el.min_sub / 2
            neg = self.sv([(v, True) for v in (h, h / 2, _p2(-30))], k)
            lo = s.below(h * X)
            if lo:
                neg.append(lo | s.sign)
            neg.append(1 | s.sign)
            out = []
            for i, v in enumerate(neg):
                out += [0, s.sign, v] if i % 2 == 0 else [s.sign, v, 0]
            return out
        if cls == "E8":
            return [b | sg for b in self.e8_values(k) for sg in (0, s.sign)]
        raise KeyError(cls)

    def _traps(self, k: int) -> list:
        """fp32 values within half a bf16 (fp16) ulp of an element midpoint, both sides:
        an fp32 -> bf16/fp16 -> element cast rounds them onto the tie first."""
        s = self.s
        out = []
        for i, m in enumerate(self.el.mids):
            v = m * _p2(k)
            e = _ilog2(v)
            eb = e - 1 if v == _p2(e) else e
            neg = bool(i & 1)
            for inter in (_SRCS["bfloat16"], _SRCS["float16"]):
                if inter.enc(v) is None:       # the intermediate cannot land on this tie
                    continue
                ups = _p2(inter.qexp(e) - 1) - _p2(s.qexp(e))
                dns = _p2(inter.qexp(eb) - 1) - _p2(s.qexp(eb))
                for t in (v + ups if ups > 0 else None, v - dns if dns > 0 else None):
                    if t is not None and t > 0:
                        b = s.enc(t, neg)
                        if b is not None:
                            out.append(b)
        return out

    def e8_values(self, k: int) -> list:
        """Block maxima in [max_normal, 2^(emax+1)) * 2^k around the overflow tie."""
        el, s = self.el, self.s
        X = _p2(k)
        M, vmid, top, vnext = el.M * X, el.vmid * X, el.top * X, el.vnext * X
        c = [s.enc(M), s.above(M), s.grid((M + vmid) / 2, "floor"), s.below(vmid), s.enc(vmid),
             s.above(vmid), s.grid((vmid + top) / 2, "floor"), s.below(top)]
        if vnext < top:
            c += [s.below(vnext), s.enc(vnext), s.above(vnext)]
        out = sorted({b for b in c if b is not None and M <= s.dec(b) < top})
        return out

    # ---- element classes --------------------------------------------------------------------
    def gen_pool_class(self, cls: str, tags=()) -> list:
        ks = self.ks()[:1] if self.level == 0 else self.ks()
        groups = [(k, self.pool(cls, k), ()) for k in ks]
        return self.pack_groups(cls, groups, self.cap(cls), tags)

    def gen_E7(self) -> list:
        s = self.s
        groups = []
        for i, k in enumerate(self.ks()):
            groups.append((k, self.pool("E7", k), ()))
            if i < 2:
                groups.append((k, [s.sign], ("all_neg_zero",)))
        return self.pack_groups("E7", groups, self.cap("E7"))

    def gen_E8(self) -> list:
        out, B, s, cap = [], self.B, self.s, self.cap("E8")
        for gi, k in enumerate(self.ks()):
            vals = self.e8_values(k)
            small = self.pool("E1", k)
            if cap is not None and out and len(out) + len(vals) > cap:
                continue
            for vi, v in enumerate(vals):
                sg = s.sign if (vi + gi) % 2 else 0
                fill = [small[(vi * 3 + i) % len(small)] for i in range(B - 1)]
                blk = self.with_amax(v | sg, 3 * vi + gi, fill)
                out.append(self.case("E8", ("S4", f"k={k}"), blk))
        return out

    def gen_E9(self) -> list:
        s, B = self.s, self.B
        specials = [(s.inf, "+inf"), (s.inf | s.sign, "-inf")] + list(zip(s.nans, _NAN_LABELS))
        mixed = [((s.inf, s.inf | s.sign), "+inf-inf"), ((s.nans[0], s.inf), "nan+inf"),
                 ((s.nans[2], s.nans[1], s.inf | s.sign), "snan-qnan-inf"),
                 (tuple(s.nans), "all_nans")]
        out, cap = [], self.cap("E9")
        for gi, k in enumerate(self.ks()[:2]):
            group = []
            jj0 = gi * 31
            items = [((sp,), lab) for sp, lab in specials] + mixed
            for i, (sps, lab) in enumerate(items):
                blk, apos = self.anchored(k, self.pool("E1", k), jj0 + i, i)
                free = [p for p in range(B) if p != apos]
                for j, sp in enumerate(sps):
                    blk[free[(i * 5 + 1 + j * 3) % len(free)]] = sp
                group.append(self.case("E9", (lab, f"k={k}"), blk))
            if cap is not None and out and len(out) + len(group) > cap:
                break
            out += group
        return out

    def gen_E10(self) -> list:
        s, el, B = self.s, self.el, self.B
        r = self.rng("E10")
        subs = [1, 2, 3, s.mmask >> 1, 1 << (s.mbits - 1), s.mmask, s.mmask - 1]
        subs += [1 << j for j in range(s.mbits)]
        subs += [int(x) for x in (r.raw(5) % np.uint64(s.mmask)) + np.uint64(1)]
        subs = sorted(set(subs))
        vals = [b | sg for b in subs for sg in (0, s.sign)]
        out = []
        # normal anchors: (a) at the source's min normal binade (or where floor reaches -127),
        # (b) 2^8 above it, (c) at 1.0 (every subnormal underflows)
        for tag, k in (("anchor_min_normal", max(-127, s.emin - el.emax)),
                       ("anchor_min_normal+8", max(-127, s.emin - el.emax) + 8),
                       ("anchor_one", -el.emax)):
            if self.anchor(k) is None:
                continue
            nb = -(-len(vals) // (B - 1))
            for b in range(nb):
                blk, _ = self.anchored(k, vals, len(out), b * (B - 1))
                out.append(self.case("E10", (tag, f"k={k}"), blk))
        # entirely subnormal blocks
        fills = [
            ("all_sub_max", [s.mmask] + self.fill(r, s.emin, B - 1, spread=s.mbits + 2)),
            ("all_sub_min", [1, 1 | s.sign] + [0, s.sign] * ((B - 2) // 2) + [1] * ((B - 2) % 2)),
            ("all_sub_single_bits", [(1 << (j % s.mbits)) | (s.sign if j % 3 == 1 else 0)
                                     for j in range(B)]),
            ("all_sub_mid", [s.p2(s.emin - 3) | s.sign] + self.fill(r, s.emin - 3, B - 1,
                                                                    spread=s.mbits - 2)),
        ]
        for tag, blk in fills:
            out.append(self.case("E10", (tag,), blk[:B]))
        cap = self.cap("E10")
        return out[:cap] if cap else out

    def gen_E11(self) -> list:
        """Every 16-bit pattern, grouped by exponent field, B-1 per block next to an anchor.
        Pass A: anchor 2^e in the group's binade (group lands on the element's top binade);
        pass B: anchor 2^(e+j) (group lands j binades lower, j cycling through the element's
        range down to underflow). Subnormals/zeros: anchor at the min normal (pass A) and 2^j
        above (pass B); Inf/NaN patterns next to an anchor 1.0."""
        s, el, B = self.s, self.el, self.B
        if s.name == "float32":
            return []
        span = el.emax - (-6 if el.is_int else el.fmt.emin - el.mbits) + 2
        emask = (1 << s.ebits) - 1
        out = []
        for f in range(emask + 1):
            pats = [(f << s.mbits) | m for m in range(s.mmask + 1)]
            pats = pats + [p | s.sign for p in pats]
            if f == emask:
                anchors = [("specials", s.p2(0))]
            else:
                e = max(f - s.bias, s.emin)
                j = 1 + f % span
                anchors = [("binade_top", s.p2(e)), (f"binade+{j}", s.p2(min(e + j, s.emax)))]
            for tag, a in anchors:
                for b0 in range(0, len(pats), B - 1):
                    chunk = [pats[(b0 + i) % len(pats)] for i in range(B - 1)]
                    pos = (b0 // (B - 1)) % B
                    out.append(self.case("E11", (tag, f"field={f}"),
                                         chunk[:pos] + [a] + chunk[pos:]))
        return out

    # ---- level 2: cross products of element classes inside one block ------------------------
    def gen_cross(self) -> list:
        classes = ["E1", "E2", "E3"] + (["E4"] if self.s.name == "float32" else []) + \
            ([] if self.el.is_int else ["E5"]) + ["E6", "E7", "E8"]
        out, B = [], self.B
        for k in self.ks()[:2]:
            pools = {c: self.pool(c, k) for c in classes}
            for ia, a in enumerate(classes):
                for b in classes[ia + 1:]:
                    pa, pb = pools[a], pools[b]
                    if not pa or not pb:
                        continue
                    r = self.rng("cross", a, b, k)
                    ia_, ib_ = r.ints(0, len(pa), B - 1), r.ints(0, len(pb), B - 1)
                    vals = [pa[ia_[i]] if i % 2 == 0 else pb[ib_[i]] for i in range(B - 1)]
                    blk, _ = self.anchored(k, vals, len(out))
                    out.append(self.case(a, ("cross", b, f"k={k}"), blk))
            r = self.rng("cross", "all", k)
            allv = [v for c in classes for v in pools[c]]
            vals = [allv[j] for j in r.ints(0, len(allv), B - 1)]
            blk, _ = self.anchored(k, vals, len(out))
            out.append(self.case("E1", ("cross", *classes[1:], f"k={k}"), blk))
        return out



@lru_cache(maxsize=4096)
def _pool(element: str, src: str, cls: str, k: int) -> tuple:
    return tuple(_ElementClasses(element, src, 1, 32)._pool(cls, k))
