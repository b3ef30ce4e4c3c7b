"""The warm-path memo every op keeps: call signature -> everything the fast path needs (compiled fn, shapes...).

A server sees one signature per distinct token count, so the memo is bounded: past ``capacity`` entries it is
cleared, and a miss only costs re-running the Python checks once (the compiled kernels stay in jit_cache).
``cached_for_tensor`` is the other per-call memo: a layout derived from a weight tensor, kept while the tensor lives.
"""

from __future__ import annotations

import weakref

from .streams import build_outside_graph_pools


class PlanCache(dict):
    def __init__(self, capacity: int = 4096):
        super().__init__()
        self.capacity = capacity

    def __setitem__(self, key, value):
        if len(self) >= self.capacity and key not in self:
            self.clear()
        super().__setitem__(key, value)


def cached_for_tensor(store: dict, key, source, build):
    """``store[key]``, made by ``build()`` on a miss and dropped from ``store`` when ``source`` (the tensor it was
    derived from) is garbage collected: the derived weight layouts (AWQ repack, WGMMA blob) live as long as their
    source. ``key`` should hold the source's storage and version, so an in-place update misses. Built outside any
    CUDA-graph memory pool (``streams.build_outside_graph_pools``)."""
    hit = store.get(key)
    if hit is None:
        hit = store[key] = build_outside_graph_pools(build, source.device)
        weakref.finalize(source, store.pop, key, None)
    return hit
