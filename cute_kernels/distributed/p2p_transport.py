"""Reduce-scatter by peer-to-peer pulls over symmetric memory: no NCCL kernel competes with the GEMM for SMs.

Why. The NCCL pipeline (matmul_reduce_scatter._run_pipeline) overlaps nothing in practice: the persistent int8 GEMM
holds every SM, so a reduce-scatter kernel issued beside it waits for the GEMM to drain, and reserving SMs for NCCL
slows the GEMM by as much as the overlap saves (measured on 2 x H200, docs/distributed.md). Here the bytes move by
copy-engine memcpy from a peer's buffer mapped into this GPU's address space (torch's symmetric memory), which needs
no SMs.

Per rank r of W (rows = M / W; the rows are cut into H parts - H = 2 for an fp32 reduction at W = 2 with enough rows,
else 1, see ``plan_parts``; all on the caller's stream unless noted):
    for each part h, for each step s = 1 .. W - 1:
        GEMM   rows h of block (r + s) % W -> P_r[(r + s) % W]   P_r: this rank's symmetric buffer [W, rows, N]
        barrier                                     every rank has finished step s: P_{r-s}[r] rows h are written
        side stream: R[., h] <- P_{r-s}[r] rows h   pull (copy engine) while the next step's GEMM runs
    for each part h, after its pull:
        fused (H = 2, no bias here): GEMM rows h of block r, epilogue + R[h] -> out rows h   (the sum is fused)
        otherwise:                   GEMM rows h of block r -> own; then one pass out = own + sum R (cast once)

So the pull of part 0 overlaps part 1's peer GEMMs and the pull of part 1 overlaps part 0's own GEMM; with the fused
epilogue nothing but the last own GEMM follows the last pull. Measured (2 x H200, docs/distributed.md): fusing pays
for fp32 partials (M = 8192: 826 vs 881 µs), whose separate sum pass moves 10 bytes per output, and loses for bf16
(813 vs 774 µs): the epilogue gathers c element by element and the parts halve the GEMMs, which costs more than
the 6-byte pass it saves. The bias rank (0) takes the unfused form (its int32
bias enters as an fp32 rank-1 update after its own GEMM, chunk_gemm.py); the barriers are the same on every rank.

P_r alternates between two halves of the symmetric buffer on successive calls: call i + 2 rewrites the half that
peers pulled in call i, and it runs after this rank's first barrier of call i + 1, which no rank passes before it
has joined its pulls of call i. (Every rank calls the op the same number of times, so the halves agree.) Needs CUDA
tensors, an NCCL group and torch's symmetric memory (``torch.distributed._symmetric_memory``, a private torch API:
``available()`` says whether it imports). CUDA-graph capturable.
"""

from __future__ import annotations

import functools

import torch

from . import scratch

_side_streams: dict = {}
_symmetric: dict = {}  # (group name, device) -> [symmetric byte tensor, its rendezvous handle, calls so far]


@functools.lru_cache(maxsize=None)
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
    scratch.release()
    _symmetric.clear()


MIN_PART_ROWS = 512  # parts of fewer rows cost more in launches and barriers than the overlap gains


