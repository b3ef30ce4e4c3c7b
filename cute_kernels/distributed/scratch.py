"""Buffers the distributed op keeps between calls: one per (device, caller's stream, dtype, name), grown on demand.

Fresh buffers on every call would be handed to a collective or a peer pull on another stream each time, so the
caching allocator could not recycle them until that stream's events had passed (measured: ~200 µs per call).
Reuse is safe on one stream: before returning, each transport makes the calling stream wait for everything that
read or wrote its buffers, so the next call's kernels on that stream run after them.
"""

from __future__ import annotations

import torch

from ..streams import StreamScratch

_scratch = StreamScratch()


def buffer(device: torch.device, dtype: torch.dtype, name: str, numel: int) -> torch.Tensor:
    # A collective or a peer's pull on another stream may still read a buffer being replaced: wait for them.
    return _scratch.get(device, name, numel, dtype, sync_on_grow=True)[:numel]


def current(device: torch.device, dtype: torch.dtype, name: str) -> torch.Tensor | None:
    """The kept buffer of that name on the current stream, or None (nothing is allocated)."""
    return _scratch.current(device, name, dtype)


def release() -> None:
    """Free every kept buffer (they are re-created on the next call)."""
    _scratch.clear()
