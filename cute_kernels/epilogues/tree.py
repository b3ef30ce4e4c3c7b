"""An epilogue tree: a root node plus the ordered list of global operands it reads."""

from __future__ import annotations

from .nodes import Accumulator, ColVector, Compute, EpilogueNode, Matrix, RowVector, Scalar


class EpilogueTree:
    def __init__(self, root: EpilogueNode):
        self.root = root
        names: list[str] = []
        for node in root.walk():
            for name in node.operands:
                if name not in names:
                    names.append(name)
        self.operand_names = tuple(names)

    @property
    def key(self) -> tuple:
        return self.root.key

    def visit(self, ctx):
        return self.root.visit(ctx)

    def fetch(self, ctx) -> dict:
        """The full-matrix operands' fragments for ``ctx``, loaded now: {operand name: values}. A kernel passes
        them back as ``ctx.fetched`` when it visits that fragment (software pipelining of the epilogue's loads)."""
        return {node.name: node.fetch(ctx) for node in self.root.walk() if isinstance(node, Matrix)}

    def __repr__(self):
        return f"EpilogueTree({self.key})"


def scaled_mm_tree(row_scale: str | None, col_scale: str | None, bias: bool, swap_ab: bool = False,
                   source: bool = False) -> EpilogueTree:
    """The dequantizing epilogue of a scaled GEMM: ``acc * a_scale * b_scale (+ bias) (+ c)``.

    row_scale: kind of the per-output-row scale ``a_scale`` ("vector" for [M], "scalar" for [1], None for absent);
    col_scale: same for the per-output-column ``b_scale``; bias: a per-column ``bias`` vector is added.
    swap_ab: the kernel computes the transposed problem (its m is the output's n), so the roles of the
    row and column broadcasts swap; the operand names stay the user's.
    source: a full [M, N] operand ``c`` is added last (the kernel passes it in its own coordinates).
    """
    row_node, col_node = (RowVector, ColVector) if swap_ab else (ColVector, RowVector)
    node: EpilogueNode = Accumulator()
    for name, kind, vec_node in (("a_scale", row_scale, row_node), ("b_scale", col_scale, col_node)):
        if kind is None:
            continue
        node = Compute("mul", node, Scalar(name) if kind == "scalar" else vec_node(name))
    if bias:
        node = Compute("add", node, col_node("bias"))
    if source:
        node = Compute("add", node, Matrix("c"))
    return EpilogueTree(node)
