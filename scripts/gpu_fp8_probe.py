"""What torch._scaled_mm's 1x128 block-wise FP8 path computes on this GPU, and how fast.

Run on a lent GPU (writes OUT/fp8_probe.json and prints a summary):
    python3 scripts/gpu_fp8_probe.py OUT

1. layout: which scale layout torch accepts for A [M, K] (row-major) x B [K, N] (column-major)
   with one fp32 scale per 1x128 group along K of each operand, checked against a float64
   emulation of sum_g (A_g B_g) sa_g sb_g on exact operands.
2. accumulation: the FP8 MMA's accumulator inside one 128-group is not plain fp32 (DeepSeek-V3
   reports ~14 bits retained on Hopper). Probes: a group holding 1 and then 127 products of
   2^-j (the exact sum is 1 + 127 * 2^-j): the largest j still added; the same with the
   large product last (order); one group with products spread over 2^-k..1; and the error
   of random MXFP4-like operands against the exact product in fp32 ulps and against the
   fp32-accumulation bound (C + 2) u |A||B|^T.
3. speed: do_bench medians of bf16 torch.mm and the block-wise FP8 GEMM (bf16 output) on the
   llama-125m training shapes (T = 16384) and 8192^3, same process.
"""
from __future__ import annotations

import json
import sys

import torch

E4M3 = torch.float8_e4m3fn