def plan_parts(rows: int, world: int, reduce_dtype) -> list[tuple[int, int]]:
    """[r0, r1) row ranges of the parts; boundaries on multiples of 128 rows (GEMM tiles, aligned scale slices).
    Two parts (and the fused sum) only for fp32 partials at W = 2: see the module docstring. Depends only on values
    every rank shares, so all ranks issue the same barriers."""
    if world != 2 or reduce_dtype != torch.float32 or rows < 2 * MIN_PART_ROWS:
        return [(0, rows)]
    mid = (rows // 2 + 127) // 128 * 128
    return [(0, mid), (mid, rows)]


# "pull": the peer blocks are computed into this rank's own symmetric buffer and peers pull them by copy engine (the
# schedule in the module docstring). "push": the peer-block GEMMs store their output straight into the peers'
# buffers over NVLink (the epilogue's TMA stores write peer memory), so the transfer runs inside the GEMM and no copy
# follows; one barrier, then the own block (fused with c at W = 2 without bias, else a sum pass). Measured side by
# side in benchmarks/experiments/rs_push.py (docs/distributed.md, session 4).
MODE = "pull"


def run(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world: int, rank: int,
        mode: str | None = None) -> None:
    rows, n = x1.shape[0] // world, x2.shape[1]
    device = x1.device
    a_blocks = x1.unflatten(0, (world, rows))
    s_blocks = scale_x1.unflatten(0, (world, rows))
    elem = reduce_dtype.itemsize
    handle, offset_bytes = _symmetric_handle(group, device, world * rows * n * elem)
    offset = offset_bytes // elem  # get_buffer's offset counts elements of the view's dtype
    mine = handle.get_buffer(rank, (world, rows, n), reduce_dtype, offset)
    peers = [(rank + s) % world for s in range(1, world)]
    theirs = {w: handle.get_buffer(w, (world, rows, n), reduce_dtype, offset)[rank] for w in peers}
    if (MODE if mode is None else mode) == "push":
        _run_push(a_blocks, x2, s_blocks, scale_x2, bias, out, reduce_dtype, gemm, handle, mine, theirs, rank)
        return
    parts = plan_parts(rows, world, reduce_dtype)
    fused = len(parts) > 1 and bias is None

    caller = torch.cuda.current_stream(device)
    side = _side_stream(device)
    recv = scratch.buffer(device, reduce_dtype, "p2p_recv", (world - 1) * rows * n).view(world - 1, rows, n)
    pulled = []
    barriers = 0
    for r0, r1 in parts:
        # Step s computes peer (rank + s)'s block, so after the step's barrier the block of this rank that peer
        # (rank - s) computed in the same step is ready: pull it while the next step's GEMM runs.
        for s, w in enumerate(peers, start=1):
            gemm(a_blocks[w:w + 1, r0:r1], x2, s_blocks[w:w + 1, r0:r1], scale_x2, bias, mine[w:w + 1, r0:r1])
            handle.barrier(channel=barriers % 2)
            barriers += 1
            src = (rank - s) % world
            side.wait_stream(caller)
            with torch.cuda.stream(side):
                recv[peers.index(src), r0:r1].copy_(theirs[src][r0:r1])
        pulled.append(side.record_event())
    own = None if fused else scratch.buffer(device, reduce_dtype, "p2p_own", rows * n).view(1, rows, n)
    for (r0, r1), event in zip(parts, pulled):
        mine_rows = (a_blocks[rank:rank + 1, r0:r1], x2, s_blocks[rank:rank + 1, r0:r1], scale_x2, bias)
        if fused:
            caller.wait_event(event)
            gemm(*mine_rows, out[None, r0:r1], c=recv[:, r0:r1])
        else:
            gemm(*mine_rows, own[:, r0:r1])
    if not fused:
        caller.wait_stream(side)
        # One pass: the sum runs in the reduce dtype and is cast once on the store into `out`.
        torch.add(own[0], recv[0] if world == 2 else recv.sum(0), out=out)


def _run_push(a_blocks, x2, s_blocks, scale_x2, bias, out, reduce_dtype, gemm, handle, mine, theirs, rank) -> None:
    """The push schedule (``MODE``): peer w's block goes straight into slot ``rank`` of w's buffer; after the one
    barrier, slot w of this rank's buffer holds w's partial of this rank's block."""
    world = mine.shape[0]
    peers = sorted(theirs)
    for w in peers:
        gemm(a_blocks[w:w + 1], x2, s_blocks[w:w + 1], scale_x2, bias, theirs[w][None])
    handle.barrier(channel=0)
    own = (a_blocks[rank:rank + 1], x2, s_blocks[rank:rank + 1], scale_x2, bias)
    if world == 2 and bias is None:
        gemm(*own, out[None], c=mine[peers[0]][None])  # the sum fused into the epilogue
        return
    own_buf = scratch.buffer(out.device, reduce_dtype, "p2p_own", out.numel()).view(1, *out.shape)
    gemm(*own, own_buf)
    received = mine[peers[0]] if world == 2 else mine[peers].sum(0)
    torch.add(own_buf[0], received, out=out)
