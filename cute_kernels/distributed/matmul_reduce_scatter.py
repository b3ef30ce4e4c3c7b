"""quantized_matmul_reduce_scatter: the row-parallel (K-sharded) int8 linear of tensor parallelism.

What it computes, on each of the W ranks of ``group`` (r = this process's rank in the group, Mr = M / W):
    out_r = rows [r*Mr, (r+1)*Mr) of  sum_w (x1_w @ x2_w) * scale_x1_w[:, None] * scale_x2_w[None, :]
                                      + bias * scale_x1_0[:, None] * scale_x2_0[None, :]
where x1_w is rank w's int8 [M, K_w] slice of the activations, x2_w its int8 [K_w, N] weight shard and the scales are
that rank's per-token [M] and per-channel [N] float32 scales. K_w may differ between ranks; M, N and the flags may
not (checked, see rank_agreement).

The bias rule. The seed computes (acc + bias) * s1 * s2 on every rank, which adds a replicated bias W times. Here the
int32 bias [N] belongs to the group's rank 0: that rank computes (acc_0 + bias) * s1_0 * s2_0, the others acc_w * s1_w
* s2_w, so the sum holds the bias exactly once, scaled by rank 0's scales (the seed's formula on one rank). Every rank
passes the same bias or every rank passes None (a replicated layer bias, as tensor-parallel linears keep it); ranks
other than 0 never read theirs.

Decomposition and overlap. The output rows of every rank are cut into chunks (chunking.py). For chunk c the W row
blocks of x1 form one GEMM batched over W whose output [W, rows, N] is directly the input of a reduce-scatter; its
dequantizing epilogue writes partials in ``reduce_dtype``. The pipeline, all issued from the host without waiting:

    compute stream:   GEMM 0 | GEMM 1 | wait RS 0, cast 0 | GEMM 2 | wait RS 1, cast 1 | ...
    comm stream:               RS 0      |         RS 1            |          RS 2 ...

On CUDA the comm stream is the NCCL process group's internal stream: ``async_op=True`` makes it wait for the GEMM
that produced the chunk, and ``work.wait()`` makes the compute stream wait for the reduce-scatter, so the host never
blocks. Two partial buffers are reused in turn: GEMM c writes the one RS c-2 read, and the compute stream has waited
for RS c-2 just before. With ``reduce_dtype`` fp32 each reduced chunk is cast into the output on the compute stream;
with ``reduce_dtype == out_dtype`` the reduce-scatter writes the output rows directly. On CPU tensors (a gloo group)
the same loop runs with the float64 reference GEMM; gloo runs the collective on its own thread, so it overlaps there
too. ``chunks=1`` is the sequential path: one GEMM, one reduce-scatter.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist

from .. import checks
from .chunk_gemm import Int8ScaledMmChunkGemm, ReferenceChunkGemm
from . import p2p_transport, scratch
from .chunking import auto_num_chunks, plan_chunks
from .rank_agreement import agree_across_ranks, dtype_code, metadata_group, reduce_scatter_single

OUT_DTYPES = (torch.bfloat16, torch.float16)
# transport="auto" picks p2p from this many outputs (M x N, all ranks' rows) on, and always inside CUDA graph
# capture. Measured on 2 x H200 (N = K = 8192 per rank, docs/distributed.md): under CUDA graphs p2p ties the NCCL
# path at M = 32 (56 vs 55 µs bf16) and wins from M = 64 (1.04-1.36x bf16, 1.12-1.69x fp32 up to M = 8192). Called
# eagerly, p2p wins at every M measured (32-8192) since session 9's lean host path (94-195 µs of host time per call,
# was 179-353): bf16 188-197 vs 300-325 µs at M = 32-64, 116 vs 161 at M = 1024. Before it, the NCCL path's fewer
# launches won eagerly up to M = 1024. The threshold sits at M = 64 (N = 8192), where both measurements agree.
P2P_MIN_OUTPUTS = 64 * 8192
# W = 3-4 (session 10, 4 x H200, session 9's host path): p2p won eagerly at every M measured, 256-8192 (fp32 287 vs
# 457 µs at M = 256, 287 vs 418 at 2048; bf16 304 vs 312 at 256, 259 vs 318 at 2048), and under graphs by 1.10-1.59x;
# the threshold sits at the smallest M measured. W = 3 was not measured; it gets W = 4's.
P2P_MIN_OUTPUTS_UP_TO_4 = 256 * 8192
# W > 4 keeps the session-6 rule, measured with the old host path and not re-measured since (no 8-GPU machine was
# lent): the p2p path's host work grows with the W - 1 pull steps, so the threshold scales with W / 2; at W = 8 the
# p2p call took 1296-1331 µs of host time at M = 2048 / 4096 against 560-813 µs for the NCCL path, and won from
# M = 8192 (fp32 973 vs 1518 µs; 8 x H200).
P2P_MIN_OUTPUTS_PER_HALF_WORLD = 2048 * 8192

# Two chunks in flight: one being reduce-scattered while the next is computed. A third buffer would only absorb
# jitter between ranks, at the price of another W x rows x N partial.
PIPELINE_DEPTH = 2
BIAS_RANK = 0


# Eager calls run the cross-rank check on the device (all-gather, then a host read that waits for the GPU work queued
# before it); CUDA-graph captures run it over the group's gloo mirror. True: eager calls use the mirror too, whose
# host time can hide behind queued GPU work. Two runs on 2 x H200 (session 11, rs_validate_cost.py, now in the data
# archive's session34/moved/; N = K = 8192, µs added per call, device / gloo): M = 512 +269 / +570 and +109 / +419;
# M = 2048 +267 / +406 and +118 / +85; M = 8192 +388 / +32 and +227 / +59. The mirror wins only for large M, and a
# choice by size could differ between ranks whose shapes disagree - the case the check is for - so it is all or
# nothing: off.
EAGER_CHECK_OVER_GLOO = False


def p2p_min_outputs(world: int) -> int:
    """Outputs (M x N) from which an eager ``transport="auto"`` call takes the p2p path at world size ``world``."""
    if world <= 2:
        return P2P_MIN_OUTPUTS
    if world <= 4:
        return P2P_MIN_OUTPUTS_UP_TO_4
    return P2P_MIN_OUTPUTS_PER_HALF_WORLD * (world // 2)


_default_gemms: dict[str, object] = {}


def default_chunk_gemm(device_type: str):
    """The float64 reference GEMM for CPU tensors, the library's int8 GEMM for CUDA tensors (built once)."""
    if device_type not in _default_gemms:
        _default_gemms[device_type] = Int8ScaledMmChunkGemm() if device_type == "cuda" else ReferenceChunkGemm()
    return _default_gemms[device_type]