def emulate(a8, sa, b8, sb):
    """float64 sum over 128-groups of (A_g B_g^T) * sa_g * sb_g; a8 [M, K], b8 [N, K]."""
    a = a8.double()
    b = b8.double()
    M, K = a.shape
    out = torch.zeros(M, b.shape[0], dtype=torch.float64, device=a.device)
    for g in range(K // 128):
        s = slice(128 * g, 128 * (g + 1))
        out += (a[:, s] @ b[:, s].T) * sa[:, g:g + 1].double() * sb[:, g].double()[None, :]
    return out


def scales_for(layout, sa, sb):
    """The scale tensors torch is given for one candidate layout."""
    if layout == "outer":        # "outer-dim-major": (M, K/128) with stride (1, M)
        return sa.t().contiguous().t(), sb.t().contiguous()   # B: (K/128, N) contiguous
    if layout == "outer_b_t":
        return sa.t().contiguous().t(), sb.t().contiguous().t()   # B: (N, K/128), stride (1, N)
    return sa.contiguous(), sb.contiguous()


def scaled_mm(a8, sa, b8, sb, out_dtype=torch.float32, layout="outer"):
    """a8 [M, K] row-major, b8 [N, K] row-major (mat_b = b8.t() is column-major), sa [M, K/128],
    sb [N, K/128]: one scale per 1x128 group along K."""
    sa_, sb_ = scales_for(layout, sa, sb)
    return torch._scaled_mm(a8, b8.t(), scale_a=sa_, scale_b=sb_, out_dtype=out_dtype)


def mxfp4_like(M, K, spread, gen, device):
    """E4M3 codes of q * 2^(s_b - G) with q an E2M1 value and block exponents within `spread`
    of the group max (what mxref.mxfp4_to_fp8 writes for a live MXFP4 tensor)."""
    grid = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6], dtype=torch.float32)
    q = grid[torch.randint(0, 8, (M, K), generator=gen)]
    q = q * (torch.randint(0, 2, (M, K), generator=gen) * 2 - 1)
    d = -torch.randint(0, spread + 1, (M, K // 32), generator=gen).float()
    d[:, ::4] = 0                     # each group has a block at the top
    v = q * torch.exp2(d.repeat_interleave(32, dim=1) + 6)   # top block: |q| 2^6 <= 384
    v8 = v.to(E4M3)
    assert torch.equal(v8.float(), v), "not exact in E4M3"
    sc = torch.exp2(torch.randint(-20, 5, (M, K // 128), generator=gen).float())
    return v8.to(device), sc.to(device)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    dev = "cuda"
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda}
    gen = torch.Generator().manual_seed(0)
    # 1. layout
    M, N, K = 256, 384, 1024
    a8, sa = mxfp4_like(M, K, 4, gen, dev)
    b8, sb = mxfp4_like(N, K, 4, gen, dev)
    ref = emulate(a8, sa, b8, sb)
    # error relative to sum |a_k b_k| (a cancelling output makes any relative error large)
    absref = emulate(a8.float().abs().to(E4M3), sa, b8.float().abs().to(E4M3), sb)
    res["layout"] = {}
    for lay in ("outer", "outer_b_t", "plain"):
        try:
            y = scaled_mm(a8, sa, b8, sb, layout=lay).double()
            err = ((y - ref).abs() / absref.clamp_min(1e-300)).max().item()
            res["layout"][lay] = {"ok": True, "max_rel_err": err}
        except Exception as e:   # noqa: BLE001 (a probe: record what torch said)
            res["layout"][lay] = {"ok": False, "error": str(e)[:300]}
    good = [k for k, v in res["layout"].items() if v.get("ok") and v["max_rel_err"] < 1e-3]
    res["layout_used"] = good[0] if good else None
    print("layout", json.dumps(res["layout"], indent=1))
    if not good:
        json.dump(res, open(f"{out_dir}/fp8_probe.json", "w"), indent=1)
        return
    lay = good[0]
    one = torch.ones(16, 1, device=dev)

    def run1(avals, bvals):
        """One dot product of length len(avals) (a multiple of 128) as a 16 x 16 GEMM, scales 1."""
        k = avals.numel()
        assert torch.equal(avals.to(E4M3).float(), avals) and \
            torch.equal(bvals.to(E4M3).float(), bvals), "probe operand not exact in E4M3"
        a = avals.reshape(1, k).repeat(16, 1).to(dev).to(E4M3)
        b = bvals.reshape(1, k).repeat(16, 1).to(dev).to(E4M3)
        s = torch.ones(16, k // 128, device=dev)
        return scaled_mm(a, s, b, s, layout=lay)[0, 0].item()
    del one
    # 2. accumulation inside one group: a big product 2^16 (256 x 256) and small ones 2^(16-j)
    def pw(e):
        return 2.0 ** e

    def pair(j):                 # two E4M3 numbers whose product is 2^(16 - j), j <= 34
        return pw(8 - j // 2), pw(8 - (j - j // 2))
    acc = {}
    for first in (True, False):
        kept = []
        for j in range(0, 31):
            sa_, sb_ = pair(j)
            av = torch.full((128,), sa_, dtype=torch.float32)
            bv = torch.full((128,), sb_, dtype=torch.float32)
            big = 0 if first else 127
            av[big] = 256.0
            bv[big] = 256.0
            exact = 1.0 + 127 * 2.0 ** -j
            got = run1(av, bv) / 2.0 ** 16
            kept.append({"j": j, "exact": exact, "got": got})
        acc["big_first" if first else "big_last"] = kept
    # the largest j whose small products still reach the sum (got > 1)
    for k_, rows in list(acc.items()):
        added = [r["j"] for r in rows if r["got"] > 1.0]
        acc[k_ + "_max_j_added"] = max(added) if added else None
        acc[k_ + "_max_j_exact"] = max((r["j"] for r in rows if r["got"] == r["exact"]),
                                       default=None)
    # one small product beside the big one: is the lost part truncated or rounded?
    rnd = []
    for j in range(8, 26):
        for frac in (0.5, 0.75, 1.0, 1.5):
            av = torch.zeros(128)
            bv = torch.zeros(128)
            av[0], bv[0] = 256.0, 256.0
            x, y = pair(j)
            av[1], bv[1] = frac * x, y
            rnd.append({"j": j, "frac": frac, "small_rel": frac * 2.0 ** -j,
                        "got_rel_minus_1": run1(av, bv) / 2.0 ** 16 - 1.0})
    acc["single_small"] = rnd
    # negative small products (truncation toward zero or toward -inf?)
    neg = []
    for j in range(8, 26):
        av = torch.zeros(128)
        bv = torch.zeros(128)
        av[0], bv[0] = 256.0, 256.0
        x, y = pair(j)
        av[1], bv[1] = -1.5 * x, y
        neg.append({"j": j, "small_rel": -1.5 * 2.0 ** -j,
                    "got_rel_minus_1": run1(av, bv) / 2.0 ** 16 - 1.0})
    acc["single_small_negative"] = neg
    # across groups: the second group's sum tiny against the first (promoted to fp32?)
    across = []
    for j in range(10, 31, 2):
        av = torch.zeros(256)
        bv = torch.zeros(256)
        av[0], bv[0] = 256.0, 256.0
        av[128], bv[128] = pair(j)
        across.append({"j": j, "got_rel_minus_1": run1(av, bv) / 2.0 ** 16 - 1.0,
                       "exact": 2.0 ** -j})
    acc["across_groups"] = across
    res["accumulation"] = acc
    print("accumulation: max j added (big first / last):", acc["big_first_max_j_added"],
          acc["big_last_max_j_added"], "exact up to", acc["big_first_max_j_exact"],
          acc["big_last_max_j_exact"])
    # random MXFP4-like operands vs the exact product and the fp32 bound
    rnd_err = []
    for spread in (0, 2, 8, 14):
        for K in (1024, 2816, 16384):
            M, N = 128, 128
            a8, sa = mxfp4_like(M, K, spread, gen, dev)
            b8, sb = mxfp4_like(N, K, spread, gen, dev)
            y = scaled_mm(a8, sa, b8, sb, layout=lay).double()
            ex = emulate(a8, sa, b8, sb)
            absp = emulate(a8.float().abs().to(E4M3), sa, b8.float().abs().to(E4M3), sb)
            bound = (K + 2) * 2.0 ** -24 * absp + 2.0 ** -24 * ex.abs()
            ulp = torch.where(ex == 0, torch.full_like(ex, 2.0 ** -149),
                              torch.exp2(torch.floor(torch.log2(ex.abs().clamp_min(1e-300))) - 23))
            err = (y - ex).abs()
            rnd_err.append({"spread": spread, "K": K,
                            "max_err_ulp": (err / ulp).max().item(),
                            "max_err_over_fp32_bound": (err / bound.clamp_min(1e-300)).max().item(),
                            "frac_outside_fp32_bound": (err > bound).double().mean().item(),
                            "max_rel_err_vs_abs_sum": (err / absp.clamp_min(1e-300)).max().item()})
    res["random"] = rnd_err
    for r in rnd_err:
        print("random", r)
    # 3. speed
    from triton.testing import do_bench
    T = 16384
    shapes = {"fprop qkvo": (T, 1024, 1024), "fprop up": (T, 1024, 2816),
              "fprop down": (T, 2816, 1024), "wgrad qkvo": (1024, T, 1024),
              "wgrad up": (2816, T, 1024), "8192^3": (8192, 8192, 8192)}
    speed = {}
    for name, (M, K, N) in shapes.items():
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        a8, b8 = a.to(E4M3), b.to(E4M3)
        sa = torch.ones(M, K // 128, device=dev)
        sb = torch.ones(N, K // 128, device=dev)
        t_bf = do_bench(lambda: torch.mm(a, b.t()), warmup=50, rep=300)
        t_f8 = do_bench(lambda: scaled_mm(a8, sa, b8, sb, torch.bfloat16, lay), warmup=50,
                        rep=300)
        sa_, sb_ = scales_for(lay, sa, sb)
        bt = b8.t()
        t_raw = do_bench(lambda: torch._scaled_mm(a8, bt, scale_a=sa_, scale_b=sb_,
                                                  out_dtype=torch.bfloat16), warmup=50, rep=300)
        fl = 2 * M * N * K
        speed[name] = {"M": M, "K": K, "N": N, "bf16_ms": t_bf, "fp8_blockwise_ms": t_raw,
                       "fp8_with_scale_relayout_ms": t_f8, "bf16_over_fp8": t_bf / t_raw,
                       "bf16_tflops": fl / t_bf / 1e9, "fp8_tflops": fl / t_raw / 1e9}
        print(name, json.dumps(speed[name]))
    res["speed"] = speed
    json.dump(res, open(f"{out_dir}/fp8_probe.json", "w"), indent=1)


if __name__ == "__main__":
    main()
