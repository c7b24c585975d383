"""``mxref scan --plot``: one row per tensor, its scale-byte histogram and the block-max
codes the fingerprint used (matplotlib: the ``plot`` extra)."""
from __future__ import annotations

import io

from ..errors import MXRefError

MAX_ROWS = 12


class PlotUnavailableError(MXRefError):
    """--plot asked for without matplotlib installed (exit 2, before any work)."""


def check_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailableError("--plot needs matplotlib: pip install 'mxref[plot]'") from None


def render(doc) -> bytes:
    """PNG bytes of the first MAX_ROWS tensors (the title says how many were left out)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = doc["tensors"][:MAX_ROWS]
    fig, axes = plt.subplots(max(len(ts), 1), 2, figsize=(11, 2.2 * max(len(ts), 1)),
                             squeeze=False)
    for (a0, a1), t in zip(axes, ts):
        h = t["scale_histogram"]
        a0.bar([int(k, 16) for k in h], list(h.values()), width=1.0, color="tab:blue")
        a0.set_title(f"{t['name']} ({t['format']}): scale bytes", fontsize=8)
        fp = t["fingerprint"]
        c = fp["block_max_counts"]
        a1.bar([int(k, 16) for k in c], list(c.values()), width=0.8, color="tab:orange")
        a1.set_title(f"block max codes ({fp['blocks']} blocks): {fp['verdict']} "
                     f"{','.join(fp['call'][:3])}", fontsize=8)
        for ax in (a0, a1):
            ax.tick_params(labelsize=7)
    if not ts:
        axes[0][0].set_title("no quantized tensors")
    left = len(doc["tensors"]) - len(ts)
    fig.suptitle(f"mxref scan{f' (first {MAX_ROWS}; {left} more in --json)' if left else ''}",
                 fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()
