"""The caller's current stream as a cache key, cheaply; the per-stream scratch buffers keyed on it; and the few raw
stream-ordered driver operations (events, async copies) that host hot paths issue without torch's Python overhead.

Host hot paths keep scratch (split-K partial sums and semaphores, the distributed op's staging buffers) between
calls instead of allocating per call. One set per (device, caller's current stream): calls on one stream never run
concurrently, so they can share it; calls on different streams may, so they must not.
"""

from __future__ import annotations

import threading

import torch

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA builds: ~20x cheaper than current_stream()


def current_stream_id(device: torch.device) -> int:
    """Raw handle of ``device``'s current CUDA stream; 0 for CPU tensors (one implicit stream)."""
    if device.type != "cuda":
        return 0
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def build_outside_graph_pools(build, device: torch.device):
    """``build()``, for tensors that outlive the call (per-stream scratch, layouts derived from a weight), made so
    that their memory comes from torch's regular pool.

    torch.compile's CUDA graphs (``mode="reduce-overhead"``) route every allocation of the calling *thread* into the
    graph's private pool while they warm up a graph, and then refuse to run when a tensor in that pool outlives the
    graph without being one of its outputs. A helper thread is not routed. It issues its work to the caller's
    current stream, so that work stays ordered after what the caller issued before and before what it issues next,
    and the join only waits for the host side. While the stream is being captured the build runs inline as before
    (a capture that did not warm up first owns what it allocates)."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return build()
    stream = torch.cuda.current_stream(device)
    result: list = []

    def run():
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream):
                result.append((True, build()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result.append((False, exc))

    helper = threading.Thread(target=run, name="cute_kernels-alloc")
    helper.start()
    helper.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value


class StreamScratch:
    """Named buffers per (device, current stream), grown on demand and otherwise reused as they are.

    ``get(..., zeroed=True)`` creates (and re-creates, when growing) the buffer zero-filled: for counters the kernels
    reset after use. ``grow`` over-allocates a replacement (a run of growing problems then reallocates rarely).
    ``sync_on_grow``: wait for the stream before dropping a buffer that work on *other* streams (a collective, a
    peer's copy) may still read; buffers used only by kernels on the calling stream need no wait, the caching
    allocator orders their reuse on that stream. While the stream is being captured into a CUDA graph it cannot be
    waited for (and a graph captured earlier may still replay with the old buffer), so the replaced buffer is kept
    alive instead, until ``clear``.
    """

    def __init__(self):
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._retired: list[torch.Tensor] = []
        # Bumped whenever a buffer is created, replaced or dropped: callers may memoize what ``get`` returned for as
        # long as it is unchanged (split_k.split_workspace does, to skip the lookups on its hot path).
        self.generation = 0

    def get(self, device: torch.device, name: str, numel: int, dtype: torch.dtype = torch.int32, *,
            zeroed: bool = False, grow: float = 1.0, min_numel: int = 0, sync_on_grow: bool = False) -> torch.Tensor:
        """The whole buffer (at least ``numel`` elements): callers slice or pass its size to the kernel."""
        key = (device, current_stream_id(device), name, dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            size = max(numel, min_numel, int(grow * buf.numel()) if buf is not None else 0)
            if buf is not None and sync_on_grow and device.type == "cuda":
                if torch.cuda.is_current_stream_capturing():
                    self._retired.append(buf)
                else:
                    torch.cuda.current_stream(device).synchronize()
            make = torch.zeros if zeroed else torch.empty
            buf = self._buffers[key] = build_outside_graph_pools(lambda: make(size, dtype=dtype, device=device),
                                                                 device)
            self.generation += 1
        return buf

    def put(self, device: torch.device, name: str, buf: torch.Tensor | None) -> torch.Tensor | None:
        """Install ``buf`` as (device, current stream, name, buf.dtype)'s buffer, or drop that buffer (``buf`` None:
        then int32). Returns the buffer it replaces. For tests that plant guarded buffers."""
        dtype = torch.int32 if buf is None else buf.dtype
        key = (device, current_stream_id(device), name, dtype)
        old = self._buffers.pop(key, None)
        if buf is not None:
            self._buffers[key] = buf
        self.generation += 1
        return old

    def current(self, device: torch.device, name: str, dtype: torch.dtype = torch.int32) -> torch.Tensor | None:
        """The buffer ``get`` would return now for (device, current stream, name, dtype), without making one."""
        return self._buffers.get((device, current_stream_id(device), name, dtype))

    def buffers(self) -> list[torch.Tensor]:
        return list(self._buffers.values())

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def clear(self) -> None:
        """Free every buffer (after the device is idle: work on any stream may still use them)."""
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self._buffers.clear()
        self._retired.clear()
        self.generation += 1


# Raw stream-ordered operations through the CUDA driver (cuda-python, a dependency of the DSL). The distributed op's
# hot path issues a handful of these per call; torch's Python equivalents (``with torch.cuda.stream(s)``,
# ``wait_stream``, ``record_event``, ``copy_``) cost 3-15 µs each on the host (measured on an H200 host,
# docs/distributed.md, session 9), the driver calls about 1 µs. They are captured into CUDA graphs like their torch
# counterparts (an event recorded on a capturing stream and waited on by another stream forks the capture onto it).


_driver_module = None


def _driver():
    global _driver_module
    if _driver_module is None:  # imported on first use: the CPU-only paths never need it
        from cuda.bindings import driver

        _driver_module = driver
    return _driver_module


def _checked(result, what: str):
    err = result[0]
    if err != 0:  # CUresult.CUDA_SUCCESS
        raise RuntimeError(f"{what} failed: {err!r}")
    return result[1] if len(result) > 1 else None


class RawEvent:
    """A CUDA event without timing, created in ``device``'s primary context (make that device current first: the
    driver creates events in the calling thread's current context, which torch sets with ``torch.cuda.device``)."""

    def __init__(self, device: torch.device):
        with torch.cuda.device(device):
            drv = _driver()
            self.handle = _checked(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")

    def record(self, stream: int) -> None:
        """Capture the work issued so far to ``stream`` (a raw handle, e.g. ``current_stream_id``)."""
        _checked(_driver().cuEventRecord(self.handle, stream), "cuEventRecord")

    def wait(self, stream: int) -> None:
        """Make work issued to ``stream`` from now on wait for what the last ``record`` captured."""
        _checked(_driver().cuStreamWaitEvent(stream, self.handle, 0), "cuStreamWaitEvent")

    def __del__(self):
        try:
            _driver().cuEventDestroy(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver module may be gone already
            pass


def memcpy_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` between device addresses (this GPU's or a peer's mapped into its address space) on ``stream``:
    a copy-engine transfer, no SMs."""
    _checked(_driver().cuMemcpyAsync(dst, src, nbytes, stream), "cuMemcpyAsync")
