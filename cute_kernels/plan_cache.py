"""The warm-path memo every op keeps: call signature -> everything the fast path needs (compiled fn, shapes...).

A server sees one signature per distinct token count, so the memo is bounded: past ``capacity`` entries it is
cleared, and a miss only costs re-running the Python checks once (the compiled kernels stay in jit_cache).
"""

from __future__ import annotations


class PlanCache(dict):
    def __init__(self, capacity: int = 4096):
        super().__init__()
        self.capacity = capacity

    def __setitem__(self, key, value):
        if len(self) >= self.capacity and key not in self:
            self.clear()
        super().__setitem__(key, value)
