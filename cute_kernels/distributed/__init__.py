"""Matmul + collective ops over torch.distributed.

``quantized_matmul_reduce_scatter`` is the row-parallel int8 linear (K-sharded weights, reduce-scatter over the rows);
see docs/distributed.md for the decomposition, the bias rule and the measured overlap.
"""

from . import p2p_transport
from .chunk_gemm import Int8ScaledMmChunkGemm, ReferenceChunkGemm, TorchIntMmChunkGemm
from .chunking import ChunkPlan, auto_num_chunks, plan_chunks
from .matmul_reduce_scatter import quantized_matmul_reduce_scatter, release_workspaces

__all__ = [
    "quantized_matmul_reduce_scatter",
    "release_workspaces",
    "p2p_transport",
    "ChunkPlan",
    "auto_num_chunks",
    "plan_chunks",
    "ReferenceChunkGemm",
    "Int8ScaledMmChunkGemm",
    "TorchIntMmChunkGemm",
]