def quantized_matmul_reduce_scatter(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale_x1: torch.Tensor,
    scale_x2: torch.Tensor,
    bias: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    reduce_dtype: torch.dtype = torch.float32,
    *,
    chunks: int | None = None,
    out: torch.Tensor | None = None,
    gemm=None,
    validate_across_ranks: bool = True,
    transport: str = "auto",
) -> torch.Tensor:
    """Row-parallel int8 linear: int8 GEMM on this rank's K shard, summed over the group, rows scattered by rank.

    Args:
        x1: int8 [M, K_r], K-contiguous: this rank's K shard of the activations.
        x2: int8 [K_r, N]: this rank's weight shard. On CUDA column-major (x2 = w.t() of a row-major [N, K_r] weight).
        scale_x1: float32 [M], per-token scales of x1. scale_x2: float32 [N], per-channel scales of x2.
        bias: int32 [N] or None; added once, by the group's rank 0, before scaling (see the module docstring).
        group: the process group (default: the world). CPU tensors need a gloo group, CUDA tensors an NCCL one.
        out_dtype: bfloat16 or float16.
        reduce_dtype: float32 (default: partial sums keep fp32 precision whatever W is) or ``out_dtype`` (the seed's
            bf16 reduction: half the bytes on the wire, one rounding per rank in the sum).
        chunks: number of pipeline chunks; None picks one from M, N and W (1 below the small-M crossover); 1 is the
            sequential path. Must be the same on every rank.
        out: optional preallocated [M / W, N] output in ``out_dtype``, contiguous.
        gemm: the chunk GEMM (chunk_gemm.py contract); default: the float64 reference on CPU, ``int8_scaled_mm``
            on CUDA.
        validate_across_ranks: gather every rank's shapes and check results before the first data collective, so
            disagreeing or rejected inputs raise on every rank instead of hanging: one small all-gather per call,
            on the device with a host sync for eager calls; inside a CUDA-graph capture over a gloo mirror of
            ``group`` (replays carry no check).
        transport: "nccl" (the chunked reduce-scatter pipeline), "p2p" (CUDA only: peer pulls over torch's
            symmetric memory by copy engine, see p2p_transport.py; ``chunks`` does not apply) or "auto" (default:
            "p2p" for CUDA tensors when ``chunks`` is None, torch's symmetric memory imports and either M x N >=
            ``p2p_min_outputs(W)`` or a CUDA graph is being captured; else "nccl").
            Must resolve the same on every rank (checked with the other shared values).

    Returns:
        [M / W, N] in ``out_dtype``: this rank's rows of the reduced result.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("quantized_matmul_reduce_scatter needs torch.distributed: call init_process_group first")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this process is not a member of `group`; call the op only on the group's ranks")

    local_error = None
    try:
        x1, x2, scale_x1, scale_x2, bias, out = _check_local(
            x1, x2, scale_x1, scale_x2, bias, out, out_dtype, reduce_dtype, chunks, world, transport)
        if gemm is None:
            gemm = default_chunk_gemm(x1.device.type)
        gemm.check(x1, x2)
    except (TypeError, ValueError, ImportError) as error:
        local_error = error

    use_p2p = local_error is None and (transport == "p2p" or (
        transport == "auto" and chunks is None and x1.device.type == "cuda" and p2p_transport.available()
        and (x1.shape[0] * x2.shape[1] >= p2p_min_outputs(world) or torch.cuda.is_current_stream_capturing())))
    if validate_across_ranks:
        # While a CUDA graph is captured the device's table cannot be read back: the exchange moves to a gloo
        # mirror of the group (host work at capture time only; see EAGER_CHECK_OVER_GLOO for eager calls).
        meta_group, meta_device = group, _metadata_device(x1, group)
        if meta_device.type == "cuda" and (EAGER_CHECK_OVER_GLOO or torch.cuda.is_current_stream_capturing()):
            meta_group, meta_device = metadata_group(group, meta_device)
            if meta_device.type == "cuda":
                raise RuntimeError("validate_across_ranks=True needs a gloo group for its check while a CUDA graph "
                                   "is captured (none could be created here); pass validate_across_ranks=False")
        agree_across_ranks(meta_group, meta_device, local_error, {
            "M (x1.shape[0])": _dim(x1, 0),
            "N (x2.shape[1])": _dim(x2, 1),
            "has bias": -1 if not (bias is None or isinstance(bias, torch.Tensor)) else int(bias is not None),
            "out_dtype": dtype_code(out_dtype),
            "reduce_dtype": dtype_code(reduce_dtype),
            "chunks (0 = auto)": chunks if isinstance(chunks, int) else 0,
            "transport (1 = p2p)": int(use_p2p),
            "device type (0 = cpu)": -1 if not isinstance(x1, torch.Tensor) else int(x1.device.type != "cpu"),
        })
    elif local_error is not None:
        raise local_error

    rows_per_rank = x1.shape[0] // world
    if out is None:
        out = torch.empty(rows_per_rank, x2.shape[1], dtype=out_dtype, device=x1.device)
    if rows_per_rank == 0 or x2.shape[1] == 0:
        return out
    if use_p2p:
        p2p_transport.run(x1, x2, scale_x1, scale_x2, bias if rank == BIAS_RANK else None, out, reduce_dtype, gemm,
                          group or dist.group.WORLD, world, rank)
        return out
    if chunks is None:
        chunks = auto_num_chunks(rows_per_rank, x2.shape[1], world, gemm.row_align)
    plan = plan_chunks(rows_per_rank, chunks, gemm.row_align)
    _run_pipeline(x1, x2, scale_x1, scale_x2, bias if rank == BIAS_RANK else None, out, plan, reduce_dtype, gemm,
                  group, world)
    return out


def _run_pipeline(x1, x2, scale_x1, scale_x2, bias, out, plan, reduce_dtype, gemm, group, world) -> None:
    rows_per_rank, n = plan.rows_per_rank, x2.shape[1]
    a_blocks = x1.unflatten(0, (world, rows_per_rank))  # [W, Mr, K]: block w holds the rows rank w keeps
    scale_blocks = scale_x1.unflatten(0, (world, rows_per_rank))
    depth = min(PIPELINE_DEPTH, plan.num_chunks)
    # An fp32 reduction lands in staging buffers and is cast into `out`; a reduction in out's dtype lands in `out`.
    staged = reduce_dtype != out.dtype
    partials = [scratch.buffer(x1.device, reduce_dtype, f"partial{i}", world * plan.max_rows * n)
                for i in range(depth)]
    reduced = [scratch.buffer(x1.device, reduce_dtype, f"staging{i}", plan.max_rows * n)
               for i in range(depth if staged else 0)]

    in_flight = deque()
    for c, (r0, r1) in enumerate(plan.bounds):
        if len(in_flight) == depth:
            _finish(in_flight.popleft(), out)
        rows, slot = r1 - r0, c % depth
        partial = partials[slot][: world * rows * n].view(world, rows, n)
        gemm(a_blocks[:, r0:r1], x2, scale_blocks[:, r0:r1], scale_x2, bias, partial)
        dest = reduced[slot][: rows * n].view(rows, n) if staged else out[r0:r1]
        work = reduce_scatter_single(dest, partial.view(world * rows, n), group=group, async_op=True)
        in_flight.append((work, dest, r0, r1))
    while in_flight:
        _finish(in_flight.popleft(), out)


def release_workspaces() -> None:
    """Free the scratch buffers the op keeps between calls (they are re-created on the next call)."""
    scratch.release()


def _finish(chunk, out) -> None:
    work, dest, r0, r1 = chunk
    work.wait()
    if dest.dtype != out.dtype:
        out[r0:r1].copy_(dest)


def _check_local(x1, x2, scale_x1, scale_x2, bias, out, out_dtype, reduce_dtype, chunks, world, transport):
    x1 = checks.check_tensor("x1", x1)
    x2 = checks.check_tensor("x2", x2)
    scale_x1 = checks.check_tensor("scale_x1", scale_x1)
    scale_x2 = checks.check_tensor("scale_x2", scale_x2)
    for name, t in (("x1", x1), ("x2", x2)):
        checks.check_dtype(name, t, (torch.int8,))
        checks.check_ndim(name, t, (2,))
    checks.check_inner_contiguous("x1", x1)
    m, k = x1.shape
    n = x2.shape[1]
    checks.check_shape("x2", x2, (k, n), "x2.shape[0] must equal x1.shape[1], this rank's K shard")
    checks.check_dtype("scale_x1", scale_x1, (torch.float32,))
    checks.check_shape("scale_x1", scale_x1, (m,), "one scale per token, M = x1.shape[0]")
    checks.check_dtype("scale_x2", scale_x2, (torch.float32,))
    checks.check_shape("scale_x2", scale_x2, (n,), "one scale per output channel, N = x2.shape[1]")
    if bias is not None:
        bias = checks.check_tensor("bias", bias)
        checks.check_dtype("bias", bias, (torch.int32,))
        checks.check_shape("bias", bias, (n,), "one int32 bias per output channel")
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16 or float16; got {out_dtype}")
    if reduce_dtype not in (torch.float32, out_dtype):
        raise TypeError(f"reduce_dtype must be float32 or out_dtype ({out_dtype}); got {reduce_dtype}")
    if transport not in ("auto", "nccl", "p2p"):
        raise ValueError(f"transport must be 'auto', 'nccl' or 'p2p'; got {transport!r}")
    if transport == "p2p" and (x1.device.type != "cuda" or not p2p_transport.available()):
        raise ValueError("transport='p2p' needs CUDA tensors and torch.distributed._symmetric_memory")
    if chunks is not None and (not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1):
        raise ValueError(f"chunks must be None (automatic) or an int >= 1 (1 = no overlap); got {chunks!r}")
    if m % world != 0:
        raise ValueError(
            f"M = x1.shape[0] = {m} must be a multiple of the group size {world}: each rank keeps M / {world} rows "
            f"(pad x1 and scale_x1 to the next multiple, {-(-m // world) * world} rows, and drop the padding rows "
            f"from the last rank's output)")
    if out is not None:
        out = checks.check_tensor("out", out)
    tensors = {"x1": x1, "x2": x2, "scale_x1": scale_x1, "scale_x2": scale_x2, "bias": bias, "out": out}
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"all tensors must be on one device; got {where}")
    if out is not None:
        checks.check_dtype("out", out, (out_dtype,))
        checks.check_shape("out", out, (m // world, n), "M / group size rows, N columns")
        if not out.is_contiguous():
            raise ValueError(f"out must be contiguous; got strides {tuple(out.stride())}")
    # The chunk views slice scale_x1 per rank block; a contiguous copy is free when it already is one.
    return x1, x2, scale_x1.contiguous(), scale_x2.contiguous(), bias, out


def _dim(t, d: int) -> int:
    return t.shape[d] if isinstance(t, torch.Tensor) and t.dim() == 2 else -1


def _metadata_device(x1, group) -> torch.device:
    if isinstance(x1, torch.Tensor):
        return x1.device
    if "nccl" in str(dist.get_backend(group)) and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
