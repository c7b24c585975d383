"""GPU slots for parallel run processes: each run holds one slot from its start to its exit,
so two concurrent runs share a GPU only when there are more jobs than GPUs (a pool that
assigned GPU ``i % n`` by position would put a late run next to a slow one)."""
from __future__ import annotations

import queue
from contextlib import contextmanager


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
