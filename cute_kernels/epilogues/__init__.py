"""Epilogue visitor tree (EVT): composable, arch-neutral epilogue nodes shared by every kernel.

A kernel hands the tree an :class:`EpilogueContext` for each piece of accumulator it holds in registers (the
accumulator fragment plus the global (m, n) coordinate of each of its elements); ``tree.visit(ctx)`` returns the
epilogue's value for those elements as a Float32 TensorSSA, which the kernel converts and stores its own way (SM90:
registers -> smem -> TMA store; SM80: predicated stores). Nodes never know which arch or MMA produced the fragment.
"""

from .nodes import (
    Accumulator,
    ColVector,
    Compute,
    EpilogueContext,
    EpilogueNode,
    Matrix,
    RowGroupGuard,
    RowVector,
    Scalar,
    ScalarArgument,
    ZeroPointAccumulator,
)
from .tree import (BIAS_KINDS, ZERO_POINT_KINDS, EpilogueTree, bias_kind, present_operands, scaled_mm_tree,
                   zero_point_kind)

__all__ = [
    "Accumulator",
    "BIAS_KINDS",
    "bias_kind",
    "ColVector",
    "Compute",
    "EpilogueContext",
    "EpilogueNode",
    "EpilogueTree",
    "Matrix",
    "RowGroupGuard",
    "RowVector",
    "Scalar",
    "ScalarArgument",
    "present_operands",
    "scaled_mm_tree",
    "zero_point_kind",
    "ZERO_POINT_KINDS",
    "ZeroPointAccumulator",
]
