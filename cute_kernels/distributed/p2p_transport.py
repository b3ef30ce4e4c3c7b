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
        fused (H = 2):               GEMM rows h of block r, epilogue + R[h] -> out rows h   (the sum is fused)
        otherwise:                   GEMM rows h of block r -> own; then one pass out = own + sum R (cast once)

So the pull of part 0 overlaps part 1's peer GEMMs and the pull of part 1 overlaps part 0's own GEMM; with the fused
epilogue nothing but the last own GEMM follows the last pull. Measured (2 x H200, docs/distributed.md): fusing pays
for fp32 partials (M = 8192: 826 vs 881 µs), whose separate sum pass moves 10 bytes per output, and loses for bf16
(813 vs 774 µs): the epilogue gathers c element by element and the parts halve the GEMMs, which costs more than
the 6-byte pass it saves. The bias rank (0) takes the fused form too where its GEMM adds the int32 bias in the same
epilogue (``gemm.fuses_bias``, chunk_gemm.py; since session 11), else the unfused one; the barriers are the same on
every rank.

P_r alternates between two halves of the symmetric buffer on successive calls: call i + 2 rewrites the half that
peers pulled in call i, and it runs after this rank's first barrier of call i + 1, which no rank passes before it
has joined its pulls of call i. (Every rank calls the op the same number of times, so the halves agree.) Needs CUDA
tensors, an NCCL group and torch's symmetric memory (``torch.distributed._symmetric_memory``, a private torch API:
``available()`` says whether it imports).

CUDA graphs. The op is capturable (every rank captures it together). A replayed graph reuses the one half it
captured, so a captured call starts with one more barrier: no rank's GEMMs overwrite its half before every rank has
finished the previous call, pulls included.

