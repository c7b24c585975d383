"""Tile sweep of the NVFP4 training launch with SR (nvfp4-te's dy: SR on both orientations,
RHT16 on the columns), one-word and four-word streams, on one GPU: do_bench medians per
(BR, BC, num_warps), each tile's output checked bit for bit against the launcher's default
tile first. Timing only; writes OUT.json.

    PYTHONPATH=. python scripts/gpu_nvfp4_sr_tiles.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
import triton.testing

from mxkernels.ops import kernels

TILES = ((16, 64, 1), (16, 128, 1), (16, 64, 2), (16, 128, 2), (16, 128, 4), (16, 256, 4),
         (32, 64, 1), (32, 128, 4))


def main():
    tn = kernels(torch.device("cuda")).modules["triton_train_nvfp4"]
    rows = []
    for R, C in ((16384, 768), (16384, 3072)):
        x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
        for words in (1, 4):
            def f():
                return tn.qdq(x, "te_nvfp4", rows=True, cols=True, rot_n=16, row_rot=False,
                              col_signs=("mask", 0xA5F0), row_sr=1, col_sr=2, sr_words=words)
            ref = f()
            for tile in (None,) + TILES:
                tn.TILE[0] = tile
                try:
                    got = f()
                    same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                               for a, b in zip(got[:2], ref[:2])) and torch.equal(got[3], ref[3])
                    ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
                    rows.append({"shape": [R, C], "words": words, "tile": tile,
                                 "median_us": ms * 1e3, "same_bits": same})
                except Exception as e:  # noqa: BLE001  (a tile the launcher refuses)
                    rows.append({"shape": [R, C], "words": words, "tile": tile,
                                 "error": f"{type(e).__name__}: {e}"[:200]})
                finally:
                    tn.TILE[0] = None
                print(rows[-1], flush=True)
    with open(sys.argv[1], "w") as fh:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    return 0 if all(r.get("same_bits", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
