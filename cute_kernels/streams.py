"""The caller's current stream as a cache key, cheaply, and the per-stream scratch buffers keyed on it.

Host hot paths keep scratch (split-K partial sums and semaphores, the distributed op's staging buffers) between
calls instead of allocating per call. One set per (device, caller's current stream): calls on one stream never run
concurrently, so they can share it; calls on different streams may, so they must not.
"""

from __future__ import annotations

import torch

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA builds: ~20x cheaper than current_stream()


def current_stream_id(device: torch.device) -> int:
    """Raw handle of ``device``'s current CUDA stream; 0 for CPU tensors (one implicit stream)."""
    if device.type != "cuda":
        return 0
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


class StreamScratch:
    """Named buffers per (device, current stream), grown on demand and otherwise reused as they are.

    ``get(..., zeroed=True)`` creates (and re-creates, when growing) the buffer zero-filled: for counters the kernels
    reset after use. ``grow`` over-allocates a replacement (a run of growing problems then reallocates rarely).
    ``sync_on_grow``: wait for the stream before dropping a buffer that work on *other* streams (a collective, a
    peer's copy) may still read; buffers used only by kernels on the calling stream need no wait, the caching
    allocator orders their reuse on that stream.
    """

    def __init__(self):
        self._buffers: dict[tuple, torch.Tensor] = {}

    def get(self, device: torch.device, name: str, numel: int, dtype: torch.dtype = torch.int32, *,
            zeroed: bool = False, grow: float = 1.0, min_numel: int = 0, sync_on_grow: bool = False) -> torch.Tensor:
        """The whole buffer (at least ``numel`` elements): callers slice or pass its size to the kernel."""
        key = (device, current_stream_id(device), name, dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            size = max(numel, min_numel, int(grow * buf.numel()) if buf is not None else 0)
            if buf is not None and sync_on_grow and device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()
            buf = self._buffers[key] = (torch.zeros if zeroed else torch.empty)(size, dtype=dtype, device=device)
        return buf

    def buffers(self) -> list[torch.Tensor]:
        return list(self._buffers.values())

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def clear(self) -> None:
        """Free every buffer (after the device is idle: work on any stream may still use them)."""
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self._buffers.clear()