Host cost. Called eagerly, the op is bound by its host side when each call issues its work slower than the GPU runs
it (M = 2048 on 2 x H200: ~200 µs of GPU work, 212 µs of host work per bf16 call before session 9, and the two
ranks' host delays add up through the barriers). Everything that depends on shapes only - parts, output views
into both halves of the symmetric buffer, the pulls as address triples, scratch views, events - is built once per
problem and calling stream (``_PullPlan``), and the side stream is driven by driver calls (``streams.RawEvent``,
``memcpy_async``; ~1 µs each, against 3-15 µs for torch's stream context, ``wait_stream`` and ``copy_``).
"""

from __future__ import annotations

import functools

import torch

from ..streams import RawEvent, current_stream_id, memcpy_async
from . import scratch
from .chunk_gemm import run_block

_side_streams: dict = {}
_symmetric: dict = {}  # (group name, device) -> _Symmetric
MAX_PLANS = 16  # cached call plans per symmetric buffer (one per problem shape and calling stream in use)


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


class _Symmetric:
    """A group's symmetric buffer (two halves), its rendezvous handle, the calls so far and the call plans built
    on it (dropped with it when it grows)."""

    def __init__(self, tensor, handle):
        self.tensor, self.handle, self.calls, self.plans = tensor, handle, 0, {}

    def next_half(self) -> int:
        half = self.calls % 2
        self.calls += 1
        return half


def _symmetric_entry(group, device, nbytes: int) -> _Symmetric:
    """This group's symmetric buffer, two halves of at least ``nbytes``. Growing it is a rendezvous (collective):
    every rank grows at the same call, because the size derives from values the ranks share (M, N, W, dtype)."""
    from torch.distributed import _symmetric_memory as symm_mem

    key = (group.group_name, str(device))
    entry = _symmetric.get(key)
    if entry is None or entry.tensor.numel() < 2 * nbytes:
        if torch.cuda.is_current_stream_capturing():
            # Growing means allocating and mapping new memory and a rendezvous with the peers: host work that a
            # graph replay would not repeat.
            raise RuntimeError(
                f"quantized_matmul_reduce_scatter: this capture needs a larger symmetric buffer ({2 * nbytes} bytes; "
                f"{0 if entry is None else entry.tensor.numel()} mapped): call the op once outside the capture with "
                "the largest M (and reduce dtype) you will capture, then capture")
        if entry is not None:
            torch.cuda.synchronize(device)  # peers may still read the old buffer; the new rendezvous syncs ranks
        tensor = symm_mem.empty(2 * nbytes, dtype=torch.uint8, device=device)
        entry = _symmetric[key] = _Symmetric(tensor, symm_mem.rendezvous(tensor, group))
    return entry


def _symmetric_handle(group, device, nbytes: int):
    """(handle, byte offset of the half this call uses); the push schedule's entry point."""
    entry = _symmetric_entry(group, device, nbytes)
    return entry.handle, entry.next_half() * (entry.tensor.numel() // 2)


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
# side in rs_push.py (docs/distributed.md, session 4; in the data archive's session34/moved/ since session 34).
MODE = "pull"


class _PullPlan:
    """Everything about a pull-schedule call that depends on shapes only, built on the first call of a problem on a
    stream and reused: the row parts, this rank's GEMM outputs in each half of the symmetric buffer, the pulls as
    (destination, source, bytes) address triples, the receive / own-block scratch views and the events that order
    the side stream. A call then costs its launches plus a few µs of Python (``run``)."""

    def __init__(self, sym: _Symmetric, device, rows: int, n: int, reduce_dtype, world: int, rank: int, recv,
                 own):
        """``own`` is None where the sum is fused into the own-block GEMMs (no own-block buffer)."""
        self.parts = plan_parts(rows, world, reduce_dtype)
        self.peers = [(rank + s) % world for s in range(1, world)]
        elem = reduce_dtype.itemsize
        half_bytes = sym.tensor.numel() // 2
        self.buffers = (recv.data_ptr(), None if own is None else own.data_ptr())
        self.recv = recv.view(world - 1, rows, n)
        self.recv_parts = [self.recv[0, r0:r1] for r0, r1 in self.parts]  # the fused epilogue's c (W = 2)
        self.own = None if own is None else own.view(rows, n)
        self.own_parts = [None if own is None else self.own[r0:r1] for r0, r1 in self.parts]
        self.peer_out, self.pulls = [], []
        for half in (0, 1):
            offset = half * half_bytes // elem  # get_buffer counts its offset in elements of the view's dtype
            mine = sym.handle.get_buffer(rank, (world, rows, n), reduce_dtype, offset)
            theirs = {w: sym.handle.get_buffer(w, (world, rows, n), reduce_dtype, offset)[rank] for w in self.peers}
            # Step s computes peer (rank + s)'s block; after the step's barrier the block of this rank that peer
            # (rank - s) computed in the same step is ready to pull.
            self.peer_out.append([[mine[w, r0:r1] for w in self.peers] for r0, r1 in self.parts])
            self.pulls.append([[(self.recv[self.peers.index((rank - s) % world), r0:r1].data_ptr(),
                                 theirs[(rank - s) % world][r0:r1].data_ptr(), (r1 - r0) * n * elem)
                                for s in range(1, world)] for r0, r1 in self.parts])
        self.side = _side_stream(device).cuda_stream
        self.ready = RawEvent(device)
        self.done = [RawEvent(device) for _ in self.parts]


def run(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world: int, rank: int,
        mode: str | None = None) -> None:
    device = x1.device
    if device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the driver calls act in the current device's context
            return run(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world, rank, mode)
    if (MODE if mode is None else mode) == "push":
        _run_push(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world, rank)
        return
    rows, n = x1.shape[0] // world, x2.shape[1]
    sym = _symmetric_entry(group, device, world * rows * n * reduce_dtype.itemsize)
    half = sym.next_half()
    caller = current_stream_id(device)
    fused = (world == 2 and (bias is None or getattr(gemm, "fuses_bias", False))
             and len(plan_parts(rows, world, reduce_dtype)) > 1)
    # The scratch buffers are shared by every problem on this stream and grow with the largest: a plan built on a
    # buffer that has since been replaced would keep it alive (one stale buffer per plan), so such plans are rebuilt.
    recv = scratch.buffer(device, reduce_dtype, "p2p_recv", (world - 1) * rows * n)
    own = None if fused else scratch.buffer(device, reduce_dtype, "p2p_own", rows * n)
    key = (caller, rows, n, reduce_dtype, fused)
    plan = sym.plans.get(key)
    if plan is None or plan.buffers != (recv.data_ptr(), None if own is None else own.data_ptr()):
        kept_own = own if own is not None else scratch.current(device, reduce_dtype, "p2p_own")
        current = (recv.data_ptr(), None if kept_own is None else kept_own.data_ptr())
        for k in [k for k, p in sym.plans.items() if k[0] == caller and k[3] == reduce_dtype
                  and (p.buffers[0] != current[0] or p.buffers[1] not in (None, current[1]))]:
            del sym.plans[k]  # built on a replaced buffer
        if len(sym.plans) >= MAX_PLANS:
            sym.plans.clear()
        plan = sym.plans[key] = _PullPlan(sym, device, rows, n, reduce_dtype, world, rank, recv, own)

    barriers = 0
    if torch.cuda.is_current_stream_capturing():
        # A replay reuses the half it captured: no GEMM may overwrite it before every rank has finished its previous
        # call, pulls included (module docstring). A barrier costs 3-5 µs per replay at M = 2048 on 2 x H200; a
        # one-way signal from each puller, waited for at the end of the call, measured 4-10 µs (session 9).
        sym.handle.barrier(channel=0)
        barriers = 1
    for p, (r0, r1) in enumerate(plan.parts):
        for s, w in enumerate(plan.peers):
            a0 = w * rows + r0
            run_block(gemm, x1[a0:a0 + r1 - r0], x2, scale_x1[a0:a0 + r1 - r0], scale_x2, bias,
                      plan.peer_out[half][p][s])
            sym.handle.barrier(channel=barriers % 2)
            barriers += 1
            plan.ready.record(caller)
            plan.ready.wait(plan.side)
            memcpy_async(*plan.pulls[half][p][s], plan.side)
        plan.done[p].record(plan.side)
    for p, (r0, r1) in enumerate(plan.parts):
        a0 = rank * rows + r0
        a, a_scale = x1[a0:a0 + r1 - r0], scale_x1[a0:a0 + r1 - r0]
        if fused:
            plan.done[p].wait(caller)
            run_block(gemm, a, x2, a_scale, scale_x2, bias, out[r0:r1], c=plan.recv_parts[p])
        else:
            run_block(gemm, a, x2, a_scale, scale_x2, bias, plan.own_parts[p])
    if not fused:
        for event in plan.done:
            event.wait(caller)
        # One pass: the sum runs in the reduce dtype and is cast once on the store into `out`.
        torch.add(plan.own, plan.recv[0] if world == 2 else plan.recv.sum(0), out=out)


def _run_push(x1, x2, scale_x1, scale_x2, bias, out, reduce_dtype, gemm, group, world, rank) -> None:
    """The push schedule (``MODE``): peer w's block goes straight into slot ``rank`` of w's buffer; after the one
    barrier, slot w of this rank's buffer holds w's partial of this rank's block."""
    rows, n = x1.shape[0] // world, x2.shape[1]
    a_blocks, s_blocks = x1.unflatten(0, (world, rows)), scale_x1.unflatten(0, (world, rows))
    elem = reduce_dtype.itemsize
    handle, offset_bytes = _symmetric_handle(group, x1.device, world * rows * n * elem)
    mine = handle.get_buffer(rank, (world, rows, n), reduce_dtype, offset_bytes // elem)
    theirs = {w: handle.get_buffer(w, (world, rows, n), reduce_dtype, offset_bytes // elem)[rank]
              for w in range(world) if w != rank}
    peers = sorted(theirs)
    if torch.cuda.is_current_stream_capturing():
        handle.barrier(channel=1)  # as in ``run``: a replay reuses its half, so wait for the previous replay first
    for w in peers:
        gemm(a_blocks[w:w + 1], x2, s_blocks[w:w + 1], scale_x2, bias, theirs[w][None])
    handle.barrier(channel=0)
    own = (a_blocks[rank:rank + 1], x2, s_blocks[rank:rank + 1], scale_x2, bias)
    if world == 2 and (bias is None or getattr(gemm, "fuses_bias", False)):
        gemm(*own, out[None], c=mine[peers[0]][None])  # the sum fused into the epilogue
        return
    own_buf = scratch.buffer(out.device, reduce_dtype, "p2p_own", out.numel()).view(1, *out.shape)
    gemm(*own, own_buf)
    # Peer slots by views, not by indexing with a list: that builds a CPU index tensor and copies it to the GPU,
    # which a CUDA-graph capture refuses (found at W = 4 in session 10).
    received = mine[peers[0]] if world == 2 else torch.stack([mine[w] for w in peers]).sum(0)
    torch.add(own_buf[0], received, out=out)
