"""GPU slots for parallel run processes: each run holds one slot from its start to its exit,
so two concurrent runs share a GPU only when there are more jobs than GPUs (a pool that
assigned GPU ``i % n`` by position would put a late run next to a slow one)."""
from __future__ import annotations

import queue
from contextlib import contextmanager
from typing import Mapping


class GpuSlots:
    def __init__(self, jobs: int, ngpu: int):
        self._q: queue.Queue = queue.Queue()
        for k in range(jobs):
            self._q.put(k % ngpu if ngpu else None)

    @contextmanager
    def take(self):
        """A GPU index (None: no GPU) for the duration of the block."""
        gpu = self._q.get()
        try:
            yield gpu
        finally:
            self._q.put(gpu)


def child_visible_devices(gpu: int, environ: Mapping[str, str]) -> str:
    """CUDA_VISIBLE_DEVICES for a child process that is to run on the parent's GPU ``gpu``
    (an index into the devices the parent sees, as torch numbers them). Under a parent's own
    CUDA_VISIBLE_DEVICES (say "2,3") index 0 is physical GPU 2, so the child gets that entry
    (an index or a UUID) and not "0", which would put it on another GPU than the slot's."""
    vis = environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and vis.strip():
        ids = [e.strip() for e in vis.split(",")]
        if 0 <= gpu < len(ids) and ids[gpu]:
            return ids[gpu]
        raise ValueError(f"GPU slot {gpu} is not among CUDA_VISIBLE_DEVICES={vis!r}")
    return str(gpu)
