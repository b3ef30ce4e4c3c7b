"""How one matmul + reduce-scatter is cut into chunks that pipeline compute against communication.

Rank r of W keeps output rows [r*Mr, (r+1)*Mr), Mr = M / W. A chunk is one row range [r0, r1) of that per-rank
block, taken from all W blocks at once: the W row ranges [w*Mr + r0, w*Mr + r1) of the partial product. Computed as a
GEMM batched over w they land in one contiguous [W, r1 - r0, N] buffer, which is exactly the input layout of
``reduce_scatter_tensor`` (block w goes to rank w), so a chunk needs no gather or copy before it is sent.

The plan depends only on values every rank shares (M, N, W, the ``chunks`` argument, the GEMM's row alignment), never
on a rank's own K shard or device: ranks with unequal K shards still issue the same sequence of collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

# A chunk's GEMM is W x rows x N output elements in 128 x 256 tiles. Measured on 2 x H200 (NV18, N = K = 8192,
# 2026-11-22, docs/distributed.md): a chunked op only beat the sequential GEMM + reduce-scatter from M = 4096 on, and
# 2 chunks beat 4 and 8 at every M (the persistent GEMM holds every SM, so each extra chunk's NCCL kernel waits for a
# GEMM to drain). Hence: a chunk needs at least 512 tiles (about four waves on 132 SMs), and at most 2 chunks.
_TILE_ELEMS = 128 * 256
MIN_TILES_PER_CHUNK = 512
MAX_CHUNKS = 2


@dataclass(frozen=True)
class ChunkPlan:
    """Row ranges [start, stop) within each rank's output block; contiguous, in order, covering [0, rows_per_rank)."""

    rows_per_rank: int
    bounds: tuple[tuple[int, int], ...]

    @property
    def num_chunks(self) -> int:
        return len(self.bounds)

    @property
    def max_rows(self) -> int:
        return max(stop - start for start, stop in self.bounds)


def auto_num_chunks(rows_per_rank: int, n: int, world_size: int, row_align: int) -> int:
    """Chunk count the op uses when the caller passes ``chunks=None``; 1 means the sequential path."""
    min_rows = -(-MIN_TILES_PER_CHUNK * _TILE_ELEMS // (world_size * max(n, 1)))
    min_rows = -(-min_rows // row_align) * row_align
    if rows_per_rank < 2 * min_rows:
        return 1
    return min(MAX_CHUNKS, rows_per_rank // min_rows)


def plan_chunks(rows_per_rank: int, num_chunks: int, row_align: int = 1) -> ChunkPlan:
    """Split ``rows_per_rank`` rows into at most ``num_chunks`` ranges whose starts are multiples of ``row_align``.

    Every range but the last has the same length (a multiple of ``row_align``, so chunk boundaries fall on GEMM tile
    rows and 16-byte aligned addresses); the last takes the rest. Fewer ranges come back when the rows run out.
    """
    if num_chunks < 1:
        raise ValueError(f"chunks must be >= 1 (1 = no overlap); got {num_chunks}")
    if rows_per_rank == 0:
        return ChunkPlan(0, ((0, 0),))
    step = -(-rows_per_rank // num_chunks)
    step = -(-step // row_align) * row_align
    bounds = tuple((start, min(start + step, rows_per_rank)) for start in range(0, rows_per_rank, step))
    return ChunkPlan(rows_per_rank, bounds)
