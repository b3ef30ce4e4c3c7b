"""Reduce-scatter by peer-to-peer pulls over symmetric memory: no NCCL kernel competes with the GEMM for SMs.

Why. The NCCL pipeline (matmul_reduce_scatter._run_pipeline) overlaps nothing in practice: the persistent int8 GEMM
holds every SM, so a reduce-scatter kernel issued beside it waits for the GEMM to drain, and reserving SMs for NCCL
slows the GEMM by as much as the overlap saves (measured on 2 x H200, docs/distributed.md). Here the bytes move by
copy-engine memcpy from a peer's buffer mapped into this GPU's address space (torch's symmetric memory), which needs
no SMs, and the sum is one elementwise pass.

Per rank r of W (rows = M / W, all on the caller's stream unless noted):
    GEMM   blocks w != r -> P_r[w]     P_r: this rank's symmetric buffer [W, rows, N] in the reduce dtype
    barrier                            every rank's P[.][r] is written
    side stream:  R[i] <- P_w[r]       pull block r from each peer w (copy engine), while
    GEMM   block r -> own              this rank's own block is computed
    join; out = own + sum_i R[i]       cast to out dtype

The side stream waits for the barrier and the caller's stream waits for the pulls before the sum, so the only
cross-GPU synchronization is one symmetric-memory barrier per call. P_r alternates between two halves of the
symmetric buffer on successive calls: call i + 2 rewrites the half that peers pulled in call i, and it runs after
this rank's barrier of call i + 1, which no rank passes before it has joined its pulls of call i. (Every rank calls
the op the same number of times, so the halves agree.) Needs CUDA tensors, an NCCL group and torch's
symmetric memory (``torch.distributed._symmetric_memory``, a private torch API: ``available()`` says whether it
imports).
"""

from __future__ import annotations

import torch

_side_streams: dict = {}
_buffers: dict = {}
_symmetric: dict = {}  # (group name, device) -> [symmetric byte tensor, its rendezvous handle, calls so far]


def available() -> bool:
    import importlib.util

    try:
        found = importlib.util.find_spec("torch.distributed._symmetric_memory") is not None
    except ImportError:
        found = False
    return found and torch.cuda.is_available()


def _side_stream(device) -> torch.cuda.Stream:
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


def _local(device, dtype, name: str, numel: int) -> torch.Tensor:
    key = (str(device), torch.cuda.current_stream(device).cuda_stream, dtype, name)
    buf = _buffers.get(key)
    if buf is None or buf.numel() < numel:
        if buf is not None:
            torch.cuda.current_stream(device).synchronize()
        buf = _buffers[key] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel]


def _symmetric_handle(group, device, nbytes: int):
    """This group's symmetric buffer (two halves of at least ``nbytes``), its handle and the half this call uses.
    Growing it is a rendezvous (collective): every rank grows at the same call, because the size derives from values
    the ranks share (M, N, W, dtype)."""
    from torch.distributed import _symmetric_memory as symm_mem

    key = (group.group_name, str(device))
    entry = _symmetric.get(key)
    if entry is None or entry[0].numel() < 2 * nbytes:
        if entry is not None:
            torch.cuda.synchronize(device)  # peers may still read the old buffer; the new rendezvous syncs ranks
        tensor = symm_mem.empty(2 * nbytes, dtype=torch.uint8, device=device)
        entry = _symmetric[key] = [tensor, symm_mem.rendezvous(tensor, group), 0]
    half = entry[2] % 2
    entry[2] += 1
    return entry[1], half * (entry[0].numel() // 2)


def release() -> None:
    """Drop the cached local buffers and symmetric buffers (call on every rank: they are re-created collectively)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    _buffers.clear()
    _symmetric.clear()


def run(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world: int, rank: int) -> None:
    rows, n = x1.shape[0] // world, x2.shape[1]
    device = x1.device
    a_blocks = x1.unflatten(0, (world, rows))
    s_blocks = scale_x1.unflatten(0, (world, rows))
    elem = torch.empty((), dtype=reduce_dtype).element_size()
    handle, offset_bytes = _symmetric_handle(group, device, world * rows * n * elem)
    offset = offset_bytes // elem  # get_buffer's offset counts elements of the view's dtype
    mine = handle.get_buffer(rank, (world, rows, n), reduce_dtype, offset)
    peers = [(rank + s) % world for s in range(1, world)]

    for w in peers:
        gemm(a_blocks[w:w + 1], x2, s_blocks[w:w + 1], scale_x2, bias, mine[w:w + 1])
    handle.barrier(channel=0)

    caller = torch.cuda.current_stream(device)
    side = _side_stream(device)
    side.wait_stream(caller)
    recv = _local(device, reduce_dtype, "recv", (world - 1) * rows * n).view(world - 1, rows, n)
    with torch.cuda.stream(side):
        for i, w in enumerate(peers):
            recv[i].copy_(handle.get_buffer(w, (world, rows, n), reduce_dtype, offset)[rank])
    own = _local(device, reduce_dtype, "own", rows * n).view(1, rows, n)
    gemm(a_blocks[rank:rank + 1], x2, s_blocks[rank:rank + 1], scale_x2, bias, own)
    caller.wait_stream(side)
    # One pass: the sum runs in the reduce dtype and is cast once on the store into `out`.
    torch.add(own[0], recv[0] if world == 2 else recv.sum(0), out=out)
